//! Checkers for the fleet controls. Like `sim::checks::invariants`, they read only what a
//! run left behind: the jobs' traces, the server's ledger, and the facts the
//! gates recorded. The gates and budgets never check themselves.
//!
//! | property | from |
//! |---|---|
//! | retries stay within the shared budget's allowance | traces (`wait` = a granted retry, `done` = a deposit) |
//! | a budget refuses a retry only when it may be spent | traces (`wait`, and `gave up` for an exhausted budget) |
//! | admissions leave the gate in FIFO order, never above the window | the gate's facts |
//! | requests running at the API never exceed the gate's limit | the ledger, against the gate's limit over time |
//! | partitioned from the limiter, no worker exceeds its fallback limit | the ledger and the route switches |
//! | a deferred job is charged exactly once, under its one key | the ledger and the traces |
//! | the interactive path never waits past its budget | the traces |
//! | an AIMD gate backs off on a 429 after its guard (budgeted efficiency) | traces and the gate's facts |
//! | the limiter service's AIMD gate grows on successes told on a window half used (efficiency), and no AIMD gate by more than a slot a success | the service's record and the gate's facts |
//! | an AIMD gate spaces admissions by its rate, which only a throttle switches on and moves within its config's steps | the gate's facts |
//! | an AIMD gate counts its attempts out, cuts once per window of attempts, by `β` | the gate's facts |
//! | an AIMD gate admits its first ticket the instant it queues, and its queue's head whenever the window has room and the pace allows | the gate's facts |
//! | a pacing gate reading rate-limit headers lets no 429 through after two windows | the ledger |
//! | nor holds an attempt through a window it left half unused | the ledger and the traces |
//! | nor, against whole-second headers, past a window's end by more than the second it probes | the ledger and the traces |
//! | a refusal's `Retry-After` holds the whole fleet at a shared pacing gate | the traces |

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::core::budget::TokenBucketBudget;
use crate::core::classify::Class;
use crate::core::policy::GiveUpReason;
use crate::gate::aimd::{GateEvent, GateFact};
use crate::sim::checks::aimd::{
    CubicCurve, CutGuard, RateChange, aimd_cuts_one, head_held, pace_interval, throttle_base,
};
use crate::sim::run::deferral::deferrable;
use crate::sim::run::runner::{JobOutcome, JobRecord, Report};
use crate::sim::run::scenario::{BudgetConfig, GateConfig, Hosts};
use crate::sim::world::api::Arrival;
use crate::sim::world::limiter_service::{Hello, Route};
use crate::sim::world::net::Fault;
use crate::trace::EventKind;

pub use crate::sim::checks::registry::FleetViolation;
use crate::sim::checks::registry::Property;

fn v(check: Property, message: String) -> FleetViolation {
    FleetViolation { check, message }
}

/// Every fleet checker that applies to this run's configuration.
pub fn check_fleet(r: &Report) -> Vec<FleetViolation> {
    let mut out = budget_allowance(r);
    out.extend(budget_refusal(r));
    out.extend(gate_window(r));
    out.extend(gate_order(r));
    out.extend(pacing_holds(r));
    out.extend(api_within_gate_limit(r));
    out.extend(fallback_within_local_limit(r));
    out.extend(fallback_only_when_cut_off(r));
    out.extend(service_hears_outcomes(r));
    out.extend(service_keeps_leases(r));
    out.extend(deferred_charged_once(r));
    out.extend(aimd_backs_off(r));
    out.extend(aimd_grows(r));
    out.extend(aimd_paces(r));
    out.extend(aimd_cuts(r));
    out.extend(gate_admits(r));
    out.extend(pacing_spends_no_429(r));
    out.extend(pacing_fills_windows(r));
    out.extend(pacing_learns_whole_seconds(r));
    out
}

/// An efficiency check with a budget: a shared pacing gate that reads the
/// rate-limit headers of a fixed window it alone uses lets no request be
/// refused once it has read them (from the third window on; the opening
/// burst goes out before any answer told the limit).
///
/// The gate stops the fleet when the window is spent and lets it go at the
/// reset the headers advertise; a gate that does not wait for that reset
/// stays safe (each 429 holds the fleet) but spends refused requests.
/// Applies only where nothing else refuses or repeats a request: writes
/// only (one gate paces one budget; reads draw on another), a shared
/// fleet gate (no per-worker hosts, no coordinator, no deferral), one
/// account with no credits, quota, concurrency cap, anonymous cap or
/// script, a reset the gate can read (seconds left from an unskewed
/// server, or a Unix time against `Date`, whose whole seconds the gate
/// learns around), requests answered on arrival (no processing
/// time: with it the hunt finds honest 429s, seeds 1215, 1559, 2730), no
/// network faults, and retrysim's own client (traced), which takes the gate.
pub fn pacing_spends_no_429(r: &Report) -> Vec<FleetViolation> {
    let api = &r.scenario_config.api;
    if !pacing_clean(r) {
        return Vec::new();
    }
    // Until its first answers come back the gate knows no limit, so the
    // fleet's opening burst may overrun the first window; from the second
    // window on the gate has read the headers and must stop in time.
    let learned = Duration::from_millis(api.limiter.window_ms) * 2;
    // Against whole-second headers the gate may probe a second early, alone,
    // and be refused once: the lower bound that refusal sets stops its
    // probes until a header lowers the upper bound, which is rare.
    let mut probe = whole_seconds(r);
    let mut refused = r.ledger.arrivals.iter().filter(|a| a.status == 429 && a.at >= learned);
    let unexplained = refused.find(|a| !(std::mem::take(&mut probe) && sent_alone(r, a)));
    if let Some(a) = unexplained {
        return vec![v(
            Property::PacingNo429,
            format!(
                "under a pacing gate reading rate-limit headers, {} was refused (429 {}) at {} ms, after the first two windows of {} ms",
                a.client,
                a.code.as_deref().unwrap_or("-"),
                a.at.as_millis(),
                api.limiter.window_ms
            ),
        )];
    }
    Vec::new()
}

/// An efficiency check with a budget, on the runs [`pacing_spends_no_429`]
/// judges: the gate is not too careful either. A fixed window opens at its
/// first request and its headers tell every answer when it ends, so each
/// arrival names its window (`at + reset`). An attempt that joined the
/// gate's queue before a window opened and was admitted only after it
/// ended waited through all of it, which the gate does only when it
/// counts the window spent; it may count attempts of the window before
/// still in flight at the reset against it, so a window is judged wasted
/// only when under half its limit was used: arrived in it, or sent after
/// the window before it ended and never answered (a connection closed
/// under it). From the third window on, as pacing-no-429. And the stretches
/// in which no window was open at all (`idle_stretches`).
pub fn pacing_fills_windows(r: &Report) -> Vec<FleetViolation> {
    let api = &r.scenario_config.api;
    if !pacing_clean(r) {
        return Vec::new();
    }
    let window = api.limiter.window_ms;
    // Window end -> (limit, arrivals), from what the server advertised.
    let mut windows: BTreeMap<u64, (u32, u32)> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        if let Some(adv) = &a.advertised {
            let end = (a.at + adv.reset).as_millis() as u64;
            let w = windows.entry(end).or_insert((adv.limit, 0));
            w.1 += 1;
        }
    }
    let waits = gate_waits(r);
    // When the attempts that got no answer were sent: the gate counted them,
    // and one may have been meant for a window it never reached (a closed
    // connection), so each counts as used in the window after the last
    // one that ended before it was sent.
    let lost: Vec<u64> =
        r.records.iter().flat_map(attempt_spans).filter(|&(_, _, answered)| !answered).map(|(sent, ..)| sent).collect();
    let mut previous_end = 0;
    for (&end, &(limit, arrived)) in &windows {
        let start = end.saturating_sub(window);
        let unanswered = lost.iter().filter(|&&at| at >= previous_end && at < end).count() as u32;
        previous_end = end;
        if start < 2 * window || (arrived + unanswered) * 2 >= limit {
            continue;
        }
        // Joined before the window opened (join times are within 1 ms), admitted after it ended.
        if let Some((joined, admitted, job)) = waits.iter().find(|w| w.0 + 1 < start && w.1 >= end) {
            return vec![v(
                Property::PacingFillsWindows,
                format!(
                    "job {job} waited at the pacing gate from {joined} ms to {admitted} ms, through the whole window of {start} to {end} ms, in which {arrived} of its {limit} requests arrived and {unanswered} sent for it got no answer"
                ),
            )];
        }
    }
    idle_stretches(r, &windows, &waits)
}

/// The stretches after a window ended in which no window was open, as
/// [`pacing_fills_windows`] judges them: an empty window is under half
/// used too. A fixed window opens only at its next request, so after `end`
/// the server takes requests at once; the gate may be late to see it (a
/// bound rounded up to whole seconds, or learned within one: 1 s, a quarter
/// of a second and two round trips; a refusal's `Retry-After` holds it
/// longer, pacing-hold). A job that waited at the gate, admitted or not in
/// the end (a gate that held it until it gave up), through a whole
/// window's length after that, with no request arriving, was held for
/// nothing. From the first window's end: the first answers told the gate
/// when it ends.
fn idle_stretches(r: &Report, windows: &BTreeMap<u64, (u32, u32)>, waits: &[(u64, u64, u32)]) -> Vec<FleetViolation> {
    let window = r.scenario_config.api.limiter.window_ms;
    let trip = round_trip_ms(r);
    let mut arrivals: Vec<u64> = r.ledger.arrivals.iter().map(|a| a.at.as_millis() as u64).collect();
    arrivals.sort_unstable();
    let stays: Vec<(u64, u64, u32)> = waits.iter().copied().chain(gave_up_at_gate(r)).collect();
    for &end in windows.keys() {
        let held = r.ledger.arrivals.iter().filter_map(|a| {
            let answered = a.answered_at?.as_millis() as u64;
            let wait = a.retry_after?.as_millis() as u64;
            (answered <= end).then_some(answered + wait)
        });
        let from = held.fold(end, u64::max) + 1_000 + 250 + 2 * trip;
        let to = from + window;
        let next = arrivals.iter().find(|&&at| at > end);
        if next.is_some_and(|&at| at <= to) {
            continue;
        }
        if let Some((joined, left, job)) = stays.iter().find(|w| w.0 < from && w.1 >= to) {
            let next = next.map_or("none came".to_owned(), |at| format!("the next came at {at} ms"));
            return vec![v(
                Property::PacingFillsWindows,
                format!(
                    "job {job} waited at the pacing gate from {joined} ms to {left} ms, while no request arrived at the API after its window ended at {end} ms ({next}): held through a whole window of {from} to {to} ms with no window open"
                ),
            )];
        }
    }
    Vec::new()
}

/// The checks' allowance for one round trip, in milliseconds: the greatest
/// latency and a tick each way, and a tick more.
fn round_trip_ms(r: &Report) -> u64 {
    let net = &r.scenario_config.net;
    ((net.max_latency + net.tick) * 2 + net.tick).as_millis() as u64
}

/// Jobs that gave up while queued at the gate, never admitted:
/// `(ready, gave up, job)`, ready when their last wait ended (or they
/// started). A job whose last attempt was still out is not at the gate.
fn gave_up_at_gate(r: &Report) -> impl Iterator<Item = (u64, u64, u32)> + '_ {
    r.records.iter().filter_map(|j| {
        let (last, before) = j.trace.events.split_last()?;
        if !matches!(last.kind, EventKind::GaveUp { .. }) {
            return None;
        }
        let ready = match before.last().map(|e| (e.at_ms, &e.kind)) {
            None => j.started_ms,
            Some((at, EventKind::Wait { ms, .. })) => at + ms,
            Some((at, EventKind::Answer { .. } | EventKind::NoAnswer { .. })) => at,
            Some(_) => return None,
        };
        (last.at_ms > ready).then_some((ready, last.at_ms, j.job))
    })
}

