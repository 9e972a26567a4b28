//! `jitter-spread`: the waits a fleet drew are spread as the declared
//! jitter spreads them. The bounds on waits (`waits`) judge each wait
//! alone against its range; a backoff whose draw collapsed (the same
//! fraction of the window every time, the same draw in every worker, a
//! handful of values, equal jitter where full is declared) keeps every wait
//! in its range and retries a fleet in lockstep all the same. This check
//! tests the waits of one run together against the distribution the client
//! declared.
//!
//! # Whom it judges
//!
//! A traced client with a declared [`Policy`] (retrysim's own: the scenario's
//! policy, a deferred job's background runs the background policy's), and a
//! black-box [`Subject`](crate::testing::Subject) that declares its backoff
//! in its [`Promises`](crate::testing::Promises) (full or equal jitter, read
//! from the server's ledger with cells widened by the network's latency:
//! [`subject`]). A client that declares no jitter is not judged. A traced
//! client's waits judged are those made of one uniform draw the declared
//! policy names exactly:
//!
//! - on the backoff alone (no advice read): full jitter draws
//!   `uniform[0, W]` of retry `n`'s window `W = min(cap, base * 2^n)`, equal
//!   jitter `W/2 + uniform[0, W - W/2]`, decorrelated jitter
//!   `base + uniform[0, 3 * max(previous, base) - base]` (only where that top is
//!   at most the cap, so no draw is cut to it); no jitter draws nothing;
//! - on an advice taken as it is (`advice_plus_spread`, not an escalation,
//!   not an upper bound): the spread `uniform[0, cap(advice)]` (a zero
//!   advice in a header's whole seconds: `1 ms + uniform[0, cap - 1 ms]`).
//!
//! Each wait is then the probability integral transform of its draw: the
//! draw `V` of the core's `uniform` (`floor((max + 1) * V)` nanoseconds,
//! `V = draw / 2^64`) lies in an interval (its *cell*) that the trace's
//! whole milliseconds determine; the rounding of the core (a backoff's
//! base rounded up, a spread down, to whole milliseconds) and of the trace
//! (an advice from a body may have had up to a millisecond more) widen the
//! cell, never move it. Under the declared jitter every `V` is uniform on
//! `[0, 1)` (to 2^-64) and independent of everything that came before its
//! draw, so a rule that picks waits by what is known before the draw (the
//! window, the advice) picks independent `U(0, 1)`
//! draws (optional skipping): comparable retries (same retry index and
//! window, same advice and spread) pool, and so do the incomparable ones.
//! The deadline selects by the draw itself (`decide` gives up rather than
//! plan a wait that, with `min_attempt_time`, passes what the deadline
//! leaves): a backoff's draw that fitted is uniform under the top of the
//! longest cell that fits, so its cell is scaled by that top (known to the
//! millisecond the trace's clock leaves unsure, which widens the cell); a
//! spread the deadline may have cut is not counted. Nor is a wait outside
//! its declared range (the bounds' finding, not this one's).
//!
//! # The statistics and the false-alarm rate
//!
//! The false-alarm rate was fixed before any tuning: **α = 10⁻⁶ per run**,
//! so an honest 100,000-seed hunt raises about 0.1 findings. It is split
//! by Bonferroni: α/4 over four Kolmogorov–Smirnov tests and α/4 over four
//! lowest-draw tests (one of each per kind of draw: full, equal,
//! decorrelated, spread; α/16 each), and α/2 to one few-values test over
//! every cell of the run.
//!
//! - **Kolmogorov–Smirnov on cells.** With `G_hi(x)` the share of cells
//!   whose top is at most `x` and `G_lo(x)` the share whose bottom is,
//!   `T = max(sup (G_hi(x) - x), sup (x - G_lo(x)))` is at most the KS
//!   distance of the true draws (whatever they are inside their cells), so
//!   `P(T > ε) ≤ 2 exp(-2 n ε²)` (Dvoretzky–Kiefer–Wolfowitz with Massart's
//!   constant, exact for every `n`). The check fails when `T > ε` with
//!   `ε = sqrt(ln(2 / (α/16)) / (2 n))`; nothing is judged under
//!   [`KS_MIN`] draws of a kind. Catches a constant fraction, equal jitter
//!   declared as full (no draw under half the window), and any draw whose
//!   shape is not flat.
//! - **Lowest draw.** No draw of `n` under `m` has a chance of
//!   `(1 - m)^n`; with `m` the lowest cell's bottom it fails when that is
//!   under α/16. Catches a draw kept off the bottom of its range sooner
//!   than the KS test (equal jitter declared as full: 24 draws, not 34).
//! - **Few values.** `d` is the fewest points that hit every cell (greedy
//!   on the tops, which is optimal for intervals). If `d` points hit all
//!   `n` cells, they can be taken among the cells' tops: for one choice `S`
//!   of `d` cells, each other cell (independent of them) holds one of the
//!   points with a chance of at most `2 d w_i` (`w_i` its width: a point
//!   can touch two neighbouring cells of its grid). So
//!   `P(d or fewer) ≤ C(n, d) · Π (2 d w_i)` over the `n - d` widest other
//!   cells (each term at most 1). The check fails when that bound is under
//!   α/2; nothing is judged under [`FEW_MIN`] cells. Catches the same draw
//!   in every worker (the fleet's cells fall on a few points, one per draw
//!   of the shared sequence), a handful of possible values, and a constant
//!   fraction again.
//!
//! Both are exact bounds (no asymptotics, no random numbers): the stated α
//! holds at every sample size. Both blame the client.

