//! The clients the harness ships, each an implementation of [`Subject`]:
//! retrysim's own driver ([`Retrysim`]), brief 002's naive clients (the
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
//! ([`RunOptions::run_subject`](crate::sim::run::runner::RunOptions::run_subject)).

use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use tokio_util::sync::CancellationToken;

use crate::client::IDEMPOTENCY_KEY;
use crate::client::{Replayable, RetryClient};
use crate::core::policy::Policy;
use crate::env::Transport;
use crate::sim::run::defects::{ClosedAsNotSent, Defects, FreshKeys, JitterSlip, ReadsAdvice, SlippedDraws};
use crate::sim::run::scenario::{Builtin, Scenario};
use crate::sim::run::seed::derive;
use crate::sim::run::subject::{BoxFuture, Host, Job, JobEnd, JobOutcome, MakeSubject, Promises, Subject};
use crate::sim::world::net::SimTransport;
use crate::sim::world::timers::SimClock;

/// retrysim's driver as a [`Subject`].
pub struct Retrysim<T = SimTransport> {
    client: RetryClient<SimClock, T>,
    declared: Promises,
    /// Vouch for every request as replayable (brief 002's naive client).
    replayable: bool,
    /// Hand the driver a token of its own instead of the job's (the
    /// `ignore-cancel` defect).
    own_token: bool,
    /// Draw the jitter wrongly (the `jitter-*` defects), and whether the
    /// running policy draws keys (their draws pass through).
    slip: Option<(JitterSlip, bool)>,
}

impl<T: Transport> Retrysim<T> {
    /// Drives jobs through `client`, promising what `declared` says.
    pub fn new(client: RetryClient<SimClock, T>, declared: Promises) -> Retrysim<T> {
        Retrysim { client, declared, replayable: false, own_token: false, slip: None }
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
            let keyed = |keys: bool| {
                let method = matches!(*req.method(), http::Method::POST | http::Method::PATCH);
                let opted_out = req.extensions().get::<crate::client::NoIdempotencyKey>().is_some();
                keys && method && !opted_out && !req.headers().contains_key(IDEMPOTENCY_KEY)
            };
            let mut slipped;
            let rng: &mut dyn crate::env::Rng = match self.slip {
                Some((slip, keys)) => {
                    slipped = SlippedDraws::new(job.rng, slip, 2 * u32::from(keyed(keys)));
                    &mut slipped
                }
                None => job.rng,
            };
            let result = self.client.execute_recording_keys(req, rng, cancel, job.trace, &mut keys).await;
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
pub(crate) fn builtin(kind: Builtin, defects: Defects, policy: &Policy, host: Host<'_>, seed: u64) -> Arc<dyn Subject> {
    let declared = Promises::of_policy(policy);
    let running = defects.running_policy(&kind.policy(policy));
    let replayable = kind == Builtin::NoKeyNaive || defects.replay_unsafe;
    let keys = running.idempotency_keys;
    fn finish<T: Transport + 'static>(
        mut client: RetryClient<SimClock, T>,
        host: Host<'_>,
        defects: Defects,
        declared: Promises,
        (replayable, keys): (bool, bool),
    ) -> Arc<dyn Subject> {
        let table = defects.retry_terminal
            || defects.quota_as_throttled
            || defects.throttled_as_unclear
            || defects.transient_as_terminal;
        if table {
            client = client.with_classifier(defects.classifier());
        }
        if let Some(gate) = host.gate {
            client = client.with_gate(gate);
        }
        if let Some(budget) = host.budget {
            client = client.with_budget(budget);
        }
        let slip = defects.jitter_slip().map(|s| (s, keys));
        Arc::new(Retrysim { client, declared, replayable, own_token: defects.ignore_cancel, slip })
    }
    let closed = defects.closed_after_write_as_not_sent;
    if defects.fresh_key_each_attempt {
        let transport = FreshKeys::new(
            ClosedAsNotSent::new(SimTransport::new(), closed),
            derive(seed, "fresh-keys", host.worker.unwrap_or(0) as u64),
        );
        let client = RetryClient::new(host.clock.clone(), ReadsAdvice::new(transport, &defects), running);
        finish(client, host, defects, declared, (replayable, keys))
    } else {
        let client = RetryClient::new(
            host.clock.clone(),
            ReadsAdvice::new(ClosedAsNotSent::new(SimTransport::new(), closed), &defects),
            running,
        );
        finish(client, host, defects, declared, (replayable, keys))
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
