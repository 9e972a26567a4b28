//! Steps the simulation, skipping virtual time in which nothing happens.
//!
//! turmoil advances by a fixed tick, and an idle tick costs as much as a few
//! microseconds with two hosts; a run that waits 80 s between attempts at a
//! 1 ms tick spends nearly all its time on ticks in which nothing happens.
//! Between steps, when every timer of every simulated task is visible (the
//! [`timers`](crate::sim::world::timers) registry, and a client that
//! declares [`sleeps_on_harness_clock`](crate::sim::run::subject::Subject::sleeps_on_harness_clock)),
//! `advance` moves with turmoil's `step_by` (patches/turmoil) straight to
//! the last tick boundary before anything can happen: before the earliest
//! timer deadline and the next message delivery, never past the next
//! scheduled fault or the time limit. Times stay tick-aligned, tasks run at
//! the same virtual times and in the same order (turmoil's `step_by` keeps
//! tokio's queue-choice counters as the skipped ticks would have left them),
//! so every report and trace is the same as with plain ticks; the test
//! `tests/it/speed.rs` runs both ways and compares.
//!
//! In a step in which something happens (a message in flight, a timer due)
//! on one host, the others need not be ticked: turmoil's `step_lazily`
//! (patches/turmoil) leaves out each host with no message deliverable to
//! it, no timer of its own due in the step ([`Timers::due_by`]) and no task
//! woken, and ticks it through the ticks it owes in one long idle tick
//! before it next has work. That is the same as ticking it every step
//! unless a task of another host wakes one of its tasks through memory
//! they share while it owes ticks: turmoil sees that (the woken host's
//! `LocalSet` is polled with a waker that records wakes), and the runner
//! then runs the whole simulation again with every host ticked every step
//! (the report counts it: [`StepCounts::lazy_replays`](crate::sim::run::runner::StepCounts::lazy_replays)). Steps that end at or past the next fault
//! tick every host, so a fault (a cancellation wakes tasks from outside)
//! meets no host owing ticks.

use std::cell::{Cell, OnceCell, RefCell};
use std::sync::Arc;
use std::time::Duration;

use crate::sim::run::fleet::{Hooks, fleet_hosts};
use crate::sim::run::scenario::Scenario;
use crate::sim::run::subject::{Host, MakeSubject, Subject};
use crate::sim::world::timers::Timers;

/// How a run steps, when a test asks for another way than the default (set
/// through [`RunOptions`](crate::sim::run::runner::RunOptions)). The
/// default skips idle stretches, and leaves idle hosts out of busy steps of
/// runs with [`LAZY_MIN_HOSTS`] hosts or more.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StepMode {
    /// Step every tick.
    pub(crate) plain_ticks: bool,
    /// Tick every host in every step that is stepped.
    pub(crate) eager_hosts: bool,
    /// Leave idle hosts out however few hosts a run has.
    pub(crate) lazy_always: bool,
}

/// The fewest hosts a run leaves idle hosts out of busy steps with. With the
/// API and one fleet host, a busy step is nearly always busy on both, and
/// watching the hosts' wakes costs more than the ticks it saves (about 15%
/// slower on `hunt --seeds 200` and `berlin-40-workers`).
pub const LAZY_MIN_HOSTS: usize = 3;

/// How a run steps.
pub(crate) struct Stepping {
    timers: Arc<Timers>,
    tick: Duration,
    time_limit: Duration,
    skip: bool,
    /// Whether a busy step may leave out idle hosts (`step_lazily`).
    lazy: bool,
    /// The `next_fault` of the previous step; `None` before the first.
    /// Software that starts (the first step) or restarts (a bounce) is
    /// ready without a timer, so the step after either is a plain tick.
    last_fault: RefCell<Option<Option<Duration>>>,
    /// Ticks stepped over in longer steps so far.
    skipped: Cell<u64>,
}

impl Stepping {
    /// Stepping for `s`, with the registry its simulated tasks sleep through.
    /// A hooked gate or budget is code the harness did not write: it may
    /// sleep on tokio's timer, so such a run is stepped tick by tick.
    /// `lazy`: whether a busy step may leave out idle hosts.
    pub(crate) fn new(s: &Scenario, timers: Arc<Timers>, hooks: Hooks, lazy: bool, mode: StepMode) -> Stepping {
        if hooks.gate.is_some() || hooks.budget.is_some() {
            timers.mark_unseen();
        }
        // Whole milliseconds: tokio's timers have millisecond resolution, so
        // a tick of whole milliseconds is one clock move per idle tick.
        let whole_ms = !s.net.tick.is_zero() && s.net.tick.as_nanos().is_multiple_of(1_000_000);
        let lazy = lazy && !mode.eager_hosts && (hosts(s) >= LAZY_MIN_HOSTS || mode.lazy_always);
        // By host: for `due`, and so that a finished client's timers stop
        // no skip (`Timers::earliest_running`).
        timers.keep_by_host();
        Stepping {
            timers,
            tick: s.net.tick,
            time_limit: s.time_limit,
            skip: whole_ms && !mode.plain_ticks,
            lazy,
            last_fault: RefCell::new(None),
            skipped: Cell::new(0),
        }
    }

