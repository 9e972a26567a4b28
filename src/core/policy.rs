//! The policy and the one decision the core makes after every attempt.
//!
//! [`decide`] is a pure function: the outcome, the progress so far, the
//! monotonic `now`, two random draws and (optionally) a shared budget go in;
//! [`Decision::Done`], [`Decision::Retry`] or [`Decision::GiveUp`] comes out.
//! The order of the checks is the contract (docs/DESIGN.md "Decision order"):
//!
//! success → terminal → not replayable → cancelled → attempts exhausted →
//! unclear exhausted → compute the wait → advice too long → deadline would
//! pass → shared budget refuses → retry.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::backoff::{AdviceMode, Backoff, Jitter, Spread};
use super::budget::RetryBudget;
use super::classify::{Class, Operation};
use super::retry_after::{Advice, AdviceSource};
use super::{duration_text, millis_json};

mod builder;
pub use builder::PolicyBuilder;

/// All the numbers of a retry policy. Build one from a preset and adjust it
/// with a [`PolicyBuilder`] ([`Policy::to_builder`], or [`Policy::builder`]
/// from the default preset, [`Policy::standard`]); its docs list the
/// defaults. The fields stay public to read (and to set on a policy you
/// hold); the struct is `#[non_exhaustive]`, so a field added later breaks
/// no user's code.
///
/// In TOML every duration is text: `deadline = "90s"`; a missing key takes
/// [`Policy::standard`]'s value.
///
/// Outside this crate a struct literal, even with `..` from a preset, does
/// not compile (so adding a field is not a breaking change):
///
/// ```compile_fail,E0639
/// use retrysim::core::policy::Policy;
///
/// let p = Policy { max_retries: 1, ..Policy::interactive() };
/// ```
///
/// The builder says the same:
///
/// ```
/// use retrysim::core::policy::Policy;
///
/// let p = Policy::interactive().to_builder().max_retries(1).build();
/// assert_eq!(p, { let mut q = Policy::interactive(); q.max_retries = 1; q });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Policy {
    /// A label for traces and reports.
    pub name: String,
    /// Retries after the first attempt: `N` retries means at most `N + 1` attempts.
    pub max_retries: u32,
    /// The whole operation's time, on the monotonic clock from the first attempt.
    #[serde(with = "duration_text")]
    pub deadline: Duration,
    /// An advised wait longer than this gives up at once (no sleep).
    #[serde(with = "duration_text")]
    pub max_single_wait: Duration,
    /// Time reserved for the next attempt: a wait that would leave less than
    /// this before the deadline gives up at once.
    #[serde(with = "duration_text")]
    pub min_attempt_time: Duration,
    /// The longest one attempt may take (bounded further by what is left).
    #[serde(with = "duration_text")]
    pub attempt_timeout: Duration,
    /// The backoff used when there is no advice (and, in
    /// [`AdviceMode::MaxOfAdviceAndBackoff`], as a floor under it).
    pub backoff: Backoff,
    /// How an advised wait and the backoff combine.
    pub advice_mode: AdviceMode,
    /// The random spread added to an advised wait.
    pub spread: Spread,
    /// An advice that was waited out and refused again has proven wrong (a
    /// server that rounds `Retry-After` down, or a fleet that filled the
    /// window first). On, an operation's k-th throttled answer after its
    /// first (k from 0) waits at least the larger of the advice plus k + 1
    /// seconds (when the advice is in whole seconds: each refusal proves it
    /// a second short once more) and the backoff's draw for retry k
    /// ([`WaitBasis::RefusedAgain`]), plus the spread. On in every preset;
    /// off, every throttled answer waits its advice (brief 002's clients).
    pub escalate: bool,
    /// Retries allowed for 429s with no or an unknown code.
    pub unclear_max_retries: u32,
    /// Whether to read `Retry-After` and body hints at all. Off, the backoff
    /// alone decides every wait: only for a server whose advice is known to
    /// be wrong (the invariant "never earlier than advised" then no longer
    /// holds, and the checks do not hold such a policy to it).
    pub use_advice: bool,
    /// Whether the driver gives a POST an `Idempotency-Key` (generated once
    /// per logical operation). Off for an API that rejects unknown headers
    /// or does not deduplicate: a POST is then unsafe and never replayed
    /// after an ambiguous failure.
    pub idempotency_keys: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::standard()
    }
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Policy {
    /// A person is waiting (brief 000: "5 to 10 seconds").
    ///
    /// 3 retries, deadline 10 s, max single wait 10 s, 500 ms reserved per
    /// attempt, 5 s attempt timeout, full-jitter backoff 200 ms..2 s, advice
    /// plus spread, 1 retry for an unclear 429.
    pub fn interactive() -> Policy {
        Policy {
            name: "interactive".into(),
            max_retries: 3,
            deadline: ms(10_000),
            max_single_wait: ms(10_000),
            min_attempt_time: ms(500),
            attempt_timeout: ms(5_000),
            backoff: Backoff { base: ms(200), cap: ms(2_000), jitter: Jitter::Full },
            advice_mode: AdviceMode::AdvicePlusSpread,
            spread: Spread::default(),
            escalate: true,
            unclear_max_retries: 1,
            use_advice: true,
            idempotency_keys: true,
        }
    }

    /// A background worker (brief 000: "120 seconds, which is two full windows").
    ///
    /// 8 retries, deadline 120 s, max single wait 60 s, 1 s reserved per
    /// attempt, 30 s attempt timeout, full-jitter backoff 1 s..30 s, advice
    /// plus spread, 8 retries for an unclear 429 (as many as for any other:
    /// a 429 with neither code nor advice is most often a proxy's limiter,
    /// nginx `limit_req`, and the deadline still bounds them).
    pub fn background() -> Policy {
        Policy {
            max_retries: 8,
            deadline: ms(120_000),
            max_single_wait: ms(60_000),
            min_attempt_time: ms(1_000),
            attempt_timeout: ms(30_000),
            backoff: Backoff { base: ms(1_000), cap: ms(30_000), jitter: Jitter::Full },
            unclear_max_retries: 8,
            ..Policy::interactive()
        }
        .named("background")
    }

    /// Brief 003's overnight batch: deadline 90 s, full jitter base 1 s cap
    /// 30 s, `max(advice, backoff) + spread` (a valid advice is never
    /// truncated to the 30 s cap), max single wait 90 s, 1 s reserved per
    /// attempt, 30 s attempt timeout; 8 retries, 8 for an unclear 429 (brief
    /// 003 said 5: the 90 s deadline is the bound, see DESIGN.md).
    pub fn batch() -> Policy {
        Policy {
            deadline: ms(90_000),
            max_single_wait: ms(90_000),
            advice_mode: AdviceMode::MaxOfAdviceAndBackoff,
            ..Policy::background()
        }
        .named("batch")
    }

    /// A middle ground for services: 8 retries, deadline 60 s, max single
    /// wait 60 s, 1 s reserved per attempt, 20 s attempt timeout, full-jitter
    /// backoff 500 ms..20 s, advice plus spread, 8 retries for an unclear 429.
    pub fn standard() -> Policy {
        Policy {
            deadline: ms(60_000),
            max_single_wait: ms(60_000),
            attempt_timeout: ms(20_000),
            backoff: Backoff { base: ms(500), cap: ms(20_000), jitter: Jitter::Full },
            ..Policy::background()
        }
        .named("standard")
    }

    /// The presets by name, for the CLI and config files.
    pub fn preset(name: &str) -> Option<Policy> {
        match name {
            "interactive" => Some(Policy::interactive()),
            "background" => Some(Policy::background()),
            "batch" => Some(Policy::batch()),
            "standard" => Some(Policy::standard()),
            _ => None,
        }
    }

    /// The preset names, in the order the docs list them.
    pub const PRESETS: [&'static str; 4] = ["interactive", "background", "batch", "standard"];

    /// The same policy under another name.
    pub fn named(mut self, name: &str) -> Policy {
        self.name = name.into();
        self
    }

    /// A builder that starts from the default preset, [`Policy::standard`]
    /// (see [`PolicyBuilder`] for every default).
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::from_policy(Policy::standard())
    }

    /// A builder that starts from this policy: `Policy::interactive().to_builder().max_retries(1).build()`.
    pub fn to_builder(self) -> PolicyBuilder {
        PolicyBuilder::from_policy(self)
    }
}

