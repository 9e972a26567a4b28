//! Imports `retrysim::internals` (hidden, no semver promise) for the deliberate
//! defects (`run::defects::Defects`) planted into the client and every checker
//! called one by one.
//!
//! Negative controls: every invariant checker, and the hunt, shown able to
//! fail. Each test builds a concrete scenario where a deliberate defect
//! (`[client.defects]`, built around the unchanged driver in `sim::run::defects`) must show, checks that the clean scenario passes, and
//! that the broken one is reported under the right invariant.
//!
//! A failure prints the seed and a replay command for the broken scenario,
//! saved as TOML under `target/tmp/negative_controls/` (sabotage included).

use std::time::Duration;

use crate::support::{replay, retrysim, run};
use retrysim::core::policy::Policy;
use retrysim::internals::checks::hunt::{self, Kind, Target};
use retrysim::internals::checks::invariants::{self as check, Invariant, Violation, check_run};
use retrysim::internals::run::defects::Defects;
use retrysim::internals::run::runner::{self, PLANTED_SECRETS};
use retrysim::internals::run::scenario::{self, BudgetConfig, Scenario};
use retrysim::internals::world::api::ScriptStep;
use retrysim::internals::world::net::{Fault, ScheduledFault};
use retrysim::trace::EventKind;

const SEED: u64 = 7;

fn named(name: &str) -> Scenario {
    scenario::named(name).unwrap_or_else(|| panic!("no scenario {name}"))
}

fn broken(mut s: Scenario, defect: impl FnOnce(&mut Defects)) -> Scenario {
    defect(&mut s.client.defects);
    s.name = format!("{}-sabotaged", s.name);
    s
}

fn list(vs: &[Violation]) -> String {
    vs.iter().map(|v| format!("  {v}")).collect::<Vec<_>>().join("\n")
}

/// The clean scenario passes every check; the broken one is caught under
/// `expected` (each in its seed's run).
fn caught(clean: &Scenario, broken: &Scenario, expected: &[Invariant]) -> Vec<Violation> {
    let ok = check_run(&run(clean, SEED));
    assert!(ok.is_empty(), "seed {SEED}: the clean scenario already fails:\n{}\n{}", list(&ok), replay(clean, SEED));
    let found = check_run(&run(broken, SEED));
    for inv in expected {
        assert!(
            found.iter().any(|v| v.invariant == *inv),
            "seed {SEED}: the defect was not reported as {inv}; reported:\n{}\n{}",
            list(&found),
            replay(broken, SEED)
        );
    }
    found
}

#[test]
fn a_fresh_key_on_every_attempt_breaks_one_key_per_operation() {
    let clean = named("two-429-then-success");
    let bad = broken(clean.clone(), |d| d.fresh_key_each_attempt = true);
    caught(&clean, &bad, &[Invariant::OneKeyPerOperation]);
}

#[test]
fn a_fresh_key_after_a_lost_answer_charges_twice() {
    // The first answer is lost after the server charged; the retry carries a
    // new key, so the server runs the job again: invariant 3 from the ledger.
    let mut clean = Scenario { name: "lost-answer-keyed".into(), ..Scenario::default() };
    clean.faults.schedule = vec![ScheduledFault { at: Duration::ZERO, fault: Fault::LoseAnswer }];
    let bad = broken(clean.clone(), |d| d.fresh_key_each_attempt = true);
    let found = caught(&clean, &bad, &[Invariant::OneChargePerKey, Invariant::OneKeyPerOperation]);
    assert!(found.iter().any(|v| v.message.contains("charged 2 times")), "{}", list(&found));
}

#[test]
fn sleeping_past_the_deadline_breaks_the_deadline_and_too_long_advice() {
    // Always 429 with 20 s advice against a 90 s deadline: the fifth wait no longer fits.
    let clean = named("deadline-wins");
    let bad = broken(clean.clone(), |d| d.ignore_deadline = true);
    caught(&clean, &bad, &[Invariant::Deadline, Invariant::TooLongGivesUpAtOnce]);
}

