//! Invariant checkers. They read only what a run left behind (the clients'
//! traces and the server's ledger) and never live inside the models: the
//! system under test does not know it is being checked.
//!
//! Each invariant is numbered as in DESIGN.md "Invariants".

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use crate::core::classify::{Class, Operation, TransportFailure};
use crate::sim::render::{Show, render_run};
use crate::sim::runner::{JobOutcome, JobRecord, PLANTED_SECRETS, Report};
use crate::trace::EventKind;

/// The invariants, as DESIGN.md numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    /// 1. No sleep ends, and no attempt starts, past the deadline's last useful moment.
    Deadline,
    /// 2. Attempts ≤ N+1; exactly N+1 when attempts ran out.
    AttemptBound,
    /// 3. One charge per idempotency key.
    OneChargePerKey,
    /// 4. No retry earlier than the advised wait.
    AdviceRespected,
    /// 5. Nothing retried after a terminal answer; no unsafe replay after an ambiguous failure.
    NoUnsafeRetry,
    /// 6. One key per logical operation, reused on every attempt.
    OneKeyPerOperation,
    /// 7. A too-long advice gives up with zero sleep.
    TooLongGivesUpAtOnce,
    /// 8. The same seed gives a byte-identical trace.
    Determinism,
    /// 9. No secret in any trace or report.
    NoSecrets,
    /// 10. With faults healed and an ample budget, every job completes.
    Liveness,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        f.write_str(&s)
    }
}

/// One broken invariant, with what broke it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub invariant: Invariant,
    pub message: String,
}

fn v(invariant: Invariant, message: String) -> Violation {
    Violation { invariant, message }
}

/// Runs every checker that needs only one run (1–7 and 9).
pub fn check_run(r: &Report) -> Vec<Violation> {
    let mut out = Vec::new();
    for j in &r.records {
        deadline(r, j, &mut out);
        attempt_bound(r, j, &mut out);
        no_unsafe_retry(j, &mut out);
        too_long(r, j, &mut out);
    }
    one_charge_per_key(r, &mut out);
    advice_respected(r, &mut out);
    one_key_per_operation(r, &mut out);
    no_secrets(r, &mut out);
    out
}

fn deadline(r: &Report, j: &JobRecord, out: &mut Vec<Violation>) {
    let p = &r.scenario_config.policy;
    let (deadline, reserve) = (p.deadline.as_millis() as u64, p.min_attempt_time.as_millis() as u64);
    let end = j.started_ms + deadline;
    for e in &j.trace.events {
        match &e.kind {
            EventKind::Wait { ms, .. } if e.at_ms + ms + reserve > end + 1 => out.push(v(
                Invariant::Deadline,
                format!(
                    "job {}: a {ms} ms wait at {} ms ends past the last useful moment {} ms",
                    j.job,
                    e.at_ms,
                    end - reserve
                ),
            )),
            EventKind::Attempt { n, .. } if e.at_ms > end => out.push(v(
                Invariant::Deadline,
                format!("job {}: attempt {n} starts at {} ms, after the deadline at {end} ms", j.job, e.at_ms),
            )),
            _ => {}
        }
    }
    // Millisecond rounding of start and end allows one millisecond.
    if j.finished_ms > end + 1 {
        out.push(v(
            Invariant::Deadline,
            format!("job {} outlived its deadline: ended at {} ms, deadline {end} ms", j.job, j.finished_ms),
        ));
    }
}

fn attempt_bound(r: &Report, j: &JobRecord, out: &mut Vec<Violation>) {
    let n = r.scenario_config.policy.max_retries;
    if j.attempts > n + 1 {
        out.push(v(Invariant::AttemptBound, format!("job {}: {} attempts with max_retries = {n}", j.job, j.attempts)));
    }
    if matches!(&j.outcome, JobOutcome::GaveUp { reason } if reason == "attempts_exhausted") && j.attempts != n + 1 {
        out.push(v(
            Invariant::AttemptBound,
            format!("job {}: attempts exhausted after {} attempts, expected exactly {}", j.job, j.attempts, n + 1),
        ));
    }
}

fn no_unsafe_retry(j: &JobRecord, out: &mut Vec<Violation>) {
    let mut stop: Option<String> = None;
    for e in &j.trace.events {
        match &e.kind {
            EventKind::Attempt { n, .. } => {
                if let Some(why) = &stop {
                    out.push(v(Invariant::NoUnsafeRetry, format!("job {}: attempt {n} sent after {why}", j.job)));
                    return;
                }
            }
            EventKind::Answer { class: Class::Terminal, status, code, .. } => {
                stop = Some(format!("a terminal answer {status} {}", code.as_deref().unwrap_or("")));
            }
            EventKind::Answer { status, .. } if j.operation == Operation::Unsafe && *status >= 500 => {
                stop = Some(format!("a {status} to an unsafe POST"));
            }
            EventKind::NoAnswer { failure: TransportFailure::MaybeArrived, .. } if j.operation == Operation::Unsafe => {
                stop = Some("an ambiguous failure of an unsafe POST".into());
            }
            _ => {}
        }
    }
}

