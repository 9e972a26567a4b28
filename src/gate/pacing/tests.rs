//! Unit tests of `gate/pacing`, in a file of their own so the module stays short.

use std::sync::Arc;

use http::HeaderValue;

use super::*;
use crate::core::advice::counters::reset_value;

/// Every async test runs under a bound of virtual time: a gate that
/// never wakes a waiter fails the test instead of hanging it.
async fn bounded<F: std::future::Future>(test: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(3_600), test).await.expect("the test ended within an hour of virtual time")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn answer(state: &mut PacingState, now: Duration, status: u16, h: &HeaderMap) {
    let class = if status == 429 { Class::Throttled } else { Class::Success };
    answer_as(state, now, status, class, h);
}

fn answer_as(state: &mut PacingState, now: Duration, status: u16, class: Class, h: &HeaderMap) {
    state.on_done(now, &Feedback { now, status: Some(status), class, headers: Some(h) });
}

fn rl(limit: u32, remaining: u32, reset: u64) -> HeaderMap {
    headers(&[
        ("ratelimit-limit", &limit.to_string()),
        ("ratelimit-remaining", &remaining.to_string()),
        ("ratelimit-reset", &reset.to_string()),
    ])
}

#[test]
fn reads_both_header_families_and_their_reset_forms() {
    let h = rl(30, 7, 2);
    assert_eq!(
        RateLimitHeaders::read(&h),
        RateLimitHeaders {
            limit: Some(30),
            remaining: Some(7),
            reset: Some(Duration::from_secs(2)),
            reset_from_date: false
        }
    );
    let x = headers(&[
        ("x-ratelimit-limit", "100, 100;w=60"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1.25"),
    ]);
    assert_eq!(
        RateLimitHeaders::read(&x),
        RateLimitHeaders { limit: Some(100), remaining: Some(0), reset: Some(ms(1250)), reset_from_date: false }
    );
    // GitHub: a Unix time, measured against the answer's Date.
    let date = "Thu, 08 Oct 2026 09:00:00 GMT"; // 1791450000
    let gh = headers(&[("x-ratelimit-reset", "1791450023"), ("date", date)]);
    assert_eq!(RateLimitHeaders::read(&gh).reset, Some(Duration::from_secs(23)));
    assert!(RateLimitHeaders::read(&gh).reset_from_date, "whole seconds against a whole-second Date");
    let gh_ms = headers(&[("x-ratelimit-reset", "1791450023000"), ("date", date)]);
    assert_eq!(RateLimitHeaders::read(&gh_ms).reset, Some(Duration::from_secs(23)));
    assert_eq!(RateLimitHeaders::read(&headers(&[("x-ratelimit-reset", "1791450023")])).reset, None, "no Date");
    for bad in ["-1", "soon", "1e3", "", "1.", "0x10"] {
        assert_eq!(RateLimitHeaders::read(&headers(&[("ratelimit-reset", bad)])).reset, None, "{bad:?}");
    }
    assert_eq!(reset_value("0.0001", || None), Some((ms(1), false)), "rounded up, never early");
}

#[test]
fn spends_the_window_then_waits_for_the_reset() {
    let mut s = PacingState::new(PacingConfig::default());
    // Nothing known: the first attempts go.
    for _ in 0..3 {
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    }
    // 8 per window, resetting in 1 s; of the 3 sent, 3 were counted.
    answer(&mut s, ms(3), 201, &rl(8, 5, 1));
    assert_eq!(s.allowance(), Some(5));
    for _ in 0..5 {
        assert_eq!(s.try_admit(ms(4)), Verdict::Admit);
    }
    assert_eq!(s.try_admit(ms(4)), Verdict::WaitUntil(ms(1003)));
    // The earliest reset bound wins (whole seconds are rounded up).
    answer(&mut s, ms(6), 201, &rl(8, 4, 1));
    assert_eq!(s.try_admit(ms(7)), Verdict::WaitUntil(ms(1003)));
    for _ in 0..6 {
        answer(&mut s, ms(8), 201, &rl(8, 0, 1));
    }
    // At the reset the whole limit is available again.
    assert_eq!(s.try_admit(ms(1003)), Verdict::Admit);
    assert_eq!(s.allowance(), Some(7));
}

#[test]
fn in_flight_counts_admissions_until_their_answers_across_a_reset() {
    let mut s = PacingState::new(PacingConfig::default());
    assert_eq!(s.in_flight(), 0);
    for _ in 0..3 {
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    }
    assert_eq!(s.in_flight(), 3);
    answer(&mut s, ms(2), 201, &rl(4, 1, 1));
    assert_eq!(s.in_flight(), 2);
    // The reset passes with two still out: they stay in flight, and count
    // against the new window.
    assert_eq!(s.try_admit(ms(1002)), Verdict::Admit);
    assert_eq!(s.in_flight(), 3);
    assert_eq!(s.allowance(), Some(1), "4 per window: 2 in flight at the reset, 1 admitted since");
    for _ in 0..3 {
        answer(&mut s, ms(1003), 201, &HeaderMap::new());
    }
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn other_clients_of_the_account_shrink_the_allowance() {
    let mut s = PacingState::new(PacingConfig::default());
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    // 5 of 10 used, and only 2 can have been ours.
    answer(&mut s, ms(3), 201, &rl(10, 5, 1));
    assert_eq!(s.allowance(), Some(5));
    // Remaining 0 closes the window whatever the count says.
    answer(&mut s, ms(4), 201, &rl(10, 0, 1));
    assert_eq!(s.try_admit(ms(5)), Verdict::WaitUntil(ms(1003)));
}

#[test]
fn remaining_zero_closes_a_window_of_unknown_size_until_its_reset() {
    // No limit told: only `Remaining: 0` closes the window, and a success
    // answered before the reset does not open it again.
    let mut s = PacingState::new(PacingConfig::default());
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    let spent = headers(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "1")]);
    answer(&mut s, ms(2), 201, &spent);
    assert_eq!(s.try_admit(ms(3)), Verdict::WaitUntil(ms(1002)));
    answer(&mut s, ms(4), 201, &HeaderMap::new());
    assert_eq!(s.try_admit(ms(5)), Verdict::WaitUntil(ms(1002)));
    assert_eq!(s.try_admit(ms(1002)), Verdict::Admit, "reset passed");
}

