//! Unit tests of `core/policy`, in a file of their own so the module stays short.

use super::*;
use crate::core::budget::TokenBucketBudget;
use crate::core::retry_after::HeaderState;

const S: fn(u64) -> Duration = Duration::from_secs;
const HALF: u64 = 1 << 63;

#[test]
fn a_terminal_answer_without_a_code_reads_cleanly() {
    let bare = GiveUpReason::Terminal { status: 400, code: None };
    assert_eq!(bare.to_string(), "terminal answer 400: retrying cannot help: fix the request");
    let coded = GiveUpReason::Terminal { status: 429, code: Some("QUOTA_EXCEEDED".into()) };
    assert!(coded.to_string().starts_with("terminal answer 429 QUOTA_EXCEEDED: the quota is spent"), "{coded}");
}

/// Each terminal code says what a person can do next, in its own words.
#[test]
fn each_terminal_code_says_what_to_do_next() {
    let words = |code: &str| GiveUpReason::Terminal { status: 429, code: Some(code.into()) }.to_string();
    for (codes, next) in [
        (["QUOTA_EXCEEDED", "insufficient_quota"], "the quota is spent: tell a person or raise the quota"),
        (["SIGNUP_REQUIRED", "signup_required"], "the anonymous cap is reached: use an API key"),
        (["INSUFFICIENT_CREDITS", "insufficient_credits"], "the balance is empty: top up"),
        (["IDEMPOTENCY_KEY_REUSED"; 2], "this key was used with another body: use a new key for a new operation"),
    ] {
        for code in codes {
            assert!(words(code).ends_with(next), "{code}: {}", words(code));
        }
    }
    assert!(words("OTHER").ends_with("retrying cannot help: fix the request"), "{}", words("OTHER"));
}

fn advice(secs: u64) -> Advice {
    Advice {
        source: AdviceSource::HeaderSeconds,
        wait: Some(S(secs)),
        header: HeaderState::Valid,
        server_date_used: false,
    }
}

fn attempted<'a>(class: Class, advice: &'a Advice, attempts: u32, elapsed: Duration) -> Attempted<'a> {
    Attempted {
        operation: Operation::Keyed,
        class,
        status: Some(429),
        code: Some("RATE_LIMITED"),
        advice,
        attempts,
        unclear: 0,
        throttled: u32::from(class == Class::Throttled),
        elapsed,
        previous_wait: None,
        cancelled: false,
    }
}

fn draws(x: u64) -> Draws {
    Draws { backoff: x, spread: x }
}

fn run(p: &Policy, a: &Attempted<'_>) -> Decision {
    decide(p, a, draws(HALF), None, Duration::ZERO)
}

/// An upper bound (OpenAI's reset "to the initial state") cuts the
/// backoff and is never a reason to stop, however long.
#[test]
fn an_upper_bound_cuts_the_backoff_and_never_gives_up_as_too_long() {
    let p = Policy::background();
    let bound = |wait: Duration| Advice { source: AdviceSource::OpenAiReset, wait: Some(wait), ..Advice::none() };
    // Background's first backoff window is 1 s: the half draw is 500 ms.
    let short = bound(Duration::from_millis(100));
    let Decision::Retry { wait, why } = run(&p, &attempted(Class::Throttled, &short, 1, S(0))) else { panic!() };
    assert_eq!(
        (wait, why.basis, why.jitter),
        (Duration::from_millis(100), WaitBasis::Bound(AdviceSource::OpenAiReset), Duration::ZERO)
    );
    let long = bound(S(360));
    let Decision::Retry { wait, why } = run(&p, &attempted(Class::Throttled, &long, 1, S(0))) else { panic!() };
    assert_eq!((wait, why.basis), (Duration::from_millis(500), WaitBasis::Backoff));
    // Past max_single_wait (60 s): still the backoff, no `advice_too_long`;
    // refused again: no escalation on a bound.
    let day = bound(S(86_400));
    let mut again = attempted(Class::Throttled, &day, 3, S(0));
    again.throttled = 3;
    let Decision::Retry { why, .. } = run(&p, &again) else { panic!() };
    assert_eq!(why.basis, WaitBasis::Backoff);
    // The same advice as a lower bound gives up at once (the negative control).
    let lower = Advice { source: AdviceSource::RateLimitField, ..day.clone() };
    assert!(matches!(
        run(&p, &attempted(Class::Throttled, &lower, 1, S(0))),
        Decision::GiveUp { reason: GiveUpReason::AdviceTooLong { .. } }
    ));
}

