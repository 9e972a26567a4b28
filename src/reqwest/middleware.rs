//! [`RetryMiddleware`]: retrysim's retry as a `reqwest_middleware::Middleware`
//! (feature `reqwest-middleware`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Extensions, Request, Response};
use reqwest_middleware::{Error, Middleware, Next};
use tokio_util::sync::CancellationToken;

use super::{read_whole, transport_error};
use crate::client::{NoIdempotencyKey, Replayable, RetryClient, RetryError, Success};
use crate::core::budget::RetryBudget;
use crate::core::classify::{Classifier, TransportFailure};
use crate::core::policy::Policy;
use crate::env::{Clock, Rng, TokioClock, Transport, TransportError, os_rng};
use crate::gate::Gate;

/// What an operation took, in the extensions of the answer
/// [`RetryMiddleware`] returns on success
/// (`response.extensions().get::<Retried>()`): the facts of a
/// [`Success`], without the answer itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retried {
    /// Attempts made, the successful one included.
    pub attempts: u32,
    /// Total time slept between attempts.
    pub waited: Duration,
    /// Time from the first attempt to the answer.
    pub elapsed: Duration,
    /// The server answered `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// The key every attempt carried.
    pub idempotency_key: Option<String>,
}

/// retrysim's retry as a [`reqwest_middleware::Middleware`], a drop-in for
/// `reqwest-retry`'s `RetryTransientMiddleware`:
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use retrysim::Policy;
/// use retrysim::reqwest::{Retried, RetryMiddleware};
///
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(Policy::background()))
///     .build();
/// let res = client.post("https://api.example.com/v1/jobs").body("{}").send().await?;
/// if let Some(r) = res.extensions().get::<Retried>() {
///     println!("{} after {} attempts", res.status(), r.attempts);
/// }
/// # Ok(()) }
/// ```
///
/// Each request runs the loop of [`RetryClient::execute`] with this
/// middleware's policy, classifier, budget and gate: a POST or PATCH gets one
/// `Idempotency-Key`, reused on every attempt; every attempt goes down the
/// rest of the middleware chain. What it came to:
///
/// - **Success**: the answer, with [`Retried`] in its extensions.
/// - **Gave up on an answer** (a 429 the deadline cannot wait out, a 402):
///   that answer, as `reqwest-retry` returns it, with the whole
///   [`RetryError`] in its extensions (`res.extensions().get::<RetryError>()`).
/// - **Gave up without one** (connection failures, an unsendable URL,
///   cancelled, an invalid key): `Err(reqwest_middleware::Error::Middleware)`
///   whose `anyhow::Error` downcasts to [`RetryError`] and, when the last
///   attempt failed in reqwest, also to that `reqwest_middleware::Error`.
///
/// A request whose body is a stream cannot be sent twice: it goes down the
/// chain once, not retried. A `CancellationToken` in the request's
/// extensions (`RequestBuilder::with_extension`) cancels the operation, and
/// [`NoIdempotencyKey`] or [`Replayable`] there mean what they mean on a
/// [`RetryClient`] request. An error of a middleware further down (not
/// reqwest's) ends the operation, as `reqwest-retry` does: retrysim cannot
/// tell whether the request went out.
pub struct RetryMiddleware<C = TokioClock> {
    template: RetryClient<C, Unused>,
    /// The draws for keys and jitter: the OS's entropy, or why there is none.
    rng: Result<Arc<Mutex<Box<dyn Rng>>>, String>,
}

impl RetryMiddleware<TokioClock> {
    /// A middleware with this policy, the default classification table, no
    /// budget and no gate, on the real clock, drawing keys and jitter from
    /// the OS ([`os_rng`]).
    pub fn new(policy: Policy) -> Self {
        RetryMiddleware::with_clock(TokioClock::real(), policy)
    }
}

impl<C: Clock + Clone> RetryMiddleware<C> {
    /// A middleware on your clock (a simulated one, or paused tokio time).
    pub fn with_clock(clock: C, policy: Policy) -> Self {
        let rng = os_rng()
            .map(|r| Arc::new(Mutex::new(Box::new(r) as Box<dyn Rng>)))
            .map_err(|e| format!("the OS offers no entropy for keys and jitter: {e}"));
        RetryMiddleware { template: RetryClient::new(clock, Unused, policy), rng }
    }

    /// Replaces the classification table.
    pub fn with_classifier(mut self, classifier: Arc<dyn Classifier>) -> Self {
        self.template = self.template.with_classifier(classifier);
        self
    }

    /// Shares a retry budget with other clients and middlewares.
    pub fn with_budget(mut self, budget: Arc<dyn RetryBudget>) -> Self {
        self.template = self.template.with_budget(budget);
        self
    }

    /// Sends every attempt through a gate shared by a fleet.
    pub fn with_gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.template = self.template.with_gate(gate);
        self
    }

    /// Draws keys and jitter from `rng` instead of the OS. For tests and the
    /// simulator (with [`seeded_rng`](crate::env::seeded_rng), two runs send
    /// the same keys, so never in production).
    pub fn with_rng(mut self, rng: impl Rng + 'static) -> Self {
        self.rng = Ok(Arc::new(Mutex::new(Box::new(rng))));
        self
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        self.template.policy()
    }
}

