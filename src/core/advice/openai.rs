//! OpenAI's (and Azure OpenAI's) `x-ratelimit-{remaining,reset}-{requests,tokens}`.
//!
//! OpenAI's guide: `x-ratelimit-reset-requests` is "the time until the rate
//! limit (based on requests) resets to its initial state", written as a
//! duration: `1s`, `12ms`, `6m0s`. The limits refill continuously, so the
//! next request may pass long before: the reset is an *upper bound* on the
//! wait ([`AdviceSource::OpenAiReset`](super::AdviceSource::OpenAiReset);
//! the policy waits its backoff cut to it). It counts only for a resource
//! whose `x-ratelimit-remaining-*` is 0; with both exhausted, the longer
//! bound (both must be back).
//!
//! A duration is one or more `number unit` pairs with no space, the number
//! `1*DIGIT [ "." 1*DIGIT ]` and the unit `h`, `m`, `s`, `ms`, `us`, `µs` or
//! `ns` (Go's `time.Duration` text, which `6m0s` is). It saturates; a
//! fraction below the nanosecond rounds up. Anything else is ignored.

use std::time::Duration;

use http::HeaderMap;

/// The two resources OpenAI counts.
const RESOURCES: [&str; 2] = ["requests", "tokens"];

/// Parses a duration such as `6m0s`, `1.5s` or `12ms`; saturates at `Duration::MAX`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut rest = text.trim_matches([' ', '\t']).as_bytes();
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let whole_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if whole_len == 0 {
            return None;
        }
        let (whole, after) = rest.split_at(whole_len);
        let (frac, after) = match after.strip_prefix(b".") {
            Some(f) => {
                let n = f.iter().take_while(|b| b.is_ascii_digit()).count();
                if n == 0 {
                    return None;
                }
                f.split_at(n)
            }
            None => (&b""[..], after),
        };
        let units: [(&[u8], u128); 7] = [
            (b"ms", 1_000_000),
            (b"us", 1_000),
            ("\u{b5}s".as_bytes(), 1_000),
            (b"ns", 1),
            (b"h", 3_600_000_000_000),
            (b"m", 60_000_000_000),
            (b"s", 1_000_000_000),
        ];
        let (unit, nanos) = units.iter().find(|(u, _)| after.starts_with(u))?;
        rest = &after[unit.len()..];
        let n = whole.iter().fold(0u128, |n, d| n.saturating_mul(10).saturating_add(u128::from(d - b'0')));
        // The fraction in nanoseconds, rounded up; 20 digits are more than any unit needs.
        let (mut num, mut den) = (0u128, 1u128);
        for d in frac.iter().take(20) {
            num = num * 10 + u128::from(d - b'0');
            den *= 10;
        }
        let part = n.saturating_mul(*nanos).saturating_add((num * nanos).div_ceil(den));
        total = total.saturating_add(part);
    }
    let secs = u64::try_from(total / 1_000_000_000).unwrap_or(u64::MAX);
    if secs == u64::MAX {
        return Some(Duration::MAX);
    }
    Some(Duration::new(secs, (total % 1_000_000_000) as u32))
}

fn field<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn remaining_zero(headers: &HeaderMap, resource: &str) -> bool {
    field(headers, &format!("x-ratelimit-remaining-{resource}")).is_some_and(|v| v.trim() == "0")
}

/// The upper bound on the wait: the longest reset of the exhausted resources.
pub(super) fn advice(headers: &HeaderMap) -> Option<Duration> {
    RESOURCES
        .iter()
        .filter(|r| remaining_zero(headers, r))
        .filter_map(|r| parse_duration(field(headers, &format!("x-ratelimit-reset-{r}"))?))
        .max()
}

/// Whether a resource's remaining is 0.
pub(super) fn exhausted(headers: &HeaderMap) -> bool {
    RESOURCES.iter().any(|r| remaining_zero(headers, r))
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_guides_examples() {
        assert_eq!(parse_duration("1s"), Some(ms(1000)));
        assert_eq!(parse_duration("12ms"), Some(ms(12)));
        assert_eq!(parse_duration("6m0s"), Some(ms(360_000)));
        assert_eq!(parse_duration("7.66s"), Some(ms(7660)));
        assert_eq!(parse_duration("2m59.56s"), Some(ms(179_560)));
        assert_eq!(parse_duration("1h2m3s"), Some(ms(3_723_000)));
        assert_eq!(parse_duration("1.5ms"), Some(Duration::from_micros(1500)));
        assert_eq!(parse_duration("0.0000000001s"), Some(Duration::from_nanos(1)), "rounded up");
    }

    #[test]
    fn malformed_durations_are_ignored() {
        for bad in ["", "1", "s", "1x", "-1s", "1.s", ".5s", "1 s", "6m 0s", "1s2", "1e3s", "soon"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn huge_durations_saturate() {
        assert_eq!(parse_duration("99999999999999999999999999999999999999999h"), Some(Duration::MAX));
        assert_eq!(parse_duration("18446744073709551615s1s"), Some(Duration::MAX));
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_exhausted_resources_bound_the_wait() {
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        assert_eq!(advice(&h), Some(ms(1000)));
        assert!(exhausted(&h));
        let both = headers(&[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        assert_eq!(advice(&both), Some(ms(360_000)), "both must be back: the longer bound");
        let none = headers(&[("x-ratelimit-remaining-requests", "59"), ("x-ratelimit-reset-requests", "1s")]);
        assert_eq!(advice(&none), None);
        assert!(!exhausted(&none));
        let bad = headers(&[("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "later")]);
        assert_eq!(advice(&bad), None);
    }
}
