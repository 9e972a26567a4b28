//! A `reqwest_middleware` stack on the simulated network (feature
//! `sim-reqwest`): any middleware (`reqwest-retry`, a team's own,
//! retrysim's) runs in a [`Subject`] on virtual time from one seed.
//!
//! reqwest itself cannot ride turmoil: its connector is sealed
//! (`connector_layer` only wraps reqwest's own dialer) and a reqwest client
//! inside a simulated host panics with "IO is disabled". So the last
//! middleware of the stack is [`SimReqwest`]: it does not call `next`, it
//! sends the request over [`SimTransport`] and builds a `reqwest::Response`
//! from the answer (`reqwest::Response::from(http::Response<_>)`). Every
//! middleware before it runs unchanged.
//!
//! # What the stack sees of each fault
//!
//! reqwest has no public constructor for its own errors, so a transport
//! fault reaches the middleware above as faithfully as reqwest allows:
//!
//! | fault class | over a real socket | through [`SimReqwest`] |
//! |---|---|---|
//! | [`FaultClass::ConnectFailed`] | `reqwest::Error`, `is_connect()` | the same: a real `reqwest::Error` from a reqwest client whose connector refuses without dialling |
//! | [`FaultClass::AnswerLost`] | `reqwest::Error`, `is_request()` (hyper's incomplete message or a reset) | `reqwest_middleware::Error::Middleware` |
//! | [`FaultClass::AnswerLate`] | `reqwest::Error`, `is_timeout()` (with a timeout set) | `reqwest_middleware::Error::Middleware` |
//!
//! `reqwest-retry`'s default strategy retries the first two real errors
//! (transient) and treats every `Middleware` error as fatal, so on a lost
//! answer it would stop where the real client retries: a run of such a
//! scenario would pass for the wrong reason. [`ReqwestStack`] therefore
//! declares the last two classes its [blind spots](Subject::blind_spots),
//! and a scenario that injects either is reported *not applicable* to the
//! stack, with this reason, instead of "holds".
//!
//! ```no_run
//! use reqwest_middleware::ClientBuilder;
//! use retrysim::testing::{Harness, Promises, ReqwestStack, from_fn};
//!
//! let harness = Harness::named("blinkimg-1s").unwrap().with_client(from_fn("my-stack", |_host| {
//!     ReqwestStack::new(Promises::nothing(), |terminal, _rng| {
//!         // Your middleware first, the simulated network last.
//!         ClientBuilder::new(reqwest::Client::new()).with(terminal).build()
//!     })
//! }));
//! harness.assert_holds(1);
//! ```

use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Extensions;
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};
use tokio_util::sync::CancellationToken;

use crate::core::classify::TransportFailure;
use crate::env::{Rng, Transport, TransportError};
use crate::sim::run::subject::{BlindSpot, BoxFuture, Job, JobEnd, Promises, Subject};
use crate::sim::world::net::{FaultClass, SimTransport};

/// Why a lost answer is a blind spot of the reqwest path.
const ANSWER_LOST: &str = "reqwest has no public constructor for its own errors, so a request that may have run \
     without an answer reaches the middleware as reqwest_middleware::Error::Middleware, not as reqwest's request \
     error (reqwest-retry treats the first as fatal and the second as transient)";

/// Why a late answer is a blind spot of the reqwest path.
const ANSWER_LATE: &str = "a request's timeout on the simulated network reaches the middleware as \
     reqwest_middleware::Error::Middleware, not as reqwest's timeout error (is_timeout), which reqwest has no \
     public constructor for";

/// The fault classes a stack ending in [`SimReqwest`] cannot see as reqwest
/// would show them, and why.
pub fn blind_spots() -> Vec<BlindSpot> {
    vec![
        BlindSpot { class: FaultClass::AnswerLost, reason: ANSWER_LOST.into() },
        BlindSpot { class: FaultClass::AnswerLate, reason: ANSWER_LATE.into() },
    ]
}

/// The terminal middleware: put it last in a `ClientWithMiddleware` (it
/// never calls `next`). It sends each request over the simulated network,
/// one connection per request, and honours the request's own `timeout`
/// on virtual time. Must run inside the simulation (a [`Subject`]'s job).
///
/// What reqwest's own client would add after the middleware is not added:
/// its default headers (`Accept: */*`, a `default_headers` map) are not
/// sent, and a response's `url()` is reqwest's placeholder
/// (`http://no.url.provided.local`), since reqwest sets the real one only
/// from inside its client.
#[derive(Clone, Default)]
pub struct SimReqwest {
    refusing: Arc<OnceLock<Option<reqwest::Client>>>,
    /// The simulated network, pooled as reqwest pools (keep-alive).
    transport: SimTransport,
}

impl std::fmt::Debug for SimReqwest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimReqwest")
    }
}

impl SimReqwest {
    /// The terminal middleware.
    pub fn new() -> SimReqwest {
        SimReqwest::default()
    }

    /// A real `reqwest::Error` with `is_connect()` for `url`: reqwest's own
    /// client, whose connector layer refuses before anything is dialled.
    async fn connect_error(&self, url: &reqwest::Url) -> Option<reqwest::Error> {
        let client = self
            .refusing
            .get_or_init(|| reqwest::Client::builder().no_proxy().connector_layer(Refuse).build().ok())
            .as_ref()?;
        client.get(url.clone()).send().await.err()
    }
}

