//! The clients the harness ships, each an implementation of [`Subject`]:
//! retrysim's own driver ([`Retrysim`]), seed 002's naive clients (the
//! comparison's baselines), and defective variants for negative controls
//! ([`Defects`]). A scenario picks one with `[client]`:
//!
//! ```toml
//! [client]
//! kind = "retrysim"        # or "no-key-naive", "retry-at-once",
//!                          # "exponential-no-jitter", "exponential-full-jitter"
//! [client.defects]         # negative controls only
//! extra_attempt = true
//! ```
//!
//! A user's own client comes in through [`MakeSubject`] instead
//! ([`runner::run_subject`](crate::sim::run::runner::run_subject)).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::client::{Replayable, RetryClient};
use crate::core::backoff::{Backoff, Jitter};
use crate::core::policy::Policy;
use crate::env::Transport;
use crate::sim::run::defects::{Defects, FirstRetryAfter, FreshKeys};
use crate::sim::run::job::JobOutcome;
use crate::sim::run::scenario::Scenario;
use crate::sim::run::seed::derive;
use crate::sim::run::subject::{BoxFuture, Host, Job, JobEnd, MakeSubject, Promises, Subject};
use crate::sim::world::net::SimTransport;
use crate::sim::world::timers::SimClock;

/// Which built-in client runs a scenario's jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Builtin {
    /// retrysim's driver under the scenario's policy.
    #[default]
    Retrysim,
    /// Seed 002's unkeyed client: no `Idempotency-Key`, and it resends a
    /// POST after a network error as if nothing could have run ("retried
    /// network errors like any other").
    NoKeyNaive,
    /// Retries at once, ignoring Retry-After (seed 002's first row).
    RetryAtOnce,
    /// Waits `min(8 s, 100 ms × 2^n)`, ignoring Retry-After.
    ExponentialNoJitter,
    /// Waits uniform `[0, min(8 s, 100 ms × 2^n)]`, ignoring Retry-After.
    ExponentialFullJitter,
}

impl Builtin {
    /// Every built-in client.
    pub const ALL: [Builtin; 5] = [
        Builtin::Retrysim,
        Builtin::NoKeyNaive,
        Builtin::RetryAtOnce,
        Builtin::ExponentialNoJitter,
        Builtin::ExponentialFullJitter,
    ];

    /// The policy this client really runs, from the scenario's: the
    /// baselines read no advice and use seed 002's fixed backoffs.
    pub fn policy(self, scenario: &Policy) -> Policy {
        let ms = Duration::from_millis;
        let ignoring = |backoff| Policy { use_advice: false, backoff, ..scenario.clone() };
        match self {
            Builtin::Retrysim => scenario.clone(),
            Builtin::NoKeyNaive => Policy { idempotency_keys: false, ..scenario.clone() },
            Builtin::RetryAtOnce => ignoring(Backoff { base: ms(0), cap: ms(0), jitter: Jitter::None }),
            Builtin::ExponentialNoJitter => ignoring(Backoff { base: ms(100), cap: ms(8_000), jitter: Jitter::None }),
            Builtin::ExponentialFullJitter => ignoring(Backoff { base: ms(100), cap: ms(8_000), jitter: Jitter::Full }),
        }
    }
}

/// A scenario's choice of client: a built-in one, and deliberate defects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientConfig {
    /// The client.
    pub kind: Builtin,
    /// Deliberate defects (negative controls); all off by default.
    #[serde(skip_serializing_if = "Defects::is_off")]
    pub defects: Defects,
}

impl ClientConfig {
    /// Whether this is retrysim's own client with no defect.
    pub fn is_default(&self) -> bool {
        *self == ClientConfig::default()
    }
}

/// retrysim's driver as a [`Subject`].
pub struct Retrysim<T = SimTransport> {
    client: RetryClient<SimClock, T>,
    declared: Promises,
    /// Vouch for every request as replayable (seed 002's naive client).
    replayable: bool,
    /// Hand the driver a token of its own instead of the job's (the
    /// `ignore-cancel` defect).
    own_token: bool,
}

