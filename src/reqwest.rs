//! retrysim's decisions for a reqwest client (feature
//! `reqwest`), in one of two ways:
//!
//! - **A transport**: `impl Transport for reqwest::Client`, so a
//!   [`RetryClient`](crate::RetryClient) sends through your client, with its TLS, proxies,
//!   timeouts and pool:
//!   `RetryClient::new(TokioClock::real(), reqwest::Client::new(), Policy::background())`.
//! - **A middleware** (feature `reqwest-middleware`): [`RetryMiddleware`], a
//!   [`reqwest_middleware::Middleware`] that sits where `reqwest-retry`'s
//!   `RetryTransientMiddleware` sits and runs the same loop as
//!   [`RetryClient`](crate::RetryClient): the same classification, decisions, `Idempotency-Key`
//!   (one per logical operation, reused on every attempt), deadline, budget
//!   and gate. What it took is in the answer's extensions ([`Retried`]), or
//!   in the error ([`RetryError`](crate::RetryError), reachable by `downcast_ref`).
//!
//! # How a reqwest error is read
//!
//! | reqwest says | retrysim reads | so |
//! |---|---|---|
//! | `is_builder()`: a URL reqwest cannot send (unsupported scheme, no host, not a URL) | [`TransportFailure::Unsendable`] | terminal at the first attempt |
//! | `is_connect()`: refused, DNS, connect timeout, TLS handshake | [`TransportFailure::NotSent`] | retried, even an unkeyed POST |
//! | anything else: a timeout or reset after sending, a cut-off body, a redirect error | [`TransportFailure::MaybeArrived`] | retried only when replayable |
//!
//! A certificate reqwest does not trust is a connect error to reqwest, with
//! nothing in its error that says "certificate" reliably across its TLS
//! back-ends: it is read as not sent and retried until the policy gives up
//! (the transport's message carries reqwest's words). [`HyperTransport`](crate::env::HyperTransport)
//! with the `https` feature tells it apart and stops at once.

use bytes::Bytes;
use http::{Request, Response};

use crate::core::classify::TransportFailure;
use crate::env::{Transport, TransportError};

#[cfg(feature = "reqwest-middleware")]
mod middleware;
#[cfg(feature = "reqwest-middleware")]
pub use middleware::{Retried, RetryMiddleware};

/// How retrysim reads a reqwest error (the table in the module's docs).
pub fn failure_of(e: &::reqwest::Error) -> TransportFailure {
    if e.is_builder() {
        TransportFailure::Unsendable
    } else if e.is_connect() {
        TransportFailure::NotSent
    } else {
        TransportFailure::MaybeArrived
    }
}

/// A reqwest error as a [`TransportError`]: its class and its words, the
/// causes included.
pub fn transport_error(e: &::reqwest::Error) -> TransportError {
    let failure = failure_of(e);
    let mut message = match failure {
        TransportFailure::Unsendable => format!("reqwest cannot send this request, and no retry can change that: {e}"),
        TransportFailure::NotSent => format!("connect failed: {e}"),
        TransportFailure::MaybeArrived => format!("failed after sending: {e}"),
    };
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cause = c.source();
    }
    TransportError { failure, message }
}

/// A reqwest answer read whole: status, version, headers, extensions and the
/// URL it came from (kept as reqwest's `ResponseUrl`, so
/// `reqwest::Response::from` gives it back). A body cut off is
/// [`TransportFailure::MaybeArrived`].
pub(crate) async fn read_whole(mut res: ::reqwest::Response) -> Result<Response<Bytes>, TransportError> {
    use ::reqwest::ResponseBuilderExt;
    let mut builder = Response::builder().status(res.status()).version(res.version()).url(res.url().clone());
    if let Some(h) = builder.headers_mut() {
        *h = std::mem::take(res.headers_mut());
    }
    if let Some(x) = builder.extensions_mut() {
        x.extend(std::mem::take(res.extensions_mut()));
    }
    let body = res.bytes().await.map_err(|e| {
        let mut t = transport_error(&e);
        t.failure = TransportFailure::MaybeArrived;
        t.message = format!("answer cut off: {}", t.message);
        t
    })?;
    Ok(builder.body(body).expect("the parts of a response reqwest built"))
}

/// Your reqwest client as the driver's transport: each attempt is one
/// `execute`, with the client's TLS, proxies, default headers, timeouts and
/// pool. Errors are read as the module's table says.
impl Transport for ::reqwest::Client {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        let req = ::reqwest::Request::try_from(req).map_err(|e| transport_error(&e))?;
        let res = self.execute(req).await.map_err(|e| transport_error(&e))?;
        read_whole(res).await
    }
}