#[test]
fn ignoring_retry_after_breaks_advice_respected() {
    // A 1 s advice, and a backoff window of 500 ms: the retry comes early.
    let clean = named("once-429-then-200");
    let bad = broken(clean.clone(), |d| d.ignore_retry_after = true);
    let found = caught(&clean, &bad, &[Invariant::AdviceRespected]);
    assert!(
        found.iter().any(|v| v.message.contains("retried at")),
        "the server's ledger must see it:\n{}",
        list(&found)
    );
}

#[test]
fn retrying_after_quota_exceeded_breaks_no_retry_after_terminal() {
    let mut clean = Scenario { name: "quota-exceeded-once".into(), policy: Policy::batch(), ..Scenario::default() };
    clean.api.script = vec![ScriptStep::new(429, Some("QUOTA_EXCEEDED"), Some(1))];
    let bad = broken(clean.clone(), |d| d.retry_terminal = true);
    let found = caught(&clean, &bad, &[Invariant::NoUnsafeRetry]);
    assert!(found.iter().any(|v| v.message.contains("QUOTA_EXCEEDED")), "{}", list(&found));
}

#[test]
fn replaying_an_unsafe_post_after_a_reset_breaks_no_unsafe_replay() {
    // An unkeyed POST whose answer is lost after the charge.
    let clean = named("network-error-unsafe-post");
    let bad = broken(clean.clone(), |d| d.replay_unsafe = true);
    let found = caught(&clean, &bad, &[Invariant::NoUnsafeRetry]);
    assert!(
        found.iter().any(|v| v.message.contains("ambiguous failure of an unsafe POST")),
        "client side:\n{}",
        list(&found)
    );
    assert!(found.iter().any(|v| v.message.contains("ran its unkeyed POST 2 times")), "server side:\n{}", list(&found));
}

#[test]
fn one_extra_attempt_breaks_the_attempt_bound() {
    let clean = named("five-retries-six-attempts");
    let bad = broken(clean.clone(), |d| d.extra_attempt = true);
    let found = caught(&clean, &bad, &[Invariant::AttemptBound]);
    assert!(found.iter().any(|v| v.message.contains("7 attempts")), "{}", list(&found));
}

#[test]
fn different_runs_break_determinism() {
    let s = named("blinkimg-1s");
    let a = runner::run(&s, SEED).expect("finishes");
    let same = runner::run(&s, SEED).expect("finishes");
    assert_eq!(check::check_determinism(&a, &same), None, "seed {SEED}: {}", replay(&s, SEED));
    let other = runner::run(&s, SEED + 1).expect("finishes");
    let v = check::check_determinism(&a, &other).expect("seeds 7 and 8 draw different jitter");
    assert_eq!(v.invariant, Invariant::Determinism);
    // One millisecond anywhere in a trace is enough.
    let mut late = same.clone();
    let last = late.records.last_mut().expect("jobs");
    last.trace.events.last_mut().expect("events").at_ms += 1;
    let job = last.job;
    assert!(check::check_determinism(&a, &late).is_some(), "a 1 ms difference in job {job} went unseen");
}

#[test]
fn a_secret_in_a_trace_breaks_no_secrets() {
    let s = named("once-429-then-200");
    let r = run(&s, SEED);
    assert!(check_run(&r).is_empty());
    // A driver that logged the query string, the API key or a cookie.
    for secret in PLANTED_SECRETS.iter().copied().chain(["key-a"]) {
        let mut leaky = r.clone();
        let e = leaky.records[0]
            .trace
            .events
            .iter_mut()
            .find(|e| matches!(e.kind, EventKind::Attempt { .. }))
            .expect("an attempt");
        if let EventKind::Attempt { path, .. } = &mut e.kind {
            path.push_str(&format!("?auth={secret}"));
        }
        let found = check_run(&leaky);
        assert!(
            found.iter().any(|v| v.invariant == Invariant::NoSecrets),
            "a leaked {secret:?} went unseen:\n{}",
            list(&found)
        );
    }
    // The full idempotency key is a secret too (a replay could abuse it).
    let mut leaky = r.clone();
    leaky.records[0].trace.label = leaky.records[0].key.clone().expect("a keyed job");
    assert!(check_run(&leaky).iter().any(|v| v.invariant == Invariant::NoSecrets));
}

