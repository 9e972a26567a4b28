//! Imports `retrysim::internals` (hidden, no semver promise) for the runner's
//! options and traces: it measures the runner itself.
//!
//! What a simulated event costs, by world: `cargo bench --bench baseline`
//! (a few seconds).
//!
//! Runs `blinkimg-1s`'s fleet (seed 1) through the harness as `retrysim run`
//! does (turmoil, tokio, hyper, the API model; no traces kept) in three
//! layouts (`baseline/worlds.rs`: one shared host, a host per worker, a host
//! per worker and a limiter service), and the same scenario through a plain
//! discrete-event model (`baseline/des.rs`: a heap of events, nothing else).
//! It prints the CPU time (user + system, `getrusage`: a busy machine slows
//! the wall clock but hardly this) per simulated request of each and its
//! ratio to the model's. Each figure is the median of its runs, on one
//! thread. Printed as the table docs/guide/speed.md's "Measured speed" holds.

use std::time::Duration;

use retrysim::internals::run::runner::{Report, RunOptions, Traces};

#[path = "baseline/des.rs"]
mod des;
#[path = "baseline/worlds.rs"]
mod worlds;

/// Harness runs of each world; the model's runs are batched (one is far
/// under the CPU clock's resolution).
#[path = "common/cpu.rs"]
mod cpu;
use cpu::cpu;

const RUNS: usize = 7;
const BATCH: u32 = 2_000;

/// The median CPU time of `RUNS` calls of `once`, and the last call's result.
fn median<T>(mut once: impl FnMut() -> T) -> (Duration, T) {
    let mut last = None;
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let before = cpu();
            last = Some(once());
            cpu() - before
        })
        .collect();
    times.sort();
    (times[RUNS / 2], last.expect("at least one run"))
}

fn main() {
    let m = des::Model::blinkimg_1s();
    let (model, c) = median(|| {
        let mut counts = None;
        for _ in 0..BATCH {
            counts = Some(std::hint::black_box(des::run(std::hint::black_box(&m), 1)));
        }
        counts.expect("a batch runs")
    });
    let model = model / BATCH;
    let per_request = |cpu: Duration, requests: u64| cpu.as_secs_f64() * 1e6 / requests as f64;
    let floor = per_request(model, c.requests);

    println!(
        "| blinkimg-1s fleet, seed 1 | requests | limited | charged | virtual ms | CPU µs | µs/request | x the model |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for w in worlds::worlds() {
        let (spent, r): (Duration, Report) =
            median(|| RunOptions::new().traces(Traces::None).run(&w.scenario, 1).expect("the run finishes"));
        let each = per_request(spent, r.requests);
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {each:.2} | {:.0}x |",
            w.label,
            r.requests,
            r.limited,
            r.charged,
            r.virtual_ms,
            spent.as_secs_f64() * 1e6,
            each / floor
        );
    }
    println!(
        "| discrete-event model | {} | {} | {} | {} | {:.2} | {floor:.3} | 1x |",
        c.requests,
        c.limited,
        c.charged,
        c.virtual_ms,
        model.as_secs_f64() * 1e6
    );
}
