//! AIMD admission control: one gate shared by the workers of a fleet.
//!
//! # Why
//! Backoff reacts to a 429 after it happened; admission control keeps the
//! fleet from causing it (brief 003: "Return the Berlin batch to four
//! concurrent requests, measure throughput, and increase concurrency
//! gradually. Keep delayed retries in the same admission-control system as
//! new work.").
//!
//! # What it does
//! Every attempt, first or retry, takes a ticket and waits in one FIFO
//! queue. The head of the queue goes out when
//! 1. fewer attempts are in flight than the current **limit** (a concurrency
//!    window), and
//! 2. when pacing is on, the previous admission was at least `1 / rate` ago.
//!
//! Only the head may go out, so a retry that has slept its advised wait
//! joins the back of the queue like new work and never jumps it.
//!
//! Each answer adapts the two numbers:
//! - **success**: additive increase. The limit grows by `increase` slots per
//!   window of successes (`increase / limit` per success, TCP's congestion
//!   avoidance), but only while the window is at least half used, so an
//!   idle fleet does not inflate it (Netflix `AIMDLimit`'s rule).
//! - **throttled** (a 429 that is not a quota or credit stop): multiplicative
//!   decrease. The limit becomes `limit × backoff_per_mille / 1000`. Answers
//!   to attempts that were already in flight do not decrease it again: one
//!   decrease per window, as TCP reacts once per round trip.
//! - anything else (5xx, lost answers, terminal answers) frees the slot and
//!   changes nothing.
//!
//! # Pacing (the rate)
//! With `rate = "aimd"` or `rate = "cubic"`, the first throttled answer
//! switches pacing on, as the AWS SDKs' adaptive retry mode does: the rate
//! becomes `β ×` the measured send rate (β = `backoff_per_mille`), and then
//! - `aimd`: grows by `rate_increase_milli / 1000` requests per second for
//!   every second of successes, and is cut by β on each throttle;
//! - `cubic`: follows the AWS adaptive client rate limiter's CUBIC curve,
//!   `rate(t) = 0.4 × (t − K)³ + W_max` with `K = ∛(W_max × (1 − β) / 0.4)`,
//!   `W_max` the rate at the last throttle (botocore `CubicCalculator`).
//!
//! In both, the rate is kept within `[min_rate_milli, max_rate_milli]` and
//! never above twice the measured send rate (botocore's cap). The send rate
//! is measured as botocore's `RateClocker` does: counts in 2 s buckets,
//! smoothed with weight 0.8. Admissions are spaced exactly `1 / rate` apart
//! (a bucket of one token: never a burst). With `initial_rate_milli > 0`
//! pacing is on from the start (the fleet's local fallback limiter uses this;
//! a `cubic` curve then rises from that pace, as from a throttle at time zero).
//!
//! All arithmetic is integer (thousandths of a slot, milli-requests per
//! second, microseconds), so the gate behaves the same on every machine.
//! It reads time only from the injected [`Clock`] (virtual in the
//! simulator) and draws no random numbers.
//!
//! # Default
//! `initial_limit = 4` (brief 003's smoke test), `min_limit = 1`,
//! `max_limit = 64`, `increase = 1`, `backoff_per_mille = 700` (β = 0.7, the
//! AWS SDKs' and CUBIC's; TCP Reno uses 0.5), `rate = "aimd"`,
//! `initial_rate_milli = 0` (pacing off until the first throttle),
//! `min_rate_milli = 500` (AWS's minimum fill rate, 0.5/s),
//! `max_rate_milli = 1_000_000` (1000/s), `rate_increase_milli = 500`
//! (+0.5/s per second).
//!
//! # Facts for checkers
//! [`Aimd::with_log`] records every queueing, admission, answer and change as
//! a [`GateFact`]; the gate never checks itself. `sim::checks::fleet` reads
//! the facts and the server's ledger.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::{Admission, Feedback, Gate};
use crate::core::classify::Class;
use crate::env::{Clock, TokioClock};
use crate::locks::lock;

