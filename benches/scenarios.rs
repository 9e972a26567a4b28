//! Imports `retrysim::internals` (hidden, no semver promise) for bare
//! `runner::run`: it measures the runner itself.
//!
//! Wall time of every named scenario (release build, 2-core machines):
//! `cargo bench --bench scenarios`. Prints, per scenario, the median wall
//! time and the median virtual time over seeds 0..15, and their ratio.
//!
//! A plain harness on purpose: the numbers go into docs/guide/speed.md as a table, and
//! nothing here asserts a speed (the machines are shared and noisy).

use std::time::{Duration, Instant};

use retrysim::internals::run::runner::run;
use retrysim::internals::run::scenario::{NAMES, named};

const RUNS: usize = 15;

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a name filter may follow.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    println!("{:<40} {:>10} {:>12} {:>14}", "scenario", "wall ms", "virtual ms", "virtual/wall");
    let mut total = Duration::ZERO;
    for name in NAMES.iter().filter(|n| filter.as_deref().is_none_or(|f| n.contains(f))) {
        let s = named(name).expect("named");
        let mut walls = Vec::with_capacity(RUNS);
        let mut virtuals = Vec::with_capacity(RUNS);
        for seed in 0..RUNS as u64 {
            let t = Instant::now();
            let r = run(&s, seed).expect("scenario runs");
            walls.push(t.elapsed());
            virtuals.push(Duration::from_millis(r.virtual_ms));
        }
        let wall = median(walls);
        let virtual_ms = median(virtuals).as_millis();
        total += wall;
        let ratio = virtual_ms as f64 / wall.as_secs_f64() / 1000.0;
        println!("{name:<40} {:>10.2} {virtual_ms:>12} {ratio:>13.0}x", wall.as_secs_f64() * 1000.0);
    }
    println!("{:<40} {:>10.2}", "all named scenarios", total.as_secs_f64() * 1000.0);
}
