//! Pacing: hold a fleet *before* the limit, on the limiter's own signals.
//!
//! # Why
//!
//! Brief 002's best client waits `Retry-After` plus jitter. That is right for
//! one worker, but in a fleet every worker must first be refused to learn
//! that the window is full: with 8 workers a 1 s window of 30 writes costs
//! 8 refusals per window, and each refused worker then sleeps on its own.
//! The server says more than that. `@fastify/rate-limit` (the limiter behind
//! brief 002's API) sends `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
//! `X-RateLimit-Reset` on every answer, and the IETF draft spells them
//! `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`. A gate shared
//! by the fleet can read them and stop sending when the window is spent,
//! then let the whole fleet go the moment it resets. In the comparison
//! (`retrysim compare`) this needs no refused request at all and comes
//! within a few milliseconds per window of the oracle that knows the window.
//!
//! # What it reads
//!
//! From every answer ([`Gate::done`]):
//! - `RateLimit-Limit` / `-Remaining` / `-Reset`, else `X-RateLimit-*`.
//!   The first number of a field is used (`100, 100;w=60` reads 100).
//!   `Reset` is delta-seconds (decimals allowed). A value of at least 10⁹ is
//!   a Unix time in seconds (GitHub style), of at least 10¹² one in
//!   milliseconds; it is measured against the answer's own `Date` and
//!   ignored when there is none. Counting needs `Limit`; with `Remaining`
//!   alone, only `Remaining: 0` is used (it closes the window).
//! - `Retry-After` on a 429 or 503 that is not terminal (a `QUOTA_EXCEEDED`
//!   429 does not hold the fleet for a month; the worker's policy stops).
//!   Delta-seconds, or an HTTP-date measured against the answer's `Date`
//!   (ignored without one, as the gate has no wall clock).
//!
//! # What it does
//!
//! - It counts the attempts it admitted in the current window. With
//!   `Limit` known, the window takes `Limit - headroom - admitted - others`
//!   more, where `others` is what the headers show beyond the fleet's own
//!   attempts (`Limit - Remaining` at an answer's arrival, less everything
//!   the gate had admitted by then). So it spends the window exactly when
//!   it is the account's only client, and shrinks when others share it. A
//!   `Remaining: 0` closes the window whatever the count says.
//! - It keeps the window's *reset instant*: the answer's receipt plus
//!   `Reset`, the earliest such bound seen in the window. Headers in whole
//!   seconds are rounded up by the server, so the bound is never early.
//! - When the window is spent, attempts wait in a first-come-first-served
//!   queue until the reset, and then the whole fleet goes at once. The
//!   attempts still in flight at a reset count against the new window (they
//!   may land in it), and their answers are ignored as describing the old one.
//! - A refusal (429/503 with `Retry-After`) closes the window and holds the
//!   *whole fleet* until the advised instant (at most `max_hold`), not just
//!   the refused worker; its hold counts even when its attempt was sent
//!   before a reset (the server said it when it answered).
//!
//! # When the headers are missing
//!
//! With only `Retry-After`, the gate still holds the fleet on a refusal, and
//! (with `learn`, the default) it learns the window's capacity: the number
//! of successes in a window that ended in a refusal. After the hold it lets
//! that many through, then a single probe; the probe's refusal tells the
//! next reset. That costs one refused request per window instead of one per
//! worker. With no signal at all (a 429 without advice or headers), it
//! sends one attempt at a time until one succeeds, then opens again; the
//! workers' own backoff spaces those attempts.
//!
//! # Whole-second servers
//!
//! Flask-Limiter sends `X-RateLimit-Reset` as a Unix time in whole seconds,
//! rounded up, and its server a `Date` in whole seconds, rounded down. The
//! bound `Reset - Date` is never early but up to 2 s late: trusted blindly,
//! it held a fleet about 2 s per 1 s window (6.04 s for 120 jobs where the
//! ideal is 3.02 s). When a reset is read against `Date`, the gate (with
//! `learn_phase`, the default) learns the window from what happens instead:
//!
//! - It keeps the last `Limit` successes as *slots*, each with the earliest
//!   instant it can have been sent and the instant its answer came. A
//!   limiter counts a success until its arrival plus a period `W`; a slot
//!   is free again at its answer plus an upper bound of `W`. That is exact
//!   enough for a fixed window (everything frees at its first hit plus `W`)
//!   and for a moving one (each hit frees at its own arrival plus `W`).
//! - `W` is known as an interval. Every header bounds it from above (the
//!   reset bound less the earliest slot's send). A success with
//!   `Remaining: 0` while the slots hold our last `Limit` successes bounds
//!   it from below (the oldest surely still counted when it arrived: as
//!   many of the oldest are passed over as attempts are still out, since
//!   those may have arrived first and be the ones counted).
//! - While the upper bound comes only from whole-second headers, the gate
//!   sends one *probe* a whole second before it, alone, when the window is
//!   spent. If it gets through ("a refusal turns into a success"), the reset
//!   has happened: the upper bound becomes that answer less the earliest
//!   slot's send, and probing stops. That bound is late by a round trip and
//!   by however long before the probe's arrival the window had ended: under
//!   a second (the header's bound is less than 2 s late, and the probe goes
//!   a second before it), only a round trip when the window ends as the
//!   probe goes out. If it is refused, the lower bound rises past it and
//!   the gate waits for the bound (and the refusal's `Retry-After`).
//! - A refusal of an attempt that was not a probe means the learning was
//!   wrong (another client, a window that did not start at our first hit):
//!   the gate forgets the period and starts again from the headers.
//!
//! Against a real Flask-Limiter (`tests/conformance/run.sh`) this takes
//! 120 jobs through 30 per second in about 1.02 times the ideal time, with
//! no 429. Delta-seconds resets (`@fastify/rate-limit`, the IETF draft, the
//! simulator) are read as before: the server rounds them from its own
//! precise clock, so for a window that starts at the first hit they are
//! late by a fraction of a round trip, not by seconds.
//!
//! # Limits
//!
//! One gate paces one budget: give reads and writes separate gates when the
//! API counts them apart. The gate cannot tell which answer belongs to which
//! admission, so an answer reordered across a reset can be misread; the
//! worst outcome is a refusal, which the gate and the worker's policy then
//! honour. Separate processes with a gate each all go at a reset and learn
//! of each other only from the answers: share one gate per account, or
//! leave `headroom`. Time is the gate's [`Clock`]: tokio's by default
//! (virtual under turmoil and paused tests).
//!
//! # Default
//! - `headroom`: 0 requests per window left for other clients of the account
//! - `max_hold`: 120 s, the longest one signal holds the fleet
//! - `learn`: true
//! - `learn_phase`: true

