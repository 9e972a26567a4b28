//! Imports `retrysim::internals` (hidden, no semver promise) for each
//! invariant's checker one by one (`check_run`, `check_liveness`,
//! `check_determinism`) on bare runs, `trace_json` and `PLANTED_SECRETS`.
//!
//! docs/DESIGN.md's invariants as properties over the full simulation: each case
//! is a generated scenario (see `strategies`) run by `sim::run::runner::run` with
//! a generated seed, then checked by `sim::checks::invariants`.
//!
//! Every property runs every checker of `check_run` (a case that breaks
//! another invariant fails too, and says which), plus its own assertion on a
//! scenario shaped to exercise it. A failure prints the seed, the violated
//! invariants, and a one-line replay command for the shrunk scenario (saved as
//! TOML under `target/tmp/properties/`).
//!
//! # Cases, seeds, persistence
//!
//! - Each property runs [`CASES`] cases by default (a few for the slow
//!   ones), so `cargo test --release` stays fast on two cores.
//!   `PROPTEST_CASES=N` runs N cases of every property instead.
//! - The proptest generator starts from the fixed [`RNG_SEED`], so CI runs
//!   the same cases every time. `PROPTEST_RNG_SEED=N` draws other cases.
//! - A failure's seed is persisted to `proptest-regressions/properties.txt`
//!   (committed), and every later run replays it first.
//!
//! The parsers' own model properties (delta-seconds and HTTP-date round
//! trips, arbitrary bytes never panic) live next to the parser, in
//! `src/core/advice/retry_after.rs`; [`parser`] adds what the whole pipeline adds:
//! the `Date` correction, several field lines, the body fallback, and the
//! client reading exactly what the simulated server advised.

use std::time::Duration;

use crate::support::replay;
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, RngSeed};
use retrysim::internals::checks::hunt;
use retrysim::internals::checks::invariants::{self as check, Invariant, Violation, check_run};
use retrysim::internals::run::runner::{self, JobOutcome, Report};
use retrysim::internals::run::scenario::Scenario;
use retrysim::trace::EventKind;

use retrysim::testing::strategies::*;

/// Cases per property when `PROPTEST_CASES` is unset.
pub const CASES: u32 = 128;

/// The proptest generator's seed when `PROPTEST_RNG_SEED` is unset.
pub const RNG_SEED: u64 = 0x0429_5eed;

const REGRESSIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proptest-regressions/properties.txt");

/// proptest's configuration (which reads every `PROPTEST_*` variable), with
/// our defaults where a variable is unset: `cases`, a fixed generator seed,
/// failures persisted to the committed file, and a shrink budget that keeps a
/// failing property under a minute or so.
pub fn config(cases: u32) -> ProptestConfig {
    let set = |name: &str| std::env::var_os(name).is_some();
    let mut c = ProptestConfig::default();
    if !set("PROPTEST_CASES") {
        c.cases = cases;
    }
    if !set("PROPTEST_RNG_SEED") {
        c.rng_seed = RngSeed::Fixed(RNG_SEED);
    }
    if !set("PROPTEST_MAX_SHRINK_ITERS") {
        c.max_shrink_iters = 256;
    }
    if !set("PROPTEST_DISABLE_FAILURE_PERSISTENCE") {
        c.failure_persistence = Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS)));
    }
    c
}

fn failure(property: &str, s: &Scenario, seed: u64, what: String) -> TestCaseError {
    TestCaseError::fail(format!(
        "{property} failed for seed {seed}: {what}\n{}\n(proptest persists this case in proptest-regressions/properties.txt; `cargo test --release --test it {property}` runs it first)",
        replay(s, seed)
    ))
}

/// Runs a case; a run that does not finish is itself a failure.
fn run_case(property: &str, s: &Scenario, seed: u64) -> Result<Report, TestCaseError> {
    runner::run(s, seed).map_err(|e| failure(property, s, seed, format!("the run did not finish: {}", e.message)))
}

