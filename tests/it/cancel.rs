//! Imports `retrysim::internals` (hidden, no semver promise) for
//! `checks::check_report` on bare runs, to show invariant 13 failing.
//!
//! Cancellation (invariant 13): the caller cancels the jobs running at one
//! moment (a `cancel` fault); each ends within one clock step whatever it
//! was waiting on, and a client that ignores the token is caught.

use std::time::Duration;

use crate::support::run;
use retrysim::internals::checks::check_report;
use retrysim::internals::checks::invariants::{Invariant, Violation};
use retrysim::internals::run::runner::JobOutcome;
use retrysim::internals::run::scenario::{self, GateConfig, Scenario};
use retrysim::internals::world::net::{Fault, ScheduledFault};

const SEED: u64 = 7;

fn cancelled_at(mut s: Scenario, at_ms: u64) -> Scenario {
    s.faults.schedule.push(ScheduledFault { at: Duration::from_millis(at_ms), fault: Fault::Cancel });
    s.faults.schedule.sort_by_key(|f| f.at);
    s
}

fn list(vs: &[Violation]) -> String {
    vs.iter().map(|v| format!("  {v}")).collect::<Vec<_>>().join("\n")
}

/// Runs `s`, asserts that the cancel hit at least `at_least` jobs, that every
/// one of them gave up `cancelled` within one step, and that no check fails.
fn ends_promptly(s: &Scenario, at_least: usize) {
    let r = run(s, SEED);
    let cancels = &r.fleet_facts.cancels;
    assert_eq!(cancels.len(), 1, "one cancel fault, one cancellation: {cancels:?}");
    let c = &cancels[0];
    assert!(c.jobs.len() >= at_least, "{}: only {} job(s) were running at {} ms", s.name, c.jobs.len(), c.at_ms);
    for j in r.records.iter().filter(|j| c.jobs.contains(&j.job)) {
        assert_eq!(j.outcome, JobOutcome::GaveUp { reason: "cancelled".into() }, "{}: job {}", s.name, j.job);
        assert!(j.finished_ms <= c.at_ms + 2, "{}: job {} ended at {} ms", s.name, j.job, j.finished_ms);
    }
    let found = check_report(&r);
    assert!(found.is_empty(), "{} seed {SEED}:\n{}\n{}", s.name, list(&found), s.to_toml());
}

#[test]
fn a_job_waiting_to_retry_ends_at_the_cancel() {
    // Always 429 with 20 s advice: at 3 s the job sleeps its first wait.
    let s = cancelled_at(scenario::named("deadline-wins").expect("named"), 3_000);
    ends_promptly(&s, 1);
}

#[test]
fn a_job_waiting_for_its_answer_ends_at_the_cancel() {
    let mut s = Scenario { name: "slow-answer".into(), ..Scenario::default() };
    s.api.processing_ms = 5_000;
    s.policy.attempt_timeout = Duration::from_secs(30);
    ends_promptly(&cancelled_at(s, 1_000), 1);
}

#[test]
fn jobs_queued_at_a_gate_end_at_the_cancel() {
    // Forty workers through one AIMD admission queue that starts at 4 in
    // flight: at 1 s most of them wait in the queue.
    let s = scenario::named("berlin-40-workers-admission").expect("named");
    assert!(matches!(s.fleet.gate, GateConfig::Aimd(_)));
    let s = cancelled_at(s, 1_000);
    ends_promptly(&s, 20);
    // The queue moves on: the jobs after the cancel still run.
    let r = run(&s, SEED);
    assert!(r.succeeded > 0, "no job succeeded after the cancel");
}

#[test]
fn a_client_that_ignores_the_token_breaks_invariant_13() {
    let mut s = cancelled_at(scenario::named("deadline-wins").expect("named"), 3_000);
    s.client.defects.ignore_cancel = true;
    let found = check_report(&run(&s, SEED));
    let cancel: Vec<_> = found.iter().filter(|v| v.invariant == Invariant::CancelEndsJob).collect();
    assert_eq!(cancel.len(), 1, "seed {SEED}:\n{}\n{}", list(&found), s.to_toml());
    assert!(cancel[0].message.contains("was cancelled at 3000 ms"), "{}", cancel[0].message);
    assert_eq!(cancel[0].invariant.number(), 13);
}

#[test]
fn a_cancel_fault_round_trips_through_toml() {
    let s = cancelled_at(Scenario::default(), 1_500);
    let text = s.to_toml();
    assert!(text.contains("kind = \"cancel\""), "{text}");
    let back = Scenario::from_toml(&text).expect("parses");
    assert_eq!(back.faults.schedule, s.faults.schedule);
}