use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use http::HeaderMap;
use http::header::RETRY_AFTER;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::{Admission, Feedback, Gate};
use crate::core::advice::{AdviceSource, read_advice};
use crate::core::classify::Class;
use crate::core::duration_text;
use crate::core::retry_after::parse_delta_seconds;
use crate::env::{Clock, TokioClock};

/// The pacing gate's settings. See the [module docs](self) for what each does.
///
/// Start from [`PacingConfig::default`] and change what you need with the
/// setters (each named as its field): `PacingConfig::default().learn_phase(false)`.
/// The struct is `#[non_exhaustive]`, so a setting added later breaks no
/// user's code; in TOML a missing key keeps its default.
///
/// # Default
/// No headroom, a signal holds the fleet at most 120 s, capacity and phase learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct PacingConfig {
    /// Attempts per window to leave unused, for other clients of the same
    /// account (the headers count the whole account).
    pub headroom: u32,
    /// The longest one signal (`Retry-After`, `Reset`) holds the fleet; a
    /// longer advice is left to the workers' policy (which usually gives up).
    #[serde(with = "duration_text")]
    pub max_hold: Duration,
    /// Without a limit header, learn the window's capacity from refusals.
    pub learn: bool,
    /// When the reset comes as whole Unix seconds against a whole-second
    /// `Date`, learn the window's phase from what happens instead of
    /// waiting out the rounded bound (see "Whole-second servers").
    pub learn_phase: bool,
}

impl PacingConfig {
    /// These settings with another value of `headroom`: attempts per window left unused for other clients.
    pub fn headroom(mut self, value: u32) -> PacingConfig {
        self.headroom = value;
        self
    }

    /// These settings with another value of `max_hold`: the longest one signal holds the fleet.
    pub fn max_hold(mut self, value: Duration) -> PacingConfig {
        self.max_hold = value;
        self
    }

