//! Imports `retrysim::internals` (hidden, no semver promise) for the black-box
//! checks one by one (`check_black_box`, `check_black_box_with`) and the hunt's
//! generator.
//!
//! The black-box checks (`sim::checks::blackbox`) on retrysim's own client, next to
//! the trace-based ones: every named scenario and a swarm of random ones
//! pass them with the promises of their policy, except the scenario that
//! misbehaves on purpose, where they find exactly that. Their negative
//! controls on hand-built ledgers are unit tests in `src/sim/checks/blackbox.rs`.

use crate::support::{replay_run, run};
use retrysim::internals::checks::blackbox::{
    BlackBoxCheck, BlackBoxViolation, Promises, check_black_box, check_black_box_with,
};
use retrysim::internals::checks::hunt::{Kind, swarm};
use retrysim::internals::run::runner::{JobOutcome, Report};
use retrysim::internals::run::scenario::{self, NAMES};

/// The checks with the promises of the scenario's policy: `max_retries + 1`
/// attempts, its deadline, the advice if it reads it (a deferred job's
/// background runs under the background policy's).
fn check(r: &Report) -> Vec<BlackBoxViolation> {
    let s = &r.scenario_config;
    let front = Promises::of_policy(&s.policy);
    match &s.fleet.deferral {
        Some(d) => check_black_box_with(r, &front, &Promises::of_policy(&d.policy)),
        None => check_black_box(r, &front),
    }
}

fn shown(vs: &[BlackBoxViolation]) -> String {
    vs.iter().take(10).map(|v| format!("\n  {v}")).collect()
}

#[test]
fn named_scenarios_pass_on_seeds_1_to_5_except_the_unkeyed_replay() {
    for name in NAMES {
        for seed in 1..=5 {
            let r = run(&scenario::named(name).unwrap(), seed);
            let vs = check(&r);
            let replay = replay_run(&r);
            if name == "lost-answers-no-key" {
                // Its client replays unkeyed POSTs after lost answers on
                // purpose (brief 002's naive client): that, and only that.
                assert!(!vs.is_empty(), "{name} seed {seed}: the replays went unseen\n{replay}");
                assert!(
                    vs.iter().all(|v| v.check == BlackBoxCheck::UnkeyedReplay),
                    "{name} seed {seed}:{}\n{replay}",
                    shown(&vs)
                );
            } else {
                assert!(vs.is_empty(), "{name} seed {seed}:{}\n{replay}", shown(&vs));
            }
        }
    }
}

/// Random scenarios with holds, spikes, partitions, bounces, lost answers,
/// skewed clocks, scripts and short timeouts: retrysim's client keeps its
/// promises, so any violation is a check that misjudged the network.
#[test]
fn a_swarm_of_random_scenarios_passes() {
    for seed in 1..=200 {
        let s = swarm(seed, Kind::All);
        let r = run(&s, seed);
        let vs = check(&r);
        assert!(vs.is_empty(), "swarm seed {seed}:{}\n{}", shown(&vs), replay_run(&r));
    }
}

/// The checks read the ledger and each run's job, start, end and outcome:
/// what the client says about itself (its trace, attempts, waits, keys)
/// changes nothing.
#[test]
fn the_checks_read_no_trace() {
    let r = run(&scenario::named("lost-answers-no-key").unwrap(), 1);
    let before = check(&r);
    assert!(!before.is_empty());
    let mut silent = r.clone();
    for j in silent.records.iter_mut().chain(&mut silent.deferred_records) {
        j.trace.events.clear();
        j.attempts = 0;
        j.waited_ms = 0;
        j.key = None;
        j.attempt_keys.clear();
        if let JobOutcome::GaveUp { reason } = &mut j.outcome {
            *reason = "gave up".into();
        }
    }
    assert_eq!(check(&silent), before);
}
