//! The server's wall clock, and the calendar arithmetic its answers need.
//!
//! Virtual time (`now`, since the simulation started) becomes the server's wall
//! time as `epoch + now + skew`. Wall time is kept in integer nanoseconds since
//! the Unix epoch so every rounding is exact and explicit: an HTTP-date has whole
//! seconds and `resetAt` whole milliseconds, and both are rounded *up*, so a
//! client that obeys them is never early.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const NS_PER_MS: u64 = 1_000_000;
const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_HOUR: u64 = 3_600 * NS_PER_S;
const NS_PER_DAY: u64 = 86_400 * NS_PER_S;

/// An instant on the server's wall clock, nanoseconds since the Unix epoch.
/// It saturates at both ends (before 1970, after 2554) instead of wrapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct WallTime {
    ns: u64,
}

/// Maps virtual time to the server's wall clock: `epoch + now + skew`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WallClock {
    epoch_ns: i128,
    skew_ns: i128,
}

impl WallClock {
    pub(crate) fn new(epoch_unix_s: u64, clock_skew_ms: i64) -> WallClock {
        WallClock {
            epoch_ns: i128::from(epoch_unix_s) * i128::from(NS_PER_S),
            skew_ns: i128::from(clock_skew_ms) * i128::from(NS_PER_MS),
        }
    }

    /// The server's wall time at virtual instant `now`.
    pub(crate) fn at(&self, now: Duration) -> WallTime {
        let ns = self.epoch_ns + now.as_nanos() as i128 + self.skew_ns;
        WallTime { ns: ns.clamp(0, i128::from(u64::MAX)) as u64 }
    }
}

impl WallTime {
    #[cfg(test)]
    pub(crate) fn from_unix_ms(ms: u64) -> WallTime {
        WallTime { ns: ms.saturating_mul(NS_PER_MS) }
    }

    /// The instant `secs` whole seconds after the Unix epoch.
    pub(crate) fn from_unix_seconds(secs: u64) -> WallTime {
        WallTime { ns: secs.saturating_mul(NS_PER_S) }
    }

    /// Whole seconds since the Unix epoch, truncated (Python's `int(time.time())`).
    pub(crate) fn unix_seconds(self) -> u64 {
        self.ns / NS_PER_S
    }

