//! Imports `retrysim::internals` (hidden, no semver promise) for the
//! comparison's `blinkimg_1s` rows and `retry_after_jitter`, to drive a real
//! server with the simulator's policies.
//!
//! Drives a real rate-limited server with the production driver: a fleet of
//! workers on [`TokioClock::real`] and [`HyperTransport`], the same policies
//! and gate as the simulator's `blinkimg-1s` comparison rows.
//!
//! ```sh
//! cargo run --release --example calibrate -- \
//!     --url http://127.0.0.1:PORT/fixed/v1/jobs --policy pacing [--format json]
//! # or against `retrysim serve --scenario blinkimg-1s` (its first line is the URL):
//! cargo run --release --example calibrate -- \
//!     --server serve --url http://127.0.0.1:PORT/v1/jobs --policy retry-after-jitter
//! ```
//!
//! `tests/conformance/run.sh` runs it against Flask-Limiter, and
//! `tests/conformance/limiters/run.sh` against express-rate-limit and nginx
//! `limit_req`, and set the figures beside the simulator's. It prints the requests and 429s the
//! fleet saw, the charges the server's ledger recorded (`GET /__stats`, or
//! `GET /__retrysim/report` of `retrysim serve`),
//! the jobs lost, the wall time, and the ideal time for the limit: the
//! windows the jobs need, plus the round trips of the last window's burst
//! (each worker sends its share of the limit one after another).
//!
//! Everything is bounded: `--time-limit` cancels the fleet (a cancelled job
//! counts as lost), every attempt has the policy's timeout, and the server
//! calls have a 5 s timeout.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use http::{Request, Response, Uri};
use retrysim::client::RetryClient;
use retrysim::core::classify::{Class, Classifier, DefaultTable, Outcome};
use retrysim::core::policy::Policy;
use retrysim::env::{HyperTransport, TokioClock, Transport, TransportError, seeded_rng};
use retrysim::gate::Gate;
use retrysim::gate::pacing::{Pacing, PacingConfig, PacingState};
use retrysim::internals::run::scenario;
use retrysim::internals::tools::compare;
use retrysim::trace::Trace;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum PolicyName {
    /// Wait Retry-After plus 0–250 ms, 50 tries (brief 002's best).
    RetryAfterJitter,
    /// Wait uniform[0, min(8 s, 100 ms × 2^n)], ignoring Retry-After, 50 tries.
    ExponentialFullJitter,
    /// Retry-After plus jitter behind one `Pacing` gate shared by the fleet.
    Pacing,
    /// The same with `learn_phase` off: the gate trusts the rounded reset
    /// (a negative control for the conformance script's ideal-time check).
    PacingNoPhase,
    /// The `interactive` preset, as a service ships it (`Policy::preset`).
    Interactive,
    /// The `background` preset.
    Background,
    /// The `batch` preset.
    Batch,
    /// The `standard` preset.
    Standard,
    /// `background` as it was before refused advice escalated: a zero `Retry-After` spread
    /// over at most 100 ms and no escalation of an advice refused again (a
    /// negative control: against a server that rounds down it loses jobs).
    BackgroundBefore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Uncoded429 {
    /// The driver's default table: a 429 without a code but with valid
    /// advice (Flask-Limiter always sends `Retry-After`) is throttling.
    Throttled,
    /// A negative control: every 429 without a code is unclear (3 tries),
    /// as the default table once judged it; jobs are lost.
    Unclear,
}

/// The server behind `--url`, which says where its ledger is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Server {
    /// tests/conformance's Flask-Limiter server: `POST /__reset`, `GET /__stats`.
    Flask,
    /// `retrysim serve`: `POST /__retrysim/reset`, `GET /__retrysim/report`.
    Serve,
}