/// The admission controller's settings. Every field has a default (see the
/// module doc); in TOML: `gate = { kind = "aimd", initial_limit = 4 }`.
///
/// In code, start from [`AimdConfig::default`] and change what you need with
/// the setters (each named as its field): `AimdConfig::default().initial_limit(8)`.
/// The struct is `#[non_exhaustive]`, so a setting added later breaks no
/// user's code.
///
/// # Default
/// 4 in flight at first, between 1 and 64, one slot more per window of
/// successes, 70% left after a throttled answer; AIMD pacing, off until
/// the first throttled answer, between 0.5 and 1,000 requests per second,
/// 0.5 per second more per second of successes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct AimdConfig {
    /// Attempts in flight at once when the gate starts.
    pub initial_limit: u32,
    /// The limit never drops below this.
    pub min_limit: u32,
    /// The limit never grows above this.
    pub max_limit: u32,
    /// Slots added per window of successes.
    pub increase: u32,
    /// What a throttled answer leaves of the limit (and the rate), per mille.
    pub backoff_per_mille: u32,
    /// How admissions are paced in time.
    pub rate: RateControl,
    /// The pace from the start, in milli-requests per second; 0 leaves
    /// pacing off until the first throttled answer.
    pub initial_rate_milli: u32,
    /// The pace never drops below this (milli-requests per second).
    pub min_rate_milli: u32,
    /// The pace never exceeds this (milli-requests per second).
    pub max_rate_milli: u32,
    /// `aimd` pacing: milli-requests per second added per second of successes.
    pub rate_increase_milli: u32,
}

impl AimdConfig {
    /// These settings with another value of `initial_limit`: attempts in flight at once when the gate starts.
    pub fn initial_limit(mut self, value: u32) -> AimdConfig {
        self.initial_limit = value;
        self
    }

    /// These settings with another value of `min_limit`: the floor of the limit.
    pub fn min_limit(mut self, value: u32) -> AimdConfig {
        self.min_limit = value;
        self
    }

    /// These settings with another value of `max_limit`: the ceiling of the limit.
    pub fn max_limit(mut self, value: u32) -> AimdConfig {
        self.max_limit = value;
        self
    }

    /// These settings with another value of `increase`: slots added per window of successes.
    pub fn increase(mut self, value: u32) -> AimdConfig {
        self.increase = value;
        self
    }

    /// These settings with another value of `backoff_per_mille`: what a throttled answer leaves of the limit, per mille.
    pub fn backoff_per_mille(mut self, value: u32) -> AimdConfig {
        self.backoff_per_mille = value;
        self
    }

    /// These settings with another value of `rate`: how admissions are paced in time.
    pub fn rate(mut self, value: RateControl) -> AimdConfig {
        self.rate = value;
        self
    }

    /// These settings with another value of `initial_rate_milli`: the pace from the start, in milli-requests per second.
    pub fn initial_rate_milli(mut self, value: u32) -> AimdConfig {
        self.initial_rate_milli = value;
        self
    }

    /// These settings with another value of `min_rate_milli`: the floor of the pace.
    pub fn min_rate_milli(mut self, value: u32) -> AimdConfig {
        self.min_rate_milli = value;
        self
    }

    /// These settings with another value of `max_rate_milli`: the ceiling of the pace.
    pub fn max_rate_milli(mut self, value: u32) -> AimdConfig {
        self.max_rate_milli = value;
        self
    }

    /// These settings with another value of `rate_increase_milli`: milli-requests per second added per second of successes.
    pub fn rate_increase_milli(mut self, value: u32) -> AimdConfig {
        self.rate_increase_milli = value;
        self
    }
}

impl Default for AimdConfig {
    fn default() -> Self {
        AimdConfig {
            initial_limit: 4,
            min_limit: 1,
            max_limit: 64,
            increase: 1,
            backoff_per_mille: 700,
            rate: RateControl::Aimd,
            initial_rate_milli: 0,
            min_rate_milli: 500,
            max_rate_milli: 1_000_000,
            rate_increase_milli: 500,
        }
    }
}

impl AimdConfig {
    /// A fixed limit: `limit` in flight and, when `rate_milli > 0`, at most
    /// that pace, neither ever raised (a worker's local fallback limiter).
    pub fn fixed(limit: u32, rate_milli: u32) -> AimdConfig {
        AimdConfig {
            initial_limit: limit,
            min_limit: limit,
            max_limit: limit,
            increase: 0,
            rate: if rate_milli > 0 { RateControl::Aimd } else { RateControl::Off },
            initial_rate_milli: rate_milli,
            min_rate_milli: rate_milli.min(500),
            max_rate_milli: rate_milli,
            rate_increase_milli: 0,
            ..AimdConfig::default()
        }
    }

