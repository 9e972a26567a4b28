//! Imports `retrysim::internals` (hidden, no semver promise) for the runner's
//! options (`Traces`, the wall bound, progress) and the renderer (`render_run`,
//! `trace_json`).
//!
//! Long and big runs: the wall-time bound and its signs of life,
//! progress and interrupts for `compare` and `hunt`, and the traces a run
//! keeps. Each process test waits for the 5 s progress line, so this file
//! costs about 15 s of wall time (its tests run in parallel).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use retrysim::internals::run::render::{Show, render_run, trace_json};
use retrysim::internals::run::runner::{self, Report, RunOptions, Traces};
use retrysim::internals::run::scenario::{self, Scenario};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_retrysim"))
}

/// A run that goes on for ever: no writes allowed, unbounded retries, an 80-day
/// deadline. It runs for hours of wall time, quietly, without the bound.
fn long_config() -> std::path::PathBuf {
    let mut s = scenario::blinkimg_1s();
    s.api.limiter.writes = 0;
    s.policy.max_retries = u32::MAX;
    s.policy.deadline = Duration::from_secs(80 * 86_400);
    s.time_limit = Duration::from_secs(81 * 86_400);
    let path = std::env::temp_dir().join(format!("retrysim-long-{}.toml", std::process::id()));
    std::fs::write(&path, s.to_toml()).expect("a temporary file");
    path
}

/// Runs `cmd` to its end, or kills it after `limit` and fails.
fn within(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("retrysim starts");
    let id = child.id();
    let (tx, rx) = channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("retrysim's output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &id.to_string()]).status();
            panic!("retrysim did not stop within {limit:?}");
        }
    }
}

#[test]
fn a_long_run_says_what_it_is_doing_and_stops_at_the_wall_bound() {
    let path = long_config();
    let config = path.to_str().expect("a UTF-8 path");
    let began = Instant::now();
    let mut cmd = bin();
    cmd.args(["run", "--config", config, "--seed", "7", "--max-wall", "6s"]);
    let out = within(cmd, Duration::from_secs(60));
    let _ = std::fs::remove_file(&path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(began.elapsed() < Duration::from_secs(30), "took {:?}: {err}", began.elapsed());
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    // The warning first, a sign of life after 5 s, then the bound's message.
    assert!(err.starts_with("warning: time_limit = "), "{err}");
    assert!(err.contains("max_retries = 4294967295"), "{err}");
    assert!(err.contains("\nrun: blinkimg-1s seed 7: "), "{err}");
    assert!(err.contains("jobs ended, 5 s wall"), "{err}");
    assert!(err.contains("error: scenario blinkimg-1s seed 7 ran past the wall-time bound"), "{err}");
    assert!(err.contains("the bound is --max-wall 6s (the default is 10m; 0 turns it off)"), "{err}");
    assert!(err.contains(&format!("replay: retrysim run --config {config} --seed 7 --max-wall 1m")), "{err}");
}

#[test]
fn a_run_within_the_bound_prints_the_same_and_nothing_on_stderr() {
    let run = |wall: &str| {
        let mut cmd = bin();
        cmd.args(["run", "--scenario", "blinkimg-1s", "--seed", "7", "--format", "json", "--max-wall", wall]);
        within(cmd, Duration::from_secs(60))
    };
    let (bounded, unbounded) = (run("1m"), run("0"));
    assert!(bounded.status.success() && unbounded.status.success());
    assert_eq!(String::from_utf8_lossy(&bounded.stdout), String::from_utf8_lossy(&unbounded.stdout));
    assert_eq!(String::from_utf8_lossy(&bounded.stderr), "", "no warning, no progress for a short run");
}

/// Starts `retrysim args`, waits (at most 30 s) for a line on standard
/// error for which `ready` holds, then sends `signal`.
fn interrupt(args: &[&str], ready: &dyn Fn(&str) -> bool, signal: &str) -> (Option<i32>, String, String) {
    let mut child: Child =
        bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("retrysim starts");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let lines: Receiver<String> = rx;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| ready(l)) {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) => seen.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("no awaited progress line within 30 s; stderr so far: {seen:?}");
            }
        }
    }
    let status = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status();
    assert!(status.is_ok_and(|s| s.success()), "kill -{signal}");
    let id = child.id();
    let (tx, rx) = channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(out) => out.expect("retrysim's output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &id.to_string()]).status();
            panic!("retrysim did not stop within 30 s of {signal}");
        }
    };
    // Every line the child wrote: the reader ends at the pipe's end, which
    // has come (the child exited), however late a loaded machine runs it.
    seen.extend(lines.iter());
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), seen.join("\n"))
}