use crate::core::backoff::{AdviceMode, Jitter, Spread};
use crate::core::classify::Class;
use crate::core::policy::Policy;
use crate::core::retry_after::AdviceSource;
use crate::sim::checks::careful::{runs_with_policy, spread_cap_ns, whole_seconds};
use crate::sim::checks::registry::{FleetViolation, Property};
use crate::sim::checks::waits::window_ns;
use crate::sim::run::job::JobRecord;
use crate::sim::run::runner::Report;
use crate::trace::EventKind;

const MS: u128 = 1_000_000;

/// The false-alarm rate of the check per run, fixed before tuning.
pub const ALPHA: f64 = 1e-6;
/// Each Kolmogorov–Smirnov test's share of [`ALPHA`]: a quarter of it over the four kinds.
const KS_ALPHA: f64 = ALPHA / 16.0;
/// Each lowest-draw test's share of [`ALPHA`]: a quarter of it over the four kinds.
const FLOOR_ALPHA: f64 = ALPHA / 16.0;
/// The few-values test's share of [`ALPHA`].
const FEW_ALPHA: f64 = ALPHA / 2.0;
/// The fewest draws of one kind the KS test judges (below about 9 its
/// threshold is over 1: nothing could fail).
pub const KS_MIN: usize = 10;
/// The fewest cells the few-values test judges.
pub const FEW_MIN: usize = 5;

/// The kind of draw a wait was made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Full jitter's `uniform[0, W]`.
    Full,
    /// Equal jitter's upper half.
    Equal,
    /// Decorrelated jitter's `uniform[base, 3 * previous]`.
    Decorrelated,
    /// The spread on an advice.
    Spread,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Full, Kind::Equal, Kind::Decorrelated, Kind::Spread];

    fn words(self) -> &'static str {
        match self {
            Kind::Full => "draws of full jitter",
            Kind::Equal => "draws of equal jitter (of a window's upper half)",
            Kind::Decorrelated => "draws of decorrelated jitter",
            Kind::Spread => "spreads drawn on an advice",
        }
    }
}

/// The interval `[lo, hi]` of `V = draw / 2^64` a wait shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cell {
    pub lo: f64,
    pub hi: f64,
}

/// The cell of a `uniform(max)` draw that gave `k_lo..=k_hi` nanoseconds
/// (`max_lo..=max_hi`: the top, where the trace leaves it unsure); `None`
/// when no draw gives that (outside the declared range).
fn cell(k_lo: u128, k_hi: u128, max_lo: u128, max_hi: u128) -> Option<Cell> {
    if k_lo > k_hi || k_lo > max_hi {
        return None;
    }
    let lo = k_lo as f64 / (max_hi as f64 + 1.0);
    let hi = ((k_hi.min(max_hi) as f64 + 1.0) / (max_lo as f64 + 1.0)).min(1.0);
    Some(Cell { lo, hi })
}