#[test]
fn success_is_done_and_terminal_stops_with_the_code() {
    let none = Advice::none();
    assert_eq!(run(&Policy::batch(), &attempted(Class::Success, &none, 1, S(0))), Decision::Done);
    let mut a = attempted(Class::Terminal, &none, 1, S(0));
    a.code = Some("QUOTA_EXCEEDED");
    let d = run(&Policy::batch(), &a);
    assert_eq!(d, give_up(GiveUpReason::Terminal { status: 429, code: Some("QUOTA_EXCEEDED".into()) }));
}

#[test]
fn advice_plus_spread() {
    let adv = advice(2);
    let d = run(&Policy::standard(), &attempted(Class::Throttled, &adv, 1, S(0)));
    // Spread cap for 2 s is 400 ms; a half draw gives 200 ms.
    let Decision::Retry { wait, why } = d else { panic!("{d:?}") };
    assert_eq!(wait, Duration::from_millis(2200));
    assert_eq!(why.basis, WaitBasis::Advice(AdviceSource::HeaderSeconds));
    assert_eq!((why.base, why.jitter), (S(2), Duration::from_millis(200)));
}

#[test]
fn zero_advice_still_gets_jitter() {
    // Up to a whole second for `Retry-After: 0`, never zero.
    let adv = advice(0);
    let d = decide(&Policy::standard(), &attempted(Class::Throttled, &adv, 1, S(0)), draws(u64::MAX), None, S(0));
    assert!(matches!(d, Decision::Retry { wait, .. } if wait == S(1)), "{d:?}");
}

#[test]
fn a_zero_advice_never_gives_a_zero_wait() {
    // Once (`explain --seed 529`), a draw whose spread was under 1 ms was
    // rounded down to a 0 ms wait.
    let adv = advice(0);
    for x in [0, 1, u64::MAX / 1000, u64::MAX / 100 - 1] {
        for p in [Policy::standard(), Policy::batch()] {
            let d = decide(&p, &attempted(Class::Throttled, &adv, 1, S(0)), draws(x), None, S(0));
            let Decision::Retry { wait, why } = d else { panic!("{d:?}") };
            assert!(wait >= Duration::from_millis(1), "{}, draw {x}: {why:?}", p.name);
        }
    }
}

#[test]
fn a_zero_retry_after_is_spread_over_the_second_it_may_leave_out() {
    // Issue 26: `Retry-After: 0` from a server that rounds down means
    // "under a second"; the spread was at most 100 ms.
    let adv = advice(0);
    for p in Policy::PRESETS.map(|n| Policy::preset(n).unwrap()) {
        let spread_only = Draws { backoff: 0, spread: u64::MAX };
        let top = decide(&p, &attempted(Class::Throttled, &adv, 1, S(0)), spread_only, None, S(0));
        assert!(matches!(top, Decision::Retry { wait, .. } if wait == S(1)), "{}: {top:?}", p.name);
    }
    // A body's resetAt that has passed is not in whole seconds: 100 ms at most.
    let reset = Advice { source: AdviceSource::BodyReset, ..advice(0) };
    let d = decide(&Policy::standard(), &attempted(Class::Throttled, &reset, 1, S(0)), draws(u64::MAX), None, S(0));
    assert!(matches!(d, Decision::Retry { wait, .. } if wait == Duration::from_millis(100)), "{d:?}");
    // Seed 002's flat spread has no cover.
    let mut flat = Policy::standard();
    flat.spread.rounded_zero = Duration::ZERO;
    let d = decide(&flat, &attempted(Class::Throttled, &adv, 1, S(0)), draws(u64::MAX), None, S(0));
    assert!(matches!(d, Decision::Retry { wait, .. } if wait == Duration::from_millis(100)), "{d:?}");
}

