//! The async driver: send → classify → decide → sleep, until done.
//!
//! It owns nothing of the world: the [`Clock`], the [`Transport`] and the
//! [`Rng`] are handed in, so the same code runs in production, under paused
//! tokio time, and inside the turmoil simulator.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use tokio_util::sync::CancellationToken;

use crate::core::body::ErrorEnvelope;
use crate::core::budget::{Deadline, RetryBudget};
use crate::core::classify::{Class, Classifier, DefaultTable, Operation, Outcome, classify_advised};
use crate::core::policy::{Attempted, Decision, Draws, GiveUpReason, Policy, decide, secs};
use crate::core::retry_after::{Advice, read_advice};
use crate::env::{Clock, Rng, Transport, TransportError};
use crate::gate::{Feedback, Gate};
use crate::trace::{AdviceView, EventKind, Trace, ms, short_key};

/// The header that makes a POST safe to replay.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header a server marks a replayed idempotent answer with (made once:
/// a lookup by name as text parses the text every time).
static REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The last answer of a failed operation, kept whole so the caller can show
/// it, or queue the work under the same key (brief 000).
#[derive(Debug, Clone)]
pub struct LastAnswer {
    /// The final status, `429` or whatever ended the operation.
    pub status: StatusCode,
    /// The body's `error.code` or `error.type`.
    pub code: Option<String>,
    /// The headers as received, `Retry-After` and vendor limits included.
    pub headers: HeaderMap,
    /// The body as received, so the caller can show the server's own words.
    pub body: Bytes,
}

/// Why an operation failed, with everything needed to act on it.
#[derive(Debug, Clone)]
pub struct RetryError {
    /// Why the operation stopped: the reason names the rule that fired.
    pub reason: GiveUpReason,
    /// Attempts made.
    pub attempts: u32,
    /// Total time slept between attempts.
    pub waited: Duration,
    /// Time from the first attempt to the give-up (monotonic).
    pub elapsed: Duration,
    /// The last answer, if the last attempt got one.
    pub last: Option<LastAnswer>,
    /// The last transport failure, if the last attempt got no answer.
    pub last_failure: Option<TransportError>,
    /// The key every attempt carried: queue the work under it.
    pub idempotency_key: Option<String>,
}

