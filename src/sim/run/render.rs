//! A run as review text: a header with the report's numbers, then one line
//! per event of the chosen jobs, merged in virtual-time order. This is what
//! the snapshots in `snapshots/` hold and what `retrysim trace` prints.

use std::fmt::Write as _;

use crate::core::policy::secs;
use std::collections::BTreeMap;

use crate::sim::run::job::{JobOutcome, JobRecord, job_of_label};
use crate::sim::run::runner::Report;
use crate::trace::{render_event, short_key};

/// Which jobs' events to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// The first `n` jobs (by job number).
    FirstJobs(usize),
    /// Every job one worker ran.
    Client(u32),
}

/// How many jobs a single-worker trace shows by default.
pub const DEFAULT_JOBS: usize = 6;

impl Show {
    /// The default view: a single worker's first jobs, or, for a fleet,
    /// every job of worker w0 (enough to see the pattern, few enough lines
    /// for a reviewable snapshot).
    pub fn default_for(r: &Report) -> Show {
        Show::default_for_scenario(&r.scenario_config)
    }

    /// [`Show::default_for`], known before the run (so the run can keep
    /// only the shown jobs' traces).
    pub fn default_for_scenario(s: &crate::sim::run::scenario::Scenario) -> Show {
        if s.fleet.workers > 1 { Show::Client(0) } else { Show::FirstJobs(DEFAULT_JOBS) }
    }
}

/// Renders a run for review.
///
/// A client that writes no trace (a foreign one, see
/// [`Subject::writes_trace`](crate::sim::run::subject::Subject::writes_trace)) is
/// shown as the server saw it: each request's arrival and answer from the
/// ledger, and each job's end.
pub fn render_run(r: &Report, show: Show) -> String {
    let p = &r.scenario_config.policy;
    let mut out = String::new();
    if r.traced {
        let _ = writeln!(
            out,
            "scenario={} seed={} policy={} deadline={} max_retries={}",
            r.scenario,
            r.seed,
            p.name,
            secs(p.deadline),
            p.max_retries
        );
    } else {
        let promised = &r.promises;
        let _ = writeln!(
            out,
            "scenario={} seed={} client={} promises: deadline={} max_attempts={} honours_retry_after={}",
            r.scenario,
            r.seed,
            r.policy,
            promised.deadline.map(secs).unwrap_or_else(|| "none".into()),
            promised.max_attempts.map(|n| n.to_string()).unwrap_or_else(|| "none".into()),
            promised.honours_retry_after,
        );
    }
    let reasons: Vec<String> = r.gave_up.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(
        out,
        "jobs={} succeeded={} gave_up={}{} requests={} connections={} limited={} charged={} retries={} slept={} virtual={}",
        r.jobs,
        r.succeeded,
        r.gave_up_total,
        if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) },
        r.requests,
        r.connections,
        r.limited,
        r.charged,
        r.retries,
        // A client that does not count its waits gets no made-up zero.
        if r.traced || r.records.iter().all(|j| j.waited_reported) {
            secs(std::time::Duration::from_millis(r.slept_ms))
        } else {
            "unreported".to_owned()
        },
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
    if r.traced {
        for j in chosen {
            for (i, e) in j.trace.events.iter().enumerate() {
                lines.push((e.at_ms, j.job, i, render_event(&j.trace.label, e)));
            }
        }
    } else {
        server_view(r, &chosen, &mut lines);
    }
    lines.sort_by_key(|l| (l.0, l.1, l.2));
    for (_, _, _, l) in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// The lines of an untraced client's jobs: every arrival of theirs in the
/// ledger, with its answer, then each job's end.
fn server_view(r: &Report, chosen: &[&JobRecord], lines: &mut Vec<(u64, u32, usize, String)>) {
    let wanted: BTreeMap<u32, &JobRecord> = chosen.iter().map(|j| (j.job, *j)).collect();
    let mut n: BTreeMap<u32, usize> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        let Some(job) = job_of_label(&a.client).and_then(|job| wanted.get(&job)) else { continue };
        let i = n.entry(job.job).or_default();
        *i += 1;
        let key = a.idempotency_key.as_deref().map(|k| format!("  key={}", short_key(k))).unwrap_or_default();
        let at = a.at.as_millis() as u64;
        let answer = match a.answered_at {
            None => "no answer (cut off while running)".to_owned(),
            Some(t) => {
                let code = a.code.as_deref().map(|c| format!(" {c}")).unwrap_or_default();
                let advice = a.retry_after.map(|d| format!("  advised {}", secs(d))).unwrap_or_default();
                let when = t.as_millis() as u64;
                let when = if when == at { String::new() } else { format!(" at {when}ms") };
                let lost = if a.lost { "  (answer lost)" } else { "" };
                format!("<- {}{code}{when}{advice}{lost}", a.status)
            }
        };
        let line = format!("{at:>8}ms  {}  request {i}  {} {}{key}  {answer}", a.client, a.method, a.path);
        lines.push((at, job.job, *i, line));
    }
    for j in chosen {
        let end = match &j.outcome {
            JobOutcome::Succeeded { status } => format!("succeeded {status}"),
            JobOutcome::GaveUp { reason } => format!("gave up: {reason}"),
        };
        let line = format!("{:>8}ms  {}  ended: {end}", j.finished_ms, j.trace.label);
        lines.push((j.finished_ms, j.job, usize::MAX, line));
    }
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
