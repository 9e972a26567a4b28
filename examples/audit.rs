//! Imports `retrysim::internals` (hidden, no semver promise) for
//! `compare::Figure`, to print its table as `retrysim compare` does.
//!
//! What people use today, measured: `tower::retry` with a typical policy,
//! `backon`'s defaults and `backon` with Retry-After as its docs show it,
//! and reqwest-retry, against retrysim's client and the ideal, on three
//! scenarios. The section "What people use today (tower, backon, reqwest)"
//! of docs/guide/what-people-use.md is this program's output.
//!
//! ```sh
//! cargo run --release --example audit                                   # the guide's tables
//! cargo run --release --example audit -- --replay berlin-40-workers backon-retry-after 1
//! ```
//!
//! Every row runs on seeds 1..=5 ([`SEEDS`]) with the scenario as named;
//! each figure is the median over those seeds. The rows:
//!
//! - `tower-retry`: `examples/tower_retry.rs`, hyper-util's client in
//!   `tower::retry::Retry` with a typical policy (429, 5xx and transport
//!   errors, 5 retries, tower's exponential backoff);
//! - `backon-default`, `backon-retry-after`: `examples/backon.rs`,
//!   `ExponentialBuilder::default()`, without and with the `adjust` closure
//!   of backon's docs;
//! - `reqwest-retry`: `examples/reqwest_retry_sim.rs`, reqwest-retry's
//!   middleware with its README's policy (jitter from the job's seeded
//!   generator) in a reqwest-middleware stack ending in `SimReqwest`; on
//!   `lost-answers-no-key` its cells say *not applicable: answer-lost*
//!   (the stack cannot see a lost answer as reqwest would show it);
//! - `retrysim`: retrysim's own client under the scenario's policy (on
//!   `lost-answers-no-key` that policy sends no key, as the scenario says);
//! - `ideal`: retrysim's client behind the oracle gate (`sim::world::oracle`,
//!   the `ideal` row of `retrysim compare`), which knows the limiter and
//!   never meets a 429; it sends an `Idempotency-Key`, which is what makes
//!   a lost answer safe to retry.
//!
//! *Broken* lists the black-box checks (`sim::checks::blackbox`) that failed,
//! with every row held to one contract ([`contract`]): the attempts it was
//! configured with (tower 6, backon 4, reqwest-retry 4, retrysim its policy's), the
//! scenario's deadline (its policy's: 600 s, or 90 s for the Berlin batch),
//! and the server's `Retry-After`, whether or not the client reads it; and
//! to what every client owes (one charge per key, no unkeyed replay after a
//! lost answer, nothing after a terminal answer, no secrets). The examples
//! themselves promise only what each client does (tower and backon's
//! default promise no Retry-After), so they pass where the audit does not.
//! *Past deadline* is how far the slowest job ran past that deadline.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest_middleware::ClientBuilder;
use retrysim::env::{Rng, seeded_rng};
use retrysim::internals::run::scenario::ClientConfig;
use retrysim::internals::run::scenario::{self, GateConfig};
use retrysim::internals::tools::compare::Figure;
use retrysim::reqwest::RetryMiddleware;
use retrysim::testing::{
    BlackBoxCheck, FaultClass, Harness, Promises, Report, ReqwestStack, SimReqwest, black_box, from_fn, trace_text,
};

#[allow(dead_code)]
#[path = "backon.rs"]
pub mod backon_example;
#[allow(dead_code)]
#[path = "reqwest_retry_sim.rs"]
pub mod reqwest_retry_sim;
#[allow(clippy::duplicate_mod)]
#[path = "support/mod.rs"]
mod support;
#[allow(dead_code)]
#[path = "tower_retry.rs"]
pub mod tower_retry;

use backon_example::Variant;

/// The scenarios, with what the table says about each.
pub const SCENARIOS: [(&str, &str); 3] = [
    ("blinkimg-1s", "8 workers, 30 writes per 1 s fixed window"),
    ("berlin-40-workers", "40 workers, two-second jobs, a token bucket of 2.5 requests a second (bursts of 25)"),
    ("lost-answers-no-key", "`blinkimg-1s` with 10% of answers lost after the server charged, no key sent"),
];

/// The rows, in the table's order.
///
/// `retrysim-middleware` is retrysim's own reqwest middleware
/// (`retrysim::reqwest::RetryMiddleware`, the scenario's policy) in a
/// `ReqwestStack` before `SimReqwest`: the driver's decisions on reqwest's
/// path, which cannot see a lost answer.
pub const ROWS: [&str; 7] = [
    "tower-retry",
    "backon-default",
    "backon-retry-after",
    "reqwest-retry",
    "retrysim-middleware",
    "retrysim",
    "ideal",
];

/// The seeds every row runs.
pub const SEEDS: RangeInclusive<u64> = 1..=5;