impl<T: Transport> Retrysim<T> {
    /// Drives jobs through `client`, promising what `declared` says.
    pub fn new(client: RetryClient<SimClock, T>, declared: Promises) -> Retrysim<T> {
        Retrysim { client, declared, replayable: false, own_token: false }
    }
}

impl<T: Transport + 'static> Subject for Retrysim<T> {
    fn promises(&self) -> Promises {
        self.declared.clone()
    }

    fn writes_trace(&self) -> bool {
        true
    }

    fn sleeps_on_harness_clock(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let mut req: Request<Bytes> = job.request;
            if self.replayable {
                req.extensions_mut().insert(Replayable);
            }
            let mut keys = Vec::new();
            let own = CancellationToken::new();
            let cancel = if self.own_token { &own } else { job.cancel };
            let result = self.client.execute_recording_keys(req, job.rng, cancel, job.trace, &mut keys).await;
            match result {
                Ok(done) => JobEnd {
                    outcome: JobOutcome::Succeeded { status: done.response.status().as_u16() },
                    attempts: Some(done.attempts),
                    waited: Some(done.waited),
                    key: done.idempotency_key,
                    attempt_keys: keys,
                },
                Err(e) => JobEnd {
                    outcome: JobOutcome::GaveUp { reason: e.reason.kind().to_owned() },
                    attempts: Some(e.attempts),
                    waited: Some(e.waited),
                    key: e.idempotency_key,
                    attempt_keys: keys,
                },
            }
        })
    }
}

/// Builds the built-in client `kind` with `defects` under the scenario
/// `policy`, on a host's clock, gate and budget. `seed` seeds what a
/// defect draws.
pub fn builtin(kind: Builtin, defects: Defects, policy: &Policy, host: Host<'_>, seed: u64) -> Arc<dyn Subject> {
    let declared = Promises::of_policy(policy);
    let running = defects.running_policy(&kind.policy(policy));
    let replayable = kind == Builtin::NoKeyNaive || defects.replay_unsafe;
    fn finish<T: Transport + 'static>(
        mut client: RetryClient<SimClock, T>,
        host: Host<'_>,
        defects: Defects,
        declared: Promises,
        replayable: bool,
    ) -> Arc<dyn Subject> {
        if defects.retry_terminal || defects.quota_as_throttled {
            client = client.with_classifier(defects.classifier());
        }
        if let Some(gate) = host.gate {
            client = client.with_gate(gate);
        }
        if let Some(budget) = host.budget {
            client = client.with_budget(budget);
        }
        Arc::new(Retrysim { client, declared, replayable, own_token: defects.ignore_cancel })
    }
    let first_line = defects.first_retry_after_line;
    if defects.fresh_key_each_attempt {
        let transport = FreshKeys::new(SimTransport, derive(seed, "fresh-keys", host.worker.unwrap_or(0) as u64));
        let client = RetryClient::new(host.clock.clone(), FirstRetryAfter::new(transport, first_line), running);
        finish(client, host, defects, declared, replayable)
    } else {
        let client = RetryClient::new(host.clock.clone(), FirstRetryAfter::new(SimTransport, first_line), running);
        finish(client, host, defects, declared, replayable)
    }
}

/// The client a scenario names in `[client]`.
#[derive(Debug, Clone, Copy)]
pub struct ScenarioClient {
    seed: u64,
}

impl ScenarioClient {
    /// The scenario's own client, for a run with `seed`.
    pub fn new(seed: u64) -> ScenarioClient {
        ScenarioClient { seed }
    }
}

impl MakeSubject for ScenarioClient {
    fn label(&self, s: &Scenario) -> String {
        s.policy.name.clone()
    }

    fn make(&self, host: Host<'_>) -> Arc<dyn Subject> {
        let s = host.scenario;
        builtin(s.client.kind, s.client.defects, &s.policy, host, self.seed)
    }
}