fn refused(throttled: u32, adv: &Advice) -> Attempted<'_> {
    Attempted { throttled, ..attempted(Class::Throttled, adv, throttled, S(3)) }
}

#[test]
fn an_advice_waited_out_and_refused_again_escalates() {
    // Issue 26: the second throttled answer waits at least the advice
    // plus the second its rounding may leave out, whatever the draws;
    // each further refusal adds a second more.
    let p = Policy::standard(); // backoff 500 ms .. 20 s, full jitter
    let adv = advice(0);
    let d = decide(&p, &refused(2, &adv), draws(0), None, S(0));
    let Decision::Retry { wait, why } = d else { panic!("{d:?}") };
    assert_eq!((why.basis, why.base, why.advised), (WaitBasis::RefusedAgain, S(1), Some(S(0))));
    assert_eq!((wait, why.window), (Duration::from_millis(1_001), Some(Duration::from_millis(500))));
    // The 4th escalation (5th throttled answer, k = 3): the advice plus
    // 4 s, against a draw from the backoff's 4 s window (counted from
    // the first escalation); a backoff over it wins.
    let d = decide(&p, &refused(5, &advice(1)), draws(u64::MAX), None, S(0));
    let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
    assert_eq!((why.basis, why.base, why.window), (WaitBasis::RefusedAgain, S(5), Some(S(4))));
    // Later escalations grow with the backoff (16 s window at k = 5) for
    // a policy that allows that many tries.
    let many = Policy { max_retries: 10, ..Policy::standard() };
    let d = decide(&many, &refused(7, &advice(0)), draws(u64::MAX), None, S(0));
    let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
    assert_eq!((why.base, why.window), (S(16), Some(S(16))));
}

#[test]
fn escalation_needs_a_refusal_after_a_waited_advice_and_the_policy() {
    let adv = advice(0);
    // The first throttled answer: the advice alone (the negative control).
    let first = decide(&Policy::standard(), &refused(1, &adv), draws(0), None, S(0));
    let Decision::Retry { why, .. } = first else { panic!("{first:?}") };
    assert_eq!((why.basis, why.base), (WaitBasis::Advice(AdviceSource::HeaderSeconds), S(0)));
    // Off (brief 002's clients): every refusal waits its advice.
    let off = Policy { escalate: false, ..Policy::standard() };
    let d = decide(&off, &refused(4, &adv), draws(u64::MAX), None, S(0));
    let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
    assert_eq!(why.base, S(0));
    // A 409 in progress with advice is not a refusal.
    let mut busy = refused(4, &adv);
    busy.class = Class::InProgress;
    let d = decide(&Policy::standard(), &busy, draws(0), None, S(0));
    let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
    assert_eq!(why.base, S(0));
}

#[test]
fn an_advice_with_milliseconds_escalates_by_the_backoff_alone() {
    // A resetAt is exact: no second to cover, only the backoff.
    let reset = Advice { source: AdviceSource::BodyReset, ..advice(0) };
    let d = decide(&Policy::standard(), &refused(2, &reset), draws(u64::MAX), None, S(0));
    let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
    assert_eq!((why.basis, why.base), (WaitBasis::RefusedAgain, Duration::from_millis(500)));
    let d = decide(&Policy::standard(), &refused(2, &reset), draws(0), None, S(0));
    let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
    assert_eq!((why.basis, why.base), (WaitBasis::Advice(AdviceSource::BodyReset), S(0)));
}

#[test]
fn batch_escalation_keeps_its_larger_backoff() {
    // Batch already takes max(advice, backoff for the attempt); a refusal
    // adds the rounding second when that is larger.
    let adv = advice(2);
    let d = decide(&Policy::batch(), &refused(4, &adv), draws(u64::MAX), None, S(0));
    let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
    assert_eq!((why.basis, why.base), (WaitBasis::BackoffOverAdvice, S(8)));
    let d = decide(&Policy::batch(), &refused(2, &adv), draws(0), None, S(0));
    let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
    assert_eq!((why.basis, why.base), (WaitBasis::RefusedAgain, S(3)));
}