/// An efficiency check with a budget, on the runs [`pacing_spends_no_429`]
/// judges whose server tells its reset as a Unix time in whole seconds
/// against a whole-second `Date`: a bound up to 2 s late. The gate learns
/// the window from what happens instead (`src/gate/pacing.rs`, "Whole-second
/// servers"): each slot frees at its answer plus the period's upper bound,
/// which its probe a second earlier narrows once it gets through. So the
/// attempts waiting at the gate when a window ends (each arrival names its
/// window's end, `at + reset`, in the server's exact time), as many as the
/// fresh window has room for, go out soon after it: within a quarter of a
/// second and two round trips (honest runs: at most 163 ms for the first
/// and 256 ms for the last of the room, over the 832 windows this judges in
/// seeds 1..=20000), or a second more once a probe was refused (the gate then waits out a bound less than a second
/// late). The whole room, not only its first: a probe that gets through on
/// time must free the window for the rest. From the fourth window on: the
/// first answers teach the bound, the next window probes it. A gate that
/// trusted the rounded bound is late by its rounding, up to 2 s.
pub fn pacing_learns_whole_seconds(r: &Report) -> Vec<FleetViolation> {
    let api = &r.scenario_config.api;
    if !pacing_clean(r) || !whole_seconds(r) {
        return Vec::new();
    }
    let window = api.limiter.window_ms;
    let trip = round_trip_ms(r);
    let refused = r.ledger.arrivals.iter().find(|a| a.status == 429 && a.at.as_millis() as u64 >= 2 * window);
    let refused = refused.map_or(u64::MAX, |a| a.at.as_millis() as u64);
    let ends: BTreeSet<u64> = r
        .ledger
        .arrivals
        .iter()
        .filter_map(|a| a.advertised.as_ref().map(|adv| (a.at + adv.reset).as_millis() as u64))
        .collect();
    let headroom = match &r.scenario_config.fleet.gate {
        GateConfig::Pacing(p) => p.headroom,
        _ => 0,
    };
    let room = api.limiter.writes.saturating_sub(headroom).max(1) as usize;
    let waits = gate_waits(r);
    for &end in ends.iter().filter(|&&end| end >= 4 * window) {
        // Joined before the window ended (join times are within 1 ms), admitted after it.
        let mut waiting: Vec<_> = waits.iter().filter(|w| w.0 + 1 < end && w.1 > end).collect();
        waiting.sort_by_key(|w| w.1);
        let slack = 250 + 2 * trip + if refused < end { 1_000 } else { 0 };
        // The fresh window has room for `room` of them: the last of those is due too.
        let due = room.min(waiting.len()).checked_sub(1).and_then(|i| waiting.get(i));
        if let Some(&&(joined, admitted, job)) = due.filter(|w| w.1 > end + slack) {
            return vec![v(
                Property::PacingLearnsWholeSeconds,
                format!(
                    "job {job} waited at the pacing gate from {joined} ms to {admitted} ms, {} ms past the window that ended at {end} ms (allowed: {slack} ms; the window had room for {room}, and it was one of the first {room} waiting), under whole-second reset headers",
                    admitted - end
                ),
            )];
        }
    }
    Vec::new()
}

/// The server tells its reset as a Unix time in whole seconds.
fn whole_seconds(r: &Report) -> bool {
    r.scenario_config.api.rate_limit_reset == crate::sim::world::api::ResetForm::UnixSeconds
}

/// The attempt that made arrival `a` was the only one of the fleet out,
/// from its send to its answer (a pacing gate's probe; whole milliseconds,
/// so an attempt that ends or starts in the same millisecond is not
/// counted).
fn sent_alone(r: &Report, a: &Arrival) -> bool {
    let at = a.at.as_millis() as u64;
    let Some(own) = r.records.iter().find(|j| j.trace.label == a.client) else { return false };
    let mine = attempt_spans(own).into_iter().rev().find(|&(sent, ended, _)| sent <= at && at <= ended);
    let Some((sent, ended, _)) = mine else { return false };
    let mut others = r.records.iter().filter(|j| j.trace.label != a.client).flat_map(attempt_spans);
    others.all(|(s, e, _)| e <= sent || s >= ended)
}

/// Each attempt of a job that ended, from its trace: `(sent, ended, answered)`
/// in milliseconds, in the order they ended.
fn attempt_spans(j: &JobRecord) -> Vec<(u64, u64, bool)> {
    let sent = |n: u32| {
        j.trace.events.iter().find_map(|e| match e.kind {
            EventKind::Attempt { n: m, .. } if m == n => Some(e.at_ms),
            _ => None,
        })
    };
    let ends = j.trace.events.iter().filter_map(|e| match e.kind {
        EventKind::Answer { n, .. } => Some((sent(n)?, e.at_ms, true)),
        EventKind::NoAnswer { n, .. } => Some((sent(n)?, e.at_ms, false)),
        _ => None,
    });
    ends.collect()
}

/// The runs the pacing gate's efficiency checks judge: a shared pacing gate
/// reading the rate-limit headers of a fixed window it alone uses, with
/// nothing else refusing or repeating a request (see [`pacing_spends_no_429`]).
fn pacing_clean(r: &Report) -> bool {
    let s = &r.scenario_config;
    let api = &s.api;
    // Retrysim's own client (a traced run) sends every attempt through the
    // gate its host offers; a client of your own may not take it, and
    // promises nothing about it.
    r.traced
        && matches!(s.fleet.gate, GateConfig::Pacing(_))
        && api.rate_limit_headers
        && api.limiter.kind == crate::sim::world::api::LimiterKind::FixedWindow
        && s.fleet.hosts == Hosts::Shared
        && s.fleet.coordinator.is_none()
        && s.fleet.deferral.is_none()
        && !s.fleet.anonymous
        && s.fleet.mix.safe == 0
        && api.concurrency.is_none()
        && api.anonymous_cap.is_none()
        && api.script.is_empty()
        && reset_readable(api)
        && api.processing_ms == 0
        && api.accounts.iter().all(|a| a.credits.is_none() && a.monthly_quota.is_none())
        && s.faults.lost_answers_per_mille == 0
        && s.faults.schedule.is_empty()
}

/// The gate can read when the window resets, against no clock of its own:
/// seconds left from an unskewed server, or a Unix time against the answer's
/// `Date` (whole seconds, which the gate learns around: `src/gate/pacing.rs`,
/// "Whole-second servers"), whatever the server's clock says.
fn reset_readable(api: &crate::sim::world::api::ApiConfig) -> bool {
    use crate::sim::world::api::ResetForm;
    match api.rate_limit_reset {
        ResetForm::SecondsLeft => api.clock_skew_ms == 0,
        ResetForm::UnixSeconds => api.send_date,
    }
}

/// An efficiency check with a budget: an AIMD gate lowers its limit on a
/// 429 that came after the last cut's guard ran out.
///
/// The gate cuts once per window: after a cut it ignores as many answers as
/// were in flight then (its guard, at most the limit before the cut, so at
/// most the largest limit it ever had, `bound`). So a rate-limit 429 (by
/// the server's status and code, not the client's class) that the client
/// received after more than `bound` answers since the last cut must come with
/// a cut in the same millisecond, unless the limit cannot fall: it is at
/// `min_limit`, or too small for one cut to change its whole number. A gate
/// that does not back off stays safe (it only wastes the API's capacity), so
/// no safety check sees it.
///
/// Applies to a gate fed only by retrysim's traced clients, in the same
/// process: the shared fleet gate, or on per-worker hosts each worker's own
/// gate (judged by its own worker's answers); and to the limiter service's
/// gate, judged by what its workers told it (each `DONE` line as it arrived:
/// a 429 is a throttle where the worker's class says `throttled`, or
/// `unclear` with status 429, as the gate's own reading does; a slot freed
/// without one tells nothing). A deferral's background workers run without
/// the gate.
pub fn aimd_backs_off(r: &Report) -> Vec<FleetViolation> {
    let s = &r.scenario_config;
    let GateConfig::Aimd(c) = s.fleet.gate else { return Vec::new() };
    if s.fleet.coordinator.is_some() {
        let answers = r
            .fleet_facts
            .service_told
            .iter()
            .map(|t| (t.at.as_millis() as u64, t.done.as_deref().is_some_and(throttle_told)));
        let found = aimd_backs_off_one(
            c,
            "the limiter service's gate",
            "was reported to the service",
            &r.fleet_facts.gate,
            answers.collect(),
        );
        return found.into_iter().collect();
    }
    if !r.traced {
        return Vec::new();
    }
    let per_worker = s.fleet.hosts == Hosts::PerWorker;
    let gates: Vec<(String, &[GateFact], Option<u32>)> = if per_worker {
        r.fleet_facts.local.iter().map(|(&w, log)| (format!("w{w}'s gate"), log.as_slice(), Some(w))).collect()
    } else {
        vec![("the gate".to_owned(), r.fleet_facts.gate.as_slice(), None)]
    };
    for (whose, facts, worker) in gates {
        let records = r.records.iter().filter(|j| worker.is_none_or(|w| j.worker == w));
        if let Some(found) = aimd_backs_off_one(c, &whose, "reached the client", facts, answers_told(records)) {
            return vec![found];
        }
    }
    Vec::new()
}

/// Whether a worker's `DONE <status> <class>` line tells the service's
/// gate of a throttle.
fn throttle_told(line: &str) -> bool {
    let (status, class) = told(line);
    class == Some("throttled") || (class == Some("unclear") && status == Some("429"))
}

/// The status and class words of a worker's `DONE <status> <class>` line.
fn told(line: &str) -> (Option<&str>, Option<&str>) {
    let mut words = line.split_ascii_whitespace().skip(1);
    (words.next(), words.next())
}

/// Every answer a gate was told of by retrysim's traced clients (one per
/// attempt), `(ms, a rate-limit 429)`: by the server's status and code, not
/// the client's class.
fn answers_told<'a>(records: impl Iterator<Item = &'a JobRecord>) -> Vec<(u64, bool)> {
    let mut answers = Vec::new();
    for j in records {
        for e in &j.trace.events {
            match &e.kind {
                EventKind::Answer { status, code, .. } => {
                    let throttle =
                        *status == 429 && !crate::sim::checks::invariants::terminal(*status, code.as_deref());
                    answers.push((e.at_ms, throttle));
                }
                EventKind::NoAnswer { .. } => answers.push((e.at_ms, false)),
                _ => {}
            }
        }
    }
    answers
}

/// [`aimd_backs_off`] for one gate (`whose`, its `facts`) and the answers
/// it was told of, `(ms, a throttle)`, each of which `came` its way.
fn aimd_backs_off_one(
    c: crate::gate::aimd::AimdConfig,
    whose: &str,
    came: &str,
    facts: &[GateFact],
    mut answers: Vec<(u64, bool)>,
) -> Option<FleetViolation> {
    let cuts: Vec<u64> = facts
        .iter()
        .filter(|f| matches!(f.event, GateEvent::Changed { throttled: true, .. }))
        .map(|f| f.at.as_millis() as u64)
        .collect();
    let steps = limit_steps(c.initial_limit, facts);
    let bound = steps.iter().map(|s| s.1).max().unwrap_or(c.initial_limit) as usize;
    answers.sort();
    let beta = c.backoff_per_mille as u64;
    for &(t, throttle) in &answers {
        if !throttle {
            continue;
        }
        let last_cut = cuts.iter().copied().filter(|&c| c <= t).max();
        if last_cut == Some(t) {
            continue;
        }
        let since = answers.iter().filter(|&&(a, _)| last_cut.is_none_or(|c| a > c) && a < t).count();
        // Before the first cut the guard is empty.
        let bound = if last_cut.is_some() { bound } else { 0 };
        let limit =
            steps.iter().take_while(|(at, _)| at.as_millis() as u64 <= t).last().map_or(c.initial_limit, |s| s.1)
                as u64;
        let can_fall = limit > c.min_limit as u64 && limit * (1000 - beta.min(1000)) >= beta;
        if since >= bound && can_fall {
            return Some(v(
                Property::AimdBacksOff,
                format!(
                    "a 429 {came} at {t} ms, {since} answers after {whose}'s last cut ({}), with the limit at {limit}, and the gate did not lower it",
                    last_cut.map_or("none".to_owned(), |c| format!("at {c} ms"))
                ),
            ));
        }
    }
    None
}