/// The nanoseconds a base rounded up to `w` whole milliseconds may have had.
fn ceil_range(w: u128) -> (u128, u128) {
    if w == 0 { (0, 0) } else { ((w - 1) * MS + 1, w * MS) }
}

/// The backoff draw of retry `n` under `p`, seen as a `wait_ms` wait with
/// `previous` the last wait (ns): its kind, its cell and its longest wait
/// (ms); `None` for no draw, or a decorrelated one the cap may have cut.
fn backoff_cell(p: &Policy, n: u32, previous: Option<u128>, wait_ms: u128) -> Option<(Kind, Option<Cell>, u128)> {
    let b = &p.backoff;
    let w = window_ns(b, n);
    let (lo, hi) = ceil_range(wait_ms);
    match b.jitter {
        Jitter::None => None,
        Jitter::Full => Some((Kind::Full, cell(lo, hi, w, w), w.div_ceil(MS))),
        Jitter::Equal => {
            let half = w / 2;
            let max = w - half;
            let c = if hi < half { None } else { cell(lo.saturating_sub(half), hi - half, max, max) };
            Some((Kind::Equal, c, w.div_ceil(MS)))
        }
        Jitter::Decorrelated => {
            let base = b.base.as_nanos();
            let top = previous.unwrap_or(base).max(base).saturating_mul(3);
            if top > b.cap.as_nanos() {
                return None;
            }
            let max = top - base;
            let c = if hi < base { None } else { cell(lo.saturating_sub(base), hi - base, max, max) };
            Some((Kind::Decorrelated, c, top.div_ceil(MS)))
        }
    }
}

/// The spread's draw on an advice of `ms` whole milliseconds (as the trace
/// shows it) from `source`, seen as a `wait_ms` wait: its cell and its
/// longest wait (ms); `None` where the spread is no single draw the trace
/// pins (a zero a body gave, which may be under a millisecond, or a cap
/// under a millisecond).
fn spread_cell(s: &Spread, ms: u128, source: AdviceSource, wait_ms: u128) -> Option<(Option<Cell>, u128)> {
    let (may, exact) = whole_seconds(source, ms);
    let (a_lo, a_hi) = (ms * MS, if exact { ms * MS } else { ms * MS + MS - 1 });
    if ms == 0 {
        if !exact {
            return None;
        }
        // `1 ms + uniform[0, cap - 1 ms]`, the whole wait, rounded down.
        let cap = spread_cap_ns(s, 0, may);
        if cap < MS {
            return None;
        }
        let c = if wait_ms == 0 { None } else { cell((wait_ms - 1) * MS, wait_ms * MS - 1, cap - MS, cap - MS) };
        return Some((c, cap / MS));
    }
    let (cap_lo, cap_hi) = (spread_cap_ns(s, a_lo, false), spread_cap_ns(s, a_hi, false));
    if cap_lo < MS {
        return None;
    }
    // The base is the advice rounded up to whole milliseconds; the spread rounded down.
    let (b_lo, b_hi) = (a_lo.div_ceil(MS), a_hi.div_ceil(MS));
    let c = if wait_ms < b_lo {
        None
    } else {
        let (j_lo, j_hi) = (wait_ms.saturating_sub(b_hi), wait_ms - b_lo);
        cell(j_lo * MS, j_hi * MS + MS - 1, cap_lo, cap_hi)
    };
    Some((c, b_hi + cap_hi / MS))
}

/// The draws of one run, by kind, in the order the walk met them.
#[derive(Default)]
pub(crate) struct Draws {
    cells: Vec<(Kind, Cell)>,
    /// The first wait of each kind, for the message.
    first: Vec<(Kind, String)>,
}

impl Draws {
    fn add(&mut self, kind: Kind, c: Cell, what: impl FnOnce() -> String) {
        self.cells.push((kind, c));
        if !self.first.iter().any(|(k, _)| *k == kind) {
            self.first.push((kind, what()));
        }
    }

    fn first(&self, kind: Kind) -> &str {
        self.first.iter().find(|(k, _)| *k == kind).map_or("", |(_, s)| s)
    }
}

