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

/// All the numbers of a retry policy. Build one from a preset and adjust it.
///
/// In TOML every duration is text: `deadline = "90s"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
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
mod tests {
    use super::*;
    use crate::core::budget::TokenBucketBudget;
    use crate::core::retry_after::HeaderState;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const HALF: u64 = 1 << 63;

    #[test]
    fn a_terminal_answer_without_a_code_reads_cleanly() {
        let bare = GiveUpReason::Terminal { status: 400, code: None };
        assert_eq!(bare.to_string(), "terminal answer 400: retrying cannot help: fix the request");
        let coded = GiveUpReason::Terminal { status: 429, code: Some("QUOTA_EXCEEDED".into()) };
        assert!(coded.to_string().starts_with("terminal answer 429 QUOTA_EXCEEDED: the quota is spent"), "{coded}");
    }

    /// Each terminal code says what a person can do next, in its own words.
    #[test]
    fn each_terminal_code_says_what_to_do_next() {
        let words = |code: &str| GiveUpReason::Terminal { status: 429, code: Some(code.into()) }.to_string();
        for (codes, next) in [
            (["QUOTA_EXCEEDED", "insufficient_quota"], "the quota is spent: tell a person or raise the quota"),
            (["SIGNUP_REQUIRED", "signup_required"], "the anonymous cap is reached: use an API key"),
            (["INSUFFICIENT_CREDITS", "insufficient_credits"], "the balance is empty: top up"),
            (["IDEMPOTENCY_KEY_REUSED"; 2], "this key was used with another body: use a new key for a new operation"),
        ] {
            for code in codes {
                assert!(words(code).ends_with(next), "{code}: {}", words(code));
            }
        }
        assert!(words("OTHER").ends_with("retrying cannot help: fix the request"), "{}", words("OTHER"));
    }

    fn advice(secs: u64) -> Advice {
        Advice {
            source: AdviceSource::HeaderSeconds,
            wait: Some(S(secs)),
            header: HeaderState::Valid,
            server_date_used: false,
        }
    }

