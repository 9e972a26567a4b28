//! Imports `retrysim::internals` (hidden, no semver promise) for the hunt's
//! generator (`hunt::swarm`) and `check_run` on bare runs.
//!
//! Keep-alive in the simulator: the API keeps connections open as real
//! servers do, retrysim's client pools them as in production, and the
//! faults pooled clients meet (a close racing the next request, a restart)
//! are drawn by the hunt and caught when a client mishandles them.

use std::collections::BTreeSet;

use crate::support::{replay, run};
use retrysim::internals::checks::hunt::{Kind, swarm};
use retrysim::internals::checks::invariants::{Invariant, check_run};
use retrysim::internals::run::scenario::{self, Scenario};
use retrysim::internals::world::net::{CloseTiming, Fault};

fn named(name: &str) -> Scenario {
    scenario::named(name).unwrap_or_else(|| panic!("no scenario {name}"))
}

#[test]
fn a_busy_fleet_reuses_its_connections() {
    let s = named("blinkimg-1s");
    let r = run(&s, 1);
    // 8 workers on one host share one pool: a handful of connections,
    // not one per request.
    assert!(
        r.connections >= 1 && r.connections * 10 <= r.requests,
        "{} connections for {} requests",
        r.connections,
        r.requests
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["connections"], r.connections, "the JSON report counts them");
}

#[test]
fn an_unkeyed_post_that_meets_a_close_after_its_write_gives_up() {
    let s = named("close-races-no-key");
    let r = run(&s, 7);
    let found = check_run(&r);
    assert!(found.is_empty(), "{found:?}\n{}", replay(&s, 7));
    let timings: Vec<CloseTiming> = r.close_races.iter().map(|x| x.timing).collect();
    assert_eq!(timings, [CloseTiming::FinAfterWrite, CloseTiming::Rst], "{:?}\n{}", r.close_races, replay(&s, 7));
    for raced in &r.close_races {
        assert!(!raced.keyed && raced.method == "POST", "{raced:?}");
        let job = r.records.iter().find(|j| raced.client.ends_with(&format!("job-{}", j.job))).expect("the raced job");
        assert!(
            matches!(&job.outcome, retrysim::testing::JobOutcome::GaveUp { .. }),
            "job {} met a close after its write and must give up, not resend: {:?}\n{}",
            job.job,
            job.outcome,
            replay(&s, 7)
        );
    }
}

#[test]
fn negative_control_a_close_after_the_write_read_as_not_sent_is_caught() {
    let clean = named("close-races-no-key");
    let mut bad = clean.clone();
    bad.client.defects.closed_after_write_as_not_sent = true;
    bad.name = format!("{}-sabotaged", clean.name);
    let found = check_run(&run(&bad, 7));
    let by_race: Vec<_> =
        found.iter().filter(|v| v.invariant == Invariant::NoUnsafeRetry && v.message.contains("close race")).collect();
    // The request never ran, so the server charged it once: only the
    // wire-side check sees the replay.
    assert!(!by_race.is_empty(), "the replay after a close race was not caught: {found:?}\n{}", replay(&bad, 7));
}

#[test]
fn the_default_hunt_draws_every_close_timing_and_keep_alive_setting() {
    let mut timings = BTreeSet::new();
    let (mut closed, mut short_idle, mut capped, mut after_error) = (0, 0, 0, 0);
    for seed in 1..=500 {
        let s = swarm(seed, Kind::All);
        for f in &s.faults.schedule {
            if let Fault::CloseRace { timing } = f.fault {
                timings.insert(timing);
            }
        }
        let k = s.api.keep_alive;
        closed += u32::from(!k.enabled);
        short_idle += u32::from(k.enabled && k.idle_timeout_ms > 0 && k.idle_timeout_ms <= 4_000);
        capped += u32::from(k.max_requests > 0);
        after_error += u32::from(k.close_after_error);
    }
    assert_eq!(timings, CloseTiming::ALL.into_iter().collect(), "seeds 1..=500 drew close races of {timings:?}");
    for (what, n) in [
        ("no keep-alive", closed),
        ("an idle timeout at or under the pool's 4 s", short_idle),
        ("a cap", capped),
        ("closing after an error", after_error),
    ] {
        assert!(n >= 10, "seeds 1..=500 drew {what} on {n} seeds");
    }
}
