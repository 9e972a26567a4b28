//! The counter headers: `RateLimit-Limit` / `-Remaining` / `-Reset` (the
//! IETF draft -06 and before, express-rate-limit `draft-6`) and
//! `X-RateLimit-*` (@fastify/rate-limit, GitHub, Flask-Limiter,
//! express-rate-limit's legacy headers).
//!
//! - The first number of a field is used (`100, 100;w=60` reads 100).
//! - `Reset` is delta-seconds, decimals allowed (rounded up to the
//!   millisecond: never early). A value of at least 10⁹ is a Unix time in
//!   seconds (GitHub, Flask-Limiter, express-rate-limit's legacy
//!   `Math.ceil(resetTime / 1000)`), of at least 10¹² one in milliseconds.
//!   Huge values saturate (and are then a Unix time far away).
//! - As advice (in [`read_advice`](super::read_advice)): a family whose `Remaining` is 0 and whose
//!   `Reset` is readable; a Unix time is measured against the response's
//!   own `Date` when valid, else against the client's clock at receipt.
//! - For the pacing gate ([`RateLimitHeaders::read`]): each field on its
//!   own, `RateLimit-*` else `X-RateLimit-*`; a Unix time only against the
//!   answer's `Date` (the gate has no wall clock).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use http::header::DATE;

use super::AdviceSource;
use super::retry_after::parse_http_date;

/// The two families' prefixes, in the order they are read.
const FAMILIES: [(&str, AdviceSource); 2] =
    [("ratelimit-", AdviceSource::RateLimitReset), ("x-ratelimit-", AdviceSource::XRateLimitReset)];

/// A `Reset` value as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// Delta-seconds (rounded up to the millisecond).
    In(Duration),
    /// A Unix time (since the epoch), in whole seconds or milliseconds.
    At(Duration),
}

/// Parses a `Reset` value: delta-seconds (decimals allowed), or a Unix time
/// in seconds (≥ 10⁹) or milliseconds (≥ 10¹²). Saturates; anything but
/// `1*DIGIT [ "." 1*DIGIT ]` is `None`.
pub fn parse_reset(text: &str) -> Option<Reset> {
    let (whole, frac) = text.split_once('.').map_or((text, None), |(w, f)| (w, Some(f)));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !frac.is_none_or(digits) {
        return None;
    }
    let n = whole.bytes().fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0')));
    if n >= 1_000_000_000_000 {
        return Some(Reset::At(Duration::from_millis(n)));
    }
    if n >= 1_000_000_000 {
        return Some(Reset::At(Duration::from_secs(n)));
    }
    // Fractions round up to the millisecond: never early.
    let frac = frac.unwrap_or("").as_bytes();
    let ms = frac.iter().chain(b"000").take(3).fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    let up = frac.iter().skip(3).any(|&d| d != b'0');
    Some(Reset::In(Duration::from_secs(n) + Duration::from_millis(ms + u64::from(up))))
}

/// A reset value as the pacing gate reads it: the wait, and whether it was
/// a Unix time measured against `Date` (whole seconds against whole
/// seconds). A Unix time without a `Date` is `None`.
pub fn reset_value(text: &str, date: impl FnOnce() -> Option<SystemTime>) -> Option<(Duration, bool)> {
    match parse_reset(text)? {
        Reset::In(wait) => Some((wait, false)),
        Reset::At(at) => Some((at.saturating_sub(date()?.duration_since(UNIX_EPOCH).ok()?), true)),
    }
}

/// The first item of a list field, without parameters: `100, 100;w=60` → `100`.
fn first_number(value: &str) -> Option<&str> {
    let first = value.split([',', ';']).next()?.trim();
    (!first.is_empty()).then_some(first)
}

fn count(value: &str) -> Option<u32> {
    first_number(value)?.parse::<u32>().ok()
}

/// One field of one family, as text.
fn field<'a>(headers: &'a HeaderMap, prefix: &str, name: &str) -> Option<&'a str> {
    headers.get(format!("{prefix}{name}")).and_then(|v| v.to_str().ok())
}

/// What one answer's counter headers say about the window (the pacing gate's reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateLimitHeaders {
    /// `RateLimit-Limit`: attempts per window.
    pub limit: Option<u32>,
    /// `RateLimit-Remaining`: attempts left in this window.
    pub remaining: Option<u32>,
    /// `RateLimit-Reset`: until the window is whole again.
    pub reset: Option<Duration>,
    /// The reset was a Unix time measured against the answer's `Date`: both
    /// are whole seconds, so `reset` may be up to 2 s late (see "Whole-second
    /// servers" in [`gate::pacing`](crate::gate::pacing)).
    pub reset_from_date: bool,
}

impl RateLimitHeaders {
    /// Reads `RateLimit-*`, else `X-RateLimit-*` (each field on its own).
    pub fn read(headers: &HeaderMap) -> RateLimitHeaders {
        let either = |name: &str| FAMILIES.iter().find_map(|(prefix, _)| field(headers, prefix, name));
        let date = || headers.get(DATE).and_then(|v| parse_http_date(v.as_bytes(), UNIX_EPOCH));
        let reset = either("reset").and_then(|v| reset_value(first_number(v)?, date));
        RateLimitHeaders {
            limit: either("limit").and_then(count),
            remaining: either("remaining").and_then(count),
            reset: reset.map(|(wait, _)| wait),
            reset_from_date: reset.is_some_and(|(_, from_date)| from_date),
        }
    }
}

