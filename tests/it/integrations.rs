//! The integration examples, run: `examples/hand_loop.rs`, `tower_retry.rs`,
//! `backon.rs`, `reqwest_retry_sim.rs` and `audit.rs` are included here as modules, so these tests
//! run exactly the code the examples run (and `cargo test` builds the
//! examples themselves too).

#[allow(dead_code)]
#[path = "../../examples/audit.rs"]
pub(crate) mod audit;
#[allow(dead_code)]
#[path = "../../examples/hand_loop.rs"]
mod hand_loop;

use std::time::Duration;

use audit::backon_example::{self, Variant};
use audit::tower_retry;
use retrysim::testing::{ArrivalOutcome, BlackBoxCheck, FaultClass, Harness, Report, black_box, trace_text};

/// The black-box checks a report breaks, each once.
fn broken(r: &Report) -> Vec<BlackBoxCheck> {
    let mut found: Vec<BlackBoxCheck> = black_box(r).iter().map(|v| v.check).collect();
    found.sort();
    found.dedup();
    found
}

/// Runs `h` on `seed`, panicking on a run that did not finish.
fn harness_run(h: &Harness, seed: u64) -> Report {
    h.run(seed).unwrap_or_else(|e| panic!("{e}"))
}

/// Two runs of one seed give the same review text (and `check` compares
/// the reports and ledgers too).
fn assert_replays(h: &Harness, seed: u64) -> String {
    let text = trace_text(&harness_run(h, seed));
    assert_eq!(text, trace_text(&harness_run(h, seed)), "seed {seed} did not replay byte for byte");
    text
}

#[test]
fn a_hand_written_loop_passes_on_a_busy_fleet_and_when_answers_are_lost() {
    let busy = hand_loop::harness("blinkimg-1s").assert_holds(1);
    assert_eq!(busy.succeeded, busy.jobs, "{}", trace_text(&busy));
    assert!(busy.limited > 0, "the fleet meets the limit");
    let lossy = hand_loop::harness("lost-answers-with-key").assert_holds(1);
    let lost = lossy.ledger.arrivals.iter().filter(|a| a.lost).count();
    assert!(lost > 0, "the scenario lost answers");
    assert!(lossy.charged <= lossy.jobs, "one key per job: {} charges for {} jobs", lossy.charged, lossy.jobs);
    assert!(assert_replays(&hand_loop::harness("blinkimg-1s"), 2).contains("client=hand-loop"));
}

#[test]
fn tower_retry_keeps_its_promises_but_comes_back_before_retry_after() {
    let h = tower_retry::harness("blinkimg-1s");
    // What it promises (6 attempts, nothing about Retry-After) holds, and
    // the seeded generator makes the run replay.
    let report = h.assert_holds(1);
    assert_eq!(report.policy, "tower-retry");
    assert_eq!(report.succeeded, report.jobs);
    assert!(report.max_attempts_per_job <= tower_retry::MAX_RETRIES + 1);
    // Held to the server's advice, as the audit holds every row, it fails:
    // 50 ms doubling from the first 429 returns inside the window.
    let mut audited = report.clone();
    audited.promises = audit::contract(&audited);
    assert!(broken(&audited).contains(&BlackBoxCheck::EarlyRetry), "{:?}", broken(&audited));
    assert_replays(&h, 3);
}

#[test]
fn tower_retry_and_backon_replay_an_unkeyed_post_after_a_lost_answer() {
    let cases = [
        ("tower-retry", tower_retry::harness("lost-answers-no-key")),
        ("backon-default", backon_example::harness("lost-answers-no-key", Variant::Default)),
        ("backon-retry-after", backon_example::harness("lost-answers-no-key", Variant::RetryAfterAsDocumented)),
    ];
    for (label, h) in cases {
        let r = harness_run(&h, 1);
        assert!(broken(&r).contains(&BlackBoxCheck::UnkeyedReplay), "{label}: {:?}", broken(&r));
        let charged: u64 = r.ledger.arrivals.iter().filter(|a| a.outcome == ArrivalOutcome::Charged).count() as u64;
        assert!(charged > r.succeeded, "{label}: {charged} charges for {} jobs done", r.succeeded);
    }
    // retrysim's own client in the same scenario refuses the replay.
    let ours = harness_run(&audit::harness("lost-answers-no-key", "retrysim").unwrap(), 1);
    assert_eq!(broken(&ours), [], "{}", trace_text(&ours));
    assert!(ours.charged <= ours.jobs);
}

#[test]
fn backon_defaults_pass_on_a_busy_fleet_and_replay() {
    for variant in [Variant::Default, Variant::RetryAfterAsDocumented, Variant::RetryAfterWithinRetries] {
        let h = backon_example::harness("blinkimg-1s", variant);
        let report = h.assert_holds(1);
        assert_eq!(report.policy, variant.label());
        assert_eq!(report.succeeded, report.jobs, "{}", variant.label());
        assert_replays(&h, 2);
    }
}

#[test]
fn backons_documented_retry_after_breaks_its_retry_limit_and_the_fix_keeps_it() {
    // backon's `adjust` example returns the header's wait even when backon
    // proposes none (its `max_times` used up): on a busy token bucket the
    // retries never stop.
    let documented = harness_run(&backon_example::harness("berlin-40-workers", Variant::RetryAfterAsDocumented), 1);
    assert!(broken(&documented).contains(&BlackBoxCheck::AttemptBound), "{:?}", broken(&documented));
    assert!(documented.max_attempts_per_job > backon_example::DEFAULT_RETRIES + 1);
    // `let wait = proposed?;` first: at most 4 attempts, every check holds.
    let fixed = backon_example::harness("berlin-40-workers", Variant::RetryAfterWithinRetries).assert_holds(1);
    assert!(fixed.max_attempts_per_job <= backon_example::DEFAULT_RETRIES + 1);
    assert!(fixed.requests < documented.requests);
}

