//! Issue 53: every way a real API says "wait" (docs/DESIGN.md, "Rate-limit
//! dialects").
//!
//! - `retrysim explain` decides as the rules say on each header set of the
//!   issue's table (class, wait or give-up, and the dialect named).
//! - The production driver against a server on 127.0.0.1 that advises
//!   through one dialect at a time: every preset sends nothing before the
//!   advice allows, loses no job whose advice fits, and gives up at once on
//!   one that does not (real sockets, real time: waits of about a second).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use retrysim::client::RetryClient;
use retrysim::core::backoff::{Backoff, Jitter};
use retrysim::core::policy::Policy;
use retrysim::env::{HyperTransport, TokioClock, seeded_rng};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::support::retrysim_ok;

// ---- explain, one case per row of the issue's table -------------------------------------

const DATE: &str = "Thu, 08 Oct 2026 09:00:00 GMT"; // 1791450000

fn explain(status: &str, headers: &[&str]) -> serde_json::Value {
    let mut args = vec!["explain", "--status", status, "--policy", "background", "--seed", "1", "--format", "json"];
    for h in headers {
        args.extend(["-H", h]);
    }
    serde_json::from_str(&retrysim_ok(&args)).unwrap()
}

/// A retry on `source`'s advice of `advised_ms`, never earlier.
fn assert_retry(v: &serde_json::Value, source: &str, advised_ms: u64) {
    let row = v.to_string();
    assert_eq!(v["class"], "throttled", "{row}");
    assert_eq!(v["decision"], "retry", "{row}");
    assert_eq!(v["advice"]["source"], source, "{row}");
    assert_eq!(v["advice"]["wait_ms"], advised_ms, "{row}");
    assert_eq!(v["why"]["basis"]["advice"], source, "{row}");
    assert!(v["wait_ms"].as_u64().unwrap() >= advised_ms, "{row}");
}

