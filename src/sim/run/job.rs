//! A job's life: which operation it is, the request the harness builds for
//! it, one run of it through the client under test, and the record the
//! checkers read. The fleet's workers and deferral's background workers
//! both run jobs through here.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::client::NoIdempotencyKey;
use crate::core::classify::Operation;
use crate::env::{Clock, Rng};
use crate::sim::run::scenario::Scenario;
use crate::sim::run::seed::derive;
pub use crate::sim::run::subject::JobOutcome;
use crate::sim::run::subject::{BoxFuture, Job, JobEnd, SimNet, Subject};
use crate::sim::world::api::CLIENT_HEADER;
use crate::sim::world::net::API_HOST;
use crate::sim::world::timers::SimClock;
use crate::trace::{Event, EventKind, Trace, ms};

/// Secrets planted in every request, so the checks can prove none leaks.
pub const PLANTED_SECRETS: [&str; 2] = ["sk-live-PLANTED-SECRET", "session=PLANTED-COOKIE"];

/// The kind of operation a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// A POST that may carry an `Idempotency-Key`.
    Keyed,
    /// A POST sent without a key.
    Unsafe,
    /// A GET.
    Safe,
    /// A PUT: idempotent by its method, sent without a key.
    Idempotent,
}

/// One job, start to end, with its trace.
#[derive(Debug, Clone, Serialize)]
pub struct JobRecord {
    /// The job's number (1-based).
    pub job: u32,
    /// The worker that ran it (background workers come after the front end's).
    pub worker: u32,
    /// What kind of operation it is.
    pub kind: JobKind,
    /// Its operation class, as the harness knows it.
    pub operation: Operation,
    /// When the run started (virtual ms).
    pub started_ms: u64,
    /// When the run ended (virtual ms).
    pub finished_ms: u64,
    /// Attempts made (as the client counts them, else as the server saw them).
    pub attempts: u32,
    /// Time slept between attempts (0 when the client does not say).
    pub waited_ms: u64,
    /// Whether the client reported its waits (else `waited_ms` is 0 for
    /// want of a figure, and the review text says "unreported").
    #[serde(skip)]
    pub waited_reported: bool,
    /// How it ended.
    pub outcome: JobOutcome,
    /// The full key, for the checkers only: never rendered or serialised.
    #[serde(skip)]
    pub key: Option<String>,
    /// Every key the job's attempts carried, in order (checkers only).
    #[serde(skip)]
    pub attempt_keys: Vec<Option<String>>,
    /// Whether the client reported its attempts itself (else the runner
    /// counts them from the ledger after the run).
    #[serde(skip)]
    pub attempts_reported: bool,
    /// The client's panic message, when it panicked in this job (the job
    /// then counts as given up, `client_panicked`, and the checks report it).
    #[serde(skip)]
    pub panic: Option<String>,
    /// What the client pushed (empty for a client that traces nothing).
    pub trace: Trace,
}

impl JobRecord {
    /// Time the job's attempts waited at the gate.
    pub fn queued_ms(&self) -> u64 {
        self.trace.events.iter().map(event_queued_ms).sum()
    }
}

fn event_queued_ms(e: &Event) -> u64 {
    match e.kind {
        EventKind::Admitted { queued_ms } => queued_ms,
        _ => 0,
    }
}

/// Which jobs keep their whole trace. The others keep a compact one: the
/// two things the report's figures read from a trace (the first answer, for
/// `first_attempt_429_rate`, and the time queued at the gate), so every
/// figure is the same; only what the checks and the trace view read is gone.
/// A big run then holds its records and the server's ledger, not every event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Traces {
    /// Every job (what the checks need; the default).
    #[default]
    All,
    /// No job (`retrysim run`, `retrysim compare`).
    None,
    /// Jobs `1..=n` (a single worker's trace view).
    FirstJobs(u32),
    /// The jobs this front-end worker ran (a fleet's trace view).
    Worker(u32),
}

impl Traces {
    /// Whether `record`'s trace is kept whole.
    pub fn keeps(self, record: &JobRecord) -> bool {
        match self {
            Traces::All => true,
            Traces::None => false,
            Traces::FirstJobs(n) => record.job <= n,
            Traces::Worker(w) => record.worker == w,
        }
    }
}

/// A record cut down to what the report's figures read (see [`Traces`]):
/// of its trace, the first answer and the time queued; no attempt keys.
pub(crate) fn compact(record: &mut JobRecord) {
    record.attempt_keys = Vec::new();
    let queued_ms = record.queued_ms();
    let trace = &mut record.trace;
    let first = trace.events.iter().find(|e| matches!(e.kind, EventKind::Answer { n: 1, .. })).cloned();
    let admitted = trace
        .events
        .iter()
        .find(|e| matches!(e.kind, EventKind::Admitted { .. }))
        .map(|e| Event { at_ms: e.at_ms, kind: EventKind::Admitted { queued_ms } });
    trace.events = admitted.into_iter().chain(first).collect();
}

/// The give-up reason of a job whose client panicked.
pub(crate) const CLIENT_PANICKED: &str = "client_panicked";

/// Which kind job `job` of a run with `seed` is, from the scenario's mix.
pub fn kind_of(s: &Scenario, seed: u64, job: u32) -> JobKind {
    let m = s.fleet.mix;
    let total = (m.keyed + m.unsafe_post + m.safe + m.idempotent) as u64;
    let pick = derive(seed, "mix", job as u64) % total;
    if pick < m.keyed as u64 {
        JobKind::Keyed
    } else if pick < (m.keyed + m.unsafe_post) as u64 {
        JobKind::Unsafe
    } else if pick < (m.keyed + m.unsafe_post + m.safe) as u64 {
        JobKind::Safe
    } else {
        JobKind::Idempotent
    }
}

