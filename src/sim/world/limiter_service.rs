//! A limiter service: one fleet gate on its own host, asked over the
//! simulated network by workers that run as separate hosts.
//!
//! Brief 003: "Coordinate limits across processes; a semaphore inside one
//! worker cannot control twenty separate workers." With `fleet.hosts =
//! "per_worker"` every worker is its own turmoil host, so nothing in memory
//! is shared; with `fleet.coordinator` set, the fleet's gate (e.g. AIMD)
//! runs on the `limiter` host and every worker holds a [`RemoteGate`].
//!
//! # The protocol
//! A line protocol on one TCP connection per worker:
//!
//! | worker → service | service → worker | meaning |
//! |---|---|---|
//! | `HELLO <worker>` | | identifies the worker; an older session of the same worker is closed and its slots freed |
//! | `ACQUIRE` | `WAIT` every `heartbeat`, then `GRANT` | wait in the service's FIFO queue for a slot |
//! | `DONE <status or -> <class>` | | the attempt ended: free the slot, adapt the limit |
//!
//! A slot (a *lease*) is also freed when its worker's connection ends, when
//! the same worker says `HELLO` again, or after `lease` without a `DONE`.
//!
//! # Partitioned away: fail open, with local limits
//! A worker that hears nothing for `silence` while it waits, or cannot
//! connect within `connect_timeout`, gives its attempts to its own fallback
//! gate (a fixed [`crate::gate::aimd::Aimd`]: by default one in
//! flight and at most one every 10 s), and tries the service again after
//! `retry_after`. The reasons are in
//! [`CoordinatorConfig`]; the
//! property tests check that no worker exceeds its fallback limit while the
//! service is unreachable, and that the batch still completes.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use turmoil::net::TcpStream;
use turmoil::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::core::classify::Class;
use crate::core::duration_text;
use crate::gate::aimd::Aimd;
use crate::gate::aimd::AimdConfig;
use crate::gate::{Admission, Feedback, Gate};
use crate::locks::lock;
use crate::sim::world::net::sim_now;
use crate::sim::world::timers::{self, SimClock};

/// The limiter service that coordinates per-worker hosts, and what a worker
/// does when it cannot reach it.
///
/// **Partitioned away, a worker fails open with local limits**: it keeps
/// working, but only through its own `fallback` gate (by default one attempt
/// in flight and at most one every 10 s), until it reaches the service
/// again. Failing closed would turn an outage of a helper service into an
/// outage of the whole batch, while the API's own limiter still protects
/// the API; failing open *without* limits would let every worker send at
/// will at the moment the fleet has lost its coordination. Set the fallback
/// so that `workers × fallback rate` stays under the API's limit (Envoy's
/// global rate limit filter fails open by default for the same reason).
///
/// # Default
/// `fallback = { initial_limit = 1, rate 0.1/s, fixed }`, `silence = 2s`,
/// `heartbeat = 500ms`, `connect_timeout = 500ms`, `retry_after = 5s`,
/// `lease = 60s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoordinatorConfig {
    /// Each worker's own limiter while the service is unreachable.
    pub fallback: AimdConfig,
    /// A worker that hears nothing from the service for this long while
    /// waiting for a slot falls back (the service sends `WAIT` every `heartbeat`).
    #[serde(with = "duration_text")]
    pub silence: Duration,
    /// How often the service tells a queued worker it is still there.
    #[serde(with = "duration_text")]
    pub heartbeat: Duration,
    /// How long a connection attempt to the service may take.
    #[serde(with = "duration_text")]
    pub connect_timeout: Duration,
    /// How long a worker stays on its fallback before trying the service again.
    #[serde(with = "duration_text")]
    pub retry_after: Duration,
    /// The service reclaims a slot whose worker has not reported back for
    /// this long (keep it above the policy's `attempt_timeout`).
    #[serde(with = "duration_text")]
    pub lease: Duration,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            fallback: AimdConfig::fixed(1, 100),
            silence: Duration::from_secs(2),
            heartbeat: Duration::from_millis(500),
            connect_timeout: Duration::from_millis(500),
            retry_after: Duration::from_secs(5),
            lease: Duration::from_secs(60),
        }
    }
}

/// The limiter service's host name.
pub(crate) const LIMITER_HOST: &str = "limiter";
/// Its port.
pub(crate) const LIMITER_PORT: u16 = 7070;

fn class_name(class: Class) -> &'static str {
    match class {
        Class::Success => "success",
        Class::Throttled => "throttled",
        Class::Terminal => "terminal",
        Class::Unclear => "unclear",
        Class::InProgress => "in_progress",
        Class::Transient => "transient",
        Class::Ambiguous => "ambiguous",
    }
}

