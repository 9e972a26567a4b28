//! The simulated network as a connector, so a client stack that is not
//! retrysim's own (a hyper-util client, and any `tower` stack built on one)
//! can run inside the simulation unchanged.
//!
//! [`SimConnector`] is a `tower_service::Service<http::Uri>` that opens a
//! `turmoil::net::TcpStream` to the URI's host and port (80 unless given).
//! Build the client as you do in production, pool included, and give the
//! pool the simulation's clock:
//!
//! ```
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use http_body_util::Full;
//! use bytes::Bytes;
//! use retrysim::testing::SimConnector;
//! use retrysim::testing::SimTimer;
//!
//! // Inside a turmoil host: your production pool, on simulated time.
//! let client: Client<SimConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
//!     .pool_timer(SimTimer)
//!     .build(SimConnector::new());
//! ```
//!
//! # What a pooled client meets
//!
//! The simulated API keeps connections alive as real servers do (its
//! `keep_alive` settings: an idle timeout, a cap of requests per connection,
//! closing after an error), and [`SimTransport`](crate::sim::world::net::SimTransport),
//! retrysim's own client in the simulation, pools as `HyperTransport` does.
//! So faults reach a pooled client as they do in production:
//!
//! - a partition on an established connection drops the request silently:
//!   the client hangs until its own timeout and cannot tell whether the
//!   request arrived (a fresh connection fails to connect at once);
//! - a connection the server closed while idle (a `close_race` fault with
//!   `fin_before_write`, the server's idle timeout, a cap of requests) is
//!   seen by the pool before the write, and hyper-util sends the request on
//!   a new connection by itself (`retry_canceled_requests`): safe, since
//!   nothing was sent;
//! - a close that races the write (`fin_after_write`, `rst`, a restarted
//!   server) fails the request after it was written: it may have run, as far
//!   as the client can know;
//! - the pool's idle expiry reads the real clock unless it has a timer. The
//!   harness notices a pooled connection reused on a host whose pool never
//!   read [`SimTimer`](crate::sim::world::timers::SimTimer)'s clock and stops
//!   the run with that message, rather than let the same seed run
//!   differently. hyper-util's `TokioTimer` is on tokio's (simulated) clock
//!   too, but the harness cannot see its sleeps; use `SimTimer`.
//!
//! `.pool_max_idle_per_host(0)` (one connection per request) tests a
//! configuration production does not run: keep your pool.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;

/// The API's host name in the simulated network.
pub(crate) const API_HOST: &str = "api";

/// A connector over the simulated network: `turmoil::net::TcpStream` to the
/// URI's host and port. Must be used inside a turmoil host. Clones share
/// one count of [`connections`](SimConnector::connections).
#[derive(Debug, Clone, Default)]
pub struct SimConnector {
    opened: Arc<AtomicU64>,
}

impl SimConnector {
    /// A connector with its connection count at zero.
    pub fn new() -> SimConnector {
        SimConnector::default()
    }

    /// Connections opened so far by this connector and its clones (a test
    /// can check that every request had its own).
    pub fn connections(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}

/// One simulated TCP connection, as hyper reads and writes it. It notices
/// when a pool reuses it (a request written after an answer was read) and
/// tells the harness, which checks that the pool keeps simulated time.
#[derive(Debug)]
pub struct SimConnection {
    io: TokioIo<turmoil::net::TcpStream>,
    /// Where it leads, for messages.
    target: String,
    /// Whether bytes were read since the last write: the next write is then
    /// a new request on a used connection.
    answered: bool,
}

impl Connection for SimConnection {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for SimConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) {
            self.answered = true;
        }
        read
    }
}

impl hyper::rt::Write for SimConnection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if std::mem::take(&mut self.answered)
            && let Some(timers) = crate::sim::world::timers::installed()
        {
            timers.connection_reused(&self.target);
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Where a URI points on the simulated network, or why it cannot.
fn target(uri: &Uri) -> io::Result<(String, u16)> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    if uri.scheme_str() == Some("https") {
        return Err(invalid(format!(
            "{uri}: the simulated network has no TLS; use an http:// URI (e.g. http://{}/)",
            API_HOST
        )));
    }
    let host = uri.host().ok_or_else(|| invalid(format!("{uri} has no host; use e.g. http://{}/v1/jobs", API_HOST)))?;
    Ok((host.trim_start_matches('[').trim_end_matches(']').to_owned(), uri.port_u16().unwrap_or(80)))
}

impl tower_service::Service<Uri> for SimConnector {
    type Response = SimConnection;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<SimConnection>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let opened = self.opened.clone();
        Box::pin(async move {
            let (host, port) = target(&uri)?;
            opened.fetch_add(1, Ordering::Relaxed);
            let stream = turmoil::net::TcpStream::connect((host.as_str(), port)).await?;
            Ok(SimConnection { io: TokioIo::new(stream), target: format!("{host}:{port}"), answered: false })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_without_a_host_or_with_https_is_a_clear_error() {
        let e = target(&Uri::from_static("/v1/jobs")).unwrap_err();
        assert!(e.to_string().contains("has no host"), "{e}");
        let e = target(&Uri::from_static("https://api/v1/jobs")).unwrap_err();
        assert!(e.to_string().contains("no TLS"), "{e}");
        assert_eq!(target(&Uri::from_static("http://api:8080/x")).unwrap(), ("api".into(), 8080));
        assert_eq!(target(&Uri::from_static("http://api/x")).unwrap(), ("api".into(), 80));
    }
}
