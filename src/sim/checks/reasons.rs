//! Checks that a client stops for the reason its answers give, and that
//! it keeps the bound on retries the answers leave unclear. Each reads the
//! status, code and advice as the trace recorded them off the wire (never
//! the class the client wrote down), beside the specification's own
//! reading, written out here and not taken from the client's
//! [`DefaultTable`](crate::core::classify::DefaultTable), so a slip in the
//! client's table shows up as a difference:
//!
//! - `give-up-reason`: a run that gives up as `terminal` did so on an answer
//!   the specification calls terminal (not on a 502–504, a 409
//!   `IDEMPOTENCY_IN_PROGRESS`, a throttled or an unclear 429); as
//!   `unclear_exhausted` on a 429 with neither a throttling nor a terminal
//!   code and no valid advice, and only once the run has had more of those
//!   than the declared `unclear_max_retries` (so one more was not allowed);
//!   as `deadline_would_pass` right after an answer (or a failure) only
//!   when the wait it planned and `min_attempt_time` are more than the
//!   declared deadline leaves, and before an attempt (at the fleet's gate,
//!   or after a wait) only once no more than `min_attempt_time` is left,
//!   counted from the trace's times (whole milliseconds of virtual time, as
//!   the client's clock reads them, a millisecond's slack for the flooring);
//!   as `not_replayable` after an attempt that
//!   was an unkeyed POST (or PATCH), not a safe or idempotent method or a
//!   keyed request.
//! - `unclear-bound`: a run retries at most `unclear_max_retries` of those
//!   unclear 429s; more is a client that read them as throttled.
//!
//! Both apply to a traced client and blame it.

use std::time::Duration;

use crate::core::policy::{GiveUpReason, Policy};
use crate::sim::checks::careful::runs_with_policy;
use crate::sim::checks::invariants::{TERMINAL_429_CODES, terminal};
use crate::sim::checks::registry::{FleetViolation, Property};
use crate::sim::run::job::JobRecord;
use crate::sim::run::runner::Report;
use crate::trace::{Event, EventKind};

/// The 429 codes that mean a full window, whatever the advice: the
/// specification's list (docs/DESIGN.md, "Classification").
pub const THROTTLING_429_CODES: [&str; 3] = ["RATE_LIMITED", "rate_limited", "queue_full"];

/// Whether a 429 read off the wire is unclear by the specification: no
/// throttling or terminal code, and no valid advice (`advised`).
fn unclear_429(status: u16, code: Option<&str>, advised: bool) -> bool {
    let listed = code.is_some_and(|c| THROTTLING_429_CODES.contains(&c) || TERMINAL_429_CODES.contains(&c));
    status == 429 && !listed && !advised
}

/// Whether a request may be sent again after it may have run, by the
/// specification: safe and idempotent methods, and keyed requests.
fn replayable(method: &str, keyed: bool) -> bool {
    keyed || matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE")
}

/// Every give-up-reason and unclear-bound finding of a traced run (none for
/// an untraced one).
pub fn check_reasons(r: &Report) -> Vec<FleetViolation> {
    let mut out = Vec::new();
    if !r.traced {
        return out;
    }
    for (j, p) in runs_with_policy(r) {
        give_up_reason(j, p, &mut out);
        unclear_bound(j, p, &mut out);
    }
    out
}

