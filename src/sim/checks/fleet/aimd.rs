//! An AIMD gate judged from its own facts, in one home: the checks
//! (`aimd-backs-off`, `aimd-grows`, `aimd-pace`, `aimd-cuts`, `gate-admits`)
//! and the rules of `gate::aimd`'s module doc they hold a gate to, written
//! again here from that text rather than by calling the gate's
//! `Controller`: how many attempts are out, which throttle cuts and how
//! deep, how a paced rate moves (a `cubic` pace along botocore's curve),
//! and when the head of the queue must go out.

use super::*;

use crate::gate::aimd::{AimdConfig, RateControl, Signal};

/// The answers still due from attempts that were out at an AIMD gate's
/// last cut. A throttle cuts only when none is due (one cut per window of
/// attempts); then every attempt still out is due, and every answer after,
/// whatever it says, pays one off.
#[derive(Debug, Default)]
pub(super) struct CutGuard {
    due: u32,
}

impl CutGuard {
    /// Whether an answer read as `signal`, which left `in_flight` attempts
    /// out, cuts the gate.
    pub(super) fn answered(&mut self, signal: Signal, in_flight: u32) -> bool {
        if signal == Signal::Throttled && self.due == 0 {
            self.due = in_flight;
            true
        } else {
            self.due = self.due.saturating_sub(1);
            false
        }
    }
}

/// The whole limits a cut can leave from a whole limit `limit`: the window
/// is kept in thousandths, anywhere in `[limit, limit + 1)` slots (never
/// above `max_limit`), and a cut keeps `β` of it, never below `min_limit`.
pub(super) fn cut_range(c: &AimdConfig, limit: u64) -> (u64, u64) {
    let (beta, min) = (c.backoff_per_mille as u64, c.min_limit.max(1) as u64);
    let most_milli = ((limit + 1) * 1000 - 1).min((c.max_limit as u64 * 1000).max(limit * 1000));
    let keep = |milli: u64| (milli * beta / 1_000_000).max(min);
    (keep(limit * 1000), keep(most_milli))
}

/// botocore's CUBIC curve in floating point, as its `CubicCalculator`
/// computes it: after a throttle at `W_max` requests per second, the rate
/// `t` seconds later is `0.4 × (t − K)³ + W_max`, `K = ∛(W_max × (1 − β) / 0.4)`.
#[derive(Debug, Clone, Copy)]
pub(super) struct CubicCurve {
    w_max: f64,
    k: f64,
    from: Duration,
}

impl CubicCurve {
    /// The curve after a throttle at `from` that cut from `w_max_milli`.
    pub(super) fn after_throttle(w_max_milli: u64, beta_per_mille: u32, from: Duration) -> CubicCurve {
        let w_max = w_max_milli as f64 / 1000.0;
        let k = (w_max * (1.0 - beta_per_mille as f64 / 1000.0) / 0.4).cbrt();
        CubicCurve { w_max, k, from }
    }

    /// A pace set from the start: a throttle at time zero whose `K` is
    /// zero, so the curve rises from it at once.
    pub(super) fn from_start(rate_milli: u64) -> CubicCurve {
        CubicCurve { w_max: rate_milli as f64 / 1000.0, k: 0.0, from: Duration::ZERO }
    }

    /// The rates in milli-requests per second the curve allows at `at`: the
    /// gate counts in whole milliseconds and whole thousandths, so its `t`
    /// and `K` may each be up to a millisecond short, and its value a
    /// thousandth off either way.
    pub(super) fn range_at(&self, at: Duration) -> (u64, u64) {
        let t = at.saturating_sub(self.from).as_secs_f64() - self.k;
        let rate = |d: f64| ((0.4 * d * d * d + self.w_max) * 1000.0).max(0.0);
        ((rate(t - 0.001) - 2.0).max(0.0).floor() as u64, (rate(t + 0.001) + 2.0).ceil() as u64)
    }
}