#[test]
fn json_milliseconds_are_exact_at_any_size() {
    // 2^64 - 1 s is 18446744073709551615000 ms; saturating at
    // u64::MAX ms showed it 1000x too small.
    let huge = GiveUpReason::AdviceTooLong { advised: S(u64::MAX), max_single_wait: S(60) };
    let v = serde_json::to_value(&huge).unwrap();
    assert_eq!(v["advised"], "18446744073709551615000");
    assert_eq!(v["max_single_wait"], 60_000);
    // Up to 2^53 - 1 ms a number (exact in every JSON parser), beyond it a string.
    let why = |ms: u64| WaitWhy {
        basis: WaitBasis::Backoff,
        advised: Some(Duration::from_millis(ms)),
        base: Duration::from_millis(ms),
        jitter: Duration::ZERO,
        window: None,
    };
    let v = serde_json::to_value(why((1 << 53) - 1)).unwrap();
    assert_eq!((&v["advised"], &v["base"]), (&serde_json::json!(9_007_199_254_740_991u64), &v["advised"]));
    let v = serde_json::to_value(why(1 << 53)).unwrap();
    assert_eq!((&v["advised"], &v["window"]), (&serde_json::json!("9007199254740992"), &serde_json::Value::Null));
    let max = GiveUpReason::DeadlineWouldPass { wait: Duration::MAX, remaining: Duration::ZERO };
    assert_eq!(serde_json::to_value(&max).unwrap()["wait"], "18446744073709551615999");
}

#[test]
fn batch_mode_takes_the_larger_of_advice_and_backoff() {
    let adv = advice(1);
    // Retry index 3: window 8 s, full draw 8 s > 1 s advice.
    let d = decide(&Policy::batch(), &attempted(Class::Throttled, &adv, 4, S(0)), draws(u64::MAX), None, S(0));
    let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
    assert_eq!((why.basis, why.base), (WaitBasis::BackoffOverAdvice, S(8)));
    // A 40 s advice is never truncated to the 30 s cap.
    let adv = advice(40);
    let d = decide(&Policy::batch(), &attempted(Class::Throttled, &adv, 1, S(0)), draws(u64::MAX), None, S(0));
    let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
    assert_eq!(why.base, S(40));
}

#[test]
fn no_advice_uses_backoff() {
    let none = Advice::none();
    let d = decide(&Policy::batch(), &attempted(Class::Throttled, &none, 3, S(0)), draws(u64::MAX), None, S(0));
    let Decision::Retry { wait, why } = d else { panic!("{d:?}") };
    assert_eq!((wait, why.basis, why.window), (S(4), WaitBasis::Backoff, Some(S(4))));
}

#[test]
fn n_retries_means_n_plus_one_attempts() {
    let adv = advice(1);
    let p = Policy::batch();
    for attempts in 1..=8 {
        assert!(matches!(run(&p, &attempted(Class::Throttled, &adv, attempts, S(0))), Decision::Retry { .. }));
    }
    assert_eq!(
        run(&p, &attempted(Class::Throttled, &adv, 9, S(0))),
        give_up(GiveUpReason::AttemptsExhausted { attempts: 9 })
    );
}

#[test]
fn too_long_advice_gives_up_before_the_deadline_check() {
    let adv = advice(30);
    let mut p = Policy::interactive();
    p.max_single_wait = S(5);
    let d = run(&p, &attempted(Class::Throttled, &adv, 1, S(0)));
    assert_eq!(d, give_up(GiveUpReason::AdviceTooLong { advised: S(30), max_single_wait: S(5) }));
}

#[test]
fn seed_000_thirty_seconds_against_a_ten_second_budget() {
    let adv = advice(30);
    let d = run(&Policy::interactive(), &attempted(Class::Throttled, &adv, 1, Duration::from_millis(20)));
    // max_single_wait is 10 s: too long at once.
    assert!(matches!(d, Decision::GiveUp { reason: GiveUpReason::AdviceTooLong { .. } }), "{d:?}");
    let adv = advice(9);
    let d = run(&Policy::interactive(), &attempted(Class::Throttled, &adv, 1, S(1)));
    let Decision::GiveUp { reason: GiveUpReason::DeadlineWouldPass { wait, remaining } } = d else { panic!("{d:?}") };
    assert_eq!((wait, remaining), (Duration::from_millis(9_500), S(9)));
}

