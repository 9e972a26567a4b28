//! Request-rate limiters: one per (account, read/write budget).
//!
//! The fixed window is the one that matters for brief 002: it copies
//! @fastify/rate-limit, whose two quirks drive the brief's numbers. The window
//! starts at the caller's *first hit* (not on a clock boundary), and *every*
//! request counts, refused ones included, so retrying at once keeps the window
//! full. `limits` (under Flask-Limiter) counts its fixed window the same way.
//! The token bucket and sliding window are the other common designs and let
//! scenarios check a policy that does not over-fit one limiter; the moving
//! window is the sliding one as `limits` implements it (see `habits`). The
//! leaky bucket is nginx's `limit_req` (see `leaky`), the one limiter that
//! *delays* what it admits.

use std::collections::VecDeque;
use std::time::Duration;

use super::config::LimiterKind;
use super::leaky::{Leak, Leaky};

/// The outcome of one request at a limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// Admitted, but held `by` before it runs (nginx's `burst` without `nodelay`).
    Delayed {
        by: Duration,
    },
    /// Refused; `wait` is the exact time until a request would be allowed.
    Refused {
        wait: Duration,
    },
}

/// A budget's state as `RateLimit-*` headers tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Standing {
    pub(crate) limit: u32,
    pub(crate) remaining: u32,
    /// Until the budget is whole again (zero when it already is).
    pub(crate) reset: Duration,
}

