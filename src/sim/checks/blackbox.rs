//! Invariants that need no cooperation from the client under test.
//!
//! A foreign client (a hand-written loop, `tower::retry`, `backon`) writes no
//! retrysim trace, so the checks in [`check`](crate::sim::checks::invariants) cannot read
//! what it planned. These checks read only what the harness saw from the
//! outside: the server's [`Ledger`](crate::sim::world::api::Ledger) and, for each
//! run of a job, its job number, start, end and outcome. Never the trace,
//! never the attempt count or the classes a client reports about itself.
//! The client declares what it [`Promises`]; the checks hold it to that.
//!
//! A request is tied to its job by the `job-N` at the end of its
//! `x-retrysim-client` label (the harness writes `"w{worker} job-{job}"`); a
//! deferred job's background runs carry the same label, and each arrival
//! belongs to the latest run of its job that had started at least a tick
//! before it arrived (a request takes at least a tick to arrive).
//!
//! # What the ledger cannot see, and the allowance for it
//!
//! The ledger knows when a request *arrived* and when its answer *left*, not
//! when the client sent or received anything. The harness knows the network
//! (`net` and the fault schedule), so it bounds those instants:
//!
//! - **A request's trip.** A request is a connect (one message: turmoil
//!   accepts on the SYN's arrival) then its data (one message), and the
//!   client may see the accept one step late, so it left no earlier than
//!   `2 × (max_latency + tick) + tick` before it arrived, and no later than
//!   `2 × min_latency` before, nor later than a tick before (a connect
//!   completes at least a step after its SYN). An answer takes one message.
//! - **Faults that delay.** A hold keeps every message until it heals, and a
//!   latency spike draws up to its own latency: a request that arrived while
//!   one lasted, or within a trip after, may have left any time since the
//!   fault began (*slowed*). An answer that left while a hold, a spike, a
//!   partition or a bounce could reach it may never have reached the client
//!   (*cut*): the client's own timeout may have fired first. Lost answers
//!   (`Fault::LoseAnswer`, the steady loss rate) are in the ledger (`lost`).
//! - **Sequential clients.** A job is one client call. A client that sends
//!   one attempt at a time and waits for its answer (or its own timeout)
//!   before the next, on a network without faults, sends its requests in
//!   the order they arrive, and the next one only after the last answer it
//!   could have received. The early-retry and after-terminal checks rely on
//!   this: a client that hedges (two attempts in flight) or whose attempt
//!   timeout is shorter than a round trip may be judged against an answer
//!   it never saw.
//!
//! Where a fault makes the order unknowable the checks say nothing (a held
//! request released late is not a retry sent early); they never widen a
//! bound beyond what the network allows. The deadline check adds the
//! scenario's [`clock_slack_ms`] (the virtual clock's step) to the job's end.
//! The early-retry check needs no latency slack at all: the answer travels
//! back and the retry travels out, so a client that waited the advice from
//! the moment it read it always arrives after `answered_at + advice`; it
//! allows only a server clock's lag behind the client's, when the advice may
//! have been read from a date without the server's `Date` header.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::sim::checks::invariants::{Invariant, Violation, clock_slack_ms};
use crate::sim::run::job::job_of_label;
use crate::sim::run::render::{Show, render_run};
use crate::sim::run::runner::{JobOutcome, JobRecord, PLANTED_SECRETS, Report};
use crate::sim::run::scenario::Scenario;
pub use crate::sim::run::subject::Promises;
use crate::sim::world::api::{AdviceForm, Arrival, ArrivalOutcome, Envelope, NO_KEY};
// Aliased: the module doc links `Ledger` by its full path, which an import would make redundant.
use crate::sim::world::api::Ledger as ApiLedger;
use crate::sim::world::net::Fault;

/// The black-box checks of `r`, holding the client to its promises and a
/// deferred job's background runs to the background policy's.
pub fn black_box(r: &Report) -> Vec<BlackBoxViolation> {
    match &r.scenario_config.fleet.deferral {
        Some(d) => check_black_box_with(r, &r.promises, &Promises::of_policy(&d.policy)),
        None => check_black_box(r, &r.promises),
    }
}

