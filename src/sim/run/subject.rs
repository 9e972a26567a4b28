//! The client boundary: what the harness drives, one job at a time.
//!
//! Any retry client can be put into the simulated world: retrysim's own
//! [`RetryClient`](crate::client::RetryClient), the briefs' naive
//! clients ([`clients`](crate::sim::run::clients)), or a user's own loop,
//! `tower::retry` stack or `backon` call. A client implements [`Subject`];
//! the harness builds one per fleet host through a [`MakeSubject`] (inside
//! the simulation, so it can read the virtual clock) and hands it each job:
//! the request the harness built, the simulated network, the worker's seeded
//! [`Rng`], the [`Clock`](crate::env::Clock) on virtual time and a
//! cancellation token.
//!
//! The client reports how the job ended ([`JobEnd`]) and may push events to
//! the job's [`Trace`] (retrysim's driver pushes its full trace; a foreign
//! client may push none). What it [`Promises`] is what the black-box checks
//! ([`blackbox`](crate::sim::checks::blackbox)) hold it to, from the server's ledger
//! alone.
//!
//! # Example: a hand-written loop
//!
//! ```
//! use std::time::Duration;
//! use retrysim::env::{Clock, Transport};
//! use retrysim::testing::{BoxFuture, Job, JobEnd, Promises, Subject};
//!
//! /// Three tries, one second apart, whatever the server says.
//! struct ThreeTries;
//!
//! impl Subject for ThreeTries {
//!     fn promises(&self) -> Promises {
//!         Promises::nothing().max_attempts(3)
//!     }
//!
//!     fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
//!         Box::pin(async move {
//!             let mut last = JobEnd::gave_up("no attempt");
//!             for _ in 0..3 {
//!                 match job.net.transport().send(job.request_copy()).await {
//!                     Ok(res) if res.status().is_success() => return JobEnd::succeeded(res.status().as_u16()),
//!                     Ok(res) => last = JobEnd::gave_up(format!("status {}", res.status())),
//!                     Err(e) => last = JobEnd::gave_up(e.to_string()),
//!                 }
//!                 job.clock.sleep(Duration::from_secs(1)).await;
//!             }
//!             last
//!         })
//!     }
//! }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::core::backoff::Backoff;
use crate::core::budget::RetryBudget;
use crate::core::policy::Policy;
use crate::env::Rng;
use crate::gate::Gate;
use crate::sim::run::scenario::Scenario;
use crate::sim::world::connector::SimConnector;
use crate::sim::world::net::{FaultClass, SimTransport};
use crate::sim::world::timers::{SimClock, SimTimer};
use crate::trace::Trace;

/// A boxed future that a [`Subject`] returns for a job.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The simulated network, as a client reaches it: retrysim's
/// [`Transport`](crate::env::Transport) ([`transport`](SimNet::transport),
/// one connection per attempt) or a connector for `hyper_util`'s client and
/// any `tower` stack on it ([`connector`](SimNet::connector)). Faults
/// (partitions, holds, lost answers, bounces) reach both alike.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimNet;

impl SimNet {
    /// retrysim's transport over simulated TCP, with a connection pool of
    /// its own as in production (see [`SimTransport`]): call it once per
    /// host and clone it to the host's workers.
    pub fn transport(&self) -> SimTransport {
        SimTransport::new()
    }

    /// A connector over simulated TCP for `hyper_util::client::legacy::Client`.
    /// Keep the pool you run in production, and give it the simulation's
    /// clock with `.pool_timer(SimNet::timer())` (see
    /// [`SimConnector`](crate::testing::SimConnector) for what pooled
    /// connections meet, and what the harness says when a pool reads the
    /// real clock).
    pub fn connector(&self) -> SimConnector {
        SimConnector::new()
    }

    /// A hyper timer on the simulation's clock whose sleeps the harness
    /// sees: for `.pool_timer(..)` or `.timer(..)` of a hyper client, in
    /// place of hyper-util's `TokioTimer` (see [`SimTimer`]).
    pub fn timer(&self) -> SimTimer {
        SimTimer
    }
}

/// How one job ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobOutcome {
    /// The final answer was a success with this status.
    Succeeded {
        /// The successful status.
        status: u16,
    },
    /// The client gave up, for this reason.
    GaveUp {
        /// The give-up reason's short name, e.g. `advice_too_long`.
        reason: String,
    },
}

