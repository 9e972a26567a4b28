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
        self.faults.iter().any(|(from, f)| match f {
            Fault::Hold { until } | Fault::LatencySpike { until, .. } | Fault::Partition { until } => {
                *from <= end && at <= *until
            }
            Fault::Bounce => at <= *from && *from <= end,
            // A close race drops a request unread: no answer left.
            Fault::LoseAnswer | Fault::LimiterPartition { .. } | Fault::Cancel | Fault::CloseRace { .. } => false,
        })
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

/// A request that arrived before the advice of the job's last received
/// answer had passed (`answered_at + retry_after`, less a date advice's
/// clock lag). One violation per job: the first early request, with a count
/// of the others.
fn early_retry(
    job: Option<u32>,
    arrivals: &[&Arrival],
    honours: &dyn Fn(usize) -> bool,
    net: &Net,
    out: &mut Vec<BlackBoxViolation>,
) {
    let mut early = arrivals.iter().enumerate().filter(|&(i, _)| honours(i)).filter_map(|(i, b)| {
        let a = last_answer(&arrivals[..i], b, net)?;
        let (wait, answered) = (a.retry_after?, a.answered_at?);
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
mod tests {
    //! Each check on small hand-built ledgers: one that passes and one
    //! deliberately broken that fails (the negative controls). The reports
    //! come from a real run of `once-429-then-200` (default network: 1–3 ms
    //! latency, 1 ms tick, so a request's trip is at most 9 ms and the clock
    //! slack 2 ms) with its ledger and records replaced, and no trace.

    use super::*;
    use crate::sim::run::runner::run;
    use crate::sim::run::scenario::named;
    use crate::sim::world::api::Ledger;
    use crate::sim::world::net::ScheduledFault;

    const S: u64 = 1_000;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// A keyed job POST that ran and was charged, answered on arrival.
    fn post(job: u32, ms: u64) -> Arrival {
        Arrival {
            at: at(ms),
            client: format!("w0 job-{job}"),
            account: Some("acme".into()),
            method: "POST".into(),
            path: "/v1/jobs".into(),
            idempotency_key: Some(format!("key-of-job-{job}")),
            status: 201,
            code: None,
            outcome: ArrivalOutcome::Charged,
            retry_after: None,
            answered_at: Some(at(ms)),
            lost: false,
            body_digest: 0,
            advertised: None,
            dialect_wait: None,
        }
    }

    /// A refusal of job `job`'s POST with `status`, `code` and advice (ms).
    fn refused(job: u32, ms: u64, status: u16, code: &str, wait: Option<u64>) -> Arrival {
        Arrival {
            status,
            code: Some(code.into()),
            outcome: ArrivalOutcome::Refused,
            retry_after: wait.map(at),
            ..post(job, ms)
        }
    }

    fn rate_limited(job: u32, ms: u64, wait: u64) -> Arrival {
        refused(job, ms, 429, "RATE_LIMITED", Some(wait))
    }

    fn unkeyed(a: Arrival) -> Arrival {
        Arrival { idempotency_key: None, ..a }
    }

    /// A report whose ledger is `arrivals` and whose jobs ran over `runs`
    /// (job, started, finished; a job's second run is a background run).
    fn report(arrivals: Vec<Arrival>, runs: &[(u32, u64, u64)]) -> Report {
        let mut r = run(&named("once-429-then-200").unwrap(), 1).unwrap();
        let mut template = r.records[0].clone();
        template.trace.events.clear();
        template.attempts = 0;
        template.outcome = JobOutcome::Succeeded { status: 201 };
        let mut ledger = Ledger::default();
        for a in &arrivals {
            if a.outcome == ArrivalOutcome::Charged {
                *ledger.charges.entry(a.idempotency_key.clone().unwrap_or(NO_KEY.into())).or_insert(0) += 1;
                ledger.charged += 1;
            }
        }
        ledger.arrivals = arrivals;
        r.ledger = ledger;
        r.records.clear();
        r.deferred_records.clear();
        for &(job, started_ms, finished_ms) in runs {
            let record = JobRecord { job, started_ms, finished_ms, ..template.clone() };
            if r.records.iter().any(|j| j.job == job) {
                r.deferred_records.push(record);
            } else {
                r.records.push(record);
            }
        }
        r
    }

    fn promises(max_attempts: u32, deadline_s: u64) -> Promises {
        Promises {
            max_attempts: Some(max_attempts),
            deadline: Some(Duration::from_secs(deadline_s)),
            honours_retry_after: true,
        }
    }

    fn checks(vs: &[BlackBoxViolation]) -> Vec<BlackBoxCheck> {
        vs.iter().map(|v| v.check).collect()
    }

    fn only(vs: &[BlackBoxViolation], check: BlackBoxCheck) -> &BlackBoxViolation {
        assert_eq!(checks(vs), [check], "{vs:#?}");
        &vs[0]
    }

    fn fault(s: &mut Report, from: u64, fault: Fault) {
        s.scenario_config.faults.schedule.push(ScheduledFault { at: at(from), fault });
    }

    #[test]
    fn one_charge_per_key() {
        let replayed = Arrival { outcome: ArrivalOutcome::Replayed, status: 201, ..post(1, 500) };
        let r = report(vec![post(1, 10), replayed], &[(1, 0, 600)]);
        assert_eq!(check_black_box(&r, &promises(3, 10)), []);

        let r = report(vec![post(1, 10), post(1, 500)], &[(1, 0, 600)]);
        let v = only(&check_black_box(&r, &promises(3, 10)), BlackBoxCheck::OneChargePerKey).clone();
        assert_eq!((v.job, v.arrivals_ms), (Some(1), vec![10, 500]));
        assert!(v.detail.contains("charged 2 times"), "{}", v.detail);

        // A fresh key on every attempt: each key once, the job twice.
        let second = Arrival { idempotency_key: Some("another-key".into()), ..post(2, 500) };
        let r = report(vec![post(2, 10), second], &[(2, 0, 600)]);
        let vs = check_black_box(&r, &promises(3, 10));
        assert_eq!(checks(&vs), [BlackBoxCheck::OneChargePerKey, BlackBoxCheck::OneKeyPerJob], "{vs:#?}");
        assert!(vs[0].detail.contains("under 2 different keys"), "{}", vs[0].detail);
        assert!(vs[1].detail.contains("2 different keys"), "{}", vs[1].detail);

        // A fresh key on a retry after a 429: nothing charged twice, yet the
        // job's requests carried two keys.
        let fresh = Arrival { idempotency_key: Some("another-key".into()), ..post(3, 1_500) };
        let r = report(vec![rate_limited(3, 10, S), fresh], &[(3, 0, 1_600)]);
        let v = only(&check_black_box(&r, &promises(3, 10)), BlackBoxCheck::OneKeyPerJob).clone();
        assert_eq!((v.job, v.arrivals_ms), (Some(3), vec![10, 1_500]));
    }

    #[test]
    fn attempts_per_run() {
        let arrivals = vec![rate_limited(1, 10, S), rate_limited(1, 1_020, S), post(1, 2_030)];
        let r = report(arrivals, &[(1, 0, 2_040)]);
        assert_eq!(check_black_box(&r, &promises(3, 10)), []);
        assert_eq!(check_black_box(&r, &Promises { max_attempts: None, ..promises(0, 10) }), []);
        let v = only(&check_black_box(&r, &promises(2, 10)), BlackBoxCheck::AttemptBound).clone();
        assert_eq!((v.job, v.arrivals_ms.len(), v.promised.as_str()), (Some(1), 3, "at most 2 attempts per run"));

        // A deferred job: three requests in the front end's run, three in a
        // background run 30 s later; each run is within three.
        let mut arrivals = vec![rate_limited(1, 10, S), rate_limited(1, 1_020, S)];
        arrivals.push(refused(1, 2_030, 429, "queue_full", Some(30 * S)));
        arrivals.extend([rate_limited(1, 32_040, S), rate_limited(1, 33_050, S), post(1, 34_060)]);
        let r = report(arrivals.clone(), &[(1, 0, 2_040), (1, 32_035, 34_070)]);
        assert_eq!(check_black_box(&r, &promises(3, 10)), []);
        arrivals.insert(5, rate_limited(1, 34_055, 0));
        let r = report(arrivals, &[(1, 0, 2_040), (1, 32_035, 34_070)]);
        let vs = check_black_box(&r, &promises(3, 10));
        assert!(only(&vs, BlackBoxCheck::AttemptBound).detail.contains("background run 1"), "{vs:#?}");

        // The front end's last request arrives in the very tick (1 ms here)
        // its run ends and the background run starts, answered at once (hunt
        // seeds 16991, 76980, 94448). A request takes at least a tick to
        // arrive, so it is the front end's: each run is within three.
        assert_eq!(r.scenario_config.net.tick, at(1));
        let mut arrivals = vec![rate_limited(1, 10, S), rate_limited(1, 1_020, S)];
        arrivals.push(refused(1, 2_040, 503, "UNAVAILABLE", None));
        arrivals.extend([rate_limited(1, 2_050, S), rate_limited(1, 3_060, S), post(1, 4_070)]);
        let runs = [(1, 0, 2_040), (1, 2_040, 4_080)];
        assert_eq!(check_black_box(&report(arrivals.clone(), &runs), &promises(3, 10)), []);
        // One more request in the background run is still one too many there.
        arrivals.insert(5, rate_limited(1, 4_065, 0));
        let vs = check_black_box(&report(arrivals, &runs), &promises(3, 10));
        let v = only(&vs, BlackBoxCheck::AttemptBound);
        assert!(v.detail.contains("background run 1"), "{vs:#?}");
        assert_eq!(v.arrivals_ms, [2_050, 3_060, 4_065, 4_070]);
    }

    #[test]
    fn early_retry() {
        let r = |next: u64| report(vec![rate_limited(1, 1_000, 2 * S), post(1, next)], &[(1, 990, next + 5)]);
        assert_eq!(check_black_box(&r(3_000), &promises(3, 10)), []);
        let v = only(&check_black_box(&r(2_500), &promises(3, 10)), BlackBoxCheck::EarlyRetry).clone();
        assert_eq!((v.job, v.arrivals_ms), (Some(1), vec![1_000, 2_500]));
        assert!(v.detail.contains("advised 2000 ms (until 3000 ms)"), "{}", v.detail);
        // Not promised: not checked.
        let p = Promises { honours_retry_after: false, ..promises(3, 10) };
        assert_eq!(check_black_box(&r(2_500), &p), []);
        // A lost answer advised nothing.
        let mut lost = r(2_500);
        lost.ledger.arrivals[0].lost = true;
        assert_eq!(check_black_box(&lost, &promises(3, 10)), []);
        // A request that arrived within three minimum trips of the answer
        // left before the answer could have reached the client.
        assert_eq!(check_black_box(&r(1_002), &promises(3, 10)), []);
        assert_eq!(checks(&check_black_box(&r(1_003), &promises(3, 10))), [BlackBoxCheck::EarlyRetry]);
    }

    #[test]
    fn a_held_or_slowed_request_is_not_an_early_retry() {
        // The refused request arrived as a hold released it, or slowed by a
        // spike: the client may have given up on it long before, and never
        // read its advice.
        for (from, fault_) in
            [(500, Fault::Hold { until: at(1_000) }), (900, Fault::LatencySpike { latency: at(200), until: at(950) })]
        {
            let mut r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 1_500)], &[(1, 0, 1_600)]);
            fault(&mut r, from, fault_);
            assert_eq!(check_black_box(&r, &promises(3, 10)), []);
        }
        // The early request itself arrived slowed by a spike: it may be an
        // earlier attempt's, sent before the refusal.
        let mut r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 1_500)], &[(1, 0, 1_600)]);
        fault(&mut r, 1_200, Fault::LatencySpike { latency: at(200), until: at(1_300) });
        assert_eq!(check_black_box(&r, &promises(3, 10)), []);
        // The refusal's answer left while a partition began: it may never have arrived.
        let mut r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 1_500)], &[(1, 0, 1_600)]);
        fault(&mut r, 1_002, Fault::Partition { until: at(1_100) });
        assert_eq!(check_black_box(&r, &promises(3, 10)), []);
        // The same fault well after both: the retry is early.
        let mut r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 1_500)], &[(1, 0, 1_600)]);
        fault(&mut r, 1_600, Fault::Hold { until: at(1_700) });
        assert_eq!(checks(&check_black_box(&r, &promises(3, 10))), [BlackBoxCheck::EarlyRetry]);
    }

    #[test]
    fn a_lagging_server_clock_is_allowed_only_for_a_date_read_without_date() {
        let mut r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 2_700)], &[(1, 0, 2_800)]);
        r.scenario_config.api.advice = AdviceForm::HeaderDate;
        r.scenario_config.api.clock_skew_ms = -300;
        assert_eq!(checks(&check_black_box(&r, &promises(3, 10))), [BlackBoxCheck::EarlyRetry], "Date was sent");
        r.scenario_config.api.send_date = false;
        assert_eq!(check_black_box(&r, &promises(3, 10)), [], "300 ms behind, read against the client's clock");
        r.ledger.arrivals[1].at = at(2_699);
        let vs = check_black_box(&r, &promises(3, 10));
        assert!(only(&vs, BlackBoxCheck::EarlyRetry).detail.contains("less 300 ms"), "{vs:#?}");
        r.scenario_config.api.advice = AdviceForm::HeaderSeconds;
        r.ledger.arrivals[1].at = at(2_700);
        assert_eq!(
            checks(&check_black_box(&r, &promises(3, 10))),
            [BlackBoxCheck::EarlyRetry],
            "seconds need no clock"
        );
    }

    #[test]
    fn each_run_is_held_to_its_own_promise_on_advice() {
        // The front end gave up on a 30 s advice; a background run that
        // promised nothing about advice came back after 10 s.
        let arrivals = vec![refused(1, 1_000, 429, "queue_full", Some(30 * S)), post(1, 11_000)];
        let r = report(arrivals, &[(1, 0, 1_010), (1, 10_990, 11_010)]);
        let ignores = Promises { honours_retry_after: false, ..promises(3, 60) };
        assert_eq!(check_black_box_with(&r, &promises(3, 60), &ignores), []);
        let vs = check_black_box_with(&r, &ignores, &promises(3, 60));
        assert_eq!(only(&vs, BlackBoxCheck::EarlyRetry).arrivals_ms, [1_000, 11_000]);
    }

    #[test]
    fn a_job_without_a_record_is_still_judged_by_its_requests() {
        let r = report(vec![unkeyed(Arrival { lost: true, ..post(9, 10) }), unkeyed(post(9, 100))], &[]);
        assert_eq!(checks(&check_black_box(&r, &promises(3, 10))), [BlackBoxCheck::UnkeyedReplay]);
    }

    #[test]
    fn the_last_answer_is_the_advice_that_binds() {
        // A 30 s advice, honoured, then an in-progress 409 without advice
        // and a quick retry after it: the 409 is the last answer.
        let conflict = refused(1, 31_000, 409, "IDEMPOTENCY_IN_PROGRESS", None);
        let r = report(vec![rate_limited(1, 1_000, 30 * S), conflict, post(1, 31_100)], &[(1, 0, 31_200)]);
        assert_eq!(check_black_box(&r, &promises(3, 40)), []);
    }

    #[test]
    fn after_terminal() {
        let r = |status: u16, code: &str| {
            report(vec![refused(1, 1_000, status, code, None), post(1, 1_500)], &[(1, 0, 1_600)])
        };
        for (status, code) in [(402, "INSUFFICIENT_CREDITS"), (429, "QUOTA_EXCEEDED"), (429, "insufficient_quota")]
            .into_iter()
            .chain([(429, "SIGNUP_REQUIRED"), (409, "IDEMPOTENCY_KEY_REUSED"), (404, "NOT_FOUND"), (400, "BAD")])
        {
            let vs = check_black_box(&r(status, code), &promises(3, 10));
            let v = only(&vs, BlackBoxCheck::AfterTerminal);
            assert_eq!(v.arrivals_ms, [1_000, 1_500], "{status} {code}");
            assert!(v.detail.contains(code), "{}", v.detail);
        }
        // A front-end run that ended (its attempt timed out) before the
        // terminal answer could reach it, then a background pass: unread.
        let gave_up_first = report(
            vec![refused(1, 1_000, 429, "QUOTA_EXCEEDED", None), post(1, 1_500)],
            &[(1, 0, 990), (1, 1_400, 1_600)],
        );
        assert_eq!(check_black_box(&gave_up_first, &promises(3, 10)), []);
        // The same pass after a front end that may have read it: a violation.
        let read_first = report(
            vec![refused(1, 1_000, 429, "QUOTA_EXCEEDED", None), post(1, 1_500)],
            &[(1, 0, 1_100), (1, 1_400, 1_600)],
        );
        only(&check_black_box(&read_first, &promises(3, 10)), BlackBoxCheck::AfterTerminal);
        let waits =
            [(429, "RATE_LIMITED"), (429, "queue_full"), (429, "SOMETHING_NEW"), (409, "IDEMPOTENCY_IN_PROGRESS")];
        for (status, code) in waits.into_iter().chain([(503, "unavailable"), (500, "internal")]) {
            assert_eq!(check_black_box(&r(status, code), &promises(3, 10)), [], "{status} {code}");
        }
        let mut lost = r(402, "INSUFFICIENT_CREDITS");
        lost.ledger.arrivals[0].lost = true;
        assert_eq!(check_black_box(&lost, &promises(3, 10)), [], "a lost terminal answer was never read");
    }

    #[test]
    fn deadline() {
        // Default network: a request's trip is at most 2 × (3 + 1) + 1 = 9 ms; slack 2 ms.
        let end = 10 * S;
        let ended = |finished: u64| report(vec![post(1, 10)], &[(1, 0, finished)]);
        assert_eq!(check_black_box(&ended(end + 2), &promises(3, 10)), []);
        let vs = check_black_box(&ended(end + 3), &promises(3, 10));
        assert!(only(&vs, BlackBoxCheck::Deadline).detail.contains("3 ms past its deadline at 10000 ms"), "{vs:#?}");
        assert_eq!(check_black_box(&ended(end + 3), &Promises { deadline: None, ..promises(3, 10) }), []);

        let sent = |arrived: u64| report(vec![rate_limited(1, 10, 0), post(1, arrived)], &[(1, 0, end)]);
        assert_eq!(check_black_box(&sent(end + 2 + 9), &promises(3, 10)), [], "left by the deadline plus slack");
        let v = only(&check_black_box(&sent(end + 2 + 10), &promises(3, 10)), BlackBoxCheck::Deadline).clone();
        assert_eq!(v.arrivals_ms, [end + 12]);
        assert!(v.detail.contains("left no earlier than 10003 ms"), "{}", v.detail);
        // Held from before the deadline and released after it: not sent late.
        let mut held = sent(end + 500);
        fault(&mut held, end - 100, Fault::Hold { until: at(end + 500) });
        assert_eq!(check_black_box(&held, &promises(3, 10)), []);
        let mut slow = sent(end + 1_500);
        fault(&mut slow, end - 1_000, Fault::LatencySpike { latency: at(2 * S), until: at(end) });
        assert_eq!(check_black_box(&slow, &promises(3, 10)), []);
    }

    #[test]
    fn unkeyed_replay() {
        let first = || unkeyed(post(1, 10));
        let again = || unkeyed(post(1, 100));
        let r = |a: Arrival| report(vec![a, again()], &[(1, 0, 200)]);
        let vs = check_black_box(&r(Arrival { lost: true, ..first() }), &promises(3, 10));
        let v = only(&vs, BlackBoxCheck::UnkeyedReplay);
        assert_eq!((v.job, v.arrivals_ms.clone()), (Some(1), vec![10, 100]));
        assert!(v.detail.contains("its answer was lost"), "{}", v.detail);
        let aborted = Arrival { status: 0, outcome: ArrivalOutcome::Aborted, answered_at: Some(at(50)), ..first() };
        assert!(
            only(&check_black_box(&r(aborted), &promises(3, 10)), BlackBoxCheck::UnkeyedReplay)
                .detail
                .contains("went down")
        );
        let running = Arrival { answered_at: Some(at(150)), ..first() };
        assert!(
            only(&check_black_box(&r(running), &promises(3, 10)), BlackBoxCheck::UnkeyedReplay)
                .detail
                .contains("not been answered")
        );
        // A definite refusal: nothing ran, so sending again is fine.
        assert_eq!(check_black_box(&r(unkeyed(rate_limited(1, 10, 0))), &promises(3, 10)), []);
        // With a key the server deduplicates: a resend after a loss is fine.
        let keyed = report(vec![Arrival { lost: true, ..post(1, 10) }, post(1, 100)], &[(1, 0, 200)]);
        let vs = check_black_box(&keyed, &promises(3, 10));
        assert_eq!(checks(&vs), [BlackBoxCheck::OneChargePerKey], "only the second charge: {vs:#?}");
    }

    #[test]
    fn no_secrets() {
        let mut r = report(vec![post(1, 10)], &[(1, 0, 20)]);
        r.records[0].outcome = JobOutcome::GaveUp { reason: "server_error".into() };
        assert_eq!(check_black_box(&r, &Promises::nothing()), []);
        r.records[0].outcome = JobOutcome::GaveUp { reason: format!("401 with Bearer {}", PLANTED_SECRETS[0]) };
        let vs = check_black_box(&r, &Promises::nothing());
        assert!(!vs.is_empty() && vs.iter().all(|v| v.check == BlackBoxCheck::NoSecrets), "{vs:#?}");
        assert!(vs.iter().any(|v| v.job == Some(1) && v.detail.contains("give-up reason")), "{vs:#?}");
        assert!(vs.iter().all(|v| !v.to_string().contains(PLANTED_SECRETS[0])), "the report does not repeat it");
    }

    #[test]
    fn a_violation_names_the_job_the_arrivals_and_the_promise() {
        let r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 1_500)], &[(1, 0, 1_600)]);
        let v = check_black_box(&r, &promises(3, 10)).remove(0);
        assert_eq!(
            v.to_string(),
            "black-box early-retry (invariant 4): job 1: a request arrived at 1500 ms, 500 ms after the 429 answered \
             at 1000 ms that advised 2000 ms (until 3000 ms) [arrivals at 1000, 1500 ms] (promised: honours Retry-After)"
        );
        let general: Violation = v.into();
        assert_eq!(general.invariant, Invariant::AdviceRespected);
        assert!(general.message.starts_with("black-box early-retry"));
    }

    #[test]
    fn labels_name_jobs() {
        assert_eq!(job_of_label("w3 job-17"), Some(17));
        assert_eq!(job_of_label("bg0 job-4"), Some(4));
        assert_eq!(job_of_label("(unknown)"), None);
        assert_eq!(job_of_label("w1 job-x"), None);
    }

    #[test]
    fn promises_of_a_policy() {
        let p = crate::core::policy::Policy::standard();
        let promised = Promises::of_policy(&p);
        assert_eq!(promised.max_attempts, Some(p.max_retries + 1));
        assert_eq!((promised.deadline, promised.honours_retry_after), (Some(p.deadline), p.use_advice));
    }
}