/// What the core knows after one attempt.
#[derive(Debug, Clone, Copy)]
pub struct Attempted<'a> {
    /// How safe a replay is.
    pub operation: Operation,
    /// The class of this attempt's outcome.
    pub class: Class,
    /// The answer's status, when there was one.
    pub status: Option<u16>,
    /// The answer's error code, when there was one.
    pub code: Option<&'a str>,
    /// The advice this answer carried ([`Advice::none`] for a transport error).
    pub advice: &'a Advice,
    /// Attempts made so far, this one included (1 after the first).
    pub attempts: u32,
    /// Unclear answers so far, this one included.
    pub unclear: u32,
    /// Throttled answers so far, this one included: from 2 on, an advice was
    /// waited out and refused again (see [`Policy::escalate`]).
    pub throttled: u32,
    /// Time since the first attempt started (monotonic).
    pub elapsed: Duration,
    /// The previous wait, for decorrelated jitter.
    pub previous_wait: Option<Duration>,
    /// Whether the caller cancelled the operation.
    pub cancelled: bool,
}

/// Two random draws per decision, always both taken, so the random sequence
/// does not depend on the path a decision took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draws {
    /// For the backoff's jitter.
    pub backoff: u64,
    /// For the spread on top of an advice.
    pub spread: u64,
}