#[test]
fn an_interrupted_hunt_prints_what_it_found_and_every_replay_line() {
    // A deliberate defect, so the seeds that ran have findings to lose; the
    // signal waits for the first of them (seed 11), however slowly a loaded
    // machine gets there.
    let found = |l: &str| l.starts_with("hunt: ") && !l.contains(" 0 failing");
    let args = ["hunt", "--seeds", "1000000", "--jobs", "1", "--sabotage", "retry-terminal"];
    let (code, out, err) = interrupt(&args, &found, "INT");
    assert_eq!(code, Some(130), "stdout: {out}\nstderr: {err}");
    let progress = err.lines().find(|l| l.contains("/1000000 seeds, ")).expect("a progress line");
    assert!(progress.contains(" failing, ") && progress.ends_with(" s"), "{progress}");
    assert!(err.contains(" wall on 1 thread: "), "{err}");
    assert!(out.starts_with("hunt: interrupted by SIGINT after "), "{out}");
    let failing: usize = out
        .lines()
        .nth(1)
        .and_then(|l| l.strip_suffix(" failing"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a failing count on the second line: {out}"));
    assert!(failing > 0, "{out}");
    let seeds: std::collections::BTreeSet<&str> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("replay: retrysim hunt --seeds 1 --start "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert_eq!(seeds.len(), failing, "one replay line per failing seed: {out}");
}

#[test]
fn an_interrupted_compare_prints_the_rows_that_ran() {
    let (code, out, err) = interrupt(
        &["compare", "--preset", "blinkimg-60s", "--seeds", "1000", "--threads", "1"],
        &|l| l.starts_with("compare: "),
        "TERM",
    );
    assert_eq!(code, Some(143), "stdout: {out}\nstderr: {err}");
    assert!(err.contains("/8000 runs, "), "{err}");
    assert!(out.starts_with("compare: interrupted by SIGTERM after "), "{out}");
    // The first row ran on some seeds: its line and its medians are there.
    assert!(out.contains("\n  retry-at-once: "), "{out}");
    assert!(out.contains("\nretry-at-once "), "{out}");
}

/// `blinkimg-1s` with 64 workers and 2,000 jobs: about 23,000 requests.
fn big() -> Scenario {
    let mut s = scenario::blinkimg_1s();
    s.fleet.workers = 64;
    s.fleet.jobs = 2_000;
    s.time_limit = Duration::from_secs(10 * 3600);
    s
}

fn events(r: &Report) -> usize {
    r.records.iter().map(|j| j.trace.events.len()).sum()
}

#[test]
fn a_figures_only_run_keeps_two_events_a_job_and_the_same_figures() {
    let s = big();
    let all = runner::run(&s, 7).expect("finishes");
    let none = RunOptions::new().traces(Traces::None).run(&s, 7).expect("finishes");
    assert_eq!(serde_json::to_string(&all).unwrap(), serde_json::to_string(&none).unwrap(), "every figure");
    assert_eq!(all.records.len(), 2_000);
    // What memory grows with: events kept per job, whatever the attempts.
    assert!(events(&all) > 4 * all.records.len(), "{} events", events(&all));
    assert!(events(&none) <= 2 * none.records.len(), "{} events for {} jobs", events(&none), none.records.len());
    assert!(none.records.iter().all(|j| j.attempt_keys.is_empty()));
    assert!(all.records.iter().any(|j| !j.attempt_keys.is_empty()));
}

#[test]
fn a_trace_keeps_the_shown_jobs_and_renders_the_same() {
    for name in ["blinkimg-1s", "lost-answers-with-key", "deferral-queue-full", "berlin-40-processes-coordinated"] {
        let s = scenario::named(name).expect("a named scenario");
        let show = Show::default_for_scenario(&s);
        let traces = match show {
            Show::Client(w) => Traces::Worker(w),
            Show::FirstJobs(n) => Traces::FirstJobs(n as u32),
        };
        let all = runner::run(&s, 7).expect("finishes");
        let kept = RunOptions::new().traces(traces).run(&s, 7).expect("finishes");
        assert_eq!(render_run(&kept, show), render_run(&all, show), "{name}");
        assert_eq!(trace_json(&kept, show), trace_json(&all, show), "{name}");
        let whole = kept.records.iter().filter(|j| traces.keeps(j)).count();
        assert!(whole < kept.records.len() || kept.records.len() <= 6, "{name}: {whole} kept whole");
    }
}

/// Ticks a run stepped, as `benches/ticks.rs` counts them.
fn ticks(s: &Scenario, r: &Report) -> u64 {
    r.virtual_ms / s.net.tick.as_millis() as u64 + 1
}

#[test]
fn the_readme_tick_table_is_the_bench_runs_ticks() {
    let rows = crate::readme::table_after("Measured speed", "`cargo bench --bench ticks`");
    let fine = scenario::named("deadline-wins").expect("a named scenario");
    let mut coarse = fine.clone();
    coarse.net.tick = Duration::from_millis(10);
    let mut busy = scenario::blinkimg_1s();
    busy.fleet.workers = 512;
    busy.fleet.jobs = 1_200;
    let count = |s: &Scenario| ticks(s, &RunOptions::new().traces(Traces::None).run(s, 1).expect("finishes"));
    let (f, c, b) = (count(&fine), count(&coarse), count(&busy));
    let expected = [f, c, f - c, b];
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
    for (row, ticks) in rows.iter().zip(expected) {
        assert_eq!(
            row[1],
            ticks.to_string(),
            "docs/guide/speed.md row {row:?}: run `cargo bench --bench ticks` and copy its table"
        );
    }
}

#[test]
fn the_readme_memory_table_is_the_bench_runs_figures() {
    let rows = crate::readme::table_after("Measured speed", "`cargo bench --bench memory`");
    assert!(rows.iter().any(|r| r[0] == "100000"), "the 100,000-job row: {rows:?}");
    // The bigger rows take seconds to a minute: the 1,000-job one is checked
    // (a change to the simulation moves it as surely as the others).
    for jobs in ["1000"] {
        let mut s = scenario::blinkimg_1s();
        s.fleet.workers = 1_024;
        s.fleet.jobs = jobs.parse().unwrap();
        s.time_limit = Duration::from_secs(10 * 3600);
        let r = RunOptions::new().traces(Traces::None).run(&s, 7).expect("finishes");
        let shown: Vec<&Vec<String>> = rows.iter().filter(|row| row[0] == jobs).collect();
        assert_eq!(shown.len(), 2, "{jobs}: a row with no traces kept and one with all: {rows:?}");
        for row in shown {
            let figures = [r.requests.to_string(), format!("{:.0}", r.virtual_ms as f64 / 1000.0)];
            assert_eq!(
                row[2..4],
                figures,
                "docs/guide/speed.md row {row:?}: run `cargo bench --bench memory` and copy its table"
            );
        }
    }
}

#[test]
fn a_hunt_seed_the_wall_bound_stops_says_so_and_replays_with_a_longer_bound() {
    // 1 ms, the smallest bound: seed 1's run (about 10 ms) stops at a wall check.
    let mut cmd = bin();
    cmd.args(["hunt", "--seeds", "1", "--max-wall", "1ms", "--format", "json"]);
    let out = within(cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let text = summary.to_string();
    assert!(text.contains("the wall-time bound stopped the run, not a verdict on the client"), "{text}");
    assert!(text.contains("retrysim hunt --seeds 1 --start 1 --scenario-kind all --max-wall 1m"), "{text}");
}
