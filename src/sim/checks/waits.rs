//! Checks that a planned wait is no longer than the declared policy allows,
//! no shorter than it asks, and that the spread on an advice is drawn at
//! all. advice-respected and the zero-advice floor bound a wait from below
//! by the advice alone; these close the range from both sides, by the whole
//! declared policy, and against a spread that never varies:
//!
//! - `wait-upper-bound`: every wait a traced client plans is at most the
//!   longest its declared policy may plan there: after an advice, the advice
//!   (in `max_of_advice_and_backoff` mode, or the larger backoff window), on a
//!   throttled answer after the first the escalated advice (a second per
//!   refusal for an advice in whole seconds) or the escalation's backoff
//!   window, whichever is longer, plus the spread's cap for that advice;
//!   without an advice, the backoff window of that retry; and never more
//!   than what the deadline leaves after `min_attempt_time` (1 ms of
//!   truncation).
//! - `advice-spread-drawn`: over one run of a scenario, the waits planned on
//!   a non-zero advice taken as it is (`advice_plus_spread`, no escalation)
//!   with a declared spread whose cap is at least 2 ms are not all the advice
//!   exactly (to the millisecond). An honest spread rounds down to the advice
//!   on one such wait with a chance of at most 2 ms over its cap; the check
//!   fails only when all of them did and that was less likely than one in a
//!   billion. And of those on one cap, 34 or more are not all under half of
//!   it: an honest spread stays under half its cap with a chance of at most
//!   one half each (a spread narrower than declared stays there always).
//! - `backoff-floor` and `wait-lower-bound`: every wait a traced client
//!   plans is at least the shortest its declared policy may plan there. On
//!   the backoff alone (no advice read, `backoff-floor`): the shortest draw
//!   of the declared jitter, the whole window without jitter, half of it
//!   with equal jitter, `min(base, cap)` with decorrelated jitter, nothing
//!   with full jitter. After an advice (`wait-lower-bound`): the advice as
//!   the trace shows it (its lowest reading); in `max_of_advice_and_backoff`
//!   mode the backoff's shortest draw for that retry if longer; on a
//!   throttled answer after the first (with `escalate`) also the advice plus
//!   a second per such refusal when a header gave it in whole seconds, and
//!   the backoff's shortest draw for the escalation's retry. The spread adds
//!   nothing to a floor (it may draw zero). No deadline exception: `decide`
//!   gives up rather than shortens a wait.
//!
//!   One rule (`shortest_ms`) under two names: the finding says which
//!   part of the policy the client cut short, and `backoff-floor` keeps the
//!   name and the findings it had before the floor covered advised waits
//!   (the mutants' record in docs/guide/hunting.md cites it). A separate
//!   check beside it would have repeated the walk and the backoff's floor.
//!
//! The bounds are written out here from the specification (docs/DESIGN.md:
//! "Backoff", "Retry-After") over the declared [`Policy`]'s public fields,
//! not computed by `Backoff::window`, `Backoff::wait` or `Spread::cap`,
//! which the client itself calls: a slip there shows up as a difference.
//! All four apply to a traced client and blame it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::backoff::{AdviceMode, Backoff, Jitter, Spread};
use crate::core::classify::Class;
use crate::core::policy::Policy;
use crate::core::retry_after::AdviceSource;
use crate::sim::checks::careful::{runs_with_policy, spread_cap_ns, whole_seconds};
use crate::sim::checks::registry::{FleetViolation, Property};
use crate::sim::run::job::JobRecord;
use crate::sim::run::runner::Report;
use crate::trace::{EventKind, Millis};

const MS: u128 = 1_000_000;
const SECOND: u128 = 1_000 * MS;

/// The product of `cap / 2 ms` over the waits on which a spread rounded to
/// the advice, past which that is called not drawn: a chance under 10^-9.
const NOT_DRAWN_ODDS: u128 = 1_000_000_000;

fn nanos(d: Duration) -> u128 {
    d.as_nanos()
}

/// The backoff window of retry `n` (from 0): `min(cap, base * 2^n)`.
pub(crate) fn window_ns(b: &Backoff, n: u32) -> u128 {
    let (base, cap) = (nanos(b.base), nanos(b.cap));
    if base == 0 {
        return 0;
    }
    // base < 2^94, so base * 2^n fits a u128 below n = 34; beyond, it is past any cap.
    if n >= 34 { cap } else { (base << n).min(cap) }
}

