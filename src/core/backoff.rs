//! Exponential windows and jitter, computed from random draws passed in.
//!
//! Jitter exists so that clients that failed together do not retry together
//! (brief 001: "no jitter is the dangerous default"). Every function here is
//! pure: a draw is a `u64` from the caller's generator, mapped onto a range
//! with integer arithmetic so results are identical on every platform.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A uniform draw in `[0, max]`, from a 64-bit random value.
pub fn uniform(max: Duration, draw: u64) -> Duration {
    let nanos = max.as_nanos();
    // floor((nanos + 1) * draw / 2^64) lies in [0, nanos]. The product needs
    // up to 158 bits (a Duration holds up to ~2^94 ns), more than a u128
    // above 2^64 ns (~584 years), so it is taken in two halves of the span:
    // hi * 2^64 + lo gives hi * draw + floor(lo * draw / 2^64), exactly.
    let span = nanos + 1; // at most ~2^94: no overflow
    let (hi, lo) = (span >> 64, span & u128::from(u64::MAX));
    let scaled = hi * u128::from(draw) + ((lo * u128::from(draw)) >> 64);
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
    /// Uniform in `[0, window]` (AWS "full jitter"; brief 003).
    Full,
    /// `window/2` plus uniform in `[0, window/2]`: keeps half the wait.
    Equal,
    /// `min(cap, uniform[base, 3 * previous wait])` (AWS "decorrelated jitter").
    Decorrelated,
}

/// Capped exponential backoff: retry `n` (from 0) has window `min(cap, base * 2^n)`.
///
/// Build one with [`Backoff::new`]: the struct is `#[non_exhaustive]` (a
/// field added later, such as a growth factor, takes a default there and
/// breaks no user's code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Backoff {
    /// The first retry's window.
    #[serde(with = "crate::core::duration_text")]
    pub base: Duration,
    /// No window grows past this, however many retries.
    #[serde(with = "crate::core::duration_text")]
    pub cap: Duration,
    /// How a wait is drawn inside the window.
    pub jitter: Jitter,
}

impl Backoff {
    /// A backoff whose first window is `base`, doubling up to `cap`, with
    /// waits drawn by `jitter`.
    pub fn new(base: Duration, cap: Duration, jitter: Jitter) -> Backoff {
        Backoff { base, cap, jitter }
    }

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
/// the same instant do not all arrive at it (brief 001: "add a small
/// randomized spread afterward").
///
/// A zero advice in whole seconds (`Retry-After: 0`, a past HTTP-date:
/// [`Advice::in_whole_seconds`](crate::core::retry_after::Advice::in_whole_seconds))
/// gets a spread of up to at least `rounded_zero`: a
/// delta-seconds value of N only says "somewhere in [N, N+1) seconds", and a
/// server that rounds down, such as Flask-Limiter, says `0` for most of its
/// window, so the retries of a fleet are spread over that second instead of
/// meeting the same full window within 100 ms. A larger N keeps
/// the share below: an advice waited out and refused again escalates by the
/// second it may have left out ([`Policy::escalate`](crate::core::policy::Policy::escalate)).
///
/// # Default
/// `clamp(20% of the advice, 100 ms, 1 s)`, and up to 1 s on a zero advice
/// in whole seconds: `Retry-After: 0` gets 1 ms to 1 s (never 0: see
/// [`Spread::draw`]), a body's `resetAt` that has passed 1 to 100 ms, a 2 s
/// advice up to 400 ms, a 60 s advice up to 1 s.
///
/// The struct is `#[non_exhaustive]` (it has grown before: `rounded_zero`):
/// build one with [`Spread::new`] (or start from [`Spread::default`]) and
/// set the cover of a zero advice with [`Spread::rounded_zero()`], e.g.
/// `Spread::new(0, Duration::ZERO, Duration::ZERO).rounded_zero(Duration::ZERO)`
/// for no spread at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Spread {
    /// The share of the advice, in per mille (200 = 20%).
    pub per_mille: u32,
    /// The least spread, so a zero advice still spreads clients out.
    #[serde(with = "crate::core::duration_text")]
    pub min: Duration,
    /// The most spread, so a long advice is not stretched much further.
    #[serde(with = "crate::core::duration_text")]
    pub max: Duration,
    /// The least cap on a zero advice in whole seconds, which covers its
    /// rounding (1 s); zero turns the cover off (brief 002's clients, which
    /// add a flat 0-250 ms). Missing from a file: 1 s.
    #[serde(with = "crate::core::duration_text", default = "one_second")]
    pub rounded_zero: Duration,
}

