//! retrysim over reqwest, against a local hyper server on 127.0.0.1: your
//! `reqwest::Client` as the driver's transport, and `RetryMiddleware` in a
//! `reqwest_middleware` chain. Each must read a 429 with `Retry-After`,
//! survive a lost connection by sending the same `Idempotency-Key` again,
//! keep one key per logical operation, and end at once on what no retry can
//! fix; the middleware must decide as `RetryClient` does (deadline, budget)
//! and hand the caller the facts. Negative controls: an unkeyed POST whose
//! answer is lost is not replayed, and a client that draws a key per attempt
//! is caught by the key check.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use retrysim::RetryClient;
use retrysim::client::{NoIdempotencyKey, RetryError};
use retrysim::core::budget::TokenBucketBudget;
use retrysim::core::classify::TransportFailure;
use retrysim::core::policy::{GiveUpReason, Policy};
use retrysim::env::{TokioClock, seeded_rng};
use retrysim::reqwest::{Retried, RetryMiddleware};
use tokio::net::TcpListener;

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub target: String,
    pub key: Option<String>,
}

/// A server on 127.0.0.1 whose path says what it does, counted per target
/// (path and query):
/// - `/rate/N`: the first N requests get Flask-Limiter's HTML 429 with
///   `Retry-After: 1`, then 201;
/// - `/lost/N`: the first N requests are read and their connection closed
///   without an answer, then 201;
/// - `/advice/S`: always 429 with `Retry-After: S`.
pub async fn server() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port on loopback");
    let base = format!("http://127.0.0.1:{}", listener.local_addr().expect("an address").port());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let counts: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        // Bounded: a test makes a handful of connections.
        for _ in 0..256 {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (log, counts) = (log.clone(), counts.clone());
            let service = service_fn(move |req: Request<Incoming>| {
                let (log, counts) = (log.clone(), counts.clone());
                async move { answer(&req, &log, &counts) }
            });
            tokio::spawn(async move {
                let _ = http1::Builder::new().serve_connection(TokioIo::new(tcp), service).await;
            });
        }
    });
    (base, seen)
}

type Answer = Result<Response<Full<Bytes>>, std::io::Error>;

fn answer(req: &Request<Incoming>, log: &Mutex<Vec<Seen>>, counts: &Mutex<BTreeMap<String, u32>>) -> Answer {
    let target = req.uri().path_and_query().map(ToString::to_string).unwrap_or_default();
    let key = req.headers().get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    log.lock().unwrap().push(Seen { target: target.clone(), key });
    let n = {
        let mut counts = counts.lock().unwrap();
        let n = counts.entry(target.clone()).or_default();
        *n += 1;
        *n
    };
    let mut parts = req.uri().path().trim_start_matches('/').split('/');
    let (what, arg) = (parts.next().unwrap_or(""), parts.next().and_then(|a| a.parse::<u32>().ok()).unwrap_or(0));
    let refuse = |after: u32| {
        Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .header("retry-after", after.to_string())
            .header("content-type", "text/html; charset=utf-8")
            .body(Full::new(Bytes::from("<h1>Too Many Requests</h1>")))
            .map_err(std::io::Error::other)
    };
    match what {
        "rate" if n <= arg => refuse(1),
        // An error from the service: hyper closes the connection unanswered.
        "lost" if n <= arg => Err(std::io::Error::other("the answer is lost")),
        "advice" => refuse(arg),
        _ => Response::builder()
            .status(StatusCode::CREATED)
            .body(Full::new(Bytes::from("{\"id\":\"job\"}")))
            .map_err(std::io::Error::other),
    }
}

/// What is wrong with the keys the server saw: every attempt of one
/// operation (one target here) must carry one key, and no two operations
/// may share one.
pub fn key_problems(seen: &[Seen]) -> Vec<String> {
    let mut by_target: BTreeMap<&str, Vec<Option<&str>>> = BTreeMap::new();
    for s in seen {
        by_target.entry(&s.target).or_default().push(s.key.as_deref());
    }
    let mut problems = Vec::new();
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    for (target, keys) in &by_target {
        match keys[0] {
            Some(k) if keys.iter().all(|x| *x == Some(k)) => {
                if let Some(other) = owner.insert(k, target) {
                    problems.push(format!("{target} and {other} share the key {k}"));
                }
            }
            _ => problems.push(format!("{target}: the attempts carried {keys:?}, not one key")),
        }
    }
    problems
}

