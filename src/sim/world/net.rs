//! The simulated network: a [`Transport`] that speaks HTTP/1.1 with hyper
//! over turmoil TCP, the API served the same way, and the faults that the
//! runner switches on and off at scheduled virtual times.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use std::time::Duration;
use tokio::sync::Notify;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand_pcg::Pcg64;
use serde::Serialize;

use crate::core::duration_text;
use crate::env::{POOL_IDLE_TIMEOUT, Rng, Transport, TransportError, pooled_send, seeded_rng};
use crate::locks::lock;
use crate::sim::world::api::{Api, Begin};
use crate::sim::world::connector::SimConnector;
use crate::sim::world::timers;
use crate::sim::world::timers::SimTimer;

pub(crate) use crate::sim::world::connector::API_HOST;
/// The API's port.
pub(crate) const API_PORT: u16 = 80;

/// Virtual time since the simulation started (zero outside a simulation).
pub(crate) fn sim_now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

pub use crate::sim::world::faults::{CloseTiming, Fault, FaultClass, ScheduledFault};

/// What the server side reads about faults while it runs.
#[derive(Debug)]
pub(crate) struct ServerFaults {
    /// Answers to lose after the handler ran, per mille, drawn from `rng`.
    pub lost_per_mille: u32,
    /// Scheduled single losses not yet spent.
    pub lose_next: u32,
    rng: Pcg64,
}

impl ServerFaults {
    /// Loss decisions drawn from a generator seeded with `seed`.
    pub fn new(lost_per_mille: u32, seed: u64) -> ServerFaults {
        ServerFaults { lost_per_mille, lose_next: 0, rng: seeded_rng(seed) }
    }

    /// Whether to lose the answer just produced. Draws once per answer, so
    /// the sequence of draws does not depend on the outcome.
    pub(crate) fn lose(&mut self) -> bool {
        let draw = self.rng.draw() % 1000;
        if self.lose_next > 0 {
            self.lose_next -= 1;
            return true;
        }
        draw < self.lost_per_mille as u64
    }
}

/// The API's state, shared by every connection and kept across bounces.
pub(crate) struct Server {
    /// The simulated API: its limiter, idempotency store and ledger.
    pub(crate) api: Mutex<Api>,
    /// The faults the server side applies: answers to lose.
    pub(crate) faults: Mutex<ServerFaults>,
    /// The connections it accepted, and the close races armed on them.
    conns: Mutex<Connections>,
    /// Wakes every connection to close if idle (a `fin_before_write` race).
    close_idle: Notify,
}

/// What the server knows of its connections.
#[derive(Debug, Default)]
struct Connections {
    /// Accepted so far, across bounces.
    opened: u64,
    /// Idle-close rounds asked for so far (`fin_before_write`).
    close_rounds: u64,
    /// The race the next request on a reused connection meets.
    armed: Option<CloseTiming>,
    /// The requests a close race dropped, in order.
    raced: Vec<RacedRequest>,
    /// Each connection accepted, in order, as the server kept it.
    records: Vec<ConnRecord>,
}

/// One connection as the server kept it, for the model's self-check
/// (`model-keep-alive`): when it was accepted, when each request on it
/// reached the server's handler, and each answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnRecord {
    /// When the server accepted it (virtual time).
    pub opened: Duration,
    /// When each request on it reached the handler, in order.
    pub requests: Vec<Duration>,
    /// Each answer sent on it, in order.
    pub answers: Vec<ConnAnswer>,
    /// When the server itself closed it, if it did.
    pub closed: Option<ServerClose>,
}

/// The server closed a kept-alive connection: its idle timeout ran out, or
/// a `fin_before_write` race asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerClose {
    /// When (virtual time).
    pub at: Duration,
    /// Requests that had reached the handler by then.
    pub requests: usize,
    /// Answers sent by then.
    pub answers: usize,
    /// A `fin_before_write` race asked (otherwise the idle timeout ran out).
    pub asked: bool,
}

/// One answer on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnAnswer {
    /// When the server produced it (virtual time).
    pub at: Duration,
    /// Its status.
    pub status: u16,
    /// Whether the server marked it `Connection: close`.
    pub closes: bool,
}