/// The longest backoff draw for retry `n`: the window itself for no, full
/// and equal jitter; `min(cap, 3 * max(previous, base))` for decorrelated
/// jitter, which draws from `[base, 3 * previous wait]`.
fn backoff_ns(b: &Backoff, n: u32, previous: Option<u128>) -> u128 {
    match b.jitter {
        Jitter::None | Jitter::Full | Jitter::Equal => window_ns(b, n),
        Jitter::Decorrelated => {
            let base = nanos(b.base);
            let prev = previous.unwrap_or(base).max(base);
            prev.saturating_mul(3).max(base).min(nanos(b.cap))
        }
    }
}

/// The shortest backoff draw for retry `n`: the window itself without
/// jitter, half of it with equal jitter, `min(base, cap)` with decorrelated
/// jitter, nothing with full jitter.
fn backoff_floor_ns(b: &Backoff, n: u32) -> u128 {
    match b.jitter {
        Jitter::None => window_ns(b, n),
        Jitter::Equal => window_ns(b, n) / 2,
        Jitter::Decorrelated => nanos(b.base).min(nanos(b.cap)),
        Jitter::Full => 0,
    }
}

/// The advice an answer carried, as the trace shows it (whole milliseconds,
/// truncated), read as the specification reads its source.
#[derive(Debug, Clone, Copy)]
struct Read {
    /// The trace's whole milliseconds.
    ms: u128,
    /// The largest the advice may have been: exact for a header's whole
    /// seconds, up to a millisecond more for a body's value.
    hi_ns: u128,
    /// Whether the source may be whole seconds (a header, or a body's
    /// `retry_after_seconds`): its zero gets the cover, its escalation a second.
    whole_seconds: bool,
    /// Whether it surely is whole seconds (a header: delta-seconds or a
    /// date): a body's `retry_after_seconds` may be fractional, and its
    /// whole milliseconds in the trace do not tell, so a floor counts no
    /// escalation second for it.
    header: bool,
    /// Whether the advice is an upper bound (OpenAI's reset "to the initial
    /// state"): the policy waits its backoff cut to it, with no spread and no
    /// escalation, so it bounds a wait from above only.
    bound: bool,
    source: AdviceSource,
}

impl Read {
    fn of(ms: Millis, source: AdviceSource) -> Read {
        let (whole_seconds, exact) = whole_seconds(source, ms.0);
        let hi_ns = ms.0.saturating_mul(MS).saturating_add(if exact { 0 } else { MS - 1 });
        Read { ms: ms.0, hi_ns, whole_seconds, header: exact, bound: source.is_upper_bound(), source }
    }

    /// The spread's largest cap for this advice: a zero in whole seconds
    /// gets the cover, and a body's zero may also be under a millisecond.
    fn spread_cap(&self, s: &Spread) -> u128 {
        let cover = if self.whole_seconds && self.ms == 0 { spread_cap_ns(s, 0, true) } else { 0 };
        spread_cap_ns(s, self.hi_ns, false).max(cover)
    }
}

/// Where a run stands at one of its waits, from its trace.
struct At {
    /// Attempts made, this one included.
    attempts: u32,
    /// Throttled answers so far, this one included (the client's reading).
    throttled: u32,
    /// The class of the last answer, if there was one.
    class: Option<Class>,
    /// The advice of the last answer, if the policy reads advice and it had one.
    advice: Option<Read>,
    /// An upper bound on the wait instead (an OpenAI reset "to the initial
    /// state"), whole milliseconds as the trace shows it: the client waits
    /// its backoff, cut to it (docs/DESIGN.md, "Rate-limit dialects").
    bound_ms: Option<u128>,
    /// The previous wait, for decorrelated jitter.
    previous: Option<u128>,
}

/// Whether `p` escalates at `at`: a throttled answer after the first,
/// unless its advice is an upper bound (which never escalates).
fn escalates(p: &Policy, at: &At) -> bool {
    p.escalate && at.class == Some(Class::Throttled) && at.throttled >= 2 && !at.advice.is_some_and(|a| a.bound)
}