/// The black-box checks, each a ledger-only form of an invariant of
/// docs/DESIGN.md ([`BlackBoxCheck::invariant`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlackBoxCheck {
    /// An idempotency key charged more than once, or one keyed job charged under two keys.
    OneChargePerKey,
    /// One job's requests carried two different idempotency keys.
    OneKeyPerJob,
    /// More requests in one run of a job than `max_attempts`.
    AttemptBound,
    /// A request before the advice of the job's last received answer passed.
    EarlyRetry,
    /// A request after a terminal answer to the same job.
    AfterTerminal,
    /// A run that ended, or sent a request, past its deadline.
    Deadline,
    /// An unkeyed POST sent again after its answer was lost or never came.
    UnkeyedReplay,
    /// A planted secret in what the client reported.
    NoSecrets,
    /// The client panicked in a job.
    ClientPanicked,
}

impl BlackBoxCheck {
    /// The docs/DESIGN.md invariant this check is the ledger-only form of.
    pub fn invariant(self) -> Invariant {
        match self {
            BlackBoxCheck::OneChargePerKey => Invariant::OneChargePerKey,
            BlackBoxCheck::OneKeyPerJob => Invariant::OneKeyPerOperation,
            BlackBoxCheck::AttemptBound => Invariant::AttemptBound,
            BlackBoxCheck::EarlyRetry => Invariant::AdviceRespected,
            BlackBoxCheck::AfterTerminal | BlackBoxCheck::UnkeyedReplay => Invariant::NoUnsafeRetry,
            BlackBoxCheck::Deadline => Invariant::Deadline,
            BlackBoxCheck::NoSecrets => Invariant::NoSecrets,
            BlackBoxCheck::ClientPanicked => Invariant::ClientReturns,
        }
    }
}

impl BlackBoxCheck {
    /// Every black-box check, in declaration order.
    pub const ALL: [BlackBoxCheck; 9] = [
        BlackBoxCheck::OneChargePerKey,
        BlackBoxCheck::OneKeyPerJob,
        BlackBoxCheck::AttemptBound,
        BlackBoxCheck::EarlyRetry,
        BlackBoxCheck::AfterTerminal,
        BlackBoxCheck::Deadline,
        BlackBoxCheck::UnkeyedReplay,
        BlackBoxCheck::NoSecrets,
        BlackBoxCheck::ClientPanicked,
    ];

    /// The name reports print (`early-retry`), as it serializes.
    pub fn name(self) -> &'static str {
        match self {
            BlackBoxCheck::OneChargePerKey => "one-charge-per-key",
            BlackBoxCheck::OneKeyPerJob => "one-key-per-job",
            BlackBoxCheck::AttemptBound => "attempt-bound",
            BlackBoxCheck::EarlyRetry => "early-retry",
            BlackBoxCheck::AfterTerminal => "after-terminal",
            BlackBoxCheck::Deadline => "deadline",
            BlackBoxCheck::UnkeyedReplay => "unkeyed-replay",
            BlackBoxCheck::NoSecrets => "no-secrets",
            BlackBoxCheck::ClientPanicked => "client-panicked",
        }
    }
}

impl fmt::Display for BlackBoxCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken black-box invariant: which job, the arrivals that show it
/// (virtual ms), and what the client had promised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlackBoxViolation {
    /// The promise that was broken.
    pub check: BlackBoxCheck,
    /// The job, when the violation is one job's.
    pub job: Option<u32>,
    /// The ledger arrivals involved, by arrival time in virtual ms.
    pub arrivals_ms: Vec<u64>,
    /// The promise (or the rule every client owes) that was broken.
    pub promised: String,
    /// What happened, for people.
    pub detail: String,
}

impl fmt::Display for BlackBoxViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "black-box {} (invariant {}): ", self.check, self.check.invariant().number())?;
        if let Some(job) = self.job {
            write!(f, "job {job}: ")?;
        }
        write!(f, "{}", self.detail)?;
        if !self.arrivals_ms.is_empty() {
            let at: Vec<String> = self.arrivals_ms.iter().map(u64::to_string).collect();
            write!(f, " [arrivals at {} ms]", at.join(", "))?;
        }
        write!(f, " (promised: {})", self.promised)
    }
}