/// A request that a close race dropped after the client wrote it: it never
/// ran, and the client could not know that, so it must treat it as one that
/// may have run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RacedRequest {
    /// When the server dropped it, in virtual time since the run began.
    #[serde(with = "duration_text")]
    pub at: Duration,
    /// The race's timing (`fin_after_write` or `rst`).
    pub timing: CloseTiming,
    /// Its `x-retrysim-client` label (the job).
    pub client: String,
    /// Its method.
    pub method: String,
    /// Whether it carried an `Idempotency-Key`.
    pub keyed: bool,
    /// The connection it came on (its place in the server's connection
    /// records), and how many requests and answers that connection had
    /// seen before it. Not in the JSON report.
    #[serde(skip)]
    pub on: RacedOn,
}

/// Where a close race struck: a connection, and how far along it was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RacedOn {
    /// The connection's place in the server's connection records.
    pub connection: usize,
    /// Requests that had reached the handler on it before the raced one.
    pub requests: usize,
    /// Answers it had sent before the raced request.
    pub answers: usize,
}

impl RacedRequest {
    /// What the server could read of a request's head (`head`: its first
    /// bytes, as written on the wire).
    fn from_head(timing: CloseTiming, head: &[u8], on: RacedOn) -> RacedRequest {
        let text = String::from_utf8_lossy(head);
        let mut lines = text.split("\r\n");
        let method = lines.next().and_then(|l| l.split(' ').next()).unwrap_or("").to_owned();
        let mut client = String::new();
        let mut keyed = false;
        for line in lines.take_while(|l| !l.is_empty()) {
            let Some((name, value)) = line.split_once(':') else { continue };
            if name.eq_ignore_ascii_case(crate::sim::world::api::CLIENT_HEADER) {
                client = value.trim().to_owned();
            } else if name.eq_ignore_ascii_case(crate::client::IDEMPOTENCY_KEY) {
                keyed = true;
            }
        }
        RacedRequest { at: sim_now(), timing, client, method, keyed, on }
    }
}

impl Server {
    /// A server of `api`, applying `faults`.
    pub(crate) fn new(api: Api, faults: ServerFaults) -> Server {
        Server {
            api: Mutex::new(api),
            faults: Mutex::new(faults),
            conns: Mutex::new(Connections::default()),
            close_idle: Notify::new(),
        }
    }

    /// Connections accepted so far, across bounces.
    pub(crate) fn connections(&self) -> u64 {
        lock(&self.conns).opened
    }

    /// The requests close races dropped so far.
    pub(crate) fn raced(&self) -> Vec<RacedRequest> {
        lock(&self.conns).raced.clone()
    }

    /// Each connection accepted so far, as the server kept it.
    pub(crate) fn connection_records(&self) -> Vec<ConnRecord> {
        lock(&self.conns).records.clone()
    }

    /// Starts a close race: `fin_before_write` closes every idle connection
    /// now; the other timings wait for the next request on a reused one.
    pub(crate) fn close_race(&self, timing: CloseTiming) {
        let mut conns = lock(&self.conns);
        match timing {
            CloseTiming::FinBeforeWrite => {
                conns.close_rounds += 1;
                drop(conns);
                self.close_idle.notify_waiters();
            }
            other => conns.armed = Some(other),
        }
    }

    /// Takes the armed race if it is `timing`.
    fn take_race(&self, timing: CloseTiming) -> bool {
        let mut conns = lock(&self.conns);
        let hit = conns.armed == Some(timing);
        if hit {
            conns.armed = None;
        }
        hit
    }
}

/// One connection as the server sees it.
#[derive(Debug)]
struct Conn {
    /// Answers sent on it so far.
    served: u32,
    /// Requests in the handler now.
    busy: u32,
    /// When it last became idle (accepted, or its last answer).
    idle_since: Duration,
    /// Its place in the server's connection records.
    record: usize,
}

/// The answer was cut off on purpose; hyper then drops the connection.
#[derive(Debug)]
struct AnswerLost;

impl std::fmt::Display for AnswerLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("answer lost (fault)")
    }
}

impl std::error::Error for AnswerLost {}

