//! The three things the driver needs from the world, injected so that a test
//! or the simulator can own them: a [`Clock`], an [`Rng`] and a [`Transport`].

use std::future::Future;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rand_core::SeedableRng;
use rand_pcg::Pcg64;

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
/// `#[tokio::test(start_paused = true)]`, virtual time under turmoil. (The
/// simulator hands its clients a clock of its own, on the same virtual time,
/// whose sleeps it can see.)
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
///
/// **For tests and the simulator only, never in production.** The driver
/// draws every `Idempotency-Key` from this generator, so two runs with the
/// same seed send the same keys: the second run's POSTs are deduplicated
/// against the first run's, and the server *replays the old answers* instead
/// of doing the new work (against a real server, 65 of 120 "successes" of
/// a second run were replays). A
/// production client uses [`os_rng`].
pub fn seeded_rng(seed: u64) -> Pcg64 {
    Pcg64::seed_from_u64(seed)
}

/// Draws straight from the operating system's entropy source (`getrandom`):
/// the generator for production. Keys drawn from it are unique across runs,
/// processes and machines, and an attacker cannot predict them from earlier
/// ones. Create it with [`os_rng`]; it holds no state, so one per task is fine.
#[derive(Debug, Clone, Copy)]
pub struct EntropyRng(());

/// The production [`Rng`]: keys and jitter from OS entropy.
///
/// Fails only where the OS offers no entropy source at all (some sandboxes,
/// very early boot); the error says so, and the caller should not fall back
/// to a fixed seed (see [`seeded_rng`] for why).
pub fn os_rng() -> Result<EntropyRng, getrandom::Error> {
    // One probe here, so that a platform without entropy fails at
    // construction with an error instead of inside a draw.
    getrandom::u64()?;
    Ok(EntropyRng(()))
}

impl Rng for EntropyRng {
    fn draw(&mut self) -> u64 {
        // `os_rng` already drew once, so the source exists; the OS does not
        // take it away mid-process.
        getrandom::u64().expect("the OS entropy source worked at os_rng() and failed now")
    }
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
            TransportFailure::Unsendable => "not sent, no retry can fix it",
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

fn unsendable(message: String) -> TransportError {
    TransportError { failure: TransportFailure::Unsendable, message }
}

/// How long an idle pooled connection is kept: below the keep-alive timeout
/// of common servers (Node.js: 5 s), so a reused connection is rarely one the
/// server is closing at that moment.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// HTTP/1.1 over tokio TCP with keep-alive, and over TLS for `https://`
/// (feature `https`, on by default: rustls with ring, see the module `tls`):
/// hyper-util's pooled client, which sends origin-form targets and a `Host`
/// header, in the tunnel too. Clones share one connection pool per scheme,
/// so build one per program (inside the tokio runtime that will use it) and
/// hand clones to every worker.
///
/// # What a failure means
/// - Connect refused, DNS failure, a TLS handshake cut off:
///   [`TransportFailure::NotSent`], nothing reached the server.
/// - A request no retry can send: a scheme other than `http`/`https`, a URI
///   without a host, `https://` without the `https` feature or without a
///   trusted root, a server certificate the client does not trust:
///   [`TransportFailure::Unsendable`], nothing reached the server, and the
///   default table ends the operation at the first attempt with the reason.
/// - Anything after a connection was handed the request (reset, the server
///   closing mid-answer, a cut-off body): [`TransportFailure::MaybeArrived`].
///   This errs on the safe side: the few cases where hyper knows the request
///   was not yet written on a *fresh* connection are also reported here, so
///   an unkeyed POST is never replayed on a guess.
///
/// # A pooled connection the server closed
/// A server may close an idle keep-alive connection at any time. If it closed
/// before the request went out (the pool sees the close at checkout, or hyper
/// hands the request back unwritten), hyper-util sends it on another
/// connection by itself (`retry_canceled_requests`, on by default): no byte
/// reached the server, so this is safe for any method and invisible to the
/// retry core. If the close races the request
/// after it was written, the attempt is `MaybeArrived`, and the core retries it
/// only if the operation is replayable (keyed, idempotent or safe). Idle
/// connections are dropped after [`POOL_IDLE_TIMEOUT`] to keep that race rare.
#[derive(Clone, Debug)]
pub struct HyperTransport {
    client: Client<HttpConnector, Full<Bytes>>,
    /// The `https://` client, or why there is none (said in the failure).
    #[cfg(feature = "https")]
    tls: Result<Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>, String>,
}

fn http_connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector
}

fn pooled<C: Connect + Clone>(connector: C) -> Client<C, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_timer(TokioTimer::new())
        .build(connector)
}

#[cfg(feature = "https")]
fn tls_client(mut config: rustls::ClientConfig) -> Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>> {
    // HTTP/1.1 only: no ALPN (hyper-rustls sets it from the enabled
    // versions, and refuses a configuration that already has some).
    config.alpn_protocols.clear();
    let mut http = http_connector();
    // The TLS connector hands it `https://` URIs.
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    pooled(https)
}

impl HyperTransport {
    /// A transport with its own connection pools (idle connections kept
    /// [`POOL_IDLE_TIMEOUT`], `TCP_NODELAY` on). With the `https` feature it
    /// also speaks `https://`, trusting the platform's roots
    /// (`tls::native_roots`, which honours `SSL_CERT_FILE`); when
    /// none can be loaded, an `https://` request fails as unsendable and
    /// says why.
    pub fn new() -> HyperTransport {
        HyperTransport {
            client: pooled(http_connector()),
            #[cfg(feature = "https")]
            tls: crate::tls::native_roots().map(tls_client).map_err(|e| e.to_string()),
        }
    }