impl From<BlackBoxViolation> for Violation {
    fn from(b: BlackBoxViolation) -> Violation {
        Violation { invariant: b.check.invariant(), message: b.to_string() }
    }
}

/// Runs every black-box check on `r`, with `p` for every run of every job
/// (a deferred job's background runs too: see [`check_black_box_with`]).
pub fn check_black_box(r: &Report, p: &Promises) -> Vec<BlackBoxViolation> {
    check_black_box_with(r, p, p)
}

/// [`check_black_box`], holding a deferred job's background runs to
/// `background` (a background worker runs under its own, longer policy).
pub fn check_black_box_with(r: &Report, front: &Promises, background: &Promises) -> Vec<BlackBoxViolation> {
    let net = Net::of(&r.scenario_config);
    let jobs = jobs_of(r);
    let mut out = Vec::new();
    one_charge_per_key(&r.ledger, &mut out);
    one_key_per_job(&r.ledger, &mut out);
    for (&job, j) in &jobs {
        for (i, run) in j.runs.iter().enumerate() {
            let p = if i == 0 { front } else { background };
            attempt_bound(job, run, p, &mut out);
            deadline(job, run, p, &net, &mut out);
        }
        // The advice of the job's last answer binds whichever run sends next.
        let honours = |i: usize| match j.pass_of[i] {
            Some(0) | None => front.honours_retry_after,
            Some(_) => background.honours_retry_after,
        };
        early_retry(Some(job), &j.arrivals, &honours, &net, &mut out);
        // A run that had ended before its answer could reach it (an attempt
        // timed out while the server still worked) never read it: a later
        // run that sends again (deferral's background pass) ignored nothing.
        let unread = |i: usize| {
            let later = j.pass_of[i].is_some_and(|p| p + 1 < j.runs.len());
            let end = j.pass_of[i].map(|p| j.runs[p].record.finished_ms);
            later && j.arrivals[i].answered_at.zip(end).is_some_and(|(t, end)| end < ms(t + net.min_trip))
        };
        after_terminal(Some(job), &j.arrivals, &unread, &net, &mut out);
        unkeyed_replay(Some(job), &j.arrivals, &mut out);
    }
    no_secrets(r, &mut out);
    client_panicked(r, &mut out);
    out
}

/// The checks a server can make on its own, from its ledger alone (no job
/// records: `retrysim serve` sees requests, not the clients' runs): one
/// charge per key, one key per operation, and per operation no request
/// before the advice of its last received answer passed, none after a
/// terminal answer, no unkeyed POST sent again after a lost answer.
///
/// `operation` names the operation a request belongs to (`None`: judged
/// only by the key checks); requests of one operation must be sent one at a
/// time, as [the module doc](self) assumes of a job. `s` supplies the
/// network's bounds and the fault schedule. A violation's `job` is the
/// operation's `job-N`, if its name has one; else its detail names it.
pub fn check_ledger(
    ledger: &ApiLedger,
    s: &Scenario,
    operation: &dyn Fn(&Arrival) -> Option<String>,
) -> Vec<BlackBoxViolation> {
    let net = Net::of(s);
    let mut out = Vec::new();
    one_charge_per_key(ledger, &mut out);
    one_key_per_job(ledger, &mut out);
    let mut operations: BTreeMap<String, Vec<&Arrival>> = BTreeMap::new();
    for a in &ledger.arrivals {
        if let Some(name) = operation(a) {
            operations.entry(name).or_default().push(a);
        }
    }
    for (name, arrivals) in &operations {
        let job = job_of_label(name);
        let mut found = Vec::new();
        early_retry(job, arrivals, &|_| true, &net, &mut found);
        after_terminal(job, arrivals, &|_| false, &net, &mut found);
        unkeyed_replay(job, arrivals, &mut found);
        if job.is_none() {
            found.iter_mut().for_each(|v| v.detail = format!("{name}: {}", v.detail));
        }
        out.extend(found);
    }
    out
}

