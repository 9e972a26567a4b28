//! The pacing gate's checks: no 429 once it has read the headers
//! (`pacing-no-429`), no window left half unused (`pacing-fills-windows`),
//! whole-second headers learned (`pacing-learns-whole-seconds`), and a
//! refusal's `Retry-After` holding the whole fleet (`pacing-hold`).

use super::*;

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
///
/// Every refusal from the third window on is judged only where messages
/// take about the same time (their latencies within 50 ms of each other;
/// the generator's pacing worlds draw at most 40 ms apart). Where they
/// vary more, an answer may come back in another order than its attempt
/// went, and a window's first attempts may land after the reset the gate
/// read (the seconds left are rounded up, by up to a second), so an honest
/// gate can be refused; there, and against seconds left, the refusals
/// judged are those `refused_out_together` names.
pub fn pacing_spends_no_429(r: &Report) -> Vec<FleetViolation> {
    let api = &r.scenario_config.api;
    if !pacing_clean(r) {
        return Vec::new();
    }
    if !steady_network(r) {
        return if whole_seconds(r) { Vec::new() } else { refused_out_together(r) };
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

/// Messages take about the same time: the latencies drawn lie within 50 ms
/// of each other (see [`pacing_spends_no_429`]).
pub(super) fn steady_network(r: &Report) -> bool {
    let net = &r.scenario_config.net;
    net.max_latency.saturating_sub(net.min_latency) < Duration::from_millis(50)
}

/// The refusals a pacing gate reading seconds left must never see, however
/// long its messages take: a 429 in a fixed window whose every request the
/// window took (the `limit` successes that arrived in it before the
/// refused one) and the refused one were all out at once, at the instant
/// the last of them was sent (no answer, and no attempt given up, came
/// before it), all sent after the fleet's first answer told the gate the
/// limit.
///
/// Why the honest gate cannot be refused there: it counts an attempt from
/// its admission until its answer, and at each reset it starts the new
/// window's count from the attempts then in flight ("they may land in it").
/// At the last of those `limit + 1` admissions, the others were all in
/// flight: admitted before the gate's last reset (and so counted at it,
/// being in flight then) or after it (counted as admitted). The count was
/// then at least `limit`, and the gate admits only below the limit it has
/// read, whatever its reset instants, the answers' order or their
/// rounding. A gate that forgot its attempts in flight at a reset lets a
/// window's worth go after them. Times are whole milliseconds, rounded
/// down: the last send's millisecond is before the first end's, and the
/// first send's after the first answer's. Not on a whole-second server,
/// whose learned period paces by another count (its probe may be refused).
pub(super) fn refused_out_together(r: &Report) -> Vec<FleetViolation> {
    let limit = r.scenario_config.api.limiter.writes as usize;
    let first_answer = r.records.iter().flat_map(|j| &j.trace.events).filter_map(|e| match e.kind {
        EventKind::Answer { .. } => Some(e.at_ms),
        _ => None,
    });
    let Some(read) = first_answer.min() else { return Vec::new() };
    // Window end -> its arrivals, in arrival order, by the advertised reset.
    let mut windows: BTreeMap<u64, Vec<&Arrival>> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        if let Some(adv) = &a.advertised {
            let told = a.answered_at.unwrap_or(a.at);
            windows.entry((told + adv.reset).as_millis() as u64).or_default().push(a);
        }
    }
    for (&end, arrivals) in &windows {
        for refused in arrivals.iter().filter(|a| a.status == 429) {
            let taken = arrivals.iter().filter(|a| (200..300).contains(&a.status) && a.at <= refused.at);
            let together: Vec<&&Arrival> = taken.chain(std::iter::once(refused)).collect();
            if together.len() != limit + 1 {
                continue;
            }
            let spans: Option<Vec<(u64, u64)>> = together.iter().map(|a| span_of(r, a)).collect();
            let Some(spans) = spans else { continue };
            let last_sent = spans.iter().map(|s| s.0).max().unwrap_or(0);
            let first_sent = spans.iter().map(|s| s.0).min().unwrap_or(0);
            let first_end = spans.iter().map(|s| s.1).min().unwrap_or(0);
            if first_sent > read && last_sent < first_end {
                return vec![v(
                    Property::PacingNo429,
                    format!(
                        "under a pacing gate reading rate-limit headers, {} was refused (429) at {} ms in the window that ended at {end} ms, though it and the {limit} requests that window took were all out at once (sent from {first_sent} to {last_sent} ms, the first answered at {first_end} ms), after the fleet's first answer at {read} ms told the limit: a gate counting its attempts in flight lets {limit} go",
                        refused.client,
                        refused.at.as_millis(),
                    ),
                )];
            }
        }
    }
    Vec::new()
}

/// When the attempt that made arrival `a` was sent and when it ended
/// (answered or given up), from its job's trace: the last attempt sent at
/// or before the arrival, if it had not ended before it.
fn span_of(r: &Report, a: &Arrival) -> Option<(u64, u64)> {
    let at = a.at.as_millis() as u64;
    let own = r.records.iter().find(|j| j.trace.label == a.client)?;
    let spans = attempt_spans(own);
    let (sent, ended, _) = spans.into_iter().filter(|&(sent, _, _)| sent <= at).max_by_key(|&(sent, _, _)| sent)?;
    (at <= ended).then_some((sent, ended))
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
    if !steady_network(r) {
        // Messages slower than the window: the gate may rightly hold a
        // window back while the one before is still out (pacing-no-429's
        // in-flight rule judges it).
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
pub(super) fn idle_stretches(
    r: &Report,
    windows: &BTreeMap<u64, (u32, u32)>,
    waits: &[(u64, u64, u32)],
) -> Vec<FleetViolation> {
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
pub(super) fn round_trip_ms(r: &Report) -> u64 {
    let net = &r.scenario_config.net;
    ((net.max_latency + net.tick) * 2 + net.tick).as_millis() as u64
}

/// Jobs that gave up while queued at the gate, never admitted:
/// `(ready, gave up, job)`, ready when their last wait ended (or they
/// started). A job whose last attempt was still out is not at the gate.
pub(super) fn gave_up_at_gate(r: &Report) -> impl Iterator<Item = (u64, u64, u32)> + '_ {
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
pub(super) fn whole_seconds(r: &Report) -> bool {
    r.scenario_config.api.rate_limit_reset == crate::sim::world::api::ResetForm::UnixSeconds
}

/// The attempt that made arrival `a` was the only one of the fleet out,
/// from its send to its answer (a pacing gate's probe; whole milliseconds,
/// so an attempt that ends or starts in the same millisecond is not
/// counted).
pub(super) fn sent_alone(r: &Report, a: &Arrival) -> bool {
    let at = a.at.as_millis() as u64;
    let Some(own) = r.records.iter().find(|j| j.trace.label == a.client) else { return false };
    let mine = attempt_spans(own).into_iter().rev().find(|&(sent, ended, _)| sent <= at && at <= ended);
    let Some((sent, ended, _)) = mine else { return false };
    let mut others = r.records.iter().filter(|j| j.trace.label != a.client).flat_map(attempt_spans);
    others.all(|(s, e, _)| e <= sent || s >= ended)
}

/// Each attempt of a job that ended, from its trace: `(sent, ended, answered)`
/// in milliseconds, in the order they ended.
pub(super) fn attempt_spans(j: &JobRecord) -> Vec<(u64, u64, bool)> {
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
pub(super) fn pacing_clean(r: &Report) -> bool {
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
pub(super) fn reset_readable(api: &crate::sim::world::api::ApiConfig) -> bool {
    use crate::sim::world::api::ResetForm;
    match api.rate_limit_reset {
        ResetForm::SecondsLeft => api.clock_skew_ms == 0,
        ResetForm::UnixSeconds => api.send_date,
    }
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
pub(super) fn gate_reads(advice: &crate::trace::AdviceView) -> bool {
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
pub(super) fn gate_waits(r: &Report) -> Vec<(u64, u64, u32)> {
    let waits = r.records.iter().flat_map(|j| {
        j.trace.events.iter().filter_map(move |e| match e.kind {
            EventKind::Admitted { queued_ms } => Some((e.at_ms.saturating_sub(queued_ms), e.at_ms, j.job)),
            _ => None,
        })
    });
    waits.collect()
}