    /// These settings with another value of `learn`: whether the window's capacity is learned from refusals.
    pub fn learn(mut self, value: bool) -> PacingConfig {
        self.learn = value;
        self
    }

    /// These settings with another value of `learn_phase`: whether the window's phase is learned on a whole-second server.
    pub fn learn_phase(mut self, value: bool) -> PacingConfig {
        self.learn_phase = value;
        self
    }
}

impl Default for PacingConfig {
    fn default() -> Self {
        PacingConfig { headroom: 0, max_hold: Duration::from_secs(120), learn: true, learn_phase: true }
    }
}

/// What a [`Schedule`] says about one more attempt at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It may go now (the schedule has counted it as in flight).
    Admit,
    /// Ask again at this instant (or earlier, if an answer comes).
    WaitUntil(Duration),
    /// Ask again when the next answer comes.
    WaitForAnswer,
}

/// The pure half of a scheduling gate: a state machine over instants on
/// the gate's monotonic timeline. It owns no clock and no timer, so it can
/// be tested without a runtime; [`Scheduled`] runs it on a clock.
pub trait Schedule: Send {
    /// May one more attempt go at `now`? [`Verdict::Admit`] counts it.
    fn try_admit(&mut self, now: Duration) -> Verdict;
    /// An admitted attempt finished at `now`.
    fn on_done(&mut self, now: Duration, feedback: &Feedback<'_>);
}

/// A [`Gate`] that runs a [`Schedule`] on a [`Clock`]: tokio's by default
/// (virtual under turmoil, paused in tests), or one handed in with
/// [`with_clock`](Scheduled::with_clock). Waiters are served first come,
/// first served: only the head of the queue asks the schedule, so a retry
/// never jumps ahead of work that has waited longer.
#[derive(Debug)]
pub struct Scheduled<S, C: Clock = TokioClock> {
    clock: C,
    /// The clock's reading when the schedule's timeline started.
    origin: Duration,
    inner: Mutex<Queue<S>>,
    notify: Notify,
}

#[derive(Debug)]
struct Queue<S> {
    schedule: S,
    waiting: BTreeSet<u64>,
    next_ticket: u64,
}

impl<S: Schedule> Scheduled<S, TokioClock> {
    /// Runs `schedule` on tokio's clock; its timeline starts now. Must be
    /// created inside a tokio runtime.
    pub fn new(schedule: S) -> Scheduled<S, TokioClock> {
        Scheduled::with_clock(schedule, TokioClock::real())
    }
}

impl<S: Schedule, C: Clock> Scheduled<S, C> {
    /// Runs `schedule` on `clock`; its timeline starts now.
    pub fn with_clock(schedule: S, clock: C) -> Scheduled<S, C> {
        Scheduled {
            origin: clock.now(),
            clock,
            inner: Mutex::new(Queue { schedule, waiting: BTreeSet::new(), next_ticket: 0 }),
            notify: Notify::new(),
        }
    }

    fn now(&self) -> Duration {
        self.clock.now().saturating_sub(self.origin)
    }

    /// Sleeps until `at` on the schedule's timeline.
    fn sleep_until(&self, at: Duration) -> impl Future<Output = ()> + Send + '_ {
        self.clock.sleep((self.origin + at).saturating_sub(self.clock.now()))
    }

    fn lock(&self) -> MutexGuard<'_, Queue<S>> {
        crate::locks::lock(&self.inner)
    }

    /// Reads the schedule (for tests and metrics).
    pub fn with_schedule<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.lock().schedule)
    }
}

/// Leaves the queue when an admission is dropped before it was granted
/// (a cancelled attempt), so the next waiter becomes the head.
struct Ticket<'a, S: Schedule, C: Clock> {
    gate: &'a Scheduled<S, C>,
    number: u64,
    admitted: bool,
}

impl<S: Schedule, C: Clock> Drop for Ticket<'_, S, C> {
    fn drop(&mut self) {
        if !self.admitted {
            self.gate.lock().waiting.remove(&self.number);
            self.gate.notify.notify_waiters();
        }
    }
}