    fn attempted<'a>(class: Class, advice: &'a Advice, attempts: u32, elapsed: Duration) -> Attempted<'a> {
        Attempted {
            operation: Operation::Keyed,
            class,
            status: Some(429),
            code: Some("RATE_LIMITED"),
            advice,
            attempts,
            unclear: 0,
            throttled: u32::from(class == Class::Throttled),
            elapsed,
            previous_wait: None,
            cancelled: false,
        }
    }

    fn draws(x: u64) -> Draws {
        Draws { backoff: x, spread: x }
    }

    fn run(p: &Policy, a: &Attempted<'_>) -> Decision {
        decide(p, a, draws(HALF), None, Duration::ZERO)
    }

    /// An upper bound (OpenAI's reset "to the initial state") cuts the
    /// backoff and is never a reason to stop, however long.
    #[test]
    fn an_upper_bound_cuts_the_backoff_and_never_gives_up_as_too_long() {
        let p = Policy::background();
        let bound = |wait: Duration| Advice { source: AdviceSource::OpenAiReset, wait: Some(wait), ..Advice::none() };
        // Background's first backoff window is 1 s: the half draw is 500 ms.
        let short = bound(Duration::from_millis(100));
        let Decision::Retry { wait, why } = run(&p, &attempted(Class::Throttled, &short, 1, S(0))) else { panic!() };
        assert_eq!(
            (wait, why.basis, why.jitter),
            (Duration::from_millis(100), WaitBasis::Bound(AdviceSource::OpenAiReset), Duration::ZERO)
        );
        let long = bound(S(360));
        let Decision::Retry { wait, why } = run(&p, &attempted(Class::Throttled, &long, 1, S(0))) else { panic!() };
        assert_eq!((wait, why.basis), (Duration::from_millis(500), WaitBasis::Backoff));
        // Past max_single_wait (60 s): still the backoff, no `advice_too_long`;
        // refused again: no escalation on a bound.
        let day = bound(S(86_400));
        let mut again = attempted(Class::Throttled, &day, 3, S(0));
        again.throttled = 3;
        let Decision::Retry { why, .. } = run(&p, &again) else { panic!() };
        assert_eq!(why.basis, WaitBasis::Backoff);
        // The same advice as a lower bound gives up at once (the negative control).
        let lower = Advice { source: AdviceSource::RateLimitField, ..day.clone() };
        assert!(matches!(
            run(&p, &attempted(Class::Throttled, &lower, 1, S(0))),
            Decision::GiveUp { reason: GiveUpReason::AdviceTooLong { .. } }
        ));
    }

    #[test]
    fn success_is_done_and_terminal_stops_with_the_code() {
        let none = Advice::none();
        assert_eq!(run(&Policy::batch(), &attempted(Class::Success, &none, 1, S(0))), Decision::Done);
        let mut a = attempted(Class::Terminal, &none, 1, S(0));
        a.code = Some("QUOTA_EXCEEDED");
        let d = run(&Policy::batch(), &a);
        assert_eq!(d, give_up(GiveUpReason::Terminal { status: 429, code: Some("QUOTA_EXCEEDED".into()) }));
    }

    #[test]
    fn advice_plus_spread() {
        let adv = advice(2);
        let d = run(&Policy::standard(), &attempted(Class::Throttled, &adv, 1, S(0)));
        // Spread cap for 2 s is 400 ms; a half draw gives 200 ms.
        let Decision::Retry { wait, why } = d else { panic!("{d:?}") };
        assert_eq!(wait, Duration::from_millis(2200));
        assert_eq!(why.basis, WaitBasis::Advice(AdviceSource::HeaderSeconds));
        assert_eq!((why.base, why.jitter), (S(2), Duration::from_millis(200)));
    }

    #[test]
    fn zero_advice_still_gets_jitter() {
        // Up to a whole second for `Retry-After: 0`, never zero.
        let adv = advice(0);
        let d = decide(&Policy::standard(), &attempted(Class::Throttled, &adv, 1, S(0)), draws(u64::MAX), None, S(0));
        assert!(matches!(d, Decision::Retry { wait, .. } if wait == S(1)), "{d:?}");
    }

    #[test]
    fn a_zero_advice_never_gives_a_zero_wait() {
        // Once (`explain --seed 529`), a draw whose spread was under 1 ms was
        // rounded down to a 0 ms wait.
        let adv = advice(0);
        for x in [0, 1, u64::MAX / 1000, u64::MAX / 100 - 1] {
            for p in [Policy::standard(), Policy::batch()] {
                let d = decide(&p, &attempted(Class::Throttled, &adv, 1, S(0)), draws(x), None, S(0));
                let Decision::Retry { wait, why } = d else { panic!("{d:?}") };
                assert!(wait >= Duration::from_millis(1), "{}, draw {x}: {why:?}", p.name);
            }
        }
    }

    #[test]
    fn a_zero_retry_after_is_spread_over_the_second_it_may_leave_out() {
        // Issue 26: `Retry-After: 0` from a server that rounds down means
        // "under a second"; the spread was at most 100 ms.
        let adv = advice(0);
        for p in Policy::PRESETS.map(|n| Policy::preset(n).unwrap()) {
            let spread_only = Draws { backoff: 0, spread: u64::MAX };
            let top = decide(&p, &attempted(Class::Throttled, &adv, 1, S(0)), spread_only, None, S(0));
            assert!(matches!(top, Decision::Retry { wait, .. } if wait == S(1)), "{}: {top:?}", p.name);
        }
        // A body's resetAt that has passed is not in whole seconds: 100 ms at most.
        let reset = Advice { source: AdviceSource::BodyReset, ..advice(0) };
        let d = decide(&Policy::standard(), &attempted(Class::Throttled, &reset, 1, S(0)), draws(u64::MAX), None, S(0));
        assert!(matches!(d, Decision::Retry { wait, .. } if wait == Duration::from_millis(100)), "{d:?}");
        // Seed 002's flat spread has no cover.
        let mut flat = Policy::standard();
        flat.spread.rounded_zero = Duration::ZERO;
        let d = decide(&flat, &attempted(Class::Throttled, &adv, 1, S(0)), draws(u64::MAX), None, S(0));
        assert!(matches!(d, Decision::Retry { wait, .. } if wait == Duration::from_millis(100)), "{d:?}");
    }

    fn refused(throttled: u32, adv: &Advice) -> Attempted<'_> {
        Attempted { throttled, ..attempted(Class::Throttled, adv, throttled, S(3)) }
    }

    #[test]
    fn an_advice_waited_out_and_refused_again_escalates() {
        // Issue 26: the second throttled answer waits at least the advice
        // plus the second its rounding may leave out, whatever the draws;
        // each further refusal adds a second more.
        let p = Policy::standard(); // backoff 500 ms .. 20 s, full jitter
        let adv = advice(0);
        let d = decide(&p, &refused(2, &adv), draws(0), None, S(0));
        let Decision::Retry { wait, why } = d else { panic!("{d:?}") };
        assert_eq!((why.basis, why.base, why.advised), (WaitBasis::RefusedAgain, S(1), Some(S(0))));
        assert_eq!((wait, why.window), (Duration::from_millis(1_001), Some(Duration::from_millis(500))));
        // The 4th escalation (5th throttled answer, k = 3): the advice plus
        // 4 s, against a draw from the backoff's 4 s window (counted from
        // the first escalation); a backoff over it wins.
        let d = decide(&p, &refused(5, &advice(1)), draws(u64::MAX), None, S(0));
        let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
        assert_eq!((why.basis, why.base, why.window), (WaitBasis::RefusedAgain, S(5), Some(S(4))));
        // Later escalations grow with the backoff (16 s window at k = 5) for
        // a policy that allows that many tries.
        let many = Policy { max_retries: 10, ..Policy::standard() };
        let d = decide(&many, &refused(7, &advice(0)), draws(u64::MAX), None, S(0));
        let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
        assert_eq!((why.base, why.window), (S(16), Some(S(16))));
    }

    #[test]
    fn escalation_needs_a_refusal_after_a_waited_advice_and_the_policy() {
        let adv = advice(0);
        // The first throttled answer: the advice alone (the negative control).
        let first = decide(&Policy::standard(), &refused(1, &adv), draws(0), None, S(0));
        let Decision::Retry { why, .. } = first else { panic!("{first:?}") };
        assert_eq!((why.basis, why.base), (WaitBasis::Advice(AdviceSource::HeaderSeconds), S(0)));
        // Off (brief 002's clients): every refusal waits its advice.
        let off = Policy { escalate: false, ..Policy::standard() };
        let d = decide(&off, &refused(4, &adv), draws(u64::MAX), None, S(0));
        let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
        assert_eq!(why.base, S(0));
        // A 409 in progress with advice is not a refusal.
        let mut busy = refused(4, &adv);
        busy.class = Class::InProgress;
        let d = decide(&Policy::standard(), &busy, draws(0), None, S(0));
        let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
        assert_eq!(why.base, S(0));
    }

    #[test]
    fn an_advice_with_milliseconds_escalates_by_the_backoff_alone() {
        // A resetAt is exact: no second to cover, only the backoff.
        let reset = Advice { source: AdviceSource::BodyReset, ..advice(0) };
        let d = decide(&Policy::standard(), &refused(2, &reset), draws(u64::MAX), None, S(0));
        let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
        assert_eq!((why.basis, why.base), (WaitBasis::RefusedAgain, Duration::from_millis(500)));
        let d = decide(&Policy::standard(), &refused(2, &reset), draws(0), None, S(0));
        let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
        assert_eq!((why.basis, why.base), (WaitBasis::Advice(AdviceSource::BodyReset), S(0)));
    }

    #[test]
    fn batch_escalation_keeps_its_larger_backoff() {
        // Batch already takes max(advice, backoff for the attempt); a refusal
        // adds the rounding second when that is larger.
        let adv = advice(2);
        let d = decide(&Policy::batch(), &refused(4, &adv), draws(u64::MAX), None, S(0));
        let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
        assert_eq!((why.basis, why.base), (WaitBasis::BackoffOverAdvice, S(8)));
        let d = decide(&Policy::batch(), &refused(2, &adv), draws(0), None, S(0));
        let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
        assert_eq!((why.basis, why.base), (WaitBasis::RefusedAgain, S(3)));
    }

    #[test]
    fn json_milliseconds_are_exact_at_any_size() {
        // 2^64 - 1 s is 18446744073709551615000 ms; saturating at
        // u64::MAX ms showed it 1000x too small.
        let huge = GiveUpReason::AdviceTooLong { advised: S(u64::MAX), max_single_wait: S(60) };
        let v = serde_json::to_value(&huge).unwrap();
        assert_eq!(v["advised"], "18446744073709551615000");
        assert_eq!(v["max_single_wait"], 60_000);
        // Up to 2^53 - 1 ms a number (exact in every JSON parser), beyond it a string.
        let why = |ms: u64| WaitWhy {
            basis: WaitBasis::Backoff,
            advised: Some(Duration::from_millis(ms)),
            base: Duration::from_millis(ms),
            jitter: Duration::ZERO,
            window: None,
        };
        let v = serde_json::to_value(why((1 << 53) - 1)).unwrap();
        assert_eq!((&v["advised"], &v["base"]), (&serde_json::json!(9_007_199_254_740_991u64), &v["advised"]));
        let v = serde_json::to_value(why(1 << 53)).unwrap();
        assert_eq!((&v["advised"], &v["window"]), (&serde_json::json!("9007199254740992"), &serde_json::Value::Null));
        let max = GiveUpReason::DeadlineWouldPass { wait: Duration::MAX, remaining: Duration::ZERO };
        assert_eq!(serde_json::to_value(&max).unwrap()["wait"], "18446744073709551615999");
    }

    #[test]
    fn batch_mode_takes_the_larger_of_advice_and_backoff() {
        let adv = advice(1);
        // Retry index 3: window 8 s, full draw 8 s > 1 s advice.
        let d = decide(&Policy::batch(), &attempted(Class::Throttled, &adv, 4, S(0)), draws(u64::MAX), None, S(0));
        let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
        assert_eq!((why.basis, why.base), (WaitBasis::BackoffOverAdvice, S(8)));
        // A 40 s advice is never truncated to the 30 s cap.
        let adv = advice(40);
        let d = decide(&Policy::batch(), &attempted(Class::Throttled, &adv, 1, S(0)), draws(u64::MAX), None, S(0));
        let Decision::Retry { why, .. } = d else { panic!("{d:?}") };
        assert_eq!(why.base, S(40));
    }

    #[test]
    fn no_advice_uses_backoff() {
        let none = Advice::none();
        let d = decide(&Policy::batch(), &attempted(Class::Throttled, &none, 3, S(0)), draws(u64::MAX), None, S(0));
        let Decision::Retry { wait, why } = d else { panic!("{d:?}") };
        assert_eq!((wait, why.basis, why.window), (S(4), WaitBasis::Backoff, Some(S(4))));
    }

    #[test]
    fn n_retries_means_n_plus_one_attempts() {
        let adv = advice(1);
        let p = Policy::batch();
        for attempts in 1..=8 {
            assert!(matches!(run(&p, &attempted(Class::Throttled, &adv, attempts, S(0))), Decision::Retry { .. }));
        }
        assert_eq!(
            run(&p, &attempted(Class::Throttled, &adv, 9, S(0))),
            give_up(GiveUpReason::AttemptsExhausted { attempts: 9 })
        );
    }

    #[test]
    fn too_long_advice_gives_up_before_the_deadline_check() {
        let adv = advice(30);
        let mut p = Policy::interactive();
        p.max_single_wait = S(5);
        let d = run(&p, &attempted(Class::Throttled, &adv, 1, S(0)));
        assert_eq!(d, give_up(GiveUpReason::AdviceTooLong { advised: S(30), max_single_wait: S(5) }));
    }

    #[test]
    fn seed_000_thirty_seconds_against_a_ten_second_budget() {
        let adv = advice(30);
        let d = run(&Policy::interactive(), &attempted(Class::Throttled, &adv, 1, Duration::from_millis(20)));
        // max_single_wait is 10 s: too long at once.
        assert!(matches!(d, Decision::GiveUp { reason: GiveUpReason::AdviceTooLong { .. } }), "{d:?}");
        let adv = advice(9);
        let d = run(&Policy::interactive(), &attempted(Class::Throttled, &adv, 1, S(1)));
        let Decision::GiveUp { reason: GiveUpReason::DeadlineWouldPass { wait, remaining } } = d else {
            panic!("{d:?}")
        };
        assert_eq!((wait, remaining), (Duration::from_millis(9_500), S(9)));
    }

    #[test]
    fn deadline_reserves_time_for_the_next_attempt() {
        let adv = advice(8);
        let p = Policy::interactive(); // 10 s deadline, 500 ms reserved, spread up to 1 s
        let d = decide(&p, &attempted(Class::Throttled, &adv, 1, S(0)), draws(0), None, S(0));
        assert!(matches!(d, Decision::Retry { wait, .. } if wait == S(8)));
        let d = decide(&p, &attempted(Class::Throttled, &adv, 1, Duration::from_millis(1_501)), draws(0), None, S(0));
        assert!(matches!(d, Decision::GiveUp { reason: GiveUpReason::DeadlineWouldPass { .. } }), "{d:?}");
    }

    #[test]
    fn unsafe_post_after_429_but_not_after_ambiguous() {
        let adv = advice(1);
        let none = Advice::none();
        let mut a = attempted(Class::Throttled, &adv, 1, S(0));
        a.operation = Operation::Unsafe;
        assert!(matches!(run(&Policy::standard(), &a), Decision::Retry { .. }));
        let mut a = attempted(Class::Ambiguous, &none, 1, S(0));
        a.operation = Operation::Unsafe;
        a.status = None;
        assert_eq!(run(&Policy::standard(), &a), give_up(GiveUpReason::NotReplayable));
        // A request that never left may be sent again even when unsafe.
        a.class = Class::Transient;
        assert!(matches!(run(&Policy::standard(), &a), Decision::Retry { .. }));
        // A 503 to an unsafe POST is not replayed; to a keyed one it is.
        a.status = Some(503);
        assert_eq!(run(&Policy::standard(), &a), give_up(GiveUpReason::NotReplayable));
        a.operation = Operation::Keyed;
        assert!(matches!(run(&Policy::standard(), &a), Decision::Retry { .. }));
    }

    #[test]
    fn unclear_429s_are_bounded() {
        let none = Advice::none();
        let p = Policy::interactive(); // 1 unclear retry of 3
        let mut a = attempted(Class::Unclear, &none, 1, S(0));
        a.code = None;
        assert!(matches!(run(&p, &a), Decision::Retry { .. }));
        a.unclear = 2;
        a.attempts = 2;
        assert_eq!(run(&p, &a), give_up(GiveUpReason::UnclearExhausted { unclear: 2 }));
    }

    /// Issue 55: a 429 with neither code nor advice (nginx `limit_req`) is
    /// retried by the production presets as often as any other answer, so
    /// the attempts, not the unclear bound, end a run of them.
    #[test]
    fn production_presets_retry_unclear_429s_as_often_as_any() {
        let none = Advice::none();
        for p in [Policy::background(), Policy::batch(), Policy::standard()] {
            let mut a = attempted(Class::Unclear, &none, 1, S(0));
            a.code = None;
            for n in 1..=p.max_retries {
                (a.unclear, a.attempts) = (n, n);
                assert!(matches!(run(&p, &a), Decision::Retry { .. }), "{} after {n}", p.name);
            }
            (a.unclear, a.attempts) = (p.max_retries + 1, p.max_retries + 1);
            let attempts = p.max_retries + 1;
            assert_eq!(run(&p, &a), give_up(GiveUpReason::AttemptsExhausted { attempts }), "{}", p.name);
        }
    }

    #[test]
    fn an_unsendable_request_ends_at_the_first_attempt() {
        // Issue 26: an https:// URL without TLS made 9 attempts over 85 s.
        let none = Advice::none();
        let t = DefaultTableForTest::classify(crate::core::classify::TransportFailure::Unsendable);
        let mut a = attempted(t, &none, 1, S(0));
        (a.status, a.code) = (None, None);
        for op in [Operation::Unsafe, Operation::Keyed, Operation::Safe] {
            a.operation = op;
            assert_eq!(run(&Policy::background(), &a), give_up(GiveUpReason::Unsendable), "{op:?}");
        }
        assert_eq!(GiveUpReason::Unsendable.kind(), "unsendable");
        assert!(GiveUpReason::Unsendable.to_string().contains("nothing was sent"));
        // A request that was merely not sent this time is retried.
        let t = DefaultTableForTest::classify(crate::core::classify::TransportFailure::NotSent);
        let mut a = attempted(t, &none, 1, S(0));
        (a.status, a.code) = (None, None);
        assert!(matches!(run(&Policy::background(), &a), Decision::Retry { .. }));
    }

    struct DefaultTableForTest;

    impl DefaultTableForTest {
        fn classify(f: crate::core::classify::TransportFailure) -> Class {
            use crate::core::classify::{Classifier, DefaultTable, Outcome};
            DefaultTable::default().classify(Outcome::Transport(f))
        }
    }

    #[test]
    fn cancellation_comes_before_waiting() {
        let adv = advice(1);
        let mut a = attempted(Class::Throttled, &adv, 1, S(0));
        a.cancelled = true;
        assert_eq!(run(&Policy::standard(), &a), give_up(GiveUpReason::Cancelled));
    }

    #[test]
    fn budget_is_asked_last() {
        let adv = advice(1);
        let b = TokenBucketBudget::new(2, 100);
        let a = attempted(Class::Throttled, &adv, 1, S(0));
        let d = decide(&Policy::standard(), &a, draws(HALF), Some(&b), S(0));
        assert_eq!(d, give_up(GiveUpReason::BudgetExhausted));
        // A give-up earlier in the order does not touch the budget.
        let b = TokenBucketBudget::new(10, 100);
        let far = advice(600);
        let _ = decide(&Policy::standard(), &attempted(Class::Throttled, &far, 1, S(0)), draws(HALF), Some(&b), S(0));
        assert_eq!(b.tokens_milli(), 10_000);
    }

    #[test]
    fn in_progress_backs_off() {
        let none = Advice::none();
        let mut a = attempted(Class::InProgress, &none, 1, S(0));
        a.status = Some(409);
        let d = run(&Policy::standard(), &a);
        assert!(matches!(d, Decision::Retry { why: WaitWhy { basis: WaitBasis::Backoff, .. }, .. }), "{d:?}");
    }

    /// Every number each preset's doc comment states, field by field: the
    /// hunt judges a run by the policy its client declares, so only this
    /// pins a preset to its documentation.
    #[test]
    fn presets_have_their_documented_numbers() {
        let m = Duration::from_millis;
        // (preset, retries, deadline, max single wait, reserved per attempt,
        //  attempt timeout, backoff base, backoff cap, advice mode, unclear retries)
        let documented = [
            (Policy::interactive(), 3, S(10), S(10), m(500), S(5), m(200), S(2), AdviceMode::AdvicePlusSpread, 1),
            (Policy::background(), 8, S(120), S(60), S(1), S(30), S(1), S(30), AdviceMode::AdvicePlusSpread, 8),
            (Policy::batch(), 8, S(90), S(90), S(1), S(30), S(1), S(30), AdviceMode::MaxOfAdviceAndBackoff, 8),
            (Policy::standard(), 8, S(60), S(60), S(1), S(20), m(500), S(20), AdviceMode::AdvicePlusSpread, 8),
        ];
        for (p, retries, deadline, single, reserved, timeout, base, cap, mode, unclear) in documented {
            let numbers = (p.max_retries, p.deadline, p.max_single_wait, p.min_attempt_time, p.attempt_timeout);
            assert_eq!(numbers, (retries, deadline, single, reserved, timeout), "{}", p.name);
            assert_eq!((p.backoff.base, p.backoff.cap, p.backoff.jitter), (base, cap, Jitter::Full), "{}", p.name);
            assert_eq!((p.advice_mode, p.unclear_max_retries), (mode, unclear), "{}", p.name);
            // Common to all: escalation, advice, keys, the default spread.
            assert!(p.escalate && p.use_advice && p.idempotency_keys, "{}", p.name);
            assert_eq!(p.spread, Spread::default(), "{}", p.name);
        }
        for name in Policy::PRESETS {
            assert_eq!(Policy::preset(name).unwrap().name, name);
        }
        assert_eq!(Policy::preset("nope"), None);
    }

    #[test]
    fn policy_round_trips_through_toml() {
        let p = Policy::batch();
        let text = toml::to_string(&p).unwrap();
        assert!(text.contains("deadline = \"1m 30s\""), "{text}");
        let back: Policy = toml::from_str(&text).unwrap();
        assert_eq!(back, p);
        let err = toml::from_str::<Policy>("deadline = 90").unwrap_err().to_string();
        assert!(err.contains("deadline"), "{err}");
        let err = toml::from_str::<Policy>("deadlin = \"9s\"").unwrap_err().to_string();
        assert!(err.contains("unknown field"), "{err}");
    }
}
