//! What `--cfg tokio_unstable` changes for a user's client, measured: the
//! project builds without it, as a user's crate does.
//!
//! turmoil seeds tokio's own random generator from the run's seed only when
//! tokio is built with `--cfg tokio_unstable`. Two things a client may write
//! draw from that generator: an unbiased `tokio::select!` (which branch is
//! polled first) and `tokio::sync::watch` (which of eight wait lists a
//! receiver joins). The harness's own code writes `biased;` and uses no
//! `watch`, so its runs are identical either way; a client that draws is
//! nondeterministic without the flag, and the determinism check (each seed
//! runs twice) catches it and says what to add.

use std::time::Duration;

use retrysim::env::{Clock, Transport};
use retrysim::testing::{BoxFuture, Harness, Invariant, Job, JobEnd, Promises, Subject, from_fn};

/// Sends each job once, waits 1 ms or 2 ms as a `select!` between two ready
/// branches picks, and sends again: the pick shows in when the second
/// request arrives. `biased`: the `select!` polls in order and draws nothing.
struct Pick {
    biased: bool,
}

impl Subject for Pick {
    fn promises(&self) -> Promises {
        Promises::nothing().max_attempts(2)
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let net = job.net.transport();
            let first = net.send(job.request.clone()).await;
            let (one, two) = (std::future::ready(1), std::future::ready(2));
            let ms = if self.biased {
                tokio::select! { biased; ms = one => ms, ms = two => ms }
            } else {
                tokio::select! { ms = one => ms, ms = two => ms }
            };
            job.clock.sleep(Duration::from_millis(ms)).await;
            let second = net.send(job.request).await;
            match (first, second) {
                (Ok(a), _) if a.status().is_success() => JobEnd::succeeded(a.status().as_u16()).attempts(2),
                (_, Ok(b)) => JobEnd::succeeded(b.status().as_u16()).attempts(2),
                _ => JobEnd::gave_up("no answer").attempts(2),
            }
        })
    }
}

fn harness(biased: bool) -> Harness {
    Harness::named("blinkimg-1s").unwrap().with_client(from_fn("select", move |_| Pick { biased }))
}

#[test]
fn an_unbiased_select_is_caught_by_the_determinism_check_and_told_what_to_add() {
    let checked = harness(false).check(3);
    let determinism: Vec<_> = checked.violations.iter().filter(|v| v.invariant == Invariant::Determinism).collect();
    if cfg!(tokio_unstable) {
        // Seeded from the run's seed: the same draws in both runs.
        assert!(determinism.is_empty(), "{checked}");
    } else {
        assert_eq!(determinism.len(), 1, "120 jobs, one unseeded draw each, must differ somewhere: {checked}");
        let message = &determinism[0].message;
        assert!(message.contains("--cfg tokio_unstable") && message.contains("biased;"), "{message}");
    }
}

#[test]
fn a_biased_select_is_deterministic_without_the_flag() {
    let checked = harness(true).check(3);
    assert!(checked.violations.iter().all(|v| v.invariant != Invariant::Determinism), "{checked}");
}