/// An efficiency check: the limiter service's AIMD gate raises its limit
/// when its workers report successes on a window at least half used. A
/// gate that never grows stays safe (it only leaves the API's capacity
/// unused), so no safety check sees it.
///
/// The gate grows by `increase × 1000 / limit_milli` thousandths of a slot
/// per success told while at least half its window was in flight (the
/// module doc of `gate::aimd`). With the limit at `L`, so its window under
/// `L + 1` slots, each such success adds at least `increase × 1000 / (L + 1)`
/// thousandths, and `n` of them without a change of the limit must lift it
/// to `L + 1` (unless it is at `max_limit`); a success told in the instant
/// the limit changed may be what changed it, and is not counted. Read from
/// the service's record: a success is a `DONE` line whose class is
/// `success`; the in-flight count before it is at least the slots admitted
/// at an earlier instant less the slots freed before it (every freed slot
/// is a [`Told`]). A reported throttle may be a cut the limit's whole
/// number hides, so the count starts again after one. From the fleet gate's
/// own facts it also bounds each growth (`aimd_grows_by_steps`).
///
/// [`Told`]: crate::sim::world::limiter_service::Told
pub fn aimd_grows(r: &Report) -> Vec<FleetViolation> {
    let s = &r.scenario_config;
    let GateConfig::Aimd(c) = s.fleet.gate else { return Vec::new() };
    if let Some(found) = aimd_grows_by_steps(c, &r.fleet_facts.gate) {
        return vec![found];
    }
    if s.fleet.coordinator.is_none() || c.increase == 0 {
        return Vec::new();
    }
    let facts = &r.fleet_facts.gate;
    let steps = limit_steps(c.initial_limit, facts);
    let admitted: Vec<Duration> =
        facts.iter().filter(|f| matches!(f.event, GateEvent::Admitted { .. })).map(|f| f.at).collect();
    let (mut limit, mut since, mut successes) = (c.initial_limit, Duration::ZERO, 0u64);
    for (freed, t) in r.fleet_facts.service_told.iter().enumerate() {
        // The limit after every change at or before this instant.
        let last = steps.iter().take_while(|(at, _)| *at <= t.at).last();
        let now = last.map_or(c.initial_limit, |s| s.1);
        if now != limit {
            (limit, since, successes) = (now, t.at, 0);
        }
        // Told in the instant the limit changed, it may be what changed it.
        if last.is_some_and(|s| s.0 == t.at) {
            continue;
        }
        let line = t.done.as_deref().unwrap_or("");
        if throttle_told(line) {
            (since, successes) = (t.at, 0);
            continue;
        }
        if told(line).1 != Some("success") || limit >= c.max_limit {
            continue;
        }
        let in_flight = (admitted.partition_point(|&a| a < t.at) as u64).saturating_sub(freed as u64);
        if in_flight * 2 < limit as u64 + 1 {
            continue;
        }
        successes += 1;
        let step = (c.increase as u64 * 1000 / (limit as u64 + 1)).max(1);
        let needed = 1000u64.div_ceil(step);
        if successes >= needed {
            return vec![v(
                Property::AimdGrows,
                format!(
                    "{successes} successes were reported to the limiter service's gate from {} ms to {} ms, each with at least {} of its {limit} slots in flight, and it never raised its limit from {limit} (at most {needed} lift it to {})",
                    since.as_millis(),
                    t.at.as_millis(),
                    (limit as u64 + 1).div_ceil(2),
                    limit + 1
                ),
            )];
        }
    }
    Vec::new()
}

/// From every AIMD gate's own facts (the fleet's, the limiter service's,
/// each host's own or fallback gate), its pacing:
/// - admissions are spaced at least `1 / rate` apart, the rate the earlier
///   was admitted under (the gate's next free instant only moves later);
/// - each admission states the rate the gate's start or its last change
///   left (the facts tell every change);
/// - pacing is on only when the config paces (`rate` not `off`), then from
///   the start when `initial_rate_milli > 0`, and a throttle switches it on;
/// - every changed rate is the one the module doc of `gate::aimd` gives,
///   from the send rate measured as botocore's `RateClocker` does (2 s
///   buckets of admissions, smoothed with weight 0.8), re-measured here
///   from the admissions: a throttle leaves `β ×` the lower of the rate
///   and the measured one (or `β ×` the measured one, at least the floor,
///   when pacing was off), an `aimd` success adds `rate_increase / rate`
///   up to twice the measured rate, and a `cubic` success sets botocore's
///   curve since the last cut (`CubicCurve`: every cut the gate's
///   `Answered` facts show, the ones that changed nothing too, or a pace
///   set from the start) under that cap, each kept in
///   `[min_rate_milli, max_rate_milli]`.
///
/// A gate that paced too fast would flood the API it was told to slow
/// down for; one that never switched pacing on, cut by less than β or
/// never grew back would keep drawing throttles, or leave the API idle.
pub fn aimd_paces(r: &Report) -> Vec<FleetViolation> {
    aimd_gates(r).filter_map(|(_, c, whose, facts)| aimd_paces_one(c, &whose, facts)).collect()
}

/// Every AIMD gate's config, whose it is and its facts: the fleet gate's
/// with the fleet's config, a worker host's with the limiter service's
/// fallback config or else the fleet's.
fn aimd_gates(
    r: &Report,
) -> impl Iterator<Item = (Option<u32>, crate::gate::aimd::AimdConfig, String, &[GateFact])> + '_ {
    let s = &r.scenario_config;
    let own = match s.fleet.gate {
        GateConfig::Aimd(c) => Some(c),
        _ => None,
    };
    let local = s.fleet.coordinator.map(|k| k.fallback).or(own);
    gate_logs(r).filter_map(move |(worker, whose, facts)| {
        let config = if worker.is_some() { local } else { own };
        config.map(|c| (worker, c, whose, facts))
    })
}

/// From every AIMD gate's own facts (the fleet's, the limiter service's,
/// each host's own, a worker's fallback): it counts its attempts out, cuts
/// once per window of attempts, and by `β` (`sim::checks::aimd`).
pub fn aimd_cuts(r: &Report) -> Vec<FleetViolation> {
    aimd_gates(r)
        .filter_map(|(_, c, whose, facts)| aimd_cuts_one(&c, &whose, facts))
        .map(|m| v(Property::AimdCuts, m))
        .collect()
}

/// From an AIMD gate's own facts (the fleet's, the limiter service's, each
/// host's own): its first ticket goes out the instant it queues, and so
/// does the head of its queue whenever the window has room and no pace is
/// set, or once a pace allows it (`head_held`). Nothing is in flight at first and no pace
/// is due (a pace from the start allows the first admission at once), and
/// a gate admits in the same step a ticket joins or a slot frees, so one
/// that holds a ticket then has stalled: its jobs wait out their deadlines
/// while the API idles, which no other check sees (each gives up as its
/// deadline would pass). A worker's fallback gate, which the limiter
/// client holds for its stagger before first use, is judged by the second
/// rule alone (the fallback paces, so only once it no longer does).
pub fn gate_admits(r: &Report) -> Vec<FleetViolation> {
    let coordinated = r.scenario_config.fleet.coordinator.is_some();
    // A paced waiter sleeps on the gate's clock, which wakes it on a whole
    // millisecond in the tick after its time.
    let late = r.scenario_config.net.tick + Duration::from_millis(1);
    let mut out = Vec::new();
    for (worker, c, whose, facts) in aimd_gates(r) {
        let fallback = coordinated && worker.is_some();
        let first = if fallback { None } else { first_ticket_held(facts) };
        if let Some(held) = first {
            out.push(v(Property::GateAdmits, format!("{whose} held its first ticket {held}")));
        } else if let Some(held) = head_held(&c, facts, (!fallback).then_some(late)) {
            out.push(v(Property::GateAdmits, format!("{whose}: {held}")));
        }
    }
    out
}

/// [`gate_admits`] for one gate's facts: what held its first ticket.
fn first_ticket_held(facts: &[GateFact]) -> Option<String> {
    let (queued, ticket) = facts.iter().find_map(|f| match f.event {
        GateEvent::Queued { ticket, .. } => Some((f.at, ticket)),
        _ => None,
    })?;
    let admitted = admitted(facts).find(|a| a.1 == ticket).map(|a| a.0);
    (admitted != Some(queued)).then(|| {
        format!(
            "{ticket}, queued at {} ms with nothing in flight: {}",
            queued.as_millis(),
            admitted.map_or("never admitted".to_owned(), |a| format!("admitted at {} ms", a.as_millis()))
        )
    })
}

/// The send rate in milli-requests per second, measured from admissions as
/// botocore's `RateClocker` measures it: counted in 2 s buckets, and at the
/// first admission of a later bucket the count over the buckets since is
/// smoothed in with weight 0.8.
#[derive(Debug, Default)]
struct SendRate {
    bucket_ms: u64,
    count: u64,
    milli: u64,
}

impl SendRate {
    fn admitted(&mut self, at: Duration) {
        let bucket = at.as_millis() as u64 / 2_000 * 2_000;
        self.count += 1;
        if bucket > self.bucket_ms {
            let current = self.count * 1_000_000 / (bucket - self.bucket_ms);
            self.milli = (current * 800 + self.milli * 200) / 1000;
            (self.bucket_ms, self.count) = (bucket, 0);
        }
    }
}

/// [`aimd_paces`] for one gate, the first broken rule.
fn aimd_paces_one(c: crate::gate::aimd::AimdConfig, whose: &str, facts: &[GateFact]) -> Option<FleetViolation> {
    use crate::gate::aimd::RateControl;
    let paces = c.rate != RateControl::Off;
    let mut rate = (paces && c.initial_rate_milli > 0).then_some(c.initial_rate_milli as u64);
    let cubic = c.rate == RateControl::Cubic;
    let mut curve = rate.filter(|_| cubic).map(CubicCurve::from_start);
    let mut guard = CutGuard::default();
    let mut sent = SendRate::default();
    let mut last: Option<(Duration, u64)> = None;
    let broke =
        |at: Duration, what: String| Some(v(Property::AimdPace, format!("{whose} at {} ms: {what}", at.as_millis())));
    for f in facts {
        match f.event {
            GateEvent::Admitted { ticket, rate_milli, .. } => {
                if rate_milli != rate {
                    return broke(
                        f.at,
                        format!(
                            "ticket {ticket} was admitted under a rate of {rate_milli:?} where the gate's start or its last change left {rate:?}"
                        ),
                    );
                }
                if let Some((then, r)) = last {
                    let interval = pace_interval(r);
                    if f.at < then + interval {
                        return broke(
                            f.at,
                            format!(
                                "ticket {ticket} was admitted {} µs after the admission before it, under a rate of {r} milli-requests per second (at least {} µs apart)",
                                (f.at - then).as_micros(),
                                interval.as_micros()
                            ),
                        );
                    }
                }
                last = rate_milli.map(|r| (f.at, r));
                sent.admitted(f.at);
            }
            // Every cut moves a cubic curve, the ones that changed nothing
            // the facts show too.
            GateEvent::Answered { in_flight, signal } => {
                let cut = guard.answered(signal, in_flight);
                if cut && cubic {
                    let base = throttle_base(rate, sent.milli, c.min_rate_milli as u64);
                    curve = Some(CubicCurve::after_throttle(base, c.backoff_per_mille, f.at));
                }
            }
            GateEvent::Changed { rate_milli, throttled, .. } => {
                let was = rate;
                rate = rate_milli;
                let Some(now) = rate_milli else {
                    if was.is_some() || (throttled && paces) {
                        return broke(
                            f.at,
                            format!("pacing was off after a change (throttled: {throttled}), from {was:?}"),
                        );
                    }
                    continue;
                };
                if !paces {
                    return broke(f.at, format!("pacing was on ({now}) though the config's rate is off"));
                }
                let change = RateChange { was, now, throttled, measured: sent.milli, at: f.at };
                if let Some(what) = change.broken(&c, curve) {
                    return broke(f.at, what);
                }
            }
            _ => {}
        }
    }
    None
}