async fn handle(
    server: Arc<Server>,
    conn: Arc<(Mutex<Conn>, Notify)>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, AnswerLost> {
    let (reused, record) = {
        let c = lock(&conn.0);
        (c.served > 0, c.record)
    };
    lock(&server.conns).records[record].requests.push(sim_now());
    if reused && server.take_race(CloseTiming::FinAfterWrite) {
        // Read, never run: the connection closes without an answer.
        let mut head = format!("{} {} HTTP/1.1\r\n", req.method(), req.uri());
        for (name, value) in req.headers() {
            head += &format!("{name}: {}\r\n", String::from_utf8_lossy(value.as_bytes()));
        }
        let mut conns = lock(&server.conns);
        let seen = &conns.records[record];
        let on = RacedOn { connection: record, requests: seen.requests.len() - 1, answers: seen.answers.len() };
        conns.raced.push(RacedRequest::from_head(CloseTiming::FinAfterWrite, head.as_bytes(), on));
        return Err(AnswerLost);
    }
    lock(&conn.0).busy += 1;
    let answer = answer(&server, req).await;
    let mut c = lock(&conn.0);
    c.busy -= 1;
    c.idle_since = sim_now();
    let mut res = answer?;
    c.served += 1;
    let keep = lock(&server.api).config().keep_alive;
    let status = res.status().as_u16();
    let closes = keep.closes_after(c.served, status);
    if closes {
        res.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    drop(c);
    lock(&server.conns).records[record].answers.push(ConnAnswer { at: sim_now(), status, closes });
    conn.1.notify_one();
    Ok(res)
}

/// The API's answer to one request, or the loss of it.
async fn answer(
    server: &Arc<Server>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, AnswerLost> {
    let (parts, body) = req.into_parts();
    // A body that breaks mid-way is a client that went away: no answer needed.
    // Copied: hyper's body is a slice of the connection's read buffer, and the
    // idempotency store keeps a key's first body for the whole run, which
    // would keep every such buffer alive with it (about 260 bytes a request
    // in a 100,000-job run, by heaptrack).
    let body = Bytes::copy_from_slice(&body.collect().await.map_err(|_| AnswerLost)?.to_bytes());
    let req = Request::from_parts(parts, body);
    let now = sim_now();
    let begin = lock(&server.api).begin(&req, now);
    let res = match begin {
        Begin::Answer(res) => res,
        Begin::Run(ticket) => {
            // The work runs on its own task: a client that hangs up (an
            // attempt timeout) does not stop it, as on a real server. It
            // ends when the API said it would.
            let processing = ticket.ready_at().saturating_sub(now);
            let worker = server.clone();
            let run = tokio::spawn(async move {
                timers::sleep(processing).await;
                lock(&worker.api).complete(ticket, sim_now())
            });
            run.await.map_err(|_| AnswerLost)?
        }
    };
    let lost = lock(&server.faults).lose();
    let index = crate::sim::world::api::arrival_index(&res);
    let mut api = lock(&server.api);
    api.loss_decided(sim_now(), index, lost);
    if lost {
        if let Some(i) = index {
            api.answer_lost(i);
        }
        return Err(AnswerLost);
    }
    drop(api);
    let (parts, body) = res.into_parts();
    Ok(Response::from_parts(parts, Full::new(body)))
}

/// The server's side of a connection: reads go through it so that an armed
/// `rst` race can reset the connection with the next request unread.
struct ServerIo {
    stream: turmoil::net::TcpStream,
    server: Arc<Server>,
    conn: Arc<(Mutex<Conn>, Notify)>,
}

impl tokio::io::AsyncRead for ServerIo {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        let (idle_reused, record) = {
            let c = lock(&this.conn.0);
            (c.served > 0 && c.busy == 0, c.record)
        };
        if idle_reused && lock(&this.server.conns).armed == Some(CloseTiming::Rst) {
            // Look without taking: dropping the stream with the request
            // unread sends an RST (RFC 9293 3.10.4, as turmoil does).
            let mut head = [0u8; 2048];
            let mut peek = tokio::io::ReadBuf::new(&mut head);
            if let std::task::Poll::Ready(Ok(n)) = this.stream.poll_peek(cx, &mut peek)
                && n > 0
                && this.server.take_race(CloseTiming::Rst)
            {
                let mut conns = lock(&this.server.conns);
                let seen = &conns.records[record];
                let on = RacedOn { connection: record, requests: seen.requests.len(), answers: seen.answers.len() };
                conns.raced.push(RacedRequest::from_head(CloseTiming::Rst, peek.filled(), on));
                return std::task::Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "close race: reset with the request unread (fault)",
                )));
            }
        }
        std::pin::Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for ServerIo {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The API host's program: accept connections and serve each with hyper.
/// `Date` comes from the model's (simulated, possibly skewed) clock, never
/// from hyper's, which reads the real one.
pub(crate) async fn serve(server: Arc<Server>) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), API_PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let record = {
            let mut conns = lock(&server.conns);
            conns.opened += 1;
            conns.records.push(ConnRecord {
                opened: sim_now(),
                requests: Vec::new(),
                answers: Vec::new(),
                closed: None,
            });
            conns.records.len() - 1
        };
        let server = server.clone();
        // A local task, not `tokio::spawn`: a bounce drops the host's tasks,
        // and each dropped connection sends a message whose latency turmoil
        // draws from the seeded generator. The runtime drops spawned tasks in
        // an order that depends on tokio's process-wide task ids (so on what
        // ran before in the process); a LocalSet drops its tasks in spawn
        // order. Found by `retrysim hunt` (invariant 8).
        tokio::task::spawn_local(serve_connection(server, stream, record));
    }
}