#[test]
fn retries_past_the_token_bucket_break_the_fleet_budget() {
    // Brief 002's fleet behind gRPC's default bucket: 10 tokens, 0.1 back per success.
    let mut s = named("blinkimg-1s");
    s.fleet.budget = Some(BudgetConfig::TokenBucket { max_tokens: 10, token_ratio_milli: 100 });
    let r = run(&s, SEED);
    let ok = check_run(&r);
    assert!(ok.is_empty(), "seed {SEED}:\n{}\n{}", list(&ok), replay(&s, SEED));
    assert!(r.gave_up.contains_key("budget_exhausted"), "the bucket must run dry: {:?}", r.gave_up);
    // A client that retried once more than the bucket allowed.
    let allowed = (500 * 10 + 100 * r.succeeded).div_ceil(1000) - 1;
    let mut over = r.clone();
    let waits =
        r.records.iter().flat_map(|j| &j.trace.events).filter(|e| matches!(e.kind, EventKind::Wait { .. })).count();
    let job = over.records.iter_mut().find(|j| j.attempts == 1).expect("a job without retries");
    let wait = r.records.iter().flat_map(|j| &j.trace.events).find(|e| matches!(e.kind, EventKind::Wait { .. }));
    for _ in waits as u64..=allowed {
        job.trace.events.push(wait.expect("a retry").clone());
    }
    let found = check_run(&over);
    assert!(
        found.iter().any(|v| v.invariant == Invariant::FleetBudget),
        "{} retries, {allowed} allowed:\n{}",
        allowed + 1,
        list(&found)
    );
}

#[test]
fn jobs_that_give_up_break_liveness() {
    // A calm scenario, then a 3 s partition at the start and no retries:
    // jobs give up, the checker says so, and the conditions say why liveness
    // was not to be expected.
    let mut s = (1..200)
        .map(|seed| hunt::swarm(seed, Kind::Fleet))
        .find(|s| check::liveness_expected(s).is_ok())
        .expect("a calm swarm scenario in seeds 1..200");
    let ok = runner::run(&s, SEED).expect("finishes");
    assert_eq!(check::check_liveness(&ok), None, "{}", replay(&s, SEED));
    s.faults.schedule =
        vec![ScheduledFault { at: Duration::ZERO, fault: Fault::Partition { until: Duration::from_secs(3) } }];
    s.policy.max_retries = 0;
    // A deadline long enough for the partition and its recovery, so that
    // only the retries fall short.
    s.policy.deadline = Duration::from_secs(3_600);
    s.name = "calm-but-no-retries".into();
    let r = runner::run(&s, SEED).expect("finishes");
    let v = check::check_liveness(&r).unwrap_or_else(|| panic!("every job completed; {}", replay(&s, SEED)));
    assert_eq!(v.invariant, Invariant::Liveness);
    assert!(check::liveness_expected(&s).unwrap_err().contains("retries"));
}

/// The first seed (of 300) whose swarm scenario, with `defect`, shows `expected`.
fn hunt_finds(defect: &str, expected: Invariant) -> u64 {
    let mut target = Target::of(Kind::All);
    assert!(target.sabotage.set(defect), "{defect}");
    for seed in 1..=300 {
        let r = hunt::check_seed(seed, &target, false, &Default::default());
        if r.findings.iter().any(|f| f.invariant == expected.to_string()) {
            assert!(r.findings.iter().all(|f| f.replay == target.replay(seed)));
            return seed;
        }
    }
    panic!("a hunt of seeds 1..=300 with --sabotage {defect} never reported {expected}");
}

