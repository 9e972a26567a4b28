//! Imports `retrysim::internals` (hidden, no semver promise) through
//! `audit.rs`'s rows.
//!
//! Which retry crates honour each rate-limit dialect: the audit's foreign
//! rows (tower, backon, reqwest-retry) and retrysim's own client on
//! `blinkimg-1s` with its 30 writes per 10 s window instead of 1 s (so a
//! backoff that starts at 1 s is not right by luck), whose refusals advise
//! *only* through one dialect (`dialect = X`, `advice = "none"`: no
//! `Retry-After`, no body hint). The
//! section "Which dialects each crate honours" of
//! docs/guide/what-people-use.md is this program's output.
//!
//! ```sh
//! cargo run --release --example audit_dialects
//! ```
//!
//! A retry is *early* when it reaches the API before the dialect's advice
//! on the job's previous answer (a 429) had passed: `answered_at +
//! dialect_wait` in the server's ledger, the wait the dialect's fields
//! allow, rounded as the dialect rounds it (the ledger's own record, so the
//! measure needs no client's cooperation). A client *honours* a dialect
//! when none of its retries is early on any seed ([`SEEDS`]). Each cell is
//! `yes` or `no`, the early retries summed over the seeds, and the median
//! of jobs done.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::process::ExitCode;

use retrysim::internals::run::scenario;
use retrysim::testing::Report;
use retrysim::testing::scenario::{AdviceForm, Dialect};

#[allow(dead_code)]
#[path = "audit.rs"]
mod audit;

/// The rows: every foreign client of the audit, then retrysim's own.
pub const ROWS: [&str; 5] = ["tower-retry", "backon-default", "backon-retry-after", "reqwest-retry", "retrysim"];

/// The seeds every cell runs.
pub const SEEDS: RangeInclusive<u64> = 1..=2;

/// The scenario every dialect is spoken on, its window made [`WINDOW_MS`].
pub const SCENARIO: &str = "blinkimg-1s";
/// The window of its 30 writes.
pub const WINDOW_MS: u64 = 10_000;

/// Retries that reached the API before the dialect's advice on the job's
/// previous answer had passed.
pub fn early_retries(r: &Report) -> u64 {
    let mut by_job: BTreeMap<&str, Vec<_>> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        by_job.entry(a.client.as_str()).or_default().push(a);
    }
    let mut early = 0;
    for arrivals in by_job.values() {
        for pair in arrivals.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let (Some(wait), Some(answered), false) = (a.dialect_wait, a.answered_at, a.lost) else { continue };
            if b.at < answered + wait {
                early += 1;
            }
        }
    }
    early
}

/// One cell: early retries over the seeds, and jobs done on each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub early: u64,
    pub done: Vec<u64>,
    pub jobs: u64,
}

impl Cell {
    /// As the table shows it: `yes` or `no (N early)`, then the median jobs done.
    pub fn render(&self) -> String {
        let mut done = self.done.clone();
        done.sort_unstable();
        let median = done.get(done.len().saturating_sub(1) / 2).copied().unwrap_or(0);
        let verdict = if self.early == 0 { "yes".to_owned() } else { format!("no ({} early)", self.early) };
        format!("{verdict}, {median}/{} done", self.jobs)
    }
}

/// Every row on every dialect, by (row, dialect).
pub fn run() -> Result<BTreeMap<(usize, usize), Cell>, String> {
    let mut out = BTreeMap::new();
    for (ri, row) in ROWS.iter().enumerate() {
        for (di, dialect) in Dialect::SPOKEN.iter().enumerate() {
            let mut s = scenario::named(SCENARIO).ok_or("the audit's scenario is gone")?;
            (s.api.dialect, s.api.advice, s.api.limiter.window_ms) = (*dialect, AdviceForm::None, WINDOW_MS);
            let h = audit::harness_of(s, row)?;
            let mut cell = Cell { early: 0, done: Vec::new(), jobs: 0 };
            for seed in SEEDS {
                let r = h.run(seed).map_err(|e| e.to_string())?;
                cell.early += early_retries(&r);
                cell.done.push(r.succeeded);
                cell.jobs = r.jobs;
            }
            out.insert((ri, di), cell);
        }
    }
    Ok(out)
}

/// The table as docs/guide/what-people-use.md shows it.
pub fn markdown(cells: &BTreeMap<(usize, usize), Cell>) -> String {
    let names: Vec<&str> = Dialect::SPOKEN.iter().map(|d| d.name()).collect();
    let mut out = format!("| client | {} |\n|---|{}\n", names.join(" | "), "---|".repeat(names.len()));
    for (ri, row) in ROWS.iter().enumerate() {
        let cells: Vec<String> =
            (0..names.len()).map(|di| cells.get(&(ri, di)).map_or("-".into(), Cell::render)).collect();
        out.push_str(&format!("| {row} | {} |\n", cells.join(" | ")));
    }
    out
}

#[allow(dead_code)] // the test includes this file as a module
fn main() -> ExitCode {
    match run() {
        Ok(cells) => {
            print!("{}", markdown(&cells));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
