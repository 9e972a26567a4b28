//! Imports `retrysim::internals` (hidden, no semver promise) for the
//! simulator's own requests (`job::request`, `kind_of`) and bare `runner::run`
//! as the reference figures for the real socket.
//!
//! `retrysim serve`: the simulated API on a real loopback socket,
//! in real time. The repo's own driver against it gives the simulator's
//! figures within a stated tolerance; the ledger's verdict catches an
//! unkeyed replay (a negative control) and passes the driver; bad input
//! (a port in use, garbage, a huge body, a slow client, a flood) is
//! answered or refused and the server keeps serving. Every server binds
//! port 0 on 127.0.0.1 and every wait is bounded.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Uri};
use retrysim::client::RetryClient;
use retrysim::env::{HyperTransport, TokioClock, Transport, seeded_rng};
use retrysim::internals::checks::blackbox::BlackBoxCheck;
use retrysim::internals::run::job::{self, JobKind};
use retrysim::internals::run::runner;
use retrysim::internals::run::scenario::{self, Scenario};
use retrysim::internals::serve::{Limits, ServeError, ServeOptions, ServeReport, Served};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// How a job is sent: the repo's driver, or a naive loop (the negative control).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    /// `RetryClient` over `HyperTransport` with the scenario's policy.
    Retrysim,
    /// Sends the POST again, up to 3 times, on any failure: it replays an
    /// unkeyed POST after a lost answer (brief 002's naive client).
    Naive,
}

/// The harness's request for job `job` of worker `worker`, sent to `url`.
fn request(s: &Scenario, url: &str, job: u32, worker: u32) -> Request<Bytes> {
    let mut req = job::request(s, job::kind_of(s, 7, job), job, worker);
    let path = req.uri().path_and_query().map_or("/v1/jobs".to_owned(), ToString::to_string);
    *req.uri_mut() = format!("{url}{path}").parse::<Uri>().unwrap();
    req
}