fn one_second() -> Duration {
    Duration::from_secs(1)
}

impl Default for Spread {
    fn default() -> Self {
        Spread {
            per_mille: 200,
            min: Duration::from_millis(100),
            max: Duration::from_secs(1),
            rounded_zero: one_second(),
        }
    }
}

impl Spread {
    /// `per_mille` of the advice, clamped to `[min, max]`, and the default
    /// cover of a zero advice in whole seconds (1 s; see
    /// [`Spread::rounded_zero()`]).
    pub fn new(per_mille: u32, min: Duration, max: Duration) -> Spread {
        Spread { per_mille, min, max, rounded_zero: one_second() }
    }

    /// This spread with another least cap on a zero advice in whole seconds
    /// (the field `rounded_zero`; zero turns the cover off).
    pub fn rounded_zero(mut self, rounded_zero: Duration) -> Spread {
        self.rounded_zero = rounded_zero;
        self
    }

    /// The largest spread for an advice.
    pub fn cap(&self, advice: Duration) -> Duration {
        let share = nanos_to_duration(advice.as_nanos() * self.per_mille as u128 / 1000);
        share.clamp(self.min, self.max.max(self.min))
    }

    /// The largest spread for an advice given in whole seconds: [`cap`](Spread::cap),
    /// and for a zero advice at least `rounded_zero`.
    pub fn cap_whole_seconds(&self, advice: Duration) -> Duration {
        let cap = self.cap(advice);
        if advice.is_zero() { cap.max(self.rounded_zero) } else { cap }
    }

    /// The largest spread any advice can get: what a bound on a wait adds.
    pub fn largest(&self) -> Duration {
        self.max.max(self.min).max(self.rounded_zero)
    }

    /// A spread drawn in `[0, cap(advice)]`; for a zero advice in
    /// `[1 ms, cap]`. The spread is then the whole wait, and the core rounds
    /// a spread down to whole milliseconds: a draw under 1 ms would retry at
    /// once, in step with every client told the same instant. A cap under
    /// 1 ms gives 1 ms; a zero cap (spread turned off) gives zero.
    pub fn draw(&self, advice: Duration, draw: u64) -> Duration {
        Spread::draw_under(self.cap(advice), advice, draw)
    }

    /// [`draw`](Spread::draw) for an advice in whole seconds: in `[0,
    /// cap_whole_seconds(advice)]`, so a retry told `0` lands anywhere in
    /// the second the rounding left out (and a fleet's retries spread over it).
    pub fn draw_whole_seconds(&self, advice: Duration, draw: u64) -> Duration {
        Spread::draw_under(self.cap_whole_seconds(advice), advice, draw)
    }

    fn draw_under(cap: Duration, advice: Duration, draw: u64) -> Duration {
        if advice.is_zero() && !cap.is_zero() {
            let one = Duration::from_millis(1);
            return one + uniform(cap.saturating_sub(one), draw);
        }
        uniform(cap, draw)
    }
}

