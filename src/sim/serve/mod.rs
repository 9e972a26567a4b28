//! `retrysim serve`: the simulated API on a real socket, in real time, with
//! the ledger's verdict.
//!
//! The model ([`Api`]) is sans-IO, so the same state machine that answers
//! inside turmoil answers here: hyper on a [`tokio::net::TcpListener`], and
//! virtual time is the wall time elapsed since the round began. A client in
//! any language (or a Rust client on reqwest, which cannot ride turmoil's
//! network) is put in front of it, and the ledger-only checks
//! ([`check_ledger`]) judge it as the simulator would (docs/DESIGN.md
//! "Serving the model on a real socket").
//!
//! ```no_run
//! # async fn demo() -> Result<(), retrysim::testing::ServeError> {
//! use retrysim::testing::scenario;
//! use retrysim::testing::Served;
//!
//! let server = Served::start(&scenario::named("blinkimg-1s").unwrap()).await?;
//! let url = server.url(); // http://127.0.0.1:PORT; POST {url}/v1/jobs
//! // ... drive your client against it ...
//! let report = server.stop().await;
//! assert!(!report.broken, "{}", report.render_text());
//! # Ok(()) }
//! ```
//!
//! # What is served, and what is not
//!
//! Everything in the API model: its limiter, quota, credits, idempotency
//! store, envelopes, advice forms and clock skew. The server's `Date` is the
//! real clock (plus the scenario's skew): the round's virtual time starts at
//! the whole second it began in. Of the scheduled faults, those that make
//! sense on one real socket: lost answers (scheduled and the steady rate:
//! the connection is closed after the request ran and was charged), latency
//! spikes (each request and each answer is held for the spike's latency) and
//! holds (a stall: requests and answers wait until it heals). Partitions,
//! bounces and limiter partitions need the simulated network; they are
//! listed in the report as not served. Loss decisions come from one seed,
//! drawn once per answer, so they are deterministic given the order of
//! answers. Connections are kept alive as the scenario's `api.keep_alive`
//! says; an idle one is closed after its `idle_timeout_ms` or after
//! `Limits::header_read_timeout`, whichever comes first.
//!
//! # Requests and operations
//!
//! The checks need to know which requests belong together. A request's
//! operation is its `x-retrysim-client` header when it has one (e.g.
//! `job-17`, or one name per client that sends one request at a time), else
//! its `Idempotency-Key`, else what it asks for: its account (API key),
//! method, path and body, so an unmodified client that sends the same
//! request again is judged as one operation. Requests of one operation must
//! be sent one at a time (a client that sends identical bodies for
//! different jobs at once labels them).
//!
//! # Bounds
//!
//! [`Limits`]: a cap on open connections (more are answered 503 and closed),
//! on header and body size (431, 413), on the time to send the headers and
//! the body (the connection is closed; 408), and on the requests one round's
//! ledger keeps (503 until a reset). Control requests under
//! `/__retrysim/` read the ledger and the report, and reset the round.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::locks::lock;
use crate::sim::checks::blackbox::{BlackBoxCheck, check_ledger};
use crate::sim::run::scenario::Scenario;
use crate::sim::run::seed::derive;
use crate::sim::world::api::{Api, Arrival, Begin, Ledger, NO_KEY, arrival_index};
use crate::sim::world::net::{Fault, ScheduledFault, ServerFaults};

/// The path prefix of the control requests (ledger, report, reset).
pub(crate) const CONTROL_PREFIX: &str = "/__retrysim/";

/// What keeps slow or flooding clients from exhausting the server.
///
/// Start from [`Limits::default`] and change what you need with the setters
/// (each named as its field): `Limits::default().max_connections(8)`. The
/// struct is `#[non_exhaustive]`, so a bound added later breaks no user's code.
///
/// # Default
/// 256 connections, 16 KiB of head, 64 KiB of body, 10 s to send a head
/// (and idle keep-alive), 10 s to send a body, 10 s to drain on stop,
/// 1,000,000 arrivals a round.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Open connections at most; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Largest request head (request line and headers); larger gets 431.
    pub max_header_bytes: usize,
    /// Largest request body; larger gets 413.
    pub max_body_bytes: usize,
    /// A client must send a request's whole head within this, and an idle
    /// kept-alive connection is closed after it.
    pub header_read_timeout: Duration,
    /// A client must send a request's whole body within this (else 408).
    pub body_read_timeout: Duration,
    /// On stop, how long in-flight requests may take to finish.
    pub drain_timeout: Duration,
    /// Requests one round's ledger keeps at most; later ones get 503 until a
    /// reset, so a flood of valid requests cannot grow it without bound.
    pub max_arrivals: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            max_header_bytes: 16 * 1024,
            max_body_bytes: 64 * 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            max_arrivals: 1_000_000,
        }
    }
}