    /// How many ticks the run has stepped over in longer steps so far.
    pub(crate) fn skipped_ticks(&self) -> u64 {
        self.skipped.get()
    }

    /// The next fault switch, or the time limit if that comes first: a step
    /// may end there, not beyond.
    fn until(&self, next_fault: Option<Duration>) -> Duration {
        next_fault.map_or(self.time_limit, |f| f.min(self.time_limit))
    }

    /// `make`, marking the registry unseen when a client it builds does not
    /// declare that it sleeps on the harness's clock.
    pub(crate) fn watch_clients(&self, make: Arc<dyn MakeSubject>) -> Arc<dyn MakeSubject> {
        Arc::new(Declared { inner: make, timers: self.timers.clone() })
    }
}

/// How many hosts a run of `s` has: the API's, the fleet's, the limiter
/// service's.
fn hosts(s: &Scenario) -> usize {
    1 + fleet_hosts(s).len() + usize::from(s.fleet.coordinator.is_some())
}

struct Declared {
    inner: Arc<dyn MakeSubject>,
    timers: Arc<Timers>,
}

impl MakeSubject for Declared {
    fn label(&self, s: &Scenario) -> String {
        self.inner.label(s)
    }

    fn make(&self, host: Host<'_>) -> Arc<dyn Subject> {
        let subject = self.inner.make(host);
        if !subject.sleeps_on_harness_clock() {
            self.timers.mark_unseen();
        }
        subject
    }
}

/// One step of the run: a plain tick, or, when nothing can happen before
/// it, a skip to the last tick boundary before the first thing that can
/// (and no later than `next_fault`, when the runner switches a fault, or the
/// time limit). Returns whether the clients are done and how many ticks
/// the step covered.
pub(crate) fn advance(
    sim: &mut turmoil::Sim<'_>,
    stepping: &Stepping,
    next_fault: Option<Duration>,
) -> turmoil::Result<(bool, u64)> {
    // A fault switched since the last step, or the first step: plain.
    let switched = stepping.last_fault.replace(Some(next_fault)) != Some(next_fault);
    let seen = stepping.skip && !switched && !stepping.timers.unseen();
    // A task woken through memory two hosts share (a host ticked later in
    // the step waking one ticked earlier) is ready now: no skipping past it
    // (a lazy step ticks such a host anyway).
    let ticks = if seen && !sim.any_host_woken() { idle_ticks(sim, stepping, next_fault) } else { 0 };
    if ticks < 2 {
        // A host may owe ticks only while no fault switches and the time
        // limit is ahead.
        if seen && stepping.lazy && sim.elapsed() + stepping.tick < stepping.until(next_fault) {
            let due = OnceCell::new();
            let due = |host, end| due.get_or_init(|| stepping.timers.due_by(end)).has(host);
            return sim.step_lazily(&due).map(|done| (done, 1));
        }
        return sim.step().map(|done| (done, 1));
    }
    let by = stepping.tick * u32::try_from(ticks).expect("idle_ticks is at most u32::MAX");
    stepping.skipped.set(stepping.skipped.get() + ticks - 1);
    // Nothing happens in a skip: every host but one still connecting owes it.
    if stepping.lazy && sim.elapsed() + by < stepping.until(next_fault) {
        let due = OnceCell::new();
        let due = |host, end| due.get_or_init(|| stepping.timers.due_by(end)).has(host);
        return sim.step_by_lazily(by, &due).map(|done| (done, ticks));
    }
    sim.step_by(by).map(|done| (done, ticks))
}

/// How many ticks from now nothing can happen in: no timer fires and no
/// message becomes deliverable up to their end, which is no later than the
/// next fault and the time limit.
fn idle_ticks(sim: &mut turmoil::Sim<'_>, stepping: &Stepping, next_fault: Option<Duration>) -> u64 {
    let now = sim.elapsed();
    let tick = stepping.tick.as_nanos();
    // The step may end at these (the runner switches the fault first; the
    // time limit is only passed by a step that ends beyond it).
    let mut ticks = stepping.until(next_fault).saturating_sub(now).as_nanos() / tick;
    // The step must end before these: a timer due at the step's end fires
    // in it, a message deliverable by then is handed over at its start.
    let timer = stepping.timers.earliest_running(|host| sim.is_host_running(host));
    let first = [timer, sim.next_delivery()].into_iter().flatten().min();
    if let Some(first) = first {
        let room = first.saturating_sub(now).as_nanos();
        ticks = ticks.min(room.saturating_sub(1) / tick);
    }
    u64::try_from(ticks).unwrap_or(u64::MAX).min(u64::from(u32::MAX))
}
