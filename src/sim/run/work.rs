//! What a run did, counted rather than timed ([`Work`]): so that a hunt can
//! state its cost per event (`retrysim hunt --work`) and a change to the
//! stepping can be judged by what it no longer does.

use std::collections::BTreeMap;
use std::ops::AddAssign;
use std::sync::Mutex;

use crate::locks::lock;

/// What the stepping did in a run ([`Report::stepping`](crate::sim::run::runner::Report::stepping)): how the runner got
/// through virtual time, never what happened in it. A run stepped another
/// way ([`RunOptions::plain_ticks`](crate::sim::run::runner::RunOptions::plain_ticks), ...) has the same report otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepCounts {
    /// Ticks stepped over in longer steps (idle stretches skipped).
    pub skipped_ticks: u64,
    /// Host ticks left out of busy steps (idle hosts not ticked).
    pub lazy_ticks: u64,
    /// How many times the run went again with every host ticked, because a
    /// host owing ticks was woken through memory another host shares (then
    /// `lazy_ticks` are those of the run that was given up).
    pub lazy_replays: u64,
    /// What the stepping did, counted (both runs' when it went again).
    pub work: Work,
}

/// What a run did to get through its virtual time: never what happened in
/// it (two runs with the same report may count differently when stepped
/// differently). Part of [`StepCounts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Work {
    /// Simulations run: one, or two when the run went again with every
    /// host ticked ([`StepCounts::lazy_replays`](StepCounts::lazy_replays)).
    pub runs: u64,
    /// Steps of the simulation (a skip over an idle stretch is one).
    pub steps: u64,
    /// Times a host's runtime was polled (a host left out of a step is not).
    pub host_polls: u64,
    /// Messages the simulated network handed to a host.
    pub messages_delivered: u64,
    /// Requests that reached the API.
    pub requests: u64,
    /// Timers of the harness's clock that fired (sleeps that ran to their
    /// deadline, timeouts that elapsed).
    pub timer_wakes: u64,
}

impl AddAssign for Work {
    fn add_assign(&mut self, o: Work) {
        self.runs += o.runs;
        self.steps += o.steps;
        self.host_polls += o.host_polls;
        self.messages_delivered += o.messages_delivered;
        self.requests += o.requests;
        self.timer_wakes += o.timer_wakes;
    }
}

impl Work {
    /// One simulation's work: what turmoil counted, with `requests` and
    /// `timer_wakes` from the harness.
    pub(crate) fn of_sim(sim: &turmoil::Sim<'_>, requests: u64, timer_wakes: u64) -> Work {
        let w = sim.work();
        Work {
            runs: 1,
            steps: w.steps,
            host_polls: w.host_polls,
            messages_delivered: w.messages_delivered,
            requests,
            timer_wakes,
        }
    }
}

/// The work of many runs, by seed (what
/// [`RunOptions::count_work`](crate::sim::run::runner::RunOptions::count_work)
/// adds each finished run to; runs on several threads may share one).
#[derive(Debug, Default)]
pub(crate) struct WorkTally {
    by_seed: Mutex<BTreeMap<u64, Work>>,
}

impl WorkTally {
    /// Adds a run of `seed`.
    pub(crate) fn add(&self, seed: u64, work: &Work) {
        *lock(&self.by_seed).entry(seed).or_default() += *work;
    }

    /// The work so far, by seed.
    pub(crate) fn by_seed(&self) -> BTreeMap<u64, Work> {
        lock(&self.by_seed).clone()
    }
}
