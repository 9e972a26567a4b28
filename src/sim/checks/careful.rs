//! Checks that a client is not *too careful*: the safety invariants are
//! all kept by a client that never retries, so these hold it to what
//! honouring the advice also means.
//!
//! - `throttled-retried`: a throttled answer with valid advice (by the
//!   server's ledger: a 429 whose code is not terminal, with a wait it
//!   advised), inside the declared policy's attempts, longest single wait,
//!   retry budget and deadline, is retried. A run that gives up on it for a
//!   reason the facts do not bear out (the answer read as terminal or
//!   unclear, a wait that would have fitted, an advice the client itself
//!   read as no longer than `max_single_wait` taken as too long) fails.
//! - `zero-advice-spread`: a zero advice read by a client whose declared
//!   spread is on is never retried at once: the wait after it is at least
//!   the spread's floor (1 ms), so a fleet told the same instant does not
//!   meet it in step.
//!
//! Both read retrysim's trace (what the client read and decided) beside
//! the ledger (what the server said), so they apply to a traced client;
//! both blame the client.

use std::time::Duration;

use crate::core::backoff::Spread;
use crate::core::policy::{GiveUpReason, Policy};
use crate::core::retry_after::AdviceSource;
use crate::sim::checks::invariants::{arrivals_by_client, clock_slack_ms, ledger_answers, terminal};
use crate::sim::checks::registry::{FleetViolation, Property};
use crate::sim::run::job::JobRecord;
use crate::sim::run::runner::Report;
use crate::trace::{AdviceView, EventKind, Millis};

/// Every too-careful finding of a traced run (none for an untraced one).
pub fn check_careful(r: &Report) -> Vec<FleetViolation> {
    let mut out = Vec::new();
    if !r.traced {
        return out;
    }
    for (j, p) in runs_with_policy(r) {
        throttled_retried(r, j, p, &mut out);
        zero_advice_spread(j, p, &mut out);
    }
    out
}

/// Every run of `r` with the policy its client declared: the front end's
/// jobs under the scenario's policy, a deferred job's background runs under
/// the background policy.
pub(crate) fn runs_with_policy(r: &Report) -> impl Iterator<Item = (&JobRecord, &Policy)> {
    let s = &r.scenario_config;
    let background = s.fleet.deferral.as_ref().map(|d| &d.policy);
    let runs = r.records.iter().map(move |j| (j, &s.policy));
    runs.chain(r.deferred_records.iter().filter_map(move |j| background.map(|p| (j, p))))
}

/// The longest wait `p` may plan for a throttled answer advising `advice`,
/// the run's `k`-th throttled answer (from 1): an escalated advice or the
/// backoff, whichever is longer, plus the largest spread.
fn longest_wait(p: &Policy, advice: Duration, k: u32) -> Duration {
    let escalated = if p.escalate { advice + Duration::from_secs(u64::from(k)) } else { advice };
    escalated.max(p.backoff.cap.max(p.backoff.base)) + p.spread.largest()
}

/// Whether `reason`, given right after a throttled answer with a valid
/// advice of `advice` read at `at_ms` (the client's own reading: `read`),
/// is one the facts bear out under the declared policy `p`. `slack` covers
/// a date's whole second and the server's clock skew, which the client may
/// read the advice through; an advice the client itself read as no longer
/// than `max_single_wait` is never too long, whatever the slack.
fn justified(
    r: &Report,
    j: &JobRecord,
    p: &Policy,
    reason: &GiveUpReason,
    at: (u64, Duration, u32),
    read: &AdviceView,
) -> bool {
    let (at_ms, advice, k) = at;
    let s = &r.scenario_config;
    let slack = Duration::from_millis(1_000 + s.api.clock_skew_ms.unsigned_abs() + clock_slack_ms(s));
    match reason {
        GiveUpReason::Cancelled => true,
        GiveUpReason::BudgetExhausted => s.fleet.budget.is_some(),
        GiveUpReason::AttemptsExhausted { .. } => j.attempts > p.max_retries,
        GiveUpReason::AdviceTooLong { .. } => {
            advice + slack > p.max_single_wait && !read_within(read, p.max_single_wait)
        }
        GiveUpReason::DeadlineWouldPass { .. } => {
            let need = longest_wait(p, advice, k) + p.min_attempt_time + slack;
            Duration::from_millis(at_ms) + need > Duration::from_millis(j.started_ms) + p.deadline
        }
        // Terminal, unclear, not replayable: a throttled refusal with valid
        // advice is none of these (nothing ran, and waiting helps).
        _ => false,
    }
}

/// Whether the advice the client read (`read`, whole milliseconds in the
/// trace) is surely no longer than `max`: exact for a `Retry-After` in
/// delta-seconds, else at least a millisecond under it.
fn read_within(read: &AdviceView, max: Duration) -> bool {
    let Some(ms) = read.wait_ms else { return false };
    let slack = if read.source == AdviceSource::HeaderSeconds { Duration::ZERO } else { Duration::from_millis(1) };
    ms.duration().saturating_add(slack) <= max
}