#[test]
fn the_capacity_is_learned_only_from_a_refused_window_and_only_when_asked() {
    let reset_only = headers(&[("ratelimit-reset", "1")]);
    // A window that ended without a refusal teaches nothing.
    let mut s = PacingState::new(PacingConfig::default());
    for _ in 0..3 {
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    }
    for _ in 0..3 {
        answer(&mut s, ms(2), 201, &reset_only);
    }
    assert_eq!(s.try_admit(ms(1002)), Verdict::Admit);
    assert_eq!(s.capacity(), None);
    // Without `learn`, a refused window teaches nothing either.
    let mut s = PacingState::new(PacingConfig { learn: false, ..PacingConfig::default() });
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    answer(&mut s, ms(2), 201, &reset_only);
    answer(&mut s, ms(2), 429, &reset_only);
    assert_eq!(s.try_admit(ms(1002)), Verdict::Admit);
    assert_eq!(s.capacity(), None);
}

#[test]
fn answers_sent_before_a_reset_do_not_close_the_new_window() {
    let mut s = PacingState::new(PacingConfig::default());
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    answer(&mut s, ms(2), 201, &rl(2, 0, 1));
    assert_eq!(s.try_admit(ms(1002)), Verdict::Admit, "reset passed");
    // The answer to the attempt sent before the reset says 0 left: ignored.
    answer(&mut s, ms(1003), 201, &rl(2, 0, 1));
    assert_eq!(s.allowance(), Some(0), "2 per window, 1 was in flight at the reset, 1 admitted since");
    answer(&mut s, ms(1004), 201, &rl(2, 0, 1));
    assert_eq!(s.try_admit(ms(1004)), Verdict::WaitUntil(ms(2004)));
}

/// The attempts in flight at a reset count against the new window; the
/// harness's `pacing-forgets-in-flight` (the `forgetting_in_flight` seam)
/// counts none of them, and lets a whole window go after them.
#[test]
fn attempts_in_flight_at_a_reset_count_against_the_new_window_unless_forgotten() {
    for forget in [false, true] {
        let fresh = PacingState::new(PacingConfig::default());
        let mut s = if forget { fresh.forgetting_in_flight() } else { fresh };
        for _ in 0..3 {
            assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
        }
        // 4 per window, 1 left, resetting in 1 s: one more goes, two stay out.
        answer(&mut s, ms(2), 201, &rl(4, 1, 1));
        assert_eq!(s.try_admit(ms(3)), Verdict::Admit);
        assert_eq!(s.try_admit(ms(3)), Verdict::WaitUntil(ms(1002)));
        assert_eq!(s.try_admit(ms(1002)), Verdict::Admit, "reset passed");
        let (in_flight, allowance) = (s.in_flight(), s.allowance());
        assert_eq!(in_flight, 4, "three from before the reset and the one just admitted");
        if forget {
            assert_eq!(allowance, Some(3), "the forgetting gate counts only the one admitted since");
        } else {
            assert_eq!(allowance, Some(0), "the three still out may land in the new window");
        }
    }
}