/// A job whose client panicked: the run went on, the job did not.
fn client_panicked(r: &Report, out: &mut Vec<BlackBoxViolation>) {
    for j in r.records.iter().chain(&r.deferred_records) {
        if let Some(message) = &j.panic {
            out.push(BlackBoxViolation {
                check: BlackBoxCheck::ClientPanicked,
                job: Some(j.job),
                arrivals_ms: Vec::new(),
                promised: "every client returns from every job".into(),
                detail: format!("the client panicked at {} ms: {message}", j.finished_ms),
            });
        }
    }
}

/// One run of a job (the front end's, or a background one) and its requests.
struct Run<'r> {
    record: &'r JobRecord,
    /// 0 for the front end's run, then 1, 2, ... for background runs.
    pass: usize,
    arrivals: Vec<&'r Arrival>,
}

/// A job's runs (by start) and all its requests (in arrival order).
#[derive(Default)]
struct Job<'r> {
    runs: Vec<Run<'r>>,
    arrivals: Vec<&'r Arrival>,
    /// For each of `arrivals`, the run that sent it (`None`: no run had started).
    pass_of: Vec<Option<usize>>,
}

fn jobs_of(r: &Report) -> BTreeMap<u32, Job<'_>> {
    let mut jobs: BTreeMap<u32, Job<'_>> = BTreeMap::new();
    let mut records: Vec<&JobRecord> = r.records.iter().chain(&r.deferred_records).collect();
    records.sort_by_key(|j| (j.job, j.started_ms));
    for record in records {
        let job = jobs.entry(record.job).or_default();
        let pass = job.runs.len();
        job.runs.push(Run { record, pass, arrivals: Vec::new() });
    }
    for a in &r.ledger.arrivals {
        // A job without a record still has requests to judge.
        let Some(job) = job_of_label(&a.client).map(|n| jobs.entry(n).or_default()) else { continue };
        job.arrivals.push(a);
        // The latest run that had started a tick before the arrival sent it:
        // nobody else sends with the job's label, runs of one job do not
        // overlap, and a request takes at least a tick to arrive (a connect
        // completes in a later step than its SYN). So a request arriving in
        // the very tick a background run started is the front end's last one,
        // read as its run ended (found by the hunt: seeds 16991, 76980, 94448).
        let tick = ms(r.scenario_config.net.tick);
        let run = job.runs.iter_mut().rev().find(|run| run.record.started_ms + tick <= ms(a.at));
        job.pass_of.push(run.as_ref().map(|run| run.pass));
        if let Some(run) = run {
            run.arrivals.push(a);
        }
    }
    jobs
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

fn times(arrivals: &[&Arrival]) -> Vec<u64> {
    arrivals.iter().map(|a| ms(a.at)).collect()
}

fn run_name(run: &Run<'_>) -> String {
    if run.pass == 0 { "its run".into() } else { format!("background run {}", run.pass) }
}

/// What the harness knows of the network, to bound when a request left and
/// whether an answer reached the client.
#[derive(Debug, Clone)]
struct Net {
    tick: Duration,
    /// The least one message takes.
    min_trip: Duration,
    /// The most one message takes without a fault: latency plus a step.
    trip: Duration,
    /// The most one message takes during any spike of the schedule.
    worst_trip: Duration,
    faults: Vec<(Duration, Fault)>,
    /// The server's clock lag behind the client's that a date advice read
    /// without `Date` carries (zero when no such reading is possible).
    date_lag: Duration,
    /// How late the virtual clock may observe a timer ([`clock_slack_ms`]).
    slack_ms: u64,
}