/// What a client under test promises; the black-box checks hold it to this.
///
/// Start from [`Promises::nothing`] (or [`Promises::of_policy`]) and add what
/// your client promises with the setters (each named as its field):
///
/// ```
/// use std::time::Duration;
/// use retrysim::testing::Promises;
///
/// let p = Promises::nothing().max_attempts(4).deadline(Duration::from_secs(10)).honours_retry_after(true);
/// assert_eq!((p.max_attempts, p.deadline), (Some(4), Some(Duration::from_secs(10))));
/// ```
///
/// The struct is `#[non_exhaustive]`: a promise added later starts as
/// "not promised" and breaks no user's code.
///
/// # Default
/// [`Promises::nothing`]: no bound on attempts, no deadline, the advice not promised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Promises {
    /// Requests per run of a job, at most (`None`: no bound promised).
    pub max_attempts: Option<u32>,
    /// Every run of a job ends, and sends its last request, within this of its start.
    pub deadline: Option<Duration>,
    /// No request before the advice (`Retry-After`, a body hint) of the last
    /// answer the job received has passed.
    pub honours_retry_after: bool,
    /// The backoff every retry after an answer that advised no wait waits:
    /// its `n`-th request's answer (from 0) is followed by a wait drawn by
    /// the backoff's jitter over window `n`,
    /// [`Backoff::window`]`(n)` (`None`: not declared, and `jitter-spread`
    /// does not judge the client). See [`Promises::jitter`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter: Option<Backoff>,
}

impl Promises {
    /// What retrysim's own client promises under `policy`: `max_retries + 1`
    /// attempts, the policy's deadline, and the advice if it reads it.
    pub fn of_policy(policy: &Policy) -> Promises {
        Promises {
            max_attempts: Some(policy.max_retries.saturating_add(1)),
            deadline: Some(policy.deadline),
            honours_retry_after: policy.use_advice,
            // Not declared here: the trace-based walk of `jitter-spread`
            // judges retrysim's own client by its whole policy, finer.
            jitter: None,
        }
    }

    /// Nothing promised: only the checks every client owes (one charge per
    /// key, nothing after a terminal answer, no unkeyed replay, no secrets).
    pub fn nothing() -> Promises {
        Promises { max_attempts: None, deadline: None, honours_retry_after: false, jitter: None }
    }

    /// These promises, and at most `n` requests per run of a job (the field `max_attempts`).
    pub fn max_attempts(mut self, n: u32) -> Promises {
        self.max_attempts = Some(n);
        self
    }

    /// These promises, and every run of a job over within `deadline` of its
    /// start (the field `deadline`).
    pub fn deadline(mut self, deadline: Duration) -> Promises {
        self.deadline = Some(deadline);
        self
    }

    /// These promises, and whether no request comes before the last advice
    /// has passed (the field `honours_retry_after`).
    pub fn honours_retry_after(mut self, on: bool) -> Promises {
        self.honours_retry_after = on;
        self
    }

    /// These promises, and that every retry after an answer that advised no
    /// wait (no `Retry-After`, body hint, rate-limit dialect or `RateLimit`
    /// fields) waits a draw of `backoff`: after the run's `n`-th request
    /// (from 0), a wait drawn by `backoff.jitter` over
    /// [`Backoff::window`]`(n)`, from a fresh draw of the job's generator
    /// (the field `jitter`).
    ///
    /// The `jitter-spread` check then tests those waits, as the server saw
    /// them, against that distribution (docs/book/checks.md). It judges
    /// [`Jitter::Full`](crate::core::backoff::Jitter::Full) (`uniform[0, W]`)
    /// and [`Jitter::Equal`](crate::core::backoff::Jitter::Equal)
    /// (`W/2 + uniform[0, W/2]`).
    /// [`Jitter::None`](crate::core::backoff::Jitter::None) draws nothing,
    /// and [`Jitter::Decorrelated`](crate::core::backoff::Jitter::Decorrelated)
    /// draws over a range set by the previous wait, which the harness sees
    /// only to within the network's latency:
    /// both may be declared and are not judged.
    ///
    /// Declaring it promises too that whether the client retries does not
    /// depend on the draw, except that it may give up on a draw its promised
    /// [`deadline`](Promises::deadline) would not leave room for.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retrysim::core::backoff::{Backoff, Jitter};
    /// use retrysim::testing::Promises;
    ///
    /// let full = Backoff::new(Duration::from_millis(500), Duration::from_secs(8), Jitter::Full);
    /// let p = Promises::nothing().max_attempts(6).jitter(full);
    /// assert_eq!(p.jitter, Some(full));
    /// ```
    pub fn jitter(mut self, backoff: Backoff) -> Promises {
        self.jitter = Some(backoff);
        self
    }
}

