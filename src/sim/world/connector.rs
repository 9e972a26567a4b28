//! The simulated network as a connector, so a client stack that is not
//! retrysim's own (a hyper-util client, and any `tower` stack built on one)
//! can run inside the simulation unchanged.
//!
//! [`SimConnector`] is a `tower_service::Service<http::Uri>` that opens a
//! `turmoil::net::TcpStream` to the URI's host and port (80 unless given):
//!
//! ```
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use http_body_util::Full;
//! use bytes::Bytes;
//! use retrysim::sim::world::connector::SimConnector;
//!
//! // Inside a turmoil host: every request on a fresh simulated connection.
//! let client: Client<SimConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
//!     .pool_max_idle_per_host(0)
//!     .build(SimConnector::new());
//! ```
//!
//! # Configure the pool so faults reach you as they reach `SimTransport`
//!
//! [`SimTransport`](crate::sim::world::net::SimTransport) opens one connection per
//! attempt, so a partition is a connect error at once (nothing was sent), a
//! lost answer or a bounce is an error after sending (the server may have
//! run it), and a hold delays the exchange. hyper-util's pooled client keeps
//! idle connections and reuses them, which changes what a fault looks like:
//!
//! - on a reused connection a partition drops the request silently: the
//!   client hangs until its own timeout and cannot tell whether the request
//!   arrived, where a fresh connection would have failed to connect at once;
//! - a connection the server closed while idle makes hyper resend the
//!   request on a new connection by itself (`retry_canceled_requests`,
//!   on by default), an attempt your retry code never sees;
//! - the pool's idle expiry reads the real clock unless it is given a
//!   `pool_timer`, which breaks "same seed, same run".
//!
//! So build the client with **`.pool_max_idle_per_host(0)`**: every request
//! then opens its own connection, exactly like `SimTransport`, and nothing
//! idles (the tests below show both behaviours). If you must test pooling,
//! add `.retry_canceled_requests(false)` and `.pool_timer(SimNet::timer())`
//! ([`SimTimer`](crate::sim::world::timers::SimTimer): hyper-util's `TokioTimer`
//! works too, but the harness cannot see its sleeps and then steps every
//! tick) and expect partitions to show up as timeouts. retrysim's simulated API
//! closes every connection after its answer (`keep_alive(false)`), so
//! against it the pool only matters for servers of your own.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;

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