    pub(crate) fn system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.ns)
    }

    pub(crate) fn plus(self, d: Duration) -> WallTime {
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        WallTime { ns: self.ns.saturating_add(d) }
    }

    /// The wait from `earlier` to `self`; zero when `self` is not later.
    pub(crate) fn since(self, earlier: WallTime) -> Duration {
        Duration::from_nanos(self.ns.saturating_sub(earlier.ns))
    }

    fn ceil_to(self, unit: u64) -> WallTime {
        WallTime { ns: self.ns.div_ceil(unit).saturating_mul(unit) }
    }

    /// Rounded up to a whole second: what an HTTP-date can say without being early.
    pub(crate) fn ceil_to_second(self) -> WallTime {
        self.ceil_to(NS_PER_S)
    }

    /// Rounded up to a whole millisecond: what RFC 3339 `.sssZ` can say without being early.
    pub(crate) fn ceil_to_milli(self) -> WallTime {
        self.ceil_to(NS_PER_MS)
    }

    /// Which wall-clock hour this is (hours since the epoch).
    pub(crate) fn hour(self) -> u64 {
        self.ns / NS_PER_HOUR
    }

    /// The first instant of the next wall-clock hour.
    pub(crate) fn next_hour(self) -> WallTime {
        WallTime { ns: (self.hour() + 1).saturating_mul(NS_PER_HOUR) }
    }

    /// The calendar month `(year, month 1..=12)`, UTC.
    pub(crate) fn month(self) -> (i64, u32) {
        let (y, m, _) = civil_from_days(self.days());
        (y, m)
    }

    /// The first instant (00:00:00 UTC on the 1st) of the next calendar month.
    pub(crate) fn next_month(self) -> WallTime {
        let (y, m) = self.month();
        let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        let days = days_from_civil(y, m, 1);
        WallTime { ns: u64::try_from(days).unwrap_or(0).saturating_mul(NS_PER_DAY) }
    }

    fn days(self) -> i64 {
        (self.ns / NS_PER_DAY) as i64
    }

    /// Fields of the instant, truncated to the second: (y, m, d, hh, mm, ss, weekday 0=Sunday).
    fn fields(self) -> (i64, u32, u32, u64, u64, u64, usize) {
        let (y, m, d) = civil_from_days(self.days());
        let secs = (self.ns % NS_PER_DAY) / NS_PER_S;
        // 1970-01-01 was a Thursday.
        let weekday = ((self.days() + 4) % 7) as usize;
        (y, m, d, secs / 3600, secs / 60 % 60, secs % 60, weekday)
    }

    /// IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT` (truncates to the second).
    pub(crate) fn imf_fixdate(self) -> String {
        httpdate::fmt_http_date(self.system_time())
    }

    /// Obsolete RFC 850 form, `Sunday, 06-Nov-94 08:49:37 GMT` (two-digit year).
    pub(crate) fn rfc850(self) -> String {
        let (y, m, d, hh, mm, ss, wd) = self.fields();
        let month = MONTHS[m as usize - 1];
        let yy = y.rem_euclid(100);
        format!("{}, {d:02}-{month}-{yy:02} {hh:02}:{mm:02}:{ss:02} GMT", WEEKDAYS_LONG[wd])
    }

    /// ANSI C asctime form, `Sun Nov  6 08:49:37 1994` (day padded with a space).
    pub(crate) fn asctime(self) -> String {
        let (y, m, d, hh, mm, ss, wd) = self.fields();
        let month = MONTHS[m as usize - 1];
        format!("{} {month} {d:>2} {hh:02}:{mm:02}:{ss:02} {y}", &WEEKDAYS_LONG[wd][..3])
    }

    /// RFC 3339 with milliseconds, `2026-10-17T09:12:31.000Z` (truncates to the ms).
    pub(crate) fn rfc3339_millis(self) -> String {
        humantime::format_rfc3339_millis(self.system_time()).to_string()
    }
}

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const WEEKDAYS_LONG: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day); H. Hinnant's algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9110's example instant, Sun, 06 Nov 1994 08:49:37 GMT.
    const RFC_EXAMPLE_MS: u64 = 784_111_777_000;

    #[test]
    fn three_date_forms_match_rfc_9110_examples() {
        let t = WallTime::from_unix_ms(RFC_EXAMPLE_MS);
        assert_eq!(t.imf_fixdate(), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(t.rfc850(), "Sunday, 06-Nov-94 08:49:37 GMT");
        assert_eq!(t.asctime(), "Sun Nov  6 08:49:37 1994");
        assert_eq!(t.rfc3339_millis(), "1994-11-06T08:49:37.000Z");
    }

    #[test]
    fn two_digit_days_are_not_padded_in_asctime() {
        let t = WallTime::from_unix_ms(RFC_EXAMPLE_MS + 10 * 86_400_000);
        assert_eq!(t.asctime(), "Wed Nov 16 08:49:37 1994");
    }

    #[test]
    fn wall_clock_is_epoch_plus_now_plus_skew() {
        let c = WallClock::new(1_000, 250);
        assert_eq!(c.at(Duration::from_millis(500)), WallTime::from_unix_ms(1_000_750));
        let behind = WallClock::new(1_000, -2_000);
        assert_eq!(behind.at(Duration::ZERO), WallTime::from_unix_ms(998_000));
        // Saturates instead of going before 1970.
        assert_eq!(WallClock::new(0, -5).at(Duration::ZERO), WallTime::from_unix_ms(0));
    }

    #[test]
    fn rounding_goes_up_never_down() {
        let t = WallTime::from_unix_ms(1_000).plus(Duration::from_nanos(1));
        assert_eq!(t.ceil_to_second(), WallTime::from_unix_ms(2_000));
        assert_eq!(t.ceil_to_milli(), WallTime::from_unix_ms(1_001));
        let whole = WallTime::from_unix_ms(3_000);
        assert_eq!(whole.ceil_to_second(), whole);
    }

    #[test]
    fn next_month_handles_december_and_leap_years() {
        // 2026-12-31T23:59:59Z -> 2027-01-01T00:00:00Z
        let dec = WallTime::from_unix_ms(1_798_761_599_000);
        assert_eq!(dec.month(), (2026, 12));
        assert_eq!(dec.next_month().rfc3339_millis(), "2027-01-01T00:00:00.000Z");
        // 2028-02-10 -> 2028-03-01 (leap year)
        let feb = WallTime::from_unix_ms(days_from_civil(2028, 2, 10) as u64 * 86_400_000);
        assert_eq!(feb.next_month().rfc3339_millis(), "2028-03-01T00:00:00.000Z");
    }

    #[test]
    fn calendar_round_trips() {
        for days in [-1, 0, 59, 60, 365, 10_957, 20_734, 47_541] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn civil_dates_are_the_calendars() {
        // Each against Python's `datetime.date` (days since 1970-01-01): a
        // round trip alone would pass a month 13 for January, or a century
        // or 400-year rule applied both ways.
        for (days, date) in [
            (-1, (1969, 12, 31)),
            (-25_508, (1900, 3, 1)),
            (-135_080, (1600, 3, 1)),
            (11_016, (2000, 2, 29)),
            (11_017, (2000, 3, 1)),
            (20_792, (2026, 12, 5)),
            (20_819, (2027, 1, 1)),
            (47_540, (2100, 2, 28)),
            (47_541, (2100, 3, 1)),
            (157_113, (2400, 2, 29)),
        ] {
            assert_eq!(civil_from_days(days), date, "day {days}");
            assert_eq!(days_from_civil(date.0, date.1, date.2), days, "{date:?}");
        }
    }

    #[test]
    fn next_hour_is_aligned_to_the_clock() {
        let t = WallTime::from_unix_ms(3_600_000 * 5 + 1_234);
        assert_eq!(t.hour(), 5);
        assert_eq!(t.next_hour(), WallTime::from_unix_ms(3_600_000 * 6));
    }
}
