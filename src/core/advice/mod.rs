//! Every way a server says "wait", read into one [`Advice`].
//!
//! One small module per dialect; [`read_advice`] asks them in the order of
//! precedence (docs/DESIGN.md, "Rate-limit dialects"), and the first that
//! gives a wait wins:
//!
//! 1. `Retry-After` ([`retry_after`]): the draft says it "MUST take
//!    precedence" over the `RateLimit` fields;
//! 2. `retry-after-ms` ([`retry_after_ms`]: OpenAI, Azure OpenAI);
//! 3. the body's `error.retry_after_seconds`, then `error.resetAt`;
//! 4. the IETF `RateLimit` field ([`structured`]): an RFC 9651 List
//!    (`"default";r=0;t=30`, draft -08 to -11), else the draft -07
//!    Dictionary (`limit=5, remaining=0, reset=37`);
//! 5. `RateLimit-Remaining: 0` with `RateLimit-Reset` (draft -06), then
//!    `X-RateLimit-Remaining: 0` with `X-RateLimit-Reset` ([`counters`]);
//!    a reset of 10⁹ or more is a Unix time (GitHub, Flask-Limiter);
//! 6. OpenAI's `x-ratelimit-reset-{requests,tokens}` with the matching
//!    remaining at 0 ([`openai`]): an *upper bound* on the wait, not a
//!    lower one ([`AdviceSource::is_upper_bound`]).
//!
//! Only exhausted quotas bound the wait (remaining 0), and of several the
//! longest. Malformed fields are ignored. Nothing here reads a clock, draws
//! randomness or panics on input: time is an argument.

pub mod counters;
pub mod openai;
pub mod retry_after;
pub mod retry_after_ms;
pub mod structured;

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use serde::Serialize;

use super::body::ErrorEnvelope;

/// Where an advised wait came from: the dialect the server spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AdviceSource {
    /// `Retry-After: 12`
    HeaderSeconds,
    /// `Retry-After: <HTTP-date>` in any of RFC 9110's three forms.
    HeaderDate,
    /// `error.retry_after_seconds` in the body.
    BodySeconds,
    /// `error.resetAt` in the body.
    BodyReset,
    /// `retry-after-ms: 1500` (OpenAI, Azure OpenAI).
    RetryAfterMs,
    /// The IETF `RateLimit` field as an RFC 9651 List,
    /// `RateLimit: "default";r=0;t=30` (draft -08 to -11, express-rate-limit
    /// `draft-8`): the longest `t` of the items with `r=0`.
    RateLimitField,
    /// The IETF draft -07's `RateLimit` Dictionary,
    /// `RateLimit: limit=5, remaining=0, reset=37` (express-rate-limit
    /// `draft-7`): `reset` when `remaining=0`.
    RateLimitDictionary,
    /// `RateLimit-Remaining: 0` and `RateLimit-Reset: 37` in seconds (draft
    /// -06, express-rate-limit `draft-6`, gateways).
    RateLimitReset,
    /// `X-RateLimit-Remaining: 0` and `X-RateLimit-Reset: 37` in seconds
    /// (@fastify/rate-limit).
    XRateLimitReset,
    /// `RateLimit-Remaining: 0` or `X-RateLimit-Remaining: 0` with a reset in
    /// Unix time (GitHub's primary limit, Flask-Limiter, express-rate-limit's
    /// legacy headers), measured against the response's `Date`.
    ResetUnixTime,
    /// OpenAI's `x-ratelimit-reset-requests` / `-tokens` (`1s`, `6m0s`) with
    /// the matching remaining at 0: the time until the limit is back to its
    /// initial state, an upper bound on the wait.
    #[serde(rename = "openai_reset")]
    OpenAiReset,
    /// No usable advice: the policy's backoff decides.
    None,
}

impl AdviceSource {
    /// Whether the source always states its wait in whole seconds (a
    /// delta-seconds value, an Integer `t` or `reset`, or an instant read
    /// against a whole-second `Date`), so the true wait may be up to a
    /// second longer than said.
    pub fn surely_whole_seconds(self) -> bool {
        matches!(
            self,
            AdviceSource::HeaderSeconds
                | AdviceSource::HeaderDate
                | AdviceSource::RateLimitField
                | AdviceSource::RateLimitDictionary
                | AdviceSource::ResetUnixTime
        )
    }