impl Net {
    fn of(s: &Scenario) -> Net {
        let spike = s
            .faults
            .schedule
            .iter()
            .filter_map(|f| match f.fault {
                Fault::LatencySpike { latency, .. } => Some(latency),
                _ => None,
            })
            .max()
            .unwrap_or_default();
        // `SeveralLines` holds a date line too: for a zero wait it is the
        // largest (the next whole second), and the client reads it against
        // its own clock (found by the hunt once scripts said `Retry-After: 0`).
        let dates = matches!(s.api.advice, AdviceForm::HeaderDate | AdviceForm::SeveralLines)
            || (s.api.envelope == Envelope::Blinkimg
                && matches!(s.api.advice, AdviceForm::Both | AdviceForm::BodyOnly));
        let date_lag = if dates && !s.api.send_date {
            Duration::from_millis(s.api.clock_skew_ms.min(0).unsigned_abs())
        } else {
            Duration::ZERO
        };
        Net {
            tick: s.net.tick,
            min_trip: s.net.min_latency,
            trip: s.net.max_latency + s.net.tick,
            worst_trip: s.net.max_latency.max(spike) + s.net.tick,
            faults: s.faults.schedule.iter().map(|f| (f.at, f.fault.clone())).collect(),
            date_lag,
            slack_ms: clock_slack_ms(s),
        }
    }

    /// The longest a request takes from the client's send to its arrival,
    /// when each message takes at most `trip`: connect, data, and a step.
    fn request_span(&self, trip: Duration) -> Duration {
        trip * 2 + self.tick
    }

    /// Whether a hold or a spike may have delayed a request that arrived at `at`.
    fn request_slowed(&self, at: Duration) -> bool {
        let tail = self.request_span(self.worst_trip);
        self.faults.iter().any(|(from, f)| match f {
            Fault::Hold { until } | Fault::LatencySpike { until, .. } => *from <= at && at <= *until + tail,
            _ => false,
        })
    }

    /// The earliest instant a request that arrived at `at` may have left.
    fn earliest_send(&self, at: Duration) -> Duration {
        let tail = self.request_span(self.worst_trip);
        let mut earliest = at.saturating_sub(self.request_span(self.trip));
        for (from, f) in &self.faults {
            match f {
                Fault::Hold { until } if *from <= at && at <= *until + tail => {
                    earliest = earliest.min(from.saturating_sub(tail));
                }
                Fault::LatencySpike { until, .. } if *from <= at && at <= *until + tail => {
                    earliest = earliest.min(at.saturating_sub(tail));
                }
                _ => {}
            }
        }
        earliest
    }

    /// Whether an answer that left at `at` may have been held, slowed or
    /// dropped on its way (so the client may never have read it).
    fn answer_cut(&self, at: Duration) -> bool {
        let end = at + self.worst_trip + self.tick;
        self.faults.iter().any(|(from, f)| f.may_cut_answer(*from, at, end))
    }

    /// Whether the client may have read `a`'s answer before it sent a
    /// request that arrived at `at`: the answer's trip and the request's two
    /// take at least `min_latency` each.
    fn could_precede(&self, a: &Arrival, at: Duration) -> bool {
        a.answered_at.is_some_and(|t| t + self.min_trip * 3 <= at)
    }
}

/// Charges per idempotency key ≤ 1, and one keyed job charged under at most one key.
fn one_charge_per_key(ledger: &ApiLedger, out: &mut Vec<BlackBoxViolation>) {
    let charged = |a: &&Arrival| a.outcome == ArrivalOutcome::Charged;
    for (key, n) in &ledger.charges {
        if key == NO_KEY || *n <= 1 {
            continue;
        }
        let arrivals: Vec<&Arrival> =
            ledger.arrivals.iter().filter(|a| a.idempotency_key.as_deref() == Some(key)).filter(charged).collect();
        let jobs: Vec<u32> = arrivals.iter().filter_map(|a| job_of_label(&a.client)).collect();
        out.push(BlackBoxViolation {
            check: BlackBoxCheck::OneChargePerKey,
            job: jobs.first().copied(),
            arrivals_ms: times(&arrivals),
            promised: "one charge per Idempotency-Key".into(),
            detail: format!("key {} was charged {n} times (jobs {jobs:?})", crate::trace::short_key(key)),
        });
    }
    let mut by_job: BTreeMap<u32, Vec<&Arrival>> = BTreeMap::new();
    for a in ledger.arrivals.iter().filter(charged) {
        if let (Some(job), Some(_)) = (job_of_label(&a.client), &a.idempotency_key) {
            by_job.entry(job).or_default().push(a);
        }
    }
    for (job, arrivals) in by_job {
        let mut keys: Vec<&str> = arrivals.iter().filter_map(|a| a.idempotency_key.as_deref()).collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.len() > 1 {
            out.push(BlackBoxViolation {
                check: BlackBoxCheck::OneChargePerKey,
                job: Some(job),
                arrivals_ms: times(&arrivals),
                promised: "one Idempotency-Key per operation, reused on every attempt".into(),
                detail: format!(
                    "one keyed job was charged {} times under {} different keys",
                    arrivals.len(),
                    keys.len()
                ),
            });
        }
    }
}

