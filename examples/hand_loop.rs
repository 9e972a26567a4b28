//! Your own hand-written retry loop, over hyper-util's client on retrysim's
//! simulated network: what a careful loop needs to pass every black-box
//! check on a busy fleet and when answers are lost.
//!
//! ```sh
//! cargo run --release --example hand_loop [-- --scenario NAME] [--seed N]
//! ```
//!
//! The loop makes at most [`MAX_ATTEMPTS`] attempts within [`DEADLINE`],
//! and:
//! - sends one `Idempotency-Key` per job (drawn from the job's seeded
//!   generator) on every attempt, when the job may carry one;
//! - on a 429 or a 502/503/504 waits `Retry-After` (seconds) plus up to
//!   250 ms of jitter, or else an exponential backoff with full jitter;
//! - stops on any other 4xx and on a 429 whose body says the quota is gone;
//! - after a transport error, retries only what is safe: a request that
//!   was never sent (connect failed), or one that carries a key; an unkeyed
//!   POST whose answer was lost may have run, so it gives up instead;
//! - gives up rather than sleep past its deadline.
//!
//! All randomness comes from `job.rng`, all time from `job.clock`: the same
//! seed replays byte for byte.

use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::BodyExt;
use retrysim::env::{Clock, Rng};
use retrysim::testing::{BoxFuture, Harness, Job, JobEnd, MakeSubject, Promises, Subject, from_fn};

// Each example is a crate of its own, so each loads the shared file; the
// audit and the test load it once per example they include.
#[allow(clippy::duplicate_mod)]
#[path = "support/mod.rs"]
mod support;

use support::{HttpClient, copy_request, http_client, with_full_body};

/// Attempts per job, the first included.
pub const MAX_ATTEMPTS: u32 = 6;

/// No request and no sleep past this, from the job's start.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Body codes that say waiting will not help.
const TERMINAL_CODES: [&str; 3] = ["QUOTA_EXCEEDED", "insufficient_quota", "SIGNUP_REQUIRED"];

/// `Retry-After` in delta-seconds (this loop does not read HTTP-dates).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(secs))
}

/// A uniform draw in `[0, max)`.
fn uniform(rng: &mut dyn Rng, max: Duration) -> Duration {
    Duration::from_nanos(rng.draw() % (max.as_nanos() as u64).max(1))
}

/// What the loop does after one attempt.
enum Next {
    Done(JobEnd),
    /// Retry after the server's advice, or after a backoff if it gave none.
    Retry(Option<Duration>),
}

/// The hand-written loop.
pub struct HandLoop {
    client: HttpClient,
}

impl HandLoop {
    async fn attempt(&self, request: &Request<Bytes>, key: Option<&HeaderValue>, attempt: u32) -> Next {
        let mut req = copy_request(request);
        if let Some(key) = key {
            req.headers_mut().insert("idempotency-key", key.clone());
        }
        let res = match self.client.request(with_full_body(req)).await {
            Ok(res) => res,
            Err(e) if e.is_connect() => return Next::Retry(None),
            Err(_) if key.is_some() => return Next::Retry(None),
            Err(_) => {
                return Next::Done(JobEnd::gave_up("answer lost; an unkeyed POST is not replayed").attempts(attempt));
            }
        };
        let status = res.status();
        let advice = retry_after(res.headers());
        let body = match res.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) if key.is_some() => return Next::Retry(None),
            Err(_) => return Next::Done(JobEnd::gave_up("answer cut off").attempts(attempt)),
        };
        if status.is_success() {
            return Next::Done(JobEnd::succeeded(status.as_u16()).attempts(attempt));
        }
        let text = String::from_utf8_lossy(&body);
        let quota_gone = TERMINAL_CODES.iter().any(|code| text.contains(code));
        let transient = matches!(status.as_u16(), 429 | 502 | 503 | 504);
        if !transient || (status == StatusCode::TOO_MANY_REQUESTS && quota_gone) {
            return Next::Done(JobEnd::gave_up(format!("status {}", status.as_u16())).attempts(attempt));
        }
        Next::Retry(advice)
    }
}

impl Subject for HandLoop {
    fn promises(&self) -> Promises {
        Promises::nothing().max_attempts(MAX_ATTEMPTS).deadline(DEADLINE).honours_retry_after(true)
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let start = job.clock.now();
            let key = job.keyed.then(|| {
                let key = format!("hand-loop-{:016x}{:016x}", job.rng.draw(), job.rng.draw());
                HeaderValue::from_str(&key).expect("hex is a valid header value")
            });
            let mut waited = Duration::ZERO;
            for attempt in 1..=MAX_ATTEMPTS {
                let advice = match self.attempt(&job.request, key.as_ref(), attempt).await {
                    Next::Done(end) => return end.waited(waited),
                    Next::Retry(advice) => advice,
                };
                let wait = match advice {
                    Some(advice) => advice + uniform(job.rng, Duration::from_millis(250)),
                    None => uniform(job.rng, Duration::from_millis(100 << (attempt - 1).min(6))),
                };
                if attempt == MAX_ATTEMPTS || job.clock.now() - start + wait > DEADLINE {
                    return JobEnd::gave_up("attempts or deadline exhausted").attempts(attempt).waited(waited);
                }
                job.clock.sleep(wait).await;
                waited += wait;
            }
            unreachable!("the loop returns on its last attempt")
        })
    }
}

/// The client for the harness.
pub fn client() -> impl MakeSubject + 'static {
    from_fn("hand-loop", |_| HandLoop { client: http_client() })
}

/// `scenario` with the hand-written loop in it.
pub fn harness(scenario: &str) -> Harness {
    Harness::named(scenario).expect("a named scenario").with_client(client())
}

#[allow(dead_code)] // the test includes this file as a module
fn main() -> ExitCode {
    let (scenarios, seed) = match support::args("hand_loop", &["blinkimg-1s", "lost-answers-with-key"]) {
        Ok(a) => a,
        Err(e) => return support::bad_input(&e),
    };
    let mut clean = true;
    for scenario in &scenarios {
        clean &= support::report("hand_loop", "hand-written loop", scenario, &harness(scenario), seed);
    }
    if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
