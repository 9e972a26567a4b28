//! Real servers' habits: how widely used rate limiters write their numbers.
//!
//! The model's defaults copy @fastify/rate-limit, the limiter behind brief 002's
//! API. A client tuned only against it meets other habits in the wild, and the
//! one most often met in Python is Flask-Limiter over the `limits` library. Each
//! habit is one knob of [`ApiConfig`](super::ApiConfig), read from the
//! libraries' source (Flask-Limiter 4.1.1, limits 5.8.0, @fastify/rate-limit
//! 11.2.0, Werkzeug 3.1.8, CPython 3.11's `http.server`), so that a later
//! calibration against the real Flask-Limiter compares like with like.
//!
//! # `retry_after_rounding`
//! - `up` (default): @fastify/rate-limit writes `ttlInSeconds =
//!   Math.ceil(res.ttl / 1000)` (`index.js` L299) into `retry-after` (L359);
//!   its store's ttl is above 0 ms while a window is alive (`LocalStore.js`
//!   L18, L38), so the value is at least 1.
//! - `down`: Flask-Limiter's `RequestLimit.reset_at` is `int(self.window[0] +
//!   1)` (`_extension.py` L97), the window's reset in whole Unix seconds, and
//!   `Retry-After` is `int(reset_at - time.time())` (L932). So it is the whole
//!   seconds from now's wall-clock second to the reset's (plus one when now is
//!   a whole second): `0` when the reset falls in the current second, and up to
//!   a second early otherwise. It depends on where in the wall-clock second the
//!   window started, which is why the Flask-Limiter scenarios start the server
//!   clock half a second into one.
//! - `truncate`: `int(reset - now)`, the wait rounded down whatever the phase
//!   (a hand-written limiter such as `tests/conformance/rounding_server.py`,
//!   the rounding server of the production driver's tests): `0` for the whole of a 1 s window.
//!
//! # `rate_limit_reset`
//! - `seconds_left` (default): @fastify/rate-limit's `x-ratelimit-reset` /
//!   `ratelimit-reset` is the same `ttlInSeconds` (L347, L358).
//! - `unix_seconds`: Flask-Limiter writes `str(reset_at)` (L905), i.e.
//!   `int(reset + 1)`: whole Unix seconds, one more than the truncated reset.
//!   Read against a whole-second `Date`, it says up to two seconds more than
//!   the true wait.
//!
//! # `rate_limit_fields`
//! - `draft6` (default): @fastify/rate-limit's `enableDraftSpec` names
//!   (`ratelimit-limit`, `-remaining`, `-reset`, `index.js` L23-27).
//! - `x_ratelimit`: Flask-Limiter's `HeaderNames` (`constants.py`) and
//!   @fastify/rate-limit's defaults (`index.js` L16-20).
//! - `structured`: draft-ietf-httpapi-ratelimit-headers-10, §3
//!   (`RateLimit-Policy: "default";q=100;w=10`, `q` the quota, `w` the window
//!   in whole seconds, "sub-second precision is not supported") and §4
//!   (`RateLimit: "default";r=50;t=30`, `r` the remaining quota, `t` the
//!   seconds until more quota is available). The policy is named after the
//!   budget (`"writes"`, `"reads"`, `"anonymous"`); `t` is the same rounded-up
//!   seconds as `RateLimit-Reset`, and `w` is the window rounded up to a
//!   whole second.
//!
//! # `rate_limited_body`
//! - `html`: Flask-Limiter's `RateLimitExceeded` is Werkzeug's
//!   `TooManyRequests` with `description = str(limit.limit)` (`errors.py`
//!   L28), e.g. `30 per 1 second` (limits' `RateLimitItem.__repr__`,
//!   `limits.py` L136). Werkzeug renders it as an HTML page (`exceptions.py`
//!   L117-122) with `Content-Type: text/html; charset=utf-8` (L130): no
//!   error code and no wait in the body, only the `Retry-After` header.
//!
//! # `send_date`
//! Every server in this list sends `Date` (CPython's `http.server`
//! `send_response`, under Werkzeug's dev server, sends `Date:
//! formatdate(time.time())`, truncated to the second). Some proxies and
//! embedded servers do not; without it a client cannot measure an HTTP-date
//! or a Unix-seconds reset against the server's own clock.
//!
//! # The windows
//! - Fixed window: `limits`' `FixedWindowRateLimiter.hit` is
//!   `storage.incr(key, expiry) <= amount` (`strategies.py` L156-162), so a
//!   refused hit counts too; its memory storage sets the expiry to
//!   `time.time() + expiry` on the first hit of a window (`memory.py` L96-97) and forgets
//!   the count once `expiry <= time.time()` (L119). That is
//!   @fastify/rate-limit's window exactly (first hit, refused hits count,
//!   `iterationStartMs + timeWindow <= nowInMs` ends it, `LocalStore.js` L18),
//!   so one `fixed_window` serves both; a test below replays `limits`' code
//!   against it. Its stats: `remaining = max(0, amount - count)`, `reset =
//!   expiry` (`strategies.py` L188-189).
//! - Moving window ([`LimiterKind::MovingWindow`](super::LimiterKind)):
//!   `acquire_entry` looks at the `limit`-th newest accepted hit and refuses if
//!   `entry.atime >= timestamp - expiry` (`memory.py` L150, L154), else
//!   records the hit (L157): a refused hit is not recorded, and a hit exactly
//!   one window after that entry is still refused. The stats count the hits
//!   with `atime > now - expiry` and reset when the oldest of them is one
//!   window old (`memory.py` L178-182, `strategies.py` L134). Headers are
//!   computed after the hit, so the window is never empty there.
//!
//! # Not modelled
//! Flask-Limiter also sets `Retry-After` on answers that were not refused
//! (`_extension.py` L927, outside any status check); neither the retry core
//! nor a gate reads advice on a success, so the model sends it on refusals
//! only. Headers are sent only with `RATELIMIT_HEADERS_ENABLED` (L357), which
//! the Flask-Limiter scenarios assume.