/// Every request of one job that carries a key carries the same one, in
/// every run (a deferred job keeps its key). A client that mints a key per
/// attempt (a key built inside the retried closure) breaks it even when no
/// answer is lost, so no double charge shows it yet.
fn one_key_per_job(ledger: &ApiLedger, out: &mut Vec<BlackBoxViolation>) {
    let mut by_job: BTreeMap<u32, Vec<&Arrival>> = BTreeMap::new();
    for a in &ledger.arrivals {
        if let (Some(job), Some(_)) = (job_of_label(&a.client), &a.idempotency_key) {
            by_job.entry(job).or_default().push(a);
        }
    }
    for (job, arrivals) in by_job {
        let first = arrivals[0].idempotency_key.as_deref();
        if let Some(other) = arrivals.iter().position(|a| a.idempotency_key.as_deref() != first) {
            let mut keys: Vec<&str> = arrivals.iter().filter_map(|a| a.idempotency_key.as_deref()).collect();
            keys.sort_unstable();
            keys.dedup();
            out.push(BlackBoxViolation {
                check: BlackBoxCheck::OneKeyPerJob,
                job: Some(job),
                arrivals_ms: times(&arrivals[..=other]),
                promised: "one Idempotency-Key per operation, reused on every attempt".into(),
                detail: format!("{} requests of one job carried {} different keys", arrivals.len(), keys.len()),
            });
        }
    }
}

/// Requests per run ≤ `max_attempts`.
fn attempt_bound(job: u32, run: &Run<'_>, p: &Promises, out: &mut Vec<BlackBoxViolation>) {
    let Some(max) = p.max_attempts else { return };
    let n = run.arrivals.len();
    if n > max as usize {
        out.push(BlackBoxViolation {
            check: BlackBoxCheck::AttemptBound,
            job: Some(job),
            arrivals_ms: times(&run.arrivals),
            promised: format!("at most {max} attempts per run"),
            detail: format!("{n} requests reached the API in {}", run_name(run)),
        });
    }
}

/// No run ends past its deadline (a sleep or wait that overran it), and no
/// request left after it, with the clock's slack.
fn deadline(job: u32, run: &Run<'_>, p: &Promises, net: &Net, out: &mut Vec<BlackBoxViolation>) {
    let Some(d) = p.deadline else { return };
    let j = run.record;
    let end = j.started_ms.saturating_add(ms(d));
    let promised = format!("every run ends within {} ms of its start", ms(d));
    let slack = net.slack_ms;
    if j.finished_ms > end + slack {
        out.push(BlackBoxViolation {
            check: BlackBoxCheck::Deadline,
            job: Some(job),
            arrivals_ms: Vec::new(),
            promised: promised.clone(),
            detail: format!(
                "{} started at {} ms and ended at {} ms, {} ms past its deadline at {end} ms",
                run_name(run),
                j.started_ms,
                j.finished_ms,
                j.finished_ms - end
            ),
        });
    }
    let late: Vec<&Arrival> =
        run.arrivals.iter().copied().filter(|a| ms(net.earliest_send(a.at)) > end + slack).collect();
    if let Some(first) = late.first() {
        out.push(BlackBoxViolation {
            check: BlackBoxCheck::Deadline,
            job: Some(job),
            arrivals_ms: times(&late),
            promised,
            detail: format!(
                "{} sent {} request(s) after its deadline at {end} ms: the first arrived at {} ms and left no earlier than {} ms",
                run_name(run),
                late.len(),
                ms(first.at),
                ms(net.earliest_send(first.at))
            ),
        });
    }
}

