//! Invariant checkers. They read only what a run left behind (the clients'
//! traces and the server's ledger) and never live inside the models: the
//! system under test does not know it is being checked.
//!
//! Each invariant is numbered as in docs/DESIGN.md "Invariants".
//!
//! # Where a checker needs slack, and why
//!
//! A checker never gives away more than the harness forces on it:
//!
//! - **Millisecond truncation.** Trace times are whole milliseconds, truncated
//!   from the virtual clock; a comparison of two of them may be off by 1 ms.
//! - **The virtual clock's step.** turmoil moves time in steps of `net.tick`
//!   and tokio's timer wheel rounds a deadline up to the next millisecond, so a
//!   timer fires up to `1 ms + tick` after the instant it was set for. Only
//!   checks about what the *clock observed* (an attempt start, the end of an
//!   operation) get that slack ([`clock_slack_ms`]); checks about what the
//!   core *planned* (a wait, a give-up) get none.
//! - **A server clock behind the client's, with no `Date` header.** A date
//!   advice (an HTTP-date or `resetAt`) can then only be measured against the
//!   client's own wall clock (docs/DESIGN.md "Retry-After"), so the advised instant
//!   moves by the skew. Invariant 4 allows exactly that skew, and only for
//!   answers whose advice the client read from a date without the server's
//!   `Date` (the trace says so).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use serde::Serialize;

#[cfg(doc)]
use crate::core::classify::DefaultTable;
use crate::core::classify::{Operation, TransportFailure};
use crate::core::retry_after::AdviceSource;
use crate::sim::run::render::{Show, render_run};
use crate::sim::run::runner::{JobOutcome, JobRecord, PLANTED_SECRETS, Report};
use crate::sim::run::scenario::{GateConfig, Scenario};
use crate::sim::world::api::{AdviceForm, Arrival, ArrivalOutcome, NO_KEY};
use crate::sim::world::net::Fault;
use crate::trace::{Event, EventKind, Millis};

/// The invariants, as docs/DESIGN.md numbers them.
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
    /// 11. Fleet: retries stay within the shared retry budget.
    FleetBudget,
    /// 12. The client under test returns from every job: it does not panic.
    ClientReturns,
    /// 13. A job its caller cancels ends within one clock step.
    CancelEndsJob,
}

impl Invariant {
    /// Every invariant, in docs/DESIGN.md order.
    pub const ALL: [Invariant; 13] = [
        Invariant::Deadline,
        Invariant::AttemptBound,
        Invariant::OneChargePerKey,
        Invariant::AdviceRespected,
        Invariant::NoUnsafeRetry,
        Invariant::OneKeyPerOperation,
        Invariant::TooLongGivesUpAtOnce,
        Invariant::Determinism,
        Invariant::NoSecrets,
        Invariant::Liveness,
        Invariant::FleetBudget,
        Invariant::ClientReturns,
        Invariant::CancelEndsJob,
    ];

    /// The number docs/DESIGN.md gives it: its place in [`Invariant::ALL`],
    /// from 1, each number once.
    pub fn number(self) -> u8 {
        self as u8 + 1
    }
}

impl Invariant {
    /// The name reports print (`one-charge-per-key`), as it serializes.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::Deadline => "deadline",
            Invariant::AttemptBound => "attempt-bound",
            Invariant::OneChargePerKey => "one-charge-per-key",
            Invariant::AdviceRespected => "advice-respected",
            Invariant::NoUnsafeRetry => "no-unsafe-retry",
            Invariant::OneKeyPerOperation => "one-key-per-operation",
            Invariant::TooLongGivesUpAtOnce => "too-long-gives-up-at-once",
            Invariant::Determinism => "determinism",
            Invariant::NoSecrets => "no-secrets",
            Invariant::Liveness => "liveness",
            Invariant::FleetBudget => "fleet-budget",
            Invariant::ClientReturns => "client-returns",
            Invariant::CancelEndsJob => "cancel-ends-job",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken invariant, with what broke it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The invariant that broke.
    pub invariant: Invariant,
    /// What broke it, with the numbers that show it.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant {} ({}): {}", self.invariant.number(), self.invariant, self.message)
    }
}

fn v(invariant: Invariant, message: String) -> Violation {
    Violation { invariant, message }
}

