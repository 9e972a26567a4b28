//! `Retry-After` (and the body's hints) to an advised wait.
//!
//! Our stance where peer libraries disagree (see docs/DESIGN.md):
//!
//! - **delta-seconds** is strictly `1*DIGIT` in ASCII after trimming SP/HTAB; signs, fractions,
//!   exponents, hex, non-ASCII digits and the empty string are invalid. Huge values saturate at
//!   `u64::MAX` seconds: the policy's "too long" rule then gives up, which is what the server
//!   meant.
//! - **HTTP-date** in all three RFC 9110 forms. A date's wait is measured against the response's
//!   own valid `Date` header when there is one (this cancels client/server clock skew, since both
//!   dates come from the same clock), else against the client's wall clock at receipt. A past date
//!   is a zero wait (the policy still adds jitter).
//! - **Several field lines**: each line is one value (never split on commas: IMF-fixdate contains
//!   one). The largest valid wait wins, so we never retry earlier than any line advised.
//! - **Fallbacks** when no line is valid: body `error.retry_after_seconds`, then body
//!   `error.resetAt`, then no advice (the policy's backoff). [`Advice::header`] still says whether
//!   the header was missing or invalid, so the trace shows why a fallback was used.
//!
//! Time is always an argument; nothing here reads a clock, draws randomness or panics on input.
//!
//! # `httpdate` 1.0.3, as found in its source, and what we do about it
//!
//! - It parses the three forms at fixed byte positions, case-sensitively, `GMT` only — as RFC 9110
//!   requires. asctime accepts the day as `" 6"` or `"06"` (both valid per the grammar).
//! - It rejects impossible dates (`31 Feb`) and a weekday that does not match the date. We keep
//!   that: an internally inconsistent date cannot be trusted, so the header counts as invalid.
//! - It `str::trim`s every ASCII whitespace byte (CR, LF, VT, FF too). We trim only SP/HTAB
//!   ourselves and reject any other control byte before calling it.
//! - RFC 850's two-digit year is a fixed window, `00..=69` → 2000–2069 and `70..=99` → 1970–1999.
//!   RFC 9110 §5.6.7 instead says a year more than 50 years in the future means the previous
//!   century. We resolve the year ourselves, comparing the whole timestamp (not the year number)
//!   with the reference plus 50 years, and hand `httpdate` an equivalent IMF-fixdate, whose
//!   weekday check then applies to the century chosen. Example: relative to 2026, `Monday,
//!   01-Jan-74` is 2074 (a Monday), which `httpdate` alone rejects (1974-01-01 was a Tuesday); from
//!   2026-01-01, `Friday, 31-Dec-76` is 1976 (2076-12-31 is more than 50 years ahead).
//! - It rejects years before 1970 (a valid, past `4DIGIT` year). The Gregorian calendar repeats
//!   exactly every 400 years (146 097 days, a whole number of weeks), so we shift such a year by
//!   400-year cycles, let `httpdate` validate it, and shift the instant back.
//! - It rejects second `60`; RFC 9110 allows the leap second `23:59:60`. We read it as the next
//!   second (the day after at `00:00:00`), never one second early. `60` at another time is invalid.
//!
//! # `humantime` 2.4.0 for `error.resetAt`
//!
//! `parse_rfc3339` accepts `2026-10-17T09:12:31.000Z`; `parse_rfc3339_weak` does too, but also
//! space separators and no offset at all (read as UTC), and silently ignores a non-UTC offset after
//! a fraction (`…31.5+02:00` reads as UTC). The strict one accepts only the offsets `Z` and
//! `+00:00` (not `-00:00`, `+02:00`, lowercase `z`/`t`), yet accepts junk between the seconds and a
//! final `Z` (`…31ZxZ`) and an empty fraction (`…31.Z`); it clamps second `60` to `59` and rejects
//! years before 1970. So we validate the RFC 3339 shape ourselves (`T`/`t`, optional `.1*DIGIT`,
//! `Z`/`z` or `±HH:MM`), hand `parse_rfc3339` a normalised UTC form, then apply the offset, the
//! leap second (+1 s) and the 400-year shift ourselves. Fraction digits beyond nanoseconds are
//! truncated by `humantime`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use http::header::{DATE, RETRY_AFTER};
use serde::Serialize;

use crate::core::body::ErrorEnvelope;

// The advice types and the reader of every dialect live in the parent module; they are
// re-exported here so `core::retry_after::read_advice` keeps working.
pub use super::{Advice, AdviceSource, HeaderState, read_advice};

/// Why a `Retry-After` field value was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvalidRetryAfter {
    /// A short, human explanation, e.g. `"'+5' is neither delta-seconds (1*DIGIT) nor an HTTP-date"`.
    pub reason: String,
}

/// Parses strict delta-seconds: `1*DIGIT` (ASCII) after trimming spaces and tabs; saturates.
pub fn parse_delta_seconds(value: &[u8]) -> Result<u64, InvalidRetryAfter> {
    let digits = trim_ows(value);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(InvalidRetryAfter { reason: format!("{} is not delta-seconds (1*DIGIT)", quote(value)) });
    }
    // Saturating steps are monotone, so the result is exact up to u64::MAX and MAX beyond.
    Ok(digits.iter().fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0'))))
}

/// Parses one `Retry-After` field value: delta-seconds, else an HTTP-date whose wait is
/// `date - reference` (zero for a past date). `reference` also anchors RFC 850's two-digit year.
pub fn parse_retry_after_value(
    value: &[u8],
    reference: SystemTime,
) -> Result<(AdviceSource, Duration), InvalidRetryAfter> {
    if let Ok(secs) = parse_delta_seconds(value) {
        return Ok((AdviceSource::HeaderSeconds, Duration::from_secs(secs)));
    }
    match parse_http_date(value, reference) {
        Some(date) => Ok((AdviceSource::HeaderDate, wait_until(date, reference))),
        None => Err(InvalidRetryAfter {
            reason: format!("{} is neither delta-seconds (1*DIGIT) nor an HTTP-date", quote(value)),
        }),
    }
}