/// What a wait is made of, for traces and for reviewers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WaitWhy {
    /// What the base of the wait came from.
    pub basis: WaitBasis,
    /// The advised wait, when there was one and it was used.
    #[serde(serialize_with = "millis_json::serialize_opt")]
    pub advised: Option<Duration>,
    /// The base wait before spread: the advice, the backoff draw, or the larger.
    #[serde(serialize_with = "millis_json::serialize")]
    pub base: Duration,
    /// The random spread added on top of an advised wait.
    #[serde(serialize_with = "millis_json::serialize")]
    pub jitter: Duration,
    /// The backoff window the draw was taken from, when the backoff was used.
    #[serde(serialize_with = "millis_json::serialize_opt")]
    pub window: Option<Duration>,
}

/// The origin of a wait's base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitBasis {
    /// The server's advice (source named).
    Advice(AdviceSource),
    /// The policy's backoff: there was no usable advice.
    Backoff,
    /// `max(advice, backoff)` ([`AdviceMode::MaxOfAdviceAndBackoff`]), and
    /// the backoff draw was larger.
    BackoffOverAdvice,
    /// An advice waited out and refused again ([`Policy::escalate`]): the
    /// larger of the advice plus a second per such refusal (for a
    /// whole-second advice) and a backoff draw from the escalation's window.
    RefusedAgain,
    /// The backoff draw was longer than the server's upper bound on the
    /// wait (a reset "to the initial state", source named; see
    /// [`AdviceSource::is_upper_bound`]), so the bound was waited: the limit
    /// is surely back by then.
    Bound(AdviceSource),
}

/// Why the core stopped retrying. Every variant says what the caller can do next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GiveUpReason {
    /// A request that cannot be sent as it is, and no retry can change that
    /// (a [`TransportFailure::Unsendable`](super::classify::TransportFailure::Unsendable)
    /// failure, or any failure without an answer that the classifier calls
    /// terminal): nothing was sent. The failure's message says why.
    Unsendable,
    /// An answer that retrying cannot fix.
    Terminal {
        /// The status that ended it.
        status: u16,
        /// The body's error code, which tells a spent quota from a full window.
        code: Option<String>,
    },
    /// The request may have run, and the operation may not be replayed.
    NotReplayable,
    /// The caller cancelled.
    Cancelled,
    /// `max_retries + 1` attempts were made.
    AttemptsExhausted {
        /// Attempts made, `max_retries + 1`.
        attempts: u32,
    },
    /// Too many 429s with no or an unknown code.
    UnclearExhausted {
        /// Unclear 429s seen, more than `unclear_max_retries` allows.
        unclear: u32,
    },
    /// The advice is longer than `max_single_wait`.
    AdviceTooLong {
        /// The wait the server advised.
        #[serde(serialize_with = "millis_json::serialize")]
        advised: Duration,
        /// The policy's longest single wait, which the advice passed.
        #[serde(serialize_with = "millis_json::serialize")]
        max_single_wait: Duration,
    },
    /// The wait plus `min_attempt_time` would pass the deadline.
    DeadlineWouldPass {
        /// The wait the retry would have needed.
        #[serde(serialize_with = "millis_json::serialize")]
        wait: Duration,
        /// What was left of the deadline.
        #[serde(serialize_with = "millis_json::serialize")]
        remaining: Duration,
    },
    /// The shared retry budget refused.
    BudgetExhausted,
    /// The caller's `Idempotency-Key` is not visible ASCII, so it cannot be
    /// reported or queued under as text. The driver sends nothing rather
    /// than put a key of its own in its place (given by the driver before
    /// the first attempt, never by [`decide`]).
    InvalidIdempotencyKey,
}