/// Where and how to serve.
///
/// Start from [`ServeOptions::default`] and change what you need with the
/// setters (each named as its field):
/// `ServeOptions::default().seed(42).limits(Limits::default().max_connections(8))`.
/// The struct is `#[non_exhaustive]`, so an option added later breaks no
/// user's code.
///
/// # Default
/// `127.0.0.1:0` (a free port on loopback), not public, seed 7, [`Limits::default`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The address to listen on; port 0 picks a free one.
    pub addr: SocketAddr,
    /// Allow an address other than loopback (the API model has no auth worth the name).
    pub public: bool,
    /// The master seed of the server's own draws (lost answers).
    pub seed: u64,
    /// Connection and request bounds.
    pub limits: Limits,
}

impl Limits {
    /// These limits with another bound: Open connections at most (the field `max_connections`).
    pub fn max_connections(mut self, value: usize) -> Limits {
        self.max_connections = value;
        self
    }

    /// These limits with another bound: Largest request head, in bytes (the field `max_header_bytes`).
    pub fn max_header_bytes(mut self, value: usize) -> Limits {
        self.max_header_bytes = value;
        self
    }

    /// These limits with another bound: Largest request body, in bytes (the field `max_body_bytes`).
    pub fn max_body_bytes(mut self, value: usize) -> Limits {
        self.max_body_bytes = value;
        self
    }

    /// These limits with another bound: Time to send a request's whole head (and an idle keep-alive's life) (the field `header_read_timeout`).
    pub fn header_read_timeout(mut self, value: Duration) -> Limits {
        self.header_read_timeout = value;
        self
    }

    /// These limits with another bound: Time to send a request's whole body (the field `body_read_timeout`).
    pub fn body_read_timeout(mut self, value: Duration) -> Limits {
        self.body_read_timeout = value;
        self
    }

    /// These limits with another bound: How long in-flight requests may take to finish on stop (the field `drain_timeout`).
    pub fn drain_timeout(mut self, value: Duration) -> Limits {
        self.drain_timeout = value;
        self
    }

    /// These limits with another bound: Requests one round's ledger keeps at most (the field `max_arrivals`).
    pub fn max_arrivals(mut self, value: usize) -> Limits {
        self.max_arrivals = value;
        self
    }
}

impl ServeOptions {
    /// These options, listening on `addr` (port 0 picks a free one).
    pub fn addr(mut self, addr: SocketAddr) -> ServeOptions {
        self.addr = addr;
        self
    }

    /// These options, allowing (or not) an address other than loopback.
    pub fn public(mut self, on: bool) -> ServeOptions {
        self.public = on;
        self
    }

    /// These options, with the master seed of the server's own draws.
    pub fn seed(mut self, seed: u64) -> ServeOptions {
        self.seed = seed;
        self
    }

    /// These options, with other connection and request bounds.
    pub fn limits(mut self, limits: Limits) -> ServeOptions {
        self.limits = limits;
        self
    }
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions { addr: SocketAddr::from(([127, 0, 0, 1], 0)), public: false, seed: 7, limits: Limits::default() }
    }
}

