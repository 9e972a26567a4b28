//! `reqwest-retry`'s `RetryTransientMiddleware` in a `reqwest_middleware`
//! stack, on retrysim's simulated network: the stack most reqwest users
//! have, put into a rate-limited API on virtual time, unchanged but for its
//! last middleware ([`SimReqwest`], which sends over the simulated network
//! instead of calling reqwest).
//!
//! ```sh
//! cargo run --release --example reqwest_retry_sim [-- --scenario NAME] [--seed N]
//! ```
//!
//! The policy is the one reqwest-retry's README shows:
//! `ExponentialBackoff::builder().build_with_max_retries(3)` (1 s doubling,
//! capped at 30 min, full jitter), with the default strategy (retry 5xx,
//! 408, 429, connect errors and timeouts). It reads no `Retry-After` and
//! sends no `Idempotency-Key`.
//!
//! # The random generator, and why the default cannot replay
//!
//! `ExponentialBackoff` draws its jitter from `rand::rng()`, a generator
//! seeded from the operating system in every thread, and retry-policies
//! takes no generator of the caller's (`Jitter::apply` is crate-private):
//! two runs of one seed wait differently, and the harness's determinism
//! check reports it (invariant 8, `Variant::Default`; a test shows it).
//! [`SeededBackoff`] is the same formula with the job's seeded generator
//! (`Variant::Seeded`, the audit's row): reqwest-retry's policy trait takes
//! any policy. It draws the jitter factor in [0, 1) as retry-policies does
//! and keeps whole milliseconds of the wait: the middleware sleeps until
//! `SystemTime::now() + wait` read twice, microseconds apart, and a wait of
//! whole milliseconds rounds up on tokio's millisecond timer to the same
//! tick either way.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use rand_pcg::Pcg64;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::{RetryDecision, RetryPolicy, RetryTransientMiddleware};
use retrysim::env::{Rng, seeded_rng};
use retrysim::testing::{Harness, MakeSubject, Promises, ReqwestStack, SimReqwest, from_fn};

#[allow(clippy::duplicate_mod)]
#[path = "support/mod.rs"]
mod support;

/// Retries after the first attempt, as in reqwest-retry's README.
pub const MAX_RETRIES: u32 = 3;

/// Which jitter generator the policy uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `ExponentialBackoff::builder().build_with_max_retries(3)` as is:
    /// jitter from `rand::rng()`, so no run replays.
    Default,
    /// The same formula with the job's seeded generator ([`SeededBackoff`]).
    Seeded,
}

impl Variant {
    /// The label in reports.
    pub fn label(self) -> &'static str {
        match self {
            Variant::Default => "reqwest-retry-unseeded",
            Variant::Seeded => "reqwest-retry",
        }
    }
}

/// retry-policies' `ExponentialBackoff` with its builder's defaults (1 s
/// doubling, 30 min cap, full jitter, [`MAX_RETRIES`]), jitter drawn from a
/// seeded generator and the wait kept to whole milliseconds.
pub struct SeededBackoff {
    rng: Mutex<Pcg64>,
}

impl SeededBackoff {
    /// The policy, its jitter drawn from a generator seeded with `seed`.
    pub fn new(seed: u64) -> SeededBackoff {
        SeededBackoff { rng: Mutex::new(seeded_rng(seed)) }
    }
}

impl RetryPolicy for SeededBackoff {
    fn should_retry(&self, _request_start_time: SystemTime, n_past_retries: u32) -> RetryDecision {
        if n_past_retries >= MAX_RETRIES {
            return RetryDecision::DoNotRetry;
        }
        let (min, max) = (Duration::from_secs(1), Duration::from_secs(30 * 60));
        let unjittered = max.min(min * 2u32.checked_pow(n_past_retries).unwrap_or(u32::MAX));
        // A factor uniform in [0, 1), from the top 53 bits of a draw.
        let draw = self.rng.lock().unwrap_or_else(|e| e.into_inner()).draw();
        let factor = (draw >> 11) as f64 / (1u64 << 53) as f64;
        let wait = Duration::from_millis(unjittered.mul_f64(factor).min(max).as_millis() as u64);
        RetryDecision::Retry { execute_after: SystemTime::now() + wait }
    }
}

/// The stack: `RetryTransientMiddleware` with the variant's policy, then
/// the simulated network.
pub fn stack(variant: Variant, terminal: SimReqwest, rng: &mut dyn Rng) -> ClientWithMiddleware {
    let retry = match variant {
        Variant::Default => {
            RetryTransientMiddleware::new_with_policy(ExponentialBackoff::builder().build_with_max_retries(MAX_RETRIES))
        }
        Variant::Seeded => {
            return ClientBuilder::new(reqwest::Client::new())
                .with(RetryTransientMiddleware::new_with_policy(SeededBackoff::new(rng.draw())))
                .with(terminal)
                .build();
        }
    };
    ClientBuilder::new(reqwest::Client::new()).with(retry).with(terminal).build()
}

/// The client for the harness: [`MAX_RETRIES`] + 1 attempts promised,
/// nothing about `Retry-After` or a deadline.
pub fn client(variant: Variant) -> impl MakeSubject + 'static {
    from_fn(variant.label(), move |_host| {
        let promises = Promises::nothing().max_attempts(MAX_RETRIES + 1);
        ReqwestStack::new(promises, move |terminal, rng| stack(variant, terminal, rng))
    })
}

/// `scenario` with the stack in it.
pub fn harness(scenario: &str, variant: Variant) -> Harness {
    Harness::named(scenario).expect("a named scenario").with_client(client(variant))
}

#[allow(dead_code)] // the test and the audit include this file as a module
fn main() -> ExitCode {
    let (scenarios, seed) = match support::args("reqwest_retry_sim", &["blinkimg-1s", "lost-answers-no-key"]) {
        Ok(a) => a,
        Err(e) => return support::bad_input(&e),
    };
    for scenario in &scenarios {
        let h = harness(scenario, Variant::Seeded);
        support::report("reqwest_retry_sim", "reqwest-retry (its README's policy, seeded)", scenario, &h, seed);
    }
    ExitCode::SUCCESS
}
