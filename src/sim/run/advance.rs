//! Steps the simulation, skipping virtual time in which nothing happens
//! (issue 16).
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
//! it, no timer of its own due in the step ([`Timers::due`]) and no task
//! woken, and ticks it through the ticks it owes in one long idle tick
//! before it next has work. That is the same as ticking it every step
//! unless a task of another host wakes one of its tasks through memory
//! they share while it owes ticks: turmoil sees that (the woken host's
//! `LocalSet` is polled with a waker that records wakes), and the runner
//! then runs the whole simulation again with every host ticked every step
//! ([`last_run_lazy_replays`]). Steps that end at or past the next fault
//! tick every host, so a fault (a cancellation wakes tasks from outside)
//! meets no host owing ticks.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Duration;

use crate::sim::run::fleet::{Hooks, fleet_hosts};
use crate::sim::run::scenario::Scenario;
use crate::sim::run::subject::{Host, MakeSubject, Subject};
use crate::sim::world::timers::Timers;

thread_local! {
    static KNOBS: Cell<Knobs> = const { Cell::new(Knobs { plain_ticks: false, eager_hosts: false, lazy_always: false }) };
    static SKIPPED: Cell<u64> = const { Cell::new(0) };
    static LAZY_TICKS: Cell<u64> = const { Cell::new(0) };
    static LAZY_REPLAYS: Cell<u64> = const { Cell::new(0) };
}

/// How the runs this thread starts step, set only by the tests' `with_*`
/// functions below (the default skips idle stretches, and leaves idle hosts
/// out of busy steps of runs with [`LAZY_MIN_HOSTS`] hosts or more).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Knobs {
    /// Step every tick.
    plain_ticks: bool,
    /// Tick every host in every step that is stepped.
    eager_hosts: bool,
    /// Leave idle hosts out however few hosts a run has.
    lazy_always: bool,
}

/// The knobs of the runs this thread starts.
pub(crate) fn knobs() -> Knobs {
    KNOBS.with(Cell::get)
}

/// Carries the knobs to a thread a run moves to.
pub(crate) fn set_knobs(knobs: Knobs) {
    KNOBS.with(|k| k.set(knobs));
}

/// Runs `f` with one knob turned on, and puts the knobs back after.
fn with_knob<R>(turn_on: fn(&mut Knobs), f: impl FnOnce() -> R) -> R {
    let before = knobs();
    let mut on = before;
    turn_on(&mut on);
    set_knobs(on);
    let out = f();
    set_knobs(before);
    out
}

/// How many host ticks the last run on this thread left out (`step_lazily`).
#[doc(hidden)]
pub fn last_run_lazy_ticks() -> u64 {
    LAZY_TICKS.with(Cell::get)
}

/// How many times the last run on this thread was run again with every host
/// ticked, because a host owing ticks was woken through shared memory.
#[doc(hidden)]
pub fn last_run_lazy_replays() -> u64 {
    LAZY_REPLAYS.with(Cell::get)
}

/// Runs `f` with every host ticked in every step that is stepped (skipping
/// idle stretches stays on) for every run this thread starts. For tests
/// that compare the two ways; not part of the harness's API.
#[doc(hidden)]
pub fn with_eager_hosts<R>(f: impl FnOnce() -> R) -> R {
    with_knob(|k| k.eager_hosts = true, f)
}

/// Runs `f` with idle hosts left out of busy steps however few hosts a run
/// has (see [`LAZY_MIN_HOSTS`]), for every run this thread starts. For
/// tests that compare the ways; not part of the harness's API.
#[doc(hidden)]
pub fn with_lazy_hosts_always<R>(f: impl FnOnce() -> R) -> R {
    with_knob(|k| k.lazy_always = true, f)
}

/// Runs `f` with skipping off for every run this thread starts (or a run
/// starts on a thread of its own from here): every tick is stepped. For
/// tests that compare the two ways; not part of the harness's API.
#[doc(hidden)]
pub fn with_plain_ticks<R>(f: impl FnOnce() -> R) -> R {
    with_knob(|k| k.plain_ticks = true, f)
}