/// Why the server did not start.
#[derive(Debug)]
pub enum ServeError {
    /// The address could not be bound (in use, not local, no permission).
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        error: std::io::Error,
    },
    /// A non-loopback address without `ServeOptions`' `public`.
    NotLoopback(SocketAddr),
    /// The scenario is not valid.
    Invalid(String),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Bind { addr, error } => {
                write!(f, "cannot listen on {addr}: {error} (pick another port, or port 0 for a free one)")
            }
            ServeError::NotLoopback(addr) => write!(
                f,
                "{addr} is not a loopback address: the simulated API would be reachable from other machines; pass --public to allow it"
            ),
            ServeError::Invalid(why) => write!(f, "invalid scenario: {why}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// One round: a fresh API and its ledger, from a reset (or the start) on.
struct Round {
    number: u32,
    api: Api,
    faults: ServerFaults,
    /// When the round's virtual time was zero.
    origin: Instant,
    /// Scheduled losses not yet reached (indices into `Shared::schedule`).
    next_loss: usize,
    /// The front door's counts when the round began: a report counts from here.
    door_at_start: [u64; 3],
}

impl Round {
    fn new(number: u32, s: &Scenario, seed: u64, door_at_start: [u64; 3]) -> Round {
        // The virtual clock starts at the whole second the round began in,
        // so the server's `Date` is the real clock (plus the scenario's skew).
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let into_second = wall - Duration::from_secs(wall.as_secs());
        let mut config = s.api.clone();
        config.epoch_unix_s = wall.as_secs();
        Round {
            number,
            api: Api::new(config),
            faults: ServerFaults::new(s.faults.lost_answers_per_mille, derive(seed, "server", 0)),
            origin: Instant::now().checked_sub(into_second).unwrap_or_else(Instant::now),
            next_loss: 0,
            door_at_start,
        }
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

type RoundCell = Arc<Mutex<Round>>;

/// Counts of what the front door did (not in the model's ledger).
#[derive(Debug, Default)]
struct Door {
    accepted: AtomicU64,
    refused: AtomicU64,
    rejected: AtomicU64,
}

impl Door {
    /// Accepted, refused, rejected, since the server started.
    fn counts(&self) -> [u64; 3] {
        [&self.accepted, &self.refused, &self.rejected].map(|c| c.load(Ordering::Relaxed))
    }
}

struct Shared {
    scenario: Scenario,
    seed: u64,
    limits: Limits,
    /// The scheduled faults served, by start.
    schedule: Vec<ScheduledFault>,
    /// The scheduled faults that need the simulated network.
    not_served: Vec<String>,
    round: Mutex<RoundCell>,
    door: Door,
}

impl Shared {
    fn current(&self) -> RoundCell {
        lock(&self.round).clone()
    }

    /// How long a message at `now` is held by a stall or a spike.
    fn delay(&self, now: Duration) -> Duration {
        let mut delay = Duration::ZERO;
        for f in &self.schedule {
            delay = delay.max(f.fault.message_delay(f.at, now));
        }
        delay
    }

    fn report(&self, round: &Round) -> ServeReport {
        ServeReport::of(self, round)
    }
}

/// A running server: its address, its ledger and its verdict. Dropping it
/// stops accepting; [`Served::stop`] also drains and reports.
pub struct Served {
    addr: SocketAddr,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    connections: Arc<Semaphore>,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl fmt::Debug for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Served").field("addr", &self.addr).field("scenario", &self.shared.scenario.name).finish()
    }
}

impl Served {
    /// Serves `s` on a free loopback port with the default options, on the
    /// current tokio runtime (e.g. inside a `#[tokio::test]`).
    pub async fn start(s: &Scenario) -> Result<Served, ServeError> {
        Served::start_with(s, ServeOptions::default()).await
    }

    /// Serves `s` as `options` say.
    pub async fn start_with(s: &Scenario, options: ServeOptions) -> Result<Served, ServeError> {
        s.validate().map_err(|e| ServeError::Invalid(e.0))?;
        if !options.public && !options.addr.ip().is_loopback() {
            return Err(ServeError::NotLoopback(options.addr));
        }
        let listener =
            TcpListener::bind(options.addr).await.map_err(|error| ServeError::Bind { addr: options.addr, error })?;
        let addr = listener.local_addr().map_err(|error| ServeError::Bind { addr: options.addr, error })?;
        let (mut schedule, mut not_served) = (Vec::new(), Vec::new());
        for f in &s.faults.schedule {
            if f.fault.kind().served() {
                schedule.push(f.clone());
            } else {
                not_served.push(format!("{:?} at {} ms", f.fault, f.at.as_millis()));
            }
        }
        schedule.sort_by_key(|f| f.at);
        let shared = Arc::new(Shared {
            round: Mutex::new(Arc::new(Mutex::new(Round::new(1, s, options.seed, [0; 3])))),
            scenario: s.clone(),
            seed: options.seed,
            limits: options.limits.clone(),
            schedule,
            not_served,
            door: Door::default(),
        });
        let cancel = CancellationToken::new();
        let connections = Arc::new(Semaphore::new(options.limits.max_connections));
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), cancel.clone(), connections.clone()));
        Ok(Served { addr, shared, cancel, connections, accept: Some(accept) })
    }

    /// The address bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, e.g. `http://127.0.0.1:41234` (the API is under `/v1/`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A copy of the current round's ledger.
    pub fn ledger(&self) -> Ledger {
        lock(&self.shared.current()).api.ledger().clone()
    }

    /// The current round's figures and verdict.
    pub fn report(&self) -> ServeReport {
        let round = self.shared.current();
        let round = lock(&round);
        self.shared.report(&round)
    }

    /// Starts a new round (a fresh API, ledger and clock) and returns the
    /// report of the one it ends. Requests still running finish in the old round.
    pub fn reset(&self) -> ServeReport {
        reset(&self.shared)
    }

    /// Stops accepting, lets in-flight requests finish (up to
    /// `Limits::drain_timeout`), and returns the final report.
    pub async fn stop(mut self) -> ServeReport {
        self.cancel.cancel();
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        let all = u32::try_from(self.shared.limits.max_connections).unwrap_or(u32::MAX);
        let drained = tokio::time::timeout(self.shared.limits.drain_timeout, self.connections.acquire_many(all)).await;
        let mut report = self.report();
        report.drained = matches!(drained, Ok(Ok(_)));
        report
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn reset(shared: &Shared) -> ServeReport {
    let mut slot = lock(&shared.round);
    let old = slot.clone();
    let old = lock(&old);
    let report = shared.report(&old);
    *slot = Arc::new(Mutex::new(Round::new(old.number + 1, &shared.scenario, shared.seed, shared.door.counts())));
    report
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, cancel: CancellationToken, slots: Arc<Semaphore>) {
    loop {
        let accepted = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // Out of file descriptors, or a connection reset before accept:
            // back off briefly and keep serving the others.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                shared.door.accepted.fetch_add(1, Ordering::Relaxed);
                let (shared, cancel) = (shared.clone(), cancel.clone());
                tokio::spawn(async move {
                    connection(stream, shared, cancel).await;
                    drop(permit);
                });
            }
            Err(_) => {
                shared.door.refused.fetch_add(1, Ordering::Relaxed);
                refuse(stream);
            }
        }
    }
}