/// The answer the job last received before it sent a request that arrived
/// at `b`: the latest answered among its earlier arrivals that it could have
/// read in time.
fn last_answer<'r>(earlier: &[&'r Arrival], b: &Arrival, net: &Net) -> Option<&'r Arrival> {
    earlier.iter().copied().filter(|a| net.could_precede(a, b.at)).max_by_key(|a| a.answered_at)
}

/// Whether the client surely read `a`'s answer: it was not lost, and no
/// fault could have delayed the request (a stale arrival the client had
/// given up on) or the answer.
fn surely_read(a: &Arrival, net: &Net) -> bool {
    !a.lost && !net.request_slowed(a.at) && a.answered_at.is_some_and(|t| !net.answer_cut(t))
}

/// The wait an answer binds a client to: its `Retry-After` or body hint
/// (`None` if it had neither: a dialect alone binds only clients that
/// promised to read it, and `Promises` has no such promise), or the
/// dialect's wait where that is shorter. The server sent both, and a client
/// may follow either: retrysim's own reads OpenAI's precise
/// `retry-after-ms` before a body hint rounded up to whole seconds
/// (docs/DESIGN.md, the dialects' precedence; found by the hunt: seeds
/// 2660, 4233 and 11186, a `retry-after-ms` of 887 ms beside a body's 1 s).
fn advised_wait(a: &Arrival) -> Option<Duration> {
    a.retry_after.map(|wait| a.dialect_wait.map_or(wait, |dialect| wait.min(dialect)))
}

/// A request that arrived before the advice of the job's last received
/// answer had passed (`answered_at` + [`advised_wait`], less a date
/// advice's clock lag). One violation per job: the first early request,
/// with a count of the others.
fn early_retry(
    job: Option<u32>,
    arrivals: &[&Arrival],
    honours: &dyn Fn(usize) -> bool,
    net: &Net,
    out: &mut Vec<BlackBoxViolation>,
) {
    let mut early = arrivals.iter().enumerate().filter(|&(i, _)| honours(i)).filter_map(|(i, b)| {
        let a = last_answer(&arrivals[..i], b, net)?;
        let (wait, answered) = (advised_wait(a)?, a.answered_at?);
        let stale = !surely_read(a, net) || net.request_slowed(b.at);
        (!stale && b.at + net.date_lag < answered + wait).then_some((a, *b, answered, wait))
    });
    let Some((a, b, answered, wait)) = early.next() else { return };
    let more = early.count();
    let lag = if net.date_lag.is_zero() {
        String::new()
    } else {
        format!(", less {} ms of server clock lag", ms(net.date_lag))
    };
    out.push(BlackBoxViolation {
        check: BlackBoxCheck::EarlyRetry,
        job,
        arrivals_ms: vec![ms(a.at), ms(b.at)],
        promised: "honours Retry-After".into(),
        detail: format!(
            "a request arrived at {} ms, {} ms after the {} answered at {} ms that advised {} ms (until {} ms{lag}){}",
            ms(b.at),
            ms(b.at.saturating_sub(answered)),
            a.status,
            ms(answered),
            ms(wait),
            ms(answered + wait),
            if more > 0 { format!("; {more} more early request(s) in this job") } else { String::new() }
        ),
    });
}

/// Whether the default table calls an answer final: a 4xx that waiting
/// cannot fix (quota, signup, credits, a reused key, a bad request); not a
/// 429 that asks to wait, nor 409 `IDEMPOTENCY_IN_PROGRESS`.
fn terminal(a: &Arrival) -> bool {
    (400..500).contains(&a.status) && crate::sim::checks::invariants::terminal(a.status, a.code.as_deref())
}