    /// What is wrong with these numbers, if anything.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_limit == 0 {
            return Err("min_limit must be at least 1".into());
        }
        if !(self.min_limit <= self.initial_limit && self.initial_limit <= self.max_limit) {
            return Err(format!(
                "need min_limit <= initial_limit <= max_limit, got {} <= {} <= {}",
                self.min_limit, self.initial_limit, self.max_limit
            ));
        }
        if !(1..1000).contains(&self.backoff_per_mille) {
            return Err(format!("backoff_per_mille = {} is out of range: 1..=999", self.backoff_per_mille));
        }
        if self.min_rate_milli == 0 || self.min_rate_milli > self.max_rate_milli {
            return Err("need 0 < min_rate_milli <= max_rate_milli".into());
        }
        if self.initial_rate_milli > self.max_rate_milli {
            return Err("initial_rate_milli must not exceed max_rate_milli".into());
        }
        Ok(())
    }
}

/// How the gate paces admissions in time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateControl {
    /// No pacing: the concurrency window alone bounds the fleet.
    Off,
    /// Additive increase, multiplicative decrease of the rate.
    #[default]
    Aimd,
    /// The AWS SDKs' adaptive rate: CUBIC growth after a throttle.
    Cubic,
}

/// One thing the gate did, at a time on its clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateFact {
    /// The gate's monotonic time.
    #[serde(serialize_with = "as_ms")]
    pub at: Duration,
    /// What the gate did then.
    pub event: GateEvent,
}

/// What happened at the gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum GateEvent {
    /// An attempt took a ticket and joined the queue (`depth` counts it).
    Queued {
        /// The attempt's place in line; tickets are handed out in order.
        ticket: u64,
        /// Attempts waiting, this one included.
        depth: u32,
    },
    /// An attempt went out; `in_flight` counts it. `limit` and `rate_milli`
    /// are the numbers it was admitted under (`None`: pacing off).
    Admitted {
        /// The ticket taken when it queued.
        ticket: u64,
        /// Attempts out now, this one included.
        in_flight: u32,
        /// The concurrency limit it was admitted under.
        limit: u32,
        /// The pacing rate in thousandths of a request per second, `None` while pacing is off.
        rate_milli: Option<u64>,
    },
    /// A queued attempt was given up before admission (cancelled, or its
    /// operation ended).
    Left {
        /// The ticket that left the queue.
        ticket: u64,
    },
    /// An admitted attempt ended and the gate heard how; `in_flight` no
    /// longer counts it. A [`Changed`](GateEvent::Changed) right after it
    /// says what the answer changed.
    Answered {
        /// Attempts still out.
        in_flight: u32,
        /// How the gate read the answer.
        signal: Signal,
    },
    /// The limit or the rate changed after an answer.
    Changed {
        /// The new concurrency limit.
        limit: u32,
        /// The new pacing rate in thousandths of a request per second, `None` while pacing is off.
        rate_milli: Option<u64>,
        /// The answer was a throttle (decrease), not a success (increase).
        throttled: bool,
    },
}

fn as_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

/// Where a gate writes its facts; share it to read them after a run.
pub type GateLog = Arc<Mutex<Vec<GateFact>>>;

/// What an answer says about the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Capacity was there: grow.
    Success,
    /// The API pushed back: shrink.
    Throttled,
    /// Says nothing about load: just free the slot.
    Neutral,
}

impl Signal {
    /// How an attempt's outcome counts. A 429 is a throttle unless its code
    /// says the quota or credits are spent (slowing down cannot fix that).
    pub fn of(class: Class, status: Option<u16>) -> Signal {
        match class {
            Class::Success => Signal::Success,
            Class::Throttled => Signal::Throttled,
            Class::Unclear if status == Some(429) => Signal::Throttled,
            _ => Signal::Neutral,
        }
    }
}

/// Whether the head of the queue may go out now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Yes.
    Now,
    /// The window is open but the pace says not before this time.
    At(Duration),
    /// The window is full: wait for an answer.
    Full,
}

