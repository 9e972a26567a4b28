//! A client on hyper-util, the stack many services run in production, on the
//! simulated network: the same `Client` type, built on retrysim's
//! `SimConnector` instead of `HttpConnector`, with its timer on the
//! harness's clock.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use retrysim::bytes::Bytes;
use retrysim::env::{Clock, Rng};
use retrysim::testing::{BoxFuture, Harness, Job, JobEnd, Promises, SimConnector, SimNet, Subject, from_fn};

/// Up to five tries of one request, each after the `Retry-After` of the
/// last 429 (1 s when it has none).
struct HyperLoop {
    client: Client<SimConnector, Full<Bytes>>,
}

impl Subject for HyperLoop {
    fn promises(&self) -> Promises {
        Promises::nothing().max_attempts(5).honours_retry_after(true)
    }

    fn sleeps_on_harness_clock(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let key = format!("{:016x}", job.rng.draw());
            for attempt in 1..=5 {
                let mut req = job.request.clone().map(Full::new);
                if job.keyed {
                    req.headers_mut().insert("idempotency-key", key.parse().expect("hex"));
                }
                let wait = match self.client.request(req).await {
                    Ok(res) if res.status() == 429 => {
                        let advice = res.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok());
                        let _ = res.into_body().collect().await;
                        Duration::from_secs(advice.unwrap_or(1))
                    }
                    Ok(res) => return JobEnd::succeeded(res.status().as_u16()).attempts(attempt),
                    Err(_) if job.keyed => Duration::from_millis(500),
                    Err(_) => return JobEnd::gave_up("network error").attempts(attempt),
                };
                job.clock.sleep(wait + Duration::from_millis(job.rng.draw() % 250)).await;
            }
            JobEnd::gave_up("out of attempts").attempts(5)
        })
    }
}

fn harness(scenario: &str) -> Harness {
    Harness::named(scenario).unwrap().with_client(from_fn("hyper-util", |_host| {
        let net = SimNet;
        let client = Client::builder(TokioExecutor::new()).pool_timer(net.timer()).build(net.connector());
        HyperLoop { client }
    }))
}

#[test]
fn a_hyper_util_client_on_a_busy_fleet() {
    let report = harness("blinkimg-1s").assert_holds(7);
    assert_eq!(report.succeeded, report.jobs);
    assert!(report.limited > 0, "the fleet met the limiter");
}

#[test]
fn a_hyper_util_client_under_lost_answers() {
    let report = harness("lost-answers-with-key").assert_holds(7);
    assert_eq!(report.charged, report.jobs, "one charge per job");
}