/// The harness for one row on one scenario.
pub fn harness(scenario_name: &str, row: &str) -> Result<Harness, String> {
    let s = scenario::named(scenario_name).ok_or_else(|| {
        let names: Vec<&str> = SCENARIOS.iter().map(|(n, _)| *n).collect();
        format!("no scenario named {scenario_name:?}; the audit's scenarios are: {}", names.join(", "))
    })?;
    harness_of(s, row)
}

/// The harness for one row on scenario `s` (a named one, or one changed in code).
pub fn harness_of(mut s: scenario::Scenario, row: &str) -> Result<Harness, String> {
    if s.client != ClientConfig::default() {
        // The scenario's baseline (a naive client) gives way to retrysim's own.
        s.client = ClientConfig::default();
        s.policy.name = "retrysim".into();
    }
    Ok(match row {
        "tower-retry" => Harness::of(s).with_client(tower_retry::client()),
        "backon-default" => Harness::of(s).with_client(backon_example::client(Variant::Default)),
        "backon-retry-after" => Harness::of(s).with_client(backon_example::client(Variant::RetryAfterAsDocumented)),
        "reqwest-retry" => Harness::of(s).with_client(reqwest_retry_sim::client(reqwest_retry_sim::Variant::Seeded)),
        "retrysim-middleware" => Harness::of(s).with_client(from_fn("retrysim-middleware", |host| {
            // The host's clock, gate and budget, as retrysim's own client
            // gets them; keys and jitter from the first job's seeded generator.
            let (policy, clock) = (host.scenario.policy.clone(), host.clock.clone());
            let (gate, budget) = (host.gate.clone(), host.budget.clone());
            ReqwestStack::new(Promises::of_policy(&policy), move |terminal: SimReqwest, rng: &mut dyn Rng| {
                let mut retry =
                    RetryMiddleware::with_clock(clock.clone(), policy.clone()).with_rng(seeded_rng(rng.draw()));
                if let Some(gate) = &gate {
                    retry = retry.with_gate(gate.clone());
                }
                if let Some(budget) = &budget {
                    retry = retry.with_budget(budget.clone());
                }
                ClientBuilder::new(reqwest::Client::new()).with(retry).with(terminal).build()
            })
        })),
        "retrysim" => Harness::of(s),
        "ideal" => {
            s.fleet.gate = GateConfig::Ideal;
            s.policy.idempotency_keys = true;
            s.policy.name = "ideal".into();
            Harness::of(s)
        }
        _ => return Err(format!("no row named {row:?}; the rows are: {}", ROWS.join(", "))),
    }
    .determinism(false))
}

/// The contract the audit holds every row to: the attempts the client
/// declared, the scenario's deadline, and the server's advice.
pub fn contract(r: &Report) -> Promises {
    let mut promised = Promises::nothing().deadline(r.scenario_config.policy.deadline).honours_retry_after(true);
    promised.max_attempts = r.promises.max_attempts;
    promised
}

/// One run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub seed: u64,
    pub jobs: u64,
    pub done: u64,
    pub virtual_ms: u64,
    pub requests: u64,
    pub limited: u64,
    pub extra_charges: u64,
    pub past_deadline_ms: u64,
    /// The black-box checks that failed (each once).
    pub broken: Vec<BlackBoxCheck>,
    /// The fault classes the scenario injects that the client cannot see
    /// ([`Report::not_applicable`]): no pass can be claimed for this run.
    pub not_applicable: Vec<FaultClass>,
}

impl Run {
    /// The figures of `r`, its checks against [`contract`] (which it sets).
    fn of(r: &mut Report) -> Run {
        r.promises = contract(r);
        let mut broken: Vec<BlackBoxCheck> = black_box(r).iter().map(|v| v.check).collect();
        broken.sort();
        broken.dedup();
        Run {
            seed: r.seed,
            jobs: r.jobs,
            done: r.succeeded,
            virtual_ms: r.virtual_ms,
            requests: r.requests,
            limited: r.limited,
            extra_charges: support::extra_charges(r),
            past_deadline_ms: support::past_deadline_ms(r),
            broken,
            not_applicable: r.not_applicable().iter().map(|b| b.class).collect(),
        }
    }
}

/// Every row of every scenario on every seed, by (scenario, row), seeds in order.
pub type Audit = BTreeMap<(usize, usize), Vec<Run>>;

/// Runs the audit on `threads` threads.
pub fn run(threads: usize) -> Result<Audit, String> {
    let mut todo = Vec::new();
    for (si, (scenario, _)) in SCENARIOS.iter().enumerate() {
        for (ri, row) in ROWS.iter().enumerate() {
            let h = harness(scenario, row)?;
            todo.extend(SEEDS.map(|seed| (si, ri, h.clone(), seed)));
        }
    }
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, todo.len()) {
            scope.spawn(|| {
                while let Some((si, ri, h, seed)) = todo.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let run = h.run(*seed).map(|mut r| Run::of(&mut r)).map_err(|e| e.to_string());
                    done.lock().unwrap_or_else(|e| e.into_inner()).push(((*si, *ri), run));
                }
            });
        }
    });
    let mut audit = Audit::new();
    for (cell, run) in done.into_inner().unwrap_or_else(|e| e.into_inner()) {
        audit.entry(cell).or_default().push(run?);
    }
    for runs in audit.values_mut() {
        runs.sort_by_key(|r| r.seed);
    }
    Ok(audit)
}

