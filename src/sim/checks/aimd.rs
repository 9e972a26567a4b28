//! An AIMD gate judged from its own facts by the rules of `gate::aimd`'s
//! module doc, written again here from that text rather than by calling
//! the gate's `Controller`: how many attempts are out, which throttle cuts
//! and how deep, how a paced rate moves (a `cubic` pace along botocore's
//! curve), and when the head of the queue must go out. The fleet checks
//! (`src/sim/checks/fleet.rs`) run these rules on every AIMD gate
//! (aimd-cuts, aimd-pace, gate-admits).

use std::time::Duration;

use crate::gate::aimd::{AimdConfig, GateEvent, GateFact, RateControl, Signal};

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
