//! Imports `retrysim::internals` (hidden, no semver promise) for
//! `job::job_of_label`, to name jobs as the simulator's ledger does.
//!
//! What the integration examples share: hyper-util's client on the
//! simulated network, the command line (`--scenario`, `--seed`), and the
//! short report each prints for one checked run.
#![allow(dead_code)] // each example uses its own part of this module

use std::process::ExitCode;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use retrysim::internals::run::job::job_of_label;
use retrysim::testing::{ArrivalOutcome, Harness, Invariant, Report, SimConnector, SimTimer, black_box};

/// hyper-util's client over the simulated network.
pub type HttpClient = Client<SimConnector, Full<Bytes>>;

/// The client as the connector's docs recommend: hyper-util's default pool,
/// as in production, on the simulation's clock.
pub fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).pool_timer(SimTimer).build(SimConnector::new())
}

/// The job's request with the body hyper-util sends.
pub fn with_full_body(req: Request<Bytes>) -> Request<Full<Bytes>> {
    req.map(Full::new)
}

/// A copy of a request (without its extensions), to send it again.
pub fn copy_request<B: Clone>(req: &Request<B>) -> Request<B> {
    let mut copy = Request::new(req.body().clone());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}

/// Charges beyond the first for each job: work the account paid for twice.
pub fn extra_charges(r: &Report) -> u64 {
    let mut per_job = std::collections::BTreeMap::<u32, u64>::new();
    for a in r.ledger.arrivals.iter().filter(|a| a.outcome == ArrivalOutcome::Charged) {
        *per_job.entry(job_of_label(&a.client).unwrap_or(0)).or_default() += 1;
    }
    per_job.values().map(|n| n.saturating_sub(1)).sum()
}

/// The longest any job ran past the scenario's own deadline (its policy's),
/// in ms: the budget the scenario gives every job, whatever the client
/// promised.
pub fn past_deadline_ms(r: &Report) -> u64 {
    let deadline = r.scenario_config.policy.deadline.as_millis() as u64;
    r.records.iter().map(|j| (j.finished_ms - j.started_ms).saturating_sub(deadline)).max().unwrap_or(0)
}

/// `--scenario NAME --seed N` (each optional), or a message saying what to write.
pub fn args(example: &str, scenarios: &[&str]) -> Result<(Vec<String>, u64), String> {
    let usage = format!("usage: cargo run --release --example {example} -- [--scenario NAME] [--seed N]");
    let mut chosen = Vec::new();
    let mut seed = 1;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or_else(|| format!("{arg} needs a value\n{usage}"))?;
        match arg.as_str() {
            "--scenario" => {
                Harness::named(&value).map_err(|e| e.to_string())?;
                chosen.push(value);
            }
            "--seed" => {
                seed = value.parse().map_err(|_| format!("--seed {value:?} is not a whole number\n{usage}"))?;
            }
            _ => return Err(format!("unknown argument {arg:?}\n{usage}")),
        }
    }
    if chosen.is_empty() {
        chosen = scenarios.iter().map(|s| s.to_string()).collect();
    }
    Ok((chosen, seed))
}

/// Runs `h` on `seed`, prints what it did and what it broke, and returns
/// whether every black-box check held.
pub fn report(example: &str, client: &str, scenario: &str, h: &Harness, seed: u64) -> bool {
    let checked = h.check(seed);
    say(format_args!("{client} on {scenario}, seed {seed}:\n"));
    let Some(r) = &checked.report else {
        say(format_args!("  the run did not finish: {}\n", checked.run_error.as_deref().unwrap_or("?")));
        return false;
    };
    say(format_args!(
        "  {} of {} jobs done in {:.2} s; {} requests, {} answered 429, {} extra charges, {} ms past the scenario's deadline\n",
        r.succeeded,
        r.jobs,
        r.virtual_ms as f64 / 1000.0,
        r.requests,
        r.limited,
        extra_charges(r),
        past_deadline_ms(r),
    ));
    let broken = black_box(r);
    for v in broken.iter().take(5) {
        say(format_args!("  {v}\n"));
    }
    if broken.len() > 5 {
        say(format_args!("  ... and {} more\n", broken.len() - 5));
    }
    let determinism = checked.violations.iter().filter(|v| v.invariant == Invariant::Determinism).count();
    if determinism > 0 {
        say(format_args!("  two runs of the seed differ: the client reads state outside the seed\n"));
    }
    for b in &checked.not_applicable {
        say(format_args!(
            "  not applicable: the scenario injects {}, which this client cannot see: {}\n",
            b.class, b.reason
        ));
    }
    if broken.is_empty() && determinism == 0 && checked.not_applicable.is_empty() {
        say(format_args!("  every black-box check holds, and the seed replays byte for byte\n"));
        return true;
    }
    say(format_args!("  replay: cargo run --release --example {example} -- --scenario {scenario} --seed {seed}\n"));
    false
}

/// Writes to stdout; a reader that closed the pipe early (`| head`) ends
/// the program quietly with exit code 0, as a command-line tool does, rather
/// than with `println!`'s panic.
pub fn say(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(text).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Exit code 2 with the message, for bad input.
pub fn bad_input(message: &str) -> ExitCode {
    eprintln!("{message}");
    ExitCode::from(2)
}
