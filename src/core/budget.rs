//! Deadlines and shared retry budgets. The clock is always passed in.
//!
//! # Why budgets and not only max retries?
//! A per-operation limit keeps one call finite, but when many calls fail at
//! once every one of them can stay within its own limit while the fleet as a
//! whole multiplies the load on a struggling API (brief 001). A shared budget
//! caps retry traffic across all operations: once it is spent, calls give up
//! with [`GiveUpReason::BudgetExhausted`](crate::core::policy::GiveUpReason)
//! ("budget exhausted") instead of extending the incident.
//!
//! The driver calls [`RetryBudget::deposit`] after every successful answer and
//! [`RetryBudget::withdraw`] before every retry. [`decide`](crate::core::policy::decide)
//! asks the budget *last*, after every other reason to stop: a retry the
//! policy would refuse anyway never spends budget.
//!
//! # The two budgets and their anchors
//!
//! | | [`TokenBucketBudget`] | [`PercentBudget`] |
//! |---|---|---|
//! | anchor | gRPC retry throttling (gRFC A6) | Finagle `RetryBudget`, tower `TpsBudget` |
//! | state | one bucket, starts full | deposits in a sliding window (`ttl`, ten slots) |
//! | a success | refunds `token_ratio` (capped at `max_tokens`) | adds `percent` of a retry |
//! | a retry | costs 1 token; refused when the rest is ≤ `max_tokens / 2` | costs 1 retry; refused when less than 1 is left |
//! | idle client | keeps its tokens forever | keeps a reserve of `min_per_sec × ttl` |
//! | defaults | `max_tokens = 10`, `token_ratio = 0.1` (gRFC A6's example) | `ttl = 10 s`, `min_per_sec = 10`, `percent = 20%` |
//!
//! Both keep fixed-point integers (thousandths), never floats, so the
//! arithmetic is exact and the same on every machine.
//!
//! **Fractional percentages never over-allocate.** tower's `TpsBudget` turns
//! a `retry_percent` at or below 1.0 into `(1.0 / retry_percent) as isize`
//! whole deposits per retry, truncating: 0.6 (60%) becomes one deposit per
//! retry, i.e. 100% (tower-rs/tower#857). Here a deposit adds `per_mille`
//! thousandths of a retry and a retry costs a whole 1000, so 60% is exactly
//! 6 retries per 10 successes. [`PercentBudget::from_fraction`] reads a
//! tower-style fraction and rounds *down* to whole per mille.
//!
//! **One deliberate difference from gRPC.** gRFC A6 charges a token for every
//! failed attempt with a retryable status, even the last failure of a call
//! that will not be retried anyway (attempts or deadline spent). Here only a
//! retry the policy actually wants reaches the budget, because `decide` asks
//! it last. A fleet whose calls run out of attempts therefore drains the
//! bucket slightly more slowly than a gRPC client would; the bound on retries
//! (below) is the same.
//!
//! # The allowance, as a checkable bound
//! - Token bucket: over any run, `retries × 1000 < max_tokens × 1000 / 2 +
//!   token_ratio_milli × successes`. Each granted retry needs the tokens above
//!   the half-way mark to stay positive, and only successes add tokens.
//! - Percent: within any `ttl`-aligned block of time, `retries × 1000 ≤
//!   reserve + per_mille × (successes in this block and the one before)`.
//!
//! `tests/it/fleet.rs` checks both against simulated fleets, and shows the
//! check catching a budget that leaks.

use std::sync::Mutex;
use std::time::Duration;

use crate::locks::lock;

/// The monotonic span an operation may use, measured from its first attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// When the first attempt started (monotonic clock).
    pub start: Duration,
    /// How long the whole operation may take.
    pub total: Duration,
}

impl Deadline {
    /// The instant after which nothing may happen.
    pub fn at(&self) -> Duration {
        self.start.saturating_add(self.total)
    }

    /// Time left at `now`; zero once passed.
    pub fn remaining(&self, now: Duration) -> Duration {
        self.at().saturating_sub(now)
    }

    /// Time used at `now`.
    pub fn elapsed(&self, now: Duration) -> Duration {
        now.saturating_sub(self.start)
    }
}

/// A retry allowance shared by many operations (`&self`: share it in an `Arc`).
pub trait RetryBudget: Send + Sync {
    /// An attempt succeeded at `now`.
    fn deposit(&self, now: Duration);
    /// Asks for one retry at `now`; `false` means the budget refuses it.
    fn withdraw(&self, now: Duration) -> bool;
}