fn seen_for(seen: &Mutex<Vec<Seen>>, target: &str) -> Vec<Seen> {
    seen.lock().unwrap().iter().filter(|s| s.target == target).cloned().collect::<Vec<_>>()
}

fn post(url: &str) -> Request<Bytes> {
    Request::post(url).header("content-type", "application/json").body(Bytes::from("{}")).expect("a request")
}

#[tokio::test]
async fn a_reqwest_client_is_a_transport_for_retry_client() {
    let (base, seen) = server().await;
    let client = RetryClient::new(TokioClock::real(), reqwest::Client::new(), Policy::standard());
    let cancel = Default::default();
    let mut rng = seeded_rng(26);
    // Two 429s with Retry-After: 1, waited out (never shortened), then 201.
    let done =
        client.execute(post(&format!("{base}/rate/2")), &mut rng, &cancel).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((done.response.status(), done.attempts), (StatusCode::CREATED, 3));
    assert!(done.waited >= Duration::from_secs(2), "each advice waited out: {:?}", done.waited);
    // A lost answer: the keyed POST is sent again with the same key.
    let done =
        client.execute(post(&format!("{base}/lost/1")), &mut rng, &cancel).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((done.response.status(), done.attempts), (StatusCode::CREATED, 2));
    let lost = seen_for(&seen, "/lost/1");
    assert_eq!(lost.len(), 2, "{lost:?}");
    assert_eq!(lost[0].key, done.idempotency_key, "{lost:?}");
    assert_eq!(key_problems(&seen.lock().unwrap()), Vec::<String>::new());
    // Negative control: without a key the lost answer may have run; not replayed.
    let mut unkeyed = post(&format!("{base}/lost/1?unkeyed"));
    unkeyed.extensions_mut().insert(NoIdempotencyKey);
    let e = client.execute(unkeyed, &mut rng, &cancel).await.expect_err("not replayable");
    assert_eq!((e.reason.clone(), e.attempts), (GiveUpReason::NotReplayable, 1), "{e}");
    assert_eq!(e.last_failure.expect("a failure").failure, TransportFailure::MaybeArrived);
}

#[tokio::test]
async fn reqwest_errors_are_read_faithfully() {
    let client = RetryClient::new(TokioClock::real(), reqwest::Client::new(), Policy::background());
    let cancel = Default::default();
    // What no retry can fix ends at the first attempt, not sent.
    for (url, why) in [("ftp://127.0.0.1:9/v1/jobs", "scheme"), ("/v1/jobs", "relative URL")] {
        let e = client.execute(post(url), &mut seeded_rng(1), &cancel).await.expect_err(url);
        assert_eq!((e.reason.clone(), e.attempts, e.waited), (GiveUpReason::Unsendable, 1, Duration::ZERO), "{e}");
        let failure = e.last_failure.expect("a failure");
        assert_eq!(failure.failure, TransportFailure::Unsendable, "{url}: {failure}");
        assert!(failure.message.contains(why), "{url}: {failure}");
    }
    // A refused connection may work next time: retried, as not sent.
    let quick = Policy::interactive().to_builder().max_retries(1).build();
    let client = RetryClient::new(TokioClock::real(), reqwest::Client::new(), quick);
    let e = client.execute(post("http://127.0.0.1:9/v1/jobs"), &mut seeded_rng(1), &cancel).await;
    let e = e.expect_err("nothing listens on port 9");
    assert_eq!((e.reason.kind(), e.attempts), ("attempts_exhausted", 2), "{e}");
    assert_eq!(e.last_failure.expect("a failure").failure, TransportFailure::NotSent);
    // A reqwest timeout after sending may have arrived.
    let slow = reqwest::Client::builder().timeout(Duration::from_millis(200)).build().expect("a client");
    let (base, _seen) = hanging_server().await;
    let req = reqwest::Request::try_from(post(&base)).expect("a request");
    let e = slow.execute(req).await.expect_err("times out");
    assert_eq!(retrysim::reqwest::failure_of(&e), TransportFailure::MaybeArrived, "{e}");
}