/// The advice of the counter headers: the first family (draft -06's
/// `RateLimit-*`, then `X-RateLimit-*`) whose `Remaining` is 0 and whose
/// `Reset` is readable. A Unix time is measured against `reference` (the
/// response's `Date`, else the client's clock at receipt).
pub(super) fn advice(headers: &HeaderMap, reference: SystemTime) -> Option<(AdviceSource, Duration)> {
    FAMILIES.iter().find_map(|&(prefix, source)| {
        if field(headers, prefix, "remaining").and_then(count) != Some(0) {
            return None;
        }
        match parse_reset(first_number(field(headers, prefix, "reset")?)?)? {
            Reset::In(wait) => Some((source, wait)),
            Reset::At(at) => {
                let at = UNIX_EPOCH.checked_add(at).unwrap_or(UNIX_EPOCH + Duration::from_secs(u64::MAX >> 2));
                Some((AdviceSource::ResetUnixTime, super::retry_after::wait_until(at, reference)))
            }
        }
    })
}

/// Whether a family's `Remaining` is 0.
pub(super) fn exhausted(headers: &HeaderMap) -> bool {
    FAMILIES.iter().any(|(prefix, _)| field(headers, prefix, "remaining").and_then(count) == Some(0))
}

#[cfg(test)]
mod tests {
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

    const DATE_TEXT: &str = "Thu, 08 Oct 2026 09:00:00 GMT"; // 1791450000

    #[test]
    fn reset_forms() {
        let s = Duration::from_secs;
        assert_eq!(parse_reset("37"), Some(Reset::In(s(37))));
        assert_eq!(parse_reset("1.25"), Some(Reset::In(Duration::from_millis(1250))));
        assert_eq!(parse_reset("0.0001"), Some(Reset::In(Duration::from_millis(1))), "rounded up");
        assert_eq!(parse_reset("999999999"), Some(Reset::In(s(999_999_999))));
        assert_eq!(parse_reset("1000000000"), Some(Reset::At(s(1_000_000_000))));
        assert_eq!(parse_reset("1791450023000"), Some(Reset::At(s(1_791_450_023))));
        for bad in ["-1", "soon", "1e3", "", "1.", ".5", "0x10", "1 2", "+3"] {
            assert_eq!(parse_reset(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn huge_resets_saturate_into_a_far_unix_time() {
        let huge = "123456789012345678901234567890";
        assert_eq!(parse_reset(huge), Some(Reset::At(Duration::from_millis(u64::MAX))));
        let h = headers(&[("ratelimit-remaining", "0"), ("ratelimit-reset", huge)]);
        let (source, wait) = advice(&h, at(1_791_450_000)).unwrap();
        assert_eq!(source, AdviceSource::ResetUnixTime);
        assert!(wait > Duration::from_secs(100 * 365 * 86_400), "{wait:?}");
    }

    #[test]
    fn advice_needs_remaining_zero() {
        let h = headers(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "37")]);
        assert_eq!(advice(&h, at(0)), Some((AdviceSource::RateLimitReset, Duration::from_secs(37))));
        let left = headers(&[("ratelimit-remaining", "3"), ("ratelimit-reset", "37")]);
        assert_eq!(advice(&left, at(0)), None, "a quota with units left does not bound the wait");
        let unknown = headers(&[("ratelimit-reset", "37")]);
        assert_eq!(advice(&unknown, at(0)), None);
        let x = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "2.5")]);
        assert_eq!(advice(&x, at(0)), Some((AdviceSource::XRateLimitReset, Duration::from_millis(2500))));
        let bad = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "soon")]);
        assert_eq!(advice(&bad, at(0)), None, "a malformed reset is ignored");
    }

    #[test]
    fn draft6_comes_before_x_ratelimit() {
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "90"),
            ("ratelimit-remaining", "0"),
            ("ratelimit-reset", "30"),
        ]);
        assert_eq!(advice(&h, at(0)), Some((AdviceSource::RateLimitReset, Duration::from_secs(30))));
    }

    #[test]
    fn github_unix_reset_against_date_or_the_client_clock() {
        let gh = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1791450023")]);
        // No Date: against the reference the caller gives (the client's clock).
        assert_eq!(advice(&gh, at(1_791_450_020)), Some((AdviceSource::ResetUnixTime, Duration::from_secs(3))));
        // A past reset is a zero wait.
        assert_eq!(advice(&gh, at(1_791_450_100)), Some((AdviceSource::ResetUnixTime, Duration::ZERO)));
        let mut dated = gh.clone();
        dated.insert(DATE, HeaderValue::from_static(DATE_TEXT));
        // The gate reads it against Date only.
        assert_eq!(RateLimitHeaders::read(&dated).reset, Some(Duration::from_secs(23)));
        assert_eq!(RateLimitHeaders::read(&gh).reset, None);
        assert!(exhausted(&gh));
        assert!(!exhausted(&headers(&[("x-ratelimit-remaining", "1")])));
    }
}