/// A class of transport fault a client's path to the network cannot show
/// its retry code as it would appear for real, and why. A scenario that
/// injects it is *not applicable* to that client: the harness says so
/// instead of reporting that the checks hold (`Checked::verdict` in
/// `retrysim::testing`), because the client never met the fault it was
/// meant to be judged on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlindSpot {
    /// The fault class the path cannot express.
    pub class: FaultClass,
    /// What the client sees instead, and why that is not the real thing.
    pub reason: String,
}

/// One job, handed to the client under test.
pub struct Job<'a> {
    /// The job's number (1-based).
    pub number: u32,
    /// The worker running it.
    pub worker: u32,
    /// The request the harness built: method, URI, headers (the job's
    /// `x-retrysim-client` label, which the ledger attributes arrivals by,
    /// and planted secrets that must never leak) and body. Forward every
    /// header.
    pub request: Request<Bytes>,
    /// Whether the job may carry an `Idempotency-Key` (a keyed POST).
    pub keyed: bool,
    /// The simulated network.
    pub net: SimNet,
    /// The worker's seeded generator: draw jitter and keys from it.
    pub rng: &'a mut dyn Rng,
    /// The clock on virtual time.
    pub clock: &'a SimClock,
    /// Cancelled when the job's caller gives up on it (a `cancel` fault):
    /// the client must then end the job within one clock step, whatever it
    /// waits on (invariant 13), e.g. with `select!` on `cancel.cancelled()`
    /// around its sleeps and sends.
    pub cancel: &'a CancellationToken,
    /// The job's trace: push events to it, or leave it empty.
    pub trace: &'a mut Trace,
}

impl Job<'_> {
    /// A copy of the request (extensions are not copied), for a client that
    /// sends it more than once.
    pub fn request_copy(&self) -> Request<Bytes> {
        let mut r = Request::new(self.request.body().clone());
        *r.method_mut() = self.request.method().clone();
        *r.uri_mut() = self.request.uri().clone();
        *r.version_mut() = self.request.version();
        *r.headers_mut() = self.request.headers().clone();
        r
    }
}

/// How a job ended, as the client reports it. Only `outcome` is required:
/// what a client leaves out, the harness counts from the server's ledger
/// (attempts) or leaves at zero (waited).
///
/// Build one with [`JobEnd::succeeded`] or [`JobEnd::gave_up`] and add what
/// your client counts with the setters (each named as its field); the struct is
/// `#[non_exhaustive]`, so a field added later breaks no user's code.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobEnd {
    /// Success with a status, or a give-up with a reason (a short word such
    /// as `attempts_exhausted`, shown in reports: never put secrets here).
    pub outcome: JobOutcome,
    /// Attempts the client made, if it counts them.
    pub attempts: Option<u32>,
    /// Time it slept between attempts, if it counts it.
    pub waited: Option<Duration>,
    /// The idempotency key the job carried, if any.
    pub key: Option<String>,
    /// Every key each attempt carried, in order (for the trace-based checks).
    pub attempt_keys: Vec<Option<String>>,
}

impl JobEnd {
    /// The job succeeded with `status`.
    pub fn succeeded(status: u16) -> JobEnd {
        JobEnd::with(JobOutcome::Succeeded { status })
    }

    /// The client gave up, for `reason`.
    pub fn gave_up(reason: impl Into<String>) -> JobEnd {
        JobEnd::with(JobOutcome::GaveUp { reason: reason.into() })
    }

    fn with(outcome: JobOutcome) -> JobEnd {
        JobEnd { outcome, attempts: None, waited: None, key: None, attempt_keys: Vec::new() }
    }