impl GiveUpReason {
    /// A stable snake_case name, for reports and JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            GiveUpReason::Unsendable => "unsendable",
            GiveUpReason::Terminal { .. } => "terminal",
            GiveUpReason::NotReplayable => "not_replayable",
            GiveUpReason::Cancelled => "cancelled",
            GiveUpReason::AttemptsExhausted { .. } => "attempts_exhausted",
            GiveUpReason::UnclearExhausted { .. } => "unclear_exhausted",
            GiveUpReason::AdviceTooLong { .. } => "advice_too_long",
            GiveUpReason::DeadlineWouldPass { .. } => "deadline_would_pass",
            GiveUpReason::BudgetExhausted => "budget_exhausted",
            GiveUpReason::InvalidIdempotencyKey => "invalid_idempotency_key",
        }
    }
}

/// Seconds with millisecond precision, for messages: `2.180s`.
pub fn secs(d: Duration) -> String {
    let ms = d.as_millis();
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

impl fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUpReason::Unsendable => f.write_str(
                "the request cannot be sent and no retry can change that: nothing was sent; fix the URL or the client's TLS setup (the failure says which)",
            ),
            GiveUpReason::Terminal { status, code } => {
                let code = code.as_deref().unwrap_or("");
                let next = match code {
                    "QUOTA_EXCEEDED" | "insufficient_quota" => "the quota is spent: tell a person or raise the quota",
                    "SIGNUP_REQUIRED" | "signup_required" => "the anonymous cap is reached: use an API key",
                    "INSUFFICIENT_CREDITS" | "insufficient_credits" => "the balance is empty: top up",
                    "IDEMPOTENCY_KEY_REUSED" => "this key was used with another body: use a new key for a new operation",
                    _ => "retrying cannot help: fix the request",
                };
                match code {
                    "" => write!(f, "terminal answer {status}: {next}"),
                    code => write!(f, "terminal answer {status} {code}: {next}"),
                }
            }
            GiveUpReason::NotReplayable => f.write_str(
                "the request may have reached the server and the operation is not safe to replay: send POSTs with an Idempotency-Key",
            ),
            GiveUpReason::Cancelled => f.write_str("cancelled by the caller"),
            GiveUpReason::AttemptsExhausted { attempts } => {
                write!(f, "attempts exhausted after {attempts} attempts: raise max_retries or queue the work")
            }
            GiveUpReason::UnclearExhausted { unclear } => write!(
                f,
                "{unclear} 429s with no known error code: keep the body for investigation (raise unclear_max_retries to try more)"
            ),
            GiveUpReason::AdviceTooLong { advised, max_single_wait } => write!(
                f,
                "advice too long: the server asks for {} but max_single_wait is {}: queue the work under the same key and retry later",
                secs(*advised),
                secs(*max_single_wait)
            ),
            GiveUpReason::DeadlineWouldPass { wait, remaining } => write!(
                f,
                "deadline would pass: waiting {} and then attempting needs more than the {} left: queue the work under the same key",
                secs(*wait),
                secs(*remaining)
            ),
            GiveUpReason::BudgetExhausted => {
                f.write_str("budget exhausted: the shared retry budget is spent; lower concurrency or raise the budget")
            }
            GiveUpReason::InvalidIdempotencyKey => f.write_str(
                "the caller's Idempotency-Key has bytes outside visible ASCII: nothing was sent and no other key was put in its place; use a key of visible ASCII such as a UUID",
            ),
        }
    }
}

/// The core's answer after one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A success: return it.
    Done,
    /// Sleep `wait`, then try again.
    Retry {
        /// How long to sleep, spread included.
        wait: Duration,
        /// Where the wait came from: advice, backoff, or the larger of both.
        why: WaitWhy,
    },
    /// Stop, and return the last outcome with this reason.
    GiveUp {
        /// The rule that stopped it.
        reason: GiveUpReason,
    },
}

/// What a whole-second advice may leave out: a delta-seconds value of N
/// means somewhere in [N, N+1) seconds. An escalation adds it once per
/// refusal of a waited-out advice.
const ROUNDING: Duration = Duration::from_secs(1);

fn give_up(reason: GiveUpReason) -> Decision {
    Decision::GiveUp { reason }
}

fn ceil_ms(d: Duration) -> Duration {
    let ms = d.as_nanos().div_ceil(1_000_000);
    if ms > u64::MAX as u128 { Duration::MAX } else { Duration::from_millis(ms as u64) }
}

/// The wait under an upper bound from `source` (docs/DESIGN.md, "Rate-limit
/// dialects"): the backoff draw, cut to the bound; no spread, no
/// escalation, never too long.
fn cut_to_bound(source: AdviceSource, bound: Duration, backoff: Duration, window: Option<Duration>) -> WaitWhy {
    if backoff > bound {
        WaitWhy { basis: WaitBasis::Bound(source), advised: Some(bound), base: bound, jitter: Duration::ZERO, window }
    } else {
        WaitWhy { basis: WaitBasis::Backoff, advised: None, base: backoff, jitter: Duration::ZERO, window }
    }
}

