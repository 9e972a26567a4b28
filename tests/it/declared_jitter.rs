//! `jitter-spread` on a black-box client that declares its jitter in its
//! `Promises` (issue 54, goal 2): a hand-written loop through the public
//! testing API, judged from the server's ledger alone. The honest loop
//! (full jitter from the job's seeded generator) passes; the same loop
//! waiting a constant fraction of its window, declared full, is caught; the
//! constant loop that declares nothing is not judged.

use std::time::Duration;

use retrysim::core::backoff::{Backoff, Jitter};
use retrysim::env::{Clock, Transport};
use retrysim::testing::scenario::{AdviceForm, ScriptStep, named};
use retrysim::testing::{BoxFuture, Harness, Job, JobEnd, Promises, Property, Subject, from_fn};

/// How the loop draws its waits.
#[derive(Clone, Copy)]
enum Draw {
    /// This backoff's own draw from the job's generator.
    By(Backoff),
    /// The slip: this fraction of the window, every time.
    Constant(f64),
}

/// Up to six tries; after a refusal, a wait drawn as `draw` says.
struct Loop {
    declared: Option<Backoff>,
    draw: Draw,
}

impl Subject for Loop {
    fn promises(&self) -> Promises {
        let p = Promises::nothing().max_attempts(6);
        match self.declared {
            Some(b) => p.jitter(b),
            None => p,
        }
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let transport = job.net.transport();
            for attempt in 1..=6u32 {
                let status = match transport.send(job.request_copy()).await {
                    Ok(res) => res.status().as_u16(),
                    Err(_) => return JobEnd::gave_up("network error").attempts(attempt),
                };
                if status < 300 {
                    return JobEnd::succeeded(status).attempts(attempt);
                }
                if status != 429 || attempt == 6 {
                    return JobEnd::gave_up(format!("status {status}")).attempts(attempt);
                }
                let n = attempt - 1;
                let wait = match self.draw {
                    Draw::By(b) => b.wait(n, None, job.rng.draw()),
                    Draw::Constant(f) => backoff(Jitter::Full).window(n).mul_f64(f),
                };
                job.clock.sleep(wait).await;
            }
            unreachable!("the loop returns on its last attempt")
        })
    }
}

/// The loops' backoff: 200 ms doubling up to 3 s.
fn backoff(jitter: Jitter) -> Backoff {
    Backoff::new(Duration::from_millis(200), Duration::from_secs(3), jitter)
}

/// Twelve jobs on four workers against a script of three 429s that advise
/// nothing, then a 201, over and over: about three waits a job.
fn harness(declared: Option<Backoff>, draw: Draw) -> Harness {
    let mut s = named("once-429-then-200").expect("a named scenario");
    let refusal = ScriptStep::new(429, Some("RATE_LIMITED"), None);
    s.api.script = vec![refusal.clone(), refusal.clone(), refusal, ScriptStep::new(201, None, None)];
    s.api.script_repeat = true;
    s.api.advice = AdviceForm::None;
    s.api.rate_limit_headers = false;
    (s.fleet.workers, s.fleet.jobs) = (4, 12);
    Harness::of(s).with_client(from_fn("declared-jitter", move |_| Loop { declared, draw }))
}

fn spread_findings(h: &Harness, seed: u64) -> Vec<String> {
    let checked = h.check(seed);
    checked.fleet.iter().filter(|v| v.check == Property::JitterSpread).map(|v| v.message.clone()).collect()
}

#[test]
fn honest_clients_declaring_their_jitter_pass() {
    for declared in [Jitter::Full, Jitter::Equal].map(backoff) {
        let h = harness(Some(declared), Draw::By(declared));
        for seed in 1..=3 {
            let report = h.assert_holds(seed);
            // Enough unadvised retries for the tests to judge (KS from 10 draws).
            assert!(report.retries >= 20, "seed {seed}: only {} retries", report.retries);
        }
    }
}

#[test]
fn a_constant_fraction_declared_as_full_jitter_is_caught() {
    let h = harness(Some(backoff(Jitter::Full)), Draw::Constant(0.37));
    for seed in 1..=3 {
        let found = spread_findings(&h, seed);
        assert!(
            found.iter().any(|m| m.contains("blames the client") && m.contains("draws of full jitter")),
            "seed {seed}: {found:?}"
        );
    }
}

#[test]
fn equal_jitter_declared_as_full_is_caught() {
    let h = harness(Some(backoff(Jitter::Full)), Draw::By(backoff(Jitter::Equal)));
    for seed in 1..=3 {
        let found = spread_findings(&h, seed);
        assert!(found.iter().any(|m| m.contains("draws of full jitter")), "seed {seed}: {found:?}");
    }
}

#[test]
fn a_client_that_declares_no_jitter_is_not_judged() {
    let h = harness(None, Draw::Constant(0.37));
    for seed in 1..=3 {
        assert_eq!(spread_findings(&h, seed), Vec::<String>::new(), "seed {seed}");
        h.assert_holds(seed);
    }
}
