//! `backon` around a hyper-util call on retrysim's simulated network, as
//! its users write it: the call in a closure, `.retry(ExponentialBuilder::default())`.
//!
//! ```sh
//! cargo run --release --example backon [-- --scenario NAME] [--seed N]
//! ```
//!
//! The closure sends the request and turns every answer that is not a 2xx
//! into an error (as `error_for_status` does), and every transport error
//! too; backon retries every error unless told otherwise (`when`). Three
//! variants ([`Variant`]):
//!
//! - **default**: `ExponentialBuilder::default()`, which backon documents as
//!   no jitter, factor 2, 1 s minimum, 60 s maximum, 3 retries.
//! - **Retry-After as backon's docs show it**: the same builder with
//!   `.adjust(...)` copied from the example in backon's rustdoc of
//!   `adjust`: use the `Retry-After` seconds when the answer has the header,
//!   else backon's proposed wait. That closure ignores backon's `None`
//!   (the builder's retries are used up) whenever the header is there, so
//!   on a 429 the retries never run out.
//! - **Retry-After within the retries**: the fix, `let wait = proposed?;`
//!   first, then the header's seconds instead of `wait`.
//!
//! None of them sends an `Idempotency-Key`; backon knows nothing of them.
//!
//! # Random generators
//!
//! The builder's jitter is off by default; with `with_jitter()` it would
//! draw from `fastrand`, seeded from the process unless `with_jitter_seed`
//! is given. Nothing here turns it on, so every wait comes from the
//! builder and the server's answers, and a seed replays byte for byte.

use std::process::ExitCode;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use http::HeaderValue;
use http::header::RETRY_AFTER;
use http_body_util::BodyExt;
use retrysim::testing::{BoxFuture, Harness, Job, JobEnd, MakeSubject, Promises, Subject, from_fn};

// Each example is a crate of its own, so each loads the shared file; the
// audit and the test load it once per example they include.
#[allow(clippy::duplicate_mod)]
#[path = "support/mod.rs"]
mod support;

use support::{HttpClient, copy_request, http_client, with_full_body};

/// How the user's code tells backon about Retry-After.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `ExponentialBuilder::default()`, nothing else.
    Default,
    /// `.adjust(...)` as in backon's docs: the header's seconds, whatever backon proposed.
    RetryAfterAsDocumented,
    /// `.adjust(...)` that stops when backon proposes no more retries.
    RetryAfterWithinRetries,
}

impl Variant {
    /// The label reports show.
    pub fn label(self) -> &'static str {
        match self {
            Variant::Default => "backon-default",
            Variant::RetryAfterAsDocumented => "backon-retry-after",
            Variant::RetryAfterWithinRetries => "backon-retry-after-fixed",
        }
    }
}

/// backon's default `max_times`: retries after the first attempt.
pub const DEFAULT_RETRIES: u32 = 3;

/// Why one attempt failed, as the user's closure hands it to backon.
#[derive(Debug)]
pub enum CallError {
    /// An answer that is not a 2xx.
    Status { status: u16, retry_after: Option<HeaderValue> },
    /// The request failed on the way (`connect`: before anything was sent).
    Network { connect: bool },
}

/// Sends `req` once: a 2xx's status, or why not.
async fn call(client: &HttpClient, req: http::Request<bytes::Bytes>) -> Result<u16, CallError> {
    let res = client.request(with_full_body(req)).await.map_err(|e| CallError::Network { connect: e.is_connect() })?;
    let status = res.status();
    let retry_after = res.headers().get(RETRY_AFTER).cloned();
    res.into_body().collect().await.map_err(|_| CallError::Network { connect: false })?;
    if status.is_success() {
        Ok(status.as_u16())
    } else {
        Err(CallError::Status { status: status.as_u16(), retry_after })
    }
}

/// The header's seconds, parsed as backon's docs do (an unreadable value is 0).
fn documented_retry_after(e: &CallError) -> Option<Duration> {
    match e {
        CallError::Status { retry_after: Some(v), .. } => {
            Some(Duration::from_secs(v.to_str().unwrap_or("0").parse::<u64>().unwrap_or(0)))
        }
        _ => None,
    }
}

/// A hyper-util call retried with backon.
pub struct Backon {
    client: HttpClient,
    variant: Variant,
}

impl Backon {
    pub fn new(variant: Variant) -> Backon {
        Backon { client: http_client(), variant }
    }
}

impl Subject for Backon {
    fn promises(&self) -> Promises {
        // What the user configured: `max_times` 3, and the advice when read.
        Promises::nothing().max_attempts(DEFAULT_RETRIES + 1).honours_retry_after(self.variant != Variant::Default)
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let client = &self.client;
            // The closure owns no part of `job` (its generator is not `Sync`).
            let request = job.request_copy();
            let attempt = || call(client, copy_request(&request));
            let retried = attempt.retry(ExponentialBuilder::default());
            let result = match self.variant {
                Variant::Default => retried.await,
                Variant::RetryAfterAsDocumented => {
                    retried.adjust(|e, proposed| documented_retry_after(e).or(proposed)).await
                }
                Variant::RetryAfterWithinRetries => {
                    retried
                        .adjust(|e, proposed| {
                            let wait = proposed?;
                            Some(documented_retry_after(e).unwrap_or(wait))
                        })
                        .await
                }
            };
            match result {
                Ok(status) => JobEnd::succeeded(status),
                Err(CallError::Status { status, .. }) => JobEnd::gave_up(format!("status {status}")),
                Err(CallError::Network { connect: true }) => JobEnd::gave_up("connect failed"),
                Err(CallError::Network { connect: false }) => JobEnd::gave_up("network error"),
            }
        })
    }
}

/// The client for the harness.
pub fn client(variant: Variant) -> impl MakeSubject + 'static {
    from_fn(variant.label(), move |_| Backon::new(variant))
}

/// `scenario` with backon in it.
pub fn harness(scenario: &str, variant: Variant) -> Harness {
    Harness::named(scenario).expect("a named scenario").with_client(client(variant))
}

#[allow(dead_code)] // the test and the audit include this file as a module
fn main() -> ExitCode {
    let (scenarios, seed) = match support::args("backon", &["blinkimg-1s", "lost-answers-no-key"]) {
        Ok(a) => a,
        Err(e) => return support::bad_input(&e),
    };
    for scenario in &scenarios {
        for variant in [Variant::Default, Variant::RetryAfterAsDocumented, Variant::RetryAfterWithinRetries] {
            support::report("backon", variant.label(), scenario, &harness(scenario, variant), seed);
        }
    }
    ExitCode::SUCCESS
}