fn ms_of(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// How late, in whole milliseconds, the simulated clock may observe a timer:
/// 1 ms of tokio's timer rounding plus one turmoil step (`net.tick`, rounded up).
pub fn clock_slack_ms(s: &Scenario) -> u64 {
    1 + s.net.tick.as_nanos().div_ceil(1_000_000) as u64
}

/// Invariant 13: every front-end job running when its caller cancelled it
/// (a `cancel` fault) ended within one clock step ([`clock_slack_ms`]),
/// whatever it was doing: waiting to retry, queued at a gate, or waiting
/// for an answer. Read from the job records, so it holds any client to it.
pub(crate) fn cancel_ends_job(r: &Report, out: &mut Vec<Violation>) {
    let slack = clock_slack_ms(&r.scenario_config);
    for c in &r.fleet_facts.cancels {
        for j in r.records.iter().filter(|j| c.jobs.contains(&j.job)) {
            if j.finished_ms > c.at_ms + slack {
                out.push(v(
                    Invariant::CancelEndsJob,
                    format!(
                        "job {} was cancelled at {} ms and ended at {} ms, {} ms later (at most {slack} ms: one clock step)",
                        j.job,
                        c.at_ms,
                        j.finished_ms,
                        j.finished_ms - c.at_ms
                    ),
                ));
            }
        }
    }
}

/// Runs every checker that needs only one run (1–7, 9 and 11).
pub fn check_run(r: &Report) -> Vec<Violation> {
    let mut out = Vec::new();
    let by_client = arrivals_by_client(r);
    for j in &r.records {
        let said = server_said(j, &by_client);
        deadline(r, j, &mut out);
        attempt_bound(r, j, &mut out);
        no_unsafe_retry(j, &said, &mut out);
        too_long(r, j, &said, &mut out);
        waits_cover_advice(r, j, &mut out);
    }
    fleet_budget(r, &mut out);
    one_charge_per_key(r, &mut out);
    unkeyed_posts_run_once(r, &mut out);
    no_resend_after_a_close_race(r, &mut out);
    advice_respected(r, &mut out);
    one_key_per_operation(r, &mut out);
    no_secrets(r, &mut out);
    out
}

/// Invariant 1: Planned waits end, with `min_attempt_time` still left, by the deadline
/// (1 ms of truncation); attempts start and operations end by the deadline
/// plus [`clock_slack_ms`].
fn deadline(r: &Report, j: &JobRecord, out: &mut Vec<Violation>) {
    let s = &r.scenario_config;
    let p = &s.policy;
    let (deadline, reserve) = (ms_of(p.deadline), ms_of(p.min_attempt_time));
    let slack = clock_slack_ms(s);
    let end = j.started_ms.saturating_add(deadline);
    for e in &j.trace.events {
        match &e.kind {
            EventKind::Wait { ms, .. } if e.at_ms + ms + reserve > end + 1 => out.push(v(
                Invariant::Deadline,
                format!(
                    "job {}: a {ms} ms wait at {} ms ends past the last useful moment {} ms (deadline {end} ms, {reserve} ms reserved for the attempt)",
                    j.job,
                    e.at_ms,
                    end.saturating_sub(reserve)
                ),
            )),
            EventKind::Attempt { n, .. } if e.at_ms > end + slack => out.push(v(
                Invariant::Deadline,
                format!("job {}: attempt {n} starts at {} ms, after the deadline at {end} ms", j.job, e.at_ms),
            )),
            _ => {}
        }
    }
    if j.finished_ms > end + slack {
        out.push(v(
            Invariant::Deadline,
            format!("job {} outlived its deadline: ended at {} ms, deadline {end} ms", j.job, j.finished_ms),
        ));
    }
}

/// Invariant 2: At most `max_retries + 1` attempts; exactly that many when the job
/// gave up because attempts ran out; and a traced client reports the attempts
/// its trace records.
fn attempt_bound(r: &Report, j: &JobRecord, out: &mut Vec<Violation>) {
    let n = r.scenario_config.policy.max_retries;
    let sent = j.trace.events.iter().filter(|e| matches!(e.kind, EventKind::Attempt { .. })).count() as u32;
    let most = j.attempts.max(sent);
    if most > n.saturating_add(1) {
        out.push(v(
            Invariant::AttemptBound,
            format!("job {}: {most} attempts with max_retries = {n} (at most {})", j.job, n.saturating_add(1)),
        ));
    }
    // A traced client's count is the attempts it traced: one more counts an
    // attempt never handed to the transport (at the gate, or cancelled first).
    if r.traced && j.attempts_reported && j.attempts != sent {
        out.push(v(
            Invariant::AttemptBound,
            format!("job {}: reports {} attempts, but its trace records {sent}", j.job, j.attempts),
        ));
    }
    if matches!(&j.outcome, JobOutcome::GaveUp { reason } if reason == "attempts_exhausted")
        && most != n.saturating_add(1)
    {
        out.push(v(
            Invariant::AttemptBound,
            format!(
                "job {}: attempts exhausted after {most} attempts, expected exactly {}",
                j.job,
                n.saturating_add(1)
            ),
        ));
    }
}

/// Invariant 5, client side: no attempt after a terminal answer, after a 5xx to an
/// unsafe POST, or after an unsafe POST's ambiguous failure. Terminal by
/// what the server said (`said`: status and code from the ledger, see
/// [`server_said`]), never by the class the client wrote down: a client that
/// misreads a quota as a full window must not hide behind its own label.
fn no_unsafe_retry(j: &JobRecord, said: &[(u16, Option<&str>)], out: &mut Vec<Violation>) {
    let mut stop: Option<String> = None;
    let mut answers = said.iter();
    for e in &j.trace.events {
        match &e.kind {
            EventKind::Attempt { n, .. } => {
                if let Some(why) = &stop {
                    out.push(v(Invariant::NoUnsafeRetry, format!("job {}: attempt {n} sent after {why}", j.job)));
                    return;
                }
            }
            EventKind::Answer { .. } => {
                let Some(&(status, code)) = answers.next() else { continue };
                if terminal(status, code) {
                    stop = Some(format!("a terminal answer {status} {}", code.unwrap_or("")));
                } else if j.operation == Operation::Unsafe && status >= 500 {
                    stop = Some(format!("a {status} to an unsafe POST"));
                }
            }
            EventKind::NoAnswer { failure: TransportFailure::MaybeArrived, .. } if j.operation == Operation::Unsafe => {
                stop = Some("an ambiguous failure of an unsafe POST".into());
            }
            _ => {}
        }
    }
}

/// The 429 codes that mean "no amount of waiting helps soon": the
/// specification's list (docs/DESIGN.md "Classification"), written out here
/// and not read from the client's [`DefaultTable`], so that a slip in the
/// production table cannot make the checker agree with it.
pub const TERMINAL_429_CODES: [&str; 4] =
    ["QUOTA_EXCEEDED", "insufficient_quota", "SIGNUP_REQUIRED", "signup_required"];

/// Whether the server's answer `status`/`code` was terminal by the
/// specification: a 4xx other than a 429 with a code outside
/// [`TERMINAL_429_CODES`] and a 409 `IDEMPOTENCY_IN_PROGRESS`. What the
/// server meant, whatever class the client wrote down; the checks call it
/// with the status and code of the server's ledger.
pub fn terminal(status: u16, code: Option<&str>) -> bool {
    match status {
        429 => code.is_some_and(|c| TERMINAL_429_CODES.contains(&c)),
        409 => !code.is_some_and(|c| c.eq_ignore_ascii_case("IDEMPOTENCY_IN_PROGRESS")),
        400..=499 => true,
        // 5xx: only 502, 503 and 504 are worth a retry.
        500..=599 => !matches!(status, 502..=504),
        _ => false,
    }
}

/// For each answer event of `j`'s trace, the ledger's record of that
/// answer: the next arrival from the job's client (after the one matched
/// before) with the same status (and code, where the client read one),
/// answered no later than the client read it
/// and not lost on the way. `None` where none fits (the ledger of a foreign
/// server, a trace that does not match); the checks then read the status
/// and code off the wire as the trace recorded them, never the class.
pub(crate) fn ledger_answers<'r>(j: &JobRecord, arrivals: &[&'r Arrival]) -> Vec<Option<&'r Arrival>> {
    let mut next = 0;
    let mut out = Vec::new();
    for e in &j.trace.events {
        let EventKind::Answer { status, code, .. } = &e.kind else { continue };
        // The code too, where the client read one: an answer to an attempt
        // the client had given up on (a hold, a timeout) may carry the same
        // status as the one it read next (found by the hunt: a stale 429
        // `rate_limited` taken for the `insufficient_quota` the client read).
        let same_code = |a: &Arrival| code.as_deref().is_none_or(|c| a.code.as_deref() == Some(c));
        let found = arrivals[next.min(arrivals.len())..].iter().position(|a| {
            a.status == *status && same_code(a) && !a.lost && a.answered_at.is_some_and(|t| ms_of(t) <= e.at_ms)
        });
        out.push(found.map(|i| {
            next += i + 1;
            arrivals[next - 1]
        }));
    }
    out
}