    /// A transport whose `https://` requests use this rustls configuration
    /// (your own roots: [`crate::tls::config_trusting`]). Its ALPN list is
    /// replaced: HTTP/1.1 only.
    #[cfg(feature = "https")]
    pub fn with_tls_config(config: rustls::ClientConfig) -> HyperTransport {
        HyperTransport { client: pooled(http_connector()), tls: Ok(tls_client(config)) }
    }

    /// A transport that trusts Mozilla's roots, compiled in (feature
    /// `webpki-roots`), instead of the platform's.
    #[cfg(feature = "webpki-roots")]
    pub fn with_webpki_roots() -> HyperTransport {
        HyperTransport::with_tls_config(crate::tls::webpki_roots())
    }

    /// A transport over a plain HTTP client you configured (pool size,
    /// timeouts, a resolver). It must keep `set_host` on (the default). It
    /// sends `http://` only; an `https://` request fails as unsendable.
    pub fn from_client(client: Client<HttpConnector, Full<Bytes>>) -> HyperTransport {
        HyperTransport {
            client,
            #[cfg(feature = "https")]
            tls: Err("this transport was built with HyperTransport::from_client, a plain HTTP client: \
                      use HyperTransport::new or HyperTransport::with_tls_config for https://"
                .into()),
        }
    }
}

impl Default for HyperTransport {
    fn default() -> Self {
        HyperTransport::new()
    }
}

/// `e` and its causes, for people: hyper-util's own text is only the kind.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// One exchange on a pooled client, its failures classified as
/// [`HyperTransport`] documents.
pub(crate) async fn pooled_send<C>(
    client: &Client<C, Full<Bytes>>,
    req: Request<Bytes>,
) -> Result<Response<Bytes>, TransportError>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let (parts, body) = req.into_parts();
    let res = client.request(Request::from_parts(parts, Full::new(body))).await.map_err(|e| {
        #[cfg(feature = "https")]
        if let Some(tls) = crate::tls::unfixable(&e) {
            return unsendable(format!("TLS: {tls}"));
        }
        if e.is_connect() {
            not_sent(format!("connect failed: {}", chain(&e)))
        } else {
            maybe_arrived(format!("connection failed after sending: {}", chain(&e)))
        }
    })?;
    let (parts, body) = res.into_parts();
    let body = body.collect().await.map_err(|e| maybe_arrived(format!("answer cut off: {}", chain(&e))))?.to_bytes();
    Ok(Response::from_parts(parts, body))
}

impl Transport for HyperTransport {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        // hyper-util refuses these before connecting; checking here gives the
        // caller a clear message, and no retry can change them.
        let uri = req.uri();
        if uri.host().is_none_or(str::is_empty) {
            return Err(unsendable(format!("the URI {uri} has no host: write an absolute URI like https://host/path")));
        }
        match uri.scheme_str() {
            Some("http") => pooled_send(&self.client, req).await,
            #[cfg(feature = "https")]
            Some("https") => match &self.tls {
                Ok(client) => pooled_send(client, req).await,
                Err(why) => Err(unsendable(format!("cannot send https:// ({uri}): {why}"))),
            },
            #[cfg(not(feature = "https"))]
            Some("https") => Err(unsendable(format!(
                "cannot send {uri}: retrysim was built without its `https` feature; enable it, or implement Transport over a TLS client"
            ))),
            other => Err(unsendable(format!(
                "HyperTransport sends http:// and https://, not {}: {uri}",
                other.map_or_else(|| "a URI without a scheme".to_owned(), |s| format!("{s}://"))
            ))),
        }
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

    #[test]
    fn os_rng_draws_differ_between_generators() {
        // Two generators from OS entropy: 128-bit keys never collide in practice
        // (a seeded pair would repeat exactly, see seeded_rng_is_stable).
        let (mut a, mut b) = (os_rng().unwrap(), os_rng().unwrap());
        let xs: Vec<u64> = (0..4).map(|_| a.draw()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.draw()).collect();
        assert_ne!(xs, ys);
        assert!(xs.iter().collect::<std::collections::BTreeSet<_>>().len() == 4);
    }

    #[tokio::test]
    async fn connect_refused_is_not_sent() {
        // Port 9 on loopback: nothing listens in the test environment.
        let req = Request::get("http://127.0.0.1:9/").body(Bytes::new()).unwrap();
        let err = HyperTransport::new().send(req).await.unwrap_err();
        assert_eq!(err.failure, TransportFailure::NotSent, "{err}");
        // The message names the cause (hyper-util's own text is only the
        // kind), and the error says whether the request may have run.
        assert!(err.message.starts_with("connect failed: client error (Connect): "), "{err}");
        assert!(err.message.to_lowercase().contains("refused"), "{err}");
        assert_eq!(err.to_string(), format!("{} (not sent)", err.message));
    }

    #[test]
    fn a_transport_error_says_whether_the_request_may_have_run() {
        let e = |failure| TransportError { failure, message: "reset".into() }.to_string();
        assert_eq!(e(TransportFailure::NotSent), "reset (not sent)");
        assert_eq!(e(TransportFailure::MaybeArrived), "reset (may have arrived)");
        assert_eq!(e(TransportFailure::Unsendable), "reset (not sent, no retry can fix it)");
    }
}
