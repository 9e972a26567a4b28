//! The production driver against real HTTP/1.1 servers on 127.0.0.1, not the
//! simulator: a strict hyper server (origin form and `Host` or 400), a stock
//! Node.js `http` server (tests/strict_server.js), and raw sockets that close
//! connections the way real servers do. Every server binds port 0 on
//! loopback; every loop is bounded; the Node process is killed by its PID.

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use retrysim::client::{IDEMPOTENCY_KEY, RetryClient};
use retrysim::core::classify::TransportFailure;
use retrysim::core::policy::Policy;
use retrysim::env::{HyperTransport, Rng, TokioClock, Transport, os_rng, seeded_rng};
use retrysim::trace::Trace;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What the strict server saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    /// The request target as sent (`/v1/jobs`, or `http://h:p/v1/jobs`).
    target: String,
    host: Option<String>,
    key: Option<String>,
    status: u16,
}

/// A strict HTTP/1.1 origin server: 400 to an absolute-form target or a
/// missing `Host`, 201 otherwise. Keep-alive on, as hyper's default.
struct StrictServer {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl StrictServer {
    async fn start() -> StrictServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (s, c) = (seen.clone(), connections.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                c.fetch_add(1, Ordering::SeqCst);
                let s = s.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let s = s.clone();
                        async move { Ok::<_, Infallible>(strict_answer(&s, req)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        StrictServer { addr, seen, connections, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for StrictServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn strict_answer(seen: &Mutex<Vec<Seen>>, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let uri = req.uri();
    let host = req.headers().get(http::header::HOST).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let key = req.headers().get(IDEMPOTENCY_KEY).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (status, body) = if uri.scheme().is_some() || uri.authority().is_some() {
        (400, "absolute-form target: send origin form (/path) to an origin server")
    } else if host.is_none() {
        (400, "missing Host header")
    } else {
        (201, r#"{"id":"job"}"#)
    };
    seen.lock().unwrap().push(Seen { target: uri.to_string(), host, key, status });
    Response::builder().status(status).body(Full::new(Bytes::from_static(body.as_bytes()))).unwrap()
}

fn driver() -> RetryClient<TokioClock, HyperTransport> {
    RetryClient::new(TokioClock::real(), HyperTransport::new(), Policy::interactive())
}

async fn post(client: &RetryClient<TokioClock, HyperTransport>, url: &str, rng: &mut dyn Rng) -> StatusCode {
    let req = Request::post(url).body(Bytes::from_static(b"{}")).unwrap();
    let mut trace = Trace::new("job");
    match client.execute_traced(req, rng, &CancellationToken::new(), &mut trace).await {
        Ok(done) => done.response.status(),
        Err(e) => panic!("{e}\n{}", trace.render()),
    }
}

/// The old request: absolute-form target, no `Host`, as `HyperTransport`
/// once sent it. Sent with hyper's low-level client,
/// which writes the target as given.
async fn send_raw(addr: std::net::SocketAddr, req: Request<Bytes>) -> StatusCode {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let (parts, body) = req.into_parts();
    sender.send_request(Request::from_parts(parts, Full::new(body))).await.unwrap().status()
}

#[tokio::test]
async fn the_driver_succeeds_against_a_strict_server_over_one_connection() {
    let server = StrictServer::start().await;
    let client = driver();
    let mut rng = os_rng().unwrap();
    for _ in 0..5 {
        assert_eq!(post(&client, &server.url("/v1/jobs?x=1"), &mut rng).await, 201);
    }
    let seen = server.seen();
    assert_eq!(seen.len(), 5, "one attempt per job: {seen:?}");
    let host = server.addr.to_string();
    for s in &seen {
        assert_eq!((s.target.as_str(), s.host.as_deref()), ("/v1/jobs?x=1", Some(host.as_str())), "{s:?}");
    }
    // Keep-alive: five sequential jobs share one connection.
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

/// Negative control: the same server refuses what the driver used to send,
/// so the test above would have failed before the fix.
#[tokio::test]
async fn the_strict_server_rejects_the_old_request_line() {
    let server = StrictServer::start().await;
    let url = server.url("/v1/jobs");
    let old = Request::post(url.as_str()).body(Bytes::new()).unwrap();
    assert_eq!(send_raw(server.addr, old).await, 400);
    let no_host = Request::post("/v1/jobs").body(Bytes::new()).unwrap();
    assert_eq!(send_raw(server.addr, no_host).await, 400);
    let absolute_with_host = Request::post(url.as_str()).header("host", server.addr.to_string()).body(Bytes::new());
    assert_eq!(send_raw(server.addr, absolute_with_host.unwrap()).await, 400);
    // And accepts the same raw path when the request is right.
    let right = Request::post("/v1/jobs").header("host", server.addr.to_string()).body(Bytes::new()).unwrap();
    assert_eq!(send_raw(server.addr, right).await, 201);
}

/// The README's "Using the driver" example, verbatim between the markers
/// (checked by `the_readme_example_is_this_code`).
mod readme_driver {
    // README:driver begin
    use retrysim::{bytes::Bytes, client::RetryClient, core::policy::Policy, env::*, http};

    /// POSTs one job to `url` (e.g. `http://localhost:8080/v1/jobs`), retrying as
    /// the interactive preset says.
    pub async fn send_job(url: &str) -> Result<(), Box<dyn std::error::Error>> {
        // One transport per program: its clones share one keep-alive pool.
        let client = RetryClient::new(TokioClock::real(), HyperTransport::new(), Policy::interactive());
        // Keys and jitter from OS entropy, never a fixed seed (see `seeded_rng`).
        let mut rng = os_rng()?;
        let req = http::Request::post(url).body(Bytes::from("{}"))?;
        match client.execute(req, &mut rng, &Default::default()).await {
            // What it took comes with the answer; `execute_traced` records every step.
            Ok(done) => {
                println!("{} after {} attempt(s), {:?} waited", done.response.status(), done.attempts, done.waited)
            }
            // Queue the work under the same key and answer 202 Accepted (brief 000).
            Err(e) => println!("{e}; key {:?}", e.idempotency_key),
        }
        Ok(())
    }
    // README:driver end
}

use readme_driver::send_job as readme_example;

/// Lines of code, without blank lines or indentation.
fn code_lines(text: &str) -> Vec<String> {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

#[test]
fn the_readme_example_is_this_code() {
    let section = crate::readme::section("Using the driver");
    let block = section.split("```rust\n").nth(1).and_then(|b| b.split("```").next()).expect("a rust block");
    // Shown whole on GitHub: no rustdoc-hidden `# ` line.
    assert!(!block.lines().any(|l| l.starts_with("# ") || l == "#"), "README's driver example hides lines:\n{block}");
    let this = include_str!("real_servers.rs");
    let ours = this.split("// README:driver begin\n").nth(1).and_then(|b| b.split("    // README:driver end").next());
    assert_eq!(code_lines(block), code_lines(ours.unwrap()), "README's driver example and readme_driver differ");
}

#[tokio::test]
async fn the_readme_example_succeeds_against_the_strict_server() {
    let server = StrictServer::start().await;
    readme_example(&server.url("/v1/jobs")).await.unwrap();
    let seen = server.seen();
    // One attempt, answered 201: the example printed a success.
    assert_eq!(seen.iter().map(|s| s.status).collect::<Vec<_>>(), [201], "{seen:?}");
    assert!(seen[0].key.is_some());
}

/// With `seeded_rng(42)` a second run reused the first run's keys,
/// and the server replayed old answers. From OS entropy, two runs of the
/// README flow (the example, then 120 jobs on one generator, as that run
/// did) share no key.
#[tokio::test]
async fn two_runs_of_the_readme_flow_share_no_key() {
    let server = StrictServer::start().await;
    let url = server.url("/v1/jobs");
    let run_keys = |from: usize| server.seen()[from..].iter().map(|s| s.key.clone().unwrap()).collect::<Vec<_>>();
    readme_example(&url).await.unwrap();
    readme_example(&url).await.unwrap();
    let (first, second) = (run_keys(0), run_keys(1));
    assert_ne!(first[0], second[0]);

    let jobs = |mut rng: Box<dyn Rng>| {
        let url = url.clone();
        async move {
            let client = driver();
            for _ in 0..120 {
                assert_eq!(post(&client, &url, &mut *rng).await, 201);
            }
        }
    };
    let shared = |a: &[String], b: &[String]| a.iter().filter(|k| b.contains(*k)).count();
    let start = server.seen().len();
    jobs(Box::new(os_rng().unwrap())).await;
    jobs(Box::new(os_rng().unwrap())).await;
    let keys = run_keys(start);
    assert_eq!(keys.len(), 240);
    assert_eq!(shared(&keys[..120], &keys[120..]), 0);
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 240, "a key repeated within a run");

    // Negative control: the old example's fixed seed shares every key.
    let start = server.seen().len();
    jobs(Box::new(seeded_rng(42))).await;
    jobs(Box::new(seeded_rng(42))).await;
    let keys = run_keys(start);
    assert_eq!(shared(&keys[..120], &keys[120..]), 120);
}

/// The Node.js server, killed by its PID when dropped.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts tests/strict_server.js; `None` (and a printed reason) when `node`
/// is not installed.
fn start_node() -> Option<(Node, u16)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/strict_server.js");
    let child = match Command::new("node").arg(script).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("SKIPPED: node is not installed (install Node.js to run the stock-server test)");
            return None;
        }
        Err(e) => panic!("cannot start node: {e}"),
    };
    let mut node = Node(child);
    let mut line = String::new();
    BufReader::new(node.0.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().parse().unwrap_or_else(|_| panic!("strict_server.js printed {line:?}, not a port"));
    Some((node, port))
}

#[tokio::test]
async fn a_stock_node_server_answers_the_driver_201() {
    let Some((_node, port)) = start_node() else { return };
    let url = format!("http://127.0.0.1:{port}/v1/jobs");
    let client = driver();
    let mut rng = os_rng().unwrap();
    for _ in 0..3 {
        assert_eq!(post(&client, &url, &mut rng).await, 201);
    }
    readme_example(&url).await.unwrap();
    // Negative control: the old request line. Node answers 400 to the
    // missing Host, and its router finds no route for an absolute target.
    let addr = ([127, 0, 0, 1], port).into();
    assert_eq!(send_raw(addr, Request::post(url.as_str()).body(Bytes::new()).unwrap()).await, 400);
    let absolute = Request::post(url.as_str()).header("host", format!("127.0.0.1:{port}")).body(Bytes::new());
    assert_eq!(send_raw(addr, absolute.unwrap()).await, 404);

    let stats = HyperTransport::new()
        .send(Request::get(format!("http://127.0.0.1:{port}/stats")).body(Bytes::new()).unwrap())
        .await
        .unwrap();
    let stats: serde_json::Value = serde_json::from_slice(stats.body()).unwrap();
    assert_eq!(stats["requests"], 4, "{stats}");
    // The driver's three jobs went over one kept-alive connection; the README
    // example, the two raw requests and this one opened one each.
    assert_eq!(stats["connections"], 5, "{stats}");
}

/// A raw server: reads one request head per connection, answers it with
/// `answer` (or nothing), then closes the connection, as a server does when
/// its keep-alive timer fires. Counts connections.
async fn closing_server(answer: Option<&'static str>) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let c = connections.clone();
    tokio::spawn(async move {
        for _ in 0..10 {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            c.fetch_add(1, Ordering::SeqCst);
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            if let Some(a) = answer {
                let _ = stream.write_all(a.as_bytes()).await;
            }
            // Dropping the stream closes the connection.
        }
    });
    (addr, connections)
}

/// A pooled connection that the server closed while idle is not reused: the
/// next request goes out on a new connection and succeeds.
#[tokio::test]
async fn a_pooled_connection_closed_by_the_server_is_replaced() {
    // No `Connection: close`: the client believes it may keep the connection.
    let (addr, connections) = closing_server(Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")).await;
    let t = HyperTransport::new();
    for _ in 0..3 {
        let req = Request::get(format!("http://{addr}/")).body(Bytes::new()).unwrap();
        assert_eq!(t.send(req).await.unwrap().status(), 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(connections.load(Ordering::SeqCst), 3);
}

/// A request that went out and got no answer may have run: `MaybeArrived`.
/// A connect that fails: `NotSent`.
#[tokio::test]
async fn transport_errors_say_whether_the_request_may_have_arrived() {
    let (addr, _) = closing_server(None).await;
    let req = Request::post(format!("http://{addr}/v1/jobs")).body(Bytes::from_static(b"{}")).unwrap();
    let e = HyperTransport::new().send(req).await.unwrap_err();
    assert_eq!(e.failure, TransportFailure::MaybeArrived, "{e}");

    // A port nobody listens on: bind one, learn it, close it.
    let free = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let req = Request::post(format!("http://{free}/v1/jobs")).body(Bytes::new()).unwrap();
    let e = HyperTransport::new().send(req).await.unwrap_err();
    assert_eq!(e.failure, TransportFailure::NotSent, "{e}");
    // With the `https` feature an https:// URI is sent like any other: to
    // the same closed port, not sent (and retried).
    #[cfg(feature = "https")]
    {
        let req = Request::post(format!("https://{free}/v1/jobs")).body(Bytes::new()).unwrap();
        let e = HyperTransport::new().send(req).await.unwrap_err();
        assert_eq!(e.failure, TransportFailure::NotSent, "{e}");
    }
    // A scheme no transport here speaks can never be sent: unsendable, with the reason.
    let req = Request::post(format!("ftp://{free}/v1/jobs")).body(Bytes::new()).unwrap();
    let e = HyperTransport::new().send(req).await.unwrap_err();
    assert_eq!(e.failure, TransportFailure::Unsendable, "{e}");
    assert!(e.message.contains("not ftp://"), "{e}");
}