impl<S: Schedule, C: Clock> Gate for Scheduled<S, C> {
    fn admit(&self) -> Admission<'_> {
        Box::pin(async move {
            let number = {
                let mut q = self.lock();
                let n = q.next_ticket;
                q.next_ticket += 1;
                q.waiting.insert(n);
                n
            };
            let mut ticket = Ticket { gate: self, number, admitted: false };
            loop {
                // Register for wake-ups before looking, so none is missed.
                let notified = self.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let verdict = {
                    let mut q = self.lock();
                    if q.waiting.first() == Some(&number) {
                        let verdict = q.schedule.try_admit(self.now());
                        if verdict == Verdict::Admit {
                            q.waiting.remove(&number);
                        }
                        verdict
                    } else {
                        Verdict::WaitForAnswer
                    }
                };
                match verdict {
                    Verdict::Admit => {
                        ticket.admitted = true;
                        // The next in line may go too.
                        self.notify.notify_waiters();
                        return;
                    }
                    Verdict::WaitUntil(at) => {
                        tokio::select! {
                            biased;
                            _ = &mut notified => {}
                            _ = self.sleep_until(at) => {}
                        }
                    }
                    Verdict::WaitForAnswer => notified.await,
                }
            }
        })
    }

    fn done(&self, feedback: &Feedback<'_>) {
        let now = self.now();
        self.lock().schedule.on_done(now, feedback);
        self.notify.notify_waiters();
    }

    fn queued(&self) -> usize {
        self.lock().waiting.len()
    }
}

/// What one answer's counter headers say about the window, read by the
/// core's reader of them ([`counters`](crate::core::advice::counters)).
pub use crate::core::advice::counters::RateLimitHeaders;

/// `Retry-After` as the gate can use it: the largest line it can measure,
/// delta-seconds always, a date only against the answer's own `Date` (the
/// gate has no wall clock). A date it cannot measure drops out, not the
/// whole field: of `1` and an HTTP-date, with no `Date`, the `1` holds.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let advice = read_advice(headers, None, SystemTime::UNIX_EPOCH);
    match advice.source {
        AdviceSource::HeaderSeconds => advice.wait,
        AdviceSource::HeaderDate if advice.server_date_used => advice.wait,
        AdviceSource::HeaderDate => {
            let lines = headers.get_all(RETRY_AFTER).iter();
            lines.filter_map(|v| parse_delta_seconds(v.as_bytes()).ok()).max().map(Duration::from_secs)
        }
        _ => None,
    }
}

/// The pacing state machine (pure): see the [module docs](self).
#[derive(Debug, Clone)]
pub struct PacingState {
    config: PacingConfig,
    in_flight: u32,
    /// Nothing is admitted before this (a refusal's `Retry-After`).
    hold_until: Duration,
    /// `Limit` from the headers.
    limit: Option<u32>,
    /// The capacity learned from refusals, when there is no `Limit`.
    learned: Option<u32>,
    /// Attempts admitted since the last reset (with those in flight at it).
    admitted: u32,
    /// Attempts of other clients in this window, as the headers show them.
    external: u32,
    /// A refusal or `Remaining: 0` closed the window until the reset.
    closed: bool,
    /// When the current window is whole again, if known.
    reset_at: Option<Duration>,
    /// Answers still to come for attempts sent before the last reset.
    stale: u32,
    /// Successes and whether a refusal came, since the last reset.
    window_successes: u32,
    window_refused: bool,
    /// What the answers taught about the window, for whole-second servers.
    phase: Phase,
    /// A deliberate defect (the harness's `pacing-forgets-in-flight`): a
    /// reset counts none of the attempts still in flight against the new
    /// window. Never set outside the harness.
    forgets_in_flight: bool,
}

/// One success still counted by the limiter, as the gate saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    /// No later than the attempt's arrival at the server (its admission, or
    /// an earlier one: see [`Phase::sends`]).
    sent: Duration,
    /// No earlier than its arrival: when its answer came.
    answered: Duration,
}

