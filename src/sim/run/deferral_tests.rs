//! The deferral queue's unit tests: which give-ups it takes, a job
//! deferred again after each advice up to `max_passes`, and the
//! `deferral-drops-jobs` defect's pattern (issue 54's mutants).

use super::*;
use crate::core::policy::Policy;
use crate::sim::run::runner::run;
use crate::sim::run::scenario::{DeferralConfig, named};

/// Every request refused with a 30 s advice (`always-429-30s-budget-10s`):
/// the front end (10 s) defers each job, and each background run, under
/// the same 10 s budget, is told too long again, until `max_passes` (3) runs.
fn refused_forever(background_workers: u32) -> Scenario {
    let mut s = named("always-429-30s-budget-10s").expect("a named scenario");
    (s.fleet.workers, s.fleet.jobs) = (2, 3);
    let policy = Policy::interactive();
    s.fleet.deferral = Some(DeferralConfig { workers: background_workers, policy, ..DeferralConfig::default() });
    s
}

fn first_attempt_ms(r: &JobRecord) -> u64 {
    let attempt = r.trace.events.iter().find(|e| matches!(e.kind, EventKind::Attempt { .. }));
    attempt.expect("a background run makes an attempt").at_ms
}

#[test]
fn the_drops_jobs_defect_drops_every_other_job_offered_the_first_included() {
    // Five jobs offered: the defect (a negative control) drops the
    // first, third and fifth, so the background runs two of them.
    let mut s = refused_forever(1);
    s.fleet.jobs = 5;
    s.client.defects.deferral_drops_jobs = true;
    let r = run(&s, 1).expect("the run ends");
    let mut jobs: Vec<u32> = r.deferred_records.iter().map(|d| d.job).collect();
    jobs.dedup();
    assert_eq!((r.deferred, jobs.len()), (2, 2), "background runs of jobs {jobs:?}");
}

#[test]
fn a_job_told_too_long_again_runs_again_after_each_advice_up_to_max_passes() {
    let s = refused_forever(2);
    let r = run(&s, 1).expect("the run ends");
    assert_eq!(r.deferred, 3, "every job deferred by the front end and run in the background");
    for job in 1..=s.fleet.jobs {
        let front = &r.records[job as usize - 1];
        let runs: Vec<&JobRecord> = r.deferred_records.iter().filter(|d| d.job == job).collect();
        assert_eq!(runs.len(), 3, "job {job}: max_passes background runs");
        // Each run starts once the advice its last answer gave (30 s)
        // has passed, and, a background worker being free, no later
        // than a second after.
        let mut passes_at = front.finished_ms + 30_000;
        for d in runs {
            let first = first_attempt_ms(d);
            assert!(
                (passes_at..passes_at + 1_000).contains(&first),
                "job {job}: {first} ms, advice passes at {passes_at}"
            );
            // Background workers are numbered after the front end's.
            assert!((s.fleet.workers..s.fleet.workers + 2).contains(&d.worker), "job {job}: worker {}", d.worker);
            passes_at = d.finished_ms + 30_000;
        }
    }
    // Another bound than the default: a pass count that wrapped below
    // zero (`passes - 1`) happens to stop after three runs, as 3 does.
    let mut two = refused_forever(2);
    two.fleet.deferral.as_mut().expect("a deferral").max_passes = 2;
    let r = run(&two, 1).expect("the run ends");
    assert_eq!(r.deferred_records.len(), 2 * 3, "max_passes 2: two background runs for each of three jobs");
}

#[test]
fn only_a_budget_shorter_than_the_wait_is_deferred() {
    // The two give-ups that waiting longer fixes (brief 000's deferral).
    assert!(deferrable("advice_too_long"));
    assert!(deferrable("deadline_would_pass"));
    // The rest are not the budget's fault: a retry later fails the same.
    let others = ["unsendable", "terminal", "not_replayable", "cancelled", "attempts_exhausted"];
    for reason in others.into_iter().chain(["unclear_exhausted", "budget_exhausted", "invalid_idempotency_key"]) {
        assert!(!deferrable(reason), "{reason}");
    }
}