impl fmt::Display for RetryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gave up after {} attempts ({} waited): {}", self.attempts, secs(self.waited), self.reason)?;
        if let Some(last) = &self.last {
            write!(f, "; last answer {}", last.status.as_u16())?;
            if let Some(code) = &last.code {
                write!(f, " {code}")?;
            }
        }
        if let Some(e) = &self.last_failure {
            write!(f, "; last failure: {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RetryError {}

/// A successful operation: the answer and what it took to get it.
#[derive(Debug)]
pub struct Success {
    /// The 2xx answer.
    pub response: Response<Bytes>,
    /// Attempts made, the successful one included.
    pub attempts: u32,
    /// Total time slept between attempts.
    pub waited: Duration,
    /// Time from the first attempt to the answer (monotonic).
    pub elapsed: Duration,
    /// The server answered `Idempotent-Replayed: true`: an earlier attempt
    /// with this key had already run (its answer was lost), and this is that
    /// run's answer, not a second run.
    pub replayed: bool,
    /// The key every attempt carried.
    pub idempotency_key: Option<String>,
}

impl Success {
    /// The answer alone.
    pub fn into_response(self) -> Response<Bytes> {
        self.response
    }
}

/// A request extension: send this POST without a generated key (it is then
/// an unsafe operation, never replayed after an ambiguous failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoIdempotencyKey;

/// A request extension: the caller vouches that this request may be sent
/// again even when the server may already have run it (a POST that only
/// reads, or one the server deduplicates by other means). Method names alone
/// do not say this (brief 001); the driver then treats the request as
/// idempotent. A wrong vouch double-charges: it is how the harness models
/// brief 002's naive client that "retried network errors like any other".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replayable;

/// A retrying HTTP client over an injected clock and transport.
pub struct RetryClient<C, T> {
    clock: C,
    transport: T,
    policy: Policy,
    classifier: Arc<dyn Classifier>,
    budget: Option<Arc<dyn RetryBudget>>,
    gate: Option<Arc<dyn Gate>>,
}

fn copy_request(req: &Request<Bytes>) -> Request<Bytes> {
    let mut r = Request::new(req.body().clone());
    *r.method_mut() = req.method().clone();
    *r.uri_mut() = req.uri().clone();
    *r.version_mut() = req.version();
    *r.headers_mut() = req.headers().clone();
    r
}

/// A 128-bit key from two draws, formatted like a UUID's hex.
fn new_key(rng: &mut dyn Rng) -> String {
    format!("{:016x}{:016x}", rng.draw(), rng.draw())
}

/// Whether a method gets a generated key: the ones that are not idempotent.
fn wants_key(method: &Method) -> bool {
    matches!(*method, Method::POST | Method::PATCH)
}

enum Sent {
    Answer(Response<Bytes>),
    Failed(TransportError),
    Cancelled,
}

impl<C: Clone, T> RetryClient<C, T> {
    /// The same client (clock, policy, classifier, budget, gate) over another
    /// transport: one per request when the transport borrows from it, as the
    /// reqwest middleware's does.
    pub fn with_transport<U>(&self, transport: U) -> RetryClient<C, U> {
        RetryClient {
            clock: self.clock.clone(),
            transport,
            policy: self.policy.clone(),
            classifier: self.classifier.clone(),
            budget: self.budget.clone(),
            gate: self.gate.clone(),
        }
    }
}

impl<C: Clock, T: Transport> RetryClient<C, T> {
    /// A client with the default classification table and no shared budget.
    pub fn new(clock: C, transport: T, policy: Policy) -> Self {
        RetryClient {
            clock,
            transport,
            policy,
            classifier: Arc::new(DefaultTable::default()),
            budget: None,
            gate: None,
        }
    }

    /// Replaces the classification table.
    pub fn with_classifier(mut self, classifier: Arc<dyn Classifier>) -> Self {
        self.classifier = classifier;
        self
    }

    /// Shares a retry budget with other clients.
    pub fn with_budget(mut self, budget: Arc<dyn RetryBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Sends every attempt, first or retry, through a gate shared by a fleet.
    pub fn with_gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The clock in use.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Runs one logical operation to success or a reasoned give-up.
    ///
    /// A POST or PATCH without an `Idempotency-Key` gets one, drawn once from
    /// `rng` and reused on every attempt (unless the policy turns keys off).
    /// A caller's key is sent as given; one that is not visible ASCII fails
    /// with [`GiveUpReason::InvalidIdempotencyKey`] before anything is sent.
    /// Each attempt is bounded by `min(attempt_timeout, time left)`; `cancel`
    /// stops a wait or a call at once. The [`Success`] says what it took
    /// (attempts, time waited, whether the answer was a replay); use
    /// [`execute_traced`](Self::execute_traced) for the full story.
    pub async fn execute(
        &self,
        req: Request<Bytes>,
        rng: &mut dyn Rng,
        cancel: &CancellationToken,
    ) -> Result<Success, RetryError> {
        self.execute_recording_keys(req, rng, cancel, &mut Trace::new(""), &mut Vec::new()).await
    }

    /// [`execute`](Self::execute), also recording every attempt, answer,
    /// wait and the end in `trace` (render it with [`Trace::render`]).
    pub async fn execute_traced(
        &self,
        req: Request<Bytes>,
        rng: &mut dyn Rng,
        cancel: &CancellationToken,
        trace: &mut Trace,
    ) -> Result<Success, RetryError> {
        self.execute_recording_keys(req, rng, cancel, trace, &mut Vec::new()).await
    }

    /// [`execute_traced`](Self::execute_traced), also appending the full key
    /// each attempt carried to `keys` (traces only show shortened keys).
    /// Advanced: for a harness that checks keys, such as retrysim's own.
    pub async fn execute_recording_keys(
        &self,
        mut req: Request<Bytes>,
        rng: &mut dyn Rng,
        cancel: &CancellationToken,
        trace: &mut Trace,
        keys: &mut Vec<Option<String>>,
    ) -> Result<Success, RetryError> {
        let mut op = Execution::begin(self, &mut req, rng, cancel, trace).map_err(|e| *e)?;
        loop {
            op.attempts += 1;
            op.admit(trace).await?;
            let (sent, called) = op.send(&req, trace, keys).await;
            let now = self.clock.now();
            // Classify once: the gate, the trace and the decision all read it.
            let judged = self.judge(&sent);
            op.tell_gate(now, &sent, judged.class);
            let class = judged.class;
            let (advice, last, failure) = match sent {
                Sent::Cancelled => {
                    let attempts = if called { op.attempts } else { op.attempts - 1 };
                    return Err(op.give_up(trace, now, GiveUpReason::Cancelled, attempts));
                }
                Sent::Answer(res) => match op.answered(res, judged, now, trace) {
                    Answered::Success(done) => return Ok(*done),
                    Answered::Refused(advice, last) => (advice, Some(*last), None),
                },
                Sent::Failed(e) => {
                    trace.push(now, EventKind::NoAnswer { n: op.attempts, failure: e.failure, class });
                    (Advice::none(), None, Some(e))
                }
            };
            let (reason, at) = match op.decide(class, &advice, last.as_ref(), rng, now) {
                Decision::Done => unreachable!("success returns above"),
                Decision::GiveUp { reason } => (reason, now),
                Decision::Retry { wait, why } => {
                    trace.push(now, EventKind::Wait { ms: ms(wait), why });
                    if !op.sleep(wait, now).await {
                        op.previous_wait = Some(wait);
                        continue;
                    }
                    (GiveUpReason::Cancelled, self.clock.now())
                }
            };
            let gave_up = op.give_up(trace, at, reason, op.attempts);
            return Err(RetryError { last, last_failure: failure, ..gave_up });
        }
    }

    /// The class of an attempt's outcome, with an answer's error envelope and code.
    fn judge(&self, sent: &Sent) -> Judged {
        match sent {
            Sent::Answer(res) => {
                let envelope = if res.status().is_success() { None } else { ErrorEnvelope::parse(res.body()) };
                // Read once, at one receipt time: the class and the decision see the same advice.
                let advice = read_advice(res.headers(), envelope.as_ref(), self.clock.wall());
                let (class, code) =
                    classify_advised(&*self.classifier, res.status(), res.headers(), envelope.as_ref(), &advice);
                let code = code.map(str::to_owned);
                Judged { class, advice, code }
            }
            Sent::Failed(e) => Judged {
                class: self.classifier.classify(Outcome::Transport(e.failure)),
                advice: Advice::none(),
                code: None,
            },
            Sent::Cancelled => Judged { class: Class::Transient, advice: Advice::none(), code: None },
        }
    }
}

/// An attempt's outcome as judged once: its class, and for an answer the
/// advice and code it carried.
struct Judged {
    class: Class,
    advice: Advice,
    code: Option<String>,
}

/// What an answer came to: the operation's success, or a refusal to decide on.
enum Answered {
    Success(Box<Success>),
    Refused(Advice, Box<LastAnswer>),
}

/// One logical operation on its way through [`RetryClient::execute`]: what
/// every attempt reads (the deadline, the key, the kind of operation) and
/// what the attempts so far came to. Each step of an attempt is a method.
struct Execution<'a, C, T> {
    client: &'a RetryClient<C, T>,
    cancel: &'a CancellationToken,
    deadline: Deadline,
    key: Option<String>,
    operation: Operation,
    path: String,
    /// Attempts so far, the one under way included.
    attempts: u32,
    /// Answers classified `Unclear` so far.
    unclear: u32,
    /// Answers classified `Throttled` so far (a second one is an advice
    /// that was waited out and refused again).
    throttled: u32,
    /// Time slept between attempts so far.
    waited: Duration,
    previous_wait: Option<Duration>,
}

impl<'a, C: Clock, T: Transport> Execution<'a, C, T> {
    /// Starts the operation: its deadline, its key (the caller's, or one
    /// drawn now), and how safe it is to send again.
    fn begin(
        client: &'a RetryClient<C, T>,
        req: &mut Request<Bytes>,
        rng: &mut dyn Rng,
        cancel: &'a CancellationToken,
        trace: &mut Trace,
    ) -> Result<Execution<'a, C, T>, Box<RetryError>> {
        let p = &client.policy;
        let deadline = Deadline { start: client.clock.now(), total: p.deadline };
        let path = req.uri().path().to_owned();
        let mut op = Execution {
            client,
            cancel,
            deadline,
            key: None,
            operation: Operation::Safe,
            path,
            attempts: 0,
            unclear: 0,
            throttled: 0,
            waited: Duration::ZERO,
            previous_wait: None,
        };
        // A caller's key is sent as given, never re-encoded or replaced; one
        // that is not visible ASCII cannot be reported as text (nor is it an
        // sf-string, as the Idempotency-Key draft asks), so nothing is sent.
        match req.headers().get(IDEMPOTENCY_KEY).map(HeaderValue::to_str) {
            Some(Ok(k)) => op.key = Some(k.to_owned()),
            Some(Err(_)) => {
                let now = client.clock.now();
                return Err(Box::new(op.give_up(trace, now, GiveUpReason::InvalidIdempotencyKey, 0)));
            }
            None => {}
        }
        let opted_out = req.extensions().get::<NoIdempotencyKey>().is_some();
        if op.key.is_none() && p.idempotency_keys && wants_key(req.method()) && !opted_out {
            let generated = new_key(rng);
            let v = HeaderValue::from_str(&generated).expect("a generated key is hex digits");
            req.headers_mut().insert(IDEMPOTENCY_KEY, v);
            op.key = Some(generated);
        }
        op.operation = match req.extensions().get::<Replayable>() {
            Some(Replayable) if !matches!(Operation::of(req.method(), op.key.is_some()), Operation::Safe) => {
                Operation::Idempotent
            }
            _ => Operation::of(req.method(), op.key.is_some()),
        };
        Ok(op)
    }

    /// Waits at the fleet's gate, if there is one. The queue counts against
    /// the deadline: it waits only as long as an attempt could still start
    /// in time.
    async fn admit(&mut self, trace: &mut Trace) -> Result<(), RetryError> {
        let Some(gate) = &self.client.gate else { return Ok(()) };
        let (clock, p) = (&self.client.clock, &self.client.policy);
        let queued_at = clock.now();
        let patience = self.deadline.remaining(queued_at).saturating_sub(p.min_attempt_time);
        let admitted = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Some(false),
            _ = gate.admit() => Some(true),
            _ = clock.sleep(patience) => None,
        };
        let now = clock.now();
        let queued = now.saturating_sub(queued_at);
        if queued > Duration::ZERO && admitted == Some(true) {
            trace.push(now, EventKind::Admitted { queued_ms: ms(queued) });
        }
        let remaining = self.deadline.remaining(now);
        let reason = match admitted {
            Some(false) => GiveUpReason::Cancelled,
            None => GiveUpReason::DeadlineWouldPass { wait: queued, remaining },
            Some(true) if remaining < p.min_attempt_time => {
                gate.done(&Feedback { now, status: None, class: Class::Transient, headers: None });
                GiveUpReason::DeadlineWouldPass { wait: queued, remaining }
            }
            Some(true) => return Ok(()),
        };
        Err(self.give_up(trace, now, reason, self.attempts - 1))
    }

    /// Sends one attempt, bounded by `min(attempt_timeout, time left)`. The
    /// attempt counts, and is recorded, only once the transport is called: a
    /// cancellation seen first (the branch order is biased) leaves the
    /// transport uncalled and the attempt unmade (the `bool`: called).
    async fn send(&self, req: &Request<Bytes>, trace: &mut Trace, keys: &mut Vec<Option<String>>) -> (Sent, bool) {
        let clock = &self.client.clock;
        let started = clock.now();
        let timeout = self.client.policy.attempt_timeout.min(self.deadline.remaining(started));
        let mut called = false;
        let send = async {
            called = true;
            keys.push(self.key.clone());
            trace.push(
                started,
                EventKind::Attempt {
                    n: self.attempts,
                    method: req.method().to_string(),
                    path: self.path.clone(),
                    key: self.key.as_deref().map(short_key),
                    timeout_ms: ms(timeout),
                },
            );
            self.client.transport.send(copy_request(req)).await
        };
        let sent = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Sent::Cancelled,
            r = send => match r {
                Ok(res) => Sent::Answer(res),
                Err(e) => Sent::Failed(e),
            },
            _ = clock.sleep(timeout) => Sent::Failed(TransportError {
                failure: crate::core::classify::TransportFailure::MaybeArrived,
                message: format!("attempt timed out after {}", secs(timeout)),
            }),
        };
        (sent, called)
    }

    /// Tells the gate, if there is one, how the attempt it admitted ended.
    fn tell_gate(&self, now: Duration, sent: &Sent, class: Class) {
        if let Some(gate) = &self.client.gate {
            let (status, headers) = match sent {
                Sent::Answer(res) => (Some(res.status().as_u16()), Some(res.headers())),
                Sent::Failed(_) | Sent::Cancelled => (None, None),
            };
            gate.done(&Feedback { now, status, class, headers });
        }
    }

    /// Records an answer; a success ends the operation, anything else keeps
    /// the answer whole and its advice for the decision.
    fn answered(&self, res: Response<Bytes>, judged: Judged, now: Duration, trace: &mut Trace) -> Answered {
        let Judged { class, advice, code } = judged;
        let advice = if class == Class::Success { Advice::none() } else { advice };
        let replayed = res.headers().get(&REPLAYED).is_some_and(|v| v == "true");
        let status = res.status().as_u16();
        let view = AdviceView::from(&advice);
        trace.push(
            now,
            EventKind::Answer { n: self.attempts, status, code: code.clone(), class, advice: view, replayed },
        );
        if class != Class::Success {
            let (parts, body) = res.into_parts();
            return Answered::Refused(
                advice,
                Box::new(LastAnswer { status: parts.status, code, headers: parts.headers, body }),
            );
        }
        if let Some(b) = &self.client.budget {
            b.deposit(now);
        }
        trace.push(now, EventKind::Done { status, attempts: self.attempts, waited_ms: ms(self.waited) });
        Answered::Success(Box::new(Success {
            response: res,
            attempts: self.attempts,
            waited: self.waited,
            elapsed: self.deadline.elapsed(now),
            replayed,
            idempotency_key: self.key.clone(),
        }))
    }

    /// The core's decision on an attempt that did not succeed.
    fn decide(
        &mut self,
        class: Class,
        advice: &Advice,
        last: Option<&LastAnswer>,
        rng: &mut dyn Rng,
        now: Duration,
    ) -> Decision {
        match class {
            Class::Unclear => self.unclear += 1,
            Class::Throttled => self.throttled += 1,
            _ => {}
        }
        let attempted = Attempted {
            operation: self.operation,
            class,
            status: last.map(|l| l.status.as_u16()),
            code: last.and_then(|l| l.code.as_deref()),
            advice,
            attempts: self.attempts,
            unclear: self.unclear,
            throttled: self.throttled,
            elapsed: self.deadline.elapsed(now),
            previous_wait: self.previous_wait,
            cancelled: self.cancel.is_cancelled(),
        };
        let draws = Draws { backoff: rng.draw(), spread: rng.draw() };
        decide(&self.client.policy, &attempted, draws, self.client.budget.as_deref(), now)
    }

    /// Sleeps `wait` from `now` unless cancelled; counts the time slept.
    /// Whether it was cancelled.
    async fn sleep(&mut self, wait: Duration, now: Duration) -> bool {
        let clock = &self.client.clock;
        let cancelled = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => true,
            _ = clock.sleep(wait) => false,
        };
        self.waited += clock.now().saturating_sub(now);
        cancelled
    }

    /// Ends the operation with `reason` after `attempts` attempts, at `at`:
    /// the trace's last event, and the error (its last answer or failure,
    /// if any, is the caller's to add).
    fn give_up(&self, trace: &mut Trace, at: Duration, reason: GiveUpReason, attempts: u32) -> RetryError {
        trace.push(at, EventKind::GaveUp { reason: reason.clone(), attempts, waited_ms: ms(self.waited) });
        RetryError {
            reason,
            attempts,
            waited: self.waited,
            elapsed: self.deadline.elapsed(at),
            last: None,
            last_failure: None,
            idempotency_key: self.key.clone(),
        }
    }
}