fn parse_class(name: &str) -> Option<Class> {
    Some(match name {
        "success" => Class::Success,
        "throttled" => Class::Throttled,
        "terminal" => Class::Terminal,
        "unclear" => Class::Unclear,
        "in_progress" => Class::InProgress,
        "transient" => Class::Transient,
        "ambiguous" => Class::Ambiguous,
        _ => return None,
    })
}

/// A `DONE` line for an attempt's outcome.
fn done_line(status: Option<u16>, class: Class) -> String {
    let status = status.map_or_else(|| "-".to_owned(), |s| s.to_string());
    format!("DONE {status} {}\n", class_name(class))
}

/// A freed slot that says nothing about load (a lease reclaimed, a session gone).
fn release(gate: &dyn Gate, log: &ServiceLog, session: u64, worker: Option<u32>) {
    lock(log).told.push(Told { at: sim_now(), session, worker, done: None });
    gate.done(&Feedback { now: sim_now(), status: None, class: Class::Transient, headers: None });
}

/// What the service told its gate of, one freed slot each: a worker's
/// `DONE`, or a slot freed without one. Kept for the checks
/// (`aimd-backs-off` judges the service's gate by what its workers said).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    /// When the service heard it.
    pub at: Duration,
    /// The session (one connection) whose slot it freed; each session
    /// frees its slots in the order they were granted.
    pub session: u64,
    /// The worker whose session freed it, once it said `HELLO`.
    pub worker: Option<u32>,
    /// The worker's `DONE` line as it arrived (without its newline), or
    /// `None` for a slot freed without one (a lease reclaimed, a session gone).
    pub done: Option<String>,
}

/// A slot the service granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// When it sent `GRANT`.
    pub at: Duration,
    /// The session it granted the slot to.
    pub session: u64,
    /// That session's worker, once it said `HELLO`.
    pub worker: Option<u32>,
}

/// A worker said `HELLO` on a session: from then on that session is its
/// current one, and any older session of the same worker is closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// When the service heard it.
    pub at: Duration,
    /// The session (one connection) it arrived on.
    pub session: u64,
    /// The worker it named.
    pub worker: u32,
}

/// What the service records for the checks: each slot granted, each freed,
/// each `HELLO`.
#[derive(Debug, Default)]
pub(crate) struct ServiceRecord {
    pub(crate) granted: Vec<Granted>,
    pub(crate) told: Vec<Told>,
    pub(crate) hellos: Vec<Hello>,
}

/// Where the service records its grants and what its gate was told.
pub(crate) type ServiceLog = Arc<Mutex<ServiceRecord>>;

/// The service's state shared by its sessions: each worker's current session.
#[derive(Default)]
struct Sessions {
    next_id: u64,
    by_worker: BTreeMap<u32, (u64, CancellationToken)>,
}

/// Longer than any run: a timer that stands for "never".
const NEVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// The limiter host's program: serve `gate` to the workers.
/// Every slot it grants and frees is recorded in `log`.
pub(crate) async fn serve_limiter(gate: Arc<dyn Gate>, config: CoordinatorConfig, log: ServiceLog) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), LIMITER_PORT)).await?;
    let sessions = Arc::new(Mutex::new(Sessions::default()));
    loop {
        let (stream, _) = listener.accept().await?;
        let (gate, sessions, log) = (gate.clone(), sessions.clone(), log.clone());
        tokio::spawn(async move { session(gate, stream, config, sessions, log).await });
    }
}