/// The rate a throttle cuts from: the lower of the rate and the measured
/// send rate (the rate alone before any is measured), or, while pacing was
/// off, the measured rate, at least the floor.
pub(super) fn throttle_base(rate: Option<u64>, measured: u64, floor: u64) -> u64 {
    match rate {
        Some(o) if measured > 0 => o.min(measured),
        Some(o) => o,
        None => measured.max(floor),
    }
}

/// A paced AIMD gate's rate changed after an answer: from `was` to `now`,
/// on a throttle or a success, with the send rate `measured` as botocore's
/// `RateClocker` measures it, at `at`.
pub(super) struct RateChange {
    pub(super) was: Option<u64>,
    pub(super) now: u64,
    pub(super) throttled: bool,
    pub(super) measured: u64,
    pub(super) at: Duration,
}

impl RateChange {
    /// What is wrong with the change by the module doc's rule, kept in
    /// `[min_rate_milli, max_rate_milli]`: a throttle leaves `β ×` its
    /// [`throttle_base`]; an `aimd` success adds `rate_increase / rate`, a
    /// `cubic` one sets the curve since the last cut (`curve`), each capped
    /// at twice the measured rate (or the rate, if higher).
    pub(super) fn broken(&self, c: &AimdConfig, curve: Option<CubicCurve>) -> Option<String> {
        let (floor, m) = (c.min_rate_milli as u64, self.measured);
        let clamp = |r: u64| r.clamp(floor, c.max_rate_milli as u64);
        let (lo, hi, rule) = match (self.throttled, self.was) {
            (true, was) => {
                let kept = clamp(throttle_base(was, m, floor) * c.backoff_per_mille as u64 / 1000);
                let rule =
                    if was.is_some() { "β × the lower of the rate and" } else { "β × the floor or, if higher," };
                (kept, kept, rule)
            }
            (false, Some(o)) if c.rate == RateControl::Aimd => {
                let step = clamp((o + c.rate_increase_milli as u64 * 1000 / o.max(1)).min(m.saturating_mul(2).max(o)));
                (step, step, "an aimd step, capped at twice")
            }
            (false, Some(o)) => {
                let cap = m.saturating_mul(2).max(o);
                let (lo, hi) = curve.map_or((0, u64::MAX), |k| k.range_at(self.at));
                (clamp(lo.min(cap)), clamp(hi.min(cap)), "the cubic curve since the last cut, capped at twice")
            }
            (false, None) => return Some(format!("a success switched pacing on ({})", self.now)),
        };
        if (lo..=hi).contains(&self.now) {
            return None;
        }
        let why = if self.throttled { "a throttle" } else { "a success" };
        let gives = if lo == hi { lo.to_string() } else { format!("{lo} to {hi}") };
        Some(format!(
            "{why} moved the rate from {:?} to {}, where {rule} the measured send rate of {m} gives {gives}",
            self.was, self.now
        ))
    }
}

