//! Exponential windows and jitter, computed from random draws passed in.
//!
//! Jitter exists so that clients that failed together do not retry together
//! (seed 001: "no jitter is the dangerous default"). Every function here is
//! pure: a draw is a `u64` from the caller's generator, mapped onto a range
//! with integer arithmetic so results are identical on every platform.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A uniform draw in `[0, max]`, from a 64-bit random value.
pub fn uniform(max: Duration, draw: u64) -> Duration {
    let nanos = max.as_nanos();
    // (nanos + 1) * draw / 2^64 lies in [0, nanos]; u128 cannot overflow for
    // any Duration below ~2^64 s, and larger ones saturate below.
    let span = nanos.saturating_add(1);
    let scaled = span.saturating_mul(draw as u128) >> 64;
    nanos_to_duration(scaled)
}

fn nanos_to_duration(n: u128) -> Duration {
    let secs = n / 1_000_000_000;
    if secs > u64::MAX as u128 {
        return Duration::MAX;
    }
    Duration::new(secs as u64, (n % 1_000_000_000) as u32)
}

/// How a backoff window becomes a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// The window itself. Synchronises a fleet: for tests and comparison only.
    None,
    /// Uniform in `[0, window]` (AWS "full jitter"; seed 003).
    Full,
    /// `window/2` plus uniform in `[0, window/2]`: keeps half the wait.
    Equal,
    /// `min(cap, uniform[base, 3 * previous wait])` (AWS "decorrelated jitter").
    Decorrelated,
}

/// Capped exponential backoff: retry `n` (from 0) has window `min(cap, base * 2^n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    #[serde(with = "crate::core::duration_text")]
    pub base: Duration,
    #[serde(with = "crate::core::duration_text")]
    pub cap: Duration,
    pub jitter: Jitter,
}

impl Backoff {
    /// The window for retry index `n` (0 for the first retry), without overflow.
    pub fn window(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n).unwrap_or(0);
        let grown = if factor == 0 { None } else { self.base.checked_mul(factor) };
        grown.map_or(self.cap, |w| w.min(self.cap))
    }

    /// The wait for retry index `n`, given the previous wait (for decorrelated
    /// jitter) and one random draw.
    pub fn wait(&self, n: u32, previous: Option<Duration>, draw: u64) -> Duration {
        let window = self.window(n);
        match self.jitter {
            Jitter::None => window,
            Jitter::Full => uniform(window, draw),
            Jitter::Equal => {
                let half = window / 2;
                half + uniform(window - half, draw)
            }
            Jitter::Decorrelated => {
                let prev = previous.unwrap_or(self.base).max(self.base);
                let hi = prev.saturating_mul(3);
                (self.base + uniform(hi - self.base, draw)).min(self.cap)
            }
        }
    }
}

/// The random spread added on top of an advised wait, so that clients told
/// the same instant do not all arrive at it (seed 001: "add a small
/// randomized spread afterward").
///
/// # Default
/// `clamp(20% of the advice, 100 ms, 1 s)`: a zero advice still gets up to
/// 100 ms, a 60 s advice gets up to 1 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spread {
    /// The share of the advice, in per mille (200 = 20%).
    pub per_mille: u32,
    #[serde(with = "crate::core::duration_text")]
    pub min: Duration,
    #[serde(with = "crate::core::duration_text")]
    pub max: Duration,
}

impl Default for Spread {
    fn default() -> Self {
        Spread { per_mille: 200, min: Duration::from_millis(100), max: Duration::from_secs(1) }
    }
}

impl Spread {
    /// The largest spread for an advice.
    pub fn cap(&self, advice: Duration) -> Duration {
        let share = nanos_to_duration(advice.as_nanos() * self.per_mille as u128 / 1000);
        share.clamp(self.min, self.max.max(self.min))
    }

    /// A spread drawn in `[0, cap(advice)]`.
    pub fn draw(&self, advice: Duration, draw: u64) -> Duration {
        uniform(self.cap(advice), draw)
    }
}

/// How an advised wait and the backoff combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdviceMode {
    /// `advice + spread`: the server knows when the window rolls (seed 002's winner).
    AdvicePlusSpread,
    /// `max(advice, backoff draw) + spread` (seed 003): a valid advice is a
    /// minimum, never truncated to the backoff cap.
    MaxOfAdviceAndBackoff,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn b(jitter: Jitter) -> Backoff {
        Backoff { base: MS(1000), cap: MS(30_000), jitter }
    }

    #[test]
    fn windows_double_up_to_the_cap_without_overflow() {
        let w: Vec<u64> = (0..7).map(|n| b(Jitter::Full).window(n).as_millis() as u64).collect();
        assert_eq!(w, [1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(b(Jitter::Full).window(63), MS(30_000));
        assert_eq!(b(Jitter::Full).window(u32::MAX), MS(30_000));
        let huge = Backoff { base: Duration::MAX, cap: Duration::MAX, jitter: Jitter::None };
        assert_eq!(huge.window(5), Duration::MAX);
    }

    #[test]
    fn uniform_spans_zero_to_max() {
        assert_eq!(uniform(MS(1000), 0), Duration::ZERO);
        assert_eq!(uniform(MS(1000), u64::MAX), MS(1000));
        assert_eq!(uniform(MS(1000), 1 << 63), Duration::from_nanos(500_000_000));
        assert_eq!(uniform(Duration::ZERO, u64::MAX), Duration::ZERO);
        assert!(uniform(Duration::MAX, u64::MAX) <= Duration::MAX);
    }

    #[test]
    fn jitter_kinds() {
        let half = 1u64 << 63;
        assert_eq!(b(Jitter::None).wait(2, None, half), MS(4000));
        assert_eq!(b(Jitter::Full).wait(2, None, 0), Duration::ZERO);
        assert_eq!(b(Jitter::Full).wait(2, None, u64::MAX), MS(4000));
        assert_eq!(b(Jitter::Equal).wait(2, None, 0), MS(2000));
        assert_eq!(b(Jitter::Equal).wait(2, None, u64::MAX), MS(4000));
        // Decorrelated: uniform in [base, 3 * previous], capped.
        assert_eq!(b(Jitter::Decorrelated).wait(0, Some(MS(5000)), 0), MS(1000));
        assert_eq!(b(Jitter::Decorrelated).wait(0, Some(MS(5000)), u64::MAX), MS(15_000));
        assert_eq!(b(Jitter::Decorrelated).wait(0, Some(MS(20_000)), u64::MAX), MS(30_000));
        assert_eq!(b(Jitter::Decorrelated).wait(0, None, u64::MAX), MS(3000));
    }

    #[test]
    fn seed_003_full_jitter_windows() {
        // "0–1, 0–2, 0–4, 0–8, and 0–16 seconds"
        let p = b(Jitter::Full);
        for (n, hi) in [1000, 2000, 4000, 8000, 16000].into_iter().enumerate() {
            assert_eq!(p.wait(n as u32, None, u64::MAX), MS(hi));
        }
    }

    #[test]
    fn spread_is_clamped_twenty_percent() {
        let s = Spread::default();
        assert_eq!(s.cap(Duration::ZERO), MS(100));
        assert_eq!(s.cap(MS(2000)), MS(400));
        assert_eq!(s.cap(MS(60_000)), MS(1000));
        assert_eq!(s.cap(Duration::MAX), MS(1000));
        assert_eq!(s.draw(MS(2000), u64::MAX), MS(400));
        assert_eq!(s.draw(MS(2000), 0), Duration::ZERO);
    }
}