/// One worker's connection. Every slot it was granted and has not reported
/// back is freed when it ends, however it ends.
async fn session(
    gate: Arc<dyn Gate>,
    stream: TcpStream,
    config: CoordinatorConfig,
    sessions: Arc<Mutex<Sessions>>,
    log: ServiceLog,
) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let closed = CancellationToken::new();
    let id = {
        let mut s = lock(&sessions);
        s.next_id += 1;
        s.next_id
    };
    // Grant times of the slots this worker holds, oldest first.
    let mut held: VecDeque<Duration> = VecDeque::new();
    let mut worker = None;
    loop {
        let expiry = held.front().map(|&t| (t + config.lease).saturating_sub(sim_now()));
        let line = tokio::select! {
            biased;
            _ = closed.cancelled() => break,
            _ = timers::sleep(expiry.unwrap_or(NEVER)), if expiry.is_some() => {
                // A lease ran out: the worker never said DONE.
                held.pop_front();
                release(gate.as_ref(), &log, id, worker);
                continue;
            }
            line = lines.next_line() => line,
        };
        let Ok(Some(line)) = line else { break };
        let mut words = line.split_ascii_whitespace();
        match words.next() {
            Some("HELLO") => {
                let Some(w) = words.next().and_then(|w| w.parse::<u32>().ok()) else { break };
                worker = Some(w);
                lock(&log).hellos.push(Hello { at: sim_now(), session: id, worker: w });
                if let Some((_, old)) = lock(&sessions).by_worker.insert(w, (id, closed.clone())) {
                    old.cancel();
                }
            }
            Some("ACQUIRE") => {
                let mut admit = gate.admit();
                let granted = loop {
                    tokio::select! {
                        biased;
                        _ = closed.cancelled() => break false,
                        _ = &mut admit => break true,
                        _ = timers::sleep(config.heartbeat) => {
                            if write.write_all(b"WAIT\n").await.is_err() {
                                break false;
                            }
                        }
                    }
                };
                if !granted {
                    break;
                }
                held.push_back(sim_now());
                lock(&log).granted.push(Granted { at: sim_now(), session: id, worker });
                if write.write_all(b"GRANT\n").await.is_err() {
                    break;
                }
            }
            Some("DONE") => {
                let status = words.next().and_then(|s| s.parse::<u16>().ok());
                let class = words.next().and_then(parse_class).unwrap_or(Class::Transient);
                if held.pop_front().is_some() {
                    lock(&log).told.push(Told { at: sim_now(), session: id, worker, done: Some(line.clone()) });
                    gate.done(&Feedback { now: sim_now(), status, class, headers: None });
                }
            }
            _ => break,
        }
    }
    for _ in held.drain(..) {
        release(gate.as_ref(), &log, id, worker);
    }
    if let Some(w) = worker {
        let mut s = lock(&sessions);
        if s.by_worker.get(&w).is_some_and(|(current, _)| *current == id) {
            s.by_worker.remove(&w);
        }
    }
}

/// Which gate let an attempt through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// The limiter service.
    Service,
    /// The worker's own fallback gate.
    Fallback,
}

/// A worker switched between the service and its fallback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteFact {
    /// The worker that switched.
    pub worker: u32,
    /// When, in virtual time.
    #[serde(serialize_with = "as_ms")]
    pub at: Duration,
    /// The route it switched to.
    pub route: Route,
}

fn as_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

/// Where workers record their route switches.
pub(crate) type RouteLog = Arc<Mutex<Vec<RouteFact>>>;

enum Command {
    Acquire(oneshot::Sender<Route>),
    Done(String),
}

/// A worker's gate: the limiter service while it answers, the worker's own
/// fallback gate while it does not (see the module doc).
pub struct RemoteGate {
    commands: mpsc::UnboundedSender<Command>,
    /// Told when the connection to the service is (re)established.
    reconnected: Arc<Notify>,
    fallback: Aimd<SimClock>,
    /// How long this worker holds its first fallback admission after losing
    /// the service, so the fleet does not fall back in one synchronized burst.
    stagger: Duration,
    /// The route of the last admission.
    last: Mutex<Option<Route>>,
    /// The route of each admitted attempt that has not reported back, oldest first.
    outstanding: Mutex<VecDeque<Route>>,
}

impl std::fmt::Debug for RemoteGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteGate").field("fallback", &self.fallback).finish()
    }
}

impl RemoteGate {
    /// Starts worker `worker`'s connection to the service (a task on the
    /// current host) with `fallback` as its local limiter. Each time the
    /// worker falls back, its first fallback admission waits `stagger`
    /// (the fleet spreads this over one fallback interval by worker index).
    pub fn start(
        worker: u32,
        config: CoordinatorConfig,
        fallback: Aimd<SimClock>,
        stagger: Duration,
        routes: RouteLog,
    ) -> RemoteGate {
        let (commands, rx) = mpsc::unbounded_channel();
        let reconnected = Arc::new(Notify::new());
        tokio::spawn(connection(worker, config, rx, routes, reconnected.clone()));
        RemoteGate {
            commands,
            reconnected,
            fallback,
            stagger,
            last: Mutex::new(None),
            outstanding: Mutex::new(VecDeque::new()),
        }
    }
}

impl Gate for RemoteGate {
    fn admit(&self) -> Admission<'_> {
        Box::pin(async move {
            loop {
                // Listen before asking, so a reconnection during the
                // fallback wait below is not missed.
                let reconnected = self.reconnected.notified();
                tokio::pin!(reconnected);
                reconnected.as_mut().enable();
                let (tx, rx) = oneshot::channel();
                let route = match self.commands.send(Command::Acquire(tx)) {
                    Ok(()) => rx.await.unwrap_or(Route::Fallback),
                    Err(_) => Route::Fallback,
                };
                let switched = lock(&self.last).replace(route) != Some(route);
                if route == Route::Fallback {
                    if switched {
                        self.fallback.hold_for(self.stagger);
                    }
                    // The service may come back while the fallback paces us:
                    // then leave the fallback's queue and ask the service.
                    tokio::select! {
                        biased;
                        _ = &mut reconnected => continue,
                        _ = self.fallback.admit() => {}
                    }
                }
                lock(&self.outstanding).push_back(route);
                return;
            }
        })
    }

    fn done(&self, feedback: &Feedback<'_>) {
        let route = lock(&self.outstanding).pop_front();
        match route {
            Some(Route::Service) => {
                let _ = self.commands.send(Command::Done(done_line(feedback.status, feedback.class)));
            }
            Some(Route::Fallback) => self.fallback.done(feedback),
            None => {}
        }
    }

    fn queued(&self) -> usize {
        self.fallback.queued()
    }
}