/// The transport of the template client: never called (each request gets
/// a client over the rest of its chain).
struct Unused;

impl Transport for Unused {
    async fn send(&self, _: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        Err(TransportError { failure: TransportFailure::Unsendable, message: "no transport".into() })
    }
}

/// One draw at a time from the middleware's generator.
struct SharedRng(Arc<Mutex<Box<dyn Rng>>>);

impl Rng for SharedRng {
    fn draw(&mut self) -> u64 {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).draw()
    }
}

/// The rest of the middleware chain as the driver's transport: each attempt
/// is a copy of the caller's request (its body, timeout and extensions)
/// with the driver's headers (the key), down the chain.
struct NextTransport<'a> {
    request: Mutex<reqwest::Request>,
    next: Next<'a>,
    extensions: tokio::sync::Mutex<&'a mut Extensions>,
    /// The last attempt's error as the chain returned it.
    last_error: Mutex<Option<Error>>,
}

impl Transport for NextTransport<'_> {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        let attempt = {
            let original = self.request.lock().unwrap_or_else(PoisonError::into_inner);
            let mut attempt = original.try_clone().expect("a request with a byte body clones (checked before)");
            *attempt.headers_mut() = req.headers().clone();
            attempt
        };
        *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let result = {
            let mut extensions = self.extensions.lock().await;
            self.next.clone().run(attempt, &mut extensions).await
        };
        let e = match result {
            Ok(res) => return read_whole(res).await,
            Err(e) => e,
        };
        let failure = match &e {
            Error::Reqwest(re) => transport_error(re),
            Error::Middleware(m) => TransportError {
                failure: TransportFailure::Unsendable,
                message: format!(
                    "a middleware below retrysim's failed: {m:#}; retrysim cannot tell whether the request \
                     went out, and does not retry it"
                ),
            },
        };
        *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
        Err(failure)
    }
}

/// The driver's copy of a reqwest request: method, URI, version, headers,
/// body, and the driver's own extensions from the middleware's.
fn driver_request(req: &reqwest::Request, extensions: &Extensions) -> Result<Request<Bytes>, Error> {
    let uri: http::Uri = req.url().as_str().parse().map_err(Error::middleware)?;
    let body = req.body().and_then(reqwest::Body::as_bytes).map(Bytes::copy_from_slice).unwrap_or_default();
    let mut r = Request::new(body);
    *r.method_mut() = req.method().clone();
    *r.uri_mut() = uri;
    *r.version_mut() = req.version();
    *r.headers_mut() = req.headers().clone();
    if let Some(x) = extensions.get::<NoIdempotencyKey>() {
        r.extensions_mut().insert(*x);
    }
    if let Some(x) = extensions.get::<Replayable>() {
        r.extensions_mut().insert(*x);
    }
    Ok(r)
}

fn success(done: Success) -> reqwest::Response {
    let Success { mut response, attempts, waited, elapsed, replayed, idempotency_key } = done;
    response.extensions_mut().insert(Retried { attempts, waited, elapsed, replayed, idempotency_key });
    reqwest::Response::from(response)
}

/// A give-up: its last answer with the error in its extensions, else an
/// error that downcasts to [`RetryError`] (and to the chain's last error).
fn gave_up(e: RetryError, url: reqwest::Url, last_error: Option<Error>) -> Result<reqwest::Response, Error> {
    use reqwest::ResponseBuilderExt;
    if let Some(last) = e.last.clone() {
        let mut res = Response::builder().status(last.status).url(url).body(last.body).expect("a status and a URL");
        *res.headers_mut() = last.headers;
        res.extensions_mut().insert(e);
        return Ok(reqwest::Response::from(res));
    }
    Err(match last_error {
        Some(cause) if e.last_failure.is_some() => Error::Middleware(anyhow::Error::new(cause).context(e)),
        _ => Error::middleware(e),
    })
}

#[async_trait::async_trait]
impl<C: Clock + Clone + 'static> Middleware for RetryMiddleware<C> {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        if req.try_clone().is_none() {
            // A streaming body can be sent once only.
            return next.run(req, extensions).await;
        }
        let rng = self.rng.clone().map_err(|why| Error::Middleware(anyhow::anyhow!(why)))?;
        let driver_req = driver_request(&req, extensions)?;
        let cancel = extensions.get::<CancellationToken>().cloned().unwrap_or_default();
        let url = req.url().clone();
        let transport = NextTransport {
            request: Mutex::new(req),
            next,
            extensions: tokio::sync::Mutex::new(extensions),
            last_error: Mutex::new(None),
        };
        let outcome = self.template.with_transport(&transport).execute(driver_req, &mut SharedRng(rng), &cancel).await;
        let last_error = transport.last_error.into_inner().unwrap_or_else(PoisonError::into_inner);
        match outcome {
            Ok(done) => Ok(success(done)),
            Err(e) => gave_up(e, url, last_error),
        }
    }
}