use std::time::Duration;

use super::config::{ResetForm, RetryAfterRounding};
use super::limiter::{ceil_seconds, whole_seconds_at_least_one};
use super::wallclock::WallTime;

/// A request-rate refusal's `Retry-After`, in whole seconds, for a refusal at
/// server wall time `wall` whose budget frees up after `wait`.
pub(crate) fn retry_after_seconds(rounding: RetryAfterRounding, wait: Duration, wall: WallTime) -> u64 {
    match rounding {
        RetryAfterRounding::Up => whole_seconds_at_least_one(wait),
        // int(reset_at - time.time()), a positive float truncated.
        RetryAfterRounding::Down => flask_reset_at(wall.plus(wait)).since(wall).as_secs(),
        // int(reset - now): what is left, truncated.
        RetryAfterRounding::Truncate => wait.as_secs(),
    }
}

/// Flask-Limiter's `reset_at`: `int(reset + 1)`, the reset's whole Unix second plus one.
fn flask_reset_at(reset: WallTime) -> WallTime {
    WallTime::from_unix_seconds(reset.unix_seconds().saturating_add(1))
}

/// The value of `RateLimit-Reset` / `X-RateLimit-Reset` for a budget whole
/// again after `reset`, at server wall time `wall`.
pub(crate) fn reset_value(form: ResetForm, reset: Duration, wall: WallTime) -> u64 {
    match form {
        ResetForm::SecondsLeft => ceil_seconds(reset),
        ResetForm::UnixSeconds => flask_reset_at(wall.plus(reset)).unix_seconds(),
    }
}

/// The `Content-Type` of [`html_page`] (Werkzeug's `HTTPException.get_headers`).
pub(crate) const HTML: &str = "text/html; charset=utf-8";

/// Werkzeug's 429 page for a limit of `limit` per `window`, as Flask-Limiter
/// sends it by default.
pub(crate) fn html_page(limit: u32, window: Duration) -> String {
    format!(
        "<!doctype html>\n<html lang=en>\n<title>429 Too Many Requests</title>\n<h1>Too Many Requests</h1>\n<p>{limit} per {}</p>\n",
        granularity(window)
    )
}

/// A window as `limits` names one: `1 second`, `1 minute`, `2 hour`, the
/// largest unit that divides it (it has no unit under a second: milliseconds here).
fn granularity(window: Duration) -> String {
    let ms = window.as_millis();
    if ms == 0 || !ms.is_multiple_of(1_000) {
        return format!("{ms} millisecond");
    }
    let secs = ms / 1_000;
    let (n, unit) = [(86_400, "day"), (3_600, "hour"), (60, "minute"), (1, "second")]
        .into_iter()
        .find(|(unit, _)| secs.is_multiple_of(*unit))
        .map_or((secs, "second"), |(unit, name)| (secs / unit, name));
    format!("{n} {unit}")
}