struct Connection {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

async fn connect(worker: u32, timeout: Duration) -> Option<Connection> {
    let stream = timers::timeout(timeout, TcpStream::connect((LIMITER_HOST, LIMITER_PORT))).await.ok()?.ok()?;
    let (read, mut write) = stream.into_split();
    write.write_all(format!("HELLO {worker}\n").as_bytes()).await.ok()?;
    Some(Connection { lines: BufReader::new(read).lines(), write })
}

/// Sends `ACQUIRE` and waits for `GRANT`; `Err` after `silence` without a word.
async fn acquire(c: &mut Connection, silence: Duration) -> Result<(), ()> {
    c.write.write_all(b"ACQUIRE\n").await.map_err(drop)?;
    loop {
        match timers::timeout(silence, c.lines.next_line()).await {
            Ok(Ok(Some(line))) if line == "GRANT" => return Ok(()),
            Ok(Ok(Some(line))) if line == "WAIT" => {}
            _ => return Err(()),
        }
    }
}

type Connecting = Pin<Box<dyn Future<Output = Option<Connection>> + Send>>;

/// The worker side of the protocol: one connection, commands in order.
/// While there is no connection, every `ACQUIRE` is answered with the
/// fallback at once, and a reconnection is tried every `retry_after` in
/// the background; success wakes any attempt waiting on the fallback.
async fn connection(
    worker: u32,
    config: CoordinatorConfig,
    mut commands: mpsc::UnboundedReceiver<Command>,
    routes: RouteLog,
    reconnected: Arc<Notify>,
) {
    let dial = move || -> Connecting { Box::pin(connect(worker, config.connect_timeout)) };
    let mut conn: Option<Connection> = None;
    let mut connecting: Option<Connecting> = Some(dial());
    let mut retry_at = Duration::ZERO;
    let mut last_route = None;
    loop {
        let idle = conn.is_none() && connecting.is_none();
        let command = tokio::select! {
            biased;
            dialled = async { connecting.as_mut().expect("guarded").await }, if connecting.is_some() => {
                connecting = None;
                conn = dialled;
                if conn.is_some() {
                    reconnected.notify_waiters();
                } else {
                    retry_at = sim_now() + config.retry_after;
                }
                continue;
            }
            _ = timers::sleep(retry_at.saturating_sub(sim_now())), if idle => {
                connecting = Some(dial());
                continue;
            }
            command = commands.recv() => command,
        };
        let Some(command) = command else { break };
        match command {
            Command::Done(line) => {
                if let Some(c) = &mut conn
                    && c.write.write_all(line.as_bytes()).await.is_err()
                {
                    conn = None;
                    retry_at = sim_now() + config.retry_after;
                }
            }
            Command::Acquire(reply) => {
                // A dial in progress (at start, or a retry) is worth its
                // bounded wait: it may spare this attempt the fallback.
                if let Some(dialling) = connecting.take() {
                    conn = dialling.await;
                    if conn.is_some() {
                        reconnected.notify_waiters();
                    } else {
                        retry_at = sim_now() + config.retry_after;
                    }
                }
                let granted = match &mut conn {
                    Some(c) => Some(acquire(c, config.silence).await.is_ok()),
                    None => None,
                };
                let route = match granted {
                    Some(true) => Route::Service,
                    Some(false) => {
                        conn = None;
                        retry_at = sim_now() + config.retry_after;
                        Route::Fallback
                    }
                    None => Route::Fallback,
                };
                if last_route != Some(route) {
                    last_route = Some(route);
                    lock(&routes).push(RouteFact { worker, at: sim_now(), route });
                }
                if reply.send(route).is_err()
                    && route == Route::Service
                    && let Some(c) = &mut conn
                {
                    // The attempt was cancelled while the grant travelled: give it back.
                    let _ = c.write.write_all(done_line(None, Class::Transient).as_bytes()).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn done_lines_round_trip_every_class() {
        for class in [
            Class::Success,
            Class::Throttled,
            Class::Terminal,
            Class::Unclear,
            Class::InProgress,
            Class::Transient,
            Class::Ambiguous,
        ] {
            assert_eq!(parse_class(class_name(class)), Some(class));
        }
        assert_eq!(done_line(Some(429), Class::Throttled), "DONE 429 throttled\n");
        assert_eq!(done_line(None, Class::Ambiguous), "DONE - ambiguous\n");
    }
}