/// The ledger's arrivals per client label, in arrival order.
pub(crate) fn arrivals_by_client(r: &Report) -> BTreeMap<&str, Vec<&Arrival>> {
    let mut by: BTreeMap<&str, Vec<&Arrival>> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        by.entry(a.client.as_str()).or_default().push(a);
    }
    by
}

/// What the server said to each answer event of `j`: `(status, code)`
/// from the ledger where [`ledger_answers`] finds the record, else off the
/// trace's wire fields.
fn server_said<'a>(j: &'a JobRecord, by_client: &BTreeMap<&str, Vec<&'a Arrival>>) -> Vec<(u16, Option<&'a str>)> {
    let none = Vec::new();
    let arrivals = by_client.get(j.trace.label.as_str()).unwrap_or(&none);
    let ledger = ledger_answers(j, arrivals);
    let wire = j.trace.events.iter().filter_map(|e| match &e.kind {
        EventKind::Answer { status, code, .. } => Some((*status, code.as_deref())),
        _ => None,
    });
    wire.zip(ledger).map(|(w, l)| l.map_or(w, |a| (a.status, a.code.as_deref()))).collect()
}

/// Invariant 5, server side: a POST without a key ran at most once per job. A correct
/// client resends an unkeyed POST only after a definite refusal (nothing ran)
/// or a failure before sending, so a second charge is a replay.
fn unkeyed_posts_run_once(r: &Report, out: &mut Vec<Violation>) {
    let mut runs: BTreeMap<&str, u32> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        if a.idempotency_key.is_none() && a.method == "POST" && a.outcome == ArrivalOutcome::Charged {
            *runs.entry(a.client.as_str()).or_default() += 1;
        }
    }
    for (client, n) in runs {
        if n > 1 {
            out.push(v(
                Invariant::NoUnsafeRetry,
                format!("{client}: the server ran its unkeyed POST {n} times (a replay after an ambiguous failure)"),
            ));
        }
    }
}

