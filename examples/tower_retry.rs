//! `tower::retry` with a typical user policy, over hyper-util's client on
//! retrysim's simulated network: the stack a tower user already has, put
//! into a rate-limited API on virtual time unchanged.
//!
//! ```sh
//! cargo run --release --example tower_retry [-- --scenario NAME] [--seed N]
//! ```
//!
//! The policy is the one most tower users write: retry a 429, a 5xx or a
//! transport error, at most [`MAX_RETRIES`] times, waiting tower's
//! [`ExponentialBackoff`] with tower's default minimum (50 ms) and jitter
//! (up to 99% of the wait). It reads no `Retry-After` and sends no
//! `Idempotency-Key`: tower's `Policy` sees only the request and the result.
//!
//! # The random generator, and why it is seeded here
//!
//! `ExponentialBackoffMaker::default()` draws its jitter from
//! `HasherRng::default()`, a hasher seeded by the process's `RandomState`:
//! two runs of one seed would wait differently, and the harness's
//! determinism check would fail. tower takes any `tower::util::rng::Rng`
//! through `ExponentialBackoffMaker::new(min, max, jitter, rng)`, so the
//! stack here gets a PCG-64 seeded from the first job's seeded generator.
//!
//! The stack is built once per fleet host, as a service builds it once per
//! process, and tower's `Retry` clones its policy (and with it the backoff's
//! generator) for every request: every request starts from the same state
//! and draws the same jitter sequence, whichever generator it is. That is
//! tower's behaviour, not the seeding's (`tests/it/integrations.rs` shows it
//! with `HasherRng::default()`), and the simulation keeps it.

use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use rand_pcg::Pcg64;
use retrysim::env::{Rng as _, seeded_rng};
use retrysim::testing::{BoxFuture, Harness, Job, JobEnd, MakeSubject, Promises, Subject, from_fn};
use tower::ServiceExt;
use tower::retry::backoff::{Backoff, ExponentialBackoff, ExponentialBackoffMaker, MakeBackoff};
use tower::retry::{Policy, Retry};

// Each example is a crate of its own, so each loads the shared file; the
// audit and the test load it once per example they include.
#[allow(clippy::duplicate_mod)]
#[path = "support/mod.rs"]
mod support;

use support::{HttpClient, copy_request, http_client, with_full_body};

/// Retries after the first attempt.
pub const MAX_RETRIES: u32 = 5;

/// tower's jitter generator, seeded from the simulation (see the module docs).
#[derive(Debug, Clone)]
pub struct SeededRng(Pcg64);

impl tower::util::rng::Rng for SeededRng {
    fn next_u64(&mut self) -> u64 {
        self.0.draw()
    }
}

/// The typical policy: a 429, a 5xx or any transport error is retried,
/// at most [`MAX_RETRIES`] times, after the next exponential backoff.
#[derive(Debug, Clone)]
pub struct RetryTransient {
    retries_left: u32,
    backoff: ExponentialBackoff<SeededRng>,
}

impl RetryTransient {
    /// The policy with tower's default backoff shape and `rng` for its jitter.
    pub fn new(rng: SeededRng) -> RetryTransient {
        // tower's own defaults (`ExponentialBackoffMaker::default()`): 50 ms
        // doubling without a cap, jitter up to 99%; only the generator differs.
        let mut maker =
            ExponentialBackoffMaker::new(Duration::from_millis(50), Duration::from_millis(u64::MAX), 0.99, rng)
                .expect("tower's default backoff is valid");
        RetryTransient { retries_left: MAX_RETRIES, backoff: maker.make_backoff() }
    }
}

type Req = Request<Full<Bytes>>;

impl Policy<Req, Response<Incoming>, hyper_util::client::legacy::Error> for RetryTransient {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _req: &mut Req,
        result: &mut Result<Response<Incoming>, hyper_util::client::legacy::Error>,
    ) -> Option<Self::Future> {
        let transient = match result {
            Ok(res) => res.status() == StatusCode::TOO_MANY_REQUESTS || res.status().is_server_error(),
            Err(_) => true,
        };
        if !transient || self.retries_left == 0 {
            return None;
        }
        self.retries_left -= 1;
        Some(self.backoff.next_backoff())
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(copy_request(req))
    }
}

/// The stack: `Retry<RetryTransient, hyper_util Client>`, built on the
/// host's first job and shared by its workers.
#[derive(Default)]
pub struct TowerRetry {
    stack: OnceLock<Retry<RetryTransient, HttpClient>>,
}

impl Subject for TowerRetry {
    fn promises(&self) -> Promises {
        Promises::nothing().max_attempts(MAX_RETRIES + 1)
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let stack = self.stack.get_or_init(|| {
                let rng = SeededRng(seeded_rng(job.rng.draw()));
                Retry::new(RetryTransient::new(rng), http_client())
            });
            match stack.clone().oneshot(with_full_body(job.request_copy())).await {
                Ok(res) => {
                    let status = res.status();
                    match res.into_body().collect().await {
                        Ok(_) if status.is_success() => JobEnd::succeeded(status.as_u16()),
                        Ok(_) => JobEnd::gave_up(format!("status {}", status.as_u16())),
                        Err(_) => JobEnd::gave_up("answer cut off"),
                    }
                }
                Err(e) if e.is_connect() => JobEnd::gave_up("connect failed"),
                Err(_) => JobEnd::gave_up("network error"),
            }
        })
    }
}

/// The client for the harness.
pub fn client() -> impl MakeSubject + 'static {
    from_fn("tower-retry", |_| TowerRetry::default())
}

/// `scenario` with the tower stack in it.
pub fn harness(scenario: &str) -> Harness {
    Harness::named(scenario).expect("a named scenario").with_client(client())
}

#[allow(dead_code)] // the test and the audit include this file as a module
fn main() -> ExitCode {
    let (scenarios, seed) = match support::args("tower_retry", &["blinkimg-1s", "lost-answers-no-key"]) {
        Ok(a) => a,
        Err(e) => return support::bad_input(&e),
    };
    for scenario in &scenarios {
        support::report("tower_retry", "tower::retry (typical policy)", scenario, &harness(scenario), seed);
    }
    ExitCode::SUCCESS
}
