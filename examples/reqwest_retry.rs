//! retrysim's decisions for a reqwest user, both ways (docs/guide/driver.md,
//! "reqwest"): your `reqwest::Client` as the transport of a `RetryClient`,
//! and `RetryMiddleware` where `reqwest-retry` sits in a `reqwest_middleware`
//! chain. `tests/it/reqwest_driver.rs` runs both functions against a local
//! server; the guide's code is these functions, word for word.
//!
//! ```sh
//! cargo run --example reqwest_retry --features reqwest-middleware -- http://127.0.0.1:PORT/v1/jobs
//! ```
//!
//! It POSTs one job each way and prints what it took; with `JOBS WORKERS`
//! after the URL it sends that many jobs through the middleware from that
//! many tasks (a fleet against a real limiter) and prints the statuses.

use std::process::ExitCode;

// guide: imports
use retrysim::bytes::Bytes;
use retrysim::env::{TokioClock, os_rng};
use retrysim::http::Request;
use retrysim::reqwest::{Retried, RetryMiddleware};
use retrysim::{Policy, RetryClient, RetryError};

type Error = Box<dyn std::error::Error + Send + Sync>;
// guide: end

// guide: transport
/// One job through `RetryClient`, over your own reqwest client (its TLS,
/// proxies and pool): the status and the attempts it took.
pub async fn post_with_transport(http: reqwest::Client, url: &str) -> Result<(u16, u32), Error> {
    let client = RetryClient::new(TokioClock::real(), http, Policy::background());
    let req = Request::post(url).header("content-type", "application/json").body(Bytes::from("{}"))?;
    let done = client.execute(req, &mut os_rng()?, &Default::default()).await?;
    Ok((done.response.status().as_u16(), done.attempts))
}
// guide: end

// guide: middleware
/// One job through a reqwest_middleware chain with retrysim's retry in it:
/// the status, and the attempts it took (on success or on a give-up that
/// kept the server's last answer).
pub async fn post_with_middleware(http: reqwest::Client, url: &str) -> Result<(u16, u32), Error> {
    let client = reqwest_middleware::ClientBuilder::new(http).with(RetryMiddleware::new(Policy::background())).build();
    let res = client.post(url).header("content-type", "application/json").body("{}").send().await?;
    let attempts = match (res.extensions().get::<Retried>(), res.extensions().get::<RetryError>()) {
        (Some(done), _) => done.attempts,
        (None, Some(gave_up)) => gave_up.attempts,
        (None, None) => 1,
    };
    Ok((res.status().as_u16(), attempts))
}
// guide: end

/// `JOBS` jobs through one middleware client shared by `WORKERS` tasks: the
/// statuses and the attempts they took (a fleet against a real limiter).
async fn fleet(url: &str, jobs: u32, workers: u32) -> Result<(), Error> {
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(Policy::background()))
        .build();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let (client, next, url) = (client.clone(), next.clone(), url.to_owned());
        tasks.spawn(async move {
            let mut seen = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < jobs {
                let res = client.post(&url).header("content-type", "application/json").body("{}").send().await;
                seen.push(match res {
                    Ok(res) => {
                        let attempts = res.extensions().get::<Retried>().map(|r| r.attempts);
                        let attempts = attempts.or(res.extensions().get::<RetryError>().map(|e| e.attempts));
                        (res.status().as_u16(), attempts.unwrap_or(1))
                    }
                    Err(e) => {
                        eprintln!("a job failed: {e}");
                        (0, 0)
                    }
                });
            }
            seen
        });
    }
    let mut by_status = std::collections::BTreeMap::<u16, (u32, u32)>::new();
    while let Some(done) = tasks.join_next().await {
        for (status, attempts) in done? {
            let entry = by_status.entry(status).or_default();
            entry.0 += 1;
            entry.1 += attempts;
        }
    }
    for (status, (n, attempts)) in by_status {
        println!("{n} jobs answered {status} after {attempts} attempts in all");
    }
    Ok(())
}

/// `reqwest_retry URL`: one job each way; `reqwest_retry URL JOBS WORKERS`:
/// a fleet through the middleware.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    const USAGE: &str = "usage: reqwest_retry URL [JOBS WORKERS] (e.g. http://127.0.0.1:8080/v1/jobs 60 8)";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let counts: Vec<Option<u32>> = args.iter().skip(1).map(|a| a.parse().ok().filter(|n| *n > 0)).collect();
    match (args.first(), &counts[..]) {
        (Some(url), []) => {
            let http = reqwest::Client::new();
            for (way, result) in [
                ("transport", post_with_transport(http.clone(), url).await),
                ("middleware", post_with_middleware(http.clone(), url).await),
            ] {
                match result {
                    Ok((status, attempts)) => println!("{way}: {status} after {attempts} attempts"),
                    Err(e) => {
                        eprintln!("{way}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            ExitCode::SUCCESS
        }
        (Some(url), [Some(jobs), Some(workers)]) => match fleet(url, *jobs, *workers).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("reqwest_retry: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("{USAGE}; JOBS and WORKERS are whole numbers above 0");
            ExitCode::from(2)
        }
    }
}
