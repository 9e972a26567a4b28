//! Unit tests of `gate/aimd`, in a file of their own so the module stays short.

use super::*;

/// Every async test runs under a bound of virtual time: a gate that
/// never wakes a waiter fails the test instead of hanging it.
async fn bounded<F: std::future::Future>(test: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(3_600), test).await.expect("the test ended within an hour of virtual time")
}

const MS: fn(u64) -> Duration = Duration::from_millis;

fn fixed_window(limit: u32) -> Controller {
    Controller::new(AimdConfig { rate: RateControl::Off, initial_limit: limit, ..AimdConfig::default() })
}

/// 10 successes a second for 4 s (the clocker measures about 10/s),
/// then a throttle answered at 4001 ms.
fn throttled_after_10_a_second(c: &mut Controller) {
    for i in 0..40 {
        c.admit(MS(i * 100));
        c.answer(MS(i * 100 + 1), Signal::Success);
    }
    c.admit(MS(4_000));
    c.answer(MS(4_001), Signal::Throttled);
}

#[test]
fn the_window_bounds_in_flight() {
    let mut c = fixed_window(2);
    assert_eq!(c.readiness(MS(0)), Readiness::Now);
    c.admit(MS(0));
    c.admit(MS(0));
    assert_eq!(c.readiness(MS(0)), Readiness::Full);
    c.answer(MS(5), Signal::Neutral);
    assert_eq!(c.readiness(MS(5)), Readiness::Now);
}

#[test]
fn additive_increase_is_one_slot_per_window_of_successes() {
    let mut c = fixed_window(4);
    // Keep the window full: 4 successes grow it by about one slot.
    for _ in 0..4 {
        while c.readiness(MS(0)) == Readiness::Now {
            c.admit(MS(0));
        }
        c.answer(MS(0), Signal::Success);
    }
    assert_eq!(c.limit(), 4, "4.9 slots: not yet 5 (1/4 + 1/4.25 + …)");
    c.admit(MS(0));
    c.answer(MS(0), Signal::Success);
    assert_eq!(c.limit(), 5);
}

#[test]
fn an_idle_window_does_not_grow() {
    let mut c = fixed_window(8);
    for _ in 0..100 {
        c.admit(MS(0));
        c.answer(MS(0), Signal::Success);
    }
    assert_eq!(c.limit(), 8, "one in flight out of 8 is not pressure");
}

#[test]
fn one_decrease_per_window() {
    let mut c = fixed_window(10);
    for _ in 0..10 {
        c.admit(MS(0));
    }
    // Ten 429s from one burst: the first cuts 10 -> 7, the other nine
    // were in flight before the cut and change nothing.
    assert!(c.answer(MS(1), Signal::Throttled));
    for _ in 0..9 {
        assert!(!c.answer(MS(1), Signal::Throttled));
    }
    assert_eq!(c.limit(), 7);
    // A throttle on an attempt sent after the cut cuts again: 7 -> 4.9.
    c.admit(MS(2));
    assert!(c.answer(MS(3), Signal::Throttled));
    assert_eq!(c.limit(), 4);
    // Never below min_limit.
    for _ in 0..20 {
        c.admit(MS(4));
        c.answer(MS(4), Signal::Throttled);
    }
    assert_eq!(c.limit(), 1);
}

#[test]
fn pacing_switches_on_at_the_first_throttle_and_spaces_admissions() {
    let mut c = Controller::new(AimdConfig::default());
    assert_eq!(c.rate_milli(), None);
    throttled_after_10_a_second(&mut c);
    let rate = c.rate_milli().expect("pacing on");
    assert!((6_000..=8_000).contains(&rate), "about 0.7 × 10/s, got {rate}");
    c.admit(MS(4_001));
    assert_eq!(c.readiness(MS(4_001)), Readiness::At(MS(4_001) + interval(rate)));
}

#[test]
fn a_fixed_config_never_grows() {
    let mut c = Controller::new(AimdConfig::fixed(1, 250));
    assert_eq!((c.limit(), c.rate_milli()), (1, Some(250)));
    c.admit(MS(0));
    assert_eq!(c.readiness(MS(0)), Readiness::Full);
    c.answer(MS(10), Signal::Success);
    assert_eq!(c.readiness(MS(10)), Readiness::At(MS(4_000)));
    for i in 0..50 {
        c.admit(MS(4_000 * (i + 1)));
        c.answer(MS(4_000 * (i + 1)), Signal::Success);
    }
    assert_eq!((c.limit(), c.rate_milli()), (1, Some(250)));
}

#[test]
fn a_fixed_config_holds_its_limit_on_a_throttle_and_never_raises_its_pace_again() {
    // Three slots at 1/s: a throttle may slow the pace (to 0.7/s, above
    // its floor of 0.5/s) but not the limit, and no success raises either.
    let mut c = Controller::new(AimdConfig::fixed(3, 1_000));
    c.admit(MS(0));
    assert!(c.answer(MS(10), Signal::Throttled));
    assert_eq!((c.limit(), c.rate_milli()), (3, Some(700)));
    for i in 0..50 {
        c.admit(MS(2_000 * (i + 1)));
        c.answer(MS(2_000 * (i + 1)), Signal::Success);
    }
    assert_eq!((c.limit(), c.rate_milli()), (3, Some(700)));
    // Without a pace, a throttle does not turn one on.
    let mut c = Controller::new(AimdConfig::fixed(3, 0));
    c.admit(MS(0));
    c.answer(MS(10), Signal::Throttled);
    assert_eq!((c.limit(), c.rate_milli()), (3, None));
}