/// The longest wait `p` may plan at `at`, in whole milliseconds, and how
/// it is made, in words.
fn longest_ms(p: &Policy, at: &At) -> (u128, String) {
    let retry = at.attempts.saturating_sub(1);
    let backoff = backoff_ns(&p.backoff, retry, at.previous);
    let Some(a) = at.advice.filter(|a| !a.bound) else {
        // An upper bound only cuts the backoff: no longer than its draw.
        return (backoff.div_ceil(MS), format!("the backoff's longest draw for retry {retry}"));
    };
    let mut base = a.hi_ns;
    let mut how = format!("the advice ({:?})", a.source);
    if p.advice_mode == AdviceMode::MaxOfAdviceAndBackoff && backoff > base {
        base = backoff;
        how = format!("the backoff's longest draw for retry {retry}");
    }
    if escalates(p, at) {
        let k = at.throttled - 2;
        let rounding = if a.whole_seconds { SECOND * (u128::from(k) + 1) } else { 0 };
        let again = a.hi_ns.saturating_add(rounding).max(backoff_ns(&p.backoff, k, at.previous));
        if again > base {
            base = again;
            how = format!("the advice escalated for refusal {} (its backoff for retry {k} included)", k + 1);
        }
    }
    let spread = a.spread_cap(&p.spread);
    (base.div_ceil(MS) + spread / MS, format!("{how} plus the spread's cap {} ms", spread / MS))
}

/// The shortest wait `p` may plan at `at`, in whole milliseconds, and how
/// it is made, in words.
///
/// Rounding: `decide` plans `ceil_ms(base) + floor_ms(spread)`, whole
/// milliseconds, and the trace's wait is that exactly; so a wait is at
/// least `ceil_ms` of any lower bound on the base, and the bound here is
/// `div_ceil` of one in nanoseconds, no slack. The one truncation the trace
/// brings is the advice's: it shows the whole milliseconds of an advice
/// that may have had more, so the advice's lowest reading is those
/// milliseconds exactly (a header's value is exact anyway).
fn shortest_ms(p: &Policy, at: &At) -> (u128, String) {
    let retry = at.attempts.saturating_sub(1);
    let backoff = backoff_floor_ns(&p.backoff, retry);
    let jitter = p.backoff.jitter;
    let Some(a) = at.advice else {
        if let Some(bound) = at.bound_ms.filter(|b| b * MS < backoff) {
            return (
                bound,
                format!("the server's upper bound, under what {jitter:?} jitter keeps of retry {retry}'s window"),
            );
        }
        return (backoff.div_ceil(MS), format!("{jitter:?} jitter keeps of retry {retry}'s window"));
    };
    if a.bound {
        // The backoff cut to the bound: the shorter of its shortest draw and the bound.
        let cut = backoff.min(a.ms * MS);
        return (cut.div_ceil(MS), format!("{jitter:?} jitter keeps of retry {retry}'s window, cut to the bound"));
    }
    let mut base = a.ms * MS;
    let mut how = format!("the advice ({:?}) as read", a.source);
    if p.advice_mode == AdviceMode::MaxOfAdviceAndBackoff && backoff > base {
        base = backoff;
        how = format!("the backoff's shortest draw for retry {retry} ({jitter:?} jitter), longer than the advice");
    }
    if escalates(p, at) {
        let k = at.throttled - 2;
        let rounding = if a.header { SECOND * (u128::from(k) + 1) } else { 0 };
        let again = (a.ms * MS + rounding).max(backoff_floor_ns(&p.backoff, k));
        if again > base {
            base = again;
            how = format!(
                "the advice escalated for refusal {} ({} s added for a header's whole seconds; the backoff's shortest draw for retry {k} included)",
                k + 1,
                rounding / SECOND
            );
        }
    }
    (base.div_ceil(MS), how)
}

/// Every wait-upper-bound, backoff-floor, wait-lower-bound and advice-spread-drawn finding of a traced run
/// (none for an untraced one).
pub fn check_waits(r: &Report) -> Vec<FleetViolation> {
    let mut out = Vec::new();
    if !r.traced {
        return out;
    }
    let mut spread = SpreadTally::default();
    for (j, p) in runs_with_policy(r) {
        walk(j, p, &mut out, &mut spread);
    }
    spread.verdict(&mut out);
    out
}

/// Waits on one spread cap, each of which an honest spread leaves in the
/// cap's lower half with a chance of at most one half, past which all of
/// them there is called a spread that does not reach its cap: 2^-34, a
/// chance under 10^-10.
const REACH_WAITS: u32 = 34;