/// Fails with every violation listed (the first ten).
fn expect_none(property: &str, s: &Scenario, seed: u64, violations: &[Violation]) -> Result<(), TestCaseError> {
    if violations.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = violations.iter().take(10).map(|v| format!("  {v}")).collect();
    if violations.len() > 10 {
        lines.push(format!("  … and {} more", violations.len() - 10));
    }
    Err(failure(property, s, seed, format!("{} violation(s):\n{}", violations.len(), lines.join("\n"))))
}

/// Runs `s` and checks every single-run invariant.
fn checked(property: &str, s: &Scenario, seed: u64) -> Result<Report, TestCaseError> {
    let r = run_case(property, s, seed)?;
    expect_none(property, s, seed, &check_run(&r))?;
    Ok(r)
}

/// Asserts a property-specific condition with the same failure format.
fn ensure(
    ok: bool,
    property: &str,
    s: &Scenario,
    seed: u64,
    what: impl FnOnce() -> String,
) -> Result<(), TestCaseError> {
    if ok { Ok(()) } else { Err(failure(property, s, seed, what())) }
}

fn only(violations: Vec<Violation>, invariant: Invariant) -> Vec<Violation> {
    violations.into_iter().filter(|v| v.invariant == invariant).collect()
}

proptest! {
    #![proptest_config(config(CASES))]

    /// Invariant 1: No sleep ends, and no attempt starts, past the deadline's last
    /// useful moment; no operation outlives its deadline.
    #[test]
    fn p01_deadline(s in arb_tight_scenario(), seed in arb_seed()) {
        let r = run_case("p01_deadline", &s, seed)?;
        expect_none("p01_deadline", &s, seed, &only(check_run(&r), Invariant::Deadline))?;
        expect_none("p01_deadline", &s, seed, &check_run(&r))?;
    }

    /// Invariant 2: At most N+1 attempts, whatever happens.
    #[test]
    fn p02_attempts_at_most_n_plus_one(s in arb_scenario(), seed in arb_seed()) {
        let r = run_case("p02_attempts_at_most_n_plus_one", &s, seed)?;
        expect_none("p02_attempts_at_most_n_plus_one", &s, seed, &only(check_run(&r), Invariant::AttemptBound))?;
        expect_none("p02_attempts_at_most_n_plus_one", &s, seed, &check_run(&r))?;
    }

    /// Invariant 2: Exactly N+1 attempts when every answer is a short retryable refusal.
    #[test]
    fn p02_exactly_n_plus_one_when_always_refused(s in arb_exhausting_scenario(), seed in arb_seed()) {
        let name = "p02_exactly_n_plus_one_when_always_refused";
        let r = checked(name, &s, seed)?;
        let n = s.policy.max_retries;
        for j in &r.records {
            let exhausted = matches!(&j.outcome, JobOutcome::GaveUp { reason } if reason == "attempts_exhausted");
            ensure(j.attempts == n + 1 && exhausted, name, &s, seed, || {
                format!("job {}: {} attempts ending {:?}, expected exactly {} and attempts_exhausted", j.job, j.attempts, j.outcome, n + 1)
            })?;
        }
    }

    /// Invariant 3: One charge per idempotency key (and per keyed operation), with lost
    /// answers, partitions, holds and bounces.
    #[test]
    fn p03_one_charge_per_key(s in arb_lossy_scenario(), seed in arb_seed()) {
        let r = run_case("p03_one_charge_per_key", &s, seed)?;
        expect_none("p03_one_charge_per_key", &s, seed, &only(check_run(&r), Invariant::OneChargePerKey))?;
        expect_none("p03_one_charge_per_key", &s, seed, &check_run(&r))?;
    }

    /// Invariant 4: No retry earlier than the advised wait, from the server's ledger.
    #[test]
    fn p04_advice_respected(s in arb_throttled_scenario(), seed in arb_seed()) {
        let r = run_case("p04_advice_respected", &s, seed)?;
        expect_none("p04_advice_respected", &s, seed, &only(check_run(&r), Invariant::AdviceRespected))?;
        expect_none("p04_advice_respected", &s, seed, &check_run(&r))?;
    }

    /// Invariant 5: Nothing retried after a terminal answer; no unsafe replay after an
    /// ambiguous failure (client trace and server ledger).
    #[test]
    fn p05_no_retry_after_terminal_or_unsafe_ambiguity(s in arb_terminal_scenario(), seed in arb_seed()) {
        let name = "p05_no_retry_after_terminal_or_unsafe_ambiguity";
        let r = run_case(name, &s, seed)?;
        expect_none(name, &s, seed, &only(check_run(&r), Invariant::NoUnsafeRetry))?;
        expect_none(name, &s, seed, &check_run(&r))?;
    }

    /// Invariant 6: One key per logical operation, the same on every attempt, distinct
    /// across operations.
    #[test]
    fn p06_one_key_per_operation(s in arb_lossy_scenario(), seed in arb_seed()) {
        let name = "p06_one_key_per_operation";
        let r = checked(name, &s, seed)?;
        for j in &r.records {
            let keyed = j.operation == retrysim::core::classify::Operation::Keyed;
            ensure(!keyed || j.attempt_keys.iter().all(Option::is_some), name, &s, seed, || {
                format!("job {}: a keyed operation sent an attempt without a key: {:?}", j.job, j.attempt_keys.len())
            })?;
        }
    }

    /// Invariant 7: An advice longer than what remains gives up at once: one attempt,
    /// zero sleep.
    #[test]
    fn p07_too_long_advice_gives_up_with_zero_sleep(s in arb_too_long_scenario(), seed in arb_seed()) {
        let name = "p07_too_long_advice_gives_up_with_zero_sleep";
        let r = checked(name, &s, seed)?;
        for j in &r.records {
            let slept = j.trace.events.iter().any(|e| matches!(e.kind, EventKind::Wait { .. }));
            let gave_up = matches!(j.outcome, JobOutcome::GaveUp { .. });
            ensure(j.attempts <= 1 && j.waited_ms == 0 && !slept && gave_up, name, &s, seed, || {
                format!("job {}: {} attempts, slept {} ms, ended {:?}; expected one attempt and an immediate give-up", j.job, j.attempts, j.waited_ms, j.outcome)
            })?;
        }
    }

    /// Invariant 8: The same seed gives a byte-identical rendered trace, report and ledger.
    #[test]
    fn p08_same_seed_same_trace(s in arb_scenario(), seed in arb_seed()) {
        let a = run_case("p08_same_seed_same_trace", &s, seed)?;
        let b = run_case("p08_same_seed_same_trace", &s, seed)?;
        expect_none("p08_same_seed_same_trace", &s, seed, &check::check_determinism(&a, &b).into_iter().collect::<Vec<_>>())?;
    }

    /// Invariant 9: No planted secret (Authorization, x-api-key, cookie) and no full
    /// idempotency key in any trace or report.
    #[test]
    fn p09_no_secrets(s in arb_scenario(), seed in arb_seed()) {
        let r = run_case("p09_no_secrets", &s, seed)?;
        expect_none("p09_no_secrets", &s, seed, &only(check_run(&r), Invariant::NoSecrets))?;
        let json = serde_json::to_string(&retrysim::internals::run::render::trace_json(&r, retrysim::internals::run::render::Show::FirstJobs(usize::MAX)))
            .expect("traces serialise");
        for secret in retrysim::internals::run::runner::PLANTED_SECRETS {
            ensure(!json.contains(secret), "p09_no_secrets", &s, seed, || "a planted secret appears in `trace --format json`".into())?;
        }
    }

    /// Invariant 10: With every fault healed and an ample deadline and retries, every
    /// job completes.
    #[test]
    fn p10_liveness_after_faults_heal(s in arb_calm_scenario(), seed in arb_seed()) {
        let name = "p10_liveness_after_faults_heal";
        ensure(check::liveness_expected(&s).is_ok(), name, &s, seed, || {
            format!("the calm strategy made a scenario liveness does not cover: {:?}", check::liveness_expected(&s))
        })?;
        let r = checked(name, &s, seed)?;
        expect_none(name, &s, seed, &check::check_liveness(&r).into_iter().collect::<Vec<_>>())?;
    }

    /// The hunt's swarm scenarios are valid and survive a round trip through
    /// TOML (`retrysim hunt --dump` feeds `retrysim run --config`).
    #[test]
    fn swarm_scenarios_round_trip(seed in arb_seed()) {
        for kind in [hunt::Kind::Fleet, hunt::Kind::Single] {
            let s = hunt::swarm(seed, kind);
            let back = Scenario::from_toml(&s.to_toml());
            prop_assert_eq!(back.as_ref(), Ok(&s), "seed {} kind {}: replay: retrysim hunt --dump {} --scenario-kind {}", seed, kind, seed, kind);
        }
    }
}

