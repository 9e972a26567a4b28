//! The simulated network: a [`Transport`] that speaks HTTP/1.1 with hyper
//! over turmoil TCP, the API served the same way, and the faults that the
//! runner switches on and off at scheduled virtual times.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

use crate::core::classify::TransportFailure;
use crate::core::duration_text;
use crate::core::lock;
use crate::env::{Rng, Transport, TransportError, exchange, seeded_rng};
use crate::sim::world::api::{Api, Begin};
use crate::sim::world::timers;

/// The API's host name in the simulated network.
pub(crate) const API_HOST: &str = "api";
/// The API's port.
pub(crate) const API_PORT: u16 = 80;

/// Virtual time since the simulation started (zero outside a simulation).
pub(crate) fn sim_now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// A fault at a scheduled virtual time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// The next answer the API produces after `at` is lost after the handler
    /// ran (and charged): the connection is cut before the answer leaves.
    LoseAnswer,
    /// Every message between the fleet and the API takes `latency` until `until`.
    LatencySpike {
        /// What each message takes meanwhile.
        #[serde(with = "duration_text")]
        latency: Duration,
        /// When it heals, in virtual time since the run began.
        #[serde(with = "duration_text")]
        until: Duration,
    },
    /// The fleet and the API cannot reach each other until `until`.
    Partition {
        /// When it heals, in virtual time since the run began.
        #[serde(with = "duration_text")]
        until: Duration,
    },
    /// Messages between the fleet and the API are held (not lost) until `until`.
    Hold {
        /// When it heals, in virtual time since the run began.
        #[serde(with = "duration_text")]
        until: Duration,
    },
    /// The API process restarts: open connections break; its state (the
    /// limiter, the idempotency store) lives on, as a real database would.
    Bounce,
    /// The fleet's workers cannot reach the limiter service (per-worker
    /// hosts with a coordinator) until `until`; the API stays reachable.
    LimiterPartition {
        /// When it heals, in virtual time since the run began.
        #[serde(with = "duration_text")]
        until: Duration,
    },
    /// The fleet's caller cancels every front-end job running at `at` (a
    /// user who closed the page, a deploy draining its workers). Each must
    /// end within one clock step, whether it was waiting to retry, queued
    /// at a gate or waiting for an answer (invariant 12).
    Cancel,
}

impl Fault {
    /// When the fault heals, for faults that last.
    pub fn until(&self) -> Option<Duration> {
        match self {
            Fault::LatencySpike { until, .. }
            | Fault::Partition { until }
            | Fault::Hold { until }
            | Fault::LimiterPartition { until } => Some(*until),
            Fault::LoseAnswer | Fault::Bounce | Fault::Cancel => None,
        }
    }
}

/// A class of transport fault as a client sees it, whatever caused it. A
/// client path that cannot express one of these to the retry code above it
/// declares it a [`BlindSpot`](crate::sim::run::subject::BlindSpot), and a
/// scenario that injects it is then not applicable to that client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultClass {
    /// No connection could be made, so nothing was sent (a partition, a
    /// restarting API): retrysim's [`TransportFailure::NotSent`].
    ConnectFailed,
    /// The request reached the API and may have run, and its answer never
    /// came (a lost answer, a restart or a partition mid-exchange):
    /// retrysim's [`TransportFailure::MaybeArrived`].
    AnswerLost,
    /// An answer held or slowed long enough for a client's own timeout to
    /// fire (a hold, a latency spike): the request may have run.
    AnswerLate,
}

impl FaultClass {
    /// Every class, in order.
    pub const ALL: [FaultClass; 3] = [FaultClass::ConnectFailed, FaultClass::AnswerLost, FaultClass::AnswerLate];

