//! Imports `retrysim::internals` (hidden, no semver promise) for the renderer
//! itself (`render_run` at every width, `trace_json`) and bare `runner::run`:
//! the snapshots pin the workings' output for every named scenario, more than
//! `testing::trace_text` shows.
//!
//! Retry traces pinned as insta snapshots in the top-level `snapshots/`
//! folder: a pull request that changes what a client does shows up as a
//! readable diff. Review loop: `cargo insta test`, then `cargo insta review`.

use retrysim::core::policy::Policy;
use retrysim::internals::run::render::{DEFAULT_JOBS, Show, render_run, trace_json};
use retrysim::internals::run::runner::{PLANTED_SECRETS, Report, run};
use retrysim::internals::run::scenario::{NAMES, named};
use retrysim::trace::EventKind;

const SEED: u64 = 7;

fn report(name: &str, policy: Option<&str>, seed: u64) -> Report {
    let mut s = named(name).unwrap();
    if let Some(p) = policy {
        s.policy = Policy::preset(p).unwrap();
    }
    run(&s, seed).unwrap_or_else(|e| panic!("{e}"))
}

/// Exactly what `retrysim trace` prints for the same arguments.
fn trace_text(name: &str, policy: Option<&str>, seed: u64) -> String {
    let r = report(name, policy, seed);
    render_run(&r, Show::default_for(&r)).trim_end().to_owned()
}

fn snapshot(snapshot_name: &str, text: &str) {
    insta::with_settings!({ snapshot_path => "../../snapshots", prepend_module_to_snapshot => false, omit_expression => true }, {
        insta::assert_snapshot!(snapshot_name, text);
    });
}

#[test]
fn one_snapshot_per_named_scenario() {
    for name in NAMES {
        snapshot(&format!("scenario-{name}"), &trace_text(name, None, SEED));
    }
}

#[test]
fn one_snapshot_per_preset() {
    for scenario in ["two-429-then-success", "blinkimg-1s"] {
        for preset in Policy::PRESETS {
            snapshot(&format!("preset-{preset}-{scenario}"), &trace_text(scenario, Some(preset), SEED));
        }
    }
}

#[test]
fn the_json_form_with_jitter_redacted() {
    let r = report("two-429-then-success", None, SEED);
    let value = trace_json(&r, Show::FirstJobs(DEFAULT_JOBS));
    insta::with_settings!({ snapshot_path => "../../snapshots", prepend_module_to_snapshot => false, omit_expression => true }, {
        insta::assert_json_snapshot!("json-two-429-then-success", value, {
            ".jobs[].trace.events[].why.jitter" => "[jitter]",
            ".jobs[].trace.events[].ms" => "[wait]",
            ".jobs[].trace.events[].at_ms" => "[time]",
            ".jobs[].trace.events[].waited_ms" => "[waited]",
            ".jobs[].finished_ms" => "[time]",
            ".jobs[].waited_ms" => "[waited]",
            ".report.virtual_ms" => "[time]",
            ".report.slept_ms" => "[waited]",
            ".report.p50_latency_ms" => "[time]",
            ".report.p99_latency_ms" => "[time]",
        });
    });
}

/// The text after insta's header in a committed snapshot file.
fn snapshot_body(snapshot_name: &str) -> String {
    let path = format!("{}/snapshots/{snapshot_name}.snap", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let body = text.splitn(3, "---\n").nth(2).unwrap_or_else(|| panic!("{path} has no insta header"));
    body.trim_end().to_owned()
}

fn cli(args: &[&str]) -> String {
    crate::support::retrysim_ok(args).trim_end().to_owned()
}

#[test]
fn the_cli_prints_exactly_what_the_snapshot_holds() {
    for name in ["two-429-then-success", "deadline-wins", "blinkimg-1s"] {
        let printed = cli(&["trace", "--scenario", name, "--seed", "7"]);
        assert_eq!(printed, snapshot_body(&format!("scenario-{name}")), "retrysim trace --scenario {name} --seed 7");
    }
    let printed = cli(&["trace", "--scenario", "blinkimg-1s", "--seed", "7", "--policy", "batch"]);
    assert_eq!(printed, snapshot_body("preset-batch-blinkimg-1s"));
}

#[test]
fn the_same_seed_is_byte_identical_and_another_differs_only_in_the_jitter() {
    let name = "two-429-then-success";
    assert_eq!(trace_text(name, None, 7), trace_text(name, None, 7));
    let (a, b) = (report(name, None, 7), report(name, None, 8));
    // Strip what randomness touches (times, wait totals, jitter, key hashes):
    // the rest, event by event, must be the same.
    let shape = |r: &Report| -> Vec<String> {
        r.records[0]
            .trace
            .events
            .iter()
            .map(|e| match &e.kind {
                EventKind::Wait { why, .. } => format!("wait base={:?} basis={:?}", why.base, why.basis),
                EventKind::Attempt { n, method, path, .. } => format!("attempt {n} {method} {path}"),
                EventKind::Done { status, attempts, .. } => format!("done {status} {attempts}"),
                other => serde_json::to_string(other).unwrap(),
            })
            .collect()
    };
    assert_eq!(shape(&a), shape(&b));
    let jitters = |r: &Report| -> Vec<u64> {
        r.records[0]
            .trace
            .events
            .iter()
            .filter_map(|e| {
                if let EventKind::Wait { why, .. } = &e.kind { Some(why.jitter.as_millis() as u64) } else { None }
            })
            .collect()
    };
    assert_ne!(jitters(&a), jitters(&b), "seeds 7 and 8 draw different jitter");
    assert_ne!(trace_text(name, None, 7), trace_text(name, None, 8));
}

#[test]
fn planted_secrets_never_reach_a_trace() {
    for name in NAMES {
        let r = report(name, None, SEED);
        let text = render_run(&r, Show::FirstJobs(usize::MAX));
        let json = serde_json::to_string(&trace_json(&r, Show::FirstJobs(usize::MAX))).unwrap();
        let mut secrets: Vec<String> = PLANTED_SECRETS.iter().map(|s| s.to_string()).collect();
        secrets.extend(r.scenario_config.api.accounts.iter().flat_map(|a| a.keys.clone()));
        secrets.extend(r.records.iter().flat_map(|j| j.attempt_keys.iter().flatten().cloned()));
        for s in &secrets {
            assert!(!text.contains(s.as_str()) && !json.contains(s.as_str()), "{name}: a secret leaked: {s}");
        }
    }
}
