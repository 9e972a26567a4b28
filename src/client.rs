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
use crate::core::classify::{Class, Classifier, DefaultTable, Operation, Outcome, classify_answer};
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
/// it, or queue the work under the same key (seed 000).
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
/// do not say this (seed 001); the driver then treats the request as
/// idempotent. A wrong vouch double-charges: it is how the harness models
/// seed 002's naive client that "retried network errors like any other".
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
    /// each attempt carried to `keys` (traces only show shortened keys). For
    /// checkers.
    pub async fn execute_recording_keys(
        &self,
        mut req: Request<Bytes>,
        rng: &mut dyn Rng,
        cancel: &CancellationToken,
        trace: &mut Trace,
        keys: &mut Vec<Option<String>>,
    ) -> Result<Success, RetryError> {
        let p = &self.policy;
        let deadline = Deadline { start: self.clock.now(), total: p.deadline };
        // A caller's key is sent as given, never re-encoded or replaced; one
        // that is not visible ASCII cannot be reported as text (nor is it an
        // sf-string, as the Idempotency-Key draft asks), so nothing is sent.
        let mut key = match req.headers().get(IDEMPOTENCY_KEY).map(HeaderValue::to_str) {
            Some(Ok(k)) => Some(k.to_owned()),
            Some(Err(_)) => {
                let (reason, now) = (GiveUpReason::InvalidIdempotencyKey, self.clock.now());
                trace.push(now, EventKind::GaveUp { reason: reason.clone(), attempts: 0, waited_ms: 0 });
                return Err(self.error(reason, 0, Duration::ZERO, deadline.elapsed(now), None, None, None));
            }
            None => None,
        };
        let opted_out = req.extensions().get::<NoIdempotencyKey>().is_some();
        if key.is_none() && p.idempotency_keys && wants_key(req.method()) && !opted_out {
            let generated = new_key(rng);
            let v = HeaderValue::from_str(&generated).expect("a generated key is hex digits");
            req.headers_mut().insert(IDEMPOTENCY_KEY, v);
            key = Some(generated);
        }
        let operation = match req.extensions().get::<Replayable>() {
            Some(Replayable) if !matches!(Operation::of(req.method(), key.is_some()), Operation::Safe) => {
                Operation::Idempotent
            }
            _ => Operation::of(req.method(), key.is_some()),
        };
        let path = req.uri().path().to_owned();
        let (mut attempts, mut unclear, mut waited, mut previous_wait) = (0u32, 0u32, Duration::ZERO, None);
        let mut throttled = 0u32;
        loop {
            attempts += 1;
            if let Some(gate) = &self.gate {
                // The queue counts against the deadline: wait in it only as
                // long as an attempt could still start in time.
                let queued_at = self.clock.now();
                let patience = deadline.remaining(queued_at).saturating_sub(p.min_attempt_time);
                let admitted = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => Some(false),
                    _ = gate.admit() => Some(true),
                    _ = self.clock.sleep(patience) => None,
                };
                let now = self.clock.now();
                let queued = now.saturating_sub(queued_at);
                if queued > Duration::ZERO && admitted == Some(true) {
                    trace.push(now, EventKind::Admitted { queued_ms: ms(queued) });
                }
                let remaining = deadline.remaining(now);
                let reason = match admitted {
                    Some(false) => Some(GiveUpReason::Cancelled),
                    None => Some(GiveUpReason::DeadlineWouldPass { wait: queued, remaining }),
                    Some(true) if remaining < p.min_attempt_time => {
                        gate.done(&Feedback { now, status: None, class: Class::Transient, headers: None });
                        Some(GiveUpReason::DeadlineWouldPass { wait: queued, remaining })
                    }
                    Some(true) => None,
                };
                if let Some(reason) = reason {
                    let attempts = attempts - 1;
                    trace.push(now, EventKind::GaveUp { reason: reason.clone(), attempts, waited_ms: ms(waited) });
                    return Err(self.error(reason, attempts, waited, deadline.elapsed(now), None, None, key));
                }
            }
            let started = self.clock.now();
            let timeout = p.attempt_timeout.min(deadline.remaining(started));
            // The attempt counts, and is recorded, only once the transport is
            // called: a cancellation seen first (the branch order is biased)
            // leaves the transport uncalled and the attempt unmade.
            let mut called = false;
            let send = async {
                called = true;
                keys.push(key.clone());
                trace.push(
                    started,
                    EventKind::Attempt {
                        n: attempts,
                        method: req.method().to_string(),
                        path: path.clone(),
                        key: key.as_deref().map(short_key),
                        timeout_ms: ms(timeout),
                    },
                );
                self.transport.send(copy_request(&req)).await
            };
            let sent = tokio::select! {
                biased;
                _ = cancel.cancelled() => Sent::Cancelled,
                r = send => match r {
                    Ok(res) => Sent::Answer(res),
                    Err(e) => Sent::Failed(e),
                },
                _ = self.clock.sleep(timeout) => Sent::Failed(TransportError {
                    failure: crate::core::classify::TransportFailure::MaybeArrived,
                    message: format!("attempt timed out after {}", secs(timeout)),
                }),
            };
            let now = self.clock.now();
            // Classify once: the gate, the trace and the decision all read it.
            let (class, envelope, code) = match &sent {
                Sent::Answer(res) => {
                    let envelope = if res.status().is_success() { None } else { ErrorEnvelope::parse(res.body()) };
                    let (class, code) = classify_answer(
                        &*self.classifier,
                        res.status(),
                        res.headers(),
                        envelope.as_ref(),
                        self.clock.wall(),
                    );
                    let code = code.map(str::to_owned);
                    (class, envelope, code)
                }
                Sent::Failed(e) => (self.classifier.classify(Outcome::Transport(e.failure)), None, None),
                Sent::Cancelled => (Class::Transient, None, None),
            };
            if let Some(gate) = &self.gate {
                let (status, headers) = match &sent {
                    Sent::Answer(res) => (Some(res.status().as_u16()), Some(res.headers())),
                    Sent::Failed(_) | Sent::Cancelled => (None, None),
                };
                gate.done(&Feedback { now, status, class, headers });
            }
            let (advice, last, failure) = match sent {
                Sent::Cancelled => {
                    let reason = GiveUpReason::Cancelled;
                    let attempts = if called { attempts } else { attempts - 1 };
                    trace.push(now, EventKind::GaveUp { reason: reason.clone(), attempts, waited_ms: ms(waited) });
                    return Err(self.error(reason, attempts, waited, deadline.elapsed(now), None, None, key));
                }
                Sent::Answer(res) => {
                    let advice = if class == Class::Success {
                        Advice::none()
                    } else {
                        read_advice(res.headers(), envelope.as_ref(), self.clock.wall())
                    };
                    let replayed = res.headers().get(&REPLAYED).is_some_and(|v| v == "true");
                    trace.push(
                        now,
                        EventKind::Answer {
                            n: attempts,
                            status: res.status().as_u16(),
                            code: code.clone(),
                            class,
                            advice: AdviceView::from(&advice),
                            replayed,
                        },
                    );
                    if class == Class::Success {
                        if let Some(b) = &self.budget {
                            b.deposit(now);
                        }
                        trace.push(
                            now,
                            EventKind::Done { status: res.status().as_u16(), attempts, waited_ms: ms(waited) },
                        );
                        let elapsed = deadline.elapsed(now);
                        return Ok(Success {
                            response: res,
                            attempts,
                            waited,
                            elapsed,
                            replayed,
                            idempotency_key: key,
                        });
                    }
                    let (parts, body) = res.into_parts();
                    (advice, Some(LastAnswer { status: parts.status, code, headers: parts.headers, body }), None)
                }
                Sent::Failed(e) => {
                    trace.push(now, EventKind::NoAnswer { n: attempts, failure: e.failure, class });
                    (Advice::none(), None, Some(e))
                }
            };
            match class {
                Class::Unclear => unclear += 1,
                Class::Throttled => throttled += 1,
                _ => {}
            }
            let attempted = Attempted {
                operation,
                class,
                status: last.as_ref().map(|l| l.status.as_u16()),
                code: last.as_ref().and_then(|l| l.code.as_deref()),
                advice: &advice,
                attempts,
                unclear,
                throttled,
                elapsed: deadline.elapsed(now),
                previous_wait,
                cancelled: cancel.is_cancelled(),
            };
            let draws = Draws { backoff: rng.draw(), spread: rng.draw() };
            let budget = self.budget.as_deref();
            match decide(p, &attempted, draws, budget, now) {
                Decision::Done => unreachable!("success returns above"),
                Decision::GiveUp { reason } => {
                    trace.push(now, EventKind::GaveUp { reason: reason.clone(), attempts, waited_ms: ms(waited) });
                    return Err(self.error(reason, attempts, waited, deadline.elapsed(now), last, failure, key));
                }
                Decision::Retry { wait, why } => {
                    trace.push(now, EventKind::Wait { ms: ms(wait), why });
                    let cancelled = tokio::select! {
                        biased;
                        _ = cancel.cancelled() => true,
                        _ = self.clock.sleep(wait) => false,
                    };
                    let slept = self.clock.now().saturating_sub(now);
                    waited += slept;
                    if cancelled {
                        let at = self.clock.now();
                        let reason = GiveUpReason::Cancelled;
                        trace.push(at, EventKind::GaveUp { reason: reason.clone(), attempts, waited_ms: ms(waited) });
                        return Err(self.error(reason, attempts, waited, deadline.elapsed(at), last, failure, key));
                    }
                    previous_wait = Some(wait);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn error(
        &self,
        reason: GiveUpReason,
        attempts: u32,
        waited: Duration,
        elapsed: Duration,
        last: Option<LastAnswer>,
        last_failure: Option<TransportError>,
        idempotency_key: Option<String>,
    ) -> RetryError {
        RetryError { reason, attempts, waited, elapsed, last, last_failure, idempotency_key }
    }
}