    /// The class's name in reports: `connect-failed`, `answer-lost`, `answer-late`.
    pub fn name(self) -> &'static str {
        match self {
            FaultClass::ConnectFailed => "connect-failed",
            FaultClass::AnswerLost => "answer-lost",
            FaultClass::AnswerLate => "answer-late",
        }
    }

    /// The classes `fault` can show a client.
    pub fn of_fault(fault: &Fault) -> &'static [FaultClass] {
        match fault {
            Fault::LoseAnswer => &[FaultClass::AnswerLost],
            Fault::Partition { .. } | Fault::Bounce => &[FaultClass::ConnectFailed, FaultClass::AnswerLost],
            Fault::Hold { .. } | Fault::LatencySpike { .. } => &[FaultClass::AnswerLate],
            // Between the workers and the limiter service, or the caller's
            // own cancellation: nothing between the client and the API.
            Fault::LimiterPartition { .. } | Fault::Cancel => &[],
        }
    }
}

impl std::fmt::Display for FaultClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A fault and the virtual time it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledFault {
    /// When the fault starts, in virtual time since the run began.
    #[serde(with = "duration_text")]
    pub at: Duration,
    /// What happens then, e.g. `{ kind = "partition", until = "3s" }`.
    pub fault: Fault,
}

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

async fn handle(server: Arc<Server>, req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, AnswerLost> {
    let (parts, body) = req.into_parts();
    // A body that breaks mid-way is a client that went away: no answer needed.
    // Copied: hyper's body is a slice of the connection's read buffer, and the
    // idempotency store keeps a key's first body for the whole run, which
    // would keep every such buffer alive with it (about 260 bytes a request
    // in a 100,000-job run, by heaptrack).
    let body = Bytes::copy_from_slice(&body.collect().await.map_err(|_| AnswerLost)?.to_bytes());
    let req = Request::from_parts(parts, body);
    let begin = lock(&server.api).begin(&req, sim_now());
    let res = match begin {
        Begin::Answer(res) => res,
        Begin::Run(ticket) => {
            // The work runs on its own task: a client that hangs up (an
            // attempt timeout) does not stop it, as on a real server.
            let processing = Duration::from_millis(lock(&server.api).config().processing_ms);
            let worker = server.clone();
            let run = tokio::spawn(async move {
                timers::sleep(processing).await;
                lock(&worker.api).complete(ticket, sim_now())
            });
            run.await.map_err(|_| AnswerLost)?
        }
    };
    if lock(&server.faults).lose() {
        if let Some(i) = crate::sim::world::api::arrival_index(&res) {
            lock(&server.api).answer_lost(i);
        }
        return Err(AnswerLost);
    }
    let (parts, body) = res.into_parts();
    Ok(Response::from_parts(parts, Full::new(body)))
}

/// The API host's program: accept connections and serve each with hyper.
/// `Date` comes from the model's (simulated, possibly skewed) clock, never
/// from hyper's, which reads the real one.
pub(crate) async fn serve(server: Arc<Server>) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), API_PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let server = server.clone();
        // A local task, not `tokio::spawn`: a bounce drops the host's tasks,
        // and each dropped connection sends a message whose latency turmoil
        // draws from the seeded generator. The runtime drops spawned tasks in
        // an order that depends on tokio's process-wide task ids (so on what
        // ran before in the process); a LocalSet drops its tasks in spawn
        // order. Found by `retrysim hunt` (invariant 8).
        tokio::task::spawn_local(async move {
            let service = service_fn(move |req| handle(server.clone(), req));
            let mut http = hyper::server::conn::http1::Builder::new();
            http.auto_date_header(false).keep_alive(false).header_read_timeout(None);
            // Errors here are connections the client or a fault cut: the
            // client's side records them.
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// A [`Transport`] over turmoil TCP to the API host, one connection per attempt.
#[derive(Debug, Clone, Default)]
pub struct SimTransport;

impl Transport for SimTransport {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        let stream = turmoil::net::TcpStream::connect((API_HOST, API_PORT)).await.map_err(|e| TransportError {
            failure: TransportFailure::NotSent,
            message: format!("connect to the API failed: {e}"),
        })?;
        exchange(stream, req).await
    }
}