fn too_long(r: &Report, j: &JobRecord, out: &mut Vec<Violation>) {
    let p = &r.scenario_config.policy;
    if !p.use_advice {
        return;
    }
    let (deadline, reserve, max) =
        (p.deadline.as_millis() as u64, p.min_attempt_time.as_millis() as u64, p.max_single_wait.as_millis() as u64);
    let events = &j.trace.events;
    for (i, e) in events.iter().enumerate() {
        let EventKind::Answer { advice, class, .. } = &e.kind else { continue };
        let Some(w) = advice.wait_ms else { continue };
        if matches!(class, Class::Success | Class::Terminal) {
            continue;
        }
        let left = (j.started_ms + deadline).saturating_sub(e.at_ms);
        if w <= max && w + reserve <= left {
            continue;
        }
        if let Some(EventKind::Wait { ms, .. }) = events.get(i + 1).map(|n| &n.kind) {
            out.push(v(
                Invariant::TooLongGivesUpAtOnce,
                format!(
                    "job {}: advice {w} ms with {left} ms left (max_single_wait {max} ms) was followed by a {ms} ms sleep, not an immediate give-up",
                    j.job
                ),
            ));
        }
    }
}

fn one_charge_per_key(r: &Report, out: &mut Vec<Violation>) {
    for (key, n) in &r.ledger.charges {
        if key != "(no key)" && *n > 1 {
            out.push(v(
                Invariant::OneChargePerKey,
                format!("key {} was charged {n} times", crate::trace::short_key(key)),
            ));
        }
    }
}

fn advice_respected(r: &Report, out: &mut Vec<Violation>) {
    let p = &r.scenario_config.policy;
    if !p.use_advice {
        return;
    }
    // The server's view: per client (one job each), the next arrival after
    // an advised refusal must come no earlier than it advised. The answer
    // travels back and the retry travels out, so latency only adds slack.
    let mut by_client: BTreeMap<&str, Vec<&crate::sim::api::Arrival>> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        by_client.entry(a.client.as_str()).or_default().push(a);
    }
    for (client, arrivals) in by_client {
        for pair in arrivals.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let Some(wait) = a.retry_after else { continue };
            if a.lost || a.status != 429 {
                continue;
            }
            let from = a.answered_at.unwrap_or(a.at);
            if b.at < from + wait {
                out.push(v(
                    Invariant::AdviceRespected,
                    format!(
                        "{client}: retried at {} ms, {} ms after an answer at {} ms that advised {} ms",
                        b.at.as_millis(),
                        (b.at - from).as_millis(),
                        from.as_millis(),
                        wait.as_millis()
                    ),
                ));
            }
        }
    }
}

fn one_key_per_operation(r: &Report, out: &mut Vec<Violation>) {
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for j in &r.records {
        if j.operation != Operation::Keyed {
            continue;
        }
        let distinct: BTreeSet<_> = j.attempt_keys.iter().collect();
        if distinct.len() != 1 || j.attempt_keys.first().is_none_or(Option::is_none) {
            out.push(v(
                Invariant::OneKeyPerOperation,
                format!("job {}: {} attempts carried {} different keys", j.job, j.attempt_keys.len(), distinct.len()),
            ));
            continue;
        }
        if let Some(Some(k)) = j.attempt_keys.first()
            && let Some(other) = seen.insert(k, j.job)
        {
            out.push(v(Invariant::OneKeyPerOperation, format!("jobs {other} and {} share one key", j.job)));
        }
    }
}

fn no_secrets(r: &Report, out: &mut Vec<Violation>) {
    let mut secrets: Vec<String> = PLANTED_SECRETS.iter().map(|s| s.to_string()).collect();
    for a in &r.scenario_config.api.accounts {
        secrets.extend(a.keys.iter().cloned());
    }
    for j in &r.records {
        secrets.extend(j.attempt_keys.iter().flatten().cloned());
    }
    let mut texts = vec![
        ("report", serde_json::to_string(r).unwrap_or_default()),
        ("rendered trace", render_run(r, Show::FirstJobs(usize::MAX))),
        ("report text", r.render_text()),
    ];
    for j in &r.records {
        texts.push(("JSON trace", serde_json::to_string(&j.trace).unwrap_or_default()));
    }
    for (what, text) in texts {
        for s in &secrets {
            if !s.is_empty() && text.contains(s.as_str()) {
                let shown: String = s.chars().take(6).collect();
                out.push(v(Invariant::NoSecrets, format!("a secret ({shown}…) appears in the {what}")));
            }
        }
    }
}

/// 8: two runs of the same scenario and seed render byte for byte the same.
pub fn check_determinism(a: &Report, b: &Report) -> Option<Violation> {
    let (x, y) = (render_run(a, Show::FirstJobs(usize::MAX)), render_run(b, Show::FirstJobs(usize::MAX)));
    if x == y {
        return None;
    }
    let line = x.lines().zip(y.lines()).position(|(p, q)| p != q).unwrap_or(x.lines().count().min(y.lines().count()));
    Some(v(Invariant::Determinism, format!("two runs of seed {} differ first at trace line {}", a.seed, line + 1)))
}

/// 10: every job completed. Meaningful only for a scenario whose faults heal
/// and whose deadline and budget are ample (the caller decides that).
pub fn check_liveness(r: &Report) -> Option<Violation> {
    (r.succeeded != r.jobs).then(|| {
        v(Invariant::Liveness, format!("{} of {} jobs did not complete: {:?}", r.jobs - r.succeeded, r.jobs, r.gave_up))
    })
}