/// The waits on a non-zero advice taken as it is, across one report.
#[derive(Default)]
struct SpreadTally {
    /// Waits counted.
    waits: u32,
    /// Whether one was longer than its advice (the spread drawn).
    drawn: bool,
    /// The product of `cap / 2 ms` over them, saturating.
    odds: u128,
    /// The first, for the message.
    first: Option<String>,
    /// Per spread cap (whole ms): the waits on it, and the first whose
    /// spread reached half the cap (none yet: the first wait, for the message).
    halves: BTreeMap<u128, (u32, Result<(), String>)>,
}

impl SpreadTally {
    fn count(&mut self, j: &JobRecord, p: &Policy, at: &At, wait_ms: u64, at_ms: u64) {
        let Some(a) = at.advice else { return };
        if a.ms == 0 || a.bound || p.advice_mode != AdviceMode::AdvicePlusSpread || escalates(p, at) {
            return;
        }
        let cap_ms = spread_cap_ns(&p.spread, a.ms * MS, a.whole_seconds) / MS;
        if cap_ms < 2 {
            return;
        }
        if u128::from(wait_ms) > a.ms + 1 {
            self.drawn = true;
        }
        // The spread drawn, at least: the base is the advice rounded up.
        let spread_ms = u128::from(wait_ms).saturating_sub(a.ms);
        let half = self.halves.entry(cap_ms).or_insert_with(|| {
            (0, Err(format!("the first, job {} at {at_ms} ms: advice {} ms, wait {wait_ms} ms", j.job, a.ms)))
        });
        half.0 += 1;
        if spread_ms >= cap_ms / 2 {
            half.1 = Ok(());
        }
        self.odds = if self.waits == 0 { cap_ms / 2 } else { self.odds.saturating_mul(cap_ms / 2) };
        self.waits += 1;
        self.first.get_or_insert_with(|| {
            format!(
                "the first, job {} at {at_ms} ms: advice {} ms, wait {wait_ms} ms, spread cap {cap_ms} ms under the declared policy {}",
                j.job, a.ms, p.name
            )
        });
    }

    fn verdict(self, out: &mut Vec<FleetViolation>) {
        let short = self.halves.iter().find(|(_, (n, reached))| *n >= REACH_WAITS && reached.is_err());
        if let Some((cap_ms, (n, Err(first)))) = short {
            out.push(FleetViolation {
                check: Property::AdviceSpreadDrawn,
                message: format!(
                    "blames the client: each of the {n} waits planned on a non-zero advice whose declared spread reaches {cap_ms} ms drew under half of it ({first}); a spread drawn up to its cap does that with a chance under one in 2^{REACH_WAITS}"
                ),
            });
        }
        if self.drawn || self.waits == 0 || self.odds <= NOT_DRAWN_ODDS {
            return;
        }
        out.push(FleetViolation {
            check: Property::AdviceSpreadDrawn,
            message: format!(
                "blames the client: each of the {} waits planned on a non-zero advice with the declared spread on was the advice to the millisecond ({}); a drawn spread does that with a chance under one in {}",
                self.waits,
                self.first.unwrap_or_default(),
                NOT_DRAWN_ODDS
            ),
        });
    }
}

/// Reads one run's trace: bounds each wait (`wait-upper-bound`,
/// `backoff-floor` and `wait-lower-bound`, the first breach of each only)
/// and counts it for the spread.
fn walk(j: &JobRecord, p: &Policy, out: &mut Vec<FleetViolation>, spread: &mut SpreadTally) {
    let mut at = At { attempts: 0, throttled: 0, class: None, advice: None, bound_ms: None, previous: None };
    let deadline_end = u128::from(j.started_ms) + nanos(p.deadline).div_ceil(MS);
    let reserve = nanos(p.min_attempt_time) / MS;
    let (mut reported, mut floored, mut lowered) = (false, false, false);
    for e in &j.trace.events {
        match &e.kind {
            EventKind::Attempt { .. } => at.attempts += 1,
            EventKind::Answer { class, advice, .. } => {
                at.throttled += u32::from(*class == Class::Throttled);
                at.class = Some(*class);
                let read = advice.wait_ms.filter(|_| p.use_advice);
                let bound = advice.source.is_upper_bound();
                at.advice = read.filter(|_| !bound).map(|ms| Read::of(ms, advice.source));
                at.bound_ms = read.filter(|_| bound).map(|ms| ms.0);
            }
            EventKind::NoAnswer { class, .. } => (at.class, at.advice, at.bound_ms) = (Some(*class), None, None),
            EventKind::Wait { ms, .. } => {
                spread.count(j, p, &at, *ms, e.at_ms);
                let (policy, how) = longest_ms(p, &at);
                let left = (deadline_end + 1).saturating_sub(u128::from(e.at_ms) + reserve);
                let bound = policy.min(left);
                if u128::from(*ms) > bound && !reported {
                    reported = true;
                    let why = if bound == policy {
                        how
                    } else {
                        format!("what the deadline leaves after {reserve} ms for the attempt")
                    };
                    out.push(FleetViolation {
                        check: Property::WaitUpperBound,
                        message: format!(
                            "blames the client: job {} planned a {ms} ms wait at {} ms after attempt {}, over the {bound} ms the declared policy {} may plan there: {why}",
                            j.job, e.at_ms, at.attempts, p.name
                        ),
                    });
                }
                let done = if at.advice.is_none() { &mut floored } else { &mut lowered };
                if !*done {
                    *done = floor(j, p, &at, *ms, e.at_ms, out);
                }
                at.previous = Some(u128::from(*ms) * MS);
            }
            _ => {}
        }
    }
}