/// Parses an HTTP-date (IMF-fixdate, RFC 850 or asctime) after trimming SP/HTAB, fixing the
/// `httpdate` gaps listed in the module doc. `reference` resolves RFC 850's two-digit year.
pub fn parse_http_date(value: &[u8], reference: SystemTime) -> Option<SystemTime> {
    let s = trim_ows(value);
    if !s.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return None;
    }
    // Normalise to IMF-fixdate (29 bytes) or asctime (24 bytes) with a 4-digit year;
    // `year_at`/`time_at` are where the year and `HH:MM:SS` sit in `buf`.
    let (mut fixed, mut rfc850);
    let (buf, year, year_at, time_at): (&mut [u8], _, _, _) = match s.len() {
        29 => {
            fixed = [0; 29];
            fixed.copy_from_slice(s);
            (&mut fixed, digits_value(&s[12..16])?, 12, 17)
        }
        24 => {
            fixed = [0; 29];
            fixed[..24].copy_from_slice(s);
            (&mut fixed[..24], digits_value(&s[20..24])?, 20, 11)
        }
        _ => {
            let year;
            (rfc850, year) = rfc850_to_imf(s, reference)?;
            (&mut rfc850, year, 12, 17)
        }
    };
    let leap = &buf[time_at..time_at + 8] == b"23:59:60";
    if leap {
        buf[time_at + 6..time_at + 8].copy_from_slice(b"59");
    }
    // A year from 1970 to 9999: four digits.
    let (year, cycles) = into_supported_years(year);
    for (digit, place) in buf[year_at..year_at + 4].iter_mut().zip([1000, 100, 10, 1]) {
        *digit = b'0' + u8::try_from(year / place % 10).ok()?;
    }
    let date = httpdate::parse_http_date(std::str::from_utf8(buf).ok()?).ok()?;
    shift_cycles(date, cycles)?.checked_add(Duration::from_secs(u64::from(leap)))
}

/// Reads the `Retry-After` field lines against `reference` (the server's `Date`, else the
/// client's clock at receipt): the largest valid wait (on a tie the earlier line), and what the
/// lines said.
pub(super) fn read_field(
    headers: &HeaderMap,
    reference: SystemTime,
) -> (Option<(AdviceSource, Duration)>, HeaderState) {
    let mut best: Option<(AdviceSource, Duration)> = None;
    let mut first_invalid: Option<String> = None;
    for value in headers.get_all(RETRY_AFTER) {
        match parse_retry_after_value(value.as_bytes(), reference) {
            // Strictly larger: on a tie the earlier line is kept.
            Ok((source, wait)) if best.is_none_or(|(_, w)| wait > w) => best = Some((source, wait)),
            Ok(_) => {}
            Err(e) => {
                first_invalid.get_or_insert(e.reason);
            }
        }
    }
    let state = match (best, first_invalid) {
        (Some(_), _) => HeaderState::Valid,
        // Lines were present and none was valid.
        (None, Some(reason)) => HeaderState::Invalid { reason },
        (None, None) => HeaderState::Missing,
    };
    (best, state)
}

/// The body's hints: `error.retry_after_seconds`, else `error.resetAt` measured against
/// `reference`.
pub(super) fn read_body(body: &ErrorEnvelope, reference: SystemTime) -> Option<(AdviceSource, Duration)> {
    let seconds = body.retry_after_seconds.as_ref().and_then(body_seconds);
    let seconds = seconds.map(|w| (AdviceSource::BodySeconds, w));
    seconds.or_else(|| {
        let reset = body.reset_at.as_ref()?.as_str()?;
        let reset = parse_rfc3339_instant(reset)?;
        Some((AdviceSource::BodyReset, wait_until(reset, reference)))
    })
}

/// The response's `Date`, if every `Date` line is a valid HTTP-date and they agree (a singleton
/// field sent twice with different values tells us nothing reliable).
pub(super) fn server_date(headers: &HeaderMap, received_at: SystemTime) -> Option<SystemTime> {
    let mut dates = headers.get_all(DATE).iter().map(|v| parse_http_date(v.as_bytes(), received_at));
    let first = dates.next()??;
    dates.all(|d| d == Some(first)).then_some(first)
}
/// `error.retry_after_seconds`: a JSON number ≥ 0, rounded up to whole milliseconds so a
/// fractional hint never makes us early. Anything else is ignored.
fn body_seconds(value: &serde_json::Value) -> Option<Duration> {
    let serde_json::Value::Number(n) = value else {
        return None;
    };
    if let Some(secs) = n.as_u64() {
        return Some(Duration::from_secs(secs));
    }
    let secs = n.as_f64().filter(|f| f.is_finite() && *f >= 0.0)?;
    let millis = secs * 1000.0;
    // `secs * 1000.0` may land just above an exact millisecond (binary floats); when the rounded
    // count of milliseconds converts back to exactly `secs`, it is the number that was sent.
    let nearest = millis.round();
    #[allow(clippy::float_cmp, reason = "an exact round trip is the test")]
    let millis = if nearest / 1000.0 == secs { nearest } else { millis.ceil() };
    Some(if millis < 18_446_744_073_709_551_616.0 {
        Duration::from_millis(millis as u64)
    } else {
        // Beyond 2^64 ms, `secs` is a whole number; `as` saturates at u64::MAX.
        Duration::from_secs(secs as u64)
    })
}

/// Parses an RFC 3339 instant with any offset (see the module doc for why not `humantime` alone).
fn parse_rfc3339_instant(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || !b.is_ascii() {
        return None;
    }
    let digits_at = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18];
    let shape_ok = digits_at.iter().all(|&i| b[i].is_ascii_digit())
        && b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't')
        && b[13] == b':'
        && b[16] == b':';
    if !shape_ok {
        return None;
    }
    let mut rest = &b[19..];
    let mut fraction: &[u8] = b"";
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        fraction = &rest[..=n];
        rest = &rest[n + 1..];
    }
    // Seconds east of UTC: local time = UTC + offset.
    let offset: i64 = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = digits_value(&[*h1, *h2])?;
            let minutes = digits_value(&[*m1, *m2])?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let secs = hours * 3600 + minutes * 60;
            if *sign == b'-' { -secs } else { secs }
        }
        _ => return None,
    };
    let mut norm = b[..19].to_vec();
    norm[10] = b'T';
    let leap = &norm[17..19] == b"60";
    if leap {
        norm[17..19].copy_from_slice(b"59");
    }
    let (year, cycles) = into_supported_years(digits_value(&b[..4])?);
    norm[..4].copy_from_slice(format!("{year:04}").as_bytes());
    norm.extend_from_slice(fraction);
    norm.push(b'Z');
    let local = humantime::parse_rfc3339(std::str::from_utf8(&norm).ok()?).ok()?;
    let local = shift_cycles(local, cycles)?.checked_add(Duration::from_secs(u64::from(leap)))?;
    let offset_abs = Duration::from_secs(offset.unsigned_abs());
    if offset >= 0 { local.checked_sub(offset_abs) } else { local.checked_add(offset_abs) }
}

