//! Imports `retrysim::internals` (hidden, no semver promise) for the hunt's
//! `judge` and `check_seed`, which `testing::Harness` must agree with.
//!
//! `testing::Harness::check` (and so `assert_holds` and `Harness::hunt`)
//! judges a run by the same checks as `retrysim hunt`: both call
//! `hunt::judge`. This keeps them in step from the outside: on seeds where
//! a deliberate defect breaks a fleet check or the model's self-check, the
//! harness finds exactly what the hunt finds.

use std::collections::{BTreeMap, BTreeSet};

use retrysim::internals::checks::hunt::{self, Kind, SeedResult, Target};
use retrysim::internals::checks::judges::PROPERTY_JUDGES;
use retrysim::internals::run::runner::RunOptions;
use retrysim::testing::{Checked, Harness};

/// What the hunt found on a seed: each invariant or check, and how often.
fn by_hunt(r: &SeedResult) -> BTreeMap<String, usize> {
    r.findings.iter().map(|f| (f.invariant.clone(), f.count)).collect()
}

/// What the harness found, named as the hunt names it.
fn by_harness(c: &Checked) -> BTreeMap<String, usize> {
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    for v in &c.violations {
        *found.entry(v.invariant.to_string()).or_default() += 1;
    }
    for v in &c.fleet {
        *found.entry(v.check.name().to_owned()).or_default() += 1;
    }
    if c.run_error.is_some() {
        found.insert("run-failed".into(), 1);
    }
    found
}

#[test]
fn harness_check_judges_by_the_hunts_checks() {
    // Defects only the fleet checks or the model's check catch, and one an
    // invariant catches (the client is the scenario's own in both).
    // Each defect over seeds where it shows (the spread's floor needs a
    // zero advice, first at seed 75 of the default range; the drawn spread
    // needs enough waits on an advice, first at seed 5; the longer backoff
    // over an advice that max-of-advice-only skips, first at seed 261; an
    // AIMD gate on the limiter service, first at seed 100).
    let defects = [
        ("aimd-ignores-429", 1..=40),
        ("aimd-never-grows", 100..=106),
        ("window-admits-one-more", 1..=40),
        ("budget-refunds-too-much", 1..=40),
        ("deferral-drops-jobs", 1..=40),
        ("extra-attempt", 1..=40),
        ("throttled-as-unclear", 1..=40),
        ("spread-off", 70..=90),
        ("advice-rounds-down", 1..=40),
        ("store-forgets-answers", 1..=40),
        ("wait-doubled", 1..=40),
        ("spread-not-drawn", 1..=10),
        ("jitter-full", 28..=46),
        ("escalation-skipped", 1..=10),
        ("max-of-advice-only", 256..=266),
        ("budget-charged-twice", 35..=40),
    ];
    let mut seen = BTreeSet::new();
    for (defect, seeds) in defects {
        let mut target = Target::of(Kind::All);
        assert!(target.sabotage.set(defect), "{defect} is a defect");
        for seed in seeds {
            let hunted = by_hunt(&hunt::check_seed(seed, &target, true, &Default::default()));
            let checked = Harness::of(target.scenario(seed)).check(seed);
            assert_eq!(by_harness(&checked), hunted, "--sabotage {defect}, seed {seed}:\n{checked}");
            assert_eq!(checked.passed(), hunted.is_empty());
            seen.extend(hunted.into_keys());
        }
    }
    // Not vacuous: fleet checks and the model's check were among them.
    for name in [
        "aimd-backs-off",
        "aimd-grows",
        "model-limiter",
        "budget-allowance",
        "deferred-once",
        "attempt-bound",
        "throttled-retried",
        "zero-advice-spread",
        "model-advice",
        "model-idempotency",
        "wait-upper-bound",
        "advice-spread-drawn",
        "backoff-floor",
        "wait-lower-bound",
        "budget-refusal",
    ] {
        assert!(seen.contains(name), "no seed broke {name}: {seen:?}");
    }
}

/// Each judge reports only the properties it declares: run on seeds where
/// deliberate defects break several of them.
#[test]
fn each_judge_reports_only_what_it_declares() {
    let mut found = 0;
    for (defect, seed) in [("window-admits-one-more", 5), ("throttled-as-unclear", 5), ("aimd-ignores-429", 1)] {
        let mut target = Target::of(Kind::All);
        assert!(target.sabotage.set(defect));
        let r = RunOptions::default().run(&target.scenario(seed), seed).expect("the run finishes");
        for j in PROPERTY_JUDGES {
            for x in (j.run)(&r) {
                assert!(j.reports.contains(&x.check), "{} reported {}, not declared", j.name, x.check);
                found += 1;
            }
        }
    }
    assert!(found > 0, "no judge found anything: the seeds no longer show the defects");
}

#[test]
fn the_harness_builds_the_scenarios_own_client_with_the_runs_seed() {
    // A fresh key on every attempt draws its keys from the run's seed: the
    // harness's run of a seed must be the runner's (and so the hunt's) run of
    // that seed, keys included. Before, the harness built the scenario's own
    // client with seed 0 whatever the run's seed.
    let mut s = Harness::named("two-429-then-success").unwrap().scenario(0);
    s.client.defects.fresh_key_each_attempt = true;
    let keys = |r: &retrysim::testing::Report| -> Vec<Vec<Option<String>>> {
        r.records.iter().map(|j| j.attempt_keys.clone()).collect()
    };
    let by_runner = |seed| retrysim::internals::run::runner::RunOptions::default().run(&s, seed).unwrap();
    let harness = Harness::of(s.clone());
    for seed in [0, 7, 42] {
        assert_eq!(keys(&harness.run(seed).unwrap()), keys(&by_runner(seed)), "seed {seed}");
    }
    // Not vacuous: the keys do depend on the seed.
    assert_ne!(keys(&by_runner(0)), keys(&by_runner(7)));
    assert!(keys(&by_runner(7)).iter().flatten().flatten().count() >= 3, "{:?}", keys(&by_runner(7)));
}
