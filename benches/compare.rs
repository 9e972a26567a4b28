//! Imports `retrysim::internals` (hidden, no semver promise) for the comparison
//! and the runner: it measures them.
//!
//! How fast the harness is: `cargo bench --bench compare` (a few minutes at most).
//!
//! divan times, on one thread so the figures do not depend on what else the
//! machine runs:
//! - `presets::whole_comparison`: every row of a preset on 5 seeds, as
//!   `retrysim compare` runs it; the throughput is simulated requests per
//!   wall second;
//! - `scaling::workers` (8, 64, 512, with 1,200 jobs so every worker has
//!   work) and `scaling::jobs` (120, 1,200, 12,000, with 8 workers): one run
//!   of `blinkimg-1s`'s Retry-After + jitter row, to see that the cost grows
//!   no worse than linearly with the requests.
//!
//! Then, unless a filter is given, a summary measured once per line: the
//! virtual/wall ratio of each preset, the cost per request of each size,
//! and what the 10 ms tick of the long presets changes against a 1 ms one.
//!
//! Targets on a 2-core machine in release: `blinkimg-1s` under 2 s,
//! `blinkimg-60s` under 5 s, cost per request flat as the work grows.

use std::time::{Duration, Instant};

use divan::Bencher;
use divan::counter::ItemsCount;
use retrysim::internals::run::runner;
use retrysim::internals::run::scenario::{self, Scenario};
use retrysim::internals::tools::compare::{self, Comparison, PRESETS, Preset};

const SEEDS: u32 = 5;

fn main() {
    divan::main();
    let filtered = std::env::args().skip(1).any(|a| !a.starts_with('-'));
    if !filtered {
        summary();
    }
}

fn preset(name: &str) -> Preset {
    compare::preset(name).expect("a preset")
}

fn total_requests(c: &Comparison) -> u64 {
    c.rows.iter().flat_map(|r| &r.runs).map(|r| r.requests).sum()
}

fn total_virtual(c: &Comparison) -> Duration {
    Duration::from_millis(c.rows.iter().flat_map(|r| &r.runs).map(|r| r.virtual_ms).sum())
}

/// `blinkimg-1s`'s Retry-After + jitter row with another fleet size.
fn scaled(workers: u32, jobs: u32) -> Scenario {
    let mut s = scenario::blinkimg_1s();
    s.fleet.workers = workers;
    s.fleet.jobs = jobs;
    s.time_limit = Duration::from_secs(24 * 3600);
    s
}

fn requests_of(s: &Scenario) -> u64 {
    runner::run(s, 1).expect("the run finishes").requests
}

mod presets {
    use super::*;

    #[divan::bench(args = PRESETS, sample_count = 3, sample_size = 1)]
    fn whole_comparison(bencher: Bencher, name: &str) {
        let p = preset(name);
        let requests = total_requests(&compare::run(&p, SEEDS, 1).expect("the comparison runs"));
        bencher.counter(ItemsCount::new(requests)).bench(|| compare::run(&p, SEEDS, 1).expect("the comparison runs"));
    }
}

mod scaling {
    use super::*;

    /// 1,200 jobs, so that even 512 workers all have work.
    #[divan::bench(args = [8, 64, 512], sample_count = 3, sample_size = 1)]
    fn workers(bencher: Bencher, workers: u32) {
        let s = scaled(workers, 1_200);
        bencher.counter(ItemsCount::new(requests_of(&s))).bench(|| runner::run(&s, 1).expect("the run finishes"));
    }

    #[divan::bench(args = [120, 1_200, 12_000], sample_count = 3, sample_size = 1)]
    fn jobs(bencher: Bencher, jobs: u32) {
        let s = scaled(8, jobs);
        bencher.counter(ItemsCount::new(requests_of(&s))).bench(|| runner::run(&s, 1).expect("the run finishes"));
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

fn summary() {
    let threads = compare::default_threads();
    println!("\nsummary (each line measured once; wall time on this machine, now)");
    println!(
        "{:<14} {:>8} {:>10} {:>12} {:>10} {:>10} {:>14}",
        "preset", "threads", "wall s", "virtual s", "virt/wall", "requests", "requests/s"
    );
    for name in PRESETS {
        let p = preset(name);
        for t in [1, threads] {
            let (c, wall) = timed(|| compare::run(&p, SEEDS, t).expect("the comparison runs"));
            let (v, n) = (total_virtual(&c).as_secs_f64(), total_requests(&c));
            println!(
                "{name:<14} {t:>8} {:>10.3} {v:>12.1} {:>10.0} {n:>10} {:>14.0}",
                wall.as_secs_f64(),
                v / wall.as_secs_f64(),
                n as f64 / wall.as_secs_f64()
            );
            if threads == 1 {
                break;
            }
        }
    }

    println!("\nscaling (blinkimg-1s, Retry-After + jitter, seed 1)");
    println!("{:<16} {:>10} {:>10} {:>12} {:>14}", "fleet", "requests", "wall ms", "virtual s", "us/request");
    let sizes = [(8, 120), (8, 1_200), (8, 12_000), (64, 1_200), (512, 1_200)];
    for (workers, jobs) in sizes {
        let (r, wall) = timed(|| runner::run(&scaled(workers, jobs), 1).expect("the run finishes"));
        println!(
            "{:<16} {:>10} {:>10.1} {:>12.2} {:>14.1}",
            format!("{workers} w, {jobs} jobs"),
            r.requests,
            wall.as_secs_f64() * 1e3,
            r.virtual_ms as f64 / 1e3,
            wall.as_secs_f64() * 1e6 / r.requests as f64
        );
    }

    println!("\ntick (blinkimg-60s, median virtual s over {SEEDS} seeds: 10 ms tick against 1 ms)");
    println!("{:<26} {:>10} {:>10} {:>8} {:>12} {:>12}", "row", "1 ms", "10 ms", "change", "wall 1 ms", "wall 10 ms");
    let coarse = preset("blinkimg-60s");
    let mut fine = coarse.clone();
    for r in &mut fine.rows {
        r.scenario.net.tick = Duration::from_millis(1);
    }
    let (fine_c, fine_wall) = timed(|| compare::run(&fine, SEEDS, threads).expect("the comparison runs"));
    let (coarse_c, coarse_wall) = timed(|| compare::run(&coarse, SEEDS, threads).expect("the comparison runs"));
    for (f, c) in fine_c.rows.iter().zip(&coarse_c.rows) {
        let (a, b) = (f.virtual_s.median, c.virtual_s.median);
        println!("{:<26} {a:>10.2} {b:>10.2} {:>7.1}%", f.policy, (b / a - 1.0) * 100.0);
    }
    println!(
        "{:<26} {:>10} {:>10} {:>8} {:>12.2} {:>12.2}",
        "whole preset",
        "",
        "",
        "",
        fine_wall.as_secs_f64(),
        coarse_wall.as_secs_f64()
    );
}