#[test]
fn cubic_matches_botocore() {
    // botocore's test: W_max 10, β 0.7, C 0.4: K = ∛7.5 ≈ 1.957 s.
    let mut cubic = Cubic::default();
    assert_eq!(cubic.throttled(10_000, 700, MS(0)), 7_000);
    assert_eq!(cubic.k_ms, 1_957);
    assert_eq!(cubic.rate_at(MS(0)), 7_002, "β × W_max right after the throttle (K rounds down)");
    assert_eq!(cubic.rate_at(MS(1_957)), 10_000, "back at W_max after K");
    // 1 s past K: 0.4 × 1³ + 10 = 10.4/s.
    assert_eq!(cubic.rate_at(MS(2_957)), 10_400);
    assert_eq!(icbrt(27), 3);
    assert_eq!(icbrt(26), 2);
    assert_eq!(icbrt(u64::MAX as u128), 2_642_245);
}

#[test]
fn a_cubic_pace_from_the_start_rises_from_it_until_a_throttle() {
    // 4/s from the start: a success 5 ms in keeps it (the curve is
    // 0.4 × t³ above it). Sent at 4/s, 9 admissions in the first 2 s
    // measure 4.5 × 0.8 = 3.6/s, so a success 2.005 s in, on the curve
    // at 4 + 0.4 × 2.005³ = 7.224/s, is capped at twice that, 7.2/s.
    let config = AimdConfig { rate: RateControl::Cubic, initial_rate_milli: 4_000, ..AimdConfig::default() };
    let mut c = Controller::new(config);
    c.admit(MS(0));
    c.answer(MS(5), Signal::Success);
    assert_eq!(c.rate_milli(), Some(4_000));
    for i in 1..=8 {
        c.admit(MS(i * 250));
        c.answer(MS(i * 250 + 5), Signal::Success);
    }
    assert_eq!(c.rate_milli(), Some(7_200));
}

#[test]
fn a_cut_to_the_floor_keeps_whole_slots() {
    // Two slots at min_limit 2: a cut keeps exactly 2.000, so three
    // successes on a full window (+0.5, +0.4, +0.34) reach 3 slots.
    let config = AimdConfig { rate: RateControl::Off, initial_limit: 2, min_limit: 2, ..AimdConfig::default() };
    let mut c = Controller::new(config);
    c.admit(MS(0));
    c.admit(MS(0));
    c.answer(MS(1), Signal::Throttled);
    for i in 0..3 {
        assert_eq!(c.limit(), 2, "after {i} successes");
        c.admit(MS(2));
        c.answer(MS(3), Signal::Success);
    }
    assert_eq!(c.limit(), 3);
}

#[test]
fn a_cubic_cut_restarts_the_curve_from_the_rate_it_cut() {
    // 10 a second for 4 s, then a throttle: W_max is the measured rate
    // and the curve is back at it K = ∛(W_max × 0.3 / 0.4) s later, 0.4/s
    // above it one second after that.
    let mut c = Controller::new(AimdConfig { rate: RateControl::Cubic, ..AimdConfig::default() });
    throttled_after_10_a_second(&mut c);
    let w_max = c.clocker.measured_milli;
    assert_eq!(c.rate_milli(), Some(w_max * 7 / 10));
    let k_ms = icbrt(w_max as u128 * 300 * 2_500) as u64;
    // Keep the send rate measured above the curve so it does not cap it.
    for i in 0..(k_ms + 1_000) / 50 {
        c.admit(MS(4_001 + i * 50));
        c.answer(MS(4_001 + i * 50), Signal::Neutral);
    }
    c.admit(MS(4_001 + k_ms + 1_000));
    c.answer(MS(4_001 + k_ms + 1_000), Signal::Success);
    assert_eq!(c.rate_milli(), Some(w_max + 400));
}

#[test]
fn config_validation_names_the_problem() {
    assert_eq!(AimdConfig::default().validate(), Ok(()));
    assert_eq!(AimdConfig::fixed(1, 100).validate(), Ok(()));
    let bad = AimdConfig { initial_limit: 100, ..AimdConfig::default() };
    assert!(bad.validate().unwrap_err().contains("initial_limit"));
    let bad = AimdConfig { backoff_per_mille: 1000, ..AimdConfig::default() };
    assert!(bad.validate().unwrap_err().contains("backoff_per_mille"));
    // Each half of the rate's bounds on its own.
    let bad = AimdConfig { min_rate_milli: 0, ..AimdConfig::default() };
    assert!(bad.validate().unwrap_err().contains("0 < min_rate_milli"));
    let bad = AimdConfig { min_rate_milli: 2_000, max_rate_milli: 1_000, ..AimdConfig::default() };
    assert!(bad.validate().unwrap_err().contains("min_rate_milli <= max_rate_milli"));
    let bad = AimdConfig { initial_rate_milli: 2_000, max_rate_milli: 1_000, ..AimdConfig::default() };
    assert!(bad.validate().unwrap_err().contains("initial_rate_milli"));
    let bad = AimdConfig { min_limit: 0, initial_limit: 0, ..AimdConfig::default() };
    assert!(bad.validate().unwrap_err().contains("min_limit must be at least 1"));
}