#[test]
fn deadline_reserves_time_for_the_next_attempt() {
    let adv = advice(8);
    let p = Policy::interactive(); // 10 s deadline, 500 ms reserved, spread up to 1 s
    let d = decide(&p, &attempted(Class::Throttled, &adv, 1, S(0)), draws(0), None, S(0));
    assert!(matches!(d, Decision::Retry { wait, .. } if wait == S(8)));
    let d = decide(&p, &attempted(Class::Throttled, &adv, 1, Duration::from_millis(1_501)), draws(0), None, S(0));
    assert!(matches!(d, Decision::GiveUp { reason: GiveUpReason::DeadlineWouldPass { .. } }), "{d:?}");
}

#[test]
fn unsafe_post_after_429_but_not_after_ambiguous() {
    let adv = advice(1);
    let none = Advice::none();
    let mut a = attempted(Class::Throttled, &adv, 1, S(0));
    a.operation = Operation::Unsafe;
    assert!(matches!(run(&Policy::standard(), &a), Decision::Retry { .. }));
    let mut a = attempted(Class::Ambiguous, &none, 1, S(0));
    a.operation = Operation::Unsafe;
    a.status = None;
    assert_eq!(run(&Policy::standard(), &a), give_up(GiveUpReason::NotReplayable));
    // A request that never left may be sent again even when unsafe.
    a.class = Class::Transient;
    assert!(matches!(run(&Policy::standard(), &a), Decision::Retry { .. }));
    // A 503 to an unsafe POST is not replayed; to a keyed one it is.
    a.status = Some(503);
    assert_eq!(run(&Policy::standard(), &a), give_up(GiveUpReason::NotReplayable));
    a.operation = Operation::Keyed;
    assert!(matches!(run(&Policy::standard(), &a), Decision::Retry { .. }));
}

#[test]
fn unclear_429s_are_bounded() {
    let none = Advice::none();
    let p = Policy::interactive(); // 1 unclear retry of 3
    let mut a = attempted(Class::Unclear, &none, 1, S(0));
    a.code = None;
    assert!(matches!(run(&p, &a), Decision::Retry { .. }));
    a.unclear = 2;
    a.attempts = 2;
    assert_eq!(run(&p, &a), give_up(GiveUpReason::UnclearExhausted { unclear: 2 }));
}

/// Issue 55: a 429 with neither code nor advice (nginx `limit_req`) is
/// retried by the production presets as often as any other answer, so
/// the attempts, not the unclear bound, end a run of them.
#[test]
fn production_presets_retry_unclear_429s_as_often_as_any() {
    let none = Advice::none();
    for p in [Policy::background(), Policy::batch(), Policy::standard()] {
        let mut a = attempted(Class::Unclear, &none, 1, S(0));
        a.code = None;
        for n in 1..=p.max_retries {
            (a.unclear, a.attempts) = (n, n);
            assert!(matches!(run(&p, &a), Decision::Retry { .. }), "{} after {n}", p.name);
        }
        (a.unclear, a.attempts) = (p.max_retries + 1, p.max_retries + 1);
        let attempts = p.max_retries + 1;
        assert_eq!(run(&p, &a), give_up(GiveUpReason::AttemptsExhausted { attempts }), "{}", p.name);
    }
}