/// Too many connections: a best-effort 503 without waiting on the client, then close.
fn refuse(stream: TcpStream) {
    let _ = stream.try_write(
        b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    );
}

/// One connection as the server sees it, for the scenario's keep-alive.
struct ConnState {
    /// Answers sent on it so far.
    served: u32,
    /// Requests in the handler now.
    busy: u32,
    /// When it last became idle (accepted, or its last answer).
    idle_since: Instant,
}

/// One connection, kept alive as the scenario's `api.keep_alive` says: no
/// keep-alive when it is off, `Connection: close` on the answer that
/// reaches `max_requests` and, with `close_after_error`, on every answer of
/// 400 or more, and closed when idle for `idle_timeout_ms`, or sooner for
/// `Limits::header_read_timeout` (hyper's head timer runs while a kept-alive
/// connection waits for its next request).
async fn connection(stream: TcpStream, shared: Arc<Shared>, cancel: CancellationToken) {
    let limits = shared.limits.clone();
    let keep = shared.scenario.api.keep_alive;
    let state = Arc::new((Mutex::new(ConnState { served: 0, busy: 0, idle_since: Instant::now() }), Notify::new()));
    let service = {
        let state = state.clone();
        service_fn(move |req| kept_alive(shared.clone(), state.clone(), req))
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .auto_date_header(false)
        .keep_alive(keep.enabled)
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_header_size(limits.max_header_bytes);
    let conn = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let idle_timeout = (keep.enabled && keep.idle_timeout_ms > 0).then(|| Duration::from_millis(keep.idle_timeout_ms));
    // Errors are clients that went away, timed out or sent garbage (hyper
    // answered it 400 or 431): nothing more to do for them.
    loop {
        let changed = state.1.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let idle_until = {
            let c = lock(&state.0);
            idle_timeout.filter(|_| c.busy == 0).map(|t| c.idle_since + t)
        };
        tokio::select! {
            biased;
            _ = conn.as_mut() => return,
            () = cancel.cancelled() => break,
            () = &mut changed => {}
            () = tokio::time::sleep_until(idle_until.unwrap_or_else(Instant::now)), if idle_until.is_some() => break,
        }
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// [`handle`], with the connection's count of answers and the scenario's
/// `Connection: close` habits.
async fn kept_alive(
    shared: Arc<Shared>,
    state: Arc<(Mutex<ConnState>, Notify)>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Cut> {
    let keep = shared.scenario.api.keep_alive;
    lock(&state.0).busy += 1;
    let answer = handle(shared, req).await;
    let mut c = lock(&state.0);
    c.busy -= 1;
    c.idle_since = Instant::now();
    let mut res = answer?;
    c.served += 1;
    if keep.closes_after(c.served, res.status().as_u16()) {
        res.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    drop(c);
    state.1.notify_one();
    Ok(res)
}

/// The answer was cut on purpose (a lost answer), or the client went away.
#[derive(Debug)]
struct Cut;

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection cut")
    }
}

impl std::error::Error for Cut {}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(format!("{text}\n"))));
    *res.status_mut() = status;
    res.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
    res
}