/// The window learned from observation (see "Whole-second servers" in the
/// [module docs](self)).
///
/// The model: the limiter counts a success until its arrival plus a period
/// `W` (a fixed window frees everything at its first hit plus `W`, a moving
/// window frees each hit at its own arrival plus `W`; waiting for each
/// slot's own time is right for both). `W` is known as an interval
/// `(period_lo, period_hi]`, narrowed by every reading.
#[derive(Debug, Clone, Default)]
struct Phase {
    /// A reset came as a Unix time against a whole-second `Date`.
    engaged: bool,
    /// The last `capacity` successes, in the order they were answered.
    slots: VecDeque<Slot>,
    /// Admission instants of the attempts in flight, oldest first. An
    /// answer cannot be matched to its admission, so each answer takes the
    /// oldest as its send time (a lower bound) and retires the newest: what
    /// stays is then, element by element, no later than the true sends.
    sends: VecDeque<Duration>,
    /// The period is longer than this.
    period_lo: Duration,
    /// The period is at most this (`None`: not known yet).
    period_hi: Option<Duration>,
    /// `period_hi` comes from a reset the gate saw happen (a probe got
    /// through), not from a whole-second header: it is within a second and
    /// a round trip of the truth, the quantum the gate probes by, so
    /// probing stops.
    period_seen: bool,
    /// The probe in flight: its admission instant.
    probe: Option<Duration>,
}

/// The quantum of whole-second signals: a bound read from them may be late
/// by this much, so the gate tries once whether the window ends one second
/// earlier than the bound says.
const WHOLE_SECOND: Duration = Duration::from_secs(1);

impl Phase {
    /// The earliest send of the successes the limiter may still count.
    fn earliest_sent(&self) -> Option<Duration> {
        self.slots.iter().map(|s| s.sent).min()
    }

    fn lower_period(&mut self, lo: Duration) {
        self.period_lo = self.period_lo.max(lo);
    }

    /// Takes the tighter upper bound. Of two equal ones, one the gate saw
    /// happen wins: there is nothing left to probe either way.
    fn upper_period(&mut self, hi: Duration, seen: bool) {
        match self.period_hi {
            Some(h) if hi > h => {}
            Some(h) if hi == h => self.period_seen |= seen,
            _ => {
                self.period_hi = Some(hi);
                self.period_seen = seen;
            }
        }
    }

    /// Learns from one answer; `sent` is a lower bound of its send time.
    fn learn(&mut self, now: Duration, sent: Duration, answer: Answer, capacity: Option<u32>) {
        let probe = self.probe.take();
        if answer.success {
            if probe.is_some() {
                // The limiter took an attempt while our last `capacity`
                // successes all counted: the oldest of them had expired by
                // the time it arrived.
                if let Some(earliest) = self.earliest_sent() {
                    self.upper_period(now.saturating_sub(earliest), true);
                }
            }
            self.slots.push_back(Slot { sent, answered: now });
            let keep = capacity.map_or(usize::MAX, |c| c.max(1) as usize);
            while self.slots.len() > keep {
                self.slots.pop_front();
            }
            if answer.remaining == Some(0) && Some(self.slots.len()) == capacity.map(|c| c as usize) {
                // Full: of our last `capacity` successes, all but as many as
                // are still out were counted when this one arrived (an
                // attempt still out may have arrived earlier and be counted
                // in place of an old slot: hunt seed 90603, whose lower bound
                // took a slot of the window before and held the fleet 2 s a
                // window). The oldest of those still counted bounds the period.
                if let Some(counted) = self.slots.get(answer.others_out as usize) {
                    self.lower_period(sent.saturating_sub(counted.answered));
                }
            }
        }
        if answer.refused && self.engaged {
            let oldest = self.slots.front().map(|s| s.answered);
            match (probe, oldest) {
                // Too early: the oldest success still counted at its arrival.
                (Some(p), Some(oldest)) => self.lower_period(p.saturating_sub(oldest)),
                // The gate let an attempt through that the limiter refused:
                // what it had learned is wrong (another client, a window that
                // did not start at our first hit). Start over from the headers.
                _ => {
                    self.period_lo = Duration::ZERO;
                    self.period_hi = None;
                    self.period_seen = false;
                }
            }
        }
        if answer.from_date {
            self.engaged = true;
            if let (Some(bound), Some(earliest)) = (answer.bound, self.earliest_sent()) {
                // The reset frees the window's first hit (fixed) or its oldest
                // (moving): both are among the last `capacity` successes.
                self.upper_period(bound.saturating_sub(earliest), false);
            }
        }
        if self.period_hi.is_some_and(|hi| hi <= self.period_lo) {
            // Contradictory readings: forget the lower bound, keep the safe one.
            self.period_lo = Duration::ZERO;
        }
    }

