//! A pooled client over [`SimConnector`] against the simulated API, and
//! retrysim's own [`SimTransport`]: what each fault looks like to them, how
//! the API's keep-alive settings decide the connections, and what the
//! harness says of a pool off simulated time. (Tests only: they name both
//! the connector and the network.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::connector::SimConnector;
use crate::core::classify::TransportFailure;
use crate::env::Transport;
use crate::sim::world::api::{Api, ApiConfig, ArrivalOutcome, KeepAlive, Ledger};
use crate::sim::world::net::{API_HOST, CloseTiming, Server, ServerFaults, SimTransport, serve};
use crate::sim::world::timers::{self, SimTimer};

type SimClient = Client<SimConnector, Full<Bytes>>;

/// The client the module doc recommends: hyper-util's default pool on
/// the simulation's clock (`timer`), or on no timer at all. The connector
/// it returns shares the client's connection count.
fn pooled(timer: bool) -> (SimClient, SimConnector) {
    let connector = SimConnector::new();
    let mut b = Client::builder(TokioExecutor::new());
    if timer {
        b.pool_timer(SimTimer);
    }
    (b.build(connector.clone()), connector)
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

async fn via_sim_transport(transport: &SimTransport, req: Request<Full<Bytes>>) -> Seen {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    match transport.send(Request::from_parts(parts, body)).await {
        Ok(res) => Seen::Answer(res.status().as_u16()),
        Err(e) if e.failure == TransportFailure::NotSent => Seen::NotSent,
        Err(_) => Seen::MaybeArrived,
    }
}

/// A fault the test switches on before the client's last request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Setup {
    Healthy,
    Partition,
    LoseNextAnswer,
    /// Hold the link for 2 s after the request leaves.
    Hold,
    CloseRace(CloseTiming),
}

/// Which client sends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Via {
    /// hyper-util over [`SimConnector`], its pool on [`SimTimer`] or on no timer.
    Connector { timer: bool },
    /// retrysim's [`SimTransport`].
    Transport,
}

/// What a run observed: each request's outcome with its virtual send and
/// end times (ms), the API's ledger, the connections the API accepted,
/// and what the harness said of the pool's clock.
type Observed = (Vec<(Seen, u64, u64)>, Ledger, u64, Option<String>);

/// Runs `requests` keyed job POSTs from host "client" to the real API
/// host (a `Server` built as the runner builds one, keeping connections
/// alive as `keep` says), one per virtual second, each bounded by a 5 s
/// timeout of the caller's, with `setup` applied 100 ms before the last.
fn run(setup: Setup, requests: u32, via: Via, keep: KeepAlive) -> Observed {
    let registry = timers::install();
    let mut sim = turmoil::Builder::new()
        .rng_seed(7)
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(2))
        .max_message_latency(Duration::from_millis(10))
        .simulation_duration(Duration::from_secs(60))
        .build();
    let api = Api::new(ApiConfig { processing_ms: 100, keep_alive: keep, ..ApiConfig::default() });
    let server = Arc::new(Server::new(api, ServerFaults::new(0, 11)));
    let host_server = server.clone();
    sim.host(API_HOST, move || serve(host_server.clone()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    sim.client("client", async move {
        let (client, _) = pooled(via == Via::Connector { timer: true });
        let transport = SimTransport::new();
        let t0 = tokio::time::Instant::now();
        for n in 1..=requests {
            tokio::time::sleep_until(t0 + Duration::from_secs(n as u64 - 1)).await;
            let start = crate::sim::world::net::sim_now();
            let send = async {
                match via {
                    Via::Connector { .. } => via_hyper_util(&client, job(n)).await,
                    Via::Transport => via_sim_transport(&transport, job(n)).await,
                }
            };
            let result = timers::timeout(Duration::from_secs(5), send).await.unwrap_or(Seen::MaybeArrived);
            let end = crate::sim::world::net::sim_now();
            out.lock().unwrap().push((result, start.as_millis() as u64, end.as_millis() as u64));
        }
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
                Setup::CloseRace(timing) => server.close_race(timing),
            }
        }
        if setup == Setup::Hold && applied && sim.elapsed() >= fault_at + Duration::from_secs(2) {
            sim.release("client", API_HOST);
        }
    }
    let ledger = server.api.lock().unwrap().ledger().clone();
    let seen = seen.lock().unwrap().clone();
    (seen, ledger, server.connections(), registry.timers.pool_clock_violation())
}

const CONNECTOR: Via = Via::Connector { timer: true };

fn outcomes(seen: &[(Seen, u64, u64)]) -> Vec<Seen> {
    seen.iter().map(|x| x.0.clone()).collect()
}

#[test]
fn a_hyper_util_client_over_the_connector_gets_201s_on_one_connection() {
    let (seen, ledger, connections, clock) = run(Setup::Healthy, 3, CONNECTOR, KeepAlive::default());
    assert_eq!(outcomes(&seen), vec![Seen::Answer(201); 3]);
    assert_eq!(ledger.charged, 3);
    assert!(ledger.arrivals.iter().all(|a| a.outcome == ArrivalOutcome::Charged && !a.lost));
    assert_eq!(ledger.arrivals[2].client, "w0 job-3", "the request's own headers reach the API");
    assert_eq!(connections, 1, "the pool kept the connection and the API kept it open");
    assert_eq!(clock, None);
}

