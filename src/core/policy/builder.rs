//! [`PolicyBuilder`]: a [`Policy`] set one field at a time, so that a field
//! added to the policy later breaks no user's code (`Policy` is
//! `#[non_exhaustive]`: outside this crate it cannot be written as a struct
//! literal, only built from a preset and adjusted).

use std::time::Duration;

use super::Policy;
use crate::core::backoff::{AdviceMode, Backoff, Spread};

/// A [`Policy`] under construction: start from a preset, change what your
/// service needs, then [`build`](PolicyBuilder::build). Every setter takes
/// the builder by value and returns it, so the calls chain; a field you do
/// not set keeps the preset's value.
///
/// ```
/// use std::time::Duration;
/// use retrysim::core::policy::Policy;
///
/// // From a preset (the name stays the preset's until `name` changes it):
/// let quick = Policy::interactive().to_builder().max_retries(1).build();
/// assert_eq!((quick.name.as_str(), quick.max_retries), ("interactive", 1));
///
/// // From the default preset, `standard`:
/// let p = Policy::builder().name("uploads").deadline(Duration::from_secs(30)).idempotency_keys(false).build();
/// assert_eq!(p.max_retries, Policy::standard().max_retries);
/// ```
///
/// A policy read from TOML (`[policy]` in a scenario) needs no builder:
/// missing keys take [`Policy::standard`]'s values there too.
///
/// # Default
/// [`Policy::builder`] starts from [`Policy::standard`]; [`Policy::to_builder`]
/// from any policy, e.g. another preset. `standard`'s values:
/// - `name`: `"standard"`;
/// - `max_retries`: 8 (at most 9 attempts);
/// - `deadline`: 60 s; `max_single_wait`: 60 s;
/// - `min_attempt_time`: 1 s; `attempt_timeout`: 20 s;
/// - `backoff`: full jitter, base 500 ms, cap 20 s;
/// - `advice_mode`: [`AdviceMode::AdvicePlusSpread`];
/// - `spread`: [`Spread::default`] (20% of the advice, 100 ms to 1 s);
/// - `escalate`: on; `unclear_max_retries`: 8 (as many as `max_retries`);
/// - `use_advice`: on; `idempotency_keys`: on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct PolicyBuilder {
    policy: Policy,
}

impl PolicyBuilder {
    /// Starts from `policy`: what is not set keeps its value.
    pub fn from_policy(policy: Policy) -> PolicyBuilder {
        PolicyBuilder { policy }
    }

    /// The policy as set so far.
    pub fn build(self) -> Policy {
        self.policy
    }

    /// A label for traces and reports ([`Policy::name`]).
    pub fn name(mut self, name: impl Into<String>) -> PolicyBuilder {
        self.policy.name = name.into();
        self
    }

    /// Retries after the first attempt: `n` means at most `n + 1` attempts
    /// ([`Policy::max_retries`]).
    pub fn max_retries(mut self, n: u32) -> PolicyBuilder {
        self.policy.max_retries = n;
        self
    }

    /// The whole operation's time from its first attempt ([`Policy::deadline`]).
    pub fn deadline(mut self, deadline: Duration) -> PolicyBuilder {
        self.policy.deadline = deadline;
        self
    }

    /// An advised wait longer than this gives up at once ([`Policy::max_single_wait`]).
    pub fn max_single_wait(mut self, wait: Duration) -> PolicyBuilder {
        self.policy.max_single_wait = wait;
        self
    }

    /// Time reserved for the next attempt before the deadline
    /// ([`Policy::min_attempt_time`]).
    pub fn min_attempt_time(mut self, time: Duration) -> PolicyBuilder {
        self.policy.min_attempt_time = time;
        self
    }

    /// The longest one attempt may take ([`Policy::attempt_timeout`]).
    pub fn attempt_timeout(mut self, timeout: Duration) -> PolicyBuilder {
        self.policy.attempt_timeout = timeout;
        self
    }

    /// The backoff used when there is no advice ([`Policy::backoff`]).
    pub fn backoff(mut self, backoff: Backoff) -> PolicyBuilder {
        self.policy.backoff = backoff;
        self
    }

    /// How an advised wait and the backoff combine ([`Policy::advice_mode`]).
    pub fn advice_mode(mut self, mode: AdviceMode) -> PolicyBuilder {
        self.policy.advice_mode = mode;
        self
    }

    /// The random spread added to an advised wait ([`Policy::spread`]).
    pub fn spread(mut self, spread: Spread) -> PolicyBuilder {
        self.policy.spread = spread;
        self
    }

    /// Whether an advice waited out and refused again escalates the next
    /// wait ([`Policy::escalate`]).
    pub fn escalate(mut self, on: bool) -> PolicyBuilder {
        self.policy.escalate = on;
        self
    }

    /// Retries allowed for 429s with no or an unknown code
    /// ([`Policy::unclear_max_retries`]).
    pub fn unclear_max_retries(mut self, n: u32) -> PolicyBuilder {
        self.policy.unclear_max_retries = n;
        self
    }

    /// Whether `Retry-After` and body hints are read at all ([`Policy::use_advice`]).
    pub fn use_advice(mut self, on: bool) -> PolicyBuilder {
        self.policy.use_advice = on;
        self
    }

    /// Whether the driver gives a POST an `Idempotency-Key`
    /// ([`Policy::idempotency_keys`]).
    pub fn idempotency_keys(mut self, on: bool) -> PolicyBuilder {
        self.policy.idempotency_keys = on;
        self
    }
}

impl From<Policy> for PolicyBuilder {
    fn from(policy: Policy) -> PolicyBuilder {
        PolicyBuilder::from_policy(policy)
    }
}