/// Every `jitter-spread` finding of a run: a traced client's by its
/// declared policy, a black-box one's by the jitter it declared in its
/// promises ([`subject`]); none for a client that declared no jitter.
pub fn check_spread(r: &Report) -> Vec<FleetViolation> {
    let mut draws = Draws::default();
    if r.traced {
        for (j, p) in runs_with_policy(r) {
            walk(j, p, &mut draws);
        }
    } else if let Some(backoff) = &r.promises.jitter {
        subject::walk(r, backoff, &mut draws);
    }
    verdict(&draws)
}

/// Reads one run's trace and counts each wait made of one draw.
fn walk(j: &JobRecord, p: &Policy, draws: &mut Draws) {
    let (mut attempts, mut throttled) = (0u32, 0u32);
    let mut advice: Option<(u128, AdviceSource, bool)> = None;
    let mut previous: Option<u128> = None;
    let deadline = p.deadline.as_nanos();
    let reserve = p.min_attempt_time.as_nanos();
    for e in &j.trace.events {
        match &e.kind {
            EventKind::Attempt { .. } => attempts += 1,
            EventKind::Answer { class, advice: a, .. } => {
                throttled += u32::from(*class == Class::Throttled);
                let escalates = p.escalate && *class == Class::Throttled && throttled >= 2;
                advice = a.wait_ms.filter(|_| p.use_advice).map(|ms| (ms.0, a.source, escalates));
            }
            EventKind::NoAnswer { .. } => advice = None,
            EventKind::Wait { ms, .. } => {
                let wait = u128::from(*ms);
                let judged = match advice {
                    None => backoff_cell(p, attempts.saturating_sub(1), previous, wait),
                    Some((a, source, escalates)) => {
                        let plain = p.advice_mode == AdviceMode::AdvicePlusSpread && !escalates;
                        let taken = plain && !source.is_upper_bound();
                        taken
                            .then(|| spread_cell(&p.spread, a, source, wait))
                            .flatten()
                            .map(|(c, l)| (Kind::Spread, c, l))
                    }
                };
                // What the deadline left: `decide` plans a wait only if it fits.
                let since = u128::from(e.at_ms).saturating_sub(u128::from(j.started_ms));
                let left = |elapsed: u128| deadline.saturating_sub(reserve + elapsed * MS) / MS;
                let fits = (left(since + 1), left(since.saturating_sub(1)));
                let truncated = |kind: Kind, c: Cell, longest: u128| {
                    if fits.0 >= longest {
                        return Some(c);
                    }
                    if wait > fits.1 {
                        // Past what the declared deadline leaves: the bounds' finding.
                        return None;
                    }
                    // A backoff's draw given that it fit: uniform under the top of the longest cell that fits.
                    let top = |w: u128| backoff_cell(p, attempts.saturating_sub(1), previous, w)?.1.map(|c| c.hi);
                    let (lo, hi) = (top(fits.0)?, if fits.1 >= longest { 1.0 } else { top(fits.1)? });
                    (kind != Kind::Spread).then(|| Cell { lo: c.lo / hi, hi: (c.hi / lo).min(1.0) })
                };
                if let Some((kind, Some(c), longest)) = judged
                    && let Some(c) = truncated(kind, c, longest)
                {
                    draws.add(kind, c, || {
                        format!("the first, job {} at {} ms: a {ms} ms wait after attempt {attempts}", j.job, e.at_ms)
                    });
                }
                previous = Some(wait * MS);
            }
            _ => {}
        }
    }
}