/// The other half of [`aimd_grows`], from the gate's own facts alone (the
/// fleet's gate or the limiter service's): the gate grows only by steps,
/// and only on a window it uses.
/// - One success raises the limit by one slot at most. With the limit at
///   `L`, its window under `L + 1` slots, a success adds at most
///   `increase × 1000 / L` thousandths, so the limit after it is at most
///   `L + 1 + (increase × 1000 / L − 1) / 1000`. A gate that leapt further
///   would flood the API before any answer could tell it otherwise.
/// - A success grows the limit only while at least half the window was in
///   flight (`in flight × 2 ≥ L`). Only admissions raise the in-flight
///   count, so the last `Admitted` fact's count bounds it from above until
///   the next. A gate that grew on an idle window would lift its limit far
///   past what it ever tried, and cut from there when the API pushes back.
fn aimd_grows_by_steps(c: crate::gate::aimd::AimdConfig, facts: &[GateFact]) -> Option<FleetViolation> {
    let (mut limit, mut in_flight_most) = (c.initial_limit.max(1) as u64, 0u64);
    for f in facts {
        match f.event {
            GateEvent::Admitted { limit: now, in_flight, .. } => {
                (limit, in_flight_most) = (now.max(1) as u64, in_flight as u64);
            }
            GateEvent::Changed { limit: now, throttled, .. } => {
                let most = limit + 1 + (c.increase as u64 * 1000 / limit).saturating_sub(1) / 1000;
                let grew = !throttled && now as u64 > limit;
                if grew && now as u64 > most {
                    return Some(v(
                        Property::AimdGrows,
                        format!(
                            "the gate raised its limit from {limit} to {now} on one success at {} ms (at most {most})",
                            f.at.as_millis()
                        ),
                    ));
                }
                if grew && in_flight_most * 2 < limit {
                    return Some(v(
                        Property::AimdGrows,
                        format!(
                            "the gate raised its limit from {limit} to {now} on a success at {} ms with at most {in_flight_most} of its {limit} slots in flight (it grows only while half are)",
                            f.at.as_millis()
                        ),
                    ));
                }
                limit = now.max(1) as u64;
            }
            _ => {}
        }
    }
    None
}

/// The executions that share one budget: the whole fleet on a shared host,
/// each worker on its own host.
fn budget_groups(r: &Report) -> BTreeMap<u32, Vec<&JobRecord>> {
    let mut groups: BTreeMap<u32, Vec<&JobRecord>> = BTreeMap::new();
    for j in &r.records {
        let group = if r.scenario_config.fleet.hosts == Hosts::PerWorker { j.worker } else { 0 };
        groups.entry(group).or_default().push(j);
    }
    groups
}

/// The times (ms) of granted retries (`wait` events) and of deposits (`done` events).
fn grants_and_deposits(jobs: &[&JobRecord]) -> (Vec<u64>, Vec<u64>) {
    let (mut grants, mut deposits) = (Vec::new(), Vec::new());
    for j in jobs {
        for e in &j.trace.events {
            match e.kind {
                EventKind::Wait { .. } => grants.push(e.at_ms),
                EventKind::Done { .. } => deposits.push(e.at_ms),
                _ => {}
            }
        }
    }
    (grants, deposits)
}

