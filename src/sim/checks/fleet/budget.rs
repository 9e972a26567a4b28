//! The shared retry budget's checks: retries within its allowance
//! (`budget-allowance`) and refusals only when it may be spent
//! (`budget-refusal`).

use super::*;

/// The executions that share one budget: the whole fleet on a shared host,
/// each worker on its own host.
pub(super) fn budget_groups(r: &Report) -> BTreeMap<u32, Vec<&JobRecord>> {
    let mut groups: BTreeMap<u32, Vec<&JobRecord>> = BTreeMap::new();
    for j in &r.records {
        let group = if r.scenario_config.fleet.hosts == Hosts::PerWorker { j.worker } else { 0 };
        groups.entry(group).or_default().push(j);
    }
    groups
}

/// The times (ms) of granted retries (`wait` events) and of deposits (`done` events).
pub(super) fn grants_and_deposits(jobs: &[&JobRecord]) -> (Vec<u64>, Vec<u64>) {
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
pub(super) struct BudgetEvents {
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
