//! Imports `retrysim::internals` (hidden, no semver promise) for the hunt's
//! `check_seed`: it measures the hunt itself.
//!
//! The hunt's throughput: `cargo bench --bench hunt` (about a minute).
//!
//! Checks `retrysim hunt`'s default range (seeds 1..=500, every seed twice
//! for the determinism check, as the CLI does) on this thread, three times
//! each with every tick stepped and with idle ticks skipped, and prints
//! seeds per CPU-second: the process's user + system time from `getrusage`,
//! so a busy machine slows the wall clock but hardly the figure. The goal
//! of skipping idle ticks was stated in this unit (5x more with the skip,
//! on the same seeds).

use retrysim::internals::checks::hunt::{self, Kind, Target};
use retrysim::internals::run::runner::RunOptions;

#[path = "common/cpu.rs"]
mod cpu;
use cpu::cpu;

const SEEDS: u64 = 500;
const RUNS: usize = 3;

/// Seeds per CPU-second of one pass over the range, and its failing seeds.
fn pass(target: &Target, options: &RunOptions) -> (f64, usize) {
    let before = cpu();
    let failing =
        (1..=SEEDS).filter(|&seed| !hunt::check_seed(seed, target, true, options).findings.is_empty()).count();
    (SEEDS as f64 / (cpu() - before).as_secs_f64(), failing)
}

/// The median of `RUNS` passes.
fn median(run: impl Fn() -> (f64, usize)) -> (f64, usize) {
    let mut passes: Vec<(f64, usize)> = (0..RUNS).map(|_| run()).collect();
    passes.sort_by(|a, b| a.0.total_cmp(&b.0));
    passes[RUNS / 2]
}

fn main() {
    let target = Target::of(Kind::All);
    let (plain, plain_failing) = median(|| pass(&target, &RunOptions::new().plain_ticks(true)));
    let (skip, skip_failing) = median(|| pass(&target, &RunOptions::new()));
    println!(
        "| hunt, seeds 1..={SEEDS}, each run twice, one thread | failing seeds | seeds/CPU-s (median of {RUNS}) |"
    );
    println!("|---|---:|---:|");
    println!("| every tick stepped | {plain_failing} | {plain:.1} |");
    println!("| idle ticks skipped | {skip_failing} | {skip:.1} |");
    println!("| ratio | | {:.1}x |", skip / plain);
}
