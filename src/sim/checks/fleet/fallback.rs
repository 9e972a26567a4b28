//! The workers' fallback while cut off from the limiter service: within
//! the local limit (`fallback-limit`) and only while cut off
//! (`fallback-only-when-cut-off`).

use super::*;

/// When a hold or a latency spike may delay an arrival: `[from, to]`, from
/// the fault's start to its end plus the delay it adds and `jitter`.
pub(super) fn delay_windows(s: &crate::sim::run::scenario::Scenario, jitter: Duration) -> Vec<(Duration, Duration)> {
    let windows = s.faults.schedule.iter().filter_map(|f| match f.fault {
        Fault::Hold { until } => Some((f.at, until + jitter)),
        Fault::LatencySpike { latency, until } => Some((f.at, until + latency + jitter)),
        _ => None,
    });
    windows.collect()
}

/// Per worker, the spans it spent on its fallback: `[from, until)`.
pub(super) fn fallback_spans(r: &Report) -> BTreeMap<u32, Vec<(Duration, Duration)>> {
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
pub(super) fn fallback_gate_facts(
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
    let partitions: Vec<_> =
        s.faults.schedule.iter().filter_map(|f| f.fault.cuts(Link::Limiter).map(|until| (f.at, until))).collect();
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
pub(super) fn dead_links(r: &Report, partitions: &[(Duration, Duration)]) -> BTreeMap<u32, Vec<(Duration, Duration)>> {
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