#[test]
fn explain_decides_every_row_of_the_issues_table() {
    // The IETF draft -10/-11 structured field.
    assert_retry(&explain("429", &[r#"RateLimit: "default";r=0;t=30"#]), "rate_limit_field", 30_000);
    // express-rate-limit `draft-7`: the draft -07 dictionary.
    assert_retry(&explain("429", &["RateLimit: limit=5, remaining=0, reset=37"]), "rate_limit_dictionary", 37_000);
    // express-rate-limit `draft-8`, with its policy field.
    let draft8 =
        [r#"RateLimit: "5-in-1min"; r=0; t=37"#, r#"RateLimit-Policy: "5-in-1min"; q=5; w=60; pk=:ZjBmOTc3NGM2MDA0:"#];
    assert_retry(&explain("429", &draft8), "rate_limit_field", 37_000);
    // draft-6 and many gateways.
    assert_retry(&explain("429", &["RateLimit-Remaining: 0", "RateLimit-Reset: 37"]), "rate_limit_reset", 37_000);
    // OpenAI, Azure OpenAI.
    assert_retry(&explain("429", &["retry-after-ms: 1500"]), "retry_after_ms", 1_500);
    // GitHub's primary limit, on a 429 and on a 403, against the response's Date.
    let github = ["x-ratelimit-limit: 60", "x-ratelimit-remaining: 0", "x-ratelimit-reset: 1791450023"];
    let date = format!("date: {DATE}");
    for status in ["429", "403"] {
        let v = explain(status, &[&github[..], &[date.as_str()]].concat());
        assert_retry(&v, "reset_unix_time", 23_000);
        assert_eq!(v["advice"]["server_date"], true);
    }
    // Two policies, the daily one exhausted: 3600 s is past background's
    // max_single_wait (60 s): give up at once.
    let v = explain("429", &[r#"RateLimit: "burst";r=0;t=5, "daily";r=0;t=3600"#]);
    assert_eq!((v["class"].as_str(), v["decision"].as_str()), (Some("throttled"), Some("give_up")), "{v}");
    assert_eq!(
        (v["reason"].as_str(), v["advice"]["source"].as_str()),
        (Some("advice_too_long"), Some("rate_limit_field"))
    );
    assert_eq!(v["detail"]["advised"], 3_600_000);
}

#[test]
fn explain_the_rules_beyond_the_table() {
    // Retry-After takes precedence over the RateLimit field.
    let v = explain("429", &["retry-after: 2", r#"RateLimit: "default";r=0;t=30"#]);
    assert_retry(&v, "header_seconds", 2_000);
    // A policy with quota left does not bound the wait.
    let v = explain("429", &[r#"RateLimit: "burst";r=0;t=5, "daily";r=10;t=3600"#]);
    assert_retry(&v, "rate_limit_field", 5_000);
    // A malformed field is ignored: no advice, a code-less 429 is unclear.
    let v = explain("429", &[r#"RateLimit: "default";r=0;t=-30"#]);
    assert_eq!((v["class"].as_str(), v["advice"]["source"].as_str()), (Some("unclear"), Some("none")), "{v}");
    // A 403 without an exhausted limit is still a refusal of access.
    let v = explain("403", &["retry-after: 60", "x-ratelimit-remaining: 4999"]);
    assert_eq!((v["class"].as_str(), v["decision"].as_str()), (Some("terminal"), Some("give_up")), "{v}");
    // OpenAI's reset to the initial state is an upper bound: the backoff (at
    // most background's first window, 1 s) cut to it, not 6 minutes, and no
    // give-up although 6 minutes is past max_single_wait.
    let v = explain("429", &["x-ratelimit-remaining-tokens: 0", "x-ratelimit-reset-tokens: 6m0s"]);
    assert_eq!((v["class"].as_str(), v["decision"].as_str()), (Some("throttled"), Some("retry")), "{v}");
    assert_eq!(v["advice"]["source"], "openai_reset");
    assert!(v["wait_ms"].as_u64().unwrap() <= 1_000, "{v}");
    let v = explain("429", &["x-ratelimit-remaining-requests: 0", "x-ratelimit-reset-requests: 12ms"]);
    assert_eq!(v["why"]["basis"]["bound"], "openai_reset", "{v}");
    assert_eq!(v["wait_ms"], 12, "{v}");
}

// ---- the production driver against a local server, one dialect at a time --------------

/// How the server says "wait".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// The IETF draft -10/-11 `RateLimit` List with `RateLimit-Policy`.
    RateLimitField,
    /// express-rate-limit `draft-7`.
    Draft7,
    /// express-rate-limit `draft-8`.
    Draft8,
    /// express-rate-limit `draft-6`.
    Draft6,
    /// @fastify/rate-limit's `X-RateLimit-*` in seconds.
    XRateLimit,
    /// OpenAI's `retry-after-ms`.
    RetryAfterMs,
    /// GitHub's primary limit: a 403, a Unix reset and `Date`.
    GitHub,
}

const DIALECTS: [Dialect; 7] = [
    Dialect::RateLimitField,
    Dialect::Draft7,
    Dialect::Draft8,
    Dialect::Draft6,
    Dialect::XRateLimit,
    Dialect::RetryAfterMs,
    Dialect::GitHub,
];

impl Dialect {
    /// The refusal advising `wait` (whole seconds but for `retry-after-ms`),
    /// and how long from now the server holds the client to: the advice as
    /// the server rounded it.
    fn refusal(self, wait: Duration) -> (StatusCode, Vec<(&'static str, String)>, Duration) {
        let t = wait.as_secs_f64().ceil() as u64;
        let secs = Duration::from_secs(t);
        let tooman = StatusCode::TOO_MANY_REQUESTS;
        match self {
            Dialect::RateLimitField => (
                tooman,
                vec![
                    ("ratelimit-policy", r#""default";q=5;w=60"#.into()),
                    ("ratelimit", format!(r#""default";r=0;t={t}"#)),
                ],
                secs,
            ),
            Dialect::Draft7 => (
                tooman,
                vec![("ratelimit-policy", "5;w=60".into()), ("ratelimit", format!("limit=5, remaining=0, reset={t}"))],
                secs,
            ),
            Dialect::Draft8 => (
                tooman,
                vec![
                    ("ratelimit", format!(r#""5-in-1min"; r=0; t={t}"#)),
                    ("ratelimit-policy", r#""5-in-1min"; q=5; w=60; pk=:ZjBmOTc3NGM2MDA0:"#.into()),
                ],
                secs,
            ),
            Dialect::Draft6 => (
                tooman,
                vec![
                    ("ratelimit-policy", "5;w=60".into()),
                    ("ratelimit-limit", "5".into()),
                    ("ratelimit-remaining", "0".into()),
                    ("ratelimit-reset", t.to_string()),
                ],
                secs,
            ),
            Dialect::XRateLimit => (
                tooman,
                vec![
                    ("x-ratelimit-limit", "5".into()),
                    ("x-ratelimit-remaining", "0".into()),
                    ("x-ratelimit-reset", t.to_string()),
                ],
                secs,
            ),
            Dialect::RetryAfterMs => (tooman, vec![("retry-after-ms", wait.as_millis().to_string())], wait),
            Dialect::GitHub => {
                // The reset rounded up to a whole Unix second, `Date` truncated.
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
                let reset = (now + wait).as_secs_f64().ceil() as u64;
                let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(now.as_secs()));
                let headers = vec![
                    ("x-ratelimit-limit", "60".into()),
                    ("x-ratelimit-remaining", "0".into()),
                    ("x-ratelimit-reset", reset.to_string()),
                    ("date", date),
                ];
                (StatusCode::FORBIDDEN, headers, Duration::from_secs(reset).saturating_sub(now))
            }
        }
    }
}

/// What one server saw.
#[derive(Debug, Default)]
struct Log {
    /// Arrivals, from the server's start.
    arrivals: Vec<Duration>,
    /// Until when the client was told to wait (from the server's start).
    told_until: Option<Duration>,
    /// Attempts that came before the advice allowed, and how early.
    early: Vec<Duration>,
}

/// A server that refuses its first request with `dialect`'s advice of
/// `wait`, refuses (again with the advice left) anything before the advice
/// allows, and accepts the rest with a 201.
async fn serve(dialect: Dialect, wait: Duration) -> (String, Arc<Mutex<Log>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/jobs", listener.local_addr().unwrap());
    let log = Arc::new(Mutex::new(Log::default()));
    let start = Instant::now();
    let l = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let l = l.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<hyper::body::Incoming>| {
                    let l = l.clone();
                    async move { Ok::<_, Infallible>(answer(&l, start.elapsed(), dialect, wait)) }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (url, log)
}

fn answer(log: &Mutex<Log>, now: Duration, dialect: Dialect, wait: Duration) -> Response<Full<Bytes>> {
    let mut log = log.lock().unwrap();
    log.arrivals.push(now);
    let left = match log.told_until {
        None => Some(wait),
        Some(until) if now < until => {
            log.early.push(until - now);
            Some(until - now)
        }
        Some(_) => None,
    };
    let Some(left) = left else {
        return Response::builder().status(201).body(Full::new(Bytes::from_static(b"{}"))).unwrap();
    };
    let (status, headers, held) = dialect.refusal(left);
    // The window's end is fixed by the first refusal; a later one advises
    // what is left of it, rounded up as the dialect rounds.
    log.told_until.get_or_insert(now + held);
    let mut res = Response::builder().status(status);
    for (name, value) in headers {
        res = res.header(name, value);
    }
    res.body(Full::new(Bytes::from_static(b"<html>Too Many Requests</html>"))).unwrap()
}

/// One job of `policy` against a server advising `wait` in `dialect`: the
/// driver's result (attempts, or the give-up's reason, attempts and time
/// slept) and
/// what the server saw.
async fn job(
    policy: Policy,
    dialect: Dialect,
    wait: Duration,
    seed: u64,
) -> (Result<u32, (String, u32, Duration)>, Log) {
    let (url, log) = serve(dialect, wait).await;
    let client = RetryClient::new(TokioClock::real(), HyperTransport::new(), policy);
    let req = Request::post(url.as_str()).body(Bytes::from_static(b"{}")).unwrap();
    let mut rng = seeded_rng(seed);
    let result = match client.execute(req, &mut rng, &CancellationToken::new()).await {
        Ok(done) => Ok(done.attempts),
        Err(e) => Err((e.reason.kind().to_owned(), e.attempts, e.waited)),
    };
    let log = std::mem::take(&mut *log.lock().unwrap());
    (result, log)
}

/// Every preset against every dialect, all at once: an advice of 1 s is
/// waited out and the job done at the second attempt, never early; an
/// advice of an hour (past every preset's `max_single_wait`) gives up at
/// once, after one request and no sleep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_preset_honours_every_dialect_over_real_sockets() {
    let mut tasks = Vec::new();
    for (i, &dialect) in DIALECTS.iter().enumerate() {
        for (j, preset) in Policy::PRESETS.iter().enumerate() {
            let policy = Policy::preset(preset).unwrap();
            let seed = (i * 10 + j) as u64;
            let fits = tokio::spawn(job(policy.clone(), dialect, Duration::from_secs(1), seed));
            let too_long = tokio::spawn(job(policy, dialect, Duration::from_secs(3600), seed));
            tasks.push((dialect, *preset, fits, too_long));
        }
    }
    let mut failures = Vec::new();
    for (dialect, preset, fits, too_long) in tasks {
        let (result, log) = fits.await.unwrap();
        if result != Ok(2) || !log.early.is_empty() || log.arrivals.len() != 2 {
            failures.push(format!(
                "{dialect:?}/{preset}, 1 s: {result:?}, early by {:?}, arrivals {:?}",
                log.early, log.arrivals
            ));
        }
        let (result, log) = too_long.await.unwrap();
        // At once: one request, no sleep at all.
        let at_once = matches!(&result, Err((kind, 1, waited)) if kind == "advice_too_long" && waited.is_zero());
        if !at_once || log.arrivals.len() != 1 {
            failures.push(format!("{dialect:?}/{preset}, 1 h: {result:?}, arrivals {:?}", log.arrivals));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Negative control: a client that does not read the advice (backoff only,
/// 20 ms to 40 ms) comes back before the advice allows, and the server sees
/// it; so the check above can fail.
#[tokio::test]
async fn a_client_that_ignores_the_dialect_is_caught_early() {
    let policy = Policy::background()
        .to_builder()
        .use_advice(false)
        .max_retries(100)
        .backoff(Backoff::new(Duration::from_millis(20), Duration::from_millis(40), Jitter::None))
        .build();
    let (result, log) = job(policy, Dialect::RateLimitField, Duration::from_secs(1), 1).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(!log.early.is_empty(), "the server saw no early attempt: {log:?}");
}

/// OpenAI's `x-ratelimit-reset-*` is an upper bound: a job is retried no
/// later than it, on the policy's backoff, and is not given up even when
/// the bound is past `max_single_wait`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_reset_bounds_the_wait_from_above() {
    let mut tasks = Vec::new();
    for (j, preset) in Policy::PRESETS.iter().enumerate() {
        let policy = Policy::preset(preset).unwrap();
        for bound in ["300ms", "1h"] {
            let first_window = policy.backoff.window(0);
            tasks.push((*preset, bound, first_window, tokio::spawn(openai_job(policy.clone(), bound, j as u64))));
        }
    }
    for (preset, bound, first_window, task) in tasks {
        let (attempts, gap) = task.await.unwrap();
        assert_eq!(attempts, Some(2), "{preset}/{bound}");
        // No later than the bound nor the backoff's first window, with 500 ms for scheduling.
        let limit =
            first_window.min(if bound == "1h" { Duration::from_secs(3600) } else { Duration::from_millis(300) });
        assert!(gap <= limit + Duration::from_millis(500), "{preset}/{bound}: retried {gap:?} after the refusal");
    }
}

/// A job against a server that refuses once with OpenAI's headers (the
/// requests exhausted, back to the initial state in `bound`), then accepts:
/// the attempts and the gap between the two arrivals.
async fn openai_job(policy: Policy, bound: &'static str, seed: u64) -> (Option<u32>, Duration) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/jobs", listener.local_addr().unwrap());
    let arrivals = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let a = arrivals.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let a = a.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<hyper::body::Incoming>| {
                    let a = a.clone();
                    async move {
                        let mut a = a.lock().unwrap();
                        a.push(Instant::now());
                        let res = if a.len() == 1 {
                            Response::builder()
                                .status(429)
                                .header("x-ratelimit-limit-requests", "60")
                                .header("x-ratelimit-remaining-requests", "0")
                                .header("x-ratelimit-reset-requests", bound)
                        } else {
                            Response::builder().status(201)
                        };
                        Ok::<_, Infallible>(res.body(Full::new(Bytes::new())).unwrap())
                    }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    let client = RetryClient::new(TokioClock::real(), HyperTransport::new(), policy);
    let req = Request::post(url.as_str()).body(Bytes::new()).unwrap();
    let attempts = client.execute(req, &mut seeded_rng(seed), &CancellationToken::new()).await.ok().map(|d| d.attempts);
    let a = arrivals.lock().unwrap();
    let gap = if a.len() >= 2 { a[1] - a[0] } else { Duration::MAX };
    (attempts, gap)
}