#[test]
fn a_refusal_holds_the_whole_fleet_for_the_advice() {
    let mut s = PacingState::new(PacingConfig::default());
    for _ in 0..4 {
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    }
    answer(&mut s, ms(5), 429, &headers(&[("retry-after", "2")]));
    assert_eq!(s.hold_until(), ms(2005));
    assert_eq!(s.try_admit(ms(6)), Verdict::WaitUntil(ms(2005)));
    // A terminal 429 (quota) holds nothing.
    let mut t = PacingState::new(PacingConfig::default());
    t.try_admit(ms(0));
    answer_as(&mut t, ms(1), 429, Class::Terminal, &headers(&[("retry-after", "86400")]));
    assert_eq!(t.hold_until(), Duration::ZERO);
    // A hold is capped at max_hold.
    let mut c = PacingState::new(PacingConfig { max_hold: Duration::from_secs(10), ..PacingConfig::default() });
    c.try_admit(ms(0));
    answer(&mut c, ms(0), 429, &headers(&[("retry-after", "3600")]));
    assert_eq!(c.hold_until(), Duration::from_secs(10));
}

#[test]
fn a_refusal_sent_before_a_reset_still_holds_the_fleet() {
    // Hunt seed 63137: two refusals in one millisecond. The first says
    // `Retry-After: 0`, a reset now, so the attempts out count as sent
    // before it; the second's second was lost as stale.
    let mut s = PacingState::new(PacingConfig::default());
    for _ in 0..3 {
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    }
    answer(&mut s, ms(10), 429, &headers(&[("retry-after", "0")]));
    answer(&mut s, ms(10), 429, &headers(&[("retry-after", "1")]));
    assert_eq!(s.hold_until(), ms(1010));
    assert_eq!(s.try_admit(ms(50)), Verdict::WaitUntil(ms(1010)));
    // The stale refusal still says nothing of the new window: the one
    // attempt out at the reset counted, the last answer frees it.
    answer(&mut s, ms(12), 201, &HeaderMap::new());
    assert_eq!(s.try_admit(ms(1010)), Verdict::Admit);
}

#[test]
fn of_several_retry_after_lines_the_largest_the_gate_can_measure_holds() {
    let date = "Thu, 08 Oct 2026 09:00:00 GMT"; // 1791450000
    let lines = |date_line: &'static str| {
        let mut h = headers(&[("retry-after", "1"), ("retry-after", "soon")]);
        h.append("retry-after", HeaderValue::from_static(date_line));
        h.append("retry-after", HeaderValue::from_static("2"));
        h
    };
    // No `Date`: the HTTP-date cannot be measured, the seconds can.
    assert_eq!(retry_after(&lines("Thu, 08 Oct 2026 09:00:01 GMT")), Some(Duration::from_secs(2)));
    // Against the answer's `Date`, a later date binds.
    let mut dated = lines("Thu, 08 Oct 2026 09:00:03 GMT");
    dated.insert("date", HeaderValue::from_static(date));
    assert_eq!(retry_after(&dated), Some(Duration::from_secs(3)));
    // A date alone, without `Date`: nothing the gate can measure.
    assert_eq!(retry_after(&headers(&[("retry-after", "Thu, 08 Oct 2026 09:00:03 GMT")])), None);
    // And the fleet is held by it.
    let mut s = PacingState::new(PacingConfig::default());
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    answer(&mut s, ms(5), 429, &lines("Thu, 08 Oct 2026 09:00:01 GMT"));
    assert_eq!(s.try_admit(ms(6)), Verdict::WaitUntil(ms(2005)));
}

