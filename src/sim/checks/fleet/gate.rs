//! The concurrency gate's checks: admissions within the window and in
//! FIFO order (`gate-window`, `gate-fifo`) from the gate's facts, and the
//! requests running at the API within the gate's limit
//! (`api-within-gate-limit`) from the ledger.

use super::*;

/// Every gate's facts with whose they are: the fleet gate's (the shared
/// one, or the limiter service's), then each worker host's own gate's
/// (`Some(worker)`: its local gate, or its fallback).
pub(super) fn gate_logs(r: &Report) -> impl Iterator<Item = (Option<u32>, String, &[GateFact])> + '_ {
    let facts = &r.fleet_facts;
    std::iter::once((None, "the fleet gate".to_owned(), facts.gate.as_slice()))
        .chain(facts.local.iter().map(|(&w, log)| (Some(w), format!("w{w}'s gate"), log.as_slice())))
}

pub(super) fn admitted(facts: &[GateFact]) -> impl Iterator<Item = (Duration, u64, u32, u32, Option<u64>)> + '_ {
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

/// The gate's limit over time: `(from, limit)` steps, from its facts.
pub(super) fn limit_steps(initial: u32, facts: &[GateFact]) -> Vec<(Duration, u32)> {
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
pub(super) fn max_limit_between(steps: &[(Duration, u32)], from: Duration, to: Duration) -> u32 {
    let at_from = steps.iter().take_while(|(t, _)| *t <= from).last().map_or(0, |s| s.1);
    steps.iter().filter(|(t, _)| *t > from && *t <= to).map(|s| s.1).fold(at_from, u32::max)
}

/// Requests running at the API at the instant of each arrival (the arrival
/// included). A request counts from its arrival until `ends[i]`.
pub(super) fn running_at_arrivals(arrivals: &[Arrival], ends: &[Option<Duration>]) -> Vec<(usize, u32)> {
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
pub(super) fn run_ends(r: &Report) -> BTreeMap<u32, Duration> {
    let tick = r.scenario_config.net.tick;
    r.records.iter().map(|j| (j.job, Duration::from_millis(j.finished_ms) + tick)).collect()
}

/// Until when request `a` holds its gate slot: until its answer left the
/// API or the run that sent it ended (see [`run_ends`]), whichever is first.
pub(super) fn slot_held_until(a: &Arrival, run_ends: &BTreeMap<u32, Duration>) -> Option<Duration> {
    let run_end = crate::sim::run::job::job_of_label(&a.client).and_then(|job| run_ends.get(&job).copied());
    match (a.answered_at, run_end) {
        (Some(t), Some(e)) => Some(t.min(e)),
        (t, e) => t.or(e),
    }
}