/// Invariant 5, on the wire: an unkeyed POST that a close race dropped after
/// it was written (a keep-alive connection closed or reset under it) never
/// ran, but its client could not know that: like any ambiguous failure, it
/// must not be sent again. A client that takes "closed after the write" for
/// "not sent" and replays it is caught here, though the server ran it once.
fn no_resend_after_a_close_race(r: &Report, out: &mut Vec<Violation>) {
    for raced in r.close_races.iter().filter(|x| x.method == "POST" && !x.keyed) {
        let again = r.ledger.arrivals.iter().find(|a| a.client == raced.client && a.at >= raced.at);
        if let Some(a) = again {
            out.push(v(
                Invariant::NoUnsafeRetry,
                format!(
                    "{}: its unkeyed POST was dropped by a close race ({}) at {} ms after it was written, which the \
                     client cannot tell from a request that ran, and it was sent again at {} ms",
                    raced.client,
                    raced.timing.name(),
                    raced.at.as_millis(),
                    a.at.as_millis()
                ),
            ));
        }
    }
}

/// Invariant 7: An advice longer than `max_single_wait`, or longer than what is left
/// minus `min_attempt_time`, is never followed by a sleep. What is left is
/// computed from truncated milliseconds, so the comparison allows 1 ms.
fn too_long(r: &Report, j: &JobRecord, said: &[(u16, Option<&str>)], out: &mut Vec<Violation>) {
    let p = &r.scenario_config.policy;
    if !p.use_advice {
        return;
    }
    let (deadline, reserve, max) = (ms_of(p.deadline), ms_of(p.min_attempt_time), ms_of(p.max_single_wait));
    let events = &j.trace.events;
    let mut answers = said.iter();
    for (i, e) in events.iter().enumerate() {
        let EventKind::Answer { advice, .. } = &e.kind else { continue };
        let Some(&(status, code)) = answers.next() else { continue };
        let Some(w) = advice.wait_ms.map(Millis::saturating_u64) else { continue };
        // A success or a terminal answer is not a refusal to wait out; by
        // what the server said, not the client's class.
        if (200..300).contains(&status) || terminal(status, code) {
            continue;
        }
        let left = (j.started_ms + deadline).saturating_sub(e.at_ms);
        if w <= max && w.saturating_add(reserve) <= left + 1 {
            continue;
        }
        if let Some(EventKind::Wait { ms, .. }) = events.get(i + 1).map(|n| &n.kind) {
            out.push(v(
                Invariant::TooLongGivesUpAtOnce,
                format!(
                    "job {}: advice {w} ms with {left} ms left (max_single_wait {max} ms, {reserve} ms reserved) was followed by a {ms} ms sleep, not an immediate give-up",
                    j.job
                ),
            ));
        }
    }
}

/// Invariant 4, client side: a wait planned after an answer that carried advice is at
/// least that advice (the core adds jitter or takes a larger backoff, never
/// less).
fn waits_cover_advice(r: &Report, j: &JobRecord, out: &mut Vec<Violation>) {
    if !r.scenario_config.policy.use_advice {
        return;
    }
    for pair in j.trace.events.windows(2) {
        let (EventKind::Answer { n, advice, .. }, EventKind::Wait { ms, .. }) = (&pair[0].kind, &pair[1].kind) else {
            continue;
        };
        // An upper bound (OpenAI's reset) cuts the backoff: it is no floor.
        if let Some(w) = advice.wait_ms.map(Millis::saturating_u64).filter(|_| !advice.source.is_upper_bound())
            && *ms < w
        {
            out.push(v(
                Invariant::AdviceRespected,
                format!("job {}: answer {n} advised {w} ms, but the client planned to wait only {ms} ms", j.job),
            ));
        }
    }
}