/// `throttled-retried` for one run of a traced client under declared policy `p`.
fn throttled_retried(r: &Report, j: &JobRecord, p: &Policy, out: &mut Vec<FleetViolation>) {
    if !p.use_advice {
        return;
    }
    let by_client = arrivals_by_client(r);
    let Some(arrivals) = by_client.get(j.trace.label.as_str()) else { return };
    let ledger = ledger_answers(j, arrivals);
    let (mut answer, mut k) = (0usize, 0u32);
    let events = &j.trace.events;
    for (i, e) in events.iter().enumerate() {
        let EventKind::Answer { status, advice: read, .. } = &e.kind else { continue };
        let said = ledger.get(answer).copied().flatten();
        answer += 1;
        let Some(a) = said.filter(|a| a.status == 429 && !terminal(*status, a.code.as_deref())) else { continue };
        let Some(advice) = a.retry_after else { continue };
        k += 1;
        let Some(EventKind::GaveUp { reason, attempts, .. }) = events.get(i + 1).map(|n| &n.kind) else { continue };
        if justified(r, j, p, reason, (e.at_ms, advice, k), read) {
            continue;
        }
        out.push(FleetViolation {
            check: Property::ThrottledRetried,
            message: format!(
                "blames the client: job {} gave up ({reason}) at {} ms after {attempts} attempt(s) on a {} {} that advised {} ms, though the declared policy {} allows {} attempts, waits up to {} ms and a deadline of {} ms from {} ms",
                j.job,
                e.at_ms,
                a.status,
                a.code.as_deref().unwrap_or("(no code)"),
                advice.as_millis(),
                p.name,
                p.max_retries.saturating_add(1),
                p.max_single_wait.as_millis(),
                p.deadline.as_millis(),
                j.started_ms,
            ),
        });
        return;
    }
}

/// The spread's cap for an advice of `advice` ns: the share, clamped to
/// `[min, max(max, min)]`; for a zero advice in whole seconds at least the
/// rounding cover.
pub(crate) fn spread_cap_ns(s: &Spread, advice: u128, whole_seconds: bool) -> u128 {
    let share = advice.saturating_mul(u128::from(s.per_mille)) / 1000;
    let (lo, hi) = (s.min.as_nanos(), s.max.as_nanos().max(s.min.as_nanos()));
    let cap = share.max(lo).min(hi);
    if whole_seconds && advice == 0 { cap.max(s.rounded_zero.as_nanos()) } else { cap }
}

/// Whether an advice from `source`, `ms` whole milliseconds in the trace,
/// may be in whole seconds as the core's `Advice::in_whole_seconds` reads
/// it, and whether it surely is: `Retry-After`, the `RateLimit` field's `t`,
/// the draft -07 `reset` and a Unix reset are whole seconds always; a
/// body's `retry_after_seconds` may be (its fraction does not show in whole
/// milliseconds), and a `RateLimit-Reset` / `X-RateLimit-Reset` may be where
/// the trace shows no fraction; `resetAt`, `retry-after-ms` and an upper
/// bound never are.
pub(crate) fn whole_seconds(source: AdviceSource, ms: u128) -> (bool, bool) {
    match source {
        AdviceSource::HeaderSeconds
        | AdviceSource::HeaderDate
        | AdviceSource::RateLimitField
        | AdviceSource::RateLimitDictionary
        | AdviceSource::ResetUnixTime => (true, true),
        AdviceSource::BodySeconds => (true, false),
        AdviceSource::RateLimitReset | AdviceSource::XRateLimitReset => (ms.is_multiple_of(1_000), false),
        AdviceSource::BodyReset | AdviceSource::RetryAfterMs | AdviceSource::OpenAiReset | AdviceSource::None => {
            (false, false)
        }
    }
}

/// The least wait after a zero advice from `source` that `p`'s spread
/// promises: 1 ms when the spread's cap for it is not zero, else nothing.
fn zero_advice_floor(p: &Policy, source: AdviceSource) -> Duration {
    // A zero the core surely reads in whole seconds, or a body's (as before).
    let (may, surely) = whole_seconds(source, 0);
    let whole_seconds = surely || (may && source == AdviceSource::BodySeconds);
    // The cap as the specification states it, not `Spread::cap`, which the client calls.
    if spread_cap_ns(&p.spread, 0, whole_seconds) == 0 { Duration::ZERO } else { Duration::from_millis(1) }
}

/// `zero-advice-spread` for one run of a traced client under declared policy `p`.
fn zero_advice_spread(j: &JobRecord, p: &Policy, out: &mut Vec<FleetViolation>) {
    if !p.use_advice {
        return;
    }
    for pair in j.trace.events.windows(2) {
        let (EventKind::Answer { n, advice, .. }, EventKind::Wait { ms, .. }) = (&pair[0].kind, &pair[1].kind) else {
            continue;
        };
        // A zero upper bound (a reset "to the initial state" already past) promises no spread.
        if advice.wait_ms != Some(Millis::of(Duration::ZERO)) || advice.source.is_upper_bound() {
            continue;
        }
        let floor = zero_advice_floor(p, advice.source);
        if Duration::from_millis(*ms) < floor {
            out.push(FleetViolation {
                check: Property::ZeroAdviceSpread,
                message: format!(
                    "blames the client: job {}: answer {n} at {} ms advised a zero wait ({:?}) and the client planned {ms} ms, under the spread's floor of {} ms that the declared policy {} promises",
                    j.job,
                    pair[0].at_ms,
                    advice.source,
                    floor.as_millis(),
                    p.name
                ),
            });
            return;
        }
    }
}