/// `workers` workers share `jobs` jobs of `s` against `url`; how many succeeded.
async fn fleet(s: &Scenario, url: &str, workers: u32, jobs: u32, driver: Driver) -> u32 {
    let client = Arc::new(RetryClient::new(TokioClock::real(), HyperTransport::new(), s.policy.clone()));
    let (next, ok) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let mut set = tokio::task::JoinSet::new();
    for w in 0..workers {
        let (client, next, ok, s, url) = (client.clone(), next.clone(), ok.clone(), s.clone(), url.to_owned());
        set.spawn(async move {
            let mut rng = seeded_rng(1_000 + u64::from(w));
            let cancel = CancellationToken::new();
            loop {
                let job = next.fetch_add(1, Ordering::SeqCst);
                if job >= jobs {
                    return;
                }
                let req = request(&s, &url, job, w);
                let done = match driver {
                    Driver::Retrysim => client.execute(req, &mut rng, &cancel).await.is_ok(),
                    Driver::Naive => naive(req).await,
                };
                if done {
                    ok.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    let all = async {
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all).await.expect("the fleet finishes within 60 s");
    ok.load(Ordering::SeqCst)
}

async fn naive(req: Request<Bytes>) -> bool {
    let transport = HyperTransport::new();
    for _ in 0..3 {
        if let Ok(res) = transport.send(req.clone()).await
            && res.status().is_success()
        {
            return true;
        }
    }
    false
}

fn holds(r: &ServeReport, check: BlackBoxCheck) -> bool {
    r.check(check).unwrap().holds
}

/// The tolerance of the real-time figures against the simulator's
/// (`docs/guide/any-language.md`): the same policy, jobs and limiter (its
/// window starts at the first hit, so the wall clock's phase does not
/// matter), but real round trips and timers that fire late on a loaded
/// machine instead of 1–3 ms messages and exact timers. Charges may not move
/// at all; requests by 10 %, 429s by 25 %; the time from the first arrival
/// to the last answer by 0.5 s less to 1.5 s more than the virtual time.
const TOLERANCE: (u64, u64, Duration, Duration) = (10, 25, Duration::from_millis(500), Duration::from_millis(1500));

#[tokio::test]
async fn the_drivers_120_jobs_against_serve_match_the_simulator_within_the_tolerance() {
    let s = scenario::blinkimg_1s();
    let sim = runner::run(&s, 7).unwrap();
    let server = Served::start(&s).await.unwrap();
    let ok = fleet(&s, &server.url(), s.fleet.workers, s.fleet.jobs, Driver::Retrysim).await;
    let ledger = server.ledger();
    let r = server.stop().await;
    assert_eq!(ok, 120, "{}", r.render_text());
    assert!(!r.broken && r.drained, "{}", r.render_text());
    assert_eq!((r.charged, sim.charged), (120, 120), "one charge per job, as in the simulator");
    assert_eq!(r.requests, r.charged + r.limited, "every request was charged or limited");
    let first = ledger.arrivals.iter().map(|a| a.at).min().unwrap();
    let last = ledger.arrivals.iter().filter_map(|a| a.answered_at).max().unwrap();
    let wall = last - first;
    eprintln!(
        "serve blinkimg-1s: real {} requests, {} 429s, {} charged in {} ms; simulated {}, {}, {} in {} ms",
        r.requests,
        r.limited,
        r.charged,
        wall.as_millis(),
        sim.requests,
        sim.limited,
        sim.charged,
        sim.virtual_ms
    );
    let (requests, limited, early, late) = TOLERANCE;
    let near = |real: u64, simulated: u64, per_cent: u64| real.abs_diff(simulated) * 100 <= simulated * per_cent;
    assert!(near(r.requests, sim.requests, requests), "requests: real {}, simulated {}", r.requests, sim.requests);
    assert!(near(r.limited, sim.limited, limited), "429s: real {}, simulated {}", r.limited, sim.limited);
    let virtual_time = Duration::from_millis(sim.virtual_ms);
    assert!(
        virtual_time.saturating_sub(early) <= wall && wall <= virtual_time + late,
        "wall {wall:?}, virtual {virtual_time:?}"
    );
    // The guide's table: the simulator's row exactly, the served row
    // within the same tolerance of this run.
    let rows = readme_rows("Test a client in any language", "| simulator", "| served");
    assert_eq!(
        rows[0],
        [sim.requests, sim.limited, sim.charged, sim.virtual_ms],
        "docs/guide/any-language.md simulator row"
    );
    let [requests_r, limited_r, charged_r, ms_r] = rows[1];
    assert!(
        near(requests_r, r.requests, requests) && near(limited_r, r.limited, limited),
        "docs/guide/any-language.md served row {rows:?}"
    );
    assert_eq!(charged_r, r.charged, "docs/guide/any-language.md served row");
    let ms = wall.as_millis() as u64;
    assert!(
        ms_r + ms_of(early) >= ms && ms_r <= ms + ms_of(late),
        "docs/guide/any-language.md says {ms_r} ms, this run {ms} ms"
    );
}

fn ms_of(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The four numbers of each documentation table row starting with one of `starts`, in that order.
fn readme_rows(section: &str, first: &str, second: &str) -> Vec<[u64; 4]> {
    let (page, text) = crate::readme::page_and_section(section);
    [first, second]
        .iter()
        .map(|start| {
            let line = text.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no {page} row {start}"));
            let cells: Vec<u64> = line.split('|').filter_map(|c| c.trim().parse().ok()).collect();
            cells.try_into().unwrap_or_else(|c| panic!("{page} row {line:?}: {c:?}"))
        })
        .collect()
}

#[tokio::test]
async fn serve_catches_an_unkeyed_replay_after_a_lost_answer_and_passes_the_driver() {
    let s = scenario::named("lost-answers-no-key").unwrap();
    assert!(job::kind_of(&s, 7, 0) == JobKind::Keyed && !s.policy.idempotency_keys);
    // The negative control: the naive loop replays after a lost answer.
    let server = Served::start(&s).await.unwrap();
    let ok = fleet(&s, &server.url(), 2, 30, Driver::Naive).await;
    let naive = server.stop().await;
    assert!(naive.lost_answers > 0, "the seed loses answers: {}", naive.render_text());
    assert!(naive.broken && !holds(&naive, BlackBoxCheck::UnkeyedReplay), "{}", naive.render_text());
    assert!(naive.charged > u64::from(ok), "a replay charged again: {}", naive.render_text());
    // The driver under the same policy (no key) gives up instead.
    let server = Served::start(&s).await.unwrap();
    fleet(&s, &server.url(), 2, 30, Driver::Retrysim).await;
    let driver = server.stop().await;
    assert!(driver.lost_answers > 0, "{}", driver.render_text());
    assert!(!driver.broken, "{}", driver.render_text());
}

/// `workers` workers each send their share of `jobs` jobs of `s` with no
/// header of retrysim's (no `x-retrysim-client` label, no key), each up to
/// `tries` times on any failure; how many succeeded.
async fn unmodified(s: &Scenario, url: &str, workers: u32, jobs: u32, tries: u32) -> u32 {
    let mut ok = 0;
    let mut set = tokio::task::JoinSet::new();
    for w in 0..workers {
        let (s, url) = (s.clone(), url.to_owned());
        set.spawn(async move {
            let transport = HyperTransport::new();
            let mut ok = 0;
            for job in (w..jobs).step_by(workers as usize) {
                let mut req = request(&s, &url, job, w);
                req.headers_mut().remove("x-retrysim-client");
                req.headers_mut().remove("idempotency-key");
                for _ in 0..tries {
                    if let Ok(res) = transport.send(req.clone()).await
                        && res.status().is_success()
                    {
                        ok += 1;
                        break;
                    }
                }
            }
            ok
        });
    }
    let all = async {
        while let Some(r) = set.join_next().await {
            ok += r.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all).await.expect("the clients finish within 60 s");
    ok
}

#[tokio::test]
async fn a_client_that_adds_no_header_is_judged_by_what_it_asks_for() {
    let s = scenario::named("lost-answers-no-key").unwrap();
    // Resending the same request after a lost answer: the same operation
    // sent again, so an unkeyed replay (before, unjudged: "holds").
    let server = Served::start(&s).await.unwrap();
    let ok = unmodified(&s, &server.url(), 2, 30, 3).await;
    let r = server.stop().await;
    assert!(r.lost_answers > 0 && r.charged > u64::from(ok), "{}", r.render_text());
    let replay = r.check(BlackBoxCheck::UnkeyedReplay).unwrap();
    assert!(!replay.holds && r.broken, "{}", r.render_text());
    assert!(replay.violations[0].contains("POST /v1/jobs from "), "named by what it asks: {:?}", replay.violations);
    // The same client trying once: answers lost, nothing sent again, holds.
    let server = Served::start(&s).await.unwrap();
    unmodified(&s, &server.url(), 2, 30, 1).await;
    let r = server.stop().await;
    assert!(r.lost_answers > 0, "{}", r.render_text());
    assert!(!r.broken, "{}", r.render_text());
}

#[tokio::test]
async fn the_control_requests_read_the_ledger_and_reset_the_round() {
    let s = scenario::blinkimg_1s();
    let server = Served::start(&s).await.unwrap();
    fleet(&s, &server.url(), 2, 4, Driver::Retrysim).await;
    let t = HyperTransport::new();
    let get = |path: &str| Request::get(format!("{}{path}", server.url())).body(Bytes::new()).unwrap();
    let ledger: serde_json::Value =
        serde_json::from_slice(t.send(get("/__retrysim/ledger")).await.unwrap().body()).unwrap();
    assert_eq!(ledger["charged"], 4);
    let report: serde_json::Value =
        serde_json::from_slice(t.send(get("/__retrysim/report")).await.unwrap().body()).unwrap();
    assert_eq!((report["round"].as_u64(), report["broken"].as_bool()), (Some(1), Some(false)));
    let reset = Request::post(format!("{}/__retrysim/reset", server.url())).body(Bytes::new()).unwrap();
    let ended: serde_json::Value = serde_json::from_slice(t.send(reset).await.unwrap().body()).unwrap();
    assert_eq!(
        (ended["round"].as_u64(), ended["charged"].as_u64()),
        (Some(1), Some(4)),
        "reset reports the round it ends"
    );
    assert_eq!((server.report().round, server.ledger().arrivals.len()), (2, 0));
    let res = t.send(get("/__retrysim/nothing")).await.unwrap();
    assert_eq!(res.status(), 404);
}

#[tokio::test]
async fn requests_without_a_label_are_judged_by_their_key() {
    let s = scenario::blinkimg_1s();
    let server = Served::start(&s).await.unwrap();
    let t = HyperTransport::new();
    let post = |key: &str| {
        Request::post(format!("{}/v1/jobs", server.url()))
            .header("x-api-key", "key-a")
            .header("idempotency-key", key)
            .body(Bytes::from_static(br#"{"uploadId":"u1","options":{"op":"compress"}}"#))
            .unwrap()
    };
    // Fill the window, then resend the refused key at once: an early retry.
    let mut refused = None;
    for i in 0..40 {
        let key = format!("key-of-job-{i:04}");
        if t.send(post(&key)).await.unwrap().status() == 429 {
            refused = Some(key);
            break;
        }
    }
    let key = refused.expect("30 writes per window: a refusal within 40 requests");
    assert_eq!(t.send(post(&key)).await.unwrap().status(), 429);
    let r = server.stop().await;
    let early = r.check(BlackBoxCheck::EarlyRetry).unwrap();
    assert!(!early.holds && r.broken, "{}", r.render_text());
    assert!(early.violations[0].contains("key "), "named by its shortened key: {:?}", early.violations);
    assert!(!early.violations[0].contains(&key), "never the key itself: {:?}", early.violations);
    assert_eq!(r.check(BlackBoxCheck::EarlyRetry).map(|c| c.violations.len()), Some(1), "one operation broke it");
}

#[tokio::test]
async fn a_latency_spike_is_served_and_a_partition_is_listed_as_not_served() {
    let mut s = scenario::blinkimg_1s();
    s.faults.schedule = toml_faults(
        r#"
        [[schedule]]
        at = "0s"
        fault = { kind = "latency_spike", latency = "300ms", until = "30s" }
        [[schedule]]
        at = "1s"
        fault = { kind = "partition", until = "2s" }
        "#,
    );
    let server = Served::start(&s).await.unwrap();
    let started = Instant::now();
    assert_eq!(fleet(&s, &server.url(), 1, 1, Driver::Retrysim).await, 1);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(600), "the request and its answer each held 300 ms: {took:?}");
    let r = server.stop().await;
    assert_eq!(r.faults_not_served.len(), 1, "{:?}", r.faults_not_served);
    assert!(r.faults_not_served[0].starts_with("Partition"), "{:?}", r.faults_not_served);
    assert!(r.render_text().contains("not served"), "{}", r.render_text());
}

fn toml_faults(text: &str) -> Vec<retrysim::internals::world::net::ScheduledFault> {
    #[derive(serde::Deserialize)]
    struct Faults {
        schedule: Vec<retrysim::internals::world::net::ScheduledFault>,
    }
    toml::from_str::<Faults>(text).unwrap().schedule
}

fn small_limits() -> Limits {
    Limits::default()
        .max_connections(16)
        .max_header_bytes(8 * 1024)
        .max_body_bytes(4 * 1024)
        .header_read_timeout(Duration::from_secs(1))
        .body_read_timeout(Duration::from_secs(1))
        .drain_timeout(Duration::from_secs(2))
        .max_arrivals(1_000)
}

async fn start_small() -> Served {
    let options = ServeOptions::default().limits(small_limits());
    Served::start_with(&scenario::blinkimg_1s(), options).await.unwrap()
}

/// One keyed job through the driver, within 5 s: the server still serves.
async fn still_serves(server: &Served) {
    let s = scenario::blinkimg_1s();
    let started = Instant::now();
    let ok = tokio::time::timeout(Duration::from_secs(5), fleet(&s, &server.url(), 1, 1, Driver::Retrysim)).await;
    assert_eq!(ok.ok(), Some(1), "a job took longer than 5 s, or failed");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

/// Sends `bytes` on a new connection and reads what comes back (until close or 3 s).
async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let _ = stream.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_port_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let options = ServeOptions::default().addr(addr);
    let e = Served::start_with(&scenario::blinkimg_1s(), options).await.unwrap_err();
    assert!(matches!(e, ServeError::Bind { .. }), "{e:?}");
    assert!(e.to_string().contains(&format!("cannot listen on {addr}")), "{e}");
    let out = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["serve", "--scenario", "blinkimg-1s", "--for", "1s", "--addr", &addr.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot listen on") && err.contains("port 0"), "{err}");
    assert!(out.stdout.is_empty(), "no address printed for a server that did not start");
}

#[tokio::test]
async fn a_non_loopback_address_needs_public() {
    let options = ServeOptions::default().addr("0.0.0.0:0".parse().unwrap());
    let e = Served::start_with(&scenario::blinkimg_1s(), options).await.unwrap_err();
    assert!(matches!(e, ServeError::NotLoopback(_)) && e.to_string().contains("--public"), "{e}");
    let out = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["serve", "--scenario", "blinkimg-1s", "--for", "1s", "--addr", "0.0.0.0:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("pass --public"), "{err}");
    assert!(out.stdout.is_empty(), "nothing served");
}

#[tokio::test]
async fn a_malformed_request_gets_400_and_the_server_keeps_serving() {
    let server = start_small().await;
    let answer = raw(server.addr(), b"GARBAGE\x01 / NOT-HTTP\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    let answer = raw(server.addr(), b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-length: nope\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    let huge_head = format!("GET /v1/jobs/job_1 HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "a".repeat(64 * 1024));
    let answer = raw(server.addr(), huge_head.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    still_serves(&server).await;
    assert_eq!(server.ledger().arrivals.len(), 1, "nothing malformed reached the model");
}

#[tokio::test]
async fn a_huge_body_gets_413_and_the_server_keeps_serving() {
    let server = start_small().await;
    let head = "POST /v1/jobs HTTP/1.1\r\nhost: x\r\nx-api-key: key-a\r\ncontent-length: 10485760\r\n\r\n";
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    // Send far more than the limit; the server answers as soon as it is passed.
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..16 {
        if stream.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let mut out = vec![0; 1024];
    let n = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut out)).await.unwrap().unwrap_or(0);
    let answer = String::from_utf8_lossy(&out[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
    still_serves(&server).await;
    let r = server.stop().await;
    assert_eq!((r.requests_rejected, r.requests), (1, 1), "{}", r.render_text());
}

#[tokio::test]
async fn a_client_sending_one_byte_a_second_is_cut_off_and_others_are_served() {
    let server = start_small().await;
    let addr = server.addr();
    let slow = |text: &'static [u8]| async move {
        let started = Instant::now();
        let mut stream = TcpStream::connect(addr).await.unwrap();
        for b in text {
            if stream.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut out)).await;
        (started.elapsed(), String::from_utf8_lossy(&out).into_owned())
    };
    // A head that would take 40 s, and a body that would take 10 s.
    let head = tokio::spawn(slow(b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\n\r\n"));
    let mut body_client = TcpStream::connect(addr).await.unwrap();
    body_client.write_all(b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n").await.unwrap();
    let body = tokio::spawn(async move {
        for _ in 0..10 {
            if body_client.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(3), body_client.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    });
    still_serves(&server).await;
    let (took, answer) = head.await.unwrap();
    assert!(took < Duration::from_secs(6), "the slow head was cut after {took:?}, answer {answer:?}");
    let answer = body.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    still_serves(&server).await;
    assert_eq!(server.ledger().arrivals.len(), 2, "only the two real jobs reached the model");
}

#[tokio::test]
async fn a_full_ledger_answers_503_until_a_reset() {
    let options = ServeOptions::default().limits(small_limits().max_arrivals(3));
    let s = scenario::blinkimg_1s();
    let server = Served::start_with(&s, options).await.unwrap();
    let t = HyperTransport::new();
    let mut statuses = Vec::new();
    for job in 0..5 {
        statuses.push(t.send(request(&s, &server.url(), job, 0)).await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [201, 201, 201, 503, 503]);
    let ended = server.reset();
    assert_eq!((ended.requests, ended.requests_rejected), (3, 2));
    assert_eq!(t.send(request(&s, &server.url(), 5, 0)).await.unwrap().status(), 201);
    // The counters are the round's: the new round rejected nothing yet.
    let now = server.report();
    assert_eq!((now.round, now.requests, now.requests_rejected), (2, 1, 0), "{}", now.render_text());
}

#[tokio::test]
async fn a_flood_of_connections_is_refused_beyond_the_cap_and_the_server_keeps_serving() {
    // A 2 s header timeout: no slot frees while the 64 connects are still arriving.
    let limits = small_limits().header_read_timeout(Duration::from_secs(2));
    let options = ServeOptions::default().limits(limits);
    let server = Served::start_with(&scenario::blinkimg_1s(), options).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..64 {
        held.push(TcpStream::connect(server.addr()).await.unwrap());
    }
    // Give the accept loop time to see them all.
    let deadline = Instant::now() + Duration::from_secs(3);
    while server.report().connections_refused < 48 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = server.report();
    assert_eq!((r.connections_accepted, r.connections_refused), (16, 48), "{}", r.render_text());
    // A refused connection got a 503 and was closed.
    let mut last = held.pop().unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(3), last.read_to_end(&mut out)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 503"), "{:?}", String::from_utf8_lossy(&out));
    // The held connections send nothing: the header timeout frees their slots.
    still_serves_after(&server, Duration::from_secs(5)).await;
    drop(held);
}

/// Like [`still_serves`], but the first attempts may meet a full house.
async fn still_serves_after(server: &Served, within: Duration) {
    let s = scenario::blinkimg_1s();
    let deadline = Instant::now() + within;
    loop {
        let req = request(&s, &server.url(), 0, 0);
        let res = tokio::time::timeout(Duration::from_secs(2), HyperTransport::new().send(req)).await;
        if matches!(res, Ok(Ok(ref r)) if r.status() == 201) {
            return;
        }
        assert!(Instant::now() < deadline, "not served within {within:?}: {res:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn the_cli_prints_its_address_first_serves_and_reports_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["serve", "--scenario", "blinkimg-1s", "--for", "20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert!(first.starts_with("http://127.0.0.1:"), "{first:?}");
    let url = first.trim().to_owned();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let s = scenario::blinkimg_1s();
    assert_eq!(rt.block_on(fleet(&s, &url, 2, 6, Driver::Retrysim)), 6);
    let started = Instant::now();
    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "SIGTERM stopped it in {:?}", started.elapsed());
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(rest.contains("requests           6\n") && rest.contains("charged            6\n"), "{rest}");
    assert!(rest.contains("verdict            every check holds"), "{rest}");
}

/// Sends `GET path` on `stream` and reads its whole answer (head and a
/// `content-length` body), within 3 s.
async fn exchange(stream: &mut TcpStream, path: &str) -> String {
    let req = format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let read = async {
        loop {
            let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let len = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if out.len() >= end + 4 + len {
                    return;
                }
            }
            let mut buf = [0u8; 4096];
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(3), read).await.expect("an answer within 3 s");
    String::from_utf8_lossy(&out).to_ascii_lowercase()
}

/// Whether the server closes `stream` within `within` (EOF or reset).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(tokio::time::timeout(within, stream.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
}

#[tokio::test]
async fn serve_keeps_connections_alive_as_the_scenario_says() {
    let mut s = scenario::blinkimg_1s();
    s.api.keep_alive.idle_timeout_ms = 300;
    s.api.keep_alive.max_requests = 3;
    let server = Served::start(&s).await.unwrap();
    let addr = server.addr();

    // Idle for less than the timeout: the same connection serves again.
    let mut c = TcpStream::connect(addr).await.unwrap();
    assert!(exchange(&mut c, "/__retrysim/report").await.starts_with("http/1.1 200"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = exchange(&mut c, "/__retrysim/report").await;
    assert!(second.starts_with("http/1.1 200") && !second.contains("connection: close"), "{second}");
    // The cap: the third answer says close, and the server closes.
    let third = exchange(&mut c, "/__retrysim/report").await;
    assert!(third.contains("connection: close"), "{third}");
    assert!(closed_within(&mut c, Duration::from_secs(2)).await, "closed after the capped answer");

    // Idle past the timeout: the server closes it (a FIN), long before
    // hyper's head timer (Limits::header_read_timeout, 10 s) would.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    let asked = Instant::now();
    exchange(&mut idle, "/__retrysim/report").await;
    assert!(closed_within(&mut idle, Duration::from_secs(6)).await, "closed when idle");
    let after = asked.elapsed();
    assert!(after >= Duration::from_millis(300) && after < Duration::from_secs(6), "{after:?}");

    // Errors keep the connection unless the scenario says to close after them.
    let mut e = TcpStream::connect(addr).await.unwrap();
    let missing = exchange(&mut e, "/__retrysim/nothing-here").await;
    assert!(missing.starts_with("http/1.1 404") && !missing.contains("connection: close"), "{missing}");
    server.stop().await;

    s.api.keep_alive.close_after_error = true;
    let server = Served::start(&s).await.unwrap();
    let addr = server.addr();
    let mut e = TcpStream::connect(addr).await.unwrap();
    let missing = exchange(&mut e, "/__retrysim/nothing-here").await;
    assert!(missing.contains("connection: close"), "{missing}");
    assert!(closed_within(&mut e, Duration::from_secs(2)).await, "closed after the error");
    server.stop().await;

    s.api.keep_alive.enabled = false;
    let server = Served::start(&s).await.unwrap();
    let addr = server.addr();
    let mut once = TcpStream::connect(addr).await.unwrap();
    let only = exchange(&mut once, "/__retrysim/report").await;
    assert!(only.contains("connection: close"), "{only}");
    server.stop().await;
}
