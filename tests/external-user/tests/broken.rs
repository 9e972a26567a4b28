//! The negative control for tests/client.rs: the same client with a slip a
//! team really makes, caught by the same checks. Retrying around a call
//! that draws its own `Idempotency-Key` sends a new key on every try, so an
//! answer lost after the server charged is charged again under the next key.

use std::time::Duration;

use external_user::{Done, Retrying};
use retrysim::env::Clock;
use retrysim::testing::{BoxFuture, Harness, Invariant, Job, JobEnd, Promises, Subject, from_fn};

/// An outer retry loop (one second apart) around single tries of the client.
struct KeyPerAttempt;

impl Subject for KeyPerAttempt {
    fn promises(&self) -> Promises {
        Promises::nothing().max_attempts(8).deadline(Duration::from_secs(60)).honours_retry_after(true)
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let once = Retrying { max_attempts: 1, deadline: Duration::from_secs(60) };
            let transport = job.net.transport();
            for attempt in 1..=8 {
                let req = job.request_copy();
                let Done { answer, .. } = once.call(&transport, job.clock, &mut *job.rng, req, job.keyed).await;
                if let Ok(res) = answer {
                    return JobEnd::succeeded(res.status().as_u16()).attempts(attempt);
                }
                job.clock.sleep(Duration::from_secs(1)).await;
            }
            JobEnd::gave_up("out of attempts").attempts(8)
        })
    }
}

fn harness() -> Harness {
    Harness::named("lost-answers-with-key").unwrap().with_client(from_fn("key-per-attempt", |_host| KeyPerAttempt))
}

#[test]
fn a_new_key_per_attempt_is_caught_with_a_replay_line() {
    let checked = harness().check(7);
    assert!(!checked.passed(), "the slip went unseen: {checked}");
    let invariants: Vec<Invariant> = checked.violations.iter().map(|v| v.invariant).collect();
    assert!(invariants.contains(&Invariant::OneChargePerKey), "{checked}");
    assert!(invariants.contains(&Invariant::OneKeyPerOperation), "{checked}");
    let report = checked.report.as_ref().expect("the run finished");
    assert!(report.charged > report.jobs, "lost answers were charged again: {checked}");
    // What `assert_holds` panics with: every violation, then the line that reruns this seed.
    let shown = checked.to_string();
    let replay = "replay: RETRYSIM_SEED=7 cargo test a_new_key_per_attempt_is_caught_with_a_replay_line -- --exact";
    assert!(shown.ends_with(replay), "{shown}");
    let panic = std::panic::catch_unwind(|| harness().assert_holds(7)).expect_err("assert_holds panics");
    assert_eq!(panic.downcast_ref::<String>(), Some(&shown));
}

#[test]
fn the_hunt_catches_the_slip_on_every_seed() {
    // 120 jobs on 30 writes a second: every seed retries 429s, each under a new key.
    let hunt = harness().hunt(0..50);
    for failed in hunt.failures() {
        let replay =
            format!("RETRYSIM_SEED={} cargo test the_hunt_catches_the_slip_on_every_seed -- --exact", failed.seed);
        assert_eq!(failed.replay, replay);
    }
    let n = hunt.checked.len();
    assert_eq!(
        hunt.failures().len(),
        n,
        "seeds that passed: {:?}",
        hunt.checked.iter().filter(|c| c.passed()).map(|c| c.seed).collect::<Vec<_>>()
    );
    let panic = std::panic::catch_unwind(|| hunt.assert_clean()).expect_err("assert_clean panics");
    let text = panic.downcast_ref::<String>().expect("a message");
    assert!(text.starts_with(&format!("{n} of {n} seeds broke an invariant")), "{text}");
}