fn json<T: Serialize>(value: &T) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    let mut res = Response::new(Full::new(Bytes::from(body)));
    res.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    res
}

async fn handle(shared: Arc<Shared>, req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Cut> {
    let (parts, body) = req.into_parts();
    let limits = &shared.limits;
    let read = tokio::time::timeout(limits.body_read_timeout, Limited::new(body, limits.max_body_bytes).collect());
    let body = match read.await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            shared.door.rejected.fetch_add(1, Ordering::Relaxed);
            let why = format!("request body larger than {} bytes", limits.max_body_bytes);
            return Ok(plain(StatusCode::PAYLOAD_TOO_LARGE, &why));
        }
        // The client went away mid-body: nobody to answer.
        Ok(Err(_)) => return Err(Cut),
        Err(_) => {
            shared.door.rejected.fetch_add(1, Ordering::Relaxed);
            let why = format!("request body not received within {} ms", limits.body_read_timeout.as_millis());
            let mut res = plain(StatusCode::REQUEST_TIMEOUT, &why);
            res.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
            return Ok(res);
        }
    };
    let req = Request::from_parts(parts, body);
    if req.uri().path().starts_with(CONTROL_PREFIX) {
        return Ok(control(&shared, &req));
    }
    api(shared, req).await
}

/// `GET /__retrysim/ledger`, `GET /__retrysim/report`, `POST /__retrysim/reset`.
fn control(shared: &Shared, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    let what = &req.uri().path()[CONTROL_PREFIX.len()..];
    match (req.method(), what) {
        (&Method::GET, "ledger") => json(lock(&shared.current()).api.ledger()),
        (&Method::GET, "report") => {
            let round = shared.current();
            let round = lock(&round);
            json(&shared.report(&round))
        }
        (&Method::POST, "reset") => json(&reset(shared)),
        _ => plain(
            StatusCode::NOT_FOUND,
            "control requests: GET /__retrysim/ledger, GET /__retrysim/report, POST /__retrysim/reset",
        ),
    }
}

