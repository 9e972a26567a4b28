//! Deadlines and shared retry budgets. The clock is always passed in.
//!
//! # Why budgets and not only max retries?
//! A per-operation limit keeps one call finite, but when many calls fail at
//! once every one of them can stay within its own limit while the fleet as a
//! whole multiplies the load on a struggling API (seed 001). A shared budget
//! caps retry traffic across all operations: once it is spent, calls give up
//! with [`GiveUpReason::BudgetExhausted`](crate::core::policy::GiveUpReason)
//! instead of extending the incident.
//!
//! The driver calls [`RetryBudget::deposit`] after every successful answer and
//! [`RetryBudget::withdraw`] before every retry.

use std::sync::Mutex;
use std::time::Duration;

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
/// the maximum.
///
/// Tokens are kept in thousandths so a ratio like 0.1 is exact.
///
/// # Default
/// `max_tokens = 10`, `token_ratio = 0.1` (gRPC's documented example).
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

    /// Tokens left, in thousandths.
    pub fn tokens_milli(&self) -> u64 {
        *self.tokens_milli.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for TokenBucketBudget {
    fn default() -> Self {
        TokenBucketBudget::new(10, 100)
    }
}

impl RetryBudget for TokenBucketBudget {
    fn deposit(&self, _now: Duration) {
        let mut t = self.tokens_milli.lock().unwrap_or_else(|e| e.into_inner());
        *t = (*t + self.ratio_milli).min(self.max_milli);
    }

    fn withdraw(&self, _now: Duration) -> bool {
        let mut t = self.tokens_milli.lock().unwrap_or_else(|e| e.into_inner());
        *t = t.saturating_sub(1000);
        *t > self.max_milli / 2
    }
}

/// A time-windowed percentage budget as in Finagle and tower: within the
/// last `ttl`, retries may be `percent` of the deposits, plus a reserve of
/// `min_per_sec` retries a second so a quiet client can still retry.
///
/// Unlike tower (which turns `1/percent` into an integer and so lets 30%
/// allow 33%), the share is kept in per mille: a deposit adds `per_mille`
/// units and a retry costs 1000, so a fractional percentage never
/// over-allocates.
///
/// # Default
/// `ttl = 10 s`, `min_per_sec = 10`, `percent = 20%` (Finagle's and tower's defaults).
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
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
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
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.advance(&mut s, now);
        let i = (s.current % 10) as usize;
        s.units[i] += self.per_mille as i64;
    }

    fn withdraw(&self, now: Duration) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
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
}