/// How an advised wait and the backoff combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdviceMode {
    /// `advice + spread`: the server knows when the window rolls (brief 002's winner).
    AdvicePlusSpread,
    /// `max(advice, backoff draw) + spread` (brief 003): a valid advice is a
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
    fn uniform_is_exact_beyond_584_years() {
        // Above 2^64 ns (about 584 years) `span * draw` no longer fits a
        // u128; a saturating product clipped every such draw to 584 years.
        let half = uniform(Duration::MAX, 1 << 63);
        assert_eq!(half, nanos_to_duration(Duration::MAX.as_nanos().div_ceil(2)));
        // The top draw falls short of the top by (nanos + 1) / 2^64: under 1 s here.
        let top = uniform(Duration::MAX, u64::MAX);
        assert!(top <= Duration::MAX && Duration::MAX - top < Duration::from_secs(1), "{top:?}");
        // Exactly: nanos + 1 is 2^64 * 10^9, so the top draw is 10^9 ns
        // short of it, u64::MAX whole seconds and no nanoseconds; the only
        // draw whose seconds reach u64::MAX, where `nanos_to_duration` must
        // keep the nanoseconds rather than clip to `Duration::MAX`.
        assert_eq!(top, Duration::new(u64::MAX, 0));
        let thousand_years = Duration::from_secs(1000 * 365 * 86_400);
        assert_eq!(uniform(thousand_years, 1 << 63), thousand_years / 2);
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

    #[test]
    fn a_zero_advice_always_gets_a_spread_of_at_least_one_ms() {
        // The spread is then the whole wait, and the core rounds it
        // down to whole milliseconds; a draw under 1 ms meant retrying at once.
        let s = Spread::default();
        for draw in [0, 1, u64::MAX / 100, u64::MAX / 99, 1 << 63, u64::MAX] {
            let d = s.draw(Duration::ZERO, draw);
            assert!(d >= MS(1) && d <= MS(100), "draw {draw}: {d:?}");
        }
        assert_eq!(s.draw(Duration::ZERO, u64::MAX), MS(100));
        // A spread turned off stays off; a cap under 1 ms gives 1 ms.
        let off = Spread { per_mille: 0, min: Duration::ZERO, max: Duration::ZERO, rounded_zero: Duration::ZERO };
        assert_eq!(off.draw(Duration::ZERO, u64::MAX), Duration::ZERO);
        assert_eq!(off.draw_whole_seconds(Duration::ZERO, u64::MAX), Duration::ZERO);
        let tiny = Spread { per_mille: 0, min: Duration::from_micros(300), max: Duration::from_micros(300), ..off };
        assert_eq!(tiny.draw(Duration::ZERO, 0), MS(1));
        // A non-zero advice keeps the full range from zero.
        assert_eq!(s.draw(MS(2000), 0), Duration::ZERO);
    }

    #[test]
    fn a_zero_whole_second_advice_is_spread_over_the_second_its_rounding_left_out() {
        // Issue 26: `Retry-After: 0` from a server that rounds down means
        // "under a second"; a spread of at most 100 ms put every retry of a
        // fleet in the same, still full, second.
        let s = Spread::default();
        assert_eq!(s.cap_whole_seconds(Duration::ZERO), MS(1000));
        assert_eq!(s.draw_whole_seconds(Duration::ZERO, u64::MAX), MS(1000));
        assert_eq!(s.draw_whole_seconds(Duration::ZERO, 0), MS(1));
        assert_eq!(s.draw_whole_seconds(Duration::ZERO, 1 << 63), Duration::from_nanos(500_500_000));
        // A longer advice keeps its share (escalation covers its rounding).
        assert_eq!(s.cap_whole_seconds(MS(2000)), MS(400));
        assert_eq!(s.cap_whole_seconds(MS(60_000)), MS(1000));
        // A zero advice that is not in whole seconds keeps the plain cap.
        assert_eq!(s.draw(Duration::ZERO, u64::MAX), MS(100));
        // A zero cover is brief 002's flat spread.
        let flat = Spread { per_mille: 0, min: MS(250), max: MS(250), rounded_zero: Duration::ZERO };
        assert_eq!(flat.cap_whole_seconds(Duration::ZERO), MS(250));
        assert_eq!((s.largest(), flat.largest()), (MS(1000), MS(250)));
        let wide = Spread { rounded_zero: MS(3000), ..s };
        assert_eq!((wide.cap_whole_seconds(Duration::ZERO), wide.largest()), (MS(3000), MS(3000)));
    }

    #[test]
    fn a_spread_read_from_a_file_without_the_cover_gets_one_second() {
        let s: Spread = serde_json::from_str(r#"{"per_mille":0,"min":"250ms","max":"250ms"}"#).unwrap();
        assert_eq!(s.rounded_zero, MS(1000));
        let s: Spread =
            serde_json::from_str(r#"{"per_mille":0,"min":"250ms","max":"250ms","rounded_zero":"0s"}"#).unwrap();
        assert_eq!(s.rounded_zero, Duration::ZERO);
    }
}