    /// This end, with the idempotency key the job carried (the field `key`).
    pub fn key(mut self, key: impl Into<String>) -> JobEnd {
        self.key = Some(key.into());
        self
    }

    /// This end, with the key each attempt carried, in order (the field `attempt_keys`).
    pub fn attempt_keys(mut self, keys: Vec<Option<String>>) -> JobEnd {
        self.attempt_keys = keys;
        self
    }

    /// Records the attempts made.
    pub fn attempts(mut self, n: u32) -> JobEnd {
        self.attempts = Some(n);
        self
    }

    /// Records the time slept between attempts.
    pub fn waited(mut self, d: Duration) -> JobEnd {
        self.waited = Some(d);
        self
    }
}

/// A retry client the harness can drive.
pub trait Subject: Send + Sync {
    /// What it promises (attempts, deadline, Retry-After).
    fn promises(&self) -> Promises;
    /// Runs one job to its end.
    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd>;
    /// Whether it writes retrysim's full trace (its attempts, answers, waits
    /// and keys), so that the trace-based checks apply on top of the
    /// black-box ones. Only retrysim's own driver does; the default is no.
    fn writes_trace(&self) -> bool {
        false
    }
    /// Whether every wait of this client is on the harness's clock
    /// ([`Job::clock`], [`Host::clock`]) and nothing of it sleeps on tokio's
    /// timer directly (`tokio::time::sleep`, `timeout`, hyper's
    /// `TokioTimer`). Then the harness sees every deadline and skips virtual
    /// time in which nothing happens; otherwise (the default) it steps
    /// through every tick. Reports are the same either way; only speed differs.
    fn sleeps_on_harness_clock(&self) -> bool {
        false
    }
    /// The fault classes this client's path to the network cannot show its
    /// retry code faithfully (see [`BlindSpot`]). The default is none: a
    /// client on [`SimNet::transport`] or [`SimNet::connector`] sees every
    /// fault as it would over a real socket.
    fn blind_spots(&self) -> Vec<BlindSpot> {
        Vec::new()
    }
}

/// What the harness hands a [`MakeSubject`] on each fleet host.
pub struct Host<'a> {
    /// The scenario running.
    pub scenario: &'a Scenario,
    /// The host's clock on virtual time.
    pub clock: SimClock,
    /// With per-worker hosts, the worker this host runs; `None` on the shared host.
    pub worker: Option<u32>,
    /// The fleet gate the scenario configures, if any (retrysim's client uses it).
    pub gate: Option<Arc<dyn Gate>>,
    /// The shared retry budget the scenario configures, if any.
    pub budget: Option<Arc<dyn RetryBudget>>,
}

/// Builds the client a fleet host runs. Called inside the simulation, once
/// per fleet host (one for a shared fleet, one per worker otherwise).
pub trait MakeSubject: Send + Sync {
    /// A label for reports (the `policy` line).
    fn label(&self, s: &Scenario) -> String;
    /// The client for `host`.
    fn make(&self, host: Host<'_>) -> Arc<dyn Subject>;
}

/// A [`MakeSubject`] from a label and a closure.
pub struct FromFn<F> {
    label: String,
    make: F,
}

/// A [`MakeSubject`] from a closure that builds the client for a host.
///
/// ```
/// # use retrysim::testing::*;
/// # struct Mine; impl Subject for Mine {
/// #   fn promises(&self) -> Promises { Promises::nothing() }
/// #   fn run<'a>(&'a self, _: Job<'a>) -> BoxFuture<'a, JobEnd> { Box::pin(async { JobEnd::gave_up("x") }) } }
/// let make = from_fn("my-client", |_host| Mine);
/// ```
pub fn from_fn<S, F>(label: impl Into<String>, make: F) -> FromFn<F>
where
    S: Subject + 'static,
    F: Fn(Host<'_>) -> S + Send + Sync,
{
    FromFn { label: label.into(), make }
}

impl<S, F> MakeSubject for FromFn<F>
where
    S: Subject + 'static,
    F: Fn(Host<'_>) -> S + Send + Sync,
{
    fn label(&self, _: &Scenario) -> String {
        self.label.clone()
    }

    fn make(&self, host: Host<'_>) -> Arc<dyn Subject> {
        Arc::new((self.make)(host))
    }
}