    /// Whether the source may state its wait in whole seconds: those of
    /// [`surely_whole_seconds`](Self::surely_whole_seconds), and the numbers
    /// that may carry a fraction (a body's `retry_after_seconds`,
    /// `RateLimit-Reset`, `X-RateLimit-Reset`): whole when they have none.
    pub fn maybe_whole_seconds(self) -> bool {
        self.surely_whole_seconds()
            || matches!(self, AdviceSource::BodySeconds | AdviceSource::RateLimitReset | AdviceSource::XRateLimitReset)
    }

    /// Whether the wait is an upper bound (the limit is surely back by
    /// then, maybe long before) rather than the least wait: the policy then
    /// waits its backoff, cut to the bound (docs/DESIGN.md).
    pub fn is_upper_bound(self) -> bool {
        self == AdviceSource::OpenAiReset
    }
}

/// What the `Retry-After` header said, independent of which source was finally used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum HeaderState {
    /// No `Retry-After` field line.
    Missing,
    /// At least one field line was valid (the largest valid wait was taken).
    Valid,
    /// Field lines were present but none was valid.
    Invalid {
        /// Why the first invalid line was rejected, for the trace.
        reason: String,
    },
}

/// The advised wait for one response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advice {
    /// Where the wait came from: a header of some dialect, the body, or nowhere.
    pub source: AdviceSource,
    /// The advised wait before any jitter; `None` exactly when `source` is
    /// `None`. An upper bound when [`AdviceSource::is_upper_bound`].
    pub wait: Option<Duration>,
    /// What the `Retry-After` lines said, even when another source's advice won.
    pub header: HeaderState,
    /// True when the chosen wait is a date (`HeaderDate`, `BodyReset`,
    /// `ResetUnixTime`) measured against the response's own valid `Date` header.
    pub server_date_used: bool,
}

impl Advice {
    /// No advice at all (e.g. a transport error).
    pub fn none() -> Advice {
        Advice { source: AdviceSource::None, wait: None, header: HeaderState::Missing, server_date_used: false }
    }

    /// Whether the wait was given in whole seconds, so that the true wait
    /// may be up to a second longer: `Retry-After` in either form (a
    /// delta-seconds value of N means somewhere in [N, N+1) s, and an
    /// HTTP-date and the `Date` it is read against have whole seconds), the
    /// `RateLimit` field's `t` and the draft -07 `reset` (Integers), a reset
    /// in Unix seconds, and a body's `retry_after_seconds` or a
    /// `RateLimit-Reset` / `X-RateLimit-Reset` without a fraction. A
    /// `resetAt` is not (it carries milliseconds), nor `retry-after-ms`, nor
    /// an upper bound.
    pub fn in_whole_seconds(&self) -> bool {
        if self.source.surely_whole_seconds() {
            return true;
        }
        self.source.maybe_whole_seconds() && self.wait.is_some_and(|w| w.subsec_nanos() == 0)
    }
}

/// Reads the advice of one response in every dialect, the first in the
/// order of precedence that gives a wait (see the [module docs](self)):
/// its headers, its `Date`, and its parsed error body; `received_at` is the
/// client's wall clock at receipt (dates are measured against the
/// response's own valid `Date` when there is one).
pub fn read_advice(headers: &HeaderMap, body: Option<&ErrorEnvelope>, received_at: SystemTime) -> Advice {
    let server_date = retry_after::server_date(headers, received_at);
    let reference = server_date.unwrap_or(received_at);
    let (retry_after, header) = retry_after::read_field(headers, reference);
    let found = retry_after
        .or_else(|| retry_after_ms::read(headers).map(|w| (AdviceSource::RetryAfterMs, w)))
        .or_else(|| body.and_then(|b| retry_after::read_body(b, reference)))
        .or_else(|| structured::advice(headers))
        .or_else(|| counters::advice(headers, reference))
        .or_else(|| openai::advice(headers).map(|w| (AdviceSource::OpenAiReset, w)));
    // Only a date is measured against the server's clock; seconds are relative already.
    let dated = |source| {
        server_date.is_some()
            && matches!(source, AdviceSource::HeaderDate | AdviceSource::BodyReset | AdviceSource::ResetUnixTime)
    };
    match found {
        Some((source, wait)) => Advice { source, wait: Some(wait), header, server_date_used: dated(source) },
        None => Advice { header, ..Advice::none() },
    }
}