/// Invariant 11, fleet side: a token-bucket retry budget (gRPC's) granted
/// fewer than `max_tokens / 2 + token_ratio × successes` retries in all.
///
/// Why: the bucket starts at `M = 1000 × max_tokens` (thousandths), a granted
/// retry takes exactly 1000 and must leave more than `M / 2`, a refused one
/// only lowers it, and each success adds at most `r = token_ratio_milli`. At
/// the last grant, `M / 2 < tokens ≤ M − 1000 G + r D`, so
/// `1000 G < M / 2 + r D`, with `G` the retries (each is one planned wait)
/// and `D` the successes (each one deposit). A percentage budget's windowed
/// allowance has no such whole-run bound and is not checked here. On
/// per-worker hosts each worker is a process with a bucket of its own, so
/// the bound holds per worker, over that worker's runs.
fn fleet_budget(r: &Report, out: &mut Vec<Violation>) {
    let Some(crate::sim::run::scenario::BudgetConfig::TokenBucket { max_tokens, token_ratio_milli }) =
        r.scenario_config.fleet.budget
    else {
        return;
    };
    let per_worker = r.scenario_config.fleet.hosts == crate::sim::run::scenario::Hosts::PerWorker;
    // (retries granted, successes) per bucket: the fleet's one, or each worker's.
    let mut buckets: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for j in &r.records {
        let (granted, successes) = buckets.entry(if per_worker { j.worker } else { 0 }).or_default();
        for e in &j.trace.events {
            match e.kind {
                EventKind::Wait { .. } => *granted += 1,
                EventKind::Done { .. } => *successes += 1,
                _ => {}
            }
        }
    }
    for (w, (granted, successes)) in buckets {
        let allowance = 500 * max_tokens as u64 + token_ratio_milli as u64 * successes;
        if 1000 * granted >= allowance {
            let whose = if per_worker { format!("w{w}: ") } else { String::new() };
            out.push(v(
                Invariant::FleetBudget,
                format!(
                    "{whose}{granted} retries with a token bucket of {max_tokens} tokens refunding {token_ratio_milli}/1000 per success over {successes} successes: at most {} allowed",
                    allowance.div_ceil(1000).saturating_sub(1)
                ),
            ));
        }
    }
}

/// Invariant 3: The server charged each idempotency key at most once, and each keyed
/// operation (one job, whatever keys its attempts carried) at most once.
fn one_charge_per_key(r: &Report, out: &mut Vec<Violation>) {
    for (key, n) in &r.ledger.charges {
        if key != NO_KEY && *n > 1 {
            out.push(v(
                Invariant::OneChargePerKey,
                format!("key {} was charged {n} times", crate::trace::short_key(key)),
            ));
        }
    }
    let keyed: BTreeSet<&str> =
        r.records.iter().filter(|j| j.operation == Operation::Keyed).map(|j| j.trace.label.as_str()).collect();
    let mut charges: BTreeMap<&str, BTreeSet<Option<&str>>> = BTreeMap::new();
    let mut runs: BTreeMap<&str, u32> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        if a.outcome == ArrivalOutcome::Charged && keyed.contains(a.client.as_str()) {
            *runs.entry(a.client.as_str()).or_default() += 1;
            charges.entry(a.client.as_str()).or_default().insert(a.idempotency_key.as_deref());
        }
    }
    for (client, n) in runs {
        let keys = charges.get(client).map_or(0, BTreeSet::len);
        if n > 1 && keys > 1 {
            out.push(v(
                Invariant::OneChargePerKey,
                format!("{client}: one keyed operation was charged {n} times, under {keys} different keys"),
            ));
        }
    }
}

/// The answer that makes `b` an early *retry* after `a`, if the client's
/// trace shows one: an answer event with `a`'s status, received at or after
/// `a` was answered, followed (in the trace's order) by an attempt that
/// started in a later millisecond and no later than `b` arrived.
///
/// Why both: `b` may not be a retry at all. A request of an earlier attempt
/// that a fault held or slowed can arrive after its attempt timed out (a
/// *stale* arrival), and `a`'s answer may never reach the client (a lost or
/// timed-out answer advises nothing). A client that honoured what it
/// received starts its next attempt no earlier than the answer plus the
/// advice, so an attempt between the answer and `b`'s arrival is an early
/// retry. Requiring a later millisecond keeps `b`'s own answer (received in
/// `b`'s millisecond on a fast network) from passing for `a`'s; a retry in
/// the very millisecond of the answer is left to the client-side check
/// ([`waits_cover_advice`]), which sees the planned wait itself.
///
/// One corner remains: a stale request can arrive while a later attempt
/// waits for a slow answer to an earlier refusal; the check then holds the
/// retry to the stale arrival's advice, which a fixed window puts at most one
/// whole second away.
fn answer_before_early_retry<'t>(j: &'t JobRecord, a: &Arrival, b: &Arrival) -> Option<&'t Event> {
    let (from, until) = (ms_of(a.answered_at.unwrap_or(a.at)), ms_of(b.at));
    let events = &j.trace.events;
    events.iter().enumerate().find_map(|(i, e)| {
        let answer = matches!(&e.kind, EventKind::Answer { status, .. } if *status == a.status);
        if !answer || e.at_ms < from || e.at_ms > until {
            return None;
        }
        let retried = events[i + 1..]
            .iter()
            .any(|p| matches!(p.kind, EventKind::Attempt { .. }) && p.at_ms > e.at_ms && p.at_ms <= until);
        retried.then_some(e)
    })
}

