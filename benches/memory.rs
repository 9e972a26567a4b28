//! Imports `retrysim::internals` (hidden, no semver promise) for the runner's
//! options and traces: it measures the runner itself.
//!
//! Peak memory of a big run against its jobs: `cargo bench --bench memory`
//! (about 5 minutes, most of it the 100,000-job runs).
//!
//! `blinkimg-1s` with 1,024 workers, seed 7, a 10 h time limit, and 1,000,
//! 10,000 and 100,000 jobs, each run in a process of its own (the bench runs
//! itself again) so each peak (`VmHWM` in /proc/self/status) is that run's
//! alone. Two ways to keep traces: none whole (what `retrysim run` and
//! `retrysim compare` keep, [`Traces::None`]) and every one (what the
//! checks read, [`Traces::All`]; 100,000 jobs that way is the 4 GB the bound
//! is about, so it runs only with `-- --all`). Printed as the table the
//! "Memory" paragraph of docs/guide/speed.md holds. Linux only.

use std::process::Command;
use std::time::{Duration, Instant};

use retrysim::internals::run::runner::{RunOptions, Traces};
use retrysim::internals::run::scenario::{self, Scenario};

/// The big run with `jobs` jobs.
fn big(jobs: u32) -> Scenario {
    let mut s = scenario::blinkimg_1s();
    s.fleet.workers = 1_024;
    s.fleet.jobs = jobs;
    s.time_limit = Duration::from_secs(10 * 3600);
    s
}

/// This process's peak resident memory, in MiB.
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux: /proc/self/status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmHWM line");
    kb / 1024.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let jobs: u32 = args[i + 1].parse().expect("a job count");
        let traces = if args[i + 2] == "all" { Traces::All } else { Traces::None };
        let start = Instant::now();
        let r = RunOptions::new().traces(traces).run(&big(jobs), 7).expect("the run finishes");
        println!("{} {} {:.1} {:.1}", r.requests, r.virtual_ms, start.elapsed().as_secs_f64(), peak_mib());
        return;
    }
    let all_big = args.iter().any(|a| a == "--all");
    let me = std::env::current_exe().expect("the bench's own path");
    println!("| jobs | traces kept | requests | virtual s | wall s | peak MiB |");
    println!("|---:|---|---:|---:|---:|---:|");
    for jobs in [1_000u32, 10_000, 100_000] {
        for traces in ["none", "all"] {
            if traces == "all" && jobs == 100_000 && !all_big {
                continue;
            }
            let out = Command::new(&me).args(["--child", &jobs.to_string(), traces]).output().expect("the bench runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8_lossy(&out.stdout);
            let f: Vec<&str> = text.split_whitespace().collect();
            let virtual_s = f[1].parse::<f64>().unwrap_or(0.0) / 1000.0;
            println!("| {jobs} | {traces} | {} | {virtual_s:.0} | {} | {} |", f[0], f[2], f[3]);
        }
    }
}