#[test]
fn a_429_slows_the_gate_and_nothing_else_does() {
    assert_eq!(Signal::of(Class::Success, Some(200)), Signal::Success);
    assert_eq!(Signal::of(Class::Throttled, Some(429)), Signal::Throttled);
    assert_eq!(Signal::of(Class::Unclear, Some(429)), Signal::Throttled);
    // A classifier's unclear answer on another status, or on no answer,
    // says nothing about load; nor does a quota's terminal 429.
    assert_eq!(Signal::of(Class::Unclear, Some(503)), Signal::Neutral);
    assert_eq!(Signal::of(Class::Unclear, None), Signal::Neutral);
    assert_eq!(Signal::of(Class::Terminal, Some(429)), Signal::Neutral);
}

#[test]
fn toml_names_every_knob() {
    let c: AimdConfig = toml::from_str("initial_limit = 2\nrate = \"cubic\"").unwrap();
    assert_eq!((c.initial_limit, c.rate, c.max_limit), (2, RateControl::Cubic, 64));
    assert!(toml::from_str::<AimdConfig>("initial_limt = 2").is_err());
}

fn feedback(class: Class, status: u16) -> Feedback<'static> {
    Feedback { now: Duration::ZERO, status: Some(status), class, headers: None }
}

#[tokio::test(start_paused = true)]
async fn fifo_queue_and_the_window() {
    bounded(async {
        let log: GateLog = Arc::default();
        let gate = Arc::new(
            Aimd::new(AimdConfig { initial_limit: 1, rate: RateControl::Off, ..AimdConfig::default() })
                .with_log(log.clone()),
        );
        gate.admit().await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..3 {
            let (gate, order) = (gate.clone(), order.clone());
            tasks.spawn(async move {
                tokio::time::sleep(MS(i * 10)).await;
                gate.admit().await;
                order.lock().unwrap().push(i);
                tokio::time::sleep(MS(100)).await;
                gate.done(&feedback(Class::Success, 200));
            });
        }
        tokio::time::sleep(MS(50)).await;
        assert_eq!(gate.queued(), 3);
        gate.done(&feedback(Class::Success, 200));
        while tasks.join_next().await.is_some() {}
        assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
        let admitted: Vec<(u64, u32, u32)> = log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|f| match f.event {
                GateEvent::Admitted { ticket, in_flight, limit, .. } => Some((ticket, in_flight, limit)),
                _ => None,
            })
            .collect();
        assert_eq!(admitted.iter().map(|a| a.0).collect::<Vec<_>>(), [0, 1, 2, 3], "tickets in order");
        assert!(admitted.iter().all(|&(_, in_flight, limit)| in_flight <= limit));
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_leaves_the_queue() {
    bounded(async {
        let gate = Aimd::new(AimdConfig { initial_limit: 1, rate: RateControl::Off, ..AimdConfig::default() });
        gate.admit().await;
        let waited = tokio::time::timeout(MS(10), gate.admit()).await;
        assert!(waited.is_err());
        assert_eq!(gate.queued(), 0);
        gate.done(&feedback(Class::Success, 200));
        tokio::time::timeout(MS(10), gate.admit()).await.expect("the slot is free and nobody is ahead");
        assert_eq!(gate.in_flight(), 1);
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn pacing_waits_on_the_clock() {
    bounded(async {
        let gate = Aimd::new(AimdConfig::fixed(10, 2_000));
        let start = tokio::time::Instant::now();
        for _ in 0..3 {
            gate.admit().await;
        }
        assert_eq!(start.elapsed(), MS(1_000), "three admissions at 2/s: at 0, 500 and 1000 ms");
        assert_eq!((gate.limit(), gate.in_flight(), gate.rate_milli()), (10, 3, Some(2_000)));
    })
    .await
}

#[test]
fn each_setter_sets_its_own_field() {
    let built = AimdConfig::default()
        .initial_limit(9)
        .min_limit(2)
        .max_limit(99)
        .increase(3)
        .backoff_per_mille(500)
        .rate(RateControl::Off)
        .initial_rate_milli(7)
        .min_rate_milli(8)
        .max_rate_milli(9_000)
        .rate_increase_milli(11);
    let expected = AimdConfig {
        initial_limit: 9,
        min_limit: 2,
        max_limit: 99,
        increase: 3,
        backoff_per_mille: 500,
        rate: RateControl::Off,
        initial_rate_milli: 7,
        min_rate_milli: 8,
        max_rate_milli: 9_000,
        rate_increase_milli: 11,
    };
    assert_eq!(built, expected);
}