/// Retries never exceed the shared budget's allowance (DESIGN invariant 11),
/// using the bounds in `core::budget`'s module doc:
/// - token bucket: `retries × 1000 < max × 1000 / 2 + ratio × successes`;
/// - percent: in every `ttl`-aligned block, `retries × 1000 ≤ reserve +
///   per_mille × (successes in this block and the one before)`.
pub fn budget_allowance(r: &Report) -> Vec<FleetViolation> {
    let Some(budget) = r.scenario_config.fleet.budget else { return Vec::new() };
    let mut out = Vec::new();
    for (group, jobs) in budget_groups(r) {
        let (grants, deposits) = grants_and_deposits(&jobs);
        let whose =
            if r.scenario_config.fleet.hosts == Hosts::PerWorker { format!("w{group}") } else { "the fleet".into() };
        match budget {
            BudgetConfig::TokenBucket { max_tokens, token_ratio_milli } => {
                let allowed = TokenBucketBudget::allowance(max_tokens, token_ratio_milli, deposits.len() as u64);
                if grants.len() as u64 > allowed {
                    out.push(v(
                        Property::BudgetAllowance,
                        format!(
                            "{whose} retried {} times; a token bucket of {max_tokens} refunding {token_ratio_milli}/1000 per success allows {allowed} for {} successes",
                            grants.len(),
                            deposits.len()
                        ),
                    ));
                }
            }
            BudgetConfig::Percent { ttl, min_per_sec, per_mille } => {
                let ttl_ms = (ttl.as_millis() as u64).max(1);
                let reserve = min_per_sec as u64 * ttl_ms / 1000 * 1000;
                let mut g: BTreeMap<u64, u64> = BTreeMap::new();
                let mut d: BTreeMap<u64, u64> = BTreeMap::new();
                for t in grants {
                    *g.entry(t / ttl_ms).or_default() += 1;
                }
                for t in deposits {
                    *d.entry(t / ttl_ms).or_default() += 1;
                }
                for (&block, &n) in &g {
                    let earned = d.get(&block).copied().unwrap_or(0)
                        + block.checked_sub(1).and_then(|b| d.get(&b)).copied().unwrap_or(0);
                    let allowed = (reserve + per_mille as u64 * earned) / 1000;
                    if n > allowed {
                        out.push(v(
                            Property::BudgetAllowance,
                            format!(
                                "{whose} retried {n} times in {}..{} ms; {per_mille}/1000 of {earned} successes plus a reserve of {} allows {allowed}",
                                block * ttl_ms,
                                (block + 1) * ttl_ms,
                                reserve / 1000
                            ),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// A retry budget refuses only when it may be spent (the lower bound that
/// `budget-allowance` lacks: a budget that refuses too early keeps every
/// allowance). Each "budget exhausted" give-up is held against the least
/// the declared budget can hold at that instant, written out from its
/// specification (`core::budget`'s module doc), not by the budget itself.
/// Traces stamp whole milliseconds, so within one millisecond the order
/// least favourable to the budget is taken: every withdrawal stamped at or
/// before the refusal counts as before it, a deposit only if stamped
/// earlier, and deposits before withdrawals of the same millisecond.
/// - token bucket (starts full at `max`, a success refunds `ratio` up to
///   `max`, a withdrawal takes 1 even when refused, refused when at most
///   `max / 2` is left): a walk capped at `max` holds, at the end,
///   `max` plus the smallest sum of the changes over any last stretch of
///   it; refusing is wrong while one withdrawal more leaves above `max / 2`;
/// - percent (a reserve of `min_per_sec × ttl` retries; a granted retry
///   costs 1, a deposit adds `per_mille / 1000`, each forgotten once its
///   tenth of `ttl` leaves the window; a refusal costs nothing): at least
///   the reserve, less every retry granted in the last `ttl` (and a
///   millisecond), plus the deposits of the last nine tenths of it, is
///   left; refusing is wrong while that is 1 or more.
///
/// A finding blames the client, whose budget it is.
pub fn budget_refusal(r: &Report) -> Vec<FleetViolation> {
    let Some(budget) = r.scenario_config.fleet.budget else { return Vec::new() };
    let mut out = Vec::new();
    for jobs in budget_groups(r).values() {
        let b = BudgetEvents::of(jobs);
        for (i, &(at, job)) in b.refused.iter().enumerate() {
            let wrong = match budget {
                BudgetConfig::TokenBucket { max_tokens, token_ratio_milli } => {
                    b.bucket_too_early(i, at, u64::from(max_tokens) * 1000, i64::from(token_ratio_milli))
                }
                BudgetConfig::Percent { ttl, min_per_sec, per_mille } => {
                    b.percent_too_early(at, ttl.as_millis() as u64, u64::from(min_per_sec), u64::from(per_mille))
                }
            };
            if let Some(why) = wrong {
                out.push(v(
                    Property::BudgetRefusal,
                    format!("blames the client: job {job} gave up for an exhausted retry budget at {at} ms, but {why}"),
                ));
            }
        }
    }
    out
}

/// The times (ms) a budget shared by a group of runs was used.
struct BudgetEvents {
    granted: Vec<u64>,
    deposits: Vec<u64>,
    /// Each refusal's time and job.
    refused: Vec<(u64, u32)>,
}

impl BudgetEvents {
    fn of(jobs: &[&JobRecord]) -> Self {
        let mut b = BudgetEvents { granted: Vec::new(), deposits: Vec::new(), refused: Vec::new() };
        for j in jobs {
            for e in &j.trace.events {
                match &e.kind {
                    EventKind::Wait { .. } => b.granted.push(e.at_ms),
                    EventKind::Done { .. } => b.deposits.push(e.at_ms),
                    EventKind::GaveUp { reason: GiveUpReason::BudgetExhausted, .. } => b.refused.push((e.at_ms, j.job)),
                    _ => {}
                }
            }
        }
        b
    }

    /// Whether refusal `i`, at `at`, came while a bucket of `max` (thousandths)
    /// refunding `ratio` must have held more than it lets go.
    fn bucket_too_early(&self, i: usize, at: u64, max: u64, ratio: i64) -> Option<String> {
        // (time, 0 for a deposit / 1 for a withdrawal): deposits first.
        let mut steps: Vec<(u64, u8)> = self.deposits.iter().filter(|&&t| t < at).map(|&t| (t, 0)).collect();
        steps.extend(self.granted.iter().filter(|&&t| t <= at).map(|&t| (t, 1)));
        let others = self.refused.iter().enumerate().filter(|&(k, &(t, _))| k != i && t <= at);
        steps.extend(others.map(|(_, &(t, _))| (t, 1)));
        steps.sort_unstable();
        // The smallest sum over a last stretch, by a walk from the end.
        let (mut sum, mut least) = (0i64, 0i64);
        for &(_, kind) in steps.iter().rev() {
            sum += if kind == 0 { ratio } else { -1000 };
            least = least.min(sum);
        }
        let left = max as i64 + least - 1000;
        (left > (max / 2) as i64).then(|| {
            format!(
                "the bucket of {} tokens, after {} withdrawal(s) and {} refund(s) before it, keeps at least {left} thousandths after this one, more than half",
                max / 1000,
                steps.iter().filter(|s| s.1 == 1).count(),
                steps.iter().filter(|s| s.1 == 0).count()
            )
        })
    }

    /// Whether a refusal at `at` came while a percent budget over `ttl_ms`
    /// must have held a whole retry.
    fn percent_too_early(&self, at: u64, ttl_ms: u64, min_per_sec: u64, per_mille: u64) -> Option<String> {
        let reserve = min_per_sec * ttl_ms / 1000;
        let recent = self.granted.iter().filter(|&&t| t + ttl_ms + 1 >= at && t <= at).count() as u64;
        let kept_from = (at + 1).saturating_sub(ttl_ms * 9 / 10);
        let earned = self.deposits.iter().filter(|&&t| t >= kept_from && t < at).count() as u64;
        let left = (reserve * 1000 + per_mille * earned).saturating_sub(recent * 1000);
        (left >= 1000).then(|| {
            format!(
                "{recent} retries were granted in the {ttl_ms} ms before it and {earned} successes since {kept_from} ms each earned {per_mille} thousandths, over a reserve of {reserve}: at least {left} thousandths are left"
            )
        })
    }
}

/// Every gate's facts with whose they are: the fleet gate's (the shared
/// one, or the limiter service's), then each worker host's own gate's
/// (`Some(worker)`: its local gate, or its fallback).
fn gate_logs(r: &Report) -> impl Iterator<Item = (Option<u32>, String, &[GateFact])> + '_ {
    let facts = &r.fleet_facts;
    std::iter::once((None, "the fleet gate".to_owned(), facts.gate.as_slice()))
        .chain(facts.local.iter().map(|(&w, log)| (Some(w), format!("w{w}'s gate"), log.as_slice())))
}

fn admitted(facts: &[GateFact]) -> impl Iterator<Item = (Duration, u64, u32, u32, Option<u64>)> + '_ {
    facts.iter().filter_map(|f| match f.event {
        GateEvent::Admitted { ticket, in_flight, limit, rate_milli } => {
            Some((f.at, ticket, in_flight, limit, rate_milli))
        }
        _ => None,
    })
}

/// From the gates' own facts: every admission leaves in ticket (FIFO) order,
/// and never above the window it was admitted under.
pub fn gate_window(r: &Report) -> Vec<FleetViolation> {
    let mut out = Vec::new();
    for (_, whose, log) in gate_logs(r) {
        let mut last_ticket = None;
        for (at, ticket, in_flight, limit, _) in admitted(log) {
            if in_flight > limit {
                out.push(v(
                    Property::GateWindow,
                    format!(
                        "{whose} admitted ticket {ticket} at {} ms with {in_flight} in flight over a limit of {limit}",
                        at.as_millis()
                    ),
                ));
            }
            if last_ticket.is_some_and(|t| ticket <= t) {
                out.push(v(
                    Property::GateFifo,
                    format!("{whose} admitted ticket {ticket} after ticket {}", last_ticket.unwrap_or(0)),
                ));
            }
            last_ticket = Some(ticket);
        }
    }
    out
}

/// From the traces, for the shared fleet gate (the pacing gate keeps no
/// facts of its own): attempts leave its queue in the order they joined it.
/// An attempt that waited records when it was admitted and how long it
/// waited (`Admitted`, whole milliseconds each), so when it joined is known
/// within a millisecond; of two that waited, the one that joined more than
/// a millisecond earlier is admitted no later. A gate that let a later
/// attempt pass one at the head would starve the head past its deadline.
/// Only where one gate serves every job: a shared host and no limiter
/// service (a deferral's background workers run without a gate, so their
/// runs record no `Admitted`).
pub fn gate_order(r: &Report) -> Vec<FleetViolation> {
    let s = &r.scenario_config;
    let one_gate =
        !matches!(s.fleet.gate, GateConfig::None) && s.fleet.hosts == Hosts::Shared && s.fleet.coordinator.is_none();
    if !r.traced || !one_gate {
        return Vec::new();
    }
    let mut waits = gate_waits(r);
    waits.sort_unstable();
    // The latest admission of those that joined more than 1 ms before.
    let (mut latest, mut before) = (None::<(u64, u64, u32)>, 0);
    for &(joined, admitted, job) in &waits {
        while waits[before].0 + 1 < joined {
            if latest.is_none_or(|l| waits[before].1 > l.1) {
                latest = Some(waits[before]);
            }
            before += 1;
        }
        if let Some((first_joined, first_admitted, first)) = latest.filter(|l| l.1 > admitted) {
            return vec![v(
                Property::GateFifo,
                format!(
                    "job {job} joined the fleet gate's queue at {joined} ms and was admitted at {admitted} ms, before job {first}, which joined at {first_joined} ms and was admitted at {first_admitted} ms"
                ),
            )];
        }
    }
    Vec::new()
}

/// From the traces, for a pacing gate: a refusal holds every job behind
/// the gate for its `Retry-After`. A 429 or 503 (not terminal) whose advice
/// is the header's seconds, or a date against the answer's own `Date`, is
/// told to the gate in the millisecond its answer is traced; no attempt
/// through that gate may go out after that millisecond and before the hold
/// (the advice, cut to `max_hold`) ends. A gate that lets the fleet go
/// stays safe per job (each job waits its own advice) but spends the
/// fleet's other requests on refusals.
///
/// Judged only where every refusal is certain to be read: no rate-limit
/// headers (their reset would start a new window, after which the answers
/// to attempts sent before it are not read), and only for refusals answered
/// before the earliest reset the holds so far set (the window resets at
/// the first hold's end). A gate is the shared one (the front end's workers; a deferral's
/// background workers run without a gate) or, on per-worker hosts, each
/// worker's own; not the limiter service's.
pub fn pacing_holds(r: &Report) -> Vec<FleetViolation> {
    let s = &r.scenario_config;
    let GateConfig::Pacing(config) = s.fleet.gate else { return Vec::new() };
    if !r.traced || s.fleet.coordinator.is_some() || s.api.rate_limit_headers {
        return Vec::new();
    }
    // Which gate a front-end worker's attempts pass (background ones: none).
    let gate_of = |worker: u32| match s.fleet.hosts {
        _ if worker >= s.fleet.workers => None,
        Hosts::Shared => Some(0),
        Hosts::PerWorker => Some(worker),
    };
    let max_hold = config.max_hold.as_millis() as u64;
    // Per gate: (answered, hold in ms, job) and (sent, job), each in order.
    type Times = (Vec<(u64, u64, u32)>, Vec<(u64, u32)>);
    let mut gates: BTreeMap<u32, Times> = BTreeMap::new();
    for j in &r.records {
        let Some(gate) = gate_of(j.worker) else { continue };
        let (holds, attempts) = gates.entry(gate).or_default();
        for e in &j.trace.events {
            match &e.kind {
                EventKind::Answer { status: 429 | 503, class, advice, .. }
                    if *class != Class::Terminal && gate_reads(advice) =>
                {
                    let wait = advice.wait_ms.map_or(0, |w| u64::try_from(w.0).unwrap_or(u64::MAX));
                    holds.push((e.at_ms, wait.min(max_hold), j.job));
                }
                EventKind::Attempt { .. } => attempts.push((e.at_ms, j.job)),
                _ => {}
            }
        }
    }
    for (holds, attempts) in gates.values_mut() {
        holds.sort_unstable();
        attempts.sort_unstable();
        let mut earliest_reset = u64::MAX;
        for &(answered, hold, job) in holds.iter() {
            // Same millisecond as the reset, or after it: the answer may be stale.
            if answered + 1 >= earliest_reset {
                break;
            }
            let until = answered + hold;
            earliest_reset = earliest_reset.min(until);
            // Strictly after the answer's millisecond, and more than a
            // millisecond before the hold ends (trace times are whole ms).
            let first = attempts.partition_point(|&(at, _)| at <= answered);
            if let Some(&(at, other)) = attempts[first..].first().filter(|&&(at, _)| at + 2 <= until) {
                return vec![v(
                    Property::PacingHold,
                    format!(
                        "job {job}'s refusal at {answered} ms advised {hold} ms, which holds its pacing gate until {until} ms, but job {other} sent an attempt through it at {at} ms"
                    ),
                )];
            }
        }
    }
    Vec::new()
}

/// Whether the pacing gate reads this advice as a hold: the header's
/// seconds, or its date measured against the answer's `Date`.
fn gate_reads(advice: &crate::trace::AdviceView) -> bool {
    use crate::core::retry_after::AdviceSource;
    match advice.source {
        AdviceSource::HeaderSeconds => true,
        AdviceSource::HeaderDate => advice.server_date,
        _ => false,
    }
}

/// Every attempt that waited at a fleet gate, from the traces: `(joined,
/// admitted, job)` in milliseconds (`Admitted`'s time less its wait, so the
/// join is known within a millisecond), in the records' order.
fn gate_waits(r: &Report) -> Vec<(u64, u64, u32)> {
    let waits = r.records.iter().flat_map(|j| {
        j.trace.events.iter().filter_map(move |e| match e.kind {
            EventKind::Admitted { queued_ms } => Some((e.at_ms.saturating_sub(queued_ms), e.at_ms, j.job)),
            _ => None,
        })
    });
    waits.collect()
}

/// The gate's limit over time: `(from, limit)` steps, from its facts.
fn limit_steps(initial: u32, facts: &[GateFact]) -> Vec<(Duration, u32)> {
    let mut steps = vec![(Duration::ZERO, initial)];
    for f in facts {
        let limit = match f.event {
            GateEvent::Admitted { limit, .. } | GateEvent::Changed { limit, .. } => limit,
            _ => continue,
        };
        if steps.last().is_some_and(|&(_, l)| l != limit) {
            steps.push((f.at, limit));
        }
    }
    steps
}

/// The largest limit in force at any time in `[from, to]`.
fn max_limit_between(steps: &[(Duration, u32)], from: Duration, to: Duration) -> u32 {
    let at_from = steps.iter().take_while(|(t, _)| *t <= from).last().map_or(0, |s| s.1);
    steps.iter().filter(|(t, _)| *t > from && *t <= to).map(|s| s.1).fold(at_from, u32::max)
}

/// Requests running at the API at the instant of each arrival (the arrival
/// included). A request counts from its arrival until `ends[i]`.
fn running_at_arrivals(arrivals: &[Arrival], ends: &[Option<Duration>]) -> Vec<(usize, u32)> {
    arrivals
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let running = arrivals
                .iter()
                .enumerate()
                .filter(|(j, b)| *j == i || (b.at <= a.at && ends[*j].is_none_or(|end| end > a.at)))
                .count();
            (i, running as u32)
        })
        .collect()
}

/// From the server's ledger, independent of what the gate says about
/// itself: at every arrival, the requests running at the API are no more
/// than the gate's limit at some moment in the `slack` before (the last of
/// them was admitted then, and the gate counted all of them in flight).
///
/// Applies to a fleet gate (shared, or the limiter service) when every
/// attempt went through it: no fallback routes, and no attempt that timed
/// out on the client while the server still ran it, and no hold or latency
/// spike that delays a request past the slack, and no background run of a
/// deferred job (those bypass the gate). A request counts until its answer
/// left, or until its run ended if that was sooner (a cancelled run gave its
/// slot back; the server may still be working on it). Not to per-worker
/// hosts without the service: each host's gate serves one worker, which
/// runs one job at a time, so by this count its requests are never more
/// than one, and no limit (at least 1) can be exceeded; the fleet as a
/// whole rightly runs more than any one gate's limit.
pub fn api_within_gate_limit(r: &Report) -> Vec<FleetViolation> {
    let s = &r.scenario_config;
    let GateConfig::Aimd(config) = s.fleet.gate else { return Vec::new() };
    if s.fleet.hosts == Hosts::PerWorker && s.fleet.coordinator.is_none() {
        return Vec::new();
    }
    // The limit binds a client that takes the gate: a client of your own
    // that never took the gate its host offers (`Host::gate`) promised
    // nothing about it (one that takes it for some attempts is judged).
    if !r.fleet_facts.gate.iter().any(|f| matches!(f.event, GateEvent::Admitted { .. })) {
        return Vec::new();
    }
    if r.fleet_facts.routes.iter().any(|f| f.route == Route::Fallback) {
        return Vec::new();
    }
    let timed_out =
        r.records.iter().any(|j| j.trace.events.iter().any(|e| matches!(e.kind, EventKind::NoAnswer { .. })));
    if timed_out {
        return Vec::new();
    }
    // A hold or a latency spike delays a request past the slack below: it
    // may arrive after the gate's limit fell (found by the hunt, seed 876).
    let delayed = s.faults.schedule.iter().any(|f| matches!(f.fault, Fault::Hold { .. } | Fault::LatencySpike { .. }));
    if delayed {
        return Vec::new();
    }
    // A deferral's background runs go around the gate (under their front
    // end's label, so the ledger cannot tell them apart).
    if !r.deferred_records.is_empty() {
        return Vec::new();
    }
    // Admission to arrival: at most the grant's trip (coordinated) and the
    // request's trip, each a latency plus up to two ticks of delivery.
    let slack = (s.net.max_latency + s.net.tick * 2) * 2;
    // A request holds its slot at the gate until its answer left the API or
    // the run that sent it ended, whichever came first: a run ends only once
    // the client called the gate's `done` for every attempt, and a run its
    // caller cancelled while an answer was on its way (`Fault::Cancel`) gave
    // its slot back while the server still worked (found by the hunt: seeds
    // 4093, 19576, 19593, 19811, 33030, 47055, 57718, 94128). A request
    // admitted once the slot came back arrives at least a tick later, so the
    // run's end plus a tick (its end is kept in whole milliseconds, rounded
    // down: never later than that).
    let run_ends = run_ends(r);
    let arrivals = &r.ledger.arrivals;
    let ends: Vec<Option<Duration>> = arrivals.iter().map(|a| slot_held_until(a, &run_ends)).collect();
    let steps = limit_steps(config.initial_limit, &r.fleet_facts.gate);
    let mut out = Vec::new();
    for (i, running) in running_at_arrivals(arrivals, &ends) {
        let at = arrivals[i].at;
        let limit = max_limit_between(&steps, at.saturating_sub(slack), at);
        if running > limit {
            out.push(v(
                Property::ApiWithinGateLimit,
                format!(
                    "{running} requests running at the API at {} ms (arrival {i}), but the gate's limit was at most {limit} in the {} ms before",
                    at.as_millis(),
                    slack.as_millis()
                ),
            ));
        }
    }
    out
}

/// Each front-end run's end plus a tick, by job: a request admitted once the
/// run gave its slot back arrives at least a tick later (the end is kept in
/// whole milliseconds, rounded down: never later than that).
fn run_ends(r: &Report) -> BTreeMap<u32, Duration> {
    let tick = r.scenario_config.net.tick;
    r.records.iter().map(|j| (j.job, Duration::from_millis(j.finished_ms) + tick)).collect()
}

/// Until when request `a` holds its gate slot: until its answer left the
/// API or the run that sent it ended (see [`run_ends`]), whichever is first.
fn slot_held_until(a: &Arrival, run_ends: &BTreeMap<u32, Duration>) -> Option<Duration> {
    let run_end = crate::sim::run::job::job_of_label(&a.client).and_then(|job| run_ends.get(&job).copied());
    match (a.answered_at, run_end) {
        (Some(t), Some(e)) => Some(t.min(e)),
        (t, e) => t.or(e),
    }
}

/// When a hold or a latency spike may delay an arrival: `[from, to]`, from
/// the fault's start to its end plus the delay it adds and `jitter`.
fn delay_windows(s: &crate::sim::run::scenario::Scenario, jitter: Duration) -> Vec<(Duration, Duration)> {
    let windows = s.faults.schedule.iter().filter_map(|f| match f.fault {
        Fault::Hold { until } => Some((f.at, until + jitter)),
        Fault::LatencySpike { latency, until } => Some((f.at, until + latency + jitter)),
        _ => None,
    });
    windows.collect()
}

/// Per worker, the spans it spent on its fallback: `[from, until)`.
fn fallback_spans(r: &Report) -> BTreeMap<u32, Vec<(Duration, Duration)>> {
    let mut spans: BTreeMap<u32, Vec<(Duration, Duration)>> = BTreeMap::new();
    let mut open: BTreeMap<u32, Duration> = BTreeMap::new();
    for f in &r.fleet_facts.routes {
        match f.route {
            Route::Fallback => {
                open.entry(f.worker).or_insert(f.at);
            }
            Route::Service => {
                if let Some(from) = open.remove(&f.worker) {
                    spans.entry(f.worker).or_default().push((from, f.at));
                }
            }
        }
    }
    for (w, from) in open {
        spans.entry(w).or_default().push((from, Duration::MAX));
    }
    spans
}

/// `fallback-limit` from each worker's fallback gate's own facts: no
/// admission over its `window` in flight, none less than `interval` after
/// the previous (for a `rate` above zero) nor, for its first, within its
/// stagger after it first fell back, and none outside the `spans` its
/// worker's route facts say it spent on its fallback (the ledger's half of
/// the check judges the requests inside those spans only).
fn fallback_gate_facts(
    r: &Report,
    window: u32,
    rate: u64,
    interval: Duration,
    spans: &BTreeMap<u32, Vec<(Duration, Duration)>>,
) -> Vec<FleetViolation> {
    let mut out = Vec::new();
    let stagger = |w: u32| interval * w / r.scenario_config.fleet.workers.max(1);
    for (w, log) in &r.fleet_facts.local {
        let mut previous: Option<Duration> = None;
        for (at, ticket, in_flight, _, _) in admitted(log) {
            let announced = spans.get(w).is_some_and(|s| s.iter().any(|&(from, until)| at >= from && at <= until));
            if !announced {
                out.push(v(
                    Property::FallbackLimit,
                    format!(
                        "w{w}'s fallback admitted ticket {ticket} at {} ms, outside every span its route facts put it on its fallback",
                        at.as_millis()
                    ),
                ));
            }
            if in_flight > window {
                out.push(v(
                    Property::FallbackLimit,
                    format!("w{w}'s fallback admitted ticket {ticket} with {in_flight} in flight over {window}"),
                ));
            }
            // A worker's first fallback admission waits its stagger from
            // when it first fell back (worker w of n: `interval × w / n`),
            // so the fleet does not fall back in one burst. Later spans are
            // not judged: a grant cancelled on its way leaves the worker's
            // gate thinking it never left its fallback, so it holds nothing.
            let first_span = spans.get(w).and_then(|s| s.first());
            if let (None, Some(&(from, _))) = (previous, first_span)
                && rate > 0
                && at < from + stagger(*w)
            {
                out.push(v(
                    Property::FallbackLimit,
                    format!(
                        "w{w}'s fallback admitted its first attempt at {} ms, within its stagger of {} ms after it fell back at {} ms",
                        at.as_millis(),
                        stagger(*w).as_millis(),
                        from.as_millis()
                    ),
                ));
            }
            if rate > 0 && previous.is_some_and(|p| at < p + interval) {
                out.push(v(
                    Property::FallbackLimit,
                    format!(
                        "w{w}'s fallback admitted at {} ms, less than {} ms after the previous",
                        at.as_millis(),
                        interval.as_millis()
                    ),
                ));
            }
            previous = Some(at);
        }
    }
    out
}

/// A worker fails open onto its local limits only when the limiter service
/// is cut off from it: every switch to the fallback comes while the
/// service is partitioned away, or a hold or latency spike delays the
/// network, or within the time a worker takes to notice one and come back
/// after it ends: its `silence`, a connect's timeout and a few trips, and
/// its `retry_after`, for a worker that lost the service during the cut
/// stays on its fallback until it dials again (found by the 100,000-seed
/// hunt once it drew outages from a run's start: seeds 29325, 76735 and
/// 91557, a worker whose dial failed in the partition, first asking for a
/// slot after it healed, before its redial). A service that
/// never grants, closes its sessions or drops a command would otherwise
/// pass every check: the fallback keeps the fleet safe, only slower.
/// A worker whose connection carried a line in a partition (an attempt
/// ended there, so its `DONE` was lost) finds the connection dead only
/// when it next uses it, however long after the heal: the simulated
/// network drops a message sent across a partition, and a connection that
/// lost one stays silent (as one does when a stateful firewall or a load
/// balancer forgot it in the outage). For it the cut lasts until it dials
/// again (found by the 100,000-seed hunt: seeds 33597 and 88045, a worker's
/// `DONE` lost in the cut, its next `ACQUIRE` seconds after the heal meeting
/// only silence).
/// Not judged where the configuration itself lets a worker give up on a
/// reachable service: a connect timeout or a silence (less a heartbeat)
/// shorter than the trips they wait for.
pub fn fallback_only_when_cut_off(r: &Report) -> Vec<FleetViolation> {
    let s = &r.scenario_config;
    let Some(c) = s.fleet.coordinator else { return Vec::new() };
    let trip = (s.net.max_latency + s.net.tick) * 2 + s.net.tick;
    if c.connect_timeout <= trip || c.silence <= c.heartbeat + trip {
        return Vec::new();
    }
    let notice = c.silence + c.connect_timeout + c.retry_after + trip * 2;
    // A latency spike slows every link, the service's too; a hold only the
    // API's (counted as well: lenient).
    let mut cut_off = delay_windows(s, trip);
    let partitions: Vec<_> = s
        .faults
        .schedule
        .iter()
        .filter_map(|f| match f.fault {
            Fault::LimiterPartition { until } => Some((f.at, until)),
            _ => None,
        })
        .collect();
    cut_off.extend(partitions.iter().copied());
    let dead_links = dead_links(r, &partitions);
    for f in r.fleet_facts.routes.iter().filter(|f| f.route == Route::Fallback) {
        let dead =
            dead_links.get(&f.worker).is_some_and(|spans| spans.iter().any(|&(from, to)| f.at >= from && f.at <= to));
        if !dead && !cut_off.iter().any(|&(from, to)| f.at >= from && f.at <= to + notice) {
            return vec![v(
                Property::FallbackOnlyWhenCutOff,
                format!(
                    "w{} fell back to its local limits at {} ms with the limiter service reachable (no partition, hold or latency spike in the {} ms before)",
                    f.worker,
                    f.at.as_millis(),
                    notice.as_millis()
                ),
            )];
        }
    }
    Vec::new()
}

/// Per worker, the spans in which its connection to the limiter service may
/// be dead unknown to it: from a partition in which one of its attempts
/// ended (its `DONE` crossed the partition) until its next `HELLO` after the
/// heal. Without traces, every worker's, from every partition.
fn dead_links(r: &Report, partitions: &[(Duration, Duration)]) -> BTreeMap<u32, Vec<(Duration, Duration)>> {
    let mut out: BTreeMap<u32, Vec<(Duration, Duration)>> = BTreeMap::new();
    let ms = |d: Duration| d.as_millis() as u64;
    for &(from, until) in partitions {
        for w in 0..r.scenario_config.fleet.workers {
            let mut ends = r.records.iter().filter(|j| j.worker == w).flat_map(attempt_spans);
            let ended_in_cut = ends.any(|(_, ended, _)| (ms(from)..=ms(until)).contains(&ended));
            if r.traced && !ended_in_cut {
                continue;
            }
            let hello = r.fleet_facts.service_hellos.iter().find(|h| h.worker == w && h.at > until);
            out.entry(w).or_default().push((from, hello.map_or(Duration::MAX, |h| h.at)));
        }
    }
    out
}

/// The limiter service hears of each attempt as its worker read it, since
/// its gate adapts to what it hears. Judged on a run in which no worker
/// fell back, nothing cut the service off or delayed the network (no
/// partition, hold or latency spike), the caller cancelled nothing, and the
/// lease outlasts the
/// longest an attempt's grant, the attempt and its `DONE` can take: each
/// worker's `DONE` lines, in the order the service heard them, are its
/// attempts in order (the status, or `-` without an answer, and the class
/// its client gave it), one line per attempt (the last may still be on its
/// way when the run ends), besides the `DONE - transient` that gives back a
/// grant its attempt no longer wanted. (A slot the service frees without a
/// `DONE` is judged by [`service_keeps_leases`]: on seed 1144 a worker
/// whose last job gave up waiting in the queue left its `ACQUIRE` there;
/// the service granted it after the worker's host had stopped, which
/// closes nothing in the simulation, and freed it by its lease.)
pub fn service_hears_outcomes(r: &Report) -> Vec<FleetViolation> {
    let s = &r.scenario_config;
    let facts = &r.fleet_facts;
    let Some(c) = s.fleet.coordinator else { return Vec::new() };
    let fell_back = facts.routes.iter().any(|f| f.route == Route::Fallback);
    let trip = s.net.max_latency + s.net.tick;
    let longest = s.policy.attempt_timeout + trip * 4 + s.net.tick * 4;
    let slowed =
        |f: &Fault| matches!(f, Fault::LimiterPartition { .. } | Fault::Hold { .. } | Fault::LatencySpike { .. });
    let cut_off = s.faults.schedule.iter().any(|f| slowed(&f.fault));
    if !r.traced || fell_back || cut_off || !facts.cancels.is_empty() || c.lease <= longest {
        return Vec::new();
    }
    let found = |message: String| vec![v(Property::ServiceHearsOutcomes, message)];
    let mut heard: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for t in &facts.service_told {
        if let (Some(w), Some(line)) = (t.worker, t.done.as_deref()) {
            heard.entry(w).or_default().push(line);
        }
    }
    // Each worker's attempts, in order: (answered at, status, class).
    let mut met: BTreeMap<u32, Vec<(u64, Option<u16>, crate::core::classify::Class)>> = BTreeMap::new();
    for j in &r.records {
        for e in &j.trace.events {
            let outcome = match &e.kind {
                EventKind::Answer { status, class, .. } => (e.at_ms, Some(*status), *class),
                EventKind::NoAnswer { class, .. } => (e.at_ms, None, *class),
                _ => continue,
            };
            met.entry(j.worker).or_default().push(outcome);
        }
    }
    let given_back = done_line_of(None, crate::core::classify::Class::Transient);
    for (w, attempts) in &mut met {
        attempts.sort_by_key(|a| a.0);
        let mut next = attempts.iter().peekable();
        for line in heard.remove(w).unwrap_or_default() {
            let Some(&&(at, status, class)) = next.peek() else {
                if line == given_back {
                    continue;
                }
                return found(format!("the limiter service heard `{line}` from w{w} after its last attempt"));
            };
            let expected = done_line_of(status, class);
            if line == expected {
                next.next();
            } else if line != given_back {
                return found(format!(
                    "w{w}'s attempt at {at} ms reached the limiter service as `{line}`, not `{expected}`"
                ));
            }
        }
        if next.len() > 1 {
            let (n, m) = (attempts.len(), next.len());
            return found(format!("of w{w}'s {n} attempts through the limiter service, {m} were never reported to it"));
        }
    }
    for (w, lines) in heard {
        if let Some(line) = lines.iter().find(|&&l| l != given_back) {
            return found(format!("the limiter service heard `{line}` from w{w}, which made no attempt"));
        }
    }
    Vec::new()
}

/// The limiter service frees every slot it granted within its `lease`: by
/// its worker's `DONE`, by the end of its session, or when the lease runs
/// out. A slot never freed shrinks the service's gate for good (a fleet
/// whose workers hear `WAIT` forever, and never fall back); one freed late
/// holds back every worker queued behind it. Each session (one connection)
/// frees its slots in the order it granted them, so the i-th slot a
/// session freed is its i-th grant's, and must be freed by the grant's
/// time plus the lease and a tick for the timer, wherever the run lasted
/// that long. The grants are checked against the service gate's own
/// admissions: as many by the end of the run. Each session is one
/// connection, opened by one `HELLO`: a worker's `HELLO` closes its older
/// sessions at once, so whatever they still held is freed within a tick
/// of it (a worker that reconnects is not held back by its lost
/// connection's slots until their leases run out).
pub fn service_keeps_leases(r: &Report) -> Vec<FleetViolation> {
    let s = &r.scenario_config;
    let Some(c) = s.fleet.coordinator else { return Vec::new() };
    let facts = &r.fleet_facts;
    let found = |message: String| vec![v(Property::ServiceKeepsLeases, message)];
    let admitted = facts.gate.iter().filter(|f| matches!(f.event, GateEvent::Admitted { .. })).count();
    if admitted != facts.service_granted.len() {
        return found(format!(
            "the limiter service's gate admitted {admitted} attempts, but the service granted {} slots",
            facts.service_granted.len()
        ));
    }
    let mut frees: BTreeMap<u64, Vec<Duration>> = BTreeMap::new();
    for t in &facts.service_told {
        frees.entry(t.session).or_default().push(t.at);
    }
    let mut granted: BTreeMap<u64, Vec<Duration>> = BTreeMap::new();
    for g in &facts.service_granted {
        granted.entry(g.session).or_default().push(g.at);
    }
    let end = Duration::from_millis(r.virtual_ms);
    let slack = c.lease + s.net.tick + Duration::from_millis(1);
    for (session, grants) in &granted {
        let freed = frees.get(session).map_or(&[][..], Vec::as_slice);
        for (i, &at) in grants.iter().enumerate() {
            let due = at + slack;
            if freed.get(i).is_none_or(|&f| f > due) && due < end {
                return found(format!(
                    "session {session}'s slot granted at {} ms was not freed by {} ms (its lease: {} ms){}",
                    at.as_millis(),
                    due.as_millis(),
                    c.lease.as_millis(),
                    freed.get(i).map_or(String::new(), |f| format!(", but at {} ms", f.as_millis()))
                ));
            }
        }
    }
    if let Some(session) = frees.keys().find(|s| !granted.contains_key(s)) {
        return found(format!("session {session} freed a slot it was never granted"));
    }
    if let Some(message) = superseded_sessions_hold(&facts.service_hellos, &granted, &frees, s.net.tick, end) {
        return found(message);
    }
    Vec::new()
}

/// The part of [`service_keeps_leases`] that judges `HELLO`s: each opens a
/// session no earlier `HELLO` opened, and every slot the worker's older
/// sessions still held is freed within `tick` of it. `granted` and `frees`
/// are each session's grant and free times, in order.
fn superseded_sessions_hold(
    hellos: &[Hello],
    granted: &BTreeMap<u64, Vec<Duration>>,
    frees: &BTreeMap<u64, Vec<Duration>>,
    tick: Duration,
    end: Duration,
) -> Option<String> {
    let mut opened: BTreeMap<u64, u32> = BTreeMap::new();
    let mut sessions_of: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for h in hellos {
        let (w, at) = (h.worker, h.at.as_millis());
        if let Some(earlier) = opened.insert(h.session, w) {
            return Some(format!(
                "w{w}'s HELLO at {at} ms arrived on session {}, which w{earlier}'s HELLO opened before: each connection is a session of its own",
                h.session
            ));
        }
        let due = h.at + tick + Duration::from_millis(1);
        let older = sessions_of.entry(w).or_default();
        for &old in older.iter() {
            let freed = frees.get(&old).map_or(&[][..], Vec::as_slice);
            let grants = granted.get(&old).map_or(&[][..], Vec::as_slice);
            for (i, &g) in grants.iter().enumerate().filter(|&(_, &g)| g <= h.at) {
                if freed.get(i).is_none_or(|&f| f > due) && due < end {
                    let when = freed.get(i).map_or("never".to_owned(), |f| format!("at {} ms", f.as_millis()));
                    return Some(format!(
                        "w{w} said HELLO on session {} at {at} ms, but its older session {old} kept the slot granted at {} ms: freed {when}, not by {} ms",
                        h.session,
                        g.as_millis(),
                        due.as_millis()
                    ));
                }
            }
        }
        older.push(h.session);
    }
    None
}

/// A `DONE` line as the check expects it, written apart from the service's.
fn done_line_of(status: Option<u16>, class: crate::core::classify::Class) -> String {
    let status = status.map_or_else(|| "-".to_owned(), |s| s.to_string());
    let class = serde_json::to_value(class).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    format!("DONE {status} {class}")
}

/// While the limiter service is unreachable, no worker exceeds its local
/// fallback limit: from the ledger, a worker's requests that arrived while
/// it was on its fallback are spaced at least one fallback interval apart
/// (less how much longer one request's trip may take than another's) and
/// never overlap beyond the fallback's
/// window; from its fallback gate's facts, the same exactly.
/// The ledger's half leaves out a request that arrived while a hold or a
/// latency spike could have delayed it.
pub fn fallback_within_local_limit(r: &Report) -> Vec<FleetViolation> {
    let s = &r.scenario_config;
    let Some(c) = s.fleet.coordinator else { return Vec::new() };
    let (window, rate) = (c.fallback.max_limit, c.fallback.max_rate_milli as u64);
    let interval = pace_interval(rate);
    let jitter = s.net.max_latency + s.net.tick * 2;
    // How much longer one request may take from its admission to the API
    // than another: on a new connection a connect and its data, two messages
    // and a step each and the step the accept may be seen late (the trip in
    // `blackbox.rs`); on a kept-alive one its data alone, at least
    // `min_latency` (found by the 100,000-seed hunt: seed 94609, a request
    // on a new connection 50 ms on its way, the next, admitted an interval
    // later on the kept-alive one, 6 ms).
    let spread = (s.net.max_latency + s.net.tick) * 2 + s.net.tick - s.net.min_latency;
    let spans = fallback_spans(r);
    let mut out = fallback_gate_facts(r, window, rate, interval, &spans);
    // A hold or a latency spike delays requests on their way: one the
    // fallback admitted an interval before the next may arrive with it
    // (found by the hunt once it drew the limiter service: seeds 162 and
    // 361, a request held until a hold ended, and the next one, admitted an
    // interval after it, arriving within the interval). A request that
    // arrived while a delay could have held it is not judged against the
    // ones after it; the gate's own facts above still judge every admission.
    let delays = delay_windows(s, jitter);
    let delayed = |a: &Arrival| delays.iter().any(|&(from, to)| a.at >= from && a.at <= to);
    // When each worker's attempts ended without an answer (timed out or lost).
    let gave_up_waiting: Vec<(u32, Duration)> = r
        .records
        .iter()
        .flat_map(|j| j.trace.events.iter().map(move |e| (j.worker, e)))
        .filter(|(_, e)| matches!(e.kind, EventKind::NoAnswer { .. }))
        .map(|(w, e)| (w, Duration::from_millis(e.at_ms)))
        .collect();
    let run_ends = run_ends(r);
    for (w, spans) in spans {
        let prefix = format!("w{w} ");
        let mine: Vec<&Arrival> = r.ledger.arrivals.iter().filter(|a| a.client.starts_with(&prefix)).collect();
        for (from, until) in spans {
            let inside: Vec<&Arrival> = mine.iter().copied().filter(|a| a.at >= from && a.at < until).collect();
            for pair in inside.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if rate > 0 && b.at + spread < a.at + interval && !delayed(a) {
                    out.push(v(
                        Property::FallbackLimit,
                        format!(
                            "w{w} on its fallback: requests arrived at {} and {} ms, closer than its interval of {} ms",
                            a.at.as_millis(),
                            b.at.as_millis(),
                            interval.as_millis()
                        ),
                    ));
                }
            }
            for a in &inside {
                // Running until its answer left or its run ended: a run its
                // caller cancelled gave its slot back while the API still
                // worked (found by the 100,000-seed hunt: seeds 49849, 55704).
                let running = |b: &&&Arrival| slot_held_until(b, &run_ends).is_none_or(|end| end > a.at);
                let overlapping: Vec<&&Arrival> = inside.iter().filter(|b| b.at <= a.at).filter(running).collect();
                // A request the client stopped waiting for (its attempt timed
                // out) still runs at the server, while the fallback, told the
                // attempt is done, rightly admits the next (found by the hunt:
                // seed 30 under `--sabotage fresh-key-each-attempt`, 1.5 s of
                // processing against a 1 s attempt timeout).
                let excused = overlapping.iter().any(|b| {
                    delayed(b)
                        || (b.at < a.at && gave_up_waiting.iter().any(|&(x, t)| x == w && t >= b.at && t <= a.at))
                });
                let overlapping = overlapping.len() as u32;
                if overlapping > window && !excused {
                    out.push(v(
                        Property::FallbackLimit,
                        format!(
                            "w{w} on its fallback had {overlapping} requests running at {} ms, over {window}",
                            a.at.as_millis()
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// With deferral: every deferred job was run again in the background under
/// the one key its first attempt carried, every job that ended in success
/// was charged exactly once, and no job waited on the interactive path
/// longer than the interactive deadline (when the client is retrysim's own,
/// running the scenario's policy).
pub fn deferred_charged_once(r: &Report) -> Vec<FleetViolation> {
    if r.scenario_config.fleet.deferral.is_none() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let budget = r.scenario_config.policy.deadline.as_millis() as u64;
    let mut background: BTreeMap<u32, Vec<&JobRecord>> = BTreeMap::new();
    for d in &r.deferred_records {
        background.entry(d.job).or_default().push(d);
    }
    for j in &r.records {
        let waited = j.finished_ms - j.started_ms;
        // The budget is the scenario's policy, which retrysim's own client (a
        // traced run) runs under; a client of your own is held to the
        // deadline it promises by the black-box deadline check.
        if r.traced && waited > budget + crate::sim::checks::invariants::clock_slack_ms(&r.scenario_config) {
            out.push(v(
                Property::InteractiveBudget,
                format!("job {} waited {waited} ms on the interactive path, budget {budget} ms", j.job),
            ));
        }
        // Deferred as the front end defers (brief 000): a give-up that waiting
        // fixes, of a safe job or a keyed one that carried its key.
        let deferred = matches!(&j.outcome, JobOutcome::GaveUp { reason } if deferrable(reason))
            && j.kind != crate::sim::run::job::JobKind::Unsafe
            && !(j.kind == crate::sim::run::job::JobKind::Keyed && j.key.is_none());
        let runs = background.get(&j.job).map_or(&[][..], Vec::as_slice);
        if deferred && runs.is_empty() {
            out.push(v(Property::DeferredOnce, format!("job {} was deferred but never run again", j.job)));
        }
        let keys: BTreeSet<_> = j.attempt_keys.iter().chain(runs.iter().flat_map(|d| d.attempt_keys.iter())).collect();
        if keys.len() > 1 {
            out.push(v(
                Property::DeferredOnce,
                format!("job {}'s attempts carried {} different keys", j.job, keys.len()),
            ));
        }
        let last = runs.last().map_or(&j.outcome, |d| &d.outcome);
        if let (JobOutcome::Succeeded { .. }, Some(Some(key))) = (last, j.attempt_keys.first()) {
            let charges = r.ledger.charges.get(key).copied().unwrap_or(0);
            if charges != 1 {
                out.push(v(Property::DeferredOnce, format!("job {} succeeded and was charged {charges} times", j.job)));
            }
        }
    }
    for (key, &n) in &r.ledger.charges {
        if key != crate::sim::world::api::NO_KEY && n > 1 {
            out.push(v(Property::DeferredOnce, format!("key {} was charged {n} times", crate::trace::short_key(key))));
        }
    }
    // Per job, whatever keys it carried: each job creates at most one
    // charge, so more charges than jobs means a job was charged twice
    // (e.g. under a second key after a lost answer).
    if r.ledger.charged > r.jobs {
        out.push(v(
            Property::DeferredOnce,
            format!("{} charges for {} jobs: some job was charged twice", r.ledger.charged, r.jobs),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::aimd::{AimdConfig, Controller, Readiness, Signal};

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn limit_steps_and_their_maximum() {
        let facts = vec![
            GateFact { at: MS(10), event: GateEvent::Changed { limit: 5, rate_milli: None, throttled: false } },
            GateFact { at: MS(20), event: GateEvent::Changed { limit: 3, rate_milli: None, throttled: true } },
        ];
        let steps = limit_steps(4, &facts);
        assert_eq!(steps, [(MS(0), 4), (MS(10), 5), (MS(20), 3)]);
        assert_eq!(max_limit_between(&steps, MS(0), MS(9)), 4);
        assert_eq!(max_limit_between(&steps, MS(15), MS(30)), 5);
        assert_eq!(max_limit_between(&steps, MS(21), MS(30)), 3);
    }

    /// The facts an AIMD gate records, from its real controller: ten
    /// admissions 1 ms apart whenever the window and the pace allow, each
    /// answered 5 ms later, the third with a throttle.
    fn paced_facts(c: AimdConfig) -> Vec<GateFact> {
        let mut ctl = Controller::new(c);
        let (mut facts, mut due) = (Vec::new(), Vec::new());
        let (mut t, mut sent) = (Duration::ZERO, 0u64);
        while sent < 10 {
            due.sort();
            while due.first().is_some_and(|&(at, _)| at <= t) {
                let (at, n) = due.remove(0);
                let signal = if n == 2 { Signal::Throttled } else { Signal::Success };
                let changed = ctl.answer(at, signal);
                facts.push(GateFact { at, event: GateEvent::Answered { in_flight: ctl.in_flight(), signal } });
                if changed {
                    let event =
                        GateEvent::Changed { limit: ctl.limit(), rate_milli: ctl.rate_milli(), throttled: n == 2 };
                    facts.push(GateFact { at, event });
                }
            }
            if ctl.readiness(t) == Readiness::Now {
                let (limit, rate_milli) = (ctl.limit(), ctl.rate_milli());
                ctl.admit(t);
                let event = GateEvent::Admitted { ticket: sent, in_flight: ctl.in_flight(), limit, rate_milli };
                facts.push(GateFact { at: t, event });
                due.push((t + MS(5), sent));
                sent += 1;
            }
            t += Duration::from_micros(100);
        }
        facts
    }

    #[test]
    fn a_gate_that_holds_its_first_ticket_is_caught() {
        let queued = |at, ticket| GateFact { at: MS(at), event: GateEvent::Queued { ticket, depth: 1 } };
        let admitted = |at, ticket| GateFact {
            at: MS(at),
            event: GateEvent::Admitted { ticket, in_flight: 1, limit: 4, rate_milli: None },
        };
        assert_eq!(first_ticket_held(&[]), None, "a gate nobody used");
        assert_eq!(first_ticket_held(&[queued(7, 0), admitted(7, 0), queued(8, 1), admitted(90, 1)]), None);
        let late = first_ticket_held(&[queued(7, 0), admitted(8, 0)]);
        assert_eq!(late.as_deref(), Some("0, queued at 7 ms with nothing in flight: admitted at 8 ms"));
        let never = first_ticket_held(&[queued(7, 0), GateFact { at: MS(900), event: GateEvent::Left { ticket: 0 } }]);
        assert!(never.is_some_and(|m| m.ends_with("never admitted")));
    }

    #[test]
    fn aimd_pace_passes_the_controller_and_catches_each_rule_broken() {
        let c = AimdConfig { initial_limit: 2, rate_increase_milli: 50_000, ..AimdConfig::default() };
        let facts = paced_facts(c);
        assert_eq!(aimd_paces_one(c, "g", &facts), None);
        // The throttle switched pacing on (β × the floor of 0.5/s, kept at the floor).
        let changed = facts.iter().position(|f| matches!(f.event, GateEvent::Changed { throttled: true, .. }));
        let i = changed.expect("a throttle changed the gate");
        assert!(matches!(facts[i].event, GateEvent::Changed { rate_milli: Some(500), .. }), "{:?}", facts[i]);
        let paced = facts.iter().filter(|f| matches!(f.event, GateEvent::Admitted { rate_milli: Some(_), .. }));
        assert!(paced.count() >= 2, "{facts:?}");
        let broken = |edit: &dyn Fn(&mut Vec<GateFact>)| {
            let mut f = facts.clone();
            edit(&mut f);
            aimd_paces_one(c, "g", &f).map(|v| v.message).unwrap_or_default()
        };
        // Two paced admissions a microsecond closer than the interval of 2 s.
        let too_close = broken(&|f| {
            let paced: Vec<usize> = (0..f.len())
                .filter(|&j| matches!(f[j].event, GateEvent::Admitted { rate_milli: Some(_), .. }))
                .collect();
            f[paced[1]].at = f[paced[0]].at + MS(2_000) - Duration::from_micros(1);
        });
        assert!(too_close.contains("at least 2000000 µs apart"), "{too_close}");
        let still_off = broken(&|f| f[i].event = GateEvent::Changed { limit: 1, rate_milli: None, throttled: true });
        assert!(still_off.contains("pacing was off"), "{still_off}");
        let too_fast =
            broken(&|f| f[i].event = GateEvent::Changed { limit: 1, rate_milli: Some(2_000), throttled: true });
        assert!(too_fast.contains("a throttle moved the rate from None to 2000"), "{too_fast}");
        // The admission after it still states the rate the gate had.
        let restated = broken(&|f| {
            let j =
                (i..f.len()).find(|&j| matches!(f[j].event, GateEvent::Admitted { .. })).expect("an admission after");
            if let GateEvent::Admitted { rate_milli, .. } = &mut f[j].event {
                *rate_milli = Some(600);
            }
        });
        assert!(restated.contains("admitted under a rate of Some(600)"), "{restated}");
        let off = AimdConfig { rate: crate::gate::aimd::RateControl::Off, ..c };
        let on_anyway = aimd_paces_one(off, "g", &facts).map(|v| v.message).unwrap_or_default();
        assert!(on_anyway.contains("though the config's rate is off"), "{on_anyway}");
        // Paced from the start at 4/s, the throttle must leave at most 2.8/s.
        let fast = AimdConfig { initial_rate_milli: 4_000, ..c };
        let facts = paced_facts(fast);
        assert_eq!(aimd_paces_one(fast, "g", &facts), None);
        let cut_short = aimd_paces_one(AimdConfig { backoff_per_mille: 500, ..fast }, "g", &facts);
        assert!(cut_short.is_some_and(|v| v.message.contains("a throttle moved the rate from Some(4000) to 2800")));
        // Each success raises an aimd rate by 50/rate per second, capped at
        // twice the measured send rate: none is measured in the first 2 s,
        // so the first success to change the gate (its limit) left the
        // throttle's 2.8/s.
        let raised = aimd_paces_one(fast, "g", &{
            let mut f = facts.clone();
            let j = f.iter().position(|f| matches!(f.event, GateEvent::Changed { throttled: false, .. }));
            let j = j.expect("a success changed the limit");
            if let GateEvent::Changed { rate_milli, .. } = &mut f[j].event {
                *rate_milli = Some(4_001);
            }
            f
        });
        let raised = raised.map(|v| v.message).unwrap_or_default();
        assert!(raised.contains("a success moved the rate from Some(2800) to 4001"), "{raised}");
    }
}