#[test]
fn without_headers_it_learns_the_capacity_and_probes_once_per_window() {
    let mut s = PacingState::new(PacingConfig::default());
    let none = HeaderMap::new();
    for _ in 0..5 {
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    }
    for _ in 0..3 {
        answer(&mut s, ms(2), 201, &none);
    }
    answer(&mut s, ms(2), 429, &headers(&[("retry-after", "1")]));
    answer(&mut s, ms(3), 429, &headers(&[("retry-after", "1")]));
    assert_eq!(s.try_admit(ms(500)), Verdict::WaitUntil(ms(1003)));
    // After the hold: 3 worked last window, so 3 go, then one probe.
    for _ in 0..3 {
        assert_eq!(s.try_admit(ms(1003)), Verdict::Admit);
    }
    assert_eq!(s.capacity(), Some(3));
    assert_eq!(s.try_admit(ms(1003)), Verdict::WaitForAnswer);
    for _ in 0..3 {
        answer(&mut s, ms(1005), 201, &none);
    }
    assert_eq!(s.try_admit(ms(1005)), Verdict::Admit, "the probe");
    assert_eq!(s.try_admit(ms(1005)), Verdict::WaitForAnswer, "one probe at a time");
    answer(&mut s, ms(1007), 429, &headers(&[("retry-after", "1")]));
    assert_eq!(s.try_admit(ms(1008)), Verdict::WaitUntil(ms(2007)));
}

#[test]
fn headroom_is_left_for_other_clients() {
    let mut s = PacingState::new(PacingConfig { headroom: 2, ..PacingConfig::default() });
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    answer(&mut s, ms(2), 201, &rl(10, 9, 1));
    assert_eq!(s.allowance(), Some(7), "10 less 2 of headroom, less the one sent");
    assert_eq!(s.try_admit(ms(1002)), Verdict::Admit);
    assert_eq!(s.allowance(), Some(7), "a new window: 10 less 2 of headroom, less this one");
}

/// Flask-Limiter's headers: the reset in whole Unix seconds, rounded up,
/// against a whole-second `Date`.
fn flask(limit: u32, remaining: u32, reset_unix: u64, date_unix: u64) -> HeaderMap {
    let date = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(date_unix));
    headers(&[
        ("x-ratelimit-limit", &limit.to_string()),
        ("x-ratelimit-remaining", &remaining.to_string()),
        ("x-ratelimit-reset", &reset_unix.to_string()),
        ("date", &date),
    ])
}

const T0: u64 = 1_791_450_000;

/// A fixed window of 4 per second, as Flask-Limiter runs it, whose
/// server clock reads `T0 + 0.4 s` at our instant 0. The first hit
/// arrives at 1 ms (server `T0 + 0.401`), so the window truly resets at
/// 1.001 s, while `Reset` says `T0 + 2` against `Date: T0`: 2 s.
fn spend_first_window(config: PacingConfig) -> PacingState {
    let mut s = PacingState::new(config);
    for _ in 0..4 {
        assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    }
    for (i, left) in [3, 2, 1, 0].into_iter().enumerate() {
        answer(&mut s, ms(3 + i as u64), 201, &flask(4, left, T0 + 2, T0));
    }
    s
}

#[test]
fn a_whole_second_server_is_paced_by_the_period_a_probe_reveals() {
    let mut s = spend_first_window(PacingConfig::default());
    // The headers bound the period by 2.003 s (the first answer's bound
    // less the earliest send); nothing bounds it from below yet.
    assert_eq!(s.learned_period(), Some((Duration::ZERO, ms(2003))));
    // The oldest slot frees at 3 ms + 2.003 s; one probe goes a whole
    // second earlier, alone.
    assert_eq!(s.try_admit(ms(10)), Verdict::WaitUntil(ms(1006)));
    assert_eq!(s.try_admit(ms(1006)), Verdict::Admit, "the probe");
    assert_eq!(s.try_admit(ms(1006)), Verdict::WaitForAnswer, "nothing goes beside the probe");
    // It got through (a new window: 3 left, reset T0 + 3 against T0 + 1).
    answer(&mut s, ms(1008), 201, &flask(4, 3, T0 + 3, T0 + 1));
    assert_eq!(s.learned_period(), Some((Duration::ZERO, ms(1008))), "seen: answer less the earliest send");
    // Each success frees its slot at its answer plus 1.008 s, oldest first.
    assert_eq!(s.try_admit(ms(1008)), Verdict::WaitUntil(ms(1012)));
    assert_eq!(s.try_admit(ms(1012)), Verdict::Admit);
    assert_eq!(s.try_admit(ms(1012)), Verdict::WaitUntil(ms(1013)));
    assert_eq!(s.try_admit(ms(1013)), Verdict::Admit);
    assert_eq!(s.try_admit(ms(1014)), Verdict::Admit);
    for (i, left) in [2, 1, 0].into_iter().enumerate() {
        answer(&mut s, ms(1015 + i as u64), 201, &flask(4, left, T0 + 3, T0 + 1));
    }
    // Full with our last 4 successes when the last one (sent at 1012 ms
    // or later) arrived: the oldest (answered at 1008 ms) still counted.
    assert_eq!(s.learned_period(), Some((ms(4), ms(1008))));
    // The period was seen, so no more probes: the probe's slot frees first.
    assert_eq!(s.try_admit(ms(1020)), Verdict::WaitUntil(ms(2016)));
}