/// One request to the model, with the network faults served around it.
async fn api(shared: Arc<Shared>, req: Request<Bytes>) -> Result<Response<Full<Bytes>>, Cut> {
    let round = shared.current();
    let now = lock(&round).now();
    let held = shared.delay(now);
    if !held.is_zero() {
        tokio::time::sleep(held).await;
    }
    let begin = {
        let mut r = lock(&round);
        if r.api.ledger().arrivals.len() >= shared.limits.max_arrivals {
            drop(r);
            shared.door.rejected.fetch_add(1, Ordering::Relaxed);
            let why = format!("the ledger holds {} requests: POST /__retrysim/reset", shared.limits.max_arrivals);
            return Ok(plain(StatusCode::SERVICE_UNAVAILABLE, &why));
        }
        let now = r.now();
        while let Some(f) = shared.schedule.get(r.next_loss).filter(|f| f.at <= now) {
            if f.fault == Fault::LoseAnswer {
                r.faults.lose_next += 1;
            }
            r.next_loss += 1;
        }
        r.api.begin(&req, now)
    };
    let res = match begin {
        Begin::Answer(res) => res,
        Begin::Run(ticket) => {
            // The work runs on its own task: a client that hangs up does
            // not stop it (nor leave its key in progress), as on a real server.
            let (worker, origin) = (round.clone(), lock(&round).origin);
            let run = tokio::spawn(async move {
                tokio::time::sleep_until(origin + ticket.ready_at()).await;
                let mut r = lock(&worker);
                let now = r.now();
                r.api.complete(ticket, now)
            });
            run.await.map_err(|_| Cut)?
        }
    };
    let lost = {
        let mut r = lock(&round);
        let lost = r.faults.lose();
        let (now, index) = (r.now(), arrival_index(&res));
        r.api.loss_decided(now, index, lost);
        if lost && let Some(i) = index {
            r.api.answer_lost(i);
        }
        lost
    };
    if lost {
        return Err(Cut);
    }
    let held = shared.delay(lock(&round).now());
    if !held.is_zero() {
        tokio::time::sleep(held).await;
    }
    let (parts, body) = res.into_parts();
    Ok(Response::from_parts(parts, Full::new(body)))
}

/// One ledger-only check and what broke it.
#[derive(Debug, Clone, Serialize)]
pub struct CheckVerdict {
    /// The check.
    pub check: BlackBoxCheck,
    /// The docs/DESIGN.md invariant it is the ledger-only form of.
    pub invariant: u8,
    /// Whether it held.
    pub holds: bool,
    /// What broke it, for people.
    pub violations: Vec<String>,
}

/// The checks `serve` runs, in this order.
pub(crate) const CHECKS: [BlackBoxCheck; 5] = [
    BlackBoxCheck::OneChargePerKey,
    BlackBoxCheck::OneKeyPerJob,
    BlackBoxCheck::EarlyRetry,
    BlackBoxCheck::AfterTerminal,
    BlackBoxCheck::UnkeyedReplay,
];

/// What a round of `serve` saw, and the verdict of the ledger-only checks.
#[derive(Debug, Clone, Serialize)]
pub struct ServeReport {
    /// The scenario served.
    pub scenario: String,
    /// The seed of the server's draws.
    pub seed: u64,
    /// The round (1, then one more per reset).
    pub round: u32,
    /// Wall time since the round's virtual zero (the whole second it began in).
    pub elapsed_ms: u64,
    /// Requests that reached the API (control requests and refused connections excluded).
    pub requests: u64,
    /// Answers with status 429.
    pub limited: u64,
    /// Requests the API charged for.
    pub charged: u64,
    /// Answers lost on purpose after the request ran.
    pub lost_answers: u64,
    /// Charges per idempotency key (shortened: keys are secrets), `(no key)` for unkeyed ones.
    pub charges: BTreeMap<String, u32>,
    /// Connections accepted in this round.
    pub connections_accepted: u64,
    /// Connections refused (over `Limits::max_connections`) in this round.
    pub connections_refused: u64,
    /// Requests turned away before the model (body too large or too slow, ledger full) in this round.
    pub requests_rejected: u64,
    /// Scheduled faults of the scenario that need the simulated network.
    pub faults_not_served: Vec<String>,
    /// Each ledger-only check.
    pub checks: Vec<CheckVerdict>,
    /// Whether any check broke.
    pub broken: bool,
    /// On stop: whether every connection finished within the drain timeout.
    pub drained: bool,
}

/// The operation a request belongs to: its client label, else its key,
/// else what it asks for (account, method, path and body): a client that
/// adds no header of its own is judged too, and the same request sent again
/// is the same operation.
fn operation(a: &Arrival) -> Option<String> {
    if a.client != "(unknown)" {
        return Some(a.client.clone());
    }
    if let Some(k) = &a.idempotency_key {
        return Some(format!("key {}", crate::trace::short_key(k)));
    }
    let account = a.account.as_deref().unwrap_or("(no account)");
    Some(format!("{} {} from {account}, body {:08x}", a.method, a.path, a.body_digest >> 32))
}