/// Every server habit: a knob of [`ApiConfig`](super::ApiConfig) that says
/// how a real server words its refusals, listed in `KNOBS` with each value
/// named by an exhaustive `match` (a new value does not compile until it has
/// a name). The tests check each list against serde's own list of the type's
/// values (a value missing from `ALL` fails them), that the hunt's default
/// seeds draw every value (`hunt::worlds`) and that the scenario keys'
/// registry allows exactly these names. The tests' list: the production code
/// matches on the types themselves.
#[cfg(test)]
pub(crate) mod registry {
    use super::super::config::{
        AdviceForm, ApiConfig, DateForm, Dialect, Envelope, LimiterKind, RateLimitFields, RateLimitedBody, ResetForm,
        RetryAfterRounding,
    };

    /// A server habit: one knob of [`ApiConfig`].
    pub(crate) trait Habit: Copy + PartialEq + std::fmt::Debug + 'static {
        /// The knob's key in a scenario file.
        const KEY: &'static str;
        /// Every value, the default first.
        const ALL: &'static [Self];
        /// The value as scenario files spell it.
        fn name(self) -> &'static str;
        /// The value `api` has.
        fn of(api: &ApiConfig) -> Self;
    }

    /// One habit knob, its type forgotten: for lists and coverage.
    #[derive(Clone, Copy)]
    pub(crate) struct Knob {
        /// The key in a scenario file, e.g. `api.retry_after_rounding`.
        pub key: &'static str,
        /// Every value's name, the default first.
        pub names: fn() -> Vec<&'static str>,
        /// The name of the value a scenario's API has.
        pub of: fn(&ApiConfig) -> &'static str,
    }

    pub(crate) fn names<H: Habit>() -> Vec<&'static str> {
        H::ALL.iter().map(|h| h.name()).collect()
    }

    fn name_of<H: Habit>(api: &ApiConfig) -> &'static str {
        H::of(api).name()
    }

    const fn knob<H: Habit>() -> Knob {
        Knob { key: H::KEY, names: names::<H>, of: name_of::<H> }
    }

    /// Every habit a server can have.
    pub(crate) const KNOBS: [Knob; 9] = [
        knob::<LimiterKind>(),
        knob::<AdviceForm>(),
        knob::<DateForm>(),
        knob::<Envelope>(),
        knob::<RetryAfterRounding>(),
        knob::<RateLimitFields>(),
        knob::<ResetForm>(),
        knob::<RateLimitedBody>(),
        knob::<Dialect>(),
    ];

    impl Habit for LimiterKind {
        const KEY: &'static str = "api.limiter.kind";
        const ALL: &'static [Self] = &[
            LimiterKind::FixedWindow,
            LimiterKind::TokenBucket,
            LimiterKind::SlidingWindow,
            LimiterKind::MovingWindow,
            LimiterKind::LeakyBucket,
        ];
        fn name(self) -> &'static str {
            match self {
                LimiterKind::FixedWindow => "fixed_window",
                LimiterKind::TokenBucket => "token_bucket",
                LimiterKind::SlidingWindow => "sliding_window",
                LimiterKind::MovingWindow => "moving_window",
                LimiterKind::LeakyBucket => "leaky_bucket",
            }
        }
        fn of(api: &ApiConfig) -> Self {
            api.limiter.kind
        }
    }

    impl Habit for AdviceForm {
        const KEY: &'static str = "api.advice";
        const ALL: &'static [Self] = &[
            AdviceForm::Both,
            AdviceForm::HeaderSeconds,
            AdviceForm::HeaderDate,
            AdviceForm::BodyOnly,
            AdviceForm::None,
            AdviceForm::Malformed,
            AdviceForm::SeveralLines,
        ];
        fn name(self) -> &'static str {
            match self {
                AdviceForm::HeaderSeconds => "header_seconds",
                AdviceForm::HeaderDate => "header_date",
                AdviceForm::BodyOnly => "body_only",
                AdviceForm::Both => "both",
                AdviceForm::None => "none",
                AdviceForm::Malformed => "malformed",
                AdviceForm::SeveralLines => "several_lines",
            }
        }
        fn of(api: &ApiConfig) -> Self {
            api.advice
        }
    }

    impl Habit for DateForm {
        const KEY: &'static str = "api.date_form";
        const ALL: &'static [Self] = &[DateForm::ImfFixdate, DateForm::Rfc850, DateForm::Asctime];
        fn name(self) -> &'static str {
            match self {
                DateForm::ImfFixdate => "imf_fixdate",
                DateForm::Rfc850 => "rfc850",
                DateForm::Asctime => "asctime",
            }
        }
        fn of(api: &ApiConfig) -> Self {
            api.date_form
        }
    }

    impl Habit for Envelope {
        const KEY: &'static str = "api.envelope";
        const ALL: &'static [Self] = &[Envelope::Blinkimg, Envelope::Sume];
        fn name(self) -> &'static str {
            match self {
                Envelope::Blinkimg => "blinkimg",
                Envelope::Sume => "sume",
            }
        }
        fn of(api: &ApiConfig) -> Self {
            api.envelope
        }
    }

    impl Habit for RetryAfterRounding {
        const KEY: &'static str = "api.retry_after_rounding";
        const ALL: &'static [Self] = &[RetryAfterRounding::Up, RetryAfterRounding::Down, RetryAfterRounding::Truncate];
        fn name(self) -> &'static str {
            match self {
                RetryAfterRounding::Up => "up",
                RetryAfterRounding::Down => "down",
                RetryAfterRounding::Truncate => "truncate",
            }
        }
        fn of(api: &ApiConfig) -> Self {
            api.retry_after_rounding
        }
    }

    impl Habit for RateLimitFields {
        const KEY: &'static str = "api.rate_limit_fields";
        const ALL: &'static [Self] = &[
            RateLimitFields::Draft6,
            RateLimitFields::XRateLimit,
            RateLimitFields::Structured,
            RateLimitFields::Draft6AndStructured,
        ];
        fn name(self) -> &'static str {
            match self {
                RateLimitFields::Draft6 => "draft6",
                RateLimitFields::XRateLimit => "x_ratelimit",
                RateLimitFields::Structured => "structured",
                RateLimitFields::Draft6AndStructured => "draft6_and_structured",
            }
        }
        fn of(api: &ApiConfig) -> Self {
            api.rate_limit_fields
        }
    }

    impl Habit for ResetForm {
        const KEY: &'static str = "api.rate_limit_reset";
        const ALL: &'static [Self] = &[ResetForm::SecondsLeft, ResetForm::UnixSeconds];
        fn name(self) -> &'static str {
            match self {
                ResetForm::SecondsLeft => "seconds_left",
                ResetForm::UnixSeconds => "unix_seconds",
            }
        }
        fn of(api: &ApiConfig) -> Self {
            api.rate_limit_reset
        }
    }

    impl Habit for RateLimitedBody {
        const KEY: &'static str = "api.rate_limited_body";
        const ALL: &'static [Self] = &[RateLimitedBody::Envelope, RateLimitedBody::Html, RateLimitedBody::Nginx];
        fn name(self) -> &'static str {
            match self {
                RateLimitedBody::Envelope => "envelope",
                RateLimitedBody::Html => "html",
                RateLimitedBody::Nginx => "nginx",
            }
        }
        fn of(api: &ApiConfig) -> Self {
            api.rate_limited_body
        }
    }

    /// A dialect's name and values are the dialect's own (`dialect.rs`).
    impl Habit for Dialect {
        const KEY: &'static str = "api.dialect";
        const ALL: &'static [Self] = &[
            Dialect::None,
            Dialect::Ietf,
            Dialect::ExpressDraft6,
            Dialect::ExpressDraft7,
            Dialect::ExpressDraft8,
            Dialect::OpenAi,
            Dialect::GitHub,
        ];
        fn name(self) -> &'static str {
            Dialect::name(self)
        }
        fn of(api: &ApiConfig) -> Self {
            api.dialect
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::world::api::LimiterKind;
    use crate::sim::world::api::limiter::{Limiter, Verdict};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The server's wall clock `ms` milliseconds past Unix second 1_791_450_000.
    fn wall(ms: u64) -> WallTime {
        WallTime::from_unix_ms(1_791_450_000_000 + ms)
    }

    #[test]
    fn up_is_fastifys_ceil_at_least_one() {
        for (wait, expected) in [(0, 1), (1, 1), (999, 1), (1_000, 1), (1_001, 2), (59_400, 60)] {
            assert_eq!(retry_after_seconds(RetryAfterRounding::Up, ms(wait), wall(500)), expected, "{wait} ms");
        }
    }

    #[test]
    fn down_is_flask_limiters_whole_second_difference() {
        // (now past the whole second, wait) -> int(int(now + wait + 1) - now)
        let cases = [
            // The reset is in the current wall-clock second: Retry-After: 0.
            (500, 300, 0),
            (100, 899, 0),
            // The reset is in the next second: 1, even for a 0.7 s wait.
            (500, 700, 1),
            (500, 500, 1),
            // 1.4 s left, truncated to 1: a client that obeys is 0.4 s early.
            (500, 1_400, 1),
            (500, 1_600, 2),
            // Now on a whole second: one more than the truncated wait.
            (0, 300, 1),
            (0, 1_000, 2),
        ];
        for (phase, wait, expected) in cases {
            let got = retry_after_seconds(RetryAfterRounding::Down, ms(wait), wall(phase));
            assert_eq!(got, expected, "now = x.{phase:03}, wait {wait} ms");
        }
    }

    #[test]
    fn truncate_is_the_wait_rounded_down_whatever_the_phase() {
        for phase in [0, 500, 900] {
            for (wait, expected) in [(0, 0), (300, 0), (999, 0), (1_000, 1), (1_999, 1), (59_400, 59)] {
                let got = retry_after_seconds(RetryAfterRounding::Truncate, ms(wait), wall(phase));
                assert_eq!(got, expected, "now = x.{phase:03}, wait {wait} ms");
            }
        }
    }

    #[test]
    fn down_is_never_more_than_a_second_early_nor_late() {
        for phase in (0..1_000).step_by(7) {
            for wait in (0..5_000).step_by(13) {
                let said = retry_after_seconds(RetryAfterRounding::Down, ms(wait), wall(phase)) * 1_000;
                assert!(said + 1_000 > wait && said <= wait + 1_000, "x.{phase:03} + {wait} ms said {said} ms");
            }
        }
    }

    #[test]
    fn reset_as_seconds_left_or_as_flask_limiters_unix_seconds() {
        assert_eq!(reset_value(ResetForm::SecondsLeft, ms(300), wall(500)), 1);
        assert_eq!(reset_value(ResetForm::SecondsLeft, ms(1_001), wall(500)), 2);
        assert_eq!(reset_value(ResetForm::SecondsLeft, Duration::ZERO, wall(500)), 0);
        // Reset at x+0.8 -> int(x + 1.8) = x + 1; at x+1.2 -> x + 2.
        assert_eq!(reset_value(ResetForm::UnixSeconds, ms(300), wall(500)), 1_791_450_001);
        assert_eq!(reset_value(ResetForm::UnixSeconds, ms(700), wall(500)), 1_791_450_002);
        // A reset exactly on a whole second still gains one: int(x + 1.0 + 1).
        assert_eq!(reset_value(ResetForm::UnixSeconds, ms(500), wall(500)), 1_791_450_002);
    }

    /// `limits` 5.8.0's memory storage, line by line, on integer milliseconds
    /// (its floats never tie; these do, which is where the edges show).
    mod reference {
        /// `FixedWindowRateLimiter` over `MemoryStorage` (`incr`, `get`, `get_expiry`).
        #[derive(Default)]
        pub(super) struct Fixed {
            count: u32,
            expiration: Option<u64>,
        }

        impl Fixed {
            fn get(&mut self, now: u64) -> u32 {
                // if self.expirations.get(key, 0) <= time.time(): pop
                if self.expiration.unwrap_or(0) <= now {
                    self.count = 0;
                    self.expiration = None;
                }
                self.count
            }

            /// `storage.incr(key, expiry) <= amount`
            pub(super) fn hit(&mut self, now: u64, limit: u32, expiry: u64) -> bool {
                self.get(now);
                self.count += 1;
                if self.count == 1 {
                    self.expiration = Some(now + expiry);
                }
                self.count <= limit
            }

            /// `get_window_stats`: (reset, remaining)
            pub(super) fn stats(&mut self, now: u64, limit: u32) -> (u64, u32) {
                let remaining = limit.saturating_sub(self.get(now));
                (self.expiration.unwrap_or(now), remaining)
            }
        }

        /// `MovingWindowRateLimiter` over `MemoryStorage` (`acquire_entry`,
        /// `get_moving_window`); `events` newest first.
        #[derive(Default)]
        pub(super) struct Moving {
            events: Vec<u64>,
        }

        impl Moving {
            pub(super) fn hit(&mut self, now: u64, limit: u32, expiry: u64) -> bool {
                if 1 > limit {
                    return false;
                }
                let entry = self.events.get(limit as usize - 1);
                // entry.atime >= timestamp - expiry, in integers
                if entry.is_some_and(|&atime| atime + expiry >= now) {
                    return false;
                }
                self.events.insert(0, now);
                true
            }

            /// `get_window_stats`: (window_start + expiry, amount - window_items).
            /// `None` where limits reads `events[-1]`, an expired entry that its
            /// 10 ms expiry timer may or may not have pruned yet: only after a
            /// refusal exactly on the edge, which float clocks never hit.
            pub(super) fn stats(&self, now: u64, limit: u32, expiry: u64) -> Option<(u64, u32)> {
                if self.events.is_empty() {
                    return Some((now + expiry, limit));
                }
                // bisect_left(events, -(now - expiry), key=-atime): the first entry with atime <= now - expiry
                let oldest = self.events.iter().position(|&atime| atime + expiry <= now).unwrap_or(self.events.len());
                let start = self.events.get(oldest.checked_sub(1)?)?;
                Some((start + expiry, limit.saturating_sub(oldest as u32)))
            }
        }
    }

    /// Hit times: bursts, exact one-window gaps, ties and pauses.
    fn schedules() -> Vec<(u32, u64, Vec<u64>)> {
        let mut out = Vec::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for case in 0..400 {
            let limit = 1 + (case % 4) as u32;
            let window = [1_000, 250, 3][case % 3];
            let (mut now, mut hits) = (0u64, Vec::new());
            for _ in 0..40 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                now += match x % 8 {
                    0 => window,
                    1 => 0,
                    2 => 1,
                    3 => window / 2,
                    4 => 2 * window + 1,
                    _ => x % (window + 2),
                };
                hits.push(now);
            }
            out.push((limit, window, hits));
        }
        out
    }

    /// Replays `hits` on the model and on `limits`; the count of stats left unread.
    fn replay(kind: LimiterKind, limit: u32, window: u64, hits: &[u64]) -> Result<u32, String> {
        let mut model = Limiter::new(kind, limit, ms(window));
        let (mut fixed, mut moving) = (reference::Fixed::default(), reference::Moving::default());
        let mut edges = 0;
        for &now in hits {
            let (allowed, stats) = match kind {
                LimiterKind::FixedWindow => (fixed.hit(now, limit, window), Some(fixed.stats(now, limit))),
                _ => (moving.hit(now, limit, window), moving.stats(now, limit, window)),
            };
            let verdict = model.hit(ms(now)) == Verdict::Allowed;
            let standing = model.standing(ms(now));
            let ours = (now + standing.reset.as_millis() as u64, standing.remaining);
            let Some(theirs) = stats else {
                edges += 1;
                if verdict != allowed {
                    return Err(format!("{kind:?}: hit at {now} ms of {hits:?}: limits allowed = {allowed}"));
                }
                continue;
            };
            if (verdict, ours) != (allowed, theirs) {
                return Err(format!(
                    "{kind:?} limit {limit} per {window} ms, hit at {now} ms of {hits:?}: limits says (allowed, (reset, remaining)) = {:?}, the model {:?}",
                    (allowed, theirs),
                    (verdict, ours)
                ));
            }
        }
        Ok(edges)
    }

    #[test]
    fn the_windows_are_limits_own_hit_for_hit() {
        let (mut hits_checked, mut edges) = (0, 0);
        for (limit, window, hits) in schedules() {
            replay(LimiterKind::FixedWindow, limit, window, &hits).unwrap();
            edges += replay(LimiterKind::MovingWindow, limit, window, &hits).unwrap();
            hits_checked += hits.len();
        }
        // The edge is rare enough that nearly every stat is compared.
        assert!(edges * 20 < hits_checked as u32, "{edges} of {hits_checked} moving-window stats unread");
    }

    #[test]
    fn negative_control_the_sliding_window_is_not_limits_moving_one() {
        // The replay can fail: the sliding window admits on the edge.
        let disagree =
            schedules().iter().filter(|(l, w, h)| replay(LimiterKind::SlidingWindow, *l, *w, h).is_err()).count();
        assert!(disagree > 0, "no schedule tells the sliding window from limits' moving window");
        let e = replay(LimiterKind::SlidingWindow, 1, 1_000, &[0, 1_000]).unwrap_err();
        assert!(e.contains("hit at 1000 ms") && e.contains("limits allowed = false"), "{e}");
    }

    #[test]
    fn the_html_page_is_werkzeugs_with_limits_wording() {
        assert_eq!(
            html_page(30, ms(1_000)),
            "<!doctype html>\n<html lang=en>\n<title>429 Too Many Requests</title>\n<h1>Too Many Requests</h1>\n<p>30 per 1 second</p>\n"
        );
        assert!(html_page(120, ms(60_000)).contains("<p>120 per 1 minute</p>"));
        assert!(html_page(5, ms(90_000)).contains("<p>5 per 90 second</p>"));
        assert!(html_page(5, ms(7_200_000)).contains("<p>5 per 2 hour</p>"));
        assert!(html_page(5, ms(250)).contains("<p>5 per 250 millisecond</p>"));
        assert!(html_page(5, ms(172_800_000)).contains("<p>5 per 2 day</p>"));
        assert!(html_page(5, ms(1_500)).contains("<p>5 per 1500 millisecond</p>"));
        assert!(html_page(5, Duration::ZERO).contains("<p>5 per 0 millisecond</p>"));
    }

    /// The names serde gives the values of `T` (its derive's own list),
    /// read by a deserializer that asks for an enum and keeps the list.
    fn serde_names<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
        use serde::de::{Error as _, Visitor};
        struct Names(Option<&'static [&'static str]>);
        impl<'de> serde::Deserializer<'de> for &mut Names {
            type Error = serde::de::value::Error;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(Self::Error::custom("not an enum"))
            }
            fn deserialize_enum<V: Visitor<'de>>(
                self,
                _: &'static str,
                variants: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0 = Some(variants);
                Err(Self::Error::custom("names kept"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
                option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier ignored_any
            }
        }
        let mut names = Names(None);
        let _ = T::deserialize(&mut names);
        names.0.expect("an enum")
    }

    use super::registry::{Habit, KNOBS, names};
    use crate::sim::world::api::{
        AdviceForm, ApiConfig, DateForm, Dialect, Envelope, RateLimitFields, RateLimitedBody, ResetForm,
        RetryAfterRounding,
    };

    fn check_habit<H: Habit + serde::Serialize + serde::de::DeserializeOwned>() {
        let mut listed = names::<H>();
        for h in H::ALL {
            let serde = serde_json::to_value(h).expect("serializes");
            assert_eq!(Some(h.name()), serde.as_str(), "{}: {h:?}", H::KEY);
        }
        assert_eq!(H::of(&ApiConfig::default()), H::ALL[0], "{}: the default first", H::KEY);
        let mut serde: Vec<&str> = serde_names::<H>().to_vec();
        listed.sort_unstable();
        serde.sort_unstable();
        assert_eq!(listed, serde, "{}: ALL is every value, once", H::KEY);
    }

    #[test]
    fn every_habit_lists_every_value_as_serde_spells_it() {
        check_habit::<LimiterKind>();
        check_habit::<AdviceForm>();
        check_habit::<DateForm>();
        check_habit::<Envelope>();
        check_habit::<RetryAfterRounding>();
        check_habit::<RateLimitFields>();
        check_habit::<ResetForm>();
        check_habit::<RateLimitedBody>();
        check_habit::<Dialect>();
        let keys: std::collections::BTreeSet<&str> = KNOBS.iter().map(|k| k.key).collect();
        assert_eq!(keys.len(), KNOBS.len());
    }

    /// Negative control: a habit whose `ALL` leaves a value out fails.
    #[test]
    fn a_list_missing_a_value_is_caught() {
        #[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Two {
            Listed,
            Forgotten,
        }
        impl Habit for Two {
            const KEY: &'static str = "api.two";
            const ALL: &'static [Self] = &[Two::Listed];
            fn name(self) -> &'static str {
                match self {
                    Two::Listed => "listed",
                    Two::Forgotten => "forgotten",
                }
            }
            fn of(_: &ApiConfig) -> Self {
                Two::Listed
            }
        }
        assert_eq!(serde_names::<Two>(), ["listed", Two::Forgotten.name()]);
        assert!(std::panic::catch_unwind(check_habit::<Two>).is_err());
    }
}