/// The request as the simulated network sends it (a streaming body cannot be).
fn to_http(req: &reqwest::Request) -> Result<http::Request<Bytes>, reqwest_middleware::Error> {
    let body = match req.body() {
        None => Bytes::new(),
        Some(b) => match b.as_bytes() {
            Some(bytes) => Bytes::copy_from_slice(bytes),
            None => {
                return Err(reqwest_middleware::Error::Middleware(anyhow::anyhow!(
                    "a streaming body cannot be sent over the simulated network: give the request its bytes"
                )));
            }
        },
    };
    let mut out = http::Request::new(body);
    *out.method_mut() = req.method().clone();
    *out.uri_mut() =
        req.url().as_str().parse().map_err(|e| reqwest_middleware::Error::Middleware(anyhow::Error::new(e)))?;
    *out.version_mut() = req.version();
    *out.headers_mut() = req.headers().clone();
    Ok(out)
}

#[async_trait::async_trait]
impl Middleware for SimReqwest {
    async fn handle(
        &self,
        req: reqwest::Request,
        _extensions: &mut Extensions,
        _next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let http_req = to_http(&req)?;
        let sent = match req.timeout() {
            Some(t) => match tokio::time::timeout(*t, self.transport.send(http_req)).await {
                Ok(result) => result,
                Err(_) => Err(TransportError {
                    failure: TransportFailure::MaybeArrived,
                    message: format!("no answer within the request's timeout of {t:?}"),
                }),
            },
            None => self.transport.send(http_req).await,
        };
        match sent {
            Ok(res) => Ok(reqwest::Response::from(res.map(reqwest::Body::from))),
            Err(e) if e.failure == TransportFailure::NotSent => match self.connect_error(req.url()).await {
                Some(real) => Err(reqwest_middleware::Error::Reqwest(real)),
                None => Err(reqwest_middleware::Error::Middleware(anyhow::Error::new(e))),
            },
            Err(e) => Err(reqwest_middleware::Error::Middleware(anyhow::Error::new(e))),
        }
    }
}

/// A connector layer that refuses every connection without calling the
/// dialler it wraps, so reqwest reports a connect error and opens nothing.
#[derive(Clone, Copy)]
struct Refuse;

impl<S> tower_layer::Layer<S> for Refuse {
    type Service = Refused<S>;

    fn layer(&self, inner: S) -> Refused<S> {
        Refused(inner)
    }
}

/// The refusing connector (the wrapped dialler is never called).
#[derive(Clone)]
struct Refused<S>(S);

impl<S, R> tower_service::Service<R> for Refused<S>
where
    S: tower_service::Service<R>,
{
    type Response = S::Response;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = std::future::Ready<Result<S::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: R) -> Self::Future {
        std::future::ready(Err("the simulated network refused the connection (nothing was sent)".into()))
    }
}

/// A `ClientWithMiddleware` as a [`Subject`]: the stack is built once per
/// fleet host, on its first job, by `build(terminal, rng)`, where `terminal`
/// is the [`SimReqwest`] to put last and `rng` the first job's seeded
/// generator (seed your middleware's jitter from it so runs replay). Each
/// job's request goes through `execute`; a 2xx answer is a success, any
/// other answer or error a give-up. It declares a reqwest-middleware
/// stack's blind spots (`Subject::blind_spots`).
pub struct ReqwestStack<F> {
    promises: Promises,
    build: F,
    client: OnceLock<ClientWithMiddleware>,
}

impl<F> ReqwestStack<F>
where
    F: Fn(SimReqwest, &mut dyn Rng) -> ClientWithMiddleware + Send + Sync,
{
    /// The stack `build` makes, holding the client to `promises`.
    pub fn new(promises: Promises, build: F) -> ReqwestStack<F> {
        ReqwestStack { promises, build, client: OnceLock::new() }
    }
}

/// Sends `req` through `client` unless `cancel` fires first.
async fn execute(client: &ClientWithMiddleware, req: reqwest::Request, cancel: &CancellationToken) -> JobEnd {
    let res = tokio::select! {
        biased;
        () = cancel.cancelled() => return JobEnd::gave_up("cancelled"),
        res = client.execute(req) => res,
    };
    match res {
        Ok(res) => {
            let status = res.status();
            match res.bytes().await {
                Ok(_) if status.is_success() => JobEnd::succeeded(status.as_u16()),
                Ok(_) => JobEnd::gave_up(format!("status {}", status.as_u16())),
                Err(_) => JobEnd::gave_up("answer cut off"),
            }
        }
        Err(reqwest_middleware::Error::Reqwest(e)) if e.is_connect() => JobEnd::gave_up("connect failed"),
        Err(reqwest_middleware::Error::Reqwest(_)) => JobEnd::gave_up("reqwest error"),
        Err(reqwest_middleware::Error::Middleware(_)) => JobEnd::gave_up("middleware error"),
    }
}

impl<F> Subject for ReqwestStack<F>
where
    F: Fn(SimReqwest, &mut dyn Rng) -> ClientWithMiddleware + Send + Sync,
{
    fn promises(&self) -> Promises {
        self.promises.clone()
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let client = self.client.get_or_init(|| (self.build)(SimReqwest::new(), job.rng));
            let req = match reqwest::Request::try_from(job.request_copy()) {
                Ok(req) => req,
                Err(_) => return JobEnd::gave_up("the job's request is not a valid reqwest request"),
            };
            execute(client, req, job.cancel).await
        })
    }

    fn blind_spots(&self) -> Vec<BlindSpot> {
        blind_spots()
    }
}
