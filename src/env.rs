//! The three things the driver needs from the world, injected so that a test
//! or the simulator can own them: a [`Clock`], an [`Rng`] and a [`Transport`].

use std::future::Future;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rand_core::SeedableRng;
use rand_pcg::Pcg64;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::core::classify::TransportFailure;

/// Time, as the driver sees it.
pub trait Clock: Send + Sync {
    /// Monotonic time since the clock's origin: budgets and deadlines use this.
    fn now(&self) -> Duration;
    /// Wall-clock time: used only to interpret an HTTP-date without a `Date` header.
    fn wall(&self) -> SystemTime;
    /// Sleeps for `d`. The driver races it against cancellation.
    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send;
}

/// A clock on tokio's timer: real time in production, paused time in
/// `#[tokio::test(start_paused = true)]`, virtual time under turmoil.
#[derive(Debug, Clone)]
pub struct TokioClock {
    origin: tokio::time::Instant,
    /// `None`: read the system's wall clock; `Some(epoch)`: `epoch + now()`.
    epoch: Option<SystemTime>,
}

impl TokioClock {
    /// The production clock: tokio's monotonic timer and the system wall clock.
    pub fn real() -> TokioClock {
        TokioClock { origin: tokio::time::Instant::now(), epoch: None }
    }

    /// A clock whose wall time is `epoch + now()`: for paused or simulated
    /// time, where the wall must move with virtual time. Must be created
    /// inside a tokio runtime.
    pub fn from_epoch(epoch: SystemTime) -> TokioClock {
        TokioClock { origin: tokio::time::Instant::now(), epoch: Some(epoch) }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.origin)
    }

    fn wall(&self) -> SystemTime {
        match self.epoch {
            Some(epoch) => epoch + self.now(),
            None => SystemTime::now(),
        }
    }

    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(d)
    }
}

/// Random draws for jitter and key generation.
pub trait Rng: Send {
    /// A uniformly random 64-bit value.
    fn draw(&mut self) -> u64;
}

impl<R: rand_core::Rng + Send> Rng for R {
    fn draw(&mut self) -> u64 {
        self.next_u64()
    }
}

/// The generator the harness uses: PCG-64, seeded. The same seed gives the
/// same draws on every platform.
pub fn seeded_rng(seed: u64) -> Pcg64 {
    Pcg64::seed_from_u64(seed)
}

/// Why a request got no answer, and whether it may have reached the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportError {
    /// Whether the server may have run the request.
    pub failure: TransportFailure,
    /// What went wrong, for people.
    pub message: String,
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let when = match self.failure {
            TransportFailure::NotSent => "not sent",
            TransportFailure::MaybeArrived => "may have arrived",
        };
        write!(f, "{} ({when})", self.message)
    }
}

impl std::error::Error for TransportError {}

/// Sends one request and returns its whole answer.
pub trait Transport: Send + Sync {
    /// One attempt. The error says whether the request may have arrived.
    fn send(&self, req: Request<Bytes>) -> impl Future<Output = Result<Response<Bytes>, TransportError>> + Send;
}

impl<T: Transport> Transport for &T {
    fn send(&self, req: Request<Bytes>) -> impl Future<Output = Result<Response<Bytes>, TransportError>> + Send {
        (**self).send(req)
    }
}

impl<T: Transport> Transport for std::sync::Arc<T> {
    fn send(&self, req: Request<Bytes>) -> impl Future<Output = Result<Response<Bytes>, TransportError>> + Send {
        (**self).send(req)
    }
}

fn not_sent(message: String) -> TransportError {
    TransportError { failure: TransportFailure::NotSent, message }
}

fn maybe_arrived(message: String) -> TransportError {
    TransportError { failure: TransportFailure::MaybeArrived, message }
}

/// One HTTP/1.1 exchange with hyper over an established connection. A
/// failure before the request is handed to the connection is `NotSent`;
/// any failure after is `MaybeArrived`.
pub async fn exchange<IO>(io: IO, req: Request<Bytes>) -> Result<Response<Bytes>, TransportError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| not_sent(format!("HTTP/1.1 handshake failed: {e}")))?;
    tokio::spawn(async move {
        // The connection ends when the exchange is over or the peer goes away;
        // its error, if any, surfaces through `send_request` below.
        let _ = conn.await;
    });
    let (parts, body) = req.into_parts();
    let res = sender
        .send_request(Request::from_parts(parts, Full::new(body)))
        .await
        .map_err(|e| maybe_arrived(format!("connection failed after sending: {e}")))?;
    let (parts, body) = res.into_parts();
    let body = body.collect().await.map_err(|e| maybe_arrived(format!("answer cut off: {e}")))?.to_bytes();
    Ok(Response::from_parts(parts, body))
}

/// A plain-HTTP transport over tokio TCP, one connection per attempt (no
/// pooling, no TLS): enough for local services and examples. For HTTPS,
/// implement [`Transport`] over your own client.
#[derive(Debug, Clone, Default)]
pub struct HyperTransport;

impl Transport for HyperTransport {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        let authority =
            req.uri().authority().ok_or_else(|| not_sent(format!("the URI {} has no host", req.uri())))?.clone();
        let port = authority.port_u16().unwrap_or(80);
        let stream = tokio::net::TcpStream::connect((authority.host(), port))
            .await
            .map_err(|e| not_sent(format!("connect to {authority} failed: {e}")))?;
        exchange(stream, req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_rng_is_stable() {
        let mut a = seeded_rng(7);
        let mut b = seeded_rng(7);
        let xs: Vec<u64> = (0..4).map(|_| a.draw()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.draw()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, (0..4).map(|_| seeded_rng(8).draw()).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn epoch_clock_moves_with_paused_time() {
        let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let c = TokioClock::from_epoch(epoch);
        c.sleep(Duration::from_millis(1500)).await;
        assert_eq!(c.now(), Duration::from_millis(1500));
        assert_eq!(c.wall(), epoch + Duration::from_millis(1500));
    }

    #[tokio::test]
    async fn connect_refused_is_not_sent() {
        // Port 9 on loopback: nothing listens in the test environment.
        let req = Request::get("http://127.0.0.1:9/").body(Bytes::new()).unwrap();
        let err = HyperTransport.send(req).await.unwrap_err();
        assert_eq!(err.failure, TransportFailure::NotSent, "{err}");
    }
}