/// Invariant 4, server side: from the ledger, per client (one job each), the next
/// arrival after an answer that advised a wait comes no earlier than the
/// answer's instant plus that wait.
///
/// The answer travels back and the retry travels out, so network latency only
/// adds slack: the check needs no allowance for it. It applies only when the
/// client received an answer and then retried ([`answer_before_early_retry`]),
/// and allows a server clock's lag behind the client's for a date advice read
/// without the server's `Date` (see the module doc).
fn advice_respected(r: &Report, out: &mut Vec<Violation>) {
    let s = &r.scenario_config;
    if !s.policy.use_advice {
        return;
    }
    let jobs: BTreeMap<&str, &JobRecord> = r.records.iter().map(|j| (j.trace.label.as_str(), j)).collect();
    let lag = Duration::from_millis(s.api.clock_skew_ms.min(0).unsigned_abs());
    let mut by_client: BTreeMap<&str, Vec<&Arrival>> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        by_client.entry(a.client.as_str()).or_default().push(a);
    }
    for (client, arrivals) in by_client {
        let Some(job) = jobs.get(client) else { continue };
        for pair in arrivals.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            // Retry-After, the body's hint or the dialect's fields, whichever
            // allows the earliest retry: retrysim's client reads them all.
            let Some(wait) = a.any_advice() else { continue };
            if a.lost {
                continue;
            }
            let from = a.answered_at.unwrap_or(a.at);
            if b.at >= from + wait {
                continue;
            }
            let Some(seen) = answer_before_early_retry(job, a, b) else { continue };
            let EventKind::Answer { advice, .. } = &seen.kind else { continue };
            // A `SeveralLines` answer's largest line may be its date (for a
            // zero wait, the next whole second), read on the client's clock
            // even where the client reports the seconds line it tied with.
            // GitHub's reset in Unix seconds is a date too, where it binds.
            let dated = matches!(advice.source, AdviceSource::HeaderDate | AdviceSource::BodyReset)
                || s.api.advice == crate::sim::world::api::AdviceForm::SeveralLines
                || (s.api.dialect.is_dated() && a.dialect_wait == Some(wait));
            let client_clock = dated && !advice.server_date;
            if client_clock && b.at + lag >= from + wait {
                continue;
            }
            out.push(v(
                Invariant::AdviceRespected,
                format!(
                    "{client}: retried at {} ms, {} ms after an answer at {} ms that advised {} ms",
                    b.at.as_millis(),
                    (b.at.saturating_sub(from)).as_millis(),
                    from.as_millis(),
                    wait.as_millis()
                ),
            ));
        }
    }
}

