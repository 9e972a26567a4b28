//! Imports `retrysim::internals` (hidden, no semver promise) for the
//! simulator's own requests (`job::request`, `kind_of`), sent to `retrysim
//! serve` on a real socket.
//!
//! reqwest's own retry (`reqwest::retry`, reqwest 0.12.23 and later) with
//! the policy most users would write: retry a 429, a 5xx or any error, for
//! the API's host. reqwest cannot ride the simulated network (its connector
//! is sealed, and a reqwest client inside the simulation panics with "IO is
//! disabled"), so this runs where reqwest runs: against `Served`, the same
//! API on a real loopback socket in real time, with the scenario's workers
//! and jobs, and reads `serve`'s ledger-only verdict.
//!
//! ```sh
//! cargo run --release --example reqwest_builtin [-- --scenario NAME] [--seed N]
//! ```
//!
//! reqwest's retry has no backoff: a retryable answer is sent again at once,
//! at most `max_retries_per_request` (2) times, within a budget of 20% extra
//! requests over 10 s (`retry::Builder`'s defaults). It reads no
//! `Retry-After` and sends no `Idempotency-Key`. Real time and real sockets:
//! the figures move from run to run; the verdict is what the test holds.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use http::Uri;
use retrysim::internals::run::job;
use retrysim::testing::{BlackBoxCheck, Scenario, ServeOptions, ServeReport, Served};

#[allow(clippy::duplicate_mod)]
#[path = "support/mod.rs"]
mod support;

/// The scenarios the example runs, the audit's three.
pub const SCENARIOS: [&str; 3] = ["blinkimg-1s", "berlin-40-workers", "lost-answers-no-key"];

/// The table's head.
pub const HEAD: &str = "| client | scenario | jobs done | requests | 429s | charges | lost answers | broken |\n|---|---|---:|---:|---:|---:|---:|---|\n";

/// The client: reqwest with its built-in retry for the host `host`.
pub fn client(host: &'static str) -> reqwest::Client {
    let policy = reqwest::retry::for_host(host).classify_fn(|req_rep| {
        let status = req_rep.status();
        if req_rep.error().is_some() || status.is_some_and(|s| s == 429 || s.is_server_error()) {
            req_rep.retryable()
        } else {
            req_rep.success()
        }
    });
    reqwest::Client::builder().retry(policy).no_proxy().build().expect("a client without TLS builds")
}

/// One run: the scenario's workers share its jobs, each sent once through
/// the client; returns the jobs that succeeded and `serve`'s report.
pub async fn run(s: &Scenario, seed: u64) -> Result<(u32, ServeReport), String> {
    let options = ServeOptions::default().seed(seed);
    let server = Served::start_with(s, options).await.map_err(|e| e.to_string())?;
    let client = client("127.0.0.1");
    let (next, ok) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let mut set = tokio::task::JoinSet::new();
    for worker in 0..s.fleet.workers {
        let (client, next, ok, s, url) = (client.clone(), next.clone(), ok.clone(), s.clone(), server.url());
        set.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= s.fleet.jobs {
                    return;
                }
                let mut req = job::request(&s, job::kind_of(&s, 7, n), n, worker);
                let path = req.uri().path_and_query().map_or("/v1/jobs".to_owned(), ToString::to_string);
                *req.uri_mut() = format!("{url}{path}").parse::<Uri>().expect("the server's URL and a path");
                let Ok(req) = reqwest::Request::try_from(req) else { continue };
                if let Ok(res) = client.execute(req).await
                    && res.status().is_success()
                    && res.bytes().await.is_ok()
                {
                    ok.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    let all = async {
        while let Some(r) = set.join_next().await {
            r.map_err(|e| format!("a worker failed: {e}"))?;
        }
        Ok::<(), String>(())
    };
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .map_err(|_| "the fleet took over 120 s".to_string())??;
    Ok((ok.load(Ordering::SeqCst), server.stop().await))
}

/// The checks `serve`'s verdict broke, in its order.
pub fn broken(r: &ServeReport) -> Vec<BlackBoxCheck> {
    r.checks.iter().filter(|c| !c.holds).map(|c| c.check).collect()
}

/// One table row: client, scenario, jobs done, requests, 429s, charges, broken.
pub fn row(scenario: &str, jobs: u32, done: u32, r: &ServeReport) -> String {
    let broken = broken(r);
    let broken = if broken.is_empty() {
        "none".to_string()
    } else {
        broken.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    };
    format!(
        "| reqwest-builtin | {scenario} | {done} of {jobs} | {} | {} | {} | {} | {broken} |",
        r.requests, r.limited, r.charged, r.lost_answers
    )
}

#[allow(dead_code)] // the test includes this file as a module
fn main() -> ExitCode {
    let (scenarios, seed) = match support::args("reqwest_builtin", &SCENARIOS) {
        Ok(a) => a,
        Err(e) => return support::bad_input(&e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return support::bad_input(&format!("cannot start tokio: {e}")),
    };
    support::say(format_args!("{HEAD}"));
    for name in &scenarios {
        let Some(s) = retrysim::internals::run::scenario::named(name) else { continue };
        match runtime.block_on(run(&s, seed)) {
            Ok((done, r)) => support::say(format_args!("{}\n", row(name, s.fleet.jobs, done, &r))),
            Err(e) => return support::bad_input(&e),
        }
    }
    ExitCode::SUCCESS
}