#[test]
fn an_unsendable_request_ends_at_the_first_attempt() {
    // Issue 26: an https:// URL without TLS made 9 attempts over 85 s.
    let none = Advice::none();
    let t = DefaultTableForTest::classify(crate::core::classify::TransportFailure::Unsendable);
    let mut a = attempted(t, &none, 1, S(0));
    (a.status, a.code) = (None, None);
    for op in [Operation::Unsafe, Operation::Keyed, Operation::Safe] {
        a.operation = op;
        assert_eq!(run(&Policy::background(), &a), give_up(GiveUpReason::Unsendable), "{op:?}");
    }
    assert_eq!(GiveUpReason::Unsendable.kind(), "unsendable");
    assert!(GiveUpReason::Unsendable.to_string().contains("nothing was sent"));
    // A request that was merely not sent this time is retried.
    let t = DefaultTableForTest::classify(crate::core::classify::TransportFailure::NotSent);
    let mut a = attempted(t, &none, 1, S(0));
    (a.status, a.code) = (None, None);
    assert!(matches!(run(&Policy::background(), &a), Decision::Retry { .. }));
}

struct DefaultTableForTest;

impl DefaultTableForTest {
    fn classify(f: crate::core::classify::TransportFailure) -> Class {
        use crate::core::classify::{Classifier, DefaultTable, Outcome};
        DefaultTable::default().classify(Outcome::Transport(f))
    }
}

#[test]
fn cancellation_comes_before_waiting() {
    let adv = advice(1);
    let mut a = attempted(Class::Throttled, &adv, 1, S(0));
    a.cancelled = true;
    assert_eq!(run(&Policy::standard(), &a), give_up(GiveUpReason::Cancelled));
}

#[test]
fn budget_is_asked_last() {
    let adv = advice(1);
    let b = TokenBucketBudget::new(2, 100);
    let a = attempted(Class::Throttled, &adv, 1, S(0));
    let d = decide(&Policy::standard(), &a, draws(HALF), Some(&b), S(0));
    assert_eq!(d, give_up(GiveUpReason::BudgetExhausted));
    // A give-up earlier in the order does not touch the budget.
    let b = TokenBucketBudget::new(10, 100);
    let far = advice(600);
    let _ = decide(&Policy::standard(), &attempted(Class::Throttled, &far, 1, S(0)), draws(HALF), Some(&b), S(0));
    assert_eq!(b.tokens_milli(), 10_000);
}

#[test]
fn in_progress_backs_off() {
    let none = Advice::none();
    let mut a = attempted(Class::InProgress, &none, 1, S(0));
    a.status = Some(409);
    let d = run(&Policy::standard(), &a);
    assert!(matches!(d, Decision::Retry { why: WaitWhy { basis: WaitBasis::Backoff, .. }, .. }), "{d:?}");
}

/// Every number each preset's doc comment states, field by field: the
/// hunt judges a run by the policy its client declares, so only this
/// pins a preset to its documentation.
#[test]
fn presets_have_their_documented_numbers() {
    let m = Duration::from_millis;
    // (preset, retries, deadline, max single wait, reserved per attempt,
    //  attempt timeout, backoff base, backoff cap, advice mode, unclear retries)
    let documented = [
        (Policy::interactive(), 3, S(10), S(10), m(500), S(5), m(200), S(2), AdviceMode::AdvicePlusSpread, 1),
        (Policy::background(), 8, S(120), S(60), S(1), S(30), S(1), S(30), AdviceMode::AdvicePlusSpread, 8),
        (Policy::batch(), 8, S(90), S(90), S(1), S(30), S(1), S(30), AdviceMode::MaxOfAdviceAndBackoff, 8),
        (Policy::standard(), 8, S(60), S(60), S(1), S(20), m(500), S(20), AdviceMode::AdvicePlusSpread, 8),
    ];
    for (p, retries, deadline, single, reserved, timeout, base, cap, mode, unclear) in documented {
        let numbers = (p.max_retries, p.deadline, p.max_single_wait, p.min_attempt_time, p.attempt_timeout);
        assert_eq!(numbers, (retries, deadline, single, reserved, timeout), "{}", p.name);
        assert_eq!((p.backoff.base, p.backoff.cap, p.backoff.jitter), (base, cap, Jitter::Full), "{}", p.name);
        assert_eq!((p.advice_mode, p.unclear_max_retries), (mode, unclear), "{}", p.name);
        // Common to all: escalation, advice, keys, the default spread.
        assert!(p.escalate && p.use_advice && p.idempotency_keys, "{}", p.name);
        assert_eq!(p.spread, Spread::default(), "{}", p.name);
    }
    for name in Policy::PRESETS {
        assert_eq!(Policy::preset(name).unwrap().name, name);
    }
    assert_eq!(Policy::preset("nope"), None);
}