/// Whether the headers show a rate limit with nothing left: a
/// `RateLimit-Remaining` or `X-RateLimit-Remaining` of 0, a `RateLimit`
/// item with `r=0` (or the draft -07 `remaining=0`), or an OpenAI
/// `x-ratelimit-remaining-*` of 0. With advice, it makes a 403 throttling
/// (GitHub's primary limit answers 403 or 429 with `x-ratelimit-remaining: 0`).
pub fn limit_exhausted(headers: &HeaderMap) -> bool {
    counters::exhausted(headers) || structured::exhausted(headers) || openai::exhausted(headers)
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn read(pairs: &[(&'static str, &str)]) -> (AdviceSource, Option<Duration>) {
        let a = read_advice(&headers(pairs), None, at(1_791_450_000));
        (a.source, a.wait)
    }

    fn s(n: u64) -> Option<Duration> {
        Some(Duration::from_secs(n))
    }

    const RATELIMIT: (&str, &str) = ("ratelimit", r#""default";r=0;t=30"#);
    const DRAFT6: [(&str, &str); 2] = [("ratelimit-remaining", "0"), ("ratelimit-reset", "40")];
    const X: [(&str, &str); 2] = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "50")];
    const OPENAI: [(&str, &str); 2] = [("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "6m0s")];

    #[test]
    fn each_dialect_alone() {
        assert_eq!(read(&[("retry-after", "5")]), (AdviceSource::HeaderSeconds, s(5)));
        assert_eq!(
            read(&[("retry-after-ms", "1500")]),
            (AdviceSource::RetryAfterMs, Some(Duration::from_millis(1500)))
        );
        assert_eq!(read(&[RATELIMIT]), (AdviceSource::RateLimitField, s(30)));
        assert_eq!(
            read(&[("ratelimit", "limit=5, remaining=0, reset=37")]),
            (AdviceSource::RateLimitDictionary, s(37))
        );
        assert_eq!(read(&DRAFT6), (AdviceSource::RateLimitReset, s(40)));
        assert_eq!(read(&X), (AdviceSource::XRateLimitReset, s(50)));
        assert_eq!(read(&OPENAI), (AdviceSource::OpenAiReset, s(360)));
        assert_eq!(read(&[]), (AdviceSource::None, None));
    }

    /// Every dialect present at once, then each removed in turn: the next in
    /// the order of precedence speaks.
    #[test]
    fn precedence_follows_the_documented_order() {
        let mut all = vec![("retry-after", "5"), ("retry-after-ms", "1500"), RATELIMIT];
        all.extend(DRAFT6);
        all.extend(X);
        all.extend(OPENAI);
        let order = [
            (AdviceSource::HeaderSeconds, s(5)),
            (AdviceSource::RetryAfterMs, Some(Duration::from_millis(1500))),
            (AdviceSource::RateLimitField, s(30)),
            (AdviceSource::RateLimitReset, s(40)),
            // A reset without its remaining is no advice: the next family speaks.
            (AdviceSource::XRateLimitReset, s(50)),
            (AdviceSource::XRateLimitReset, s(50)),
            (AdviceSource::OpenAiReset, s(360)),
            (AdviceSource::OpenAiReset, s(360)),
            (AdviceSource::None, None),
        ];
        for (skip, expected) in order.iter().enumerate() {
            assert_eq!(read(&all[skip..]), *expected, "without the first {skip} lines");
        }
    }

    #[test]
    fn retry_after_wins_over_a_longer_ratelimit_field() {
        // The draft: Retry-After MUST take precedence over the reset parameter.
        let a = read_advice(&headers(&[("retry-after", "2"), RATELIMIT]), None, at(0));
        assert_eq!((a.source, a.wait, a.header), (AdviceSource::HeaderSeconds, s(2), HeaderState::Valid));
        // An invalid Retry-After lets the next dialect speak, and says why.
        let a = read_advice(&headers(&[("retry-after", "soon"), RATELIMIT]), None, at(0));
        assert_eq!((a.source, a.wait), (AdviceSource::RateLimitField, s(30)));
        assert!(matches!(a.header, HeaderState::Invalid { .. }));
    }

    #[test]
    fn the_body_comes_before_the_quota_dialects() {
        let body = ErrorEnvelope { retry_after_seconds: Some(serde_json::json!(3)), ..ErrorEnvelope::default() };
        let a = read_advice(&headers(&[RATELIMIT]), Some(&body), at(0));
        assert_eq!((a.source, a.wait), (AdviceSource::BodySeconds, s(3)));
    }

    #[test]
    fn a_unix_reset_is_measured_against_the_servers_date() {
        let gh = [
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1791450023"),
            ("date", "Thu, 08 Oct 2026 09:00:00 GMT"),
        ];
        // The client's clock is 100 s ahead: the server's Date cancels it.
        let a = read_advice(&headers(&gh), None, at(1_791_450_100));
        assert_eq!((a.source, a.wait, a.server_date_used), (AdviceSource::ResetUnixTime, s(23), true));
        assert!(a.in_whole_seconds());
        let a = read_advice(&headers(&gh[..2]), None, at(1_791_450_020));
        assert_eq!((a.source, a.wait, a.server_date_used), (AdviceSource::ResetUnixTime, s(3), false));
    }

    #[test]
    fn which_dialects_are_whole_seconds() {
        let whole = |pairs: &[(&'static str, &str)]| read_advice(&headers(pairs), None, at(0)).in_whole_seconds();
        assert!(whole(&[RATELIMIT]));
        assert!(whole(&[("ratelimit", "limit=5, remaining=0, reset=37")]));
        assert!(whole(&DRAFT6));
        assert!(!whole(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "1.5")]));
        assert!(!whole(&[("retry-after-ms", "2000")]));
        assert!(!whole(&OPENAI));
        assert!(AdviceSource::OpenAiReset.is_upper_bound() && !AdviceSource::RateLimitField.is_upper_bound());
    }

    proptest::proptest! {
        /// Any bytes in any dialect's fields: never a panic, and a wait
        /// exactly when a source is named.
        #[test]
        fn any_field_bytes_never_panic(
            values in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 10),
            received in 0u64..4_000_000_000,
        ) {
            const NAMES: [&str; 10] = [
                "retry-after", "retry-after-ms", "ratelimit", "ratelimit-remaining", "ratelimit-reset",
                "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-remaining-tokens",
                "x-ratelimit-reset-tokens", "date",
            ];
            let mut h = HeaderMap::new();
            for (name, value) in NAMES.iter().zip(&values) {
                if let Ok(v) = HeaderValue::from_bytes(value) {
                    h.append(*name, v);
                }
            }
            let a = read_advice(&h, None, at(received));
            proptest::prop_assert_eq!(a.wait.is_some(), a.source != AdviceSource::None);
            let _ = limit_exhausted(&h);
        }
    }

    #[test]
    fn exhausted_limits_in_any_dialect() {
        assert!(limit_exhausted(&headers(&[("x-ratelimit-remaining", "0")])));
        assert!(limit_exhausted(&headers(&[("ratelimit-remaining", "0")])));
        assert!(limit_exhausted(&headers(&[RATELIMIT])));
        assert!(limit_exhausted(&headers(&[("x-ratelimit-remaining-tokens", "0")])));
        assert!(!limit_exhausted(&headers(&[("x-ratelimit-remaining", "4999"), ("retry-after", "5")])));
        assert!(!limit_exhausted(&HeaderMap::new()));
    }
}
