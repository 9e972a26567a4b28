//! The ideal client: an oracle that knows the API's limiter and paces the
//! fleet perfectly. It is the comparison's yardstick (`retrysim compare`
//! shows every policy as a ratio to it), not a production gate: a real
//! client does not know the window. [`crate::gate::pacing::Pacing`] is the
//! production gate that tries to come close from the headers alone.
//!
//! # How it paces
//!
//! It keeps a log of the latest moment each recent attempt can have reached
//! the server, and admits an attempt only when fewer than `limit` attempts
//! are in flight or reached the server within the last `window`. An
//! attempt's arrival is bounded by the instant its outcome came back, less
//! the API's `processing_ms` for a success (the answer is produced that long
//! after the arrival). So no `window`-long interval ever holds more than
//! `limit` arrivals, which every limiter of the model accepts:
//! - a fixed window (`@fastify/rate-limit`, starting at the first hit) never
//!   holds more than `limit` arrivals, since its windows are such intervals;
//! - a sliding window is exactly that rule;
//! - a token bucket is not held to that rule, which would waste its
//!   continuous refill: the oracle runs a replica of the API's bucket. An
//!   attempt reaches the server between its admission and `max_trip` later
//!   (a connect on a fresh connection, none on a pooled one), so the replica
//!   takes each admitted attempt's token at the latest moment it can arrive
//!   (a token taken later wastes more refill at a full bucket), and admits
//!   an attempt only when a token is left at admission with every attempt
//!   still on its way counted as arrived. The server, whose tokens are taken
//!   no later than the replica's, always has one too.
//!
//! It never meets a 429 and sends the fewest possible requests (one per job).
//! It is also the fastest schedule up to one trip back per window: under a
//! fixed window it sends each window's `limit` attempts as fast as the fleet
//! can, then the next ones a window after the previous ones came back.
//!
//! # Assumptions
//! - Every attempt counts against one budget: `min(writes, reads)` of the
//!   API's limiter (exact for the presets, whose jobs are all writes).
//! - The fleet is the account's only client, with nothing else in flight.
//! - No concurrency cap (`api.concurrency`) is modelled; the presets set none.

use std::collections::VecDeque;
use std::time::Duration;

use crate::gate::Feedback;
#[cfg(doc)]
use crate::gate::Gate;
use crate::gate::pacing::{Schedule, Scheduled, Verdict};
use crate::sim::world::api::limiter::{Limiter, Verdict as LimiterVerdict};
use crate::sim::world::api::{ApiConfig, LimiterKind};

/// The oracle's bookkeeping (pure, on the gate's timeline).
#[derive(Debug, Clone)]
pub(crate) struct IdealSchedule {
    limit: u32,
    window: Duration,
    processing: Duration,
    in_flight: u32,
    /// Upper bounds on the arrival of finished attempts, oldest first.
    arrived: VecDeque<Duration>,
    /// For a token bucket: a replica of the API's bucket, hit at the latest
    /// arrival of each admitted attempt.
    bucket: Option<Limiter>,
    /// The latest arrivals of admitted attempts the replica has not taken yet.
    on_the_way: VecDeque<Duration>,
    /// The longest an attempt takes from its admission to the server.
    max_trip: Duration,
}

impl IdealSchedule {
    /// The oracle for an API's limiter, whose attempts reach it at most
    /// `max_trip` after their admission.
    pub fn new(api: &ApiConfig, max_trip: Duration) -> IdealSchedule {
        IdealSchedule {
            limit: api.limiter.writes.min(api.limiter.reads),
            window: Duration::from_millis(api.limiter.window_ms.max(1)),
            processing: Duration::from_millis(api.processing_ms),
            in_flight: 0,
            arrived: VecDeque::new(),
            bucket: (api.limiter.kind == LimiterKind::TokenBucket).then(|| {
                let limit = api.limiter.writes.min(api.limiter.reads);
                Limiter::new(LimiterKind::TokenBucket, limit, Duration::from_millis(api.limiter.window_ms.max(1)))
            }),
            on_the_way: VecDeque::new(),
            max_trip,
        }
    }
}

