//! Imports `retrysim::internals` (hidden, no semver promise) for the runner's
//! options: it measures the runner itself.
//!
//! What one turmoil tick costs: `cargo bench --bench ticks` (about 30 s).
//!
//! A run is a loop of ticks, so its wall time is about
//! `idle ticks x idle cost + busy ticks x busy cost`. Two measurements:
//! - idle: `deadline-wins` (two hosts, one worker asleep on a 20 s advice
//!   most of the time) at a 1 ms tick and at a 10 ms tick. Both runs deliver
//!   the same few messages, so the wall time they differ by, over the ticks
//!   they differ by, is the cost of a tick in which nothing happens;
//! - busy: `blinkimg-1s` with 512 workers and 1,200 jobs, where messages
//!   move on nearly every tick: its wall time over its ticks.
//!
//! Each figure is the median of 5 runs, on one thread, stepped tick by tick
//! (the runner's skipping of idle ticks off: it is the tick that is
//! measured). Printed as the table the "Ticks" paragraph of
//! docs/guide/speed.md holds.

use std::time::{Duration, Instant};

use retrysim::internals::run::runner::{Report, RunOptions};
use retrysim::internals::run::scenario::{self, Scenario};

const RUNS: usize = 5;

/// Median wall time of `RUNS` runs, and the report of one.
fn measure(s: &Scenario) -> (Duration, Report) {
    let mut walls = Vec::with_capacity(RUNS);
    let mut report = None;
    for _ in 0..RUNS {
        let start = Instant::now();
        let r = RunOptions::new().plain_ticks(true).run(s, 1).expect("the run finishes");
        walls.push(start.elapsed());
        report = Some(r);
    }
    walls.sort();
    (walls[RUNS / 2], report.expect("at least one run"))
}

/// Ticks the run stepped: its virtual time over the tick, plus the last one.
fn ticks(s: &Scenario, r: &Report) -> u64 {
    r.virtual_ms / s.net.tick.as_millis() as u64 + 1
}

fn line(what: &str, ticks: u64, wall: Duration) {
    println!("| {what} | {ticks} | {:.1} | {:.2} |", wall.as_secs_f64() * 1e3, wall.as_secs_f64() * 1e6 / ticks as f64);
}

fn main() {
    let fine = scenario::named("deadline-wins").expect("a named scenario");
    let mut coarse = fine.clone();
    coarse.net.tick = Duration::from_millis(10);
    let mut busy = scenario::blinkimg_1s();
    busy.fleet.workers = 512;
    busy.fleet.jobs = 1_200;

    let (fine_wall, fine_r) = measure(&fine);
    let (coarse_wall, coarse_r) = measure(&coarse);
    let (busy_wall, busy_r) = measure(&busy);
    let (fine_ticks, coarse_ticks, busy_ticks) =
        (ticks(&fine, &fine_r), ticks(&coarse, &coarse_r), ticks(&busy, &busy_r));

    println!("| run | ticks | wall ms | µs/tick |");
    println!("|---|---:|---:|---:|");
    line("deadline-wins, 1 ms tick", fine_ticks, fine_wall);
    line("deadline-wins, 10 ms tick", coarse_ticks, coarse_wall);
    line("idle tick (the difference of the two)", fine_ticks - coarse_ticks, fine_wall.saturating_sub(coarse_wall));
    line("blinkimg-1s, 512 workers, 1,200 jobs (busy)", busy_ticks, busy_wall);
    let idle = fine_wall.saturating_sub(coarse_wall).as_secs_f64() / (fine_ticks - coarse_ticks) as f64;
    let busy = busy_wall.as_secs_f64() / busy_ticks as f64;
    println!("\na busy tick costs {:.1}x an idle one", busy / idle);
}