    /// How many successes the limiter may still count at `now`, and the
    /// oldest of them (the next to be freed).
    fn counted(&self, now: Duration, period_hi: Duration) -> (usize, Option<Slot>) {
        let live = self.slots.iter().filter(|s| s.answered + period_hi > now);
        let first = live.clone().next().copied();
        (live.count(), first)
    }
}

/// What [`Phase::learn`] needs of one answer.
#[derive(Debug, Clone, Copy)]
struct Answer {
    success: bool,
    /// A 429 or 503 that is not terminal.
    refused: bool,
    remaining: Option<u32>,
    /// The reset was read against a whole-second `Date`.
    from_date: bool,
    /// The header's reset instant (capped at `max_hold`), if it said one.
    bound: Option<Duration>,
    /// Attempts still out besides this one.
    others_out: u32,
}

impl PacingState {
    /// A fresh state: nothing known, nothing held.
    pub fn new(config: PacingConfig) -> PacingState {
        PacingState {
            config,
            in_flight: 0,
            hold_until: Duration::ZERO,
            limit: None,
            learned: None,
            admitted: 0,
            external: 0,
            closed: false,
            reset_at: None,
            stale: 0,
            window_successes: 0,
            window_refused: false,
            phase: Phase::default(),
            forgets_in_flight: false,
        }
    }

    /// This state with the harness's deliberate defect `pacing-forgets-in-flight`:
    /// at a reset it counts none of its attempts still in flight against
    /// the new window (their answers are still ignored as stale).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn forgetting_in_flight(mut self) -> PacingState {
        self.forgets_in_flight = true;
        self
    }

    /// Attempts the current window still takes (`None`: unknown).
    pub fn allowance(&self) -> Option<u32> {
        if self.closed {
            return Some(0);
        }
        let used = self.config.headroom.saturating_add(self.admitted).saturating_add(self.external);
        self.capacity().map(|c| c.saturating_sub(used))
    }

    /// Admitted attempts not yet finished.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The instant the fleet is held until (zero when never held).
    pub fn hold_until(&self) -> Duration {
        self.hold_until
    }

    /// The capacity per window, from `Limit` or learned.
    pub fn capacity(&self) -> Option<u32> {
        self.limit.or(self.learned)
    }

    /// The window's length as learned from a whole-second server: longer
    /// than the first, at most the second. `None` until the gate paces by it.
    pub fn learned_period(&self) -> Option<(Duration, Duration)> {
        let p = &self.phase;
        p.period_hi.filter(|_| p.engaged).map(|hi| (p.period_lo, hi))
    }

    /// The window is whole again: start counting a new one. Attempts still
    /// in flight may land in it, so they count against it.
    fn reset(&mut self) {
        if self.config.learn && self.limit.is_none() && self.window_refused {
            self.learned = Some(self.window_successes.max(1));
        }
        self.window_successes = 0;
        self.window_refused = false;
        self.reset_at = None;
        self.closed = false;
        self.external = 0;
        self.admitted = if self.forgets_in_flight { 0 } else { self.in_flight };
        self.stale = self.in_flight;
    }

    fn earlier_reset(&mut self, at: Duration) {
        self.reset_at = Some(self.reset_at.map_or(at, |r| r.min(at)));
    }

    fn admit(&mut self, now: Duration) -> Verdict {
        self.admitted = self.admitted.saturating_add(1);
        self.in_flight += 1;
        self.phase.sends.push_back(now);
        Verdict::Admit
    }

    /// Pacing by the learned period (whole-second servers), when it applies:
    /// each success frees its place at its answer plus the period, and one
    /// probe tests whether the period is a whole second shorter.
    fn try_admit_learned(&mut self, now: Duration) -> Option<Verdict> {
        let p = &self.phase;
        let (true, true, Some(period_hi)) = (self.config.learn_phase, p.engaged, p.period_hi) else { return None };
        let room = self.capacity()?.saturating_sub(self.config.headroom);
        if room == 0 {
            return None;
        }
        if p.probe.is_some() {
            return Some(Verdict::WaitForAnswer);
        }
        let (live, oldest) = p.counted(now, period_hi);
        if live as u64 + u64::from(self.in_flight) < u64::from(room) {
            return Some(self.admit(now));
        }
        let Some(oldest) = oldest else { return Some(Verdict::WaitForAnswer) };
        let frees_at = oldest.answered + period_hi;
        let probe_at = frees_at.saturating_sub(WHOLE_SECOND);
        if self.in_flight == 0 && !p.period_seen && probe_at > oldest.answered + p.period_lo {
            if now >= probe_at {
                self.phase.probe = Some(now);
                return Some(self.admit(now));
            }
            return Some(Verdict::WaitUntil(probe_at));
        }
        Some(Verdict::WaitUntil(frees_at))
    }
}