/// One simulated TCP connection, as hyper reads and writes it.
#[derive(Debug)]
pub struct SimConnection {
    io: TokioIo<turmoil::net::TcpStream>,
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
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for SimConnection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
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
            crate::sim::world::net::API_HOST
        )));
    }
    let host = uri.host().ok_or_else(|| {
        invalid(format!("{uri} has no host; use e.g. http://{}/v1/jobs", crate::sim::world::net::API_HOST))
    })?;
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
            Ok(SimConnection { io: TokioIo::new(stream) })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use bytes::Bytes;
    use http::{Request, Response, StatusCode};
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    use super::*;
    use crate::core::classify::TransportFailure;
    use crate::env::Transport;
    use crate::sim::world::api::{Api, ApiConfig, ArrivalOutcome, Ledger};
    use crate::sim::world::net::{API_HOST, Server, ServerFaults, SimTransport, serve};

    type SimClient = Client<SimConnector, Full<Bytes>>;

    /// The client the module doc recommends: a fresh connection per request.
    /// The connector it returns shares the client's connection count.
    fn unpooled() -> (SimClient, SimConnector) {
        let connector = SimConnector::new();
        (Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build(connector.clone()), connector)
    }

    fn job(n: u32) -> Request<Full<Bytes>> {
        Request::post(format!("http://{API_HOST}/v1/jobs"))
            .header("x-retrysim-client", format!("w0 job-{n}"))
            .header("x-api-key", "key-a")
            .header("idempotency-key", format!("key-{n:016}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(format!(r#"{{"uploadId":"u{n}","options":{{"op":"compress"}}}}"#))))
            .unwrap()
    }

    /// What one request ended as, in terms both clients share.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Seen {
        Answer(u16),
        /// Failed before anything was sent (connect refused, no route).
        NotSent,
        /// Failed after sending: the server may have run it.
        MaybeArrived,
    }

    async fn via_hyper_util(client: &SimClient, req: Request<Full<Bytes>>) -> Seen {
        match client.request(req).await {
            Ok(res) => {
                let status = res.status().as_u16();
                // The whole body must arrive too: a cut-off body is a failure.
                match res.into_body().collect().await {
                    Ok(_) => Seen::Answer(status),
                    Err(_) => Seen::MaybeArrived,
                }
            }
            Err(e) if e.is_connect() => Seen::NotSent,
            Err(_) => Seen::MaybeArrived,
        }
    }

    async fn via_sim_transport(req: Request<Full<Bytes>>) -> Seen {
        let (parts, body) = req.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        match SimTransport.send(Request::from_parts(parts, body)).await {
            Ok(res) => Seen::Answer(res.status().as_u16()),
            Err(e) if e.failure == TransportFailure::NotSent => Seen::NotSent,
            Err(_) => Seen::MaybeArrived,
        }
    }

    /// A fault the test switches on before the client's request.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Setup {
        Healthy,
        Partition,
        LoseNextAnswer,
        /// Hold the link for 2 s after the request leaves.
        Hold,
    }

    /// What a run observed: each request's outcome with its virtual send and
    /// end times (ms), and the API's ledger.
    type Observed = (Vec<(Seen, u64, u64)>, Ledger);

    /// Runs `requests` keyed job POSTs from host "client" to the real API
    /// host (a `Server` built as the runner builds one), one per virtual
    /// second, with `setup` applied 100 ms before the last one;
    /// `use_connector` picks the hyper-util client over [`SimConnector`] or
    /// `SimTransport`.
    fn run(setup: Setup, requests: u32, use_connector: bool) -> Observed {
        let mut sim = turmoil::Builder::new()
            .rng_seed(7)
            .tick_duration(Duration::from_millis(1))
            .min_message_latency(Duration::from_millis(2))
            .max_message_latency(Duration::from_millis(10))
            .simulation_duration(Duration::from_secs(60))
            .build();
        let server = Arc::new(Server {
            api: Mutex::new(Api::new(ApiConfig { processing_ms: 100, ..ApiConfig::default() })),
            faults: Mutex::new(ServerFaults::new(0, 11)),
        });
        let host_server = server.clone();
        sim.host(API_HOST, move || serve(host_server.clone()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let out = seen.clone();
        let connections = Arc::new(AtomicU64::new(0));
        let count = connections.clone();
        sim.client("client", async move {
            let (client, connector) = unpooled();
            let t0 = tokio::time::Instant::now();
            for n in 1..=requests {
                tokio::time::sleep_until(t0 + Duration::from_secs(n as u64 - 1)).await;
                let start = crate::sim::world::net::sim_now();
                let result =
                    if use_connector { via_hyper_util(&client, job(n)).await } else { via_sim_transport(job(n)).await };
                let end = crate::sim::world::net::sim_now();
                out.lock().unwrap().push((result, start.as_millis() as u64, end.as_millis() as u64));
            }
            count.store(connector.connections(), Ordering::Relaxed);
            Ok(())
        });
        let fault_at = Duration::from_millis(1_000 * (requests as u64 - 1) - 100);
        let mut applied = false;
        while !sim.step().unwrap() {
            if !applied && sim.elapsed() >= fault_at {
                applied = true;
                match setup {
                    Setup::Healthy => {}
                    Setup::Partition => sim.partition("client", API_HOST),
                    Setup::LoseNextAnswer => server.faults.lock().unwrap().lose_next += 1,
                    Setup::Hold => sim.hold("client", API_HOST),
                }
            }
            if setup == Setup::Hold && applied && sim.elapsed() >= fault_at + Duration::from_secs(2) {
                sim.release("client", API_HOST);
            }
        }
        if use_connector {
            assert_eq!(connections.load(Ordering::Relaxed), requests as u64, "one connection per request");
        }
        let ledger = server.api.lock().unwrap().ledger().clone();
        let seen = seen.lock().unwrap().clone();
        (seen, ledger)
    }

    #[test]
    fn a_hyper_util_client_over_the_connector_gets_201s() {
        let (seen, ledger) = run(Setup::Healthy, 3, true);
        assert_eq!(seen.iter().map(|s| s.0.clone()).collect::<Vec<_>>(), vec![Seen::Answer(201); 3]);
        assert_eq!(ledger.charged, 3);
        assert!(ledger.arrivals.iter().all(|a| a.outcome == ArrivalOutcome::Charged && !a.lost));
        assert_eq!(ledger.arrivals[2].client, "w0 job-3", "the request's own headers reach the API");
    }

    #[test]
    fn a_partition_is_a_connect_error_at_once() {
        let (seen, ledger) = run(Setup::Partition, 2, true);
        assert_eq!(seen[0].0, Seen::Answer(201));
        let (what, start, end) = seen[1].clone();
        assert_eq!(what, Seen::NotSent);
        assert!(end - start <= 1, "a refused connect fails within a step, not after a timeout: {start}..{end} ms");
        assert_eq!(ledger.arrivals.len(), 1, "nothing arrived during the partition");
    }

    #[test]
    fn a_lost_answer_is_an_error_after_the_server_charged() {
        let (seen, ledger) = run(Setup::LoseNextAnswer, 2, true);
        assert_eq!(seen[1].0, Seen::MaybeArrived);
        let last = ledger.arrivals.last().unwrap();
        assert_eq!((last.client.as_str(), last.outcome, last.lost), ("w0 job-2", ArrivalOutcome::Charged, true));
        assert_eq!(ledger.charged, 2, "the server ran the request whose answer was lost");
    }

    #[test]
    fn every_fault_reaches_the_connector_as_it_reaches_sim_transport() {
        for setup in [Setup::Healthy, Setup::Partition, Setup::LoseNextAnswer, Setup::Hold] {
            let (ours, ours_ledger) = run(setup, 2, false);
            let (theirs, theirs_ledger) = run(setup, 2, true);
            let outcomes = |s: &[(Seen, u64, u64)]| s.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
            assert_eq!(outcomes(&ours), outcomes(&theirs), "{setup:?}");
            // The same messages on the same seed: the same virtual times.
            assert_eq!(ours, theirs, "{setup:?}: times differ");
            let facts = |l: &Ledger| {
                l.arrivals.iter().map(|a| (a.at, a.status, a.outcome, a.lost, a.answered_at)).collect::<Vec<_>>()
            };
            assert_eq!(facts(&ours_ledger), facts(&theirs_ledger), "{setup:?}");
        }
        // The hold delayed the answer by the hold, not into an error.
        let (held, _) = run(Setup::Hold, 2, true);
        let (what, start, end) = held[1].clone();
        assert_eq!(what, Seen::Answer(201));
        assert!(end - start >= 1_900, "held for the hold's 2 s: {start}..{end} ms");
    }

    /// A server that keeps connections open (retrysim's API does not), so
    /// the client's pool has something to reuse.
    async fn keep_alive_server() -> turmoil::Result {
        use std::net::{IpAddr, Ipv4Addr};
        let listener = turmoil::net::TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), 80)).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            tokio::task::spawn_local(async move {
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let mut http = hyper::server::conn::http1::Builder::new();
                http.keep_alive(true);
                let _ = http.serve_connection(TokioIo::new(stream), service).await;
            });
        }
    }

    /// Two GETs to a keep-alive server with a partition between them; what
    /// the second one saw, and how many connections were opened.
    fn pooled_partition(pool: bool) -> (Seen, u64) {
        let mut sim = turmoil::Builder::new()
            .rng_seed(3)
            .tick_duration(Duration::from_millis(1))
            .simulation_duration(Duration::from_secs(60))
            .build();
        sim.host("kept", keep_alive_server);
        let seen = Arc::new(Mutex::new(None));
        let out = seen.clone();
        sim.client("client", async move {
            let mut b = Client::builder(TokioExecutor::new());
            if !pool {
                b.pool_max_idle_per_host(0);
            }
            let connector = SimConnector::new();
            let client: SimClient = b.build(connector.clone());
            let get = || Request::get("http://kept/").body(Full::new(Bytes::new())).unwrap();
            let first = via_hyper_util(&client, get()).await;
            assert_eq!(first, Seen::Answer(StatusCode::OK.as_u16()));
            tokio::time::sleep(Duration::from_secs(1)).await;
            // A caller's own attempt timeout, as any retry client has.
            let second = tokio::time::timeout(Duration::from_secs(10), via_hyper_util(&client, get()))
                .await
                .unwrap_or(Seen::MaybeArrived);
            *out.lock().unwrap() = Some((second, connector.connections()));
            Ok(())
        });
        let mut partitioned = false;
        while !sim.step().unwrap() {
            if !partitioned && sim.elapsed() >= Duration::from_millis(500) {
                partitioned = true;
                sim.partition("client", "kept");
            }
        }
        seen.lock().unwrap().take().unwrap()
    }

    #[test]
    fn a_pooled_connection_turns_a_partition_into_a_timeout() {
        // The default pool reuses the idle connection: the request vanishes
        // into the partition and only the caller's timeout ends it.
        assert_eq!(pooled_partition(true), (Seen::MaybeArrived, 1));
        // Without idle connections it is what SimTransport sees: refused at once.
        assert_eq!(pooled_partition(false), (Seen::NotSent, 2));
    }

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