#[test]
fn a_partition_on_a_pooled_connection_is_a_silent_hang_until_the_callers_timeout() {
    let (seen, ledger, connections, _) = run(Setup::Partition, 2, CONNECTOR, KeepAlive::default());
    assert_eq!(seen[0].0, Seen::Answer(201));
    let (what, start, end) = seen[1].clone();
    assert_eq!(what, Seen::MaybeArrived);
    assert!(end - start >= 4_999, "only the caller's 5 s timeout ended it: {start}..{end} ms");
    assert_eq!(ledger.arrivals.len(), 1, "nothing arrived during the partition");
    assert_eq!(connections, 1);
}

#[test]
fn a_lost_answer_is_an_error_after_the_server_charged() {
    let (seen, ledger, _, _) = run(Setup::LoseNextAnswer, 2, CONNECTOR, KeepAlive::default());
    assert_eq!(seen[1].0, Seen::MaybeArrived);
    let last = ledger.arrivals.last().unwrap();
    assert_eq!((last.client.as_str(), last.outcome, last.lost), ("w0 job-2", ArrivalOutcome::Charged, true));
    assert_eq!(ledger.charged, 2, "the server ran the request whose answer was lost");
}

#[test]
fn a_close_before_the_write_is_resent_by_the_pool_and_a_close_after_it_is_ambiguous() {
    // FIN before the write: hyper-util sees it and sends on a new connection.
    let before = CloseTiming::FinBeforeWrite;
    let (seen, ledger, connections, _) = run(Setup::CloseRace(before), 2, CONNECTOR, KeepAlive::default());
    assert_eq!(outcomes(&seen), vec![Seen::Answer(201); 2]);
    assert_eq!((ledger.arrivals.len(), connections), (2, 2));
    // After the write (a FIN or an RST): the request never ran, and the
    // client cannot know that.
    for timing in [CloseTiming::FinAfterWrite, CloseTiming::Rst] {
        let (seen, ledger, connections, _) = run(Setup::CloseRace(timing), 2, CONNECTOR, KeepAlive::default());
        assert_eq!(outcomes(&seen), vec![Seen::Answer(201), Seen::MaybeArrived], "{timing:?}");
        assert_eq!(ledger.arrivals.len(), 1, "{timing:?}: the second request never ran");
        assert_eq!(connections, 1, "{timing:?}");
        let (_, start, end) = seen[1];
        assert!(end - start < 100, "{timing:?}: an error at once, not a timeout: {start}..{end} ms");
    }
}

#[test]
fn the_servers_keep_alive_settings_decide_the_connections() {
    let healthy = |keep| {
        let (seen, _, connections, _) = run(Setup::Healthy, 4, CONNECTOR, keep);
        assert_eq!(outcomes(&seen), vec![Seen::Answer(201); 4], "{keep:?}");
        connections
    };
    let default = KeepAlive::default();
    assert_eq!(healthy(default), 1);
    // Idle for 900 ms between answers, closed after 500 ms idle: a new connection each time.
    assert_eq!(healthy(KeepAlive { idle_timeout_ms: 500, ..default }), 4);
    assert_eq!(healthy(KeepAlive { max_requests: 2, ..default }), 2);
    assert_eq!(healthy(KeepAlive { enabled: false, ..default }), 4);
}

#[test]
fn every_fault_reaches_the_connector_as_it_reaches_sim_transport() {
    let setups = [
        Setup::Healthy,
        Setup::Partition,
        Setup::LoseNextAnswer,
        Setup::Hold,
        Setup::CloseRace(CloseTiming::FinBeforeWrite),
        Setup::CloseRace(CloseTiming::FinAfterWrite),
        Setup::CloseRace(CloseTiming::Rst),
    ];
    for setup in setups {
        let (ours, ours_ledger, ours_conns, _) = run(setup, 2, Via::Transport, KeepAlive::default());
        let (theirs, theirs_ledger, theirs_conns, _) = run(setup, 2, CONNECTOR, KeepAlive::default());
        assert_eq!(outcomes(&ours), outcomes(&theirs), "{setup:?}");
        // The same messages on the same seed: the same virtual times.
        assert_eq!(ours, theirs, "{setup:?}: times differ");
        let facts = |l: &Ledger| {
            l.arrivals.iter().map(|a| (a.at, a.status, a.outcome, a.lost, a.answered_at)).collect::<Vec<_>>()
        };
        assert_eq!(facts(&ours_ledger), facts(&theirs_ledger), "{setup:?}");
        assert_eq!(ours_conns, theirs_conns, "{setup:?}");
    }
    // The hold delayed the answer by the hold, not into an error.
    let (held, _, _, _) = run(Setup::Hold, 2, CONNECTOR, KeepAlive::default());
    let (what, start, end) = held[1].clone();
    assert_eq!(what, Seen::Answer(201));
    assert!(end - start >= 1_900, "held for the hold's 2 s: {start}..{end} ms");
}

#[test]
fn a_pool_without_the_simulations_clock_is_named() {
    let (seen, _, _, clock) = run(Setup::Healthy, 2, Via::Connector { timer: false }, KeepAlive::default());
    assert_eq!(outcomes(&seen), vec![Seen::Answer(201); 2]);
    let why = clock.expect("a reused connection whose pool never read SimTimer");
    assert!(why.contains("real clock") && why.contains(".pool_timer(SimNet::timer())"), "{why}");
    // retrysim's own transport and a pool on SimTimer are not named.
    assert_eq!(run(Setup::Healthy, 2, Via::Transport, KeepAlive::default()).3, None);
    assert_eq!(run(Setup::Healthy, 2, CONNECTOR, KeepAlive::default()).3, None);
}

/// A plain keep-alive server, so the test below does not depend on the
/// API's settings.
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
    // One connection per request: refused at once.
    assert_eq!(pooled_partition(false), (Seen::NotSent, 2));
}