/// A server that reads a request and never answers (bounded: one minute).
async fn hanging_server() -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let url = format!("http://127.0.0.1:{}/v1/jobs", listener.local_addr().unwrap().port());
    let task = tokio::spawn(async move {
        if let Ok((tcp, _)) = listener.accept().await {
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(tcp);
        }
    });
    (url, task)
}

fn with_middleware(m: RetryMiddleware) -> reqwest_middleware::ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(m).build()
}

#[tokio::test]
async fn the_middleware_retries_with_retrysims_decisions_and_one_key() {
    let (base, seen) = server().await;
    let client = with_middleware(RetryMiddleware::new(Policy::standard()));
    let res = client.post(format!("{base}/rate/2")).body("{}").send().await.expect("an answer");
    assert_eq!(res.status(), StatusCode::CREATED);
    let facts = res.extensions().get::<Retried>().cloned().expect("the facts");
    assert_eq!(facts.attempts, 3, "{facts:?}");
    assert!(facts.waited >= Duration::from_secs(2), "{facts:?}");
    assert_eq!(res.url().as_str(), format!("{base}/rate/2"));
    let rate = seen_for(&seen, "/rate/2");
    assert_eq!((rate.len(), rate[0].key.clone()), (3, facts.idempotency_key.clone()), "{rate:?}");
    // A lost connection: sent again under the same key.
    let res = client.post(format!("{base}/lost/1")).body("{}").send().await.expect("an answer");
    assert_eq!(res.extensions().get::<Retried>().map(|r| r.attempts), Some(2));
    assert_eq!(res.text().await.expect("the body"), "{\"id\":\"job\"}");
    // A second operation on the same target gets a key of its own.
    client.post(format!("{base}/rate/0")).body("{}").send().await.expect("an answer");
    client.post(format!("{base}/rate/0?second")).body("{}").send().await.expect("an answer");
    assert_eq!(key_problems(&seen.lock().unwrap()), Vec::<String>::new());
    // Negative control: unkeyed, a lost answer is not replayed, and the
    // error says why and keeps reqwest's own.
    let e = client
        .post(format!("{base}/lost/1?unkeyed"))
        .body("{}")
        .with_extension(NoIdempotencyKey)
        .send()
        .await
        .expect_err("not replayable");
    let reqwest_middleware::Error::Middleware(any) = &e else { panic!("a middleware error: {e:?}") };
    let gave_up = any.downcast_ref::<RetryError>().expect("the RetryError");
    assert_eq!((gave_up.reason.clone(), gave_up.attempts), (GiveUpReason::NotReplayable, 1), "{gave_up}");
    assert!(any.downcast_ref::<reqwest_middleware::Error>().is_some_and(|e| e.is_request()), "{any:#}");
    assert_eq!(seen_for(&seen, "/lost/1?unkeyed").len(), 1);
}

#[tokio::test]
async fn a_client_that_draws_a_key_per_attempt_is_caught() {
    let (base, seen) = server().await;
    let plain = reqwest::Client::new();
    for attempt in 0..2 {
        let key = format!("key-{attempt}");
        plain.post(format!("{base}/rate/1")).header("idempotency-key", key).send().await.expect("an answer");
    }
    let problems = key_problems(&seen.lock().unwrap());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("not one key"), "{problems:?}");
}