#[test]
fn without_learning_the_rounded_bound_holds_the_fleet_two_seconds() {
    // The negative control: the gate as it was, for the same answers.
    let mut s = spend_first_window(PacingConfig { learn_phase: false, ..PacingConfig::default() });
    assert_eq!(s.try_admit(ms(10)), Verdict::WaitUntil(ms(2003)));
    // A delta-seconds reset is read as before, learning or not.
    let mut d = PacingState::new(PacingConfig::default());
    for _ in 0..4 {
        d.try_admit(ms(0));
    }
    for (i, left) in [3, 2, 1, 0].into_iter().enumerate() {
        answer(&mut d, ms(3 + i as u64), 201, &rl(4, left, 2));
    }
    assert_eq!(d.learned_period(), None);
    assert_eq!(d.try_admit(ms(10)), Verdict::WaitUntil(ms(2003)));
}

#[test]
fn a_refused_probe_raises_the_lower_bound_and_ends_the_probing() {
    let mut s = spend_first_window(PacingConfig::default());
    assert_eq!(s.try_admit(ms(1006)), Verdict::Admit, "the probe");
    // Too early (a window longer than a whole second, say).
    let mut refusal = flask(4, 0, T0 + 2, T0 + 1);
    refusal.insert("retry-after", HeaderValue::from_static("0"));
    answer(&mut s, ms(1008), 429, &refusal);
    // The oldest success (answered at 3 ms) still counted at 1006 ms.
    assert_eq!(s.learned_period(), Some((ms(1003), ms(2003))));
    // A second probe could only go where the first was refused: wait for the bound.
    assert_eq!(s.try_admit(ms(1009)), Verdict::WaitUntil(ms(2006)));
}

#[test]
fn a_refusal_the_gate_did_not_expect_forgets_the_period() {
    let mut s = spend_first_window(PacingConfig::default());
    s.try_admit(ms(1006));
    answer(&mut s, ms(1008), 201, &flask(4, 3, T0 + 3, T0 + 1));
    assert_eq!(s.try_admit(ms(1012)), Verdict::Admit);
    // Another client took the place: the limiter refuses.
    answer(&mut s, ms(1014), 429, &flask(4, 0, T0 + 3, T0 + 1));
    // Back to the headers' bound (1.014 s + 2 s less the earliest send),
    // and probing again.
    assert_eq!(s.learned_period(), Some((Duration::ZERO, ms(3014))));
    assert_eq!(s.try_admit(ms(1015)), Verdict::WaitUntil(ms(2018)), "a probe 1 s before 4 ms + 3.014 s");
}

#[test]
fn answers_are_not_matched_to_admissions_so_sends_are_bounded_from_below() {
    let mut s = PacingState::new(PacingConfig::default());
    assert_eq!(s.try_admit(ms(0)), Verdict::Admit);
    assert_eq!(s.try_admit(ms(500)), Verdict::Admit);
    // This answer may be the one sent at 0: its slot's send is 0, so the
    // bound on the period (2.502 s less the send) stays on the safe side.
    answer(&mut s, ms(502), 201, &flask(30, 29, T0 + 2, T0));
    assert_eq!(s.learned_period(), Some((Duration::ZERO, ms(2502))));
}

#[test]
fn a_reset_read_before_any_success_bounds_no_period() {
    // No success is known to be counted, so the reset frees none the gate
    // knows of: the first whole-second answer, a refusal, engages the
    // learning and bounds nothing.
    let mut p = Phase::default();
    let refusal = Answer {
        success: false,
        refused: true,
        remaining: Some(0),
        from_date: true,
        bound: Some(ms(2100)),
        others_out: 0,
    };
    p.learn(ms(100), ms(0), refusal, Some(5));
    assert!(p.engaged);
    assert_eq!(p.earliest_sent(), None);
    assert_eq!(p.period_hi, None);
    // The first success bounds it by its own send.
    let success = Answer { success: true, refused: false, remaining: Some(4), ..refusal };
    p.learn(ms(1300), ms(1200), success, Some(5));
    assert_eq!(p.period_hi, Some(ms(900)), "the reset at 2.1 s less the send at 1.2 s");
}