/// The bug the hunt found (invariant 8): a server bounce dropped its
/// connection tasks in an order set by tokio's process-wide task ids, so a
/// run depended on what ran before it in the process. The same scenario, run
/// before and after an unrelated simulation on this thread, must match.
#[test]
fn a_bounce_does_not_depend_on_what_ran_before() {
    // 16 requests running when the server bounces: 16 connections dropped at once.
    let mut s = Scenario { name: "bounce-order".into(), ..Scenario::default() };
    s.fleet.workers = 16;
    s.fleet.jobs = 32;
    s.api.processing_ms = 1_500;
    s.net.max_latency = Duration::from_millis(20);
    s.faults.schedule = vec![retrysim::internals::world::net::ScheduledFault {
        at: Duration::from_millis(1_000),
        fault: retrysim::internals::world::net::Fault::Bounce,
    }];
    let seed = 145;
    let a = runner::run(&s, seed).expect("the run finishes");
    let unrelated = retrysim::internals::run::scenario::named("lost-answers-with-key").expect("named");
    runner::run(&unrelated, 3).expect("the run finishes");
    let b = runner::run(&s, seed).expect("the run finishes");
    assert!(a.records.iter().any(|j| j.attempts > 1), "the bounce must break connections that then retry");
    assert_eq!(
        check::check_determinism(&a, &b),
        None,
        "seed {seed}: a bounce's effects depend on earlier runs in the process; replay: cargo test --release --test it a_bounce_does_not_depend"
    );
}