#[tokio::test]
async fn the_middleware_gives_up_as_retry_client_does_and_says_why() {
    let (base, _seen) = server().await;
    // An advice longer than the deadline allows: no wait, the 429 returned
    // (as reqwest-retry returns it), the RetryError beside it.
    let policy = Policy::interactive();
    let client = with_middleware(RetryMiddleware::new(policy.clone()));
    let res = client.post(format!("{base}/advice/30")).body("{}").send().await.expect("the 429");
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.headers()["retry-after"], "30");
    let gave_up = res.extensions().get::<RetryError>().cloned().expect("the RetryError");
    assert_eq!((gave_up.attempts, gave_up.waited), (1, Duration::ZERO), "{gave_up}");
    assert_eq!(res.text().await.expect("the body"), "<h1>Too Many Requests</h1>");
    // RetryClient over the same reqwest client decides the same.
    let direct = RetryClient::new(TokioClock::real(), reqwest::Client::new(), policy);
    let e = direct
        .execute(post(&format!("{base}/advice/30?direct")), &mut seeded_rng(1), &Default::default())
        .await
        .expect_err("gives up");
    assert_eq!((e.reason.clone(), e.attempts), (gave_up.reason.clone(), 1), "{e}");
    // An unsupported scheme: at once, reqwest's error kept.
    let e = client.post("ftp://127.0.0.1:9/v1/jobs").send().await.expect_err("unsendable");
    let reqwest_middleware::Error::Middleware(any) = &e else { panic!("a middleware error: {e:?}") };
    let gave_up = any.downcast_ref::<RetryError>().expect("the RetryError");
    assert_eq!((gave_up.reason.clone(), gave_up.attempts), (GiveUpReason::Unsendable, 1), "{gave_up}");
    assert!(any.downcast_ref::<reqwest_middleware::Error>().is_some_and(|e| e.is_builder()), "{any:#}");
}

#[tokio::test]
async fn the_middleware_and_retry_client_share_a_budget() {
    let (base, _seen) = server().await;
    // Four tokens: a retry is allowed while more than two are left, so the
    // fleet gets one retry in all.
    let budget = Arc::new(TokenBucketBudget::new(4, 0));
    let client = with_middleware(RetryMiddleware::new(Policy::standard()).with_budget(budget.clone()));
    let res = client.post(format!("{base}/rate/1")).body("{}").send().await.expect("an answer");
    assert_eq!(res.extensions().get::<Retried>().map(|r| r.attempts), Some(2));
    let direct = RetryClient::new(TokioClock::real(), reqwest::Client::new(), Policy::standard()).with_budget(budget);
    let e = direct
        .execute(post(&format!("{base}/rate/1?direct")), &mut seeded_rng(1), &Default::default())
        .await
        .expect_err("the budget is spent");
    assert_eq!((e.reason.kind(), e.attempts), ("budget_exhausted", 1), "{e}");
    // The middleware sees the same spent budget.
    let res = client.post(format!("{base}/rate/1?again")).body("{}").send().await.expect("the 429");
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.extensions().get::<RetryError>().map(|e| e.reason.kind()), Some("budget_exhausted"));
}

#[allow(dead_code)]
#[path = "../../examples/reqwest_retry.rs"]
mod example;

#[tokio::test]
async fn the_guides_examples_retry_a_429_both_ways() {
    let (base, seen) = server().await;
    let http = reqwest::Client::new();
    let (status, attempts) =
        example::post_with_transport(http.clone(), &format!("{base}/rate/1")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((status, attempts), (201, 2));
    let (status, attempts) = example::post_with_middleware(http.clone(), &format!("{base}/rate/1?middleware"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((status, attempts), (201, 2));
    assert_eq!(key_problems(&seen.lock().unwrap()), Vec::<String>::new());
    // Gave up on an answer: the middleware's example still says what it took.
    let (status, attempts) =
        example::post_with_middleware(http, &format!("{base}/advice/600")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((status, attempts), (429, 1));
}

#[test]
fn the_guide_shows_the_examples_code_word_for_word() {
    let example = include_str!("../../examples/reqwest_retry.rs");
    let section = crate::readme::section("Retrying a reqwest client");
    for part in ["imports", "transport", "middleware"] {
        let start = format!("// guide: {part}\n");
        let code = example.split(&start).nth(1).and_then(|rest| rest.split("// guide: end").next());
        let code = code.unwrap_or_else(|| panic!("no `{start}` block in examples/reqwest_retry.rs"));
        assert!(
            section.contains(&format!("```rust\n{code}```")),
            "docs/guide/driver.md's section `## Retrying a reqwest client` must show examples/reqwest_retry.rs's {part} block \
             as it is:\n{code}"
        );
    }
}