#[test]
fn a_full_window_bounds_the_period_from_below_only_by_slots_surely_counted() {
    // Hunt seed 90603: a limit of 3; a success of the window before
    // (answered at 9 ms), then the new window's. Its `Remaining: 0`
    // comes back while another of its attempts is still out, which may
    // have arrived first and be the one counted: the old slot is not
    // known to be counted, and the period is not known to exceed 2 s.
    let success = |remaining, others_out| Answer {
        success: true,
        refused: false,
        remaining: Some(remaining),
        from_date: false,
        bound: None,
        others_out,
    };
    let learned = |last_others_out| {
        let mut p = Phase::default();
        p.learn(ms(9), ms(0), success(0, 0), Some(3));
        p.learn(ms(2016), ms(2008), success(1, 1), Some(3));
        p.learn(ms(2021), ms(2016), success(0, last_others_out), Some(3));
        p.period_lo
    };
    assert_eq!(learned(1), Duration::ZERO, "the oldest surely counted is the new window's first");
    // With nothing else out, the three successes are the three counted.
    assert_eq!(learned(0), ms(2007));
}

#[test]
fn of_two_equal_upper_bounds_the_one_the_gate_saw_happen_wins() {
    let mut p = Phase::default();
    p.upper_period(ms(2000), false);
    assert_eq!((p.period_hi, p.period_seen), (Some(ms(2000)), false));
    // A header's looser bound changes nothing.
    p.upper_period(ms(2001), true);
    assert_eq!((p.period_hi, p.period_seen), (Some(ms(2000)), false));
    // A seen reset of the same length: nothing left to probe.
    p.upper_period(ms(2000), true);
    assert_eq!((p.period_hi, p.period_seen), (Some(ms(2000)), true));
    // A header's equal bound keeps it seen.
    p.upper_period(ms(2000), false);
    assert_eq!((p.period_hi, p.period_seen), (Some(ms(2000)), true));
    // A header's tighter bound is not seen: probe again.
    p.upper_period(ms(1999), false);
    assert_eq!((p.period_hi, p.period_seen), (Some(ms(1999)), false));
}

fn feedback(status: u16, h: &HeaderMap) -> Feedback<'_> {
    let class = if status == 429 { Class::Throttled } else { Class::Success };
    Feedback { now: Duration::ZERO, status: Some(status), class, headers: Some(h) }
}

#[tokio::test(start_paused = true)]
async fn the_gate_holds_waiters_until_the_reset_in_order() {
    bounded(async {
        let gate = Arc::new(Pacing::new(PacingState::new(PacingConfig::default())));
        let start = tokio::time::Instant::now();
        gate.admit().await;
        gate.done(&feedback(201, &rl(5, 1, 2)));
        gate.admit().await; // the last one of the window
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..3 {
            let (gate, order) = (gate.clone(), order.clone());
            tasks.spawn(async move {
                gate.admit().await;
                order.lock().unwrap().push((i, start.elapsed()));
            });
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        assert_eq!(gate.queued(), 3);
        while tasks.join_next().await.is_some() {}
        let order = order.lock().unwrap().clone();
        assert_eq!(order.iter().map(|o| o.0).collect::<Vec<_>>(), [0, 1, 2], "first come, first served");
        assert!(order.iter().all(|o| o.1 == Duration::from_secs(2)), "{order:?}");
        // 5 per window, less the one in flight at the reset (it may land in
        // the new window), less the three just admitted.
        assert_eq!(gate.with_schedule(PacingState::allowance), Some(1));
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_leaves_the_queue() {
    bounded(async {
        let gate = Pacing::new(PacingState::new(PacingConfig::default()));
        gate.admit().await;
        gate.done(&feedback(429, &headers(&[("retry-after", "1")])));
        let start = tokio::time::Instant::now();
        let cancelled = tokio::time::timeout(ms(100), gate.admit()).await;
        assert!(cancelled.is_err());
        assert_eq!(gate.queued(), 0, "the dropped admission left the queue");
        gate.admit().await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    })
    .await
}

#[test]
fn each_config_setter_sets_its_own_field() {
    let built = PacingConfig::default().headroom(2).max_hold(Duration::from_secs(5)).learn(false).learn_phase(false);
    let expected = PacingConfig { headroom: 2, max_hold: Duration::from_secs(5), learn: false, learn_phase: false };
    assert_eq!(built, expected);
    assert_ne!(built, PacingConfig::default());
}