/// The findings on one run's draws: the KS test per kind, the few-values test over all.
fn verdict(d: &Draws) -> Vec<FleetViolation> {
    let mut out = Vec::new();
    for kind in Kind::ALL {
        let cells: Vec<Cell> = d.cells.iter().filter(|(k, _)| *k == kind).map(|(_, c)| *c).collect();
        if cells.len() < KS_MIN {
            continue;
        }
        let lowest = cells.iter().map(|c| c.lo).fold(1.0, f64::min);
        let ln_none_lower = cells.len() as f64 * (-lowest).ln_1p();
        if ln_none_lower < FLOOR_ALPHA.ln() {
            out.push(FleetViolation {
                check: Property::JitterSpread,
                message: format!(
                    "blames the client: none of the {} {} fell in the lowest {:.3} of its range (a chance under e^{ln_none_lower:.1}, past the {FLOOR_ALPHA:e} allowed; {})",
                    cells.len(),
                    kind.words(),
                    lowest,
                    d.first(kind)
                ),
            });
        }
        let (t, eps) = (ks_distance(&cells), ks_threshold(cells.len(), KS_ALPHA));
        if t > eps {
            out.push(FleetViolation {
                check: Property::JitterSpread,
                message: format!(
                    "blames the client: the {} {} stray {t:.3} from uniform (Kolmogorov–Smirnov on their cells), over the {eps:.3} a draw of the declared jitter passes with a chance under {KS_ALPHA:e} ({})",
                    cells.len(),
                    kind.words(),
                    d.first(kind)
                ),
            });
        }
    }
    let cells: Vec<Cell> = d.cells.iter().map(|(_, c)| *c).collect();
    if cells.len() >= FEW_MIN {
        let points = fewest_points(&cells);
        let ln_p = ln_few_values_bound(&cells, points);
        if ln_p < FEW_ALPHA.ln() {
            let (kind, _) = d.cells[0];
            out.push(FleetViolation {
                check: Property::JitterSpread,
                message: format!(
                    "blames the client: the {} waits drawn under the declared jitter fall on {points} value{} of their draws (a chance under e^{ln_p:.1}, past the {FEW_ALPHA:e} allowed: drawn alike in every worker, or from a handful of values; {})",
                    cells.len(),
                    if points == 1 { "" } else { "s" },
                    d.first(kind)
                ),
            });
        }
    }
    out
}

/// The KS distance of the true draws is at least this, whatever they are in their cells.
pub(crate) fn ks_distance(cells: &[Cell]) -> f64 {
    let n = cells.len() as f64;
    let mut his: Vec<f64> = cells.iter().map(|c| c.hi).collect();
    let mut los: Vec<f64> = cells.iter().map(|c| c.lo).collect();
    his.sort_by(f64::total_cmp);
    los.sort_by(f64::total_cmp);
    let above = his.iter().enumerate().map(|(i, h)| (i + 1) as f64 / n - h).fold(0.0, f64::max);
    let below = los.iter().enumerate().map(|(i, l)| l - i as f64 / n).fold(0.0, f64::max);
    above.max(below)
}

/// The distance `n` uniform draws exceed with a chance of at most `alpha`
/// (Dvoretzky–Kiefer–Wolfowitz, Massart's constant).
pub(crate) fn ks_threshold(n: usize, alpha: f64) -> f64 {
    ((2.0 / alpha).ln() / (2.0 * n as f64)).sqrt()
}

/// The fewest points that hit every cell: greedy on the tops.
pub(crate) fn fewest_points(cells: &[Cell]) -> usize {
    let mut sorted = cells.to_vec();
    sorted.sort_by(|a, b| a.hi.total_cmp(&b.hi).then(a.lo.total_cmp(&b.lo)));
    let mut points = 0;
    let mut at = f64::NEG_INFINITY;
    for c in sorted {
        if c.lo > at {
            points += 1;
            at = c.hi;
        }
    }
    points
}

/// `ln` of the bound on the chance that `d` points hit every one of the
/// independent uniform draws' cells: `C(n, d) · Π min(1, 2 d w)` over the
/// `n - d` widest cells.
pub(crate) fn ln_few_values_bound(cells: &[Cell], d: usize) -> f64 {
    let n = cells.len();
    let mut widths: Vec<f64> = cells.iter().map(|c| (c.hi - c.lo).max(0.0)).collect();
    widths.sort_by(|a, b| b.total_cmp(a));
    let choose: f64 = (0..d).map(|i| ((n - i) as f64).ln() - ((i + 1) as f64).ln()).sum();
    let hits: f64 = widths.iter().take(n - d).map(|w| (2.0 * d as f64 * w).min(1.0).ln()).sum();
    choose + hits
}

mod subject;

#[cfg(test)]
#[path = "spread_tests.rs"]
mod tests;
