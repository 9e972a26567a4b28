//! Imports `retrysim::internals` (hidden, no semver promise) for the runner's
//! options and traces: it measures the runner itself.
//!
//! How far the harness is from the floor: `cargo bench --bench baseline`
//! (a few seconds).
//!
//! Runs `blinkimg-1s` (seed 1) through the harness as `retrysim run` does
//! (turmoil, tokio, hyper, the API model; no traces kept) and through a plain
//! discrete-event model of the same scenario (`baseline/des.rs`: a heap of
//! events, nothing else), and prints the wall time per simulated request of
//! each and their ratio. Each figure is the median of its runs, on one
//! thread. Printed as the table docs/guide/speed.md's "Measured speed" holds.

use std::time::{Duration, Instant};

use retrysim::internals::run::runner::{RunOptions, Traces};
use retrysim::internals::run::scenario;

#[path = "baseline/des.rs"]
mod des;

/// Harness runs; the model's runs are batched (one is far under a timer's resolution).
const RUNS: usize = 7;
const BATCH: u32 = 1_000;

fn median(mut walls: Vec<Duration>) -> Duration {
    walls.sort();
    walls[walls.len() / 2]
}

fn main() {
    let s = scenario::blinkimg_1s();
    let mut report = None;
    let harness = median(
        (0..RUNS)
            .map(|_| {
                let start = Instant::now();
                report = Some(RunOptions::new().traces(Traces::None).run(&s, 1).expect("the run finishes"));
                start.elapsed()
            })
            .collect(),
    );
    let r = report.expect("at least one run");

    let m = des::Model::blinkimg_1s();
    let mut counts = None;
    let model = median(
        (0..RUNS)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..BATCH {
                    counts = Some(std::hint::black_box(des::run(std::hint::black_box(&m), 1)));
                }
                start.elapsed() / BATCH
            })
            .collect(),
    );
    let c = counts.expect("at least one run");

    let per_request = |wall: Duration, requests: u64| wall.as_secs_f64() * 1e6 / requests as f64;
    let (h, b) = (per_request(harness, r.requests), per_request(model, c.requests));
    println!("| blinkimg-1s, seed 1 | requests | limited | charged | virtual ms | wall µs | µs/request |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    println!(
        "| harness (turmoil, tokio, hyper) | {} | {} | {} | {} | {:.1} | {h:.2} |",
        r.requests,
        r.limited,
        r.charged,
        r.virtual_ms,
        harness.as_secs_f64() * 1e6
    );
    println!(
        "| discrete-event baseline | {} | {} | {} | {} | {:.2} | {b:.3} |",
        c.requests,
        c.limited,
        c.charged,
        c.virtual_ms,
        model.as_secs_f64() * 1e6
    );
    println!("\nthe harness costs {:.0}x the baseline per simulated request", h / b);
}