/// gRPC retry throttling (gRFC A6): a bucket of `max_tokens` that starts
/// full; every failure that wants a retry costs one token, every success
/// refunds `token_ratio`; retries stop while the tokens are at or below half
/// the maximum, and resume once successes lift them above it.
///
/// The count never leaves `0..=max_tokens`. Tokens are kept in thousandths,
/// as gRFC A6 supports "up to 3 decimal places" of `tokenRatio`, so a ratio
/// like 0.1 is exact.
///
/// # Default
/// `max_tokens = 10`, `token_ratio = 0.1` (100 thousandths): gRFC A6's
/// example, which throttles once failures exceed about 10% of successes.
/// gRPC itself has no default (throttling is off unless configured) and
/// requires `maxTokens` in `(0, 1000]` and `tokenRatio > 0`;
/// `sim::run::scenario::Scenario::validate` enforces the same.
#[derive(Debug)]
pub struct TokenBucketBudget {
    max_milli: u64,
    ratio_milli: u64,
    tokens_milli: Mutex<u64>,
}

impl TokenBucketBudget {
    /// A full bucket. `token_ratio_milli` is the refund per success in
    /// thousandths of a token (100 = 0.1).
    pub fn new(max_tokens: u32, token_ratio_milli: u32) -> Self {
        let max_milli = max_tokens as u64 * 1000;
        TokenBucketBudget { max_milli, ratio_milli: token_ratio_milli as u64, tokens_milli: Mutex::new(max_milli) }
    }

    /// A full bucket from gRPC's service-config numbers: `token_ratio` is
    /// truncated to three decimal places (gRFC A6), never rounded up.
    pub fn from_ratio(max_tokens: u32, token_ratio: f64) -> Self {
        TokenBucketBudget::new(max_tokens, thousandths_down(token_ratio))
    }

    /// Tokens left, in thousandths.
    pub fn tokens_milli(&self) -> u64 {
        *lock(&self.tokens_milli)
    }

    /// The most retries this budget can grant over a run with `successes`
    /// successful answers (see the module doc): the largest `n` with
    /// `n × 1000 < max × 1000 / 2 + ratio × successes`.
    pub fn allowance(max_tokens: u32, token_ratio_milli: u32, successes: u64) -> u64 {
        let above_half = max_tokens as u64 * 1000 / 2 + token_ratio_milli as u64 * successes;
        above_half.saturating_sub(1) / 1000
    }
}

impl Default for TokenBucketBudget {
    fn default() -> Self {
        TokenBucketBudget::new(10, 100)
    }
}

impl RetryBudget for TokenBucketBudget {
    fn deposit(&self, _now: Duration) {
        let mut t = lock(&self.tokens_milli);
        *t = (*t + self.ratio_milli).min(self.max_milli);
    }

    /// Takes a token (never below zero), then allows the retry only if more
    /// than half the maximum is left: gRPC's `throttle()` order.
    fn withdraw(&self, _now: Duration) -> bool {
        let mut t = lock(&self.tokens_milli);
        *t = t.saturating_sub(1000);
        *t > self.max_milli / 2
    }
}

/// `x` in whole thousandths, rounded down so that `result / 1000 <= x`
/// holds exactly as `f64` compares it. NaN and negatives give 0.
fn thousandths_down(x: f64) -> u32 {
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    let near = (x * 1000.0).round().min(u32::MAX as f64);
    let n = near as u32;
    if (n as f64) / 1000.0 <= x { n } else { n - 1 }
}

/// A time-windowed percentage budget as in Finagle and tower: within the
/// last `ttl`, retries may be `percent` of the deposits, plus a reserve of
/// `min_per_sec` retries a second so a quiet client can still retry.
///
/// The window is a ring of ten slots of `ttl / 10` each (tower's design);
/// a deposit or a withdrawal lands in the current slot and is forgotten
/// once its slot leaves the window, so the reserve renews every `ttl`.
///
/// Unlike tower (whose `TpsBudget` truncates `1 / retry_percent` to whole
/// deposits, so 60% allows 100%; tower-rs/tower#857), the share is kept in
/// per mille: a deposit adds `per_mille` units and a retry costs 1000, so a
/// fractional percentage never over-allocates.
///
/// # Default
/// `ttl = 10 s`, `min_per_sec = 10`, `percent = 20%` (`per_mille = 200`):
/// Finagle's `RetryBudget()` and tower's `TpsBudget::default()`. Both accept
/// a `ttl` of 1 s to 60 s and a percentage of 0 to 100000% (1000.0);
/// `sim::run::scenario::Scenario::validate` enforces the same.
#[derive(Debug)]
pub struct PercentBudget {
    slot: Duration,
    per_mille: u64,
    reserve: i64,
    state: Mutex<Slots>,
}

#[derive(Debug)]
struct Slots {
    /// Net units (deposits minus withdrawals) per slot, a ring of ten slots covering `ttl`.
    units: [i64; 10],
    /// The slot index (time / slot) the ring was last advanced to.
    current: u64,
}