/// The fewest hosts a run leaves idle hosts out of busy steps with. With the
/// API and one fleet host, a busy step is nearly always busy on both, and
/// watching the hosts' wakes costs more than the ticks it saves (about 15%
/// slower on `hunt --seeds 200` and `berlin-40-workers`).
pub const LAZY_MIN_HOSTS: usize = 3;

/// Records what a run's stepping did, for the `last_run_*` functions.
pub(crate) fn record_lazy(ticks: u64, replays: u64) {
    LAZY_TICKS.with(|n| n.set(ticks));
    LAZY_REPLAYS.with(|n| n.set(replays));
}

/// How many ticks the last run on this thread skipped (stepped over in a
/// longer step): for tests that check the skipping happens at all.
#[doc(hidden)]
pub fn last_run_skipped_ticks() -> u64 {
    SKIPPED.with(Cell::get)
}

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
}

impl Stepping {
    /// Stepping for `s`, with the registry its simulated tasks sleep through.
    /// A hooked gate or budget is code the harness did not write: it may
    /// sleep on tokio's timer, so such a run is stepped tick by tick.
    /// `lazy`: whether a busy step may leave out idle hosts.
    pub(crate) fn new(s: &Scenario, timers: Arc<Timers>, hooks: Hooks, lazy: bool) -> Stepping {
        if hooks.gate.is_some() || hooks.budget.is_some() {
            timers.mark_unseen();
        }
        // Whole milliseconds: tokio's timers have millisecond resolution, so
        // a tick of whole milliseconds is one clock move per idle tick.
        let whole_ms = !s.net.tick.is_zero() && s.net.tick.as_nanos().is_multiple_of(1_000_000);
        SKIPPED.with(|n| n.set(0));
        record_lazy(0, 0);
        let knobs = knobs();
        let lazy = lazy && !knobs.eager_hosts && (hosts(s) >= LAZY_MIN_HOSTS || knobs.lazy_always);
        if lazy {
            timers.keep_by_host();
        }
        Stepping {
            timers,
            tick: s.net.tick,
            time_limit: s.time_limit,
            skip: whole_ms && !knobs.plain_ticks,
            lazy,
            last_fault: RefCell::new(None),
        }
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
    let ticks = if seen { idle_ticks(sim, stepping, next_fault) } else { 0 };
    if ticks < 2 {
        // A host may owe ticks only while no fault switches and the time
        // limit is ahead.
        if seen && stepping.lazy && sim.elapsed() + stepping.tick < stepping.until(next_fault) {
            let timers = &stepping.timers;
            return sim.step_lazily(&|host, end| timers.due(host, end)).map(|done| (done, 1));
        }
        return sim.step().map(|done| (done, 1));
    }
    let by = stepping.tick * u32::try_from(ticks).expect("idle_ticks is at most u32::MAX");
    SKIPPED.with(|n| n.set(n.get() + ticks - 1));
    sim.step_by(by).map(|done| (done, ticks))
}

/// How many ticks from now nothing can happen in: no timer fires and no
/// message becomes deliverable up to their end, which is no later than the
/// next fault and the time limit.
fn idle_ticks(sim: &turmoil::Sim<'_>, stepping: &Stepping, next_fault: Option<Duration>) -> u64 {
    let now = sim.elapsed();
    let tick = stepping.tick.as_nanos();
    // The step may end at these (the runner switches the fault first; the
    // time limit is only passed by a step that ends beyond it).
    let mut ticks = stepping.until(next_fault).saturating_sub(now).as_nanos() / tick;
    // The step must end before these: a timer due at the step's end fires
    // in it, a message deliverable by then is handed over at its start.
    let first = [stepping.timers.earliest(), sim.next_delivery()].into_iter().flatten().min();
    if let Some(first) = first {
        let room = first.saturating_sub(now).as_nanos();
        ticks = ticks.min(room.saturating_sub(1) / tick);
    }
    u64::try_from(ticks).unwrap_or(u64::MAX).min(u64::from(u32::MAX))
}