impl Schedule for PacingState {
    fn try_admit(&mut self, now: Duration) -> Verdict {
        if now < self.hold_until {
            return Verdict::WaitUntil(self.hold_until);
        }
        if self.reset_at.is_some_and(|r| now >= r) {
            self.reset();
        }
        if let Some(verdict) = self.try_admit_learned(now) {
            return verdict;
        }
        if self.allowance() == Some(0) {
            match self.reset_at {
                Some(at) => return Verdict::WaitUntil(at),
                // Nothing tells when the window resets: one probe at a time.
                None if self.in_flight > 0 => return Verdict::WaitForAnswer,
                None => {}
            }
        }
        self.admit(now)
    }

    fn on_done(&mut self, now: Duration, feedback: &Feedback<'_>) {
        if self.reset_at.is_some_and(|r| now >= r) {
            // The window reset while this attempt was out: it counts as stale.
            self.reset();
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        let sent = self.phase.sends.front().copied().unwrap_or(now);
        self.phase.sends.pop_back();
        let status = feedback.status.unwrap_or(0);
        let success = (200..300).contains(&status);
        let refused = matches!(status, 429 | 503) && feedback.class != Class::Terminal;
        let headers = feedback.headers.map(RateLimitHeaders::read).unwrap_or_default();
        let answer = Answer {
            success,
            refused,
            remaining: headers.remaining,
            from_date: headers.reset_from_date,
            bound: headers.reset.map(|r| now + r.min(self.config.max_hold)),
            others_out: self.in_flight,
        };
        self.phase.learn(now, sent, answer, headers.limit.or(self.capacity()));
        // A refusal's `Retry-After` holds the fleet even when its attempt was
        // sent before the last reset: the server said it when it answered.
        let hold =
            feedback.headers.filter(|_| refused).and_then(retry_after).map(|w| now + w.min(self.config.max_hold));
        if let Some(until) = hold {
            self.hold_until = self.hold_until.max(until);
        }
        if self.stale > 0 {
            // Sent before the reset: it describes the old window.
            self.stale -= 1;
            return;
        }
        if success {
            self.window_successes += 1;
        }
        if let Some(limit) = headers.limit {
            self.limit = Some(limit);
        }
        if let Some(reset) = headers.reset {
            self.earlier_reset(now + reset.min(self.config.max_hold));
        }
        if let Some(remaining) = headers.remaining {
            // The server had counted `limit - remaining` when this attempt
            // arrived; at most `admitted` of them were ours.
            if let Some(limit) = self.limit {
                let theirs = limit.saturating_sub(remaining).saturating_sub(self.admitted);
                self.external = self.external.max(theirs);
            }
            self.closed |= remaining == 0;
        }
        if refused {
            self.window_refused = true;
            self.closed = true;
            if let (Some(until), None) = (hold, headers.reset) {
                self.earlier_reset(until);
            }
        } else if success && self.closed && self.reset_at.is_none() && self.capacity().is_none() {
            // A probe got through and nothing tells the window: open again.
            self.closed = false;
        }
    }
}

/// Paces a fleet ahead of the limit: the [`Gate`] that runs a [`PacingState`]
/// on a clock, tokio's unless another is given (from its creation).
///
/// ```
/// # use std::sync::Arc;
/// use retrysim::gate::pacing::{Pacing, PacingConfig, PacingState};
/// # fn client(c: retrysim::RetryClient<retrysim::env::TokioClock, retrysim::env::HyperTransport>) {
/// // One gate for the fleet, shared by every worker's client.
/// let gate = Arc::new(Pacing::new(PacingState::new(PacingConfig::default())));
/// let client = c.with_gate(gate.clone());
/// # }
/// ```
pub type Pacing<C = TokioClock> = Scheduled<PacingState, C>;

#[cfg(test)]
mod tests;