#[test]
fn policy_round_trips_through_toml() {
    let p = Policy::batch();
    let text = toml::to_string(&p).unwrap();
    assert!(text.contains("deadline = \"1m 30s\""), "{text}");
    let back: Policy = toml::from_str(&text).unwrap();
    assert_eq!(back, p);
    let err = toml::from_str::<Policy>("deadline = 90").unwrap_err().to_string();
    assert!(err.contains("deadline"), "{err}");
    let err = toml::from_str::<Policy>("deadlin = \"9s\"").unwrap_err().to_string();
    assert!(err.contains("unknown field"), "{err}");
}

#[test]
fn the_builder_starts_from_standard_and_each_setter_sets_its_field() {
    assert_eq!(Policy::builder().build(), Policy::standard());
    assert_eq!(Policy::batch().to_builder().build(), Policy::batch());
    let backoff = Backoff::new(ms(7), ms(70), Jitter::Equal);
    let spread = Spread::new(0, ms(1), ms(2)).rounded_zero(ms(3));
    let built = Policy::interactive()
        .to_builder()
        .name("custom")
        .max_retries(9)
        .deadline(ms(1))
        .max_single_wait(ms(2))
        .min_attempt_time(ms(3))
        .attempt_timeout(ms(4))
        .backoff(backoff)
        .advice_mode(AdviceMode::MaxOfAdviceAndBackoff)
        .spread(spread)
        .escalate(false)
        .unclear_max_retries(8)
        .use_advice(false)
        .idempotency_keys(false)
        .build();
    let mut expected = Policy::interactive();
    expected.name = "custom".into();
    expected.max_retries = 9;
    expected.deadline = ms(1);
    expected.max_single_wait = ms(2);
    expected.min_attempt_time = ms(3);
    expected.attempt_timeout = ms(4);
    expected.backoff = backoff;
    expected.advice_mode = AdviceMode::MaxOfAdviceAndBackoff;
    expected.spread = spread;
    expected.escalate = false;
    expected.unclear_max_retries = 8;
    expected.use_advice = false;
    expected.idempotency_keys = false;
    assert_eq!(built, expected);
    // Every field moved away from the preset (else a setter could be a no-op unseen).
    let fields = |p: &Policy| {
        [
            format!("{:?}", p.name),
            format!("{:?}", p.max_retries),
            format!("{:?}", p.deadline),
            format!("{:?}", p.max_single_wait),
            format!("{:?}", p.min_attempt_time),
            format!("{:?}", p.attempt_timeout),
            format!("{:?}", p.backoff),
            format!("{:?}", p.advice_mode),
            format!("{:?}", p.spread),
            format!("{:?}", p.escalate),
            format!("{:?}", p.unclear_max_retries),
            format!("{:?}", p.use_advice),
            format!("{:?}", p.idempotency_keys),
        ]
    };
    let (before, after) = (fields(&Policy::interactive()), fields(&built));
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_ne!(b, a, "field {i} kept the preset's value");
    }
}

#[test]
fn the_builders_documented_defaults_are_standards() {
    let p = Policy::builder().build();
    assert_eq!(p.name, "standard");
    assert_eq!((p.max_retries, p.unclear_max_retries), (8, 8));
    assert_eq!((p.deadline, p.max_single_wait), (S(60), S(60)));
    assert_eq!((p.min_attempt_time, p.attempt_timeout), (S(1), S(20)));
    assert_eq!(p.backoff, Backoff::new(ms(500), S(20), Jitter::Full));
    assert_eq!((p.advice_mode, p.spread), (AdviceMode::AdvicePlusSpread, Spread::default()));
    assert_eq!(Spread::default(), Spread::new(200, ms(100), S(1)));
    assert!(p.escalate && p.use_advice && p.idempotency_keys);
}
