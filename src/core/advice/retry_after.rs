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
mod tests;