impl PercentBudget {
    /// A budget over `ttl` (split into ten slots), with `min_per_sec` reserved
    /// retries a second and `per_mille` retries per thousand deposits.
    pub fn new(ttl: Duration, min_per_sec: u32, per_mille: u32) -> Self {
        let slot = (ttl / 10).max(Duration::from_millis(1));
        let reserve = (min_per_sec as u128 * ttl.as_millis() / 1000) as i64 * 1000;
        PercentBudget {
            slot,
            per_mille: per_mille as u64,
            reserve,
            state: Mutex::new(Slots { units: [0; 10], current: 0 }),
        }
    }

    /// A budget from tower's and Finagle's numbers, where `retry_percent` is
    /// a fraction (0.2 = 20%). It is rounded *down* to whole per mille, so
    /// the budget never allows more than asked: 0.6 gives exactly 600 per
    /// mille (tower gives 100%), 0.0005 gives none.
    pub fn from_fraction(ttl: Duration, min_per_sec: u32, retry_percent: f64) -> Self {
        PercentBudget::new(ttl, min_per_sec, thousandths_down(retry_percent))
    }

    /// The retries a deposit earns, in per mille.
    pub fn per_mille(&self) -> u32 {
        self.per_mille as u32
    }

    fn advance(&self, s: &mut Slots, now: Duration) {
        let idx = (now.as_nanos() / self.slot.as_nanos()) as u64;
        let gap = idx.saturating_sub(s.current).min(10);
        for k in 1..=gap {
            s.units[((s.current + k) % 10) as usize] = 0;
        }
        s.current = s.current.max(idx);
    }

    /// The units left at `now` (1000 units make one retry).
    pub fn balance(&self, now: Duration) -> i64 {
        let mut s = lock(&self.state);
        self.advance(&mut s, now);
        self.reserve + s.units.iter().sum::<i64>()
    }
}

impl Default for PercentBudget {
    fn default() -> Self {
        PercentBudget::new(Duration::from_secs(10), 10, 200)
    }
}

impl RetryBudget for PercentBudget {
    fn deposit(&self, now: Duration) {
        let mut s = lock(&self.state);
        self.advance(&mut s, now);
        let i = (s.current % 10) as usize;
        s.units[i] += self.per_mille as i64;
    }