/// The other bug the hunt found (a run that panicked): a Hold fault released
/// every connect the fleet retried meanwhile at once, past turmoil's default
/// listener backlog of 64, and turmoil panics on a full backlog. 16 workers
/// retrying every ~100 ms through a 2 s hold send a few hundred.
#[test]
fn a_hold_that_releases_hundreds_of_connects_does_not_crash_the_run() {
    let mut s = Scenario { name: "hold-backlog".into(), ..Scenario::default() };
    s.fleet.workers = 16;
    s.fleet.jobs = 48;
    s.policy.max_retries = 200;
    s.policy.attempt_timeout = Duration::from_millis(100);
    s.policy.backoff.base = Duration::from_millis(10);
    s.policy.backoff.cap = Duration::from_millis(50);
    s.faults.schedule = vec![retrysim::internals::world::net::ScheduledFault {
        at: Duration::ZERO,
        fault: retrysim::internals::world::net::Fault::Hold { until: Duration::from_secs(2) },
    }];
    let seed = 7;
    let r = std::panic::catch_unwind(|| runner::run(&s, seed))
        .unwrap_or_else(|_| panic!("seed {seed}: the run panicked; {}", replay(&s, seed)))
        .unwrap_or_else(|e| panic!("{e}"));
    let held = r.records.iter().map(|j| j.attempts as u64).sum::<u64>();
    assert!(held > 64, "the hold must pile up more connects than turmoil's default backlog: {held} attempts");
    let vs = check_run(&r);
    assert!(vs.is_empty(), "seed {seed}: {vs:?}; {}", replay(&s, seed));
    assert_eq!(r.succeeded, 48);
}