/// aimd-cuts, for one AIMD gate's facts (what broke it, if anything): every admission counts one more
/// attempt out and every answer one fewer; a throttle cuts only when no
/// answer is due from before the last cut ([`CutGuard`]), and a cut keeps
/// `β` of the window ([`cut_range`]); nothing but a cut lowers the gate,
/// and a change always follows the answer that made it.
///
/// A gate that cut on every throttle of one burst would collapse to its
/// floor on a single full window; one that cut deeper than `β` would leave
/// the API idle; neither floods anything, so no safety check sees them.
pub(super) fn aimd_cuts_one(c: &AimdConfig, whose: &str, facts: &[GateFact]) -> Option<String> {
    let broke = |at: Duration, what: String| Some(format!("{whose} at {} ms: {what}", at.as_millis()));
    let (mut limit, mut out, mut guard) = (c.initial_limit.max(1) as u64, 0u32, CutGuard::default());
    // The answer just before this fact: how it read, and whether it cut.
    let mut heard: Option<(Signal, bool)> = None;
    for (i, f) in facts.iter().enumerate() {
        let before = heard.take();
        match f.event {
            GateEvent::Admitted { ticket, in_flight, limit: now, .. } => {
                if in_flight != out + 1 {
                    let what = format!("ticket {ticket} was admitted with {in_flight} out, where {out} were before it");
                    return broke(f.at, what);
                }
                (out, limit) = (in_flight, now.max(1) as u64);
            }
            GateEvent::Answered { in_flight, signal } => {
                if out == 0 || in_flight != out - 1 {
                    return broke(f.at, format!("an answer left {in_flight} out, where {out} were before it"));
                }
                out = in_flight;
                let cut = guard.answered(signal, in_flight);
                let changes = matches!(facts.get(i + 1).map(|f| &f.event), Some(GateEvent::Changed { .. }));
                let (lo, hi) = cut_range(c, limit);
                if cut && !changes && !(lo..=hi).contains(&limit) {
                    let what = format!(
                        "a throttle cut the gate and left its limit at {limit}, where a cut leaves {lo} to {hi}"
                    );
                    return broke(f.at, what);
                }
                heard = Some((signal, cut));
            }
            GateEvent::Changed { limit: now, throttled, .. } => {
                let now = now as u64;
                match before {
                    None => return broke(f.at, format!("the limit {limit} became {now} with no answer just before")),
                    Some((Signal::Throttled, true)) => {
                        let (lo, hi) = cut_range(c, limit);
                        if !throttled || !(lo..=hi).contains(&now) {
                            let what = format!(
                                "a throttle cut the limit from {limit} to {now} (stated throttled: {throttled}), where β = {} of it leaves {lo} to {hi}",
                                c.backoff_per_mille
                            );
                            return broke(f.at, what);
                        }
                    }
                    Some((Signal::Success, _)) if !throttled => {}
                    Some((signal, _)) => {
                        let answer = match signal {
                            Signal::Throttled => {
                                let due = guard.due + 1;
                                let s = if due == 1 { "" } else { "s" };
                                format!("a throttle with {due} answer{s} still due from before the last cut")
                            }
                            Signal::Neutral => "an answer that says nothing of the load".to_owned(),
                            Signal::Success => "a success".to_owned(),
                        };
                        let what = format!(
                            "{answer} changed the gate (limit {limit} to {now}, stated throttled: {throttled}): only a cut lowers it"
                        );
                        return broke(f.at, what);
                    }
                }
                limit = now.max(1);
            }
            GateEvent::Queued { .. } | GateEvent::Left { .. } => {}
        }
    }
    None
}

/// For one AIMD gate's facts, gate-admits' second half: whenever its
/// window has room, the head of its queue goes out in the same instant
/// (an answer that frees a slot, or an admission, wakes the next in line
/// at once), or, under a pace, once the pace allows it: `1 / rate` after
/// the admission before it, at the rate that one went out under, give or
/// take `late` for the clock's resolution (`None`: a pace is not judged,
/// for a gate its owner may also hold). What held it, if anything did.
///
/// A gate that kept a ticket given up at its head, lost count of who
/// heads it, or paced slower than its rate stalls every job behind it
/// until their deadlines would pass, which the jobs' own checks accept.
pub(super) fn head_held(c: &AimdConfig, facts: &[GateFact], late: Option<Duration>) -> Option<String> {
    use std::collections::VecDeque;
    let mut queue = VecDeque::new();
    let mut limit = c.initial_limit.max(c.min_limit).max(1);
    let mut rate = (c.rate != RateControl::Off && c.initial_rate_milli > 0).then_some(c.initial_rate_milli as u64);
    let mut out = 0u32;
    // When the pace next allows an admission.
    let mut due = Duration::ZERO;
    for (i, f) in facts.iter().enumerate() {
        match f.event {
            GateEvent::Queued { ticket, .. } => queue.push_back(ticket),
            GateEvent::Admitted { ticket, in_flight, rate_milli, .. } => {
                queue.retain(|&t| t != ticket);
                out = in_flight;
                due = rate_milli.map_or(Duration::ZERO, |r| f.at + pace_interval(r));
            }
            GateEvent::Left { ticket } => queue.retain(|&t| t != ticket),
            GateEvent::Answered { in_flight, .. } => out = in_flight,
            GateEvent::Changed { limit: now, rate_milli, .. } => (limit, rate) = (now, rate_milli),
        }
        let next = facts.get(i + 1).map(|next| next.at);
        if next.is_some_and(|n| n == f.at) || out >= limit {
            continue;
        }
        let Some(head) = queue.front() else { continue };
        let held = match (rate, late) {
            (None, _) => true,
            (Some(_), Some(late)) => next.is_some_and(|n| n > f.at.max(due) + late),
            (Some(_), None) => false,
        };
        if held {
            let until = next.map_or("the end".to_owned(), |n| format!("{} ms", n.as_millis()));
            let pace =
                rate.map_or("no pace".to_owned(), |r| format!("a pace of {r} allowing it from {} ms", due.as_millis()));
            return Some(format!(
                "ticket {head} waited at the head of the queue from {} ms to {until} with {out} of {limit} slots out and {pace}",
                f.at.as_millis()
            ));
        }
    }
    None
}