/// `Sunday, 06-Nov-94 08:49:37 GMT` → `Sun, 06 Nov YYYY 08:49:37 GMT` with the RFC 9110 year.
fn rfc850_to_imf(s: &[u8], reference: SystemTime) -> Option<(Vec<u8>, i64)> {
    const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
    const MONTHS: [&[u8; 3]; 12] =
        [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];
    let day = DAYS.iter().find(|d| s.starts_with(d.as_bytes()) && s[d.len()..].starts_with(b", "))?;
    let rest = &s[day.len() + 2..];
    // `06-Nov-94 08:49:37 GMT`
    if rest.len() != 22 || rest[2] != b'-' || rest[6] != b'-' || rest[9] != b' ' {
        return None;
    }
    let month = MONTHS.iter().position(|m| &rest[3..6] == *m)?;
    let stamp = Stamp {
        month: i64::try_from(month).ok()? + 1,
        day: digits_value(&rest[..2])?,
        second_of_day: digits_value(&rest[10..12])? * 3600
            + digits_value(&rest[13..15])? * 60
            + digits_value(&rest[16..18])?,
        nanos: 0,
    };
    let year = rfc850_year(digits_value(&rest[7..9])?, stamp, civil(reference));
    let mut imf = Vec::with_capacity(29);
    imf.extend_from_slice(&day.as_bytes()[..3]);
    imf.extend_from_slice(b", ");
    imf.extend_from_slice(&rest[..2]);
    imf.push(b' ');
    imf.extend_from_slice(&rest[3..6]);
    imf.extend_from_slice(b" 0000"); // the year is written in by the caller
    imf.extend_from_slice(&rest[9..]);
    Some((imf, year))
}

/// A UTC instant within its year, compared field by field (lexicographic order is time order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Stamp {
    month: i64,
    day: i64,
    /// `0..=86_400`: a leap second `23:59:60` compares after `23:59:59`.
    second_of_day: i64,
    nanos: u32,
}

/// RFC 9110 §5.6.7: a two-digit year "that appears to be more than 50 years in the future" is
/// "the most recent year in the past that had the same last two digits". The test is on the
/// whole timestamp against the reference plus 50 calendar years (same month, day and time), not
/// on the year number: from 2026-01-01, `31-Dec-76` is 1976 (2076-12-31 is more than 50 years
/// away) while `01-Jan-76 00:00:00` is 2076 (exactly 50). The weekday is then checked against
/// the year chosen here, so a weekday that only fits the other century is invalid.
fn rfc850_year(yy: i64, stamp: Stamp, reference: (i64, Stamp)) -> i64 {
    let (ref_year, ref_stamp) = reference;
    // The first year ending in `yy` that is not before the reference's year.
    let year = ref_year.saturating_add(yy.saturating_sub(ref_year).rem_euclid(100));
    let beyond_50_years = (year.saturating_sub(50), stamp) > (ref_year, ref_stamp);
    if beyond_50_years { year.saturating_sub(100) } else { year }
}

/// Seconds in 400 Gregorian years; the calendar (weekdays included) repeats with this period.
const CYCLE_SECS: u64 = 146_097 * 86_400;

/// Brings a year into `1970..=9999` (what our parsers support) by whole 400-year cycles;
/// returns the new year and the number of cycles to add back to the parsed instant.
fn into_supported_years(year: i64) -> (i64, i64) {
    if (1970..=9999).contains(&year) {
        return (year, 0);
    }
    let cycles = year.saturating_sub(1970).div_euclid(400);
    (year.saturating_sub(cycles.saturating_mul(400)), cycles)
}

fn shift_cycles(t: SystemTime, cycles: i64) -> Option<SystemTime> {
    let by = Duration::from_secs(cycles.unsigned_abs().checked_mul(CYCLE_SECS)?);
    if cycles >= 0 { t.checked_add(by) } else { t.checked_sub(by) }
}

/// The proleptic Gregorian (UTC) year of an instant, before or after the epoch.
#[cfg(test)]
fn year_of(t: SystemTime) -> i64 {
    civil(t).0
}

/// The proleptic Gregorian (UTC) year of an instant and where in that year it is, before or
/// after the epoch; seconds beyond `i64` saturate.
fn civil(t: SystemTime) -> (i64, Stamp) {
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (i64::try_from(d.as_secs()).unwrap_or(i64::MAX), d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            let carry = d.subsec_nanos() > 0;
            let nanos = if carry { 1_000_000_000 - d.subsec_nanos() } else { 0 };
            (whole.saturating_neg().saturating_sub(i64::from(carry)), nanos)
        }
    };
    // Howard Hinnant's civil_from_days.
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, Stamp { month, day, second_of_day: secs.rem_euclid(86_400), nanos })
}

pub(super) fn wait_until(date: SystemTime, reference: SystemTime) -> Duration {
    date.duration_since(reference).unwrap_or(Duration::ZERO)
}