/// What the whole pipeline adds to the parser's own properties.
mod parser {
    use std::time::{Duration, SystemTime};

    use http::header::{DATE, RETRY_AFTER};
    use http::{HeaderMap, HeaderValue};
    use proptest::prelude::*;
    use retrysim::core::body::ErrorEnvelope;
    use retrysim::core::retry_after::{AdviceSource, HeaderState, read_advice};
    use retrysim::internals::run::runner;
    use retrysim::trace::EventKind;

    use super::{config, ensure, failure};
    use retrysim::testing::strategies::*;

    /// 2000-01-01 to 2100-01-01, in seconds since the Unix epoch.
    const FROM: u64 = 946_684_800;
    const TO: u64 = 4_102_444_800;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn date(secs: u64) -> HeaderValue {
        HeaderValue::from_str(&httpdate::fmt_http_date(at(secs))).expect("an HTTP-date is a valid header value")
    }

    proptest! {
        #![proptest_config(config(256))]

        /// A date advice is `Retry-After - Date`, whatever the client's clock
        /// says (up to a year off, either way): the skew cancels.
        #[test]
        fn a_date_is_measured_against_the_servers_date(
            server in FROM..TO,
            wait in 0u64..10_000_000,
            client_offset in -31_536_000i64..31_536_000,
            nanos in 0u32..1_000_000_000,
        ) {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, date(server + wait));
            h.insert(DATE, date(server));
            let client = at(server.saturating_add_signed(client_offset)) + Duration::from_nanos(nanos as u64);
            let a = read_advice(&h, None, client);
            prop_assert_eq!(a.source, AdviceSource::HeaderDate);
            prop_assert_eq!(a.wait, Some(Duration::from_secs(wait)));
            prop_assert!(a.server_date_used);
        }

        /// Several delta-seconds lines: the largest wins, in any order.
        #[test]
        fn several_lines_take_the_largest(waits in prop::collection::vec(0u64..1_000_000_000, 1..6)) {
            let mut h = HeaderMap::new();
            for w in &waits {
                h.append(RETRY_AFTER, HeaderValue::from(*w));
            }
            let a = read_advice(&h, None, at(FROM));
            prop_assert_eq!(a.wait, waits.iter().max().map(|w| Duration::from_secs(*w)));
            prop_assert_eq!(a.source, AdviceSource::HeaderSeconds);
        }