/// The sans-IO controller: the limit, the rate and the in-flight count.
/// Time is always an argument. [`Aimd`] wraps it in a FIFO queue.
#[derive(Debug, Clone)]
pub struct Controller {
    config: AimdConfig,
    /// The window, in thousandths of a slot.
    limit_milli: u64,
    in_flight: u32,
    /// Answers still due from attempts sent before the last decrease.
    guard: u32,
    /// Pacing: `None` while off.
    rate_milli: Option<u64>,
    next_free: Duration,
    clocker: RateClocker,
    cubic: Cubic,
}

/// botocore's `RateClocker`: a send rate measured in 2 s buckets, smoothed.
#[derive(Debug, Clone, Default)]
struct RateClocker {
    last_bucket_ms: u64,
    count: u64,
    measured_milli: u64,
}

impl RateClocker {
    const BUCKET_MS: u64 = 2_000;

    fn record(&mut self, now: Duration) {
        let bucket = now.as_millis() as u64 / Self::BUCKET_MS * Self::BUCKET_MS;
        self.count += 1;
        if bucket > self.last_bucket_ms {
            let current = self.count * 1_000_000 / (bucket - self.last_bucket_ms);
            self.measured_milli = (current * 800 + self.measured_milli * 200) / 1000;
            self.count = 0;
            self.last_bucket_ms = bucket;
        }
    }
}

/// botocore's `CubicCalculator`, in integers: rates in milli-requests per
/// second, times in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
struct Cubic {
    w_max_milli: u64,
    k_ms: u64,
    last_throttle: Duration,
}

impl Cubic {
    /// `K = ∛(W_max × (1 − β) / 0.4)` seconds, in ms: `∛(W_m × (1000 − b) × 2500)`.
    fn throttled(&mut self, rate_milli: u64, backoff_per_mille: u32, now: Duration) -> u64 {
        self.w_max_milli = rate_milli;
        self.k_ms = icbrt(rate_milli as u128 * (1000 - backoff_per_mille as u128) * 2500) as u64;
        self.last_throttle = now;
        rate_milli * backoff_per_mille as u64 / 1000
    }

    /// `0.4 × (t − K)³ + W_max`, with `t` the seconds since the last throttle.
    fn rate_at(&self, now: Duration) -> u64 {
        let t_ms = now.saturating_sub(self.last_throttle).as_millis() as i128;
        let d = t_ms - self.k_ms as i128;
        let rate = d * d * d * 400 / 1_000_000_000 + self.w_max_milli as i128;
        rate.clamp(0, u64::MAX as i128) as u64
    }
}