/// A request after a terminal answer the job surely read.
/// `unread(i)`: the client surely never read answer `i` (its run had ended).
fn after_terminal(
    job: Option<u32>,
    arrivals: &[&Arrival],
    unread: &dyn Fn(usize) -> bool,
    net: &Net,
    out: &mut Vec<BlackBoxViolation>,
) {
    for (i, a) in arrivals.iter().enumerate() {
        if !terminal(a) || !surely_read(a, net) || unread(i) {
            continue;
        }
        let next = arrivals[i + 1..].iter().find(|b| net.could_precede(a, b.at) && !net.request_slowed(b.at));
        if let Some(b) = next {
            out.push(BlackBoxViolation {
                check: BlackBoxCheck::AfterTerminal,
                job,
                arrivals_ms: vec![ms(a.at), ms(b.at)],
                promised: "no request after a terminal answer".into(),
                detail: format!(
                    "a request arrived at {} ms after the terminal answer {} {} at {} ms",
                    ms(b.at),
                    a.status,
                    a.code.as_deref().unwrap_or("(no code)"),
                    ms(a.answered_at.unwrap_or(a.at))
                ),
            });
            return;
        }
    }
}

/// An unkeyed POST sent again after one whose answer was lost, was cut by
/// the server going down, or had not come when the next one arrived.
fn unkeyed_replay(job: Option<u32>, arrivals: &[&Arrival], out: &mut Vec<BlackBoxViolation>) {
    let unkeyed: Vec<&Arrival> =
        arrivals.iter().copied().filter(|a| a.method == "POST" && a.idempotency_key.is_none()).collect();
    for pair in unkeyed.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let why = if a.lost {
            "its answer was lost"
        } else if matches!(a.outcome, ArrivalOutcome::Aborted | ArrivalOutcome::Running) {
            "the server went down before answering"
        } else if a.answered_at.is_none_or(|t| t > b.at) {
            "it had not been answered yet"
        } else {
            continue;
        };
        out.push(BlackBoxViolation {
            check: BlackBoxCheck::UnkeyedReplay,
            job,
            arrivals_ms: vec![ms(a.at), ms(b.at)],
            promised: "an unkeyed POST is never replayed after an ambiguous failure".into(),
            detail: format!(
                "the unkeyed POST that arrived at {} ms was sent again (arrived at {} ms) after {why}",
                ms(a.at),
                ms(b.at)
            ),
        });
    }
}

/// No planted secret (nor an account's API key) in what the client
/// reports: give-up reasons, the records and their traces, the rendered
/// trace, the report and its text.
fn no_secrets(r: &Report, out: &mut Vec<BlackBoxViolation>) {
    let mut secrets: Vec<String> = PLANTED_SECRETS.iter().map(|s| s.to_string()).collect();
    for a in &r.scenario_config.api.accounts {
        secrets.extend(a.keys.iter().cloned());
    }
    secrets.retain(|s| !s.is_empty());
    secrets.sort();
    secrets.dedup();
    let mut texts: Vec<(Option<u32>, String, String)> = Vec::new();
    for j in r.records.iter().chain(&r.deferred_records) {
        if let JobOutcome::GaveUp { reason } = &j.outcome {
            texts.push((Some(j.job), "give-up reason".into(), reason.clone()));
        }
        texts.push((Some(j.job), "job record".into(), serde_json::to_string(j).unwrap_or_default()));
    }
    texts.push((None, "rendered trace".into(), render_run(r, Show::FirstJobs(usize::MAX))));
    texts.push((None, "report JSON".into(), serde_json::to_string(r).unwrap_or_default()));
    texts.push((None, "report text".into(), r.render_text()));
    for (job, what, text) in texts {
        for s in &secrets {
            if text.contains(s.as_str()) {
                let shown: String = s.chars().take(6).collect();
                out.push(BlackBoxViolation {
                    check: BlackBoxCheck::NoSecrets,
                    job,
                    arrivals_ms: Vec::new(),
                    promised: "no credential in anything the client reports".into(),
                    detail: format!("a secret ({shown}…) appears in the {what}"),
                });
            }
        }
    }
}

#[cfg(test)]
#[path = "blackbox_tests.rs"]
mod tests;