        /// An invalid header falls back to the body's `retry_after_seconds`,
        /// and the trace can tell: the header is `Invalid`, the source the body.
        #[test]
        fn an_invalid_header_falls_back_to_the_body(secs in 0u64..1_000_000, junk in "[a-z+-][a-z0-9.]{0,8}") {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, HeaderValue::from_str(&junk).expect("ASCII"));
            let body = format!(r#"{{"error":{{"type":"rate_limited","retry_after_seconds":{secs}}}}}"#);
            let envelope = ErrorEnvelope::parse(body.as_bytes());
            let a = read_advice(&h, envelope.as_ref(), at(FROM));
            prop_assert_eq!(a.source, AdviceSource::BodySeconds);
            prop_assert_eq!(a.wait, Some(Duration::from_secs(secs)));
            prop_assert!(matches!(a.header, HeaderState::Invalid { .. }), "{:?}", a.header);
        }
    }

    proptest! {
        #![proptest_config(config(super::CASES))]

        /// End to end: in every advice form, envelope and date form, the wait
        /// the client reads is the wait the simulated server advised (its
        /// ledger). A date rounds the target up to a whole second and `Date`
        /// truncates to one, so with `Date` the client may read up to a second
        /// more; without `Date` it measures from its own receipt, so up to one
        /// trip less (the latency, delivered on turmoil's next step of
        /// `net.tick`), and the retry still arrives after the advice.
        #[test]
        fn the_client_reads_what_the_server_advised(s in arb_exhausting_scenario(), seed in arb_seed()) {
            let name = "the_client_reads_what_the_server_advised";
            let mut s = s;
            s.fleet.workers = 1;
            s.fleet.jobs = 1;
            s.faults = Default::default();
            let r = runner::run(&s, seed).map_err(|e| failure(name, &s, seed, e.message))?;
            let answers: Vec<Option<u64>> = r.records[0].trace.events.iter().filter_map(|e| match &e.kind {
                EventKind::Answer { advice, .. } => Some(advice.wait_ms.map(retrysim::trace::Millis::saturating_u64)),
                _ => None,
            }).collect();
            ensure(answers.len() == r.ledger.arrivals.len(), name, &s, seed, || {
                format!("{} answers for {} arrivals", answers.len(), r.ledger.arrivals.len())
            })?;
            // One trip: the latency, delivered on turmoil's next step, plus truncation.
            let latency = (s.net.max_latency + s.net.tick).as_millis() as u64 + 1;
            for (i, (read, arrival)) in answers.iter().zip(&r.ledger.arrivals).enumerate() {
                let advised = arrival.retry_after.map(|d| d.as_millis() as u64);
                let ok = match (read, advised) {
                    (None, None) => true,
                    (Some(read), Some(advised)) if s.api.send_date => *read >= advised && *read <= advised + 1_000,
                    (Some(read), Some(advised)) => *read <= advised && *read + latency >= advised,
                    _ => false,
                };
                ensure(ok, name, &s, seed, || {
                    format!("answer {}: the server advised {advised:?} ms, the client read {read:?} ms ({:?}, Date sent: {})", i + 1, s.api.advice, s.api.send_date)
                })?;
            }
        }
    }
}

/// Draws `n` scenarios from `strategy` (deterministically) and runs each.
fn sample(strategy: impl Strategy<Value = Scenario>, n: u64) -> Vec<Report> {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
    let mut draws = TestRunner::new_with_rng(config(CASES), TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    (0..n)
        .map(|seed| {
            let s = strategy.new_tree(&mut draws).expect("a scenario").current();
            runner::run(&s, seed).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

/// Not a property, but a guard on them: a strategy that never exercised its
/// invariant would let its property pass vacuously.
#[test]
fn the_strategies_exercise_what_they_claim() {
    let throttled = sample(arb_throttled_scenario(), 8);
    let advised: usize =
        throttled.iter().map(|r| r.ledger.arrivals.iter().filter(|a| a.retry_after.is_some()).count()).sum();
    assert!(advised > 20, "arb_throttled_scenario produced only {advised} advised refusals in 8 runs");
    let lossy = sample(arb_lossy_scenario(), 8);
    let lost: usize = lossy.iter().map(|r| r.ledger.arrivals.iter().filter(|a| a.lost).count()).sum();
    assert!(lost > 5, "arb_lossy_scenario lost only {lost} answers in 8 runs");
    let terminal = sample(arb_terminal_scenario(), 8);
    let stops: u64 = terminal.iter().map(|r| r.gave_up.get("terminal").copied().unwrap_or(0)).sum();
    assert!(stops > 0, "arb_terminal_scenario never produced a terminal give-up in 8 runs");
    let unsafe_posts: usize = terminal
        .iter()
        .map(|r| r.records.iter().filter(|j| j.operation == retrysim::core::classify::Operation::Unsafe).count())
        .sum();
    assert!(unsafe_posts > 0, "arb_terminal_scenario never sent an unkeyed POST in 8 runs");
    let tight = sample(arb_tight_scenario(), 12);
    let deadline: u64 = tight.iter().map(|r| r.gave_up.get("deadline_would_pass").copied().unwrap_or(0)).sum();
    assert!(deadline > 0, "arb_tight_scenario never gave up for the deadline in 12 runs");
}
