//! `retry-after-ms`: OpenAI's and Azure OpenAI's `Retry-After` in milliseconds.
//!
//! The value is `1*DIGIT [ "." 1*DIGIT ]` milliseconds after trimming SP and
//! HTAB (the Stainless SDKs read it as a float; we take no sign and no
//! exponent). A fraction rounds up to the next whole millisecond (never
//! early); a huge value saturates. Several lines: the largest valid one.
//! An invalid line is ignored.

use std::time::Duration;

use http::HeaderMap;

use super::retry_after::trim_ows;

/// The field's name.
pub const RETRY_AFTER_MS: &str = "retry-after-ms";

/// Parses one `retry-after-ms` value: whole milliseconds, a fraction rounded up, saturating.
pub fn parse(value: &[u8]) -> Option<Duration> {
    let v = trim_ows(value);
    let (whole, frac) = match v.iter().position(|&b| b == b'.') {
        Some(i) => (&v[..i], Some(&v[i + 1..])),
        None => (v, None),
    };
    let digits = |d: &[u8]| !d.is_empty() && d.iter().all(u8::is_ascii_digit);
    if !digits(whole) || !frac.is_none_or(digits) {
        return None;
    }
    let ms = whole.iter().fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0')));
    let up = frac.is_some_and(|f| f.iter().any(|&d| d != b'0'));
    Some(Duration::from_millis(ms.saturating_add(u64::from(up))))
}

/// The largest valid `retry-after-ms` line, if any.
pub fn read(headers: &HeaderMap) -> Option<Duration> {
    headers.get_all(RETRY_AFTER_MS).iter().filter_map(|v| parse(v.as_bytes())).max()
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn whole_and_fractional_milliseconds() {
        assert_eq!(parse(b"1500"), Some(Duration::from_millis(1500)));
        assert_eq!(parse(b" 0\t"), Some(Duration::ZERO));
        assert_eq!(parse(b"1500.2"), Some(Duration::from_millis(1501)), "rounded up, never early");
        assert_eq!(parse(b"1500.000"), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn malformed_values_are_ignored() {
        for bad in ["", "-1", "+5", "1e3", "1.", ".5", "0x10", "soon", "1 2", "1,5", "١"] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn huge_values_saturate() {
        assert_eq!(parse(b"99999999999999999999999999"), Some(Duration::from_millis(u64::MAX)));
        assert_eq!(parse(b"18446744073709551615.5"), Some(Duration::from_millis(u64::MAX)));
    }

    #[test]
    fn of_several_lines_the_largest_valid_one() {
        let mut h = HeaderMap::new();
        for v in ["1200", "soon", "1500", "900"] {
            h.append(RETRY_AFTER_MS, HeaderValue::from_static(v));
        }
        assert_eq!(read(&h), Some(Duration::from_millis(1500)));
        assert_eq!(read(&HeaderMap::new()), None);
    }
}