impl Server {
    fn reset_path(self) -> &'static str {
        match self {
            Server::Flask => "/__reset",
            Server::Serve => "/__retrysim/reset",
        }
    }

    fn ledger_path(self) -> &'static str {
        match self {
            Server::Flask => "/__stats",
            Server::Serve => "/__retrysim/report",
        }
    }

    /// Charges, and keys charged more than once, from the ledger's JSON.
    fn charges(self, ledger: &serde_json::Value) -> (u64, u64) {
        let number = |k: &str| ledger.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        match self {
            Server::Flask => (number("charges"), number("keys_charged_twice")),
            Server::Serve => {
                let twice = ledger.get("charges").and_then(serde_json::Value::as_object).map_or(0, |m| {
                    m.iter().filter(|(k, n)| k.as_str() != "(no key)" && n.as_u64().unwrap_or(0) > 1).count()
                });
                (number("charged"), twice as u64)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// Drive a rate-limited server with a fleet of retrying workers.
#[derive(Debug, Parser)]
#[command(name = "calibrate")]
struct Args {
    /// The jobs endpoint, e.g. http://127.0.0.1:8080/fixed/v1/jobs (or
    /// https://, trusting the platform's roots or SSL_CERT_FILE).
    #[arg(long)]
    url: Uri,
    /// The policy every worker runs.
    #[arg(long, value_enum)]
    policy: PolicyName,
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    workers: u32,
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    jobs: u32,
    /// The server's limit per window (for the ideal time only).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
    /// The server's window (for the ideal time only).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    window: Duration,
    /// Which server `--url` is on: where its ledger and reset are.
    #[arg(long, value_enum, default_value = "flask")]
    server: Server,
    /// Sent as `x-api-key` on every job (`retrysim serve`'s scenarios have
    /// the account `key-a`; Flask-Limiter's server ignores it).
    #[arg(long, default_value = "key-a")]
    api_key: String,
    /// Do not reset the server's ledger and limiters (`POST /__reset`, or
    /// `/__retrysim/reset`, on the URL's host) before the run.
    #[arg(long)]
    no_reset: bool,
    /// Cancel the fleet after this long (its unfinished jobs are lost).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    time_limit: Duration,
    /// What a 429 without an error code means (`unclear` is a negative control).
    #[arg(long, value_enum, default_value = "throttled")]
    uncoded_429: Uncoded429,
    /// Seed for keys and jitter (default: drawn from the OS).
    #[arg(long)]
    seed: Option<u64>,
    /// Write one line per attempt (times, status, rate-limit headers) here.
    #[arg(long)]
    log: Option<std::path::PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// The old, defective judgement: a 429 without a code is unclear, whatever
/// advice it carries; else the default table.
struct UncodedIsUnclear(DefaultTable);

impl Classifier for UncodedIsUnclear {
    fn classify(&self, outcome: Outcome<'_>) -> Class {
        match outcome {
            Outcome::Answer { status, code: None, .. } if status.as_u16() == 429 => Class::Unclear,
            other => self.0.classify(other),
        }
    }
}

/// One attempt as the transport saw it.
struct Sent {
    at: Duration,
    took: Duration,
    status: Option<u16>,
    headers: String,
}

/// Counts every attempt and its round trip, and keeps a log line for each.
struct Metered {
    inner: HyperTransport,
    origin: Instant,
    sent: Mutex<Vec<Sent>>,
}

impl Transport for Metered {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        let start = Instant::now();
        let result = self.inner.send(req).await;
        let took = start.elapsed();
        let headers = match &result {
            Ok(res) => ["date", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"]
                .iter()
                .map(|h| format!("{h}={}", res.headers().get(*h).and_then(|v| v.to_str().ok()).unwrap_or("-")))
                .collect::<Vec<_>>()
                .join(" "),
            Err(e) => e.to_string(),
        };
        let status = result.as_ref().ok().map(|r| r.status().as_u16());
        let at = start.duration_since(self.origin);
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).push(Sent { at, took, status, headers });
        result
    }
}

#[derive(Debug, Serialize)]
struct Report {
    url: String,
    policy: PolicyName,
    workers: u32,
    jobs: u32,
    /// Attempts the fleet sent, and how many were answered 429 and 503
    /// (nginx `limit_req`'s default refusal).
    requests: u64,
    limited: u64,
    unavailable: u64,
    /// Jobs that did not succeed (given up or cancelled by the time limit).
    lost: u32,
    give_ups: BTreeMap<String, u32>,
    /// The server's ledger after the run.
    server: serde_json::Value,
    charges: u64,
    keys_charged_twice: u64,
    wall_s: f64,
    /// Median round trip of an answered attempt.
    rtt_ms: f64,
    /// (windows needed - 1) × window + ceil(limit / workers) round trips.
    ideal_s: f64,
    ratio_to_ideal: f64,
    timed_out: bool,
    seed: u64,
}

#[derive(Debug)]
struct Failure(String);

/// Calls the server's ledger or reset (`Server`'s paths) on the jobs URL's host.
async fn ledger(url: &Uri, method: http::Method, path: &str) -> Result<serde_json::Value, Failure> {
    let authority = url.authority().cloned().ok_or_else(|| Failure(format!("--url {url} has no host")))?;
    let uri = Uri::builder()
        .scheme(url.scheme_str().unwrap_or("http"))
        .authority(authority)
        .path_and_query(path)
        .build()
        .map_err(|e| Failure(format!("bad ledger URL: {e}")))?;
    let req = Request::builder().method(method).uri(&uri).body(Bytes::new()).expect("a valid request");
    let res = tokio::time::timeout(Duration::from_secs(5), HyperTransport::new().send(req))
        .await
        .map_err(|_| Failure(format!("{uri} did not answer in 5 s: is the conformance server running?")))?
        .map_err(|e| Failure(format!("{uri}: {e}; is the conformance server running?")))?;
    if !res.status().is_success() {
        return Err(Failure(format!("{uri} answered {}: is this the conformance server?", res.status())));
    }
    serde_json::from_slice(res.body()).map_err(|e| Failure(format!("{uri} did not answer JSON ({e})")))
}

fn policy_for(name: PolicyName) -> Policy {
    let preset = |n: &str| Policy::preset(n).expect("a preset");
    match name {
        PolicyName::Interactive => preset("interactive"),
        PolicyName::Background => preset("background"),
        PolicyName::Batch => preset("batch"),
        PolicyName::Standard => preset("standard"),
        PolicyName::BackgroundBefore => {
            let mut p = preset("background");
            p.escalate = false;
            p.spread.rounded_zero = Duration::ZERO;
            p.named("background-before")
        }
        PolicyName::RetryAfterJitter | PolicyName::Pacing | PolicyName::PacingNoPhase => scenario::retry_after_jitter(),
        PolicyName::ExponentialFullJitter => compare::blinkimg_1s()
            .row("exponential-full-jitter")
            .expect("the blinkimg-1s preset has the exponential-full-jitter row")
            .scenario
            .policy
            .clone(),
    }
}

async fn run(args: &Args, seed: u64) -> Result<(Report, Vec<Sent>), Failure> {
    if !matches!(args.url.scheme_str(), Some("http" | "https")) || args.url.authority().is_none() {
        return Err(Failure(format!("--url {}: give an http:// or https:// URL with a host and port", args.url)));
    }
    if !args.no_reset {
        ledger(&args.url, http::Method::POST, args.server.reset_path()).await?;
    }
    let transport =
        Arc::new(Metered { inner: HyperTransport::new(), origin: Instant::now(), sent: Mutex::new(Vec::new()) });
    let mut client = RetryClient::new(TokioClock::real(), transport.clone(), policy_for(args.policy));
    if args.uncoded_429 == Uncoded429::Unclear {
        client = client.with_classifier(Arc::new(UncodedIsUnclear(DefaultTable::default())));
    }
    let pacing = match args.policy {
        PolicyName::Pacing => Some(PacingConfig::default()),
        PolicyName::PacingNoPhase => Some(PacingConfig::default().learn_phase(false)),
        _ => None,
    };
    if let Some(config) = pacing {
        let gate: Arc<dyn Gate> = Arc::new(Pacing::new(PacingState::new(config)));
        client = client.with_gate(gate);
    }
    let client = Arc::new(client);
    let next = Arc::new(AtomicU32::new(0));
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..args.workers {
        let (client, next, cancel, url, jobs, api_key) =
            (client.clone(), next.clone(), cancel.clone(), args.url.clone(), args.jobs, args.api_key.clone());
        // Each worker its own stream: keys differ across workers and runs.
        let mut rng = seeded_rng(seed.wrapping_add(u64::from(w).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        workers.spawn(async move {
            let mut outcomes = Vec::new();
            loop {
                let job = next.fetch_add(1, Ordering::Relaxed);
                if job >= jobs {
                    break;
                }
                // The job body of the simulated API (Flask-Limiter's server ignores it).
                let body = Bytes::from(format!("{{\"uploadId\":\"u{job}\",\"options\":{{\"op\":\"compress\"}}}}"));
                let req = Request::post(url.clone())
                    .header("content-type", "application/json")
                    .header("x-api-key", api_key.as_str())
                    .body(body);
                let req = req.expect("a valid request");
                let mut trace = Trace::new(format!("w{w} job-{job}"));
                let outcome = client.execute_traced(req, &mut rng, &cancel, &mut trace).await;
                outcomes.push(outcome.map(|_| ()).map_err(|e| e.reason.to_string()));
            }
            outcomes
        });
    }
    let mut outcomes = Vec::new();
    // Cancel at the time limit; a worker still running 10 s later is aborted.
    let deadline = tokio::time::sleep(args.time_limit);
    let hard_stop = tokio::time::sleep(args.time_limit + Duration::from_secs(10));
    tokio::pin!(deadline, hard_stop);
    let mut timed_out = false;
    loop {
        tokio::select! {
            biased;
            joined = workers.join_next() => match joined {
                Some(Ok(o)) => outcomes.extend(o),
                Some(Err(e)) => return Err(Failure(format!("a worker failed: {e}"))),
                None => break,
            },
            _ = &mut deadline, if !timed_out => {
                timed_out = true;
                cancel.cancel();
            }
            _ = &mut hard_stop => {
                workers.abort_all();
                return Err(Failure("the fleet did not stop within 10 s of the time limit".into()));
            }
        }
    }
    let wall = started.elapsed();
    let server = ledger(&args.url, http::Method::GET, args.server.ledger_path()).await?;
    let sent = std::mem::take(&mut *transport.sent.lock().unwrap_or_else(|e| e.into_inner()));
    let mut give_ups = BTreeMap::new();
    for reason in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        *give_ups.entry(reason.clone()).or_insert(0) += 1;
    }
    let succeeded = outcomes.iter().filter(|o| o.is_ok()).count() as u32;
    let mut rtts: Vec<Duration> = sent.iter().filter(|s| s.status.is_some()).map(|s| s.took).collect();
    rtts.sort();
    let rtt = rtts.get(rtts.len() / 2).copied().unwrap_or_default();
    let windows = args.jobs.div_ceil(args.limit);
    let burst = args.limit.min(args.jobs).div_ceil(args.workers);
    let ideal = args.window * windows.saturating_sub(1) + rtt * burst;
    let (charges, keys_charged_twice) = args.server.charges(&server);
    let report = Report {
        url: args.url.to_string(),
        policy: args.policy,
        workers: args.workers,
        jobs: args.jobs,
        requests: sent.len() as u64,
        limited: sent.iter().filter(|s| s.status == Some(429)).count() as u64,
        unavailable: sent.iter().filter(|s| s.status == Some(503)).count() as u64,
        lost: args.jobs - succeeded,
        give_ups,
        charges,
        keys_charged_twice,
        server,
        wall_s: wall.as_secs_f64(),
        rtt_ms: rtt.as_secs_f64() * 1e3,
        ideal_s: ideal.as_secs_f64(),
        ratio_to_ideal: wall.as_secs_f64() / ideal.as_secs_f64().max(1e-9),
        timed_out,
        seed,
    };
    Ok((report, sent))
}

fn text(r: &Report) -> String {
    let policy = serde_json::to_value(r.policy).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let mut out = format!("calibrate {policy} on {}: {} workers, {} jobs\n", r.url, r.workers, r.jobs);
    out += &format!(
        "requests {}  429s {}  503s {}  charges {}  keys charged twice {}  lost {}  time {:.2} s  ideal {:.2} s ({:.2}x)\n",
        r.requests,
        r.limited,
        r.unavailable,
        r.charges,
        r.keys_charged_twice,
        r.lost,
        r.wall_s,
        r.ideal_s,
        r.ratio_to_ideal
    );
    for (reason, n) in &r.give_ups {
        out += &format!("  gave up: {n} × {reason}\n");
    }
    if r.timed_out {
        out += "  the time limit cancelled the fleet\n";
    }
    out
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Keys must differ across runs: unless told otherwise, seed from the
    // OS's entropy (`RandomState` keys come from it).
    let seed = args.seed.unwrap_or_else(|| RandomState::new().hash_one(Instant::now()));
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("calibrate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (report, sent) = match runtime.block_on(run(&args, seed)) {
        Ok(r) => r,
        Err(Failure(message)) => {
            eprintln!("calibrate: {message}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &args.log {
        let lines: String = sent
            .iter()
            .map(|s| {
                let status = s.status.map_or("-".to_owned(), |c| c.to_string());
                format!(
                    "{:>9.3} {:>7.3} {status} {}\n",
                    s.at.as_secs_f64() * 1e3,
                    s.took.as_secs_f64() * 1e3,
                    s.headers
                )
            })
            .collect();
        if let Err(e) = std::fs::write(path, lines) {
            eprintln!("calibrate: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    let out = match args.format {
        Format::Text => text(&report),
        Format::Json => serde_json::to_string(&report).expect("a report serialises") + "\n",
    };
    let _ = std::io::stdout().write_all(out.as_bytes());
    ExitCode::SUCCESS
}