/// The label of job `job`'s requests from worker `worker`.
pub fn label(job: u32, worker: u32) -> String {
    format!("w{worker} job-{job}")
}

/// The job number in a label such as `w3 job-17` (`None` for other text).
pub fn job_of_label(label: &str) -> Option<u32> {
    label.rsplit_once("job-")?.1.parse().ok()
}

/// The request the harness builds for a job: its label, planted secrets,
/// the account's API key, and (for an unsafe job) no idempotency key.
pub fn request(s: &Scenario, kind: JobKind, job: u32, worker: u32) -> Request<Bytes> {
    let b = match kind {
        JobKind::Safe => Request::get(format!("http://{API_HOST}/v1/jobs/job_{}", s.fleet.polled_job.unwrap_or(job))),
        JobKind::Keyed | JobKind::Unsafe => Request::post(format!("http://{API_HOST}/v1/jobs")),
        JobKind::Idempotent => Request::put(format!("http://{API_HOST}/v1/uploads/u{job}")),
    };
    let mut b = b
        .header(CLIENT_HEADER, label(job, worker))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", PLANTED_SECRETS[0]))
        .header("cookie", PLANTED_SECRETS[1]);
    if !s.fleet.anonymous {
        let keys = &s.api.accounts.first().map(|a| a.keys.clone()).unwrap_or_default();
        if !keys.is_empty() {
            b = b.header("x-api-key", keys[worker as usize % keys.len()].as_str());
        }
    }
    if kind == JobKind::Unsafe {
        b = b.extension(NoIdempotencyKey);
    }
    let body = match kind {
        JobKind::Safe => Bytes::new(),
        JobKind::Idempotent => Bytes::from(format!(r#"{{"name":"u{job}.png"}}"#)),
        _ => Bytes::from(format!(r#"{{"uploadId":"u{job}","options":{{"op":"{}"}}}}"#, s.fleet.op)),
    };
    b.body(body).expect("the request parts are valid")
}

/// One run of a job through the client under test.
pub(crate) struct Run<'a> {
    pub subject: &'a dyn Subject,
    pub clock: &'a SimClock,
    pub request: Request<Bytes>,
    pub kind: JobKind,
    pub job: u32,
    pub worker: u32,
    /// The trace's label (the front end's `w<worker> job-<n>`, or a
    /// background worker's `bg<i> job-<n>`).
    pub trace_label: String,
    /// What the job's caller cancels it by.
    pub cancel: CancellationToken,
}

/// Runs job `job` on worker `worker`: its request, through `subject`,
/// cancellable by its caller with `cancel`.
pub(crate) async fn run_job(
    subject: &dyn Subject,
    clock: &SimClock,
    s: &Scenario,
    seed: u64,
    (job, cancel): (u32, CancellationToken),
    worker: u32,
    rng: &mut dyn Rng,
) -> JobRecord {
    let kind = kind_of(s, seed, job);
    let request = request(s, kind, job, worker);
    let run = Run { subject, clock, request, kind, job, worker, trace_label: label(job, worker), cancel };
    run.record(rng).await
}

impl Run<'_> {
    /// Runs the request to its end and records it.
    pub(crate) async fn record(self, rng: &mut dyn Rng) -> JobRecord {
        let method = self.request.method().clone();
        let mut trace = Trace::new(self.trace_label);
        let cancel = self.cancel;
        let started = self.clock.now();
        let job = Job {
            number: self.job,
            worker: self.worker,
            request: self.request,
            keyed: self.kind == JobKind::Keyed,
            net: SimNet,
            rng,
            clock: self.clock,
            cancel: &cancel,
            trace: &mut trace,
        };
        // A panicking client must not take the run down with it: the panic
        // ends this job only, and the checks report it with the replay line.
        let (end, panic) = match CatchUnwind(self.subject.run(job)).await {
            Ok(end) => (end, None),
            Err(message) => (JobEnd::gave_up(CLIENT_PANICKED), Some(message)),
        };
        let finished = self.clock.now();
        let has_key = self.kind == JobKind::Keyed && end.key.is_some();
        JobRecord {
            job: self.job,
            worker: self.worker,
            kind: self.kind,
            operation: Operation::of(&method, has_key),
            started_ms: ms(started),
            finished_ms: ms(finished),
            attempts: end.attempts.unwrap_or(0),
            attempts_reported: end.attempts.is_some(),
            waited_ms: ms(end.waited.unwrap_or(Duration::ZERO)),
            waited_reported: end.waited.is_some(),
            outcome: end.outcome,
            key: end.key,
            attempt_keys: end.attempt_keys,
            panic,
            trace,
        }
    }
}

/// Polls a job's future, turning a panic into its message.
struct CatchUnwind<'a>(BoxFuture<'a, JobEnd>);

impl Future for CatchUnwind<'_> {
    type Output = Result<JobEnd, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Ready(end)) => Poll::Ready(Ok(end)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(panic_message(payload.as_ref()))),
        }
    }
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_their_job() {
        assert_eq!(job_of_label(&label(17, 3)), Some(17));
        assert_eq!(job_of_label("(unknown)"), None);
        assert_eq!(job_of_label("w1 job-x"), None);
    }
}