/// Invariant 6: Every attempt of a keyed operation carried the same key, and no two
/// operations shared one. What the client says it sent (`attempt_keys`) and
/// what the server received (the ledger's keys per job label) must both
/// hold: a transport that swaps keys under the driver shows only in the
/// latter. A job that never sent an attempt (a gate held it past its
/// deadline) carried no key and is skipped.
fn one_key_per_operation(r: &Report, out: &mut Vec<Violation>) {
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for j in &r.records {
        if j.operation != Operation::Keyed || j.attempt_keys.is_empty() {
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
    let keyed: BTreeSet<u32> = r.records.iter().filter(|j| j.operation == Operation::Keyed).map(|j| j.job).collect();
    let mut received: BTreeMap<u32, BTreeSet<&str>> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        if let (Some(job), Some(key)) = (crate::sim::run::job::job_of_label(&a.client), a.idempotency_key.as_deref())
            && keyed.contains(&job)
        {
            received.entry(job).or_default().insert(key);
        }
    }
    for (job, keys) in received {
        if keys.len() > 1 {
            out.push(v(
                Invariant::OneKeyPerOperation,
                format!("job {job}: the server received {} different idempotency keys from it", keys.len()),
            ));
        }
    }
}

/// Invariant 9: No planted secret, API key or full idempotency key appears in the
/// report, its text, the rendered trace, or any JSON trace.
fn no_secrets(r: &Report, out: &mut Vec<Violation>) {
    let mut secrets: Vec<String> = PLANTED_SECRETS.iter().map(|s| s.to_string()).collect();
    for a in &r.scenario_config.api.accounts {
        secrets.extend(a.keys.iter().cloned());
    }
    for j in &r.records {
        secrets.extend(j.attempt_keys.iter().flatten().cloned());
    }
    secrets.sort();
    secrets.dedup();
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

fn first_difference(x: &str, y: &str) -> usize {
    x.lines().zip(y.lines()).position(|(p, q)| p != q).unwrap_or(x.lines().count().min(y.lines().count())) + 1
}

/// 8: two runs of the same scenario and seed render byte for byte the same:
/// every job's trace, the report, and the server's ledger.
pub fn check_determinism(a: &Report, b: &Report) -> Option<Violation> {
    let (x, y) = (render_run(a, Show::FirstJobs(usize::MAX)), render_run(b, Show::FirstJobs(usize::MAX)));
    let differ = |what: &str, p: &str, q: &str| {
        let line = first_difference(p, q);
        v(
            Invariant::Determinism,
            format!("two runs of seed {} differ first at {what} line {line}{}", a.seed, UNSEEDED_TOKIO),
        )
    };
    if x != y {
        return Some(differ("trace", &x, &y));
    }
    let reports = (pretty(a), pretty(b));
    let ledgers = (pretty(&a.ledger), pretty(&b.ledger));
    [("report", reports), ("ledger", ledgers)]
        .into_iter()
        .find(|(_, (p, q))| p != q)
        .map(|(what, (p, q))| differ(what, &p, &q))
}

/// What a determinism failure adds when tokio was built without
/// `--cfg tokio_unstable`: turmoil then cannot seed tokio's own generator,
/// and the two things a client may write that draw from it differ between
/// runs. The harness itself draws nothing there (`tests/it/tokio_seed.rs`).
const UNSEEDED_TOKIO: &str = if cfg!(tokio_unstable) {
    ""
} else {
    "; this build has no `--cfg tokio_unstable`, so tokio's own random draws (an unbiased `tokio::select!`, \
     `tokio::sync::watch` receivers) are not seeded by the run: write `biased;` as the first line of each \
     `select!` in your client (or run the tests with RUSTFLAGS=\"--cfg tokio_unstable\")"
};

fn pretty<T: Serialize>(t: &T) -> String {
    serde_json::to_string_pretty(t).unwrap_or_default()
}

/// 10: every job completed. Meaningful only for a scenario whose faults heal
/// and whose deadline and budget are ample: see [`liveness_expected`].
pub fn check_liveness(r: &Report) -> Option<Violation> {
    (r.succeeded != r.jobs).then(|| {
        v(Invariant::Liveness, format!("{} of {} jobs did not complete: {:?}", r.jobs - r.succeeded, r.jobs, r.gave_up))
    })
}

/// When every scheduled fault has healed: the latest `until` of a lasting
/// fault, or the latest instant of a one-off fault (a lost answer, a bounce).
pub(crate) fn faults_heal_at(s: &Scenario) -> Duration {
    s.faults.schedule.iter().map(|f| f.fault.until().unwrap_or(f.at).max(f.at)).max().unwrap_or_default()
}

/// Whether invariant 10 applies: why not, or `Ok` when every job of `s` must
/// complete. The conditions are conservative; each rules out a legitimate way
/// for a job to stop without success:
///
/// - retrysim's own client with no deliberate defect (`[client]`), and the advice is read;
/// - only keyed POSTs (`fleet.mix` keyed only, `policy.idempotency_keys`): an
///   unkeyed POST rightly stops after an ambiguous failure, and a GET of a job
///   that was not created yet rightly gets a terminal 404;
/// - nothing terminal in the API: no script, credits, monthly quota or
///   anonymous use; no concurrency cap (its `queue_full` waits are long);
/// - no shared retry budget and no fleet gate (they may rightly refuse);
/// - no steady loss of answers (it never heals); every scheduled fault heals;
/// - refusals carry a usable advice, so a refused job waits at least a whole
///   second between attempts: a wait in the header or body, and no date read
///   against a client clock skewed from the server's (a server clock ahead
///   makes the advice look too long, one behind makes it look short);
/// - room after healing: an attempt fits its timeout (twice the worst
///   latency plus the processing time), every advice fits `max_single_wait`
///   (`longest_advice`), and
///   a deadline and a retry count that cover the healing time, the time to
///   serve every job (`service_bound`) and `RECOVERY_ROUNDS` rounds of
///   window, spread, backoff and attempt timeout.
pub fn liveness_expected(s: &Scenario) -> Result<(), String> {
    let p = &s.policy;
    let f = &s.fleet;
    let api = &s.api;
    let need = |ok: bool, why: &str| if ok { Ok(()) } else { Err(why.to_owned()) };
    need(s.client.is_default(), "a baseline client or a deliberate defect runs the jobs")?;
    need(p.use_advice, "the policy ignores Retry-After")?;
    need(f.mix.unsafe_post == 0 && f.mix.safe == 0 && f.mix.keyed > 0, "not every job is a keyed POST")?;
    need(p.idempotency_keys, "the policy sends no Idempotency-Key")?;
    need(!f.anonymous && api.anonymous_cap.is_none(), "anonymous caps are terminal")?;
    need(api.script.is_empty(), "a scripted API")?;
    need(api.accounts.iter().all(|a| a.credits.is_none() && a.monthly_quota.is_none()), "credits or a quota run out")?;
    need(api.concurrency.is_none(), "a concurrency cap")?;
    need(f.budget.is_none(), "a shared retry budget")?;
    need(f.gate == GateConfig::None, "a fleet gate")?;
    need(s.faults.lost_answers_per_mille == 0, "answers are lost steadily")?;
    need(!s.faults.schedule.iter().any(|f| f.fault == Fault::Cancel), "the caller cancels jobs")?;
    need(
        !matches!(api.advice, AdviceForm::None | AdviceForm::Malformed) || api.dialect.advises_whole_seconds(),
        "refusals carry no usable advice",
    )?;
    need(api.send_date || api.clock_skew_ms == 0, "a date advice may be read against a skewed client clock")?;
    let latency = s.net.max_latency;
    need(
        latency * 2 + Duration::from_millis(api.processing_ms) + s.net.tick * 4 < p.attempt_timeout,
        "an attempt may not fit its timeout",
    )?;
    need(longest_advice(s) <= p.max_single_wait, "a limiter's advice may be longer than max_single_wait")?;
    need(api.limiter.writes > 0, "the limiter accepts no writes")?;
    let (deadline, retries) = liveness_needs(s);
    need(p.deadline >= deadline, "the deadline does not cover healing, service and recovery")?;
    need(p.max_retries >= retries, "too few retries to outlast the faults and the queue")?;
    Ok(())
}

/// The longest advice a rate-limit refusal can carry as the client reads it:
/// the limiter's wait in whole seconds (at least one, at most the window
/// rounded up), plus almost a second when an HTTP-date target is rounded up
/// to a whole second, plus almost a second when the `Date` it is measured
/// against is truncated to one.
pub fn longest_advice(s: &Scenario) -> Duration {
    let window_s = s.api.limiter.window_ms.div_ceil(1000).max(1);
    Duration::from_secs(window_s + 2)
}

/// How many rounds of recovery [`liveness_expected`] asks for after healing.
pub const RECOVERY_ROUNDS: u32 = 8;

/// An upper bound on the time the limiter needs to accept every job once,
/// with refused jobs coming back after their advice. Each round (two windows,
/// the advice's rounding to whole seconds, the escalation of an advice
/// refused again, the spread, a round trip and the processing) accepts at
/// least `min(writes, workers)` jobs: every waiter retries once per round,
/// and a window accepts its first `writes` hits.
///
/// The escalation grows: a job refused in round `k` (from 1) waits its
/// advice plus `k + 1` seconds, or the backoff's cap when that is longer. A
/// fleet told the same advice retries in step, one round's winners leave,
/// and the rest wait a second longer each round, so `n` rounds take about
/// `n²/2` seconds, not `n` backoff caps (a 100,000-seed hunt found a bucket
/// of one write per second and 15 workers whose last job needed 16
/// attempts and 107 s: seed 48561).
pub fn service_bound(s: &Scenario) -> Duration {
    let f = &s.fleet;
    let per_round = s.api.limiter.writes.min(f.workers).max(1);
    let rounds = f.jobs.div_ceil(per_round);
    let window = Duration::from_millis(s.api.limiter.window_ms);
    let round = window * 2
        + Duration::from_secs(1)
        + s.policy.spread.largest()
        + s.net.max_latency * 2
        + Duration::from_millis(s.api.processing_ms);
    let escalation = |k: u32| {
        if s.policy.escalate { Duration::from_secs(u64::from(k) + 1).max(s.policy.backoff.cap) } else { Duration::ZERO }
    };
    (1..=rounds).map(|k| round + escalation(k)).sum()
}

/// The deadline and the retry count under which [`liveness_expected`]
/// expects every job of `s` to complete: the healing time plus the service
/// bound plus recovery rounds; one retry per whole second of that (a refused
/// job waits at least its advice, one second), plus the retries a backoff may
/// spend while faults last (one per `backoff.base`, plus slack for jitter
/// draws shorter than the base).
pub(crate) fn liveness_needs(s: &Scenario) -> (Duration, u32) {
    let p = &s.policy;
    let heal = faults_heal_at(s);
    let window = Duration::from_millis(s.api.limiter.window_ms);
    let round = window + p.spread.largest() + p.backoff.cap + p.attempt_timeout;
    let service = service_bound(s);
    let deadline = heal + service + round * RECOVERY_ROUNDS;
    let base = p.backoff.base.max(Duration::from_millis(1));
    let during = (heal.as_millis() / base.as_millis()).min(1_000) as u32 + 16;
    let waiting = service.as_secs().min(100_000) as u32;
    (deadline, during + waiting + RECOVERY_ROUNDS)
}

#[cfg(test)]
#[path = "invariants_tests.rs"]
mod tests;