/// The integer cube root: the largest `r` with `r³ <= n`.
fn icbrt(n: u128) -> u128 {
    let (mut lo, mut hi) = (0u128, 1u128 << 43);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if mid.checked_pow(3).is_some_and(|c| c <= n) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

impl Controller {
    /// A controller at its initial limit, with nothing in flight.
    pub fn new(config: AimdConfig) -> Controller {
        let rate_milli = (config.rate != RateControl::Off && config.initial_rate_milli > 0)
            .then_some(config.initial_rate_milli as u64);
        Controller {
            limit_milli: config.initial_limit.max(1) as u64 * 1000,
            config,
            in_flight: 0,
            guard: 0,
            rate_milli,
            next_free: Duration::ZERO,
            clocker: RateClocker::default(),
            // With a pace from the start the curve rises from it, as from a
            // throttle at time zero whose `W_max` it is (`K = 0`); without
            // one the first throttle sets it.
            cubic: Cubic { w_max_milli: rate_milli.unwrap_or(0), ..Cubic::default() },
        }
    }

    /// The window: how many attempts may be in flight.
    pub fn limit(&self) -> u32 {
        ((self.limit_milli / 1000) as u32).max(self.config.min_limit).max(1)
    }

    /// The pace in milli-requests per second, `None` while pacing is off.
    pub fn rate_milli(&self) -> Option<u64> {
        self.rate_milli
    }

    /// Attempts in flight.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Holds admissions until `at` (when pacing is on), e.g. to stagger the
    /// start of workers that all switch to their fallback at once.
    pub fn hold_until(&mut self, at: Duration) {
        if self.rate_milli.is_some() {
            self.next_free = self.next_free.max(at);
        }
    }

    /// Whether one more attempt may go out at `now`.
    pub fn readiness(&self, now: Duration) -> Readiness {
        if self.in_flight >= self.limit() {
            Readiness::Full
        } else if self.rate_milli.is_some() && now < self.next_free {
            Readiness::At(self.next_free)
        } else {
            Readiness::Now
        }
    }

    /// One attempt goes out at `now` (call only when [`Readiness::Now`]).
    pub fn admit(&mut self, now: Duration) {
        self.in_flight += 1;
        self.clocker.record(now);
        if let Some(rate) = self.rate_milli {
            self.next_free = self.next_free.max(now) + interval(rate);
        }
    }

    /// An admitted attempt ended at `now` with `signal`. Returns whether the
    /// limit or the rate changed.
    pub fn answer(&mut self, now: Duration, signal: Signal) -> bool {
        let in_flight_then = self.in_flight;
        self.in_flight = self.in_flight.saturating_sub(1);
        let before = (self.limit(), self.rate_milli);
        let c = self.config;
        match signal {
            Signal::Throttled if self.guard == 0 => {
                let kept = self.limit_milli * c.backoff_per_mille as u64 / 1000;
                self.limit_milli = kept.max(c.min_limit as u64 * 1000);
                self.guard = self.in_flight;
                if c.rate != RateControl::Off {
                    let measured = self.clocker.measured_milli;
                    let base = match self.rate_milli {
                        Some(rate) if measured > 0 => rate.min(measured),
                        Some(rate) => rate,
                        None => measured.max(c.min_rate_milli as u64),
                    };
                    let next = match c.rate {
                        RateControl::Cubic => self.cubic.throttled(base, c.backoff_per_mille, now),
                        _ => base * c.backoff_per_mille as u64 / 1000,
                    };
                    self.rate_milli = Some(self.clamp_rate(next));
                }
            }
            Signal::Throttled | Signal::Neutral => self.guard = self.guard.saturating_sub(1),
            Signal::Success => {
                self.guard = self.guard.saturating_sub(1);
                // Grow only while the window is at least half used.
                if in_flight_then as u64 * 2 * 1000 >= self.limit_milli && c.increase > 0 {
                    let step = c.increase as u64 * 1_000_000 / self.limit_milli.max(1);
                    self.limit_milli = (self.limit_milli + step.max(1)).min(c.max_limit as u64 * 1000);
                }
                if let Some(rate) = self.rate_milli {
                    let next = match c.rate {
                        RateControl::Cubic => self.cubic.rate_at(now),
                        _ => rate + c.rate_increase_milli as u64 * 1000 / rate.max(1),
                    };
                    let cap = self.clocker.measured_milli.saturating_mul(2).max(rate);
                    self.rate_milli = Some(self.clamp_rate(next.min(cap)));
                }
            }
        }
        (self.limit(), self.rate_milli) != before
    }

    fn clamp_rate(&self, rate: u64) -> u64 {
        rate.clamp(self.config.min_rate_milli as u64, self.config.max_rate_milli as u64)
    }
}

/// The spacing of admissions at `rate_milli` milli-requests per second.
fn interval(rate_milli: u64) -> Duration {
    Duration::from_micros(1_000_000_000 / rate_milli.max(1))
}

struct State {
    controller: Controller,
    queue: VecDeque<u64>,
    next_ticket: u64,
    log: Option<GateLog>,
}

impl State {
    fn record(&self, at: Duration, event: GateEvent) {
        if let Some(log) = &self.log {
            lock(log).push(GateFact { at, event });
        }
    }
}

/// AIMD admission control shared by a fleet (see the module doc).
pub struct Aimd<C: Clock = TokioClock> {
    clock: C,
    state: Mutex<State>,
    changed: Notify,
}

impl<C: Clock> std::fmt::Debug for Aimd<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("Aimd").field("controller", &s.controller).field("queued", &s.queue.len()).finish()
    }
}

impl Aimd<TokioClock> {
    /// An admission controller on tokio's clock (virtual under turmoil and
    /// paused tests). Must be created inside a tokio runtime.
    pub fn new(config: AimdConfig) -> Aimd<TokioClock> {
        Aimd::with_clock(config, TokioClock::real())
    }
}