/// `Retry-After` the way @fastify/rate-limit writes it: whole seconds,
/// rounded up, at least 1 (a zero would invite an immediate retry).
pub(crate) fn whole_seconds_at_least_one(wait: Duration) -> u64 {
    ceil_seconds(wait).max(1)
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_seconds(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

#[derive(Debug, Clone)]
pub(crate) struct Limiter {
    limit: u32,
    window: Duration,
    state: State,
    /// A deliberate model defect: the fixed window admits one hit more than its limit.
    admits_one_more: bool,
}

#[derive(Debug, Clone)]
enum State {
    /// `start` of the current window (if any) and how many requests hit it.
    Fixed { start: Option<Duration>, count: u32 },
    /// Tokens scaled by the window in ns (one token = `window_ns` units), so
    /// refill at `limit` per window is exact integer arithmetic.
    Bucket { scaled: u128, last: Option<Duration> },
    /// Arrival times of accepted requests inside the trailing window.
    /// `edge_refuses`: a hit exactly one window old still takes its slot
    /// (`limits`' moving window; see `habits`).
    Sliding { log: VecDeque<Duration>, edge_refuses: bool },
    /// nginx's `limit_req` (`leaky`).
    Leaky(Leaky),
}

impl Limiter {
    /// A zero window is treated as 1 ms (`ApiConfig::validate` reports it).
    pub(crate) fn new(kind: LimiterKind, limit: u32, window: Duration) -> Limiter {
        let window = window.max(Duration::from_millis(1));
        let state = match kind {
            LimiterKind::FixedWindow => State::Fixed { start: None, count: 0 },
            LimiterKind::TokenBucket => State::Bucket { scaled: 0, last: None },
            LimiterKind::SlidingWindow => State::Sliding { log: VecDeque::new(), edge_refuses: false },
            LimiterKind::MovingWindow => State::Sliding { log: VecDeque::new(), edge_refuses: true },
            LimiterKind::LeakyBucket => State::Leaky(Leaky::new(limit, window, 0, false)),
        };
        Limiter { limit, window, state, admits_one_more: false }
    }

    /// A leaky bucket with nginx's `burst` and `nodelay` (other kinds ignore them).
    pub(crate) fn bursting(mut self, burst: u32, nodelay: bool) -> Limiter {
        if let State::Leaky(_) = self.state {
            self.state = State::Leaky(Leaky::new(self.limit, self.window, burst, nodelay));
        }
        self
    }

    /// With the deliberate defect `window_admits_one_more` (negative controls only).
    pub(crate) fn admitting_one_more(mut self, on: bool) -> Limiter {
        self.admits_one_more = on;
        self
    }

    /// One request arrives at `now`.
    pub(crate) fn hit(&mut self, now: Duration) -> Verdict {
        let (limit, window) = (self.limit, self.window);
        match &mut self.state {
            State::Fixed { start, count } => {
                let begin = match *start {
                    Some(s) if now < s + window => s,
                    _ => {
                        *count = 0;
                        now
                    }
                };
                *start = Some(begin);
                *count = count.saturating_add(1);
                if *count > limit.saturating_add(u32::from(self.admits_one_more)) {
                    return Verdict::Refused { wait: begin + window - now };
                }
                Verdict::Allowed
            }
            State::Bucket { scaled, last } => {
                let one = window.as_nanos();
                *scaled = bucket_level(*scaled, *last, now, limit, one);
                *last = Some(now);
                if *scaled >= one {
                    *scaled -= one;
                    return Verdict::Allowed;
                }
                Verdict::Refused { wait: refill_time(one - *scaled, limit, window) }
            }
            State::Sliding { log, edge_refuses } => {
                let gone = |t: Duration| if *edge_refuses { t + window < now } else { t + window <= now };
                while log.front().is_some_and(|&t| gone(t)) {
                    log.pop_front();
                }
                if log.len() < limit as usize {
                    log.push_back(now);
                    return Verdict::Allowed;
                }
                let wait = log.front().map_or(window, |&t| t + window - now);
                Verdict::Refused { wait }
            }
            State::Leaky(bucket) => match bucket.hit(now) {
                Leak::Admitted { delay } if delay.is_zero() => Verdict::Allowed,
                Leak::Admitted { delay } => Verdict::Delayed { by: delay },
                Leak::Refused { wait } => Verdict::Refused { wait },
            },
        }
    }

    /// The budget as seen at `now`, without counting a request.
    pub(crate) fn standing(&self, now: Duration) -> Standing {
        let (limit, window) = (self.limit, self.window);
        let (remaining, reset) = match &self.state {
            State::Fixed { start: Some(s), count } if now < *s + window => {
                (limit.saturating_sub(*count), *s + window - now)
            }
            State::Fixed { .. } => (limit, Duration::ZERO),
            State::Bucket { scaled, last } => {
                let one = window.as_nanos();
                let level = bucket_level(*scaled, *last, now, limit, one);
                let full = u128::from(limit) * one;
                let tokens = u32::try_from(level / one).unwrap_or(u32::MAX);
                (tokens, refill_time(full.saturating_sub(level), limit, window))
            }
            State::Sliding { log, .. } => {
                let live: Vec<_> = log.iter().filter(|&&t| t + window > now).collect();
                let reset = live.first().map_or(Duration::ZERO, |&&t| t + window - now);
                (limit.saturating_sub(live.len() as u32), reset)
            }
            State::Leaky(bucket) => bucket.standing(now),
        };
        Standing { limit, remaining, reset }
    }
}

/// The bucket's level at `now`: full before the first hit, then refilled
/// `limit` tokens per window since `last`, capped at `limit` tokens.
fn bucket_level(scaled: u128, last: Option<Duration>, now: Duration, limit: u32, one: u128) -> u128 {
    let full = u128::from(limit) * one;
    match last {
        None => full,
        Some(last) => {
            let elapsed = now.saturating_sub(last).as_nanos();
            scaled.saturating_add(elapsed.saturating_mul(u128::from(limit))).min(full)
        }
    }
}

/// Time to refill `missing` scaled units at `limit` tokens per window, rounded
/// up to the nanosecond; a zero-limit bucket never refills, so say one window.
fn refill_time(missing: u128, limit: u32, window: Duration) -> Duration {
    if limit == 0 {
        return window;
    }
    let ns = missing.div_ceil(u128::from(limit));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn refused(v: Verdict) -> Duration {
        match v {
            Verdict::Refused { wait } => wait,
            Verdict::Allowed | Verdict::Delayed { .. } => panic!("expected a refusal"),
        }
    }

    #[test]
    fn fixed_window_starts_at_the_first_hit_not_the_clock() {
        let mut l = Limiter::new(LimiterKind::FixedWindow, 1, ms(1_000));
        assert_eq!(l.hit(ms(400)), Verdict::Allowed);
        assert_eq!(refused(l.hit(ms(1_399))), ms(1));
        // The window opened at 400 ms, so it resets at 1400 ms, not 1000 ms.
        assert_eq!(l.hit(ms(1_400)), Verdict::Allowed);
        assert_eq!(l.standing(ms(1_400)).reset, ms(1_000));
    }

    #[test]
    fn fixed_window_counts_refused_requests() {
        let mut l = Limiter::new(LimiterKind::FixedWindow, 3, ms(1_000));
        let verdicts: Vec<_> = (0..5).map(|i| l.hit(ms(i))).collect();
        assert_eq!(verdicts.iter().filter(|v| **v == Verdict::Allowed).count(), 3);
        assert!(matches!(l.state, State::Fixed { count: 5, .. }));
        assert_eq!(l.standing(ms(10)).remaining, 0);
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_at_least_one() {
        assert_eq!(whole_seconds_at_least_one(ms(300)), 1);
        assert_eq!(whole_seconds_at_least_one(ms(1_200)), 2);
        assert_eq!(whole_seconds_at_least_one(ms(2_000)), 2);
        assert_eq!(whole_seconds_at_least_one(Duration::ZERO), 1);
        let mut l = Limiter::new(LimiterKind::FixedWindow, 1, ms(60_000));
        l.hit(ms(0));
        assert_eq!(whole_seconds_at_least_one(refused(l.hit(ms(58_800)))), 2);
    }

    #[test]
    fn token_bucket_starts_full_refills_continuously_and_refusals_are_free() {
        let mut l = Limiter::new(LimiterKind::TokenBucket, 2, ms(1_000));
        assert_eq!(l.hit(ms(0)), Verdict::Allowed);
        assert_eq!(l.hit(ms(0)), Verdict::Allowed);
        // One token per 500 ms; 100 ms in, 400 ms to go.
        assert_eq!(refused(l.hit(ms(100))), ms(400));
        assert_eq!(refused(l.hit(ms(200))), ms(300), "a refusal took no token");
        assert_eq!(l.hit(ms(500)), Verdict::Allowed);
        assert_eq!(l.standing(ms(500)), Standing { limit: 2, remaining: 0, reset: ms(1_000) });
        assert_eq!(l.standing(ms(5_000)).remaining, 2, "capped at capacity");
    }

    #[test]
    fn sliding_window_waits_for_the_oldest_accepted_request() {
        let mut l = Limiter::new(LimiterKind::SlidingWindow, 2, ms(1_000));
        assert_eq!(l.hit(ms(100)), Verdict::Allowed);
        assert_eq!(l.hit(ms(600)), Verdict::Allowed);
        assert_eq!(refused(l.hit(ms(900))), ms(200));
        assert_eq!(l.hit(ms(1_100)), Verdict::Allowed, "the 100 ms hit fell out");
        assert_eq!(refused(l.hit(ms(1_200))), ms(400));
        assert_eq!(l.standing(ms(1_200)), Standing { limit: 2, remaining: 0, reset: ms(400) });
    }

    #[test]
    fn the_moving_window_refuses_on_its_edge_where_the_sliding_one_admits() {
        let (mut moving, mut sliding) = (
            Limiter::new(LimiterKind::MovingWindow, 1, ms(1_000)),
            Limiter::new(LimiterKind::SlidingWindow, 1, ms(1_000)),
        );
        assert_eq!((moving.hit(ms(0)), sliding.hit(ms(0))), (Verdict::Allowed, Verdict::Allowed));
        // One window after the hit: `limits` still counts it, the sliding window does not.
        assert_eq!(refused(moving.hit(ms(1_000))), Duration::ZERO);
        assert_eq!(sliding.hit(ms(1_000)), Verdict::Allowed);
        // The refusal was free, and its standing (`get_moving_window`) already shows the slot free.
        assert_eq!(moving.standing(ms(1_000)), Standing { limit: 1, remaining: 1, reset: Duration::ZERO });
        assert_eq!(moving.hit(ms(1_001)), Verdict::Allowed);
    }

    #[test]
    fn zero_limits_refuse_everything() {
        for kind in [
            LimiterKind::FixedWindow,
            LimiterKind::TokenBucket,
            LimiterKind::SlidingWindow,
            LimiterKind::MovingWindow,
            LimiterKind::LeakyBucket,
        ] {
            let mut l = Limiter::new(kind, 0, ms(1_000));
            assert!(matches!(l.hit(ms(0)), Verdict::Refused { .. }), "{kind:?}");
        }
    }
}