/// Decides what to do after an attempt, in the documented order.
///
/// `now` is the monotonic time (only a shared budget reads it); `budget` is
/// asked last, so a refused retry never costs a token it did not need.
pub fn decide(
    policy: &Policy,
    a: &Attempted<'_>,
    draws: Draws,
    budget: Option<&dyn RetryBudget>,
    now: Duration,
) -> Decision {
    match a.class {
        Class::Success => return Decision::Done,
        Class::Terminal => {
            return give_up(match a.status {
                None => GiveUpReason::Unsendable,
                Some(status) => GiveUpReason::Terminal { status, code: a.code.map(str::to_owned) },
            });
        }
        Class::Transient | Class::Ambiguous if !a.operation.replayable() => {
            // A request that never left may always be sent; one that may have
            // arrived, or that the server answered with a 5xx, only if replayable.
            let never_left = a.class == Class::Transient && a.status.is_none();
            if !never_left {
                return give_up(GiveUpReason::NotReplayable);
            }
        }
        _ => {}
    }
    if a.cancelled {
        return give_up(GiveUpReason::Cancelled);
    }
    let max_attempts = policy.max_retries.saturating_add(1);
    if a.attempts >= max_attempts {
        return give_up(GiveUpReason::AttemptsExhausted { attempts: a.attempts });
    }
    if a.class == Class::Unclear && a.unclear > policy.unclear_max_retries {
        return give_up(GiveUpReason::UnclearExhausted { unclear: a.unclear });
    }

    let retry_index = a.attempts.saturating_sub(1);
    let backoff = policy.backoff.wait(retry_index, a.previous_wait, draws.backoff);
    let window = Some(policy.backoff.window(retry_index));
    let advised = a.advice.wait.filter(|_| policy.use_advice);
    let why = match advised {
        None => WaitWhy { basis: WaitBasis::Backoff, advised: None, base: backoff, jitter: Duration::ZERO, window },
        Some(bound) if a.advice.source.is_upper_bound() => cut_to_bound(a.advice.source, bound, backoff, window),
        Some(adv) => {
            if adv > policy.max_single_wait {
                return give_up(GiveUpReason::AdviceTooLong { advised: adv, max_single_wait: policy.max_single_wait });
            }
            let whole_seconds = a.advice.in_whole_seconds();
            let jitter = if whole_seconds {
                policy.spread.draw_whole_seconds(adv, draws.spread)
            } else {
                policy.spread.draw(adv, draws.spread)
            };
            let mut why = if policy.advice_mode == AdviceMode::MaxOfAdviceAndBackoff && backoff > adv {
                WaitWhy { basis: WaitBasis::BackoffOverAdvice, advised: Some(adv), base: backoff, jitter, window }
            } else {
                WaitWhy {
                    basis: WaitBasis::Advice(a.advice.source),
                    advised: Some(adv),
                    base: adv,
                    jitter,
                    window: None,
                }
            };
            if policy.escalate && a.class == Class::Throttled && a.throttled >= 2 {
                // Refused again after waiting an earlier advice out: each such
                // refusal proves a whole-second value a second short once
                // more, and the backoff counts from this operation's first
                // escalation; the longer wins (docs/DESIGN.md "Retry-After").
                let escalation = a.throttled - 2;
                let rounding = if whole_seconds { ROUNDING.saturating_mul(escalation + 1) } else { Duration::ZERO };
                let again = policy.backoff.wait(escalation, a.previous_wait, draws.backoff);
                let base = adv.saturating_add(rounding).max(again);
                if base > why.base {
                    let window = Some(policy.backoff.window(escalation));
                    why = WaitWhy { basis: WaitBasis::RefusedAgain, advised: Some(adv), base, jitter, window };
                }
            }
            why
        }
    };
    // Whole milliseconds: traces show what is slept, and rounding the base
    // up never retries earlier than advised.
    let mut why = why;
    why.base = ceil_ms(why.base);
    why.jitter = Duration::from_millis(why.jitter.as_millis() as u64);
    let wait = why.base.saturating_add(why.jitter);
    let remaining = policy.deadline.saturating_sub(a.elapsed);
    if wait.saturating_add(policy.min_attempt_time) > remaining {
        return give_up(GiveUpReason::DeadlineWouldPass { wait, remaining });
    }
    if let Some(b) = budget
        && !b.withdraw(now)
    {
        return give_up(GiveUpReason::BudgetExhausted);
    }
    Decision::Retry { wait, why }
}

#[cfg(test)]
mod tests;