impl Schedule for IdealSchedule {
    fn try_admit(&mut self, now: Duration) -> Verdict {
        if let Some(bucket) = &mut self.bucket {
            while let Some(&at) = self.on_the_way.front().filter(|&&at| at <= now) {
                bucket.hit(at);
                self.on_the_way.pop_front();
            }
            // Every attempt still on its way arrived now, and then this one.
            // A refused hit takes no token from a bucket.
            let mut seen_now = bucket.clone();
            for _ in 0..=self.on_the_way.len() {
                if let LimiterVerdict::Refused { wait } = seen_now.hit(now) {
                    return Verdict::WaitUntil(now + wait);
                }
            }
            self.on_the_way.push_back(now + self.max_trip);
            return Verdict::Admit;
        }
        while self.arrived.front().is_some_and(|&t| t + self.window <= now) {
            self.arrived.pop_front();
        }
        if (self.in_flight as usize + self.arrived.len()) < self.limit as usize {
            self.in_flight += 1;
            return Verdict::Admit;
        }
        match self.arrived.front() {
            Some(&t) => Verdict::WaitUntil(t + self.window),
            None => Verdict::WaitForAnswer,
        }
    }

    fn on_done(&mut self, now: Duration, feedback: &Feedback<'_>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let ran = feedback.status.is_some_and(|s| (200..300).contains(&s));
        let arrived_by = if ran { now.saturating_sub(self.processing) } else { now };
        let at = self.arrived.partition_point(|&t| t <= arrived_by);
        self.arrived.insert(at, arrived_by);
    }
}

/// An oracle that admits exactly what the limiter will accept: the [`Gate`]
/// that runs an [`IdealSchedule`]. Build it inside the simulation: it reads
/// tokio's (virtual) clock.
pub(crate) type IdealGate<C = crate::env::TokioClock> = Scheduled<IdealSchedule, C>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::classify::Class;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn done(s: &mut IdealSchedule, now: Duration, status: u16) {
        s.on_done(now, &Feedback { now, status: Some(status), class: Class::Success, headers: None });
    }

    #[test]
    fn admits_limit_per_window_counted_from_when_answers_came_back() {
        let mut api = ApiConfig::default();
        api.limiter.writes = 2;
        api.limiter.window_ms = 1000;
        api.processing_ms = 100;
        let mut s = IdealSchedule::new(&api, Duration::ZERO);
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
        assert_eq!(s.try_admit(ms(0)), Verdict::WaitForAnswer);
        // A success came back at 105 ms: it arrived by 5 ms.
        done(&mut s, ms(105), 201);
        assert_eq!(s.try_admit(ms(105)), Verdict::WaitUntil(ms(1005)));
        // A refusal ran nothing: it arrived by the time it came back.
        done(&mut s, ms(3), 429);
        assert_eq!(s.try_admit(ms(106)), Verdict::WaitUntil(ms(1003)));
        assert_eq!(s.try_admit(ms(1003)), Verdict::Admit);
        assert_eq!(s.try_admit(ms(1003)), Verdict::WaitUntil(ms(1005)));
        assert_eq!(s.try_admit(ms(1005)), Verdict::Admit);
    }

    #[test]
    fn a_token_bucket_is_paced_by_its_replica() {
        let mut api = ApiConfig::default();
        api.limiter.kind = LimiterKind::TokenBucket;
        api.limiter.writes = 2;
        api.limiter.window_ms = 1000;
        let mut s = IdealSchedule::new(&api, Duration::ZERO);
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
        // One token per 500 ms, whatever came back.
        assert_eq!(s.try_admit(ms(100)), Verdict::WaitUntil(ms(500)));
        assert_eq!(s.try_admit(ms(500)), Verdict::Admit);
        assert_eq!(s.try_admit(ms(500)), Verdict::WaitUntil(ms(1000)));
    }

    #[test]
    fn a_token_taken_late_at_a_full_bucket_is_counted_late() {
        let mut api = ApiConfig::default();
        api.limiter.kind = LimiterKind::TokenBucket;
        api.limiter.writes = 2;
        api.limiter.window_ms = 1000;
        // Attempts reach the server up to 300 ms after admission.
        let mut s = IdealSchedule::new(&api, ms(300));
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
        // At 600 ms the first may have arrived only at 300 ms, with the bucket
        // full: one token taken, 300 ms of refill left, so one admitted...
        assert_eq!(s.try_admit(ms(600)), Verdict::Admit);
        // ...and a third must wait for the refill after the second's latest
        // arrival (900 ms) has been counted: not at 600 ms, though a replica
        // hit at admission would have had two tokens again by then.
        assert!(matches!(s.try_admit(ms(600)), Verdict::WaitUntil(_)));
    }

    #[test]
    fn the_tighter_of_the_two_budgets_counts() {
        let mut api = ApiConfig::default();
        api.limiter.reads = 1;
        assert_eq!(IdealSchedule::new(&api, Duration::ZERO).limit, 1);
    }
}
