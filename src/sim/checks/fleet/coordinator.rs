//! The limiter service (the fleet's coordinator): it hears each attempt as
//! its worker read it (`service-hears-outcomes`) and frees every slot it
//! granted within its lease (`service-keeps-leases`).

use super::*;

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
        |f: &Fault| f.cuts(Link::Limiter).is_some() || matches!(f, Fault::Hold { .. } | Fault::LatencySpike { .. });
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
pub(super) fn superseded_sessions_hold(
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
pub(super) fn done_line_of(status: Option<u16>, class: crate::core::classify::Class) -> String {
    let status = status.map_or_else(|| "-".to_owned(), |s| s.to_string());
    let class = serde_json::to_value(class).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    format!("DONE {status} {class}")
}