/// One connection, kept alive as the API's `keep_alive` says: closed when
/// idle for `idle_timeout_ms`, or at once when idle and a `fin_before_write`
/// race asks.
async fn serve_connection(server: Arc<Server>, stream: turmoil::net::TcpStream, record: usize) {
    let keep = lock(&server.api).config().keep_alive;
    let conn = Arc::new((Mutex::new(Conn { served: 0, busy: 0, idle_since: sim_now(), record }), Notify::new()));
    let service = {
        let (server, conn) = (server.clone(), conn.clone());
        service_fn(move |req| handle(server.clone(), conn.clone(), req))
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.auto_date_header(false).keep_alive(keep.enabled).header_read_timeout(None);
    let io = ServerIo { stream, server: server.clone(), conn: conn.clone() };
    let connection = http.serve_connection(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    // Errors here are connections the client or a fault cut: the client's
    // side records them.
    if !keep.enabled {
        let _ = connection.await;
        return;
    }
    let mut rounds = lock(&server.conns).close_rounds;
    let idle_timeout = Duration::from_millis(keep.idle_timeout_ms);
    loop {
        let close_round = server.close_idle.notified();
        let mut close_round = std::pin::pin!(close_round);
        close_round.as_mut().enable();
        let busy_changed = conn.1.notified();
        let (busy, idle_since) = {
            let c = lock(&conn.0);
            (c.busy > 0, c.idle_since)
        };
        let now_rounds = lock(&server.conns).close_rounds;
        let asked = now_rounds != rounds;
        rounds = now_rounds;
        let timed_out = keep.idle_timeout_ms > 0 && sim_now() >= idle_since + idle_timeout;
        if !busy && (asked || timed_out) {
            {
                let mut conns = lock(&server.conns);
                let c = &mut conns.records[record];
                let (requests, answers) = (c.requests.len(), c.answers.len());
                c.closed = Some(ServerClose { at: sim_now(), requests, answers, asked });
            }
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
            return;
        }
        let idle_left = (!busy && keep.idle_timeout_ms > 0).then(|| idle_since + idle_timeout - sim_now());
        tokio::select! {
            biased;
            _ = connection.as_mut() => return,
            _ = close_round => {}
            _ = busy_changed => {}
            _ = timers::sleep(idle_left.unwrap_or_default()), if idle_left.is_some() => {}
        }
    }
}

/// A [`Transport`] over turmoil TCP, pooled as
/// [`HyperTransport`](crate::env::HyperTransport) pools in production:
/// hyper-util's client with keep-alive, idle connections dropped after
/// [`POOL_IDLE_TIMEOUT`], a request the pool finds closed before it was
/// written sent again on a new connection (`retry_canceled_requests`), and
/// failures classified by the same rule. Its pool's clock is the
/// simulation's ([`SimTimer`]). Build one per host, inside it; clones share
/// the pool.
#[derive(Debug, Clone)]
pub struct SimTransport {
    client: Client<SimConnector, Full<Bytes>>,
}

impl SimTransport {
    /// A transport with an empty pool.
    pub fn new() -> SimTransport {
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(SimTimer)
            .build(SimConnector::new());
        SimTransport { client }
    }
}

impl Default for SimTransport {
    fn default() -> Self {
        SimTransport::new()
    }
}

impl Transport for SimTransport {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        pooled_send(&self.client, req).await
    }
}