/// `give-up-reason` for one run under declared policy `p`.
fn give_up_reason(j: &JobRecord, p: &Policy, out: &mut Vec<FleetViolation>) {
    let events = &j.trace.events;
    let Some(i) = events.iter().position(|e| matches!(e.kind, EventKind::GaveUp { .. })) else { return };
    let EventKind::GaveUp { reason, .. } = &events[i].kind else { return };
    let before = &events[..i];
    let last_attempt = before.iter().rev().find_map(|e| match &e.kind {
        EventKind::Attempt { method, key, .. } => Some((method.as_str(), key.is_some())),
        _ => None,
    });
    let last_answer = before.last().and_then(|e| match &e.kind {
        EventKind::Answer { status, code, advice, .. } => Some((*status, code.as_deref(), advice.wait_ms.is_some())),
        _ => None,
    });
    let wrong = match (reason, last_answer) {
        (GiveUpReason::Terminal { .. }, Some((status, code, _))) if !terminal(status, code) => {
            Some(format!("as terminal on a {status} {}, which retrying can fix", code.unwrap_or("(no code)")))
        }
        (GiveUpReason::UnclearExhausted { .. }, Some((status, code, advised)))
            if !unclear_429(status, code, advised) =>
        {
            Some(format!(
                "as unclear on a {status} {}{}, which is not an unclear 429",
                code.unwrap_or("(no code)"),
                if advised { " with valid advice" } else { "" }
            ))
        }
        (GiveUpReason::UnclearExhausted { .. }, _) => {
            let unclear = before.iter().filter(|e| is_unclear(e)).count();
            (unclear <= p.unclear_max_retries as usize).then(|| {
                format!(
                    "as unclear after {unclear} unclear 429(s), though the declared policy {} retries {} of them",
                    p.name, p.unclear_max_retries
                )
            })
        }
        (GiveUpReason::DeadlineWouldPass { wait, .. }, _) => {
            let remaining =
                p.deadline.saturating_sub(Duration::from_millis(events[i].at_ms.saturating_sub(j.started_ms)));
            let after_outcome =
                matches!(before.last().map(|e| &e.kind), Some(EventKind::Answer { .. } | EventKind::NoAnswer { .. }));
            if after_outcome {
                (wait.saturating_add(p.min_attempt_time) <= remaining).then(|| {
                    format!(
                        "as the deadline would pass, though the {} ms it planned and the last attempt's {} ms fit the {} ms left",
                        wait.as_millis(),
                        p.min_attempt_time.as_millis(),
                        remaining.as_millis()
                    )
                })
            } else {
                // Before an attempt (at the gate, or after a wait): it may
                // stop only once no more than `min_attempt_time` is left.
                // Both instants are floored to the millisecond, so the
                // trace's count may be one over the client's.
                (remaining > p.min_attempt_time + Duration::from_millis(1)).then(|| {
                    format!(
                        "before an attempt as the deadline would pass, though {} ms were left, more than the last attempt's {} ms",
                        remaining.as_millis(),
                        p.min_attempt_time.as_millis()
                    )
                })
            }
        }
        (GiveUpReason::NotReplayable, _) => match last_attempt {
            Some((method, keyed)) if replayable(method, keyed) => Some(format!(
                "as not replayable after a {method}{}, which may be sent again",
                if keyed { " with an Idempotency-Key" } else { "" }
            )),
            _ => None,
        },
        _ => None,
    };
    if let Some(why) = wrong {
        out.push(FleetViolation {
            check: Property::GiveUpReason,
            message: format!(
                "blames the client: job {} gave up at {} ms {why} (reason given: {reason})",
                j.job, events[i].at_ms
            ),
        });
    }
}

/// Whether a traced event is an answer that is an unclear 429.
fn is_unclear(e: &Event) -> bool {
    matches!(&e.kind, EventKind::Answer { status, code, advice, .. }
        if unclear_429(*status, code.as_deref(), advice.wait_ms.is_some()))
}

/// `unclear-bound` for one run under declared policy `p`.
fn unclear_bound(j: &JobRecord, p: &Policy, out: &mut Vec<FleetViolation>) {
    let events = &j.trace.events;
    let mut retried = 0u32;
    for (i, e) in events.iter().enumerate() {
        if !is_unclear(e) {
            continue;
        }
        let again = events[i + 1..].iter().any(|n| matches!(n.kind, EventKind::Attempt { .. }));
        if !again {
            continue;
        }
        retried += 1;
        if retried > p.unclear_max_retries {
            out.push(FleetViolation {
                check: Property::UnclearBound,
                message: format!(
                    "blames the client: job {} retried {retried} unclear 429s (no throttling or terminal code, no valid advice), the last at {} ms, though the declared policy {} allows {}",
                    j.job, e.at_ms, p.name, p.unclear_max_retries
                ),
            });
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specification_reading() {
        assert!(unclear_429(429, None, false));
        assert!(unclear_429(429, Some("SOMETHING_ELSE"), false));
        assert!(!unclear_429(429, None, true), "valid advice makes it throttled");
        assert!(!unclear_429(429, Some("RATE_LIMITED"), false), "a throttling code needs no advice");
        assert!(!unclear_429(429, Some("QUOTA_EXCEEDED"), false));
        assert!(!unclear_429(503, None, false));
        assert!(replayable("GET", false) && replayable("PUT", false) && replayable("POST", true));
        assert!(!replayable("POST", false) && !replayable("PATCH", false));
    }
}