fn median(runs: &[Run], figure: impl Fn(&Run) -> u64) -> f64 {
    Figure::of(&runs.iter().map(|r| figure(r) as f64).collect::<Vec<_>>()).median
}

/// The audit as docs/guide/what-people-use.md shows it: one table per scenario, then the
/// command that replays each failing row's first failing seed.
pub fn markdown(audit: &Audit) -> String {
    let seeds = SEEDS.count();
    let mut out = String::new();
    let mut replays = Vec::new();
    for (si, (name, what)) in SCENARIOS.iter().enumerate() {
        let deadline = scenario::named(name).map_or(0, |s| s.policy.deadline.as_secs());
        let jobs = audit.get(&(si, 0)).and_then(|runs| runs.first()).map_or(0, |r| r.jobs);
        out.push_str(&format!("**{name}**: {what}; {jobs} jobs, deadline {deadline} s.\n\n"));
        out.push_str("| client | jobs done | time s | requests | 429s | extra charges | past deadline s | broken |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---|\n");
        for (ri, row) in ROWS.iter().enumerate() {
            let Some(runs) = audit.get(&(si, ri)) else { continue };
            let mut broken: BTreeMap<BlackBoxCheck, usize> = BTreeMap::new();
            for check in runs.iter().flat_map(|r| &r.broken) {
                *broken.entry(*check).or_default() += 1;
            }
            let mut cell: Vec<String> = broken.iter().map(|(check, n)| format!("{check} ({n}/{seeds})")).collect();
            let mut blind: BTreeMap<FaultClass, usize> = BTreeMap::new();
            for class in runs.iter().flat_map(|r| &r.not_applicable) {
                *blind.entry(*class).or_default() += 1;
            }
            cell.extend(blind.iter().map(|(class, n)| format!("not applicable: {class} ({n}/{seeds})")));
            let broken = if cell.is_empty() { "none".to_string() } else { cell.join(", ") };
            if let Some(first) = runs.iter().find(|r| !r.broken.is_empty()) {
                replays.push(format!(
                    "- `{row}` on `{name}`: `cargo run --release --example audit -- --replay {name} {row} {}`\n",
                    first.seed
                ));
            }
            out.push_str(&format!(
                "| {row} | {} | {:.2} | {} | {} | {} | {:.1} | {broken} |\n",
                median(runs, |r| r.done),
                median(runs, |r| r.virtual_ms) / 1000.0,
                median(runs, |r| r.requests),
                median(runs, |r| r.limited),
                median(runs, |r| r.extra_charges),
                median(runs, |r| r.past_deadline_ms) / 1000.0,
            ));
        }
        out.push('\n');
    }
    out.push_str(
        "Replay a failing row (its first failing seed: the run's figures, every violation, and the trace):\n\n",
    );
    for line in replays {
        out.push_str(&line);
    }
    out
}

/// `--replay SCENARIO ROW SEED`: one run, its violations and its trace.
fn replay(scenario: &str, row: &str, seed: &str) -> Result<(), String> {
    let seed: u64 = seed.parse().map_err(|_| format!("the seed {seed:?} is not a whole number"))?;
    let h = harness(scenario, row)?;
    let mut r = h.run(seed).map_err(|e| e.to_string())?;
    let run = Run::of(&mut r);
    support::say(format_args!(
        "{row} on {scenario}, seed {seed}: {} of {} jobs done in {:.2} s; {} requests, {} answered 429, {} extra charges, {} ms past the deadline\n",
        run.done,
        run.jobs,
        run.virtual_ms as f64 / 1000.0,
        run.requests,
        run.limited,
        run.extra_charges,
        run.past_deadline_ms
    ));
    for v in black_box(&r) {
        support::say(format_args!("{v}\n"));
    }
    for b in r.not_applicable() {
        support::say(format_args!(
            "not applicable: the scenario injects {}, which this client cannot see: {}\n",
            b.class, b.reason
        ));
    }
    support::say(format_args!("\n"));
    support::say(format_args!("{}", trace_text(&r)));
    Ok(())
}

#[allow(dead_code)] // the test includes this file as a module
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: cargo run --release --example audit [-- --replay SCENARIO ROW SEED]";
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            run(threads).map(|audit| support::say(format_args!("{}", markdown(&audit))))
        }
        ["--replay", scenario, row, seed] => replay(scenario, row, seed),
        _ => Err(format!("unexpected arguments {args:?}\n{usage}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => support::bad_input(&e),
    }
}
