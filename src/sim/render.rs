//! A run as review text: a header with the report's numbers, then one line
//! per event of the chosen jobs, merged in virtual-time order. This is what
//! the snapshots in `snapshots/` hold and what `retrysim trace` prints.

use std::fmt::Write as _;

use crate::core::policy::secs;
use crate::sim::runner::Report;
use crate::trace::render_event;

/// Which jobs' events to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// The first `n` jobs (by job number).
    FirstJobs(usize),
    /// Every job one worker ran.
    Client(u32),
}

/// How many jobs a fleet trace shows by default: enough to see the pattern,
/// few enough that a snapshot stays reviewable.
pub const DEFAULT_JOBS: usize = 6;

/// Renders a run for review.
pub fn render_run(r: &Report, show: Show) -> String {
    let p = &r.scenario_config.policy;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scenario={} seed={} policy={} deadline={} max_retries={}",
        r.scenario,
        r.seed,
        p.name,
        secs(p.deadline),
        p.max_retries
    );
    let reasons: Vec<String> = r.gave_up.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(
        out,
        "jobs={} succeeded={} gave_up={}{} requests={} limited={} charged={} retries={} slept={} virtual={}",
        r.jobs,
        r.succeeded,
        r.gave_up_total,
        if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) },
        r.requests,
        r.limited,
        r.charged,
        r.retries,
        secs(std::time::Duration::from_millis(r.slept_ms)),
        secs(std::time::Duration::from_millis(r.virtual_ms)),
    );
    let chosen: Vec<_> = match show {
        Show::FirstJobs(n) => r.records.iter().take(n).collect(),
        Show::Client(w) => r.records.iter().filter(|j| j.worker == w).collect(),
    };
    let shown = match show {
        Show::FirstJobs(n) if r.records.len() > n => format!("events of the first {n} of {} jobs", r.records.len()),
        Show::FirstJobs(_) => "events of every job".to_owned(),
        Show::Client(w) => format!("events of worker w{w} ({} jobs)", chosen.len()),
    };
    let _ = writeln!(out, "-- {shown}");
    // Merge by time; ties keep job order, then event order: stable and total.
    let mut lines: Vec<(u64, u32, usize, String)> = Vec::new();
    for j in chosen {
        for (i, e) in j.trace.events.iter().enumerate() {
            lines.push((e.at_ms, j.job, i, render_event(&j.trace.label, e)));
        }
    }
    lines.sort_by_key(|a| (a.0, a.1, a.2));
    for (_, _, _, l) in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// The structured form of [`render_run`]: the report's numbers and the
/// chosen jobs' events, for tools (`retrysim trace --format json`).
pub fn trace_json(r: &Report, show: Show) -> serde_json::Value {
    let jobs: Vec<_> = match show {
        Show::FirstJobs(n) => r.records.iter().take(n).collect(),
        Show::Client(w) => r.records.iter().filter(|j| j.worker == w).collect(),
    };
    serde_json::json!({ "report": r, "jobs": jobs })
}
