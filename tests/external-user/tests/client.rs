//! This crate's client through retrysim's harness, as the README's
//! "Testing your own client" shows it (the code between the markers is the
//! README's, verbatim).

// README:external-test begin
use std::time::Duration;

use external_user::{Done, Retrying};
use retrysim::testing::{BoxFuture, Harness, Job, JobEnd, Promises, Subject, from_fn, trace_text};

const CLIENT: Retrying = Retrying { max_attempts: 8, deadline: Duration::from_secs(60) };

/// The client as the harness drives it: one job at a time, over the
/// simulated network, on virtual time, drawing from the worker's seeded generator.
struct Mine;

impl Subject for Mine {
    /// What the client promises; the checks hold it to exactly this.
    fn promises(&self) -> Promises {
        Promises::nothing().max_attempts(CLIENT.max_attempts).deadline(CLIENT.deadline).honours_retry_after(true)
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let Done { answer, attempts } =
                CLIENT.call(&job.net.transport(), job.clock, job.rng, job.request, job.keyed).await;
            match answer {
                Ok(res) => JobEnd::succeeded(res.status().as_u16()).attempts(attempts),
                Err(why) => JobEnd::gave_up(why).attempts(attempts),
            }
        })
    }
}

fn harness(scenario: &str) -> Harness {
    Harness::named(scenario).unwrap().with_client(from_fn("my-client", |_host| Mine))
}

#[test]
fn my_client_on_a_busy_fleet() {
    // 8 workers, 120 jobs, 30 writes per 1 s window.
    let report = harness("blinkimg-1s").assert_holds(7);
    assert_eq!(report.succeeded, report.jobs);
    insta::assert_snapshot!(trace_text(&report));
}

#[test]
fn my_client_under_lost_answers() {
    // The same fleet, and 10% of answers lost after the server charged.
    let report = harness("lost-answers-with-key").assert_holds(7);
    assert_eq!(report.charged, report.jobs, "one charge per job");
    insta::assert_snapshot!(trace_text(&report));
}

#[test]
fn my_client_hunt() {
    harness("lost-answers-with-key").hunt(0..50).assert_clean();
}
// README:external-test end