/// tower's `Retry` clones its policy for every request, and with it the
/// backoff's generator: with tower's own `HasherRng::default()`, two
/// requests wait exactly the same jittered times. (Why the example's
/// seeded generator changes nothing about tower's behaviour.)
#[tokio::test(start_paused = true)]
async fn towers_default_backoff_gives_every_request_the_same_jitter() {
    use tower::retry::backoff::{Backoff, ExponentialBackoffMaker, MakeBackoff};
    let mut maker = ExponentialBackoffMaker::default();
    let waits = |mut backoff: tower::retry::backoff::ExponentialBackoff| {
        let start = tokio::time::Instant::now();
        (0..6).map(|_| backoff.next_backoff().deadline() - start).collect::<Vec<Duration>>()
    };
    let first_request = waits(maker.make_backoff());
    let second_request = waits(maker.make_backoff());
    assert_eq!(first_request, second_request);
    // The jitter is there: the waits are not the bare doubling of 50 ms.
    let bare: Vec<Duration> = (0..6).map(|i| Duration::from_millis(50 << i)).collect();
    assert_ne!(first_request, bare);
}

#[test]
fn the_audit_rejects_unknown_scenarios_and_rows_clearly() {
    let e = audit::harness("no-such-scenario", "tower-retry").unwrap_err();
    assert!(e.contains("no scenario named \"no-such-scenario\"") && e.contains("berlin-40-workers"), "{e}");
    let e = audit::harness("blinkimg-1s", "no-such-row").unwrap_err();
    assert!(e.contains("no row named \"no-such-row\"") && e.contains("backon-default"), "{e}");
}

/// The "What people use today" tables (`docs/guide/what-people-use.md`) are what
/// `cargo run --release --example audit` prints, byte for byte; on a
/// mismatch the message holds the output to paste. The findings its prose
/// states are asserted on the same figures.
#[test]
fn the_readme_audit_tables_are_the_audit_examples_output() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let result = audit::run(threads).unwrap_or_else(|e| panic!("{e}"));
    let cell = |scenario: &str, row: &str| {
        let si = audit::SCENARIOS.iter().position(|(s, _)| *s == scenario).expect("an audited scenario");
        let ri = audit::ROWS.iter().position(|r| *r == row).expect("an audited row");
        &result[&(si, ri)]
    };
    let on_every_seed =
        |scenario: &str, row: &str, check: BlackBoxCheck| cell(scenario, row).iter().all(|r| r.broken.contains(&check));
    for (scenario, _) in audit::SCENARIOS {
        for run in cell(scenario, "ideal").iter().chain(cell(scenario, "retrysim")) {
            assert_eq!(run.broken, [], "{scenario} seed {}: the yardsticks break nothing", run.seed);
        }
        assert!(cell(scenario, "ideal").iter().all(|r| r.limited == 0 && r.extra_charges == 0));
        assert!(on_every_seed(scenario, "tower-retry", BlackBoxCheck::EarlyRetry), "{scenario}");
    }
    for row in ["tower-retry", "backon-default", "backon-retry-after"] {
        assert!(on_every_seed("lost-answers-no-key", row, BlackBoxCheck::UnkeyedReplay), "{row}");
        assert!(cell("lost-answers-no-key", row).iter().all(|r| r.extra_charges > 0), "{row}");
    }
    assert!(on_every_seed("berlin-40-workers", "backon-retry-after", BlackBoxCheck::AttemptBound));
    // reqwest-retry ignores Retry-After everywhere; on lost answers its
    // path is blind, so the row is not applicable there, never "none".
    for (scenario, _) in audit::SCENARIOS {
        assert!(on_every_seed(scenario, "reqwest-retry", BlackBoxCheck::EarlyRetry), "{scenario}");
    }
    for (scenario, _) in &audit::SCENARIOS[..2] {
        assert!(cell(scenario, "reqwest-retry").iter().all(|r| r.not_applicable.is_empty()), "{scenario}");
    }
    let blind = cell("lost-answers-no-key", "reqwest-retry");
    assert!(blind.iter().all(|r| r.not_applicable == [FaultClass::AnswerLost]), "{blind:?}");
    assert!(blind.iter().all(|r| !r.broken.contains(&BlackBoxCheck::UnkeyedReplay) && r.extra_charges == 0));

    let table = audit::markdown(&result);
    assert!(table.contains("not applicable: answer-lost (5/5)"), "{table}");
    let heading = "## What people use today (tower, backon, reqwest)";
    let (page, section) = crate::readme::page_and_section("What people use today (tower, backon, reqwest)");
    let text = crate::readme::PAGES.iter().find(|(name, _)| *name == page).map(|(_, text)| *text).unwrap_or("");
    assert!(text.ends_with(&format!("{heading}{section}")), "the section ends its page, {page}, whole");
    assert!(section.contains("`cargo run --release --example audit`"), "{page} names the command beside the table");
    assert!(section.contains(&table), "{page}'s audit tables are stale; measured now:\n\n{table}");
}