#[test]
fn the_hunt_catches_every_defect() {
    for (defect, expected) in [
        ("fresh-key-each-attempt", Invariant::OneKeyPerOperation),
        ("ignore-deadline", Invariant::Deadline),
        ("ignore-retry-after", Invariant::AdviceRespected),
        ("retry-terminal", Invariant::NoUnsafeRetry),
        ("replay-unsafe", Invariant::NoUnsafeRetry),
        ("extra-attempt", Invariant::AttemptBound),
    ] {
        let seed = hunt_finds(defect, expected);
        // The clean policy on the same seed is clean.
        let clean = hunt::check_seed(seed, &Target::of(Kind::All), true, &Default::default());
        assert!(clean.findings.is_empty(), "seed {seed} fails without sabotage: {:?}", clean.findings);
    }
}

#[test]
fn hunt_exits_1_with_replay_commands_when_an_invariant_fails() {
    let (code, out, err) = retrysim(&["hunt", "--seeds", "30", "--sabotage", "extra-attempt", "--format", "json"]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["seeds_run"], 30);
    let violations = v["violations"].as_array().expect("a list");
    let first = violations.first().expect("extra-attempt shows within 30 seeds");
    for key in ["seed", "invariant", "message", "replay"] {
        assert!(!first[key].is_null(), "{key} missing in {first}");
    }
    assert_eq!(first["invariant"], "attempt-bound");
    // The replay command reproduces exactly that finding.
    let replay = first["replay"].as_str().expect("text");
    let args: Vec<&str> = replay.split_whitespace().skip(1).chain(["--format", "json"]).collect();
    let (code, again, _) = retrysim(&args);
    assert_eq!(code, 1, "{replay}");
    let again: serde_json::Value = serde_json::from_str(&again).expect("JSON");
    assert_eq!(again["violations"][0], *first, "{replay}");
}

#[test]
fn hunt_exits_0_when_clean_and_2_on_bad_input() {
    let (code, out, err) = retrysim(&["hunt", "--seeds", "6", "--start", "40", "--jobs", "2"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("seeds 40..=45") && out.contains("no violations"), "{out}");
    // One seed is "1 seed", in the summary and in the wall-clock line.
    let (code, out, err) = retrysim(&["hunt", "--seeds", "1", "--jobs", "2"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(
            "the fleet checks, the too-careful checks, the give-up reasons, the bounds on waits and the model's limiter, advice, RateLimit headers, idempotency store, script, concurrency cap, run times, polls, credits, lost answers, keep-alive and close races on 1 seed,"
        ),
        "{out}"
    );
    assert!(err.contains("hunt: 1 seed in "), "{err}");
    for bad in [
        vec!["hunt", "--seeds", "0"],
        vec!["hunt", "--jobs", "0"],
        vec!["hunt", "--sabotage", "nope"],
        vec!["hunt", "--scenario-kind", "nope"],
        vec!["hunt", "--start", "18446744073709551615", "--seeds", "2"],
        vec!["hunt", "--seeds", "many"],
    ] {
        let (code, out, err) = retrysim(&bad);
        assert_eq!(code, 2, "{bad:?}: {out}{err}");
        assert!(err.contains("error"), "{bad:?}: {err}");
        assert!(!err.contains("panicked"), "{bad:?}: {err}");
    }
}

#[test]
fn a_dumped_swarm_scenario_replays_with_run() {
    let (code, toml, _) = retrysim(&["hunt", "--dump", "12", "--scenario-kind", "fleet"]);
    assert_eq!(code, 0);
    assert_eq!(Scenario::from_toml(&toml).expect("valid TOML"), hunt::swarm(12, Kind::Fleet));
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dump-12.toml");
    std::fs::write(&path, &toml).expect("write");
    let (code, out, err) =
        retrysim(&["run", "--config", path.to_str().expect("UTF-8"), "--seed", "12", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let direct = runner::run(&hunt::swarm(12, Kind::Fleet), 12).expect("finishes");
    assert_eq!(report["requests"], direct.requests, "the dumped scenario runs the same as the hunt's");
    assert_eq!(report["virtual_ms"], direct.virtual_ms);
}