/// Trims optional whitespace as HTTP defines it: SP and HTAB only.
pub(super) fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// The value of a short run of ASCII digits (at most 4 here, so no overflow).
fn digits_value(d: &[u8]) -> Option<i64> {
    d.iter().try_fold(0i64, |n, c| c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0')))
}

/// Quotes a field value for a reason string: non-printable bytes escaped, long values cut.
pub(super) fn quote(value: &[u8]) -> String {
    const MAX: usize = 64;
    if value.len() > MAX {
        format!("'{}'... ({} bytes)", value[..MAX].escape_ascii(), value.len())
    } else {
        format!("'{}'", value.escape_ascii())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;
    use serde_json::json;

    /// 1994-11-06T08:49:37Z, RFC 9110's example instant.
    const EXAMPLE: u64 = 784_111_777;
    /// 2026-10-17T09:12:31Z (the Blinkimg seed's resetAt).
    const RESET: u64 = 1_792_228_351;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn headers(lines: &[(&http::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in lines {
            h.append(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    fn envelope(seconds: Option<serde_json::Value>, reset: Option<serde_json::Value>) -> ErrorEnvelope {
        ErrorEnvelope { retry_after_seconds: seconds, reset_at: reset, ..ErrorEnvelope::default() }
    }

    fn seconds(v: &str) -> Result<u64, InvalidRetryAfter> {
        parse_delta_seconds(v.as_bytes())
    }

    // ---- delta-seconds -------------------------------------------------------------------

    macro_rules! invalid_delta {
        ($($name:ident: $value:expr,)*) => {$(
            #[test]
            fn $name() {
                let value: &str = $value;
                let err = seconds(value).unwrap_err();
                let quoted = format!("'{}'", value.as_bytes().escape_ascii());
                assert!(err.reason.contains(&quoted), "{err:?} should quote {quoted}");
                // And not as a whole Retry-After value either (none of these is a date).
                assert!(parse_retry_after_value(value.as_bytes(), at(RESET)).is_err());
            }
        )*};
    }

    invalid_delta! {
        delta_rejects_plus_sign: "+5",
        delta_rejects_minus_sign: "-1",
        delta_rejects_fraction: "1.5",
        delta_rejects_exponent: "1e3",
        delta_rejects_hex: "0x10",
        delta_rejects_only_space: " ",
        delta_rejects_arabic_indic_digit: "٣",
        delta_rejects_fullwidth_digit: "５",
        delta_rejects_empty: "",
        delta_rejects_inner_space: "1 2",
    }

    #[test]
    fn delta_accepts_zero() {
        assert_eq!(seconds("0"), Ok(0));
    }

    #[test]
    fn delta_trims_spaces_and_tabs_only() {
        assert_eq!(seconds("  12\t"), Ok(12));
        assert!(seconds("12\r\n").is_err());
        assert!(seconds("\x0b12").is_err());
    }

    #[test]
    fn delta_leading_zeros_are_decimal() {
        assert_eq!(seconds("007"), Ok(7));
    }

    #[test]
    fn delta_saturates() {
        assert_eq!(seconds("123456789012345678901234567890"), Ok(u64::MAX));
        assert_eq!(seconds("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(seconds("18446744073709551614"), Ok(u64::MAX - 1));
        assert_eq!(seconds("18446744073709551616"), Ok(u64::MAX));
        assert_eq!(
            parse_retry_after_value(b"99999999999999999999999", at(0)),
            Ok((AdviceSource::HeaderSeconds, Duration::from_secs(u64::MAX)))
        );
    }

    #[test]
    fn reasons_escape_non_printable_and_non_utf8_bytes() {
        let err = parse_retry_after_value(b"\xff\x00 5", at(0)).unwrap_err();
        assert_eq!(err.reason, r"'\xff\x00 5' is neither delta-seconds (1*DIGIT) nor an HTTP-date");
        let long = vec![b'x'; 1000];
        let err = parse_delta_seconds(&long).unwrap_err();
        assert!(err.reason.contains("(1000 bytes)") && err.reason.len() < 120, "{}", err.reason);
        // 64 bytes are quoted whole, 65 cut to 64.
        let x = |n| "x".repeat(n);
        assert_eq!(
            parse_delta_seconds(x(64).as_bytes()).unwrap_err().reason,
            format!("'{}' is not delta-seconds (1*DIGIT)", x(64))
        );
        assert_eq!(
            parse_delta_seconds(x(65).as_bytes()).unwrap_err().reason,
            format!("'{}'... (65 bytes) is not delta-seconds (1*DIGIT)", x(64))
        );
    }

    // ---- HTTP-date -----------------------------------------------------------------------

    fn date_wait(value: &str, reference: u64) -> Result<(AdviceSource, Duration), InvalidRetryAfter> {
        parse_retry_after_value(value.as_bytes(), at(reference))
    }

    fn header_date(secs: u64) -> Result<(AdviceSource, Duration), InvalidRetryAfter> {
        Ok((AdviceSource::HeaderDate, Duration::from_secs(secs)))
    }

    #[test]
    fn imf_fixdate_wait() {
        assert_eq!(date_wait("Sun, 06 Nov 1994 08:49:37 GMT", EXAMPLE - 90), header_date(90));
    }

    #[test]
    fn rfc850_wait() {
        assert_eq!(date_wait("Sunday, 06-Nov-94 08:49:37 GMT", EXAMPLE - 90), header_date(90));
    }

    #[test]
    fn asctime_wait() {
        assert_eq!(date_wait("Sun Nov  6 08:49:37 1994", EXAMPLE - 90), header_date(90));
        assert_eq!(date_wait("Sun Nov 06 08:49:37 1994", EXAMPLE - 90), header_date(90));
    }

    #[test]
    fn date_wait_keeps_sub_second_reference() {
        let reference = at(EXAMPLE - 2) + Duration::from_millis(250);
        assert_eq!(
            parse_retry_after_value(b"Sun, 06 Nov 1994 08:49:37 GMT", reference),
            Ok((AdviceSource::HeaderDate, Duration::from_millis(1750)))
        );
    }

    #[test]
    fn past_date_is_zero_wait() {
        assert_eq!(date_wait("Sun, 06 Nov 1994 08:49:37 GMT", RESET), header_date(0));
        assert_eq!(date_wait("Sun, 06 Nov 1994 08:49:37 GMT", EXAMPLE), header_date(0));
    }

    #[test]
    fn date_trims_sp_htab_but_not_other_whitespace() {
        assert_eq!(date_wait("\t Sun, 06 Nov 1994 08:49:37 GMT  ", EXAMPLE - 1), header_date(1));
        // httpdate alone trims CR/LF/VT; we don't.
        let crlf = "\r\nSun, 06 Nov 1994 08:49:37 GMT\x0b";
        assert!(httpdate::parse_http_date(crlf).is_ok());
        assert!(date_wait(crlf, 0).is_err());
    }

    #[test]
    fn date_must_be_consistent_and_exact() {
        for bad in [
            "Mon, 06 Nov 1994 08:49:37 GMT", // wrong weekday
            "Tue, 31 Feb 1995 08:49:37 GMT", // no such day
            "sun, 06 nov 1994 08:49:37 gmt", // HTTP-date is case-sensitive
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun,  06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 12:00:60 GMT", // a leap second only at 23:59:60
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun, 06-Nov-94 08:49:37 GMT",
            "Sundae, 06-Nov-94 08:49:37 GMT",
        ] {
            assert!(date_wait(bad, 0).is_err(), "{bad:?} should be invalid");
        }
    }

    #[test]
    fn rfc850_two_digit_year_follows_the_50_year_rule() {
        let y2026 = RESET; // reference in 2026: "74" is 2074 (48 years ahead), not 1974.
        let jan_1_2074 = 3_281_990_400;
        assert!(httpdate::parse_http_date("Monday, 01-Jan-74 00:00:00 GMT").is_err());
        assert_eq!(date_wait("Monday, 01-Jan-74 00:00:00 GMT", y2026), header_date(jan_1_2074 - y2026));
        // 1974-01-01 was a Tuesday: consistent for httpdate, not for RFC 9110 from 2026.
        assert!(httpdate::parse_http_date("Tuesday, 01-Jan-74 00:00:00 GMT").is_ok());
        assert!(date_wait("Tuesday, 01-Jan-74 00:00:00 GMT", y2026).is_err());
        // From 1990, "74" is 1974: a past date.
        assert_eq!(date_wait("Tuesday, 01-Jan-74 00:00:00 GMT", 631_152_000), header_date(0));
        // "77" from 2026 is more than 50 years ahead as 2077, so it is 1977 (1 Jan a Saturday).
        assert_eq!(parse_http_date(b"Saturday, 01-Jan-77 00:00:00 GMT", at(y2026)), Some(at(220_924_800)));
        // "00" is 2000 (a Saturday), 26 years back.
        assert_eq!(parse_http_date(b"Saturday, 01-Jan-00 00:00:00 GMT", at(y2026)), Some(at(946_684_800)));
    }

    /// The rule compares the whole timestamp with reference + 50 years, and the
    /// weekday is checked against the century so chosen.
    #[test]
    fn rfc850_50_year_rule_is_by_date_not_by_year() {
        let jan_1_2026 = 1_767_225_600;
        let dec_31_1976 = 220_924_799; // 1976-12-31T23:59:59Z, a Friday
        // As 2076 it would be 2076-12-31, more than 50 years after 2026-01-01: so 1976, a past date.
        assert_eq!(parse_http_date(b"Friday, 31-Dec-76 23:59:59 GMT", at(jan_1_2026)), Some(at(dec_31_1976)));
        assert_eq!(date_wait("Friday, 31-Dec-76 23:59:59 GMT", jan_1_2026), header_date(0));
        // 2076-12-31 was a Thursday, but the date means 1976 (a Friday): inconsistent, invalid.
        assert!(date_wait("Thursday, 31-Dec-76 23:59:59 GMT", jan_1_2026).is_err());
        // Exactly 50 years ahead is not *more* than 50 years: 2076-01-01 (a Wednesday).
        let jan_1_2076 = 3_345_062_400;
        assert_eq!(date_wait("Wednesday, 01-Jan-76 00:00:00 GMT", jan_1_2026), header_date(jan_1_2076 - jan_1_2026));
        // One second more is 1976 (1976-01-01 00:00:01 was a Thursday).
        assert_eq!(parse_http_date(b"Thursday, 01-Jan-76 00:00:01 GMT", at(jan_1_2026)), Some(at(189_302_401)));
        assert_eq!(parse_http_date(b"Wednesday, 01-Jan-76 00:00:01 GMT", at(jan_1_2026)), None);
        // A millisecond earlier reference moves the boundary with it, below the second.
        let earlier = at(jan_1_2026) - Duration::from_millis(1);
        assert_eq!(parse_http_date(b"Thursday, 01-Jan-76 00:00:00 GMT", earlier), Some(at(189_302_400)));
        assert_eq!(parse_http_date(b"Wednesday, 01-Jan-76 00:00:00 GMT", earlier), None);
        // The time of day weighs in: from noon, 11:59:59 is within the 50 years (2076), 12:01:00
        // beyond them (1976).
        let noon = at(jan_1_2026 + 43_200);
        assert_eq!(parse_http_date(b"Wednesday, 01-Jan-76 11:59:59 GMT", noon), Some(at(jan_1_2076 + 43_199)));
        assert_eq!(parse_http_date(b"Thursday, 01-Jan-76 12:01:00 GMT", noon), Some(at(189_302_400 + 43_260)));
    }

    #[test]
    fn rfc850_separators_are_exact() {
        assert!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT", at(RESET)).is_some());
        for bad in
            ["Sunday, 06 Nov-94 08:49:37 GMT", "Sunday, 06-Nov 94 08:49:37 GMT", "Sunday, 06-Nov-94T08:49:37 GMT"]
        {
            assert_eq!(parse_http_date(bad.as_bytes(), at(RESET)), None, "{bad:?}");
        }
    }

    #[test]
    fn leap_second_is_read_as_the_next_second() {
        let jan_1_1999 = 915_148_800;
        assert!(httpdate::parse_http_date("Thu, 31 Dec 1998 23:59:60 GMT").is_err());
        assert_eq!(date_wait("Thu, 31 Dec 1998 23:59:60 GMT", jan_1_1999 - 10), header_date(10));
        assert_eq!(date_wait("Thursday, 31-Dec-98 23:59:60 GMT", jan_1_1999 - 10), header_date(10));
        assert_eq!(date_wait("Thu Dec 31 23:59:60 1998", jan_1_1999 - 10), header_date(10));
    }

    #[test]
    fn dates_before_1970_are_valid_and_past() {
        assert!(httpdate::parse_http_date("Wed, 31 Dec 1969 23:59:59 GMT").is_err());
        assert_eq!(date_wait("Wed, 31 Dec 1969 23:59:59 GMT", RESET), header_date(0));
        let parsed = parse_http_date(b"Wed, 31 Dec 1969 23:59:59 GMT", at(RESET));
        assert_eq!(parsed, UNIX_EPOCH.checked_sub(Duration::from_secs(1)));
        // 1 Jan 1900 was a Monday (no leap day in 1900); the weekday check still applies.
        let reference = UNIX_EPOCH - Duration::from_secs(2_208_988_800 + 5);
        assert_eq!(
            parse_retry_after_value(b"Mon, 01 Jan 1900 00:00:00 GMT", reference),
            Ok((AdviceSource::HeaderDate, Duration::from_secs(5)))
        );
        assert!(parse_http_date(b"Sun, 01 Jan 1900 00:00:00 GMT", reference).is_none());
    }

    #[test]
    fn last_supported_second() {
        assert_eq!(date_wait("Fri, 31 Dec 9999 23:59:59 GMT", 0), header_date(253_402_300_799));
    }

    #[test]
    fn year_of_matches_known_instants() {
        assert_eq!(year_of(at(0)), 1970);
        assert_eq!(year_of(at(RESET)), 2026);
        assert_eq!(year_of(UNIX_EPOCH - Duration::from_nanos(1)), 1969);
        assert_eq!(year_of(at(253_402_300_799)), 9999);
        assert_eq!(year_of(at(253_402_300_800)), 10000);
        let stamp = |month, day, second_of_day, nanos| Stamp { month, day, second_of_day, nanos };
        assert_eq!(civil(at(RESET)), (2026, stamp(10, 17, 9 * 3600 + 12 * 60 + 31, 0)));
        assert_eq!(civil(at(951_782_400)), (2000, stamp(2, 29, 0, 0)));
        assert_eq!(civil(UNIX_EPOCH - Duration::from_millis(1)), (1969, stamp(12, 31, 86_399, 999_000_000)));
        // A whole number of seconds before the epoch carries nothing into the second before.
        assert_eq!(civil(UNIX_EPOCH - Duration::from_secs(86_400)), (1969, stamp(12, 31, 0, 0)));
    }

    #[test]
    fn civil_agrees_with_httpdate_on_every_day_around_three_centuries() {
        // 2000 and 2400 are leap years and 2100 is not; 2400-02-29 ends a 400-year era.
        const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
        for from in [1996, 2096, 2396] {
            let start = humantime::parse_rfc3339(&format!("{from}-01-01T00:00:00Z")).unwrap();
            for day in 0..9 * 366 {
                let t = start + Duration::from_secs(day * 86_400 + 45_296);
                let imf = httpdate::fmt_http_date(t); // `Sun, 06 Nov 1994 12:34:56 GMT`
                let month = MONTHS.iter().position(|m| *m == &imf[8..11]).unwrap() as i64 + 1;
                let day = imf[5..7].parse().unwrap();
                let want = (imf[12..16].parse().unwrap(), Stamp { month, day, second_of_day: 45_296, nanos: 0 });
                assert_eq!(civil(t), want, "{imf}");
            }
        }
    }

    // ---- read_advice: header -------------------------------------------------------------

    fn fmt(secs: u64) -> String {
        httpdate::fmt_http_date(at(secs))
    }

    #[test]
    fn delta_seconds_header() {
        let h = headers(&[(&RETRY_AFTER, "12"), (&DATE, &fmt(RESET))]);
        let a = read_advice(&h, None, at(RESET));
        assert_eq!(
            a,
            Advice {
                source: AdviceSource::HeaderSeconds,
                wait: Some(Duration::from_secs(12)),
                header: HeaderState::Valid,
                // A valid Date, but no date was measured against it.
                server_date_used: false,
            }
        );
    }

    #[test]
    fn server_date_corrects_clock_skew() {
        let t = RESET;
        let received = at(t) + Duration::from_millis(250);
        let unskewed = headers(&[(&DATE, &fmt(t)), (&RETRY_AFTER, &fmt(t + 120))]);
        let skewed = headers(&[(&DATE, &fmt(t + 3600)), (&RETRY_AFTER, &fmt(t + 3600 + 120))]);
        for h in [unskewed, skewed] {
            let a = read_advice(&h, None, received);
            assert_eq!(a.source, AdviceSource::HeaderDate);
            assert_eq!(a.wait, Some(Duration::from_secs(120)));
            assert!(a.server_date_used);
            assert_eq!(a.header, HeaderState::Valid);
        }
    }

    #[test]
    fn without_date_header_skew_is_not_corrected() {
        let t = RESET;
        let h = headers(&[(&RETRY_AFTER, &fmt(t + 3600 + 120))]);
        let a = read_advice(&h, None, at(t));
        assert_eq!(a.wait, Some(Duration::from_secs(3600 + 120)));
        assert!(!a.server_date_used);
    }

    #[test]
    fn invalid_date_header_falls_back_to_received_at() {
        let t = RESET;
        for bad_date in ["yesterday", "Mon, 17 Oct 2026 09:12:31 GMT", ""] {
            let h = headers(&[(&DATE, bad_date), (&RETRY_AFTER, &fmt(t + 30))]);
            let a = read_advice(&h, None, at(t));
            assert_eq!(a.wait, Some(Duration::from_secs(30)), "Date {bad_date:?}");
            assert!(!a.server_date_used);
        }
    }

    #[test]
    fn conflicting_date_lines_are_ignored() {
        let t = RESET;
        let h = headers(&[(&DATE, &fmt(t + 3600)), (&DATE, &fmt(t)), (&RETRY_AFTER, &fmt(t + 30))]);
        let a = read_advice(&h, None, at(t));
        assert_eq!(a.wait, Some(Duration::from_secs(30)));
        assert!(!a.server_date_used);
        let same = headers(&[(&DATE, &fmt(t - 5)), (&DATE, &fmt(t - 5)), (&RETRY_AFTER, &fmt(t + 30))]);
        let a = read_advice(&same, None, at(t));
        assert_eq!(a.wait, Some(Duration::from_secs(35)));
        assert!(a.server_date_used);
    }

    #[test]
    fn past_header_date_is_zero() {
        let h = headers(&[(&RETRY_AFTER, &fmt(RESET - 60))]);
        let a = read_advice(&h, None, at(RESET));
        assert_eq!((a.source, a.wait), (AdviceSource::HeaderDate, Some(Duration::ZERO)));
    }

    #[test]
    fn several_lines_largest_valid_wins() {
        let h = headers(&[(&RETRY_AFTER, "5"), (&RETRY_AFTER, &fmt(RESET + 40)), (&RETRY_AFTER, "30")]);
        let a = read_advice(&h, None, at(RESET));
        assert_eq!(a.source, AdviceSource::HeaderDate);
        assert_eq!(a.wait, Some(Duration::from_secs(40)));
        assert_eq!(a.header, HeaderState::Valid);
        let h = headers(&[(&RETRY_AFTER, &fmt(RESET + 40)), (&RETRY_AFTER, "41")]);
        let a = read_advice(&h, None, at(RESET));
        assert_eq!((a.source, a.wait), (AdviceSource::HeaderSeconds, Some(Duration::from_secs(41))));
        // On a tie the earlier line names the source.
        for (first, second, source) in [
            ("40".to_string(), fmt(RESET + 40), AdviceSource::HeaderSeconds),
            (fmt(RESET + 40), "40".to_string(), AdviceSource::HeaderDate),
        ] {
            let a = read_advice(&headers(&[(&RETRY_AFTER, &first), (&RETRY_AFTER, &second)]), None, at(RESET));
            assert_eq!((a.source, a.wait), (source, Some(Duration::from_secs(40))));
        }
    }

    #[test]
    fn one_valid_one_invalid_line_is_valid() {
        let h = headers(&[(&RETRY_AFTER, "soon"), (&RETRY_AFTER, "7")]);
        let body = envelope(Some(json!(100)), None);
        let a = read_advice(&h, Some(&body), at(RESET));
        assert_eq!(a.source, AdviceSource::HeaderSeconds);
        assert_eq!(a.wait, Some(Duration::from_secs(7)));
        assert_eq!(a.header, HeaderState::Valid);
    }

    #[test]
    fn comma_values_are_not_split() {
        let h = headers(&[(&RETRY_AFTER, "5, 10")]);
        let a = read_advice(&h, None, at(RESET));
        assert_eq!(
            a.header,
            HeaderState::Invalid { reason: "'5, 10' is neither delta-seconds (1*DIGIT) nor an HTTP-date".into() }
        );
        assert_eq!(a.source, AdviceSource::None);
    }

    #[test]
    fn first_invalid_reason_is_reported() {
        let h = headers(&[(&RETRY_AFTER, "-1"), (&RETRY_AFTER, "1.5")]);
        let a = read_advice(&h, None, at(RESET));
        assert_eq!(
            a.header,
            HeaderState::Invalid { reason: "'-1' is neither delta-seconds (1*DIGIT) nor an HTTP-date".into() }
        );
    }

    // ---- read_advice: body fallbacks -----------------------------------------------------

    fn body_advice(seconds: Option<serde_json::Value>, reset: Option<serde_json::Value>) -> Advice {
        read_advice(&HeaderMap::new(), Some(&envelope(seconds, reset)), at(RESET))
    }

    #[test]
    fn body_seconds_integer() {
        let a = body_advice(Some(json!(30)), None);
        assert_eq!(
            a,
            Advice {
                source: AdviceSource::BodySeconds,
                wait: Some(Duration::from_secs(30)),
                header: HeaderState::Missing,
                server_date_used: false,
            }
        );
    }

    #[test]
    fn which_advice_is_in_whole_seconds() {
        // Issue 26: these may be up to a second short, so the spread covers it.
        let seconds = read_advice(&headers(&[(&RETRY_AFTER, "0")]), None, at(RESET));
        let date =
            read_advice(&headers(&[(&RETRY_AFTER, &fmt(RESET + 3))]), None, at(RESET) + Duration::from_millis(1));
        assert_eq!((seconds.source, date.source), (AdviceSource::HeaderSeconds, AdviceSource::HeaderDate));
        assert!(seconds.in_whole_seconds() && date.in_whole_seconds());
        assert!(body_advice(Some(json!(30)), None).in_whole_seconds());
        // A fraction, a resetAt with milliseconds, no advice: precise or none.
        assert!(!body_advice(Some(json!(2.5)), None).in_whole_seconds());
        let reset = body_advice(None, Some(json!("2026-10-17T09:12:33.250Z")));
        assert_eq!(reset.source, AdviceSource::BodyReset);
        assert!(!reset.in_whole_seconds());
        assert!(!Advice::none().in_whole_seconds());
    }

    #[test]
    fn body_seconds_fraction_rounds_up_to_millis() {
        let wait = |v| body_advice(Some(v), None).wait;
        assert_eq!(wait(json!(1.5)), Some(Duration::from_millis(1500)));
        assert_eq!(wait(json!(0.0001)), Some(Duration::from_millis(1)));
        assert_eq!(wait(json!(2.0001)), Some(Duration::from_millis(2001)));
        assert_eq!(wait(json!(0.0015)), Some(Duration::from_millis(2)));
        // Exact millisecond counts are not pushed up by binary rounding (1.005 * 1000 < 1005).
        assert_eq!(wait(json!(1.005)), Some(Duration::from_millis(1005)));
        assert_eq!(wait(json!(0.007)), Some(Duration::from_millis(7)));
        // ...nor by binary rounding the other way (2.007 * 1000 lands just above 2007).
        assert_eq!(wait(json!(2.007)), Some(Duration::from_millis(2007)));
        // Exactly 2^64 ms no longer fits a count of milliseconds: the float's whole seconds.
        assert_eq!(wait(json!(18_446_744_073_709_552.0)), Some(Duration::from_secs(18_446_744_073_709_552)));
        assert_eq!(wait(json!(0.0)), Some(Duration::ZERO));
        assert_eq!(wait(json!(-0.0)), Some(Duration::ZERO));
        assert_eq!(wait(json!(1e300)), Some(Duration::from_secs(u64::MAX)));
        assert_eq!(wait(json!(u64::MAX)), Some(Duration::from_secs(u64::MAX)));
    }

    #[test]
    fn body_seconds_negative_or_non_number_is_ignored() {
        for v in [json!(-1), json!(-0.5), json!("30"), json!(true), json!([30]), json!(null)] {
            let a = body_advice(Some(v.clone()), None);
            assert_eq!(a, Advice::none(), "{v}");
        }
        // ...and the next fallback is still tried.
        let a = body_advice(Some(json!(-1)), Some(json!("2026-10-17T09:13:01Z")));
        assert_eq!((a.source, a.wait), (AdviceSource::BodyReset, Some(Duration::from_secs(30))));
    }

    #[test]
    fn body_seconds_wins_over_reset_at() {
        let a = body_advice(Some(json!(3)), Some(json!("2026-10-17T09:13:01Z")));
        assert_eq!((a.source, a.wait), (AdviceSource::BodySeconds, Some(Duration::from_secs(3))));
    }

    #[test]
    fn body_reset_at() {
        let body = ErrorEnvelope::parse(
            br#"{"error":{"code":"RATE_LIMITED","message":"m","requestId":"r","resetAt":"2026-10-17T09:12:31.000Z"}}"#,
        )
        .unwrap();
        let a = read_advice(&HeaderMap::new(), Some(&body), at(RESET - 45));
        assert_eq!(
            a,
            Advice {
                source: AdviceSource::BodyReset,
                wait: Some(Duration::from_secs(45)),
                header: HeaderState::Missing,
                server_date_used: false,
            }
        );
        // Past reset: zero.
        let a = read_advice(&HeaderMap::new(), Some(&body), at(RESET + 45));
        assert_eq!(a.wait, Some(Duration::ZERO));
    }

    #[test]
    fn body_reset_at_is_measured_against_server_date() {
        let body = envelope(None, Some(json!("2026-10-17T10:12:31Z"))); // server 1 h ahead
        let h = headers(&[(&DATE, &fmt(RESET + 3600 - 20))]);
        let a = read_advice(&h, Some(&body), at(RESET));
        assert_eq!((a.source, a.wait), (AdviceSource::BodyReset, Some(Duration::from_secs(20))));
        assert!(a.server_date_used);
    }

    #[test]
    fn reset_at_offsets_and_strictness() {
        let reset = |s: &str| parse_rfc3339_instant(s);
        let want = Some(at(RESET));
        assert_eq!(reset("2026-10-17T09:12:31Z"), want);
        assert_eq!(reset("2026-10-17t09:12:31z"), want);
        assert_eq!(reset("2026-10-17T09:12:31+00:00"), want);
        assert_eq!(reset("2026-10-17T09:12:31-00:00"), want);
        assert_eq!(reset("2026-10-17T11:12:31+02:00"), want);
        assert_eq!(reset("2026-10-17T04:12:31-05:00"), want);
        assert_eq!(reset("2026-10-17T14:42:31+05:30"), want);
        // The widest offsets, a minute short of a day either way.
        assert_eq!(reset("2026-10-18T09:11:31+23:59"), want);
        assert_eq!(reset("2026-10-16T09:13:31-23:59"), want);
        assert_eq!(reset("2026-10-17T11:12:31.5+02:00"), Some(at(RESET) + Duration::from_millis(500)));
        assert_eq!(reset("2026-10-17T23:59:60Z"), Some(at(1_792_281_600)));
        assert_eq!(reset("1969-12-31T23:59:59Z"), UNIX_EPOCH.checked_sub(Duration::from_secs(1)));
        // humantime's parse_rfc3339 accepts the first two of these; we don't.
        assert!(humantime::parse_rfc3339("2026-10-17T09:12:31ZxZ").is_ok());
        for bad in [
            "2026-10-17T09:12:31ZxZ",
            "2026-10-17T09:12:31.Z",
            "2026-10-17 09:12:31Z",
            "2026-10-17T09:12:31",
            "2026-10-17T09:12:31+2:00",
            "2026-10-17T09:12:31+24:00",
            "2026-10-17T09:12:31+00:60",
            "2026-02-30T09:12:31Z",
            "2026-10-17T09:12:31 Z",
            "1792228351",
        ] {
            assert_eq!(reset(bad), None, "{bad:?}");
        }
        // A non-string resetAt is ignored.
        assert_eq!(body_advice(None, Some(json!(1_792_228_351))), Advice::none());
    }

    #[test]
    fn body_used_when_header_invalid() {
        let h = headers(&[(&RETRY_AFTER, "+5")]);
        let body = envelope(Some(json!(30)), None);
        let a = read_advice(&h, Some(&body), at(RESET));
        assert_eq!(
            a,
            Advice {
                source: AdviceSource::BodySeconds,
                wait: Some(Duration::from_secs(30)),
                header: HeaderState::Invalid {
                    reason: "'+5' is neither delta-seconds (1*DIGIT) nor an HTTP-date".into()
                },
                server_date_used: false,
            }
        );
    }

    #[test]
    fn nothing_is_no_advice() {
        assert_eq!(read_advice(&HeaderMap::new(), None, at(RESET)), Advice::none());
        let empty = ErrorEnvelope::default();
        assert_eq!(read_advice(&HeaderMap::new(), Some(&empty), at(RESET)), Advice::none());
        let h = headers(&[(&RETRY_AFTER, "later")]);
        let a = read_advice(&h, None, at(RESET));
        assert_eq!((a.source, a.wait), (AdviceSource::None, None));
        assert!(matches!(a.header, HeaderState::Invalid { .. }));
    }

    // ---- properties ----------------------------------------------------------------------

    /// 10000-01-01T00:00:00Z: `httpdate::fmt_http_date` panics from here on.
    const YEAR_10000: u64 = 253_402_300_800;

    fn system_time(secs: i64, nanos: u32) -> Option<SystemTime> {
        let d = Duration::new(secs.unsigned_abs(), nanos);
        if secs >= 0 { UNIX_EPOCH.checked_add(d) } else { UNIX_EPOCH.checked_sub(d) }
    }

    fn imf_to_rfc850(imf: &str) -> String {
        let day = match &imf[..3] {
            "Mon" => "Monday",
            "Tue" => "Tuesday",
            "Wed" => "Wednesday",
            "Thu" => "Thursday",
            "Fri" => "Friday",
            "Sat" => "Saturday",
            _ => "Sunday",
        };
        format!("{day}, {}-{}-{} {} GMT", &imf[5..7], &imf[8..11], &imf[14..16], &imf[17..25])
    }

    fn imf_to_asctime(imf: &str) -> String {
        let mday = imf[5..7].strip_prefix('0').map_or(imf[5..7].to_string(), |d| format!(" {d}"));
        format!("{} {} {mday} {} {}", &imf[..3], &imf[8..11], &imf[17..25], &imf[12..16])
    }

    /// Header-ish bytes: arbitrary, or near-misses of the valid forms.
    fn field_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..40),
            "[ \t]{0,2}[0-9]{1,25}[ \t]{0,2}".prop_map(String::into_bytes),
            (0..YEAR_10000, 0usize..3).prop_map(|(d, form)| {
                let imf = fmt(d);
                match form {
                    0 => imf,
                    1 => imf_to_rfc850(&imf),
                    _ => imf_to_asctime(&imf),
                }
                .into_bytes()
            }),
            (0..YEAR_10000, any::<usize>(), any::<u8>()).prop_map(|(d, i, b)| {
                let mut v = fmt(d).into_bytes();
                let i = i % v.len();
                v[i] = b;
                v
            }),
        ]
    }

    fn json_value() -> impl Strategy<Value = Option<serde_json::Value>> {
        proptest::option::of(prop_oneof![
            any::<f64>().prop_map(
                |f| serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number)
            ),
            any::<i64>().prop_map(|i| json!(i)),
            any::<u64>().prop_map(|u| json!(u)),
            ".{0,30}".prop_map(serde_json::Value::String),
            "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?([Zz]|[+-][0-9]{2}:[0-9]{2})?"
                .prop_map(serde_json::Value::String),
        ])
    }

    proptest! {
        #[test]
        fn parse_delta_seconds_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_delta_seconds(&bytes);
        }

        #[test]
        fn read_advice_never_panics(
            lines in proptest::collection::vec(field_bytes(), 0..4),
            date in proptest::option::of(field_bytes()),
            secs in any::<i64>(),
            nanos in 0u32..1_000_000_000,
            seconds in json_value(),
            reset in json_value(),
            with_body in any::<bool>(),
        ) {
            let received = system_time(secs, nanos);
            prop_assume!(received.is_some());
            let mut h = HeaderMap::new();
            for line in &lines {
                if let Ok(v) = HeaderValue::from_bytes(line) {
                    h.append(RETRY_AFTER, v);
                }
            }
            if let Some(v) = date.and_then(|d| HeaderValue::from_bytes(&d).ok()) {
                h.append(DATE, v);
            }
            let body = envelope(seconds, reset);
            let a = read_advice(&h, with_body.then_some(&body), received.unwrap());
            prop_assert_eq!(a.wait.is_none(), a.source == AdviceSource::None);
            prop_assert_eq!(a.header == HeaderState::Missing, !h.contains_key(RETRY_AFTER));
            prop_assert_eq!(
                a.header == HeaderState::Valid,
                matches!(a.source, AdviceSource::HeaderSeconds | AdviceSource::HeaderDate)
            );
        }

        #[test]
        fn delta_seconds_model(n in any::<u64>(), lead in "[ \t]{0,3}", trail in "[ \t]{0,3}") {
            prop_assert_eq!(parse_delta_seconds(n.to_string().as_bytes()), Ok(n));
            prop_assert_eq!(parse_delta_seconds(format!("{lead}{n}{trail}").as_bytes()), Ok(n));
        }

        #[test]
        fn http_date_model(d in 0..YEAR_10000, r in 0..YEAR_10000) {
            prop_assert_eq!(
                parse_retry_after_value(fmt(d).as_bytes(), at(r)),
                Ok((AdviceSource::HeaderDate, Duration::from_secs(d.saturating_sub(r))))
            );
        }

        /// The three forms of one instant agree whenever RFC 850's two-digit year is unambiguous
        /// (the date within 49 years of the reference).
        #[test]
        fn three_date_forms_agree(d in 0..YEAR_10000, back in -1_545_264_000i64..1_545_264_000) {
            let r = d.checked_add_signed(back).filter(|r| *r < YEAR_10000);
            prop_assume!(r.is_some());
            let r = at(r.unwrap());
            let imf = fmt(d);
            let want = Some(at(d));
            prop_assert_eq!(parse_http_date(imf.as_bytes(), r), want);
            prop_assert_eq!(parse_http_date(imf_to_rfc850(&imf).as_bytes(), r), want);
            prop_assert_eq!(parse_http_date(imf_to_asctime(&imf).as_bytes(), r), want);
        }
    }
}