    fn withdraw(&self, now: Duration) -> bool {
        let mut s = lock(&self.state);
        self.advance(&mut s, now);
        if self.reserve + s.units.iter().sum::<i64>() < 1000 {
            return false;
        }
        let i = (s.current % 10) as usize;
        s.units[i] -= 1000;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn deadline_arithmetic_saturates() {
        let d = Deadline { start: S(5), total: S(10) };
        assert_eq!(d.at(), S(15));
        assert_eq!(d.remaining(S(7)), S(8));
        assert_eq!(d.remaining(S(99)), Duration::ZERO);
        assert_eq!(d.elapsed(S(3)), Duration::ZERO);
        assert_eq!(Deadline { start: S(1), total: Duration::MAX }.at(), Duration::MAX);
    }

    #[test]
    fn grpc_bucket_stops_at_half_and_refunds() {
        let b = TokenBucketBudget::new(10, 100);
        // 10 -> 9, 8, 7, 6 allowed (> 5); the fifth failure reaches 5: refused.
        let allowed: Vec<bool> = (0..6).map(|_| b.withdraw(S(0))).collect();
        assert_eq!(allowed, [true, true, true, true, false, false]);
        assert_eq!(b.tokens_milli(), 4000);
        // Eleven successes refund 1.1 tokens: 5.1 > 5, so one retry again.
        for _ in 0..11 {
            b.deposit(S(0));
        }
        assert_eq!(b.tokens_milli(), 5100);
        assert!(!b.withdraw(S(0)), "5.1 - 1 = 4.1 is at or below half");
        for _ in 0..1000 {
            b.deposit(S(0));
        }
        assert_eq!(b.tokens_milli(), 10_000, "capped at max");
    }

    #[test]
    fn percent_budget_reserve_then_share() {
        // No reserve, 30%: exactly 3 retries per 10 deposits (tower allows 3.33).
        let b = PercentBudget::new(S(10), 0, 300);
        for _ in 0..10 {
            b.deposit(S(1));
        }
        let allowed = (0..5).filter(|_| b.withdraw(S(1))).count();
        assert_eq!(allowed, 3);
        // 100 deposits at 30% allow exactly 30, never 33.
        let b = PercentBudget::new(S(10), 0, 300);
        for _ in 0..100 {
            b.deposit(S(1));
        }
        assert_eq!((0..50).filter(|_| b.withdraw(S(1))).count(), 30);
    }

    #[test]
    fn percent_budget_deposits_expire_after_ttl() {
        let b = PercentBudget::default();
        // Reserve: 10 a second over 10 s = 100 retries.
        assert_eq!(b.balance(S(0)), 100_000);
        for _ in 0..50 {
            b.deposit(S(0));
        }
        assert_eq!(b.balance(S(0)), 110_000);
        assert_eq!(b.balance(S(11)), 100_000, "deposits older than the ttl are gone");
        let b = PercentBudget::new(S(10), 0, 200);
        for _ in 0..5 {
            b.deposit(S(0));
        }
        assert!(b.withdraw(S(9)));
        assert!(!b.withdraw(S(9)));
    }

    #[test]
    fn fractional_percentages_never_over_allocate() {
        // tower-rs/tower#857: retry_percent 0.6 gives tower a withdraw cost of
        // one deposit, so 10 deposits allow 10 retries. Here: exactly 6.
        let b = PercentBudget::from_fraction(S(1), 0, 0.6);
        assert_eq!(b.per_mille(), 600);
        for _ in 0..10 {
            b.deposit(S(0));
        }
        assert_eq!((0..20).filter(|_| b.withdraw(S(0))).count(), 6);
        // Every fraction, every deposit count: never more than floor(fraction × deposits).
        for tenth_percent in [1u32, 7, 33, 125, 250, 333, 500, 570, 600, 666, 999, 1000, 1500] {
            let fraction = tenth_percent as f64 / 1000.0;
            for deposits in [1u64, 2, 3, 7, 10, 29, 100] {
                let b = PercentBudget::from_fraction(S(10), 0, fraction);
                for _ in 0..deposits {
                    b.deposit(S(1));
                }
                let allowed = (0..3 * deposits + 3).filter(|_| b.withdraw(S(1))).count() as u64;
                assert_eq!(allowed, tenth_percent as u64 * deposits / 1000, "{fraction} × {deposits}");
            }
        }
    }

    #[test]
    fn thousandths_round_down_exactly() {
        assert_eq!(thousandths_down(0.2), 200);
        assert_eq!(thousandths_down(0.57), 570, "0.57 is not 0.5699…");
        assert_eq!(thousandths_down(0.5699999), 569);
        assert_eq!(thousandths_down(0.0005), 0);
        assert_eq!(thousandths_down(1000.0), 1_000_000);
        assert_eq!((thousandths_down(-1.0), thousandths_down(f64::NAN)), (0, 0));
        assert_eq!(TokenBucketBudget::from_ratio(10, 0.1).ratio_milli, 100);
        assert_eq!(TokenBucketBudget::from_ratio(10, 0.1239).ratio_milli, 123, "three decimal places");
    }

    #[test]
    fn a_ratio_of_whole_thousandths_reads_back_as_itself() {
        // The simulator builds its buckets from the ratio (`n / 1000`), as a
        // gRPC service config states it: exact for every whole thousandth.
        for n in (0..=100_000u32).chain([u32::MAX / 2, u32::MAX - 1]) {
            assert_eq!(TokenBucketBudget::from_ratio(3, f64::from(n) / 1000.0).ratio_milli, u64::from(n), "{n}");
        }
    }

    #[test]
    fn grpc_bucket_stays_in_range_and_respects_its_allowance() {
        // A long mixed run: the count never leaves 0..=max, and granted
        // retries never reach the allowance bound.
        let b = TokenBucketBudget::new(10, 250);
        let (mut granted, mut successes) = (0u64, 0u64);
        for i in 0..500u64 {
            if i % 3 == 0 {
                b.deposit(S(0));
                successes += 1;
            } else if b.withdraw(S(0)) {
                granted += 1;
            }
            assert!(b.tokens_milli() <= 10_000);
            assert!(granted <= TokenBucketBudget::allowance(10, 250, successes), "at step {i}");
        }
        assert!(granted > 0);
        // The bound is tight for a fresh bucket: 4 retries (10 -> 6 tokens), not 5.
        assert_eq!(TokenBucketBudget::allowance(10, 100, 0), 4);
        assert_eq!(TokenBucketBudget::allowance(3, 100, 0), 1, "odd maximum: 3 -> 2 > 1.5");
        let b = TokenBucketBudget::new(3, 100);
        assert_eq!((0..5).filter(|_| b.withdraw(S(0))).count(), 1);
    }

    #[test]
    fn percent_reserve_renews_each_ttl() {
        // No deposits: 10 a second over 10 s gives 100 retries per window.
        let b = PercentBudget::default();
        assert_eq!((0..150).filter(|_| b.withdraw(S(0))).count(), 100);
        assert!(!b.withdraw(S(9)), "still inside the window");
        assert_eq!((0..150).filter(|_| b.withdraw(S(10))).count(), 100, "the first slot left the window");
    }
}