/// The scenario the checks judge a real socket by: loopback needs no
/// latency bound beyond zero, and only the faults served apply.
fn as_served(shared: &Shared) -> Scenario {
    let mut s = shared.scenario.clone();
    s.net.min_latency = Duration::ZERO;
    s.net.max_latency = Duration::ZERO;
    s.net.tick = Duration::ZERO;
    s.faults.schedule = shared.schedule.clone();
    s
}

impl ServeReport {
    fn of(shared: &Shared, round: &Round) -> ServeReport {
        let ledger = round.api.ledger();
        let door = shared.door.counts();
        let found = check_ledger(ledger, &as_served(shared), &operation);
        let checks: Vec<CheckVerdict> = CHECKS
            .iter()
            .map(|&check| {
                let violations: Vec<String> =
                    found.iter().filter(|v| v.check == check).map(ToString::to_string).collect();
                CheckVerdict { check, invariant: check.invariant().number(), holds: violations.is_empty(), violations }
            })
            .collect();
        let charges = ledger
            .charges
            .iter()
            .map(|(k, n)| (if k == NO_KEY { k.clone() } else { crate::trace::short_key(k) }, *n))
            .collect();
        ServeReport {
            scenario: shared.scenario.name.clone(),
            seed: shared.seed,
            round: round.number,
            elapsed_ms: u64::try_from(round.now().as_millis()).unwrap_or(u64::MAX),
            requests: ledger.arrivals.len() as u64,
            limited: ledger.arrivals.iter().filter(|a| a.status == 429).count() as u64,
            charged: ledger.charged,
            lost_answers: ledger.arrivals.iter().filter(|a| a.lost).count() as u64,
            charges,
            connections_accepted: door[0] - round.door_at_start[0],
            connections_refused: door[1] - round.door_at_start[1],
            requests_rejected: door[2] - round.door_at_start[2],
            faults_not_served: shared.not_served.clone(),
            broken: checks.iter().any(|c| !c.holds),
            checks,
            drained: false,
        }
    }

    /// The check's verdict, if it ran.
    pub fn check(&self, check: BlackBoxCheck) -> Option<&CheckVerdict> {
        self.checks.iter().find(|c| c.check == check)
    }

    /// The report for people: figures, then one line per check.
    pub fn render_text(&self) -> String {
        let mut out = format!(
            "scenario           {}\nseed               {}\nround              {}\nelapsed            {} ms\n",
            self.scenario, self.seed, self.round, self.elapsed_ms
        );
        out += &format!("requests           {}\n", self.requests);
        out += &format!("limited (429)      {}\n", self.limited);
        out += &format!("charged            {}\n", self.charged);
        out += &format!("lost answers       {}\n", self.lost_answers);
        let unkeyed = self.charges.get(NO_KEY).copied().unwrap_or(0);
        let keyed: Vec<u32> = self.charges.iter().filter(|(k, _)| k.as_str() != NO_KEY).map(|(_, n)| *n).collect();
        let twice = keyed.iter().filter(|&&n| n > 1).count();
        out += &format!("charges per key    {} keys, {twice} charged more than once; {unkeyed} unkeyed\n", keyed.len());
        for (k, n) in self.charges.iter().filter(|(k, n)| k.as_str() != NO_KEY && **n > 1) {
            out += &format!("                   key {k} charged {n} times\n");
        }
        out += &format!(
            "connections        {} accepted, {} refused; {} requests rejected before the API\n",
            self.connections_accepted, self.connections_refused, self.requests_rejected
        );
        for f in &self.faults_not_served {
            out += &format!("not served         {f} (needs the simulated network)\n");
        }
        out += "checks (ledger only)\n";
        for c in &self.checks {
            let verdict = if c.holds { "holds " } else { "BROKEN" };
            out += &format!("  {verdict} {} (invariant {})\n", c.check, c.invariant);
            for v in &c.violations {
                out += &format!("           {v}\n");
            }
        }
        let broken = self.checks.iter().filter(|c| !c.holds).count();
        out += &if broken == 0 {
            format!("verdict            every check holds ({} of {})", self.checks.len(), self.checks.len())
        } else {
            format!("verdict            BROKEN: {broken} of {} checks", self.checks.len())
        };
        out
    }
}