/// `backoff-floor` (a wait planned on the backoff alone, no advice read)
/// or `wait-lower-bound` (a wait after an advice) for one wait: at least
/// [`shortest_ms`]. Whether it reported one.
fn floor(j: &JobRecord, p: &Policy, at: &At, wait_ms: u64, at_ms: u64, out: &mut Vec<FleetViolation>) -> bool {
    let (floor, how) = shortest_ms(p, at);
    if u128::from(wait_ms) >= floor {
        return false;
    }
    let (job, n, name) = (j.job, at.attempts, &p.name);
    out.push(match at.advice {
        None => FleetViolation {
            check: Property::BackoffFloor,
            message: format!(
                "blames the client: job {job} planned a {wait_ms} ms wait on the backoff alone at {at_ms} ms after attempt {n}, under the {floor} ms that the declared policy {name}'s {how}"
            ),
        },
        Some(_) => FleetViolation {
            check: Property::WaitLowerBound,
            message: format!(
                "blames the client: job {job} planned a {wait_ms} ms wait after an advice at {at_ms} ms after attempt {n}, under the {floor} ms the declared policy {name} plans there at the shortest: {how}"
            ),
        },
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn the_specification_numbers() {
        let b = Backoff { base: D(100), cap: D(1000), jitter: Jitter::Full };
        let w: Vec<u128> = (0..6).map(|n| window_ns(&b, n) / MS).collect();
        assert_eq!(w, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(window_ns(&b, u32::MAX) / MS, 1000);
        let huge = Backoff { base: Duration::MAX, cap: Duration::MAX, jitter: Jitter::None };
        assert_eq!(window_ns(&huge, 40), nanos(Duration::MAX));
        let d = Backoff { jitter: Jitter::Decorrelated, ..b };
        assert_eq!(backoff_ns(&d, 0, None) / MS, 300);
        assert_eq!(backoff_ns(&d, 0, Some(200 * MS)) / MS, 600);
        assert_eq!(backoff_ns(&d, 0, Some(900 * MS)) / MS, 1000);
        assert_eq!(backoff_floor_ns(&b, 2) / MS, 0);
        assert_eq!(backoff_floor_ns(&Backoff { jitter: Jitter::Equal, ..b }, 2) / MS, 200);
        assert_eq!(backoff_floor_ns(&Backoff { jitter: Jitter::None, ..b }, 2) / MS, 400);
        assert_eq!(backoff_floor_ns(&d, 5) / MS, 100);
        let s = Spread::default();
        assert_eq!(spread_cap_ns(&s, 2000 * MS, true) / MS, 400);
        assert_eq!(spread_cap_ns(&s, 0, false) / MS, 100);
        assert_eq!(spread_cap_ns(&s, 0, true) / MS, 1000);
        assert_eq!(spread_cap_ns(&s, 60_000 * MS, true) / MS, 1000);
        let inverted = Spread { min: D(300), max: D(200), ..s };
        assert_eq!(spread_cap_ns(&inverted, 0, false) / MS, 300);
    }

    fn at(attempts: u32, throttled: u32, advice: Option<(u64, AdviceSource)>) -> At {
        let class = Some(if throttled > 0 { Class::Throttled } else { Class::Transient });
        let advice = advice.map(|(ms, source)| Read::of(Millis(u128::from(ms)), source));
        At { attempts, throttled, class, advice, bound_ms: None, previous: Some(9_000 * MS) }
    }

    /// The floors, by hand, on a backoff of 100 ms doubling to 1 s.
    #[test]
    fn the_shortest_waits() {
        let floor = |p: &Policy, at: &At| shortest_ms(p, at).0;
        let b = Backoff { base: D(100), cap: D(1000), jitter: Jitter::Equal };
        let mut p =
            Policy { backoff: b, advice_mode: AdviceMode::AdvicePlusSpread, escalate: true, ..Policy::standard() };
        // The backoff alone: half of retry 3's 800 ms window; 0 with full
        // jitter; the base (not 3 * the previous 9 s, nor the cap) with
        // decorrelated jitter, and the cap where it is under the base.
        assert_eq!(floor(&p, &at(4, 0, None)), 400);
        p.backoff.jitter = Jitter::Full;
        assert_eq!(floor(&p, &at(4, 0, None)), 0);
        p.backoff.jitter = Jitter::Decorrelated;
        assert_eq!(floor(&p, &at(4, 0, None)), 100);
        p.backoff = Backoff { base: D(2000), cap: D(1500), ..p.backoff };
        assert_eq!(floor(&p, &at(4, 0, None)), 1500);
        // An odd window in nanoseconds: half of it rounds up to the next millisecond.
        p.backoff = Backoff { base: Duration::from_nanos(1_000_001), cap: D(1000), jitter: Jitter::None };
        assert_eq!(floor(&p, &at(1, 0, None)), 2);
        p.backoff = Backoff { base: D(100), cap: D(1000), jitter: Jitter::None };
        // An advice, read as the trace shows it: the advice alone, whatever the backoff.
        let header = Some((250, AdviceSource::HeaderSeconds));
        assert_eq!(floor(&p, &at(4, 1, header)), 250);
        // Max-of: retry 3's 800 ms window when longer than the advice.
        p.advice_mode = AdviceMode::MaxOfAdviceAndBackoff;
        assert_eq!(floor(&p, &at(4, 1, header)), 800);
        assert_eq!(floor(&p, &at(2, 1, header)), 250);
        // Escalation (the third throttled answer: k = 1): the advice plus two
        // seconds for a header; no second for a body's value, only the
        // backoff of retry 1 (200 ms) and the max-of rule (retry 3: 800 ms).
        assert_eq!(floor(&p, &at(4, 3, header)), 2250);
        assert_eq!(floor(&p, &at(4, 3, Some((250, AdviceSource::BodySeconds)))), 800);
        p.advice_mode = AdviceMode::AdvicePlusSpread;
        assert_eq!(floor(&p, &at(4, 3, Some((150, AdviceSource::BodyReset)))), 200);
        // Not on the first throttled answer, nor without escalation.
        assert_eq!(floor(&p, &at(4, 1, header)), 250);
        p.escalate = false;
        assert_eq!(floor(&p, &at(4, 3, header)), 250);
    }

    /// An upper bound (OpenAI's reset): the backoff's floor, or the bound
    /// when that is shorter; the longest is the backoff's window, and a
    /// dialect's whole seconds escalate like `Retry-After`'s.
    #[test]
    fn an_upper_bound_lowers_the_floor_and_whole_second_dialects_escalate() {
        let floor = |p: &Policy, at: &At| shortest_ms(p, at).0;
        let b = Backoff { base: D(100), cap: D(1000), jitter: Jitter::None };
        let p = Policy { backoff: b, advice_mode: AdviceMode::AdvicePlusSpread, escalate: true, ..Policy::standard() };
        let bounded = |ms| At { bound_ms: Some(ms), ..at(4, 1, None) };
        assert_eq!(floor(&p, &bounded(300)), 300, "under retry 3's 800 ms window");
        assert_eq!(floor(&p, &bounded(5000)), 800);
        assert_eq!(longest_ms(&p, &bounded(300)).0, 800);
        let field = Some((250, AdviceSource::RateLimitField));
        assert_eq!(floor(&p, &at(4, 3, field)), 2250, "two seconds added as for a header");
        assert_eq!(floor(&p, &at(4, 3, Some((250, AdviceSource::RetryAfterMs)))), 250);
    }
}
