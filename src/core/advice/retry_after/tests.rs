//! Unit tests of `core/advice/retry_after`, in a file of their own so the module stays short.

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
    for bad in ["Sunday, 06 Nov-94 08:49:37 GMT", "Sunday, 06-Nov 94 08:49:37 GMT", "Sunday, 06-Nov-94T08:49:37 GMT"] {
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
    let date = read_advice(&headers(&[(&RETRY_AFTER, &fmt(RESET + 3))]), None, at(RESET) + Duration::from_millis(1));
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
            header: HeaderState::Invalid { reason: "'+5' is neither delta-seconds (1*DIGIT) nor an HTTP-date".into() },
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
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number)),
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