impl<C: Clock> Aimd<C> {
    /// An admission controller on an injected clock.
    pub fn with_clock(config: AimdConfig, clock: C) -> Aimd<C> {
        let state = State { controller: Controller::new(config), queue: VecDeque::new(), next_ticket: 0, log: None };
        Aimd { clock, state: Mutex::new(state), changed: Notify::new() }
    }

    /// Records every queueing, admission, answer and change into `log`.
    pub fn with_log(self, log: GateLog) -> Aimd<C> {
        self.lock().log = Some(log);
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The current window.
    pub fn limit(&self) -> u32 {
        self.lock().controller.limit()
    }

    /// Attempts in flight.
    pub fn in_flight(&self) -> u32 {
        self.lock().controller.in_flight()
    }

    /// The current pace (milli-requests per second), `None` while off.
    pub fn rate_milli(&self) -> Option<u64> {
        self.lock().controller.rate_milli()
    }

    /// Holds admissions for `d` from now (when pacing is on).
    pub fn hold_for(&self, d: Duration) {
        let at = self.clock.now() + d;
        self.lock().controller.hold_until(at);
        self.changed.notify_waiters();
    }

    /// Admits `ticket` if it heads the queue and the controller allows it.
    fn try_admit(&self, ticket: u64) -> Readiness {
        let mut s = self.lock();
        if s.queue.front() != Some(&ticket) {
            return Readiness::Full;
        }
        let now = self.clock.now();
        let ready = s.controller.readiness(now);
        if ready == Readiness::Now {
            s.queue.pop_front();
            let before = (s.controller.limit(), s.controller.rate_milli());
            s.controller.admit(now);
            let event = GateEvent::Admitted {
                ticket,
                in_flight: s.controller.in_flight(),
                limit: before.0,
                rate_milli: before.1,
            };
            s.record(now, event);
        }
        ready
    }
}

/// A ticket in the queue; leaving without admission takes it out.
struct Ticket<'a, C: Clock> {
    gate: &'a Aimd<C>,
    ticket: u64,
    admitted: bool,
}

impl<C: Clock> Drop for Ticket<'_, C> {
    fn drop(&mut self) {
        if self.admitted {
            return;
        }
        let mut s = self.gate.lock();
        if let Some(i) = s.queue.iter().position(|&t| t == self.ticket) {
            s.queue.remove(i);
            let now = self.gate.clock.now();
            s.record(now, GateEvent::Left { ticket: self.ticket });
        }
        drop(s);
        self.gate.changed.notify_waiters();
    }
}

impl<C: Clock> Gate for Aimd<C> {
    fn admit(&self) -> Admission<'_> {
        Box::pin(async move {
            let ticket = {
                let mut s = self.lock();
                let ticket = s.next_ticket;
                s.next_ticket += 1;
                s.queue.push_back(ticket);
                let depth = s.queue.len() as u32;
                s.record(self.clock.now(), GateEvent::Queued { ticket, depth });
                ticket
            };
            let mut place = Ticket { gate: self, ticket, admitted: false };
            loop {
                let notified = self.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                match self.try_admit(ticket) {
                    Readiness::Now => {
                        place.admitted = true;
                        // The next in line may fit too.
                        self.changed.notify_waiters();
                        return;
                    }
                    Readiness::At(t) => {
                        let wait = t.saturating_sub(self.clock.now());
                        tokio::select! {
                            biased;
                            _ = &mut notified => {}
                            _ = self.clock.sleep(wait) => {}
                        }
                    }
                    Readiness::Full => notified.await,
                }
            }
        })
    }

    fn done(&self, feedback: &Feedback<'_>) {
        let mut s = self.lock();
        let signal = Signal::of(feedback.class, feedback.status);
        let now = self.clock.now();
        let changed = s.controller.answer(now, signal);
        let in_flight = s.controller.in_flight();
        s.record(now, GateEvent::Answered { in_flight, signal });
        if changed {
            let event = GateEvent::Changed {
                limit: s.controller.limit(),
                rate_milli: s.controller.rate_milli(),
                throttled: signal == Signal::Throttled,
            };
            s.record(now, event);
        }
        drop(s);
        self.changed.notify_waiters();
    }

    fn queued(&self) -> usize {
        self.lock().queue.len()
    }
}

#[cfg(test)]
mod tests;