/// The spacing of admissions at `rate_milli` milli-requests per second.
pub(super) fn pace_interval(rate_milli: u64) -> Duration {
    Duration::from_micros(1_000_000_000 / rate_milli.max(1))
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
pub(super) fn throttle_told(line: &str) -> bool {
    let (status, class) = told(line);
    class == Some("throttled") || (class == Some("unclear") && status == Some("429"))
}

/// The status and class words of a worker's `DONE <status> <class>` line.
pub(super) fn told(line: &str) -> (Option<&str>, Option<&str>) {
    let mut words = line.split_ascii_whitespace().skip(1);
    (words.next(), words.next())
}

/// Every answer a gate was told of by retrysim's traced clients (one per
/// attempt), `(ms, a rate-limit 429)`: by the server's status and code, not
/// the client's class.
pub(super) fn answers_told<'a>(records: impl Iterator<Item = &'a JobRecord>) -> Vec<(u64, bool)> {
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
pub(super) fn aimd_backs_off_one(
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
pub(super) fn aimd_gates(
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
pub(super) fn first_ticket_held(facts: &[GateFact]) -> Option<String> {
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
pub(super) struct SendRate {
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
pub(super) fn aimd_paces_one(
    c: crate::gate::aimd::AimdConfig,
    whose: &str,
    facts: &[GateFact],
) -> Option<FleetViolation> {
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
pub(super) fn aimd_grows_by_steps(c: crate::gate::aimd::AimdConfig, facts: &[GateFact]) -> Option<FleetViolation> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::aimd::{Controller, Readiness};

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_cut_keeps_beta_of_a_window_counted_in_thousandths() {
        let c = AimdConfig::default();
        // 10 slots (10.000 to 10.999) at β 0.7: 7.000 to 7.699.
        assert_eq!(cut_range(&c, 10), (7, 7));
        // 3 slots: 2.1 to 2.799; 1 slot: never below min_limit.
        assert_eq!(cut_range(&c, 3), (2, 2));
        assert_eq!(cut_range(&c, 1), (1, 1));
        // 9 slots at β 0.9: 8.1 to 8.999 slots.
        assert_eq!(cut_range(&AimdConfig { backoff_per_mille: 900, ..c }, 9), (8, 8));
        // 19 slots at β 0.9: 17.1 to 17.999 slots.
        assert_eq!(cut_range(&AimdConfig { backoff_per_mille: 900, ..c }, 19), (17, 17));
        // 4 slots at β 0.5: 2 to 2.4995.
        assert_eq!(cut_range(&AimdConfig { backoff_per_mille: 500, ..c }, 4), (2, 2));
        // 5 at 0.5: 2.5 to 2.9995; 7 at 0.7: 4.9 to 5.5993.
        assert_eq!(cut_range(&AimdConfig { backoff_per_mille: 500, ..c }, 5), (2, 2));
        assert_eq!(cut_range(&c, 7), (4, 5));
        // At max_limit the window is exactly its limit.
        assert_eq!(cut_range(&AimdConfig { max_limit: 7, ..c }, 7), (4, 4));
    }

    #[test]
    fn the_curve_matches_botocore_within_a_millisecond() {
        // botocore's test: W_max 10/s, β 0.7: K = ∛7.5 ≈ 1.957 s; back at
        // W_max after K, and 1 s past it 10.4/s.
        let curve = CubicCurve::after_throttle(10_000, 700, MS(1_000));
        let (lo, hi) = curve.range_at(MS(2_957));
        assert!(lo <= 10_000 && 10_000 <= hi && hi - lo < 10, "{lo}..{hi}");
        let (lo, hi) = curve.range_at(MS(3_957));
        assert!(lo <= 10_400 && 10_400 <= hi, "{lo}..{hi}");
        assert_eq!(CubicCurve::from_start(4_000).range_at(Duration::ZERO), (3_997, 4_003));
    }

    /// The facts an AIMD gate records, from its real controller: `n`
    /// attempts admitted at once, answered 1 ms apart with `signals`.
    fn burst(c: AimdConfig, signals: &[Signal]) -> Vec<GateFact> {
        let mut ctl = Controller::new(c);
        let mut facts = Vec::new();
        for ticket in 0..signals.len() as u64 {
            assert_eq!(ctl.readiness(MS(0)), Readiness::Now, "the window takes the whole burst");
            let (limit, rate_milli) = (ctl.limit(), ctl.rate_milli());
            ctl.admit(MS(0));
            let event = GateEvent::Admitted { ticket, in_flight: ctl.in_flight(), limit, rate_milli };
            facts.push(GateFact { at: MS(0), event });
        }
        for (i, &signal) in signals.iter().enumerate() {
            let at = MS(1 + i as u64);
            let changed = ctl.answer(at, signal);
            facts.push(GateFact { at, event: GateEvent::Answered { in_flight: ctl.in_flight(), signal } });
            if changed {
                let throttled = signal == Signal::Throttled;
                let event = GateEvent::Changed { limit: ctl.limit(), rate_milli: ctl.rate_milli(), throttled };
                facts.push(GateFact { at, event });
            }
        }
        facts
    }

    #[test]
    fn aimd_cuts_passes_the_controller_and_catches_each_rule_broken() {
        use Signal::{Neutral, Success, Throttled};
        let c = AimdConfig { initial_limit: 10, ..AimdConfig::default() };
        // Ten out, three throttles: the first cuts 10 to 7 and the other two
        // are due from before it; then a neutral answer and six successes.
        let signals = [Throttled, Throttled, Throttled, Neutral, Success, Success, Success, Success, Success, Success];
        let facts = burst(c, &signals);
        assert_eq!(aimd_cuts_one(&c, "g", &facts), None);
        let cut = |f: &GateFact| matches!(f.event, GateEvent::Changed { throttled: true, .. });
        assert_eq!(facts.iter().filter(|f| cut(f)).count(), 1, "{facts:?}");
        let judged = |edit: &dyn Fn(&mut Vec<GateFact>)| {
            let mut f = facts.clone();
            edit(&mut f);
            aimd_cuts_one(&c, "g", &f).unwrap_or_default()
        };
        // The second throttle cutting again (a gate that cuts on every
        // throttle of a burst).
        let twice = judged(&|f| {
            let i = f.iter().rposition(|f| matches!(f.event, GateEvent::Answered { signal: Throttled, .. })).unwrap();
            let event = GateEvent::Changed { limit: 4, rate_milli: Some(500), throttled: true };
            f.insert(i + 1, GateFact { at: f[i].at, event });
        });
        assert!(twice.contains("a throttle with 8 answers still due from before the last cut changed"), "{twice}");
        // The cut to 1 where β leaves 7.
        let deep = judged(&|f| {
            let i = f.iter().position(cut).unwrap();
            f[i].event = GateEvent::Changed { limit: 1, rate_milli: Some(500), throttled: true };
        });
        assert!(deep.contains("cut the limit from 10 to 1") && deep.contains("leaves 7 to 7"), "{deep}");
        // The cut not recorded while the limit stayed at 10.
        let missed = judged(&|f| f.retain(|f| !cut(f)));
        assert!(missed.contains("left its limit at 10, where a cut leaves 7 to 7"), "{missed}");
        // An answer that counts nothing off, an admission that counts two.
        let kept = judged(&|f| {
            let i = f.iter().position(|f| matches!(f.event, GateEvent::Answered { .. })).unwrap();
            f[i].event = GateEvent::Answered { in_flight: 10, signal: Throttled };
        });
        assert!(kept.contains("an answer left 10 out, where 10 were before it"), "{kept}");
        let two =
            judged(&|f| f[1].event = GateEvent::Admitted { ticket: 1, in_flight: 3, limit: 10, rate_milli: None });
        assert!(two.contains("ticket 1 was admitted with 3 out, where 1 were before it"), "{two}");
        // A change with no answer before it.
        let unexplained = judged(&|f| {
            let event = GateEvent::Changed { limit: 9, rate_milli: None, throttled: false };
            f.insert(1, GateFact { at: MS(0), event });
        });
        assert!(unexplained.contains("the limit 10 became 9 with no answer just before"), "{unexplained}");
    }

    #[test]
    fn a_head_held_with_room_is_caught_and_one_the_pace_holds_is_not() {
        let fact = |at: u64, event| GateFact { at: MS(at), event };
        let queued = |at, ticket| fact(at, GateEvent::Queued { ticket, depth: 1 });
        let admitted = |at, ticket, in_flight, rate_milli| {
            fact(at, GateEvent::Admitted { ticket, in_flight, limit: 2, rate_milli })
        };
        let answered = |at, in_flight| fact(at, GateEvent::Answered { in_flight, signal: Signal::Success });
        let late = Some(MS(2));
        let c = AimdConfig { initial_limit: 2, rate: RateControl::Off, ..AimdConfig::default() };
        // Two out, a third waits for an answer and goes out with it.
        let honest = [
            queued(0, 0),
            admitted(0, 0, 1, None),
            queued(0, 1),
            admitted(0, 1, 2, None),
            queued(1, 2),
            answered(5, 1),
            admitted(5, 2, 2, None),
        ];
        assert_eq!(head_held(&c, &honest, late), None);
        // The same third admitted a millisecond after the slot freed.
        let mut slow = honest.to_vec();
        slow[6].at = MS(6);
        let held = head_held(&c, &slow, late).unwrap_or_default();
        assert!(
            held.contains("ticket 2 waited at the head of the queue from 5 ms to 6 ms with 1 of 2 slots out"),
            "{held}"
        );
        // Paced at 1/s from the start: the second may wait a second, not more.
        let paced = AimdConfig { initial_rate_milli: 1_000, rate: RateControl::Aimd, ..c };
        let rate = Some(1_000);
        let on_time = [queued(0, 0), admitted(0, 0, 1, rate), queued(1, 1), admitted(1_002, 1, 1, rate)];
        assert_eq!(head_held(&paced, &on_time, late), None);
        let mut behind = on_time.to_vec();
        behind[3].at = MS(1_003);
        let held = head_held(&paced, &behind, late).unwrap_or_default();
        assert!(held.contains("a pace of 1000 allowing it from 1000 ms"), "{held}");
        assert_eq!(head_held(&paced, &behind, None), None, "a pace its owner may hold is not judged");
    }
}
