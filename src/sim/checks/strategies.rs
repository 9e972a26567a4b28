//! proptest strategies for the simulation properties, all named `arb_*`.
//!
//! Every strategy shrinks toward the simple case: proptest shrinks a range
//! toward its low end, a `prop_oneof!` toward its first arm, a list toward
//! fewer elements. So the first arm is always the plain one, and each
//! comment says which edge cases the weights favour. The scenario *seed* is
//! drawn without shrinking ([`arb_seed`]): shrinking it would jump to an
//! unrelated run. The configuration and the fault schedule are what shrink.
//!
//! Sizes are bounded so a case runs in milliseconds: at most 16 workers, 200
//! jobs and six jobs per worker, deadlines up to two minutes, faults in the
//! first 8 s, and a time limit that no correct run reaches
//! ([`hunt::time_limit`]).

use std::time::Duration;

use crate::core::backoff::{AdviceMode, Backoff, Jitter, Spread};
use crate::core::policy::Policy;
use crate::sim::checks::hunt;
use crate::sim::run::scenario::{BudgetConfig, Faults, Fleet, NetConfig, OpMix, Scenario};
use crate::sim::world::api::{
    AccountConfig, AdviceForm, ApiConfig, ConcurrencyConfig, DateForm, Envelope, LimiterConfig, LimiterKind, ScriptStep,
};
use crate::sim::world::net::{CloseTiming, Fault, ScheduledFault};
use proptest::prelude::*;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// A value that is usually `common` (shrinks to it) and sometimes drawn from `rare`.
fn mostly<T: Clone + std::fmt::Debug + 'static>(
    common: T,
    rare: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = T> {
    prop_oneof![3 => Just(common), 1 => rare]
}

/// The scenario's master seed, never shrunk: a neighbouring seed is an
/// unrelated run, not a simpler one.
pub fn arb_seed() -> impl Strategy<Value = u64> {
    any::<u64>().no_shrink()
}

/// One of the four presets, exactly as shipped.
pub fn arb_preset() -> impl Strategy<Value = Policy> {
    prop::sample::select(Policy::PRESETS.to_vec()).prop_map(|n| Policy::preset(n).expect("a preset name"))
}

/// The backoff's jitter. Full jitter first (the presets' choice); `None`
/// (a synchronised fleet) and decorrelated (depends on the previous wait)
/// are the edge cases.
pub fn arb_jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![Just(Jitter::Full), Just(Jitter::Equal), Just(Jitter::None), Just(Jitter::Decorrelated)]
}

/// Random policy numbers in sane ranges. Biased to the boundaries that
/// matter: `max_retries` 0 (one attempt only), a 1 s deadline (shorter than
/// most advice), `min_attempt_time` 0 (a wait may end exactly at the
/// deadline), `max_single_wait` of 1 s (every advice of a whole second or
/// more is at or past it), a zero spread (an advice of 0 s retries at once
/// only if the spread is zero).
pub fn arb_random_policy() -> impl Strategy<Value = Policy> {
    let times = (
        mostly(MS(1_000), (1_000u64..=120_000).prop_map(MS)),
        mostly(MS(1_000), (1u64..=60_000).prop_map(MS)),
        mostly(Duration::ZERO, (0u64..=1_000).prop_map(MS)),
        prop_oneof![Just(MS(5_000)), (100u64..=30_000).prop_map(MS)],
    );
    let shape = (
        (1u64..=2_000, 0u64..=30_000, arb_jitter()),
        prop_oneof![Just(AdviceMode::AdvicePlusSpread), Just(AdviceMode::MaxOfAdviceAndBackoff)],
        (0u32..=500, mostly(0u64, 0u64..=200), 0u64..=1_000),
    );
    // `use_advice` and `idempotency_keys` shrink toward on, the sane default.
    let flags =
        (0u32..=3, prop_oneof![19 => Just(true), 1 => Just(false)], prop_oneof![9 => Just(true), 1 => Just(false)]);
    (0u32..=8, times, shape, flags).prop_map(
        |(max_retries, (deadline, max_single_wait, min_attempt_time, attempt_timeout), shape, flags)| {
            let ((base, cap, jitter), advice_mode, (per_mille, spread_min, spread_extra)) = shape;
            let (unclear_max_retries, use_advice, idempotency_keys) = flags;
            Policy {
                name: "arb".into(),
                max_retries,
                deadline,
                max_single_wait,
                min_attempt_time,
                attempt_timeout,
                backoff: Backoff { base: MS(base), cap: MS(base.max(cap)), jitter },
                advice_mode,
                spread: Spread {
                    per_mille,
                    min: MS(spread_min),
                    max: MS(spread_min + spread_extra),
                    ..Spread::default()
                },
                escalate: true,
                unclear_max_retries,
                use_advice,
                idempotency_keys,
            }
        },
    )
}

/// A preset (one time in three) or random numbers.
pub fn arb_policy() -> impl Strategy<Value = Policy> {
    prop_oneof![1 => arb_preset(), 2 => arb_random_policy()]
}

/// A request-rate limiter. The fixed window (brief 002's) first; limits as
/// low as one write per window (every second request refused); windows from
/// 250 ms to 10 s (the longer the window, the longer the advice).
pub fn arb_limiter() -> impl Strategy<Value = LimiterConfig> {
    (
        prop_oneof![Just(LimiterKind::FixedWindow), Just(LimiterKind::TokenBucket), Just(LimiterKind::SlidingWindow)],
        1u32..=40,
        1u32..=10,
        prop::sample::select(vec![1_000u64, 250, 500, 2_000, 5_000, 10_000]),
    )
        .prop_map(|(kind, writes, read_factor, window_ms)| LimiterConfig {
            kind,
            writes,
            reads: writes * read_factor,
            window_ms,
            ..LimiterConfig::default()
        })
}

/// How the wait is advised. `Both` (the real Blinkimg API) first; every form
/// is reachable, including none at all, a malformed header and several
/// conflicting lines.
pub fn arb_advice_form() -> impl Strategy<Value = AdviceForm> {
    prop_oneof![
        Just(AdviceForm::Both),
        Just(AdviceForm::HeaderSeconds),
        Just(AdviceForm::HeaderDate),
        Just(AdviceForm::BodyOnly),
        Just(AdviceForm::SeveralLines),
        Just(AdviceForm::None),
        Just(AdviceForm::Malformed),
    ]
}

/// The server clock's skew: usually none; else a half second, three seconds
/// or a whole hour, ahead or behind (an hour ahead makes any date advice
/// read without the `Date` header look too long).
pub fn arb_skew() -> impl Strategy<Value = i64> {
    mostly(0i64, prop::sample::select(vec![-3_600_000i64, -3_000, -500, 500, 3_000, 3_600_000]))
}

/// The API's shape without terminal conditions: limiter, advice form,
/// envelope, date form, `Date` header (usually sent), skew, `RateLimit-*`
/// headers, and processing time (usually none; up to 2 s, longer than some
/// attempt timeouts, which sends retries into 409 IN_PROGRESS).
pub fn arb_api_config() -> impl Strategy<Value = ApiConfig> {
    (
        arb_limiter(),
        arb_advice_form(),
        prop_oneof![Just(Envelope::Blinkimg), Just(Envelope::Sume)],
        prop_oneof![Just(DateForm::ImfFixdate), Just(DateForm::Rfc850), Just(DateForm::Asctime)],
        prop_oneof![4 => Just(true), 1 => Just(false)],
        arb_skew(),
        any::<bool>(),
        mostly(0u64, 1u64..=2_000),
    )
        .prop_map(
            |(limiter, advice, envelope, date_form, send_date, clock_skew_ms, rate_limit_headers, processing_ms)| {
                ApiConfig {
                    limiter,
                    advice,
                    envelope,
                    date_form,
                    send_date,
                    clock_skew_ms,
                    rate_limit_headers,
                    processing_ms,
                    ..ApiConfig::default()
                }
            },
        )
}

/// One scripted answer: a plain 429 first; then every class the core
/// distinguishes: throttled in both envelopes' spelling, a 429 without a
/// code (unclear), terminal 429s and a 402, `queue_full` with its long
/// advice, 503 with and without advice, 409 in progress, a plain 500.
pub fn arb_script_step() -> impl Strategy<Value = ScriptStep> {
    prop::sample::select(vec![
        (429, Some("RATE_LIMITED"), Some(1)),
        (429, Some("rate_limited"), Some(2)),
        (429, Some("RATE_LIMITED"), Some(0)),
        (429, None, Some(1)),
        (429, Some("QUOTA_EXCEEDED"), Some(1)),
        (429, Some("SIGNUP_REQUIRED"), None),
        (402, Some("INSUFFICIENT_CREDITS"), None),
        (429, Some("queue_full"), Some(30)),
        (503, Some("unavailable"), Some(1)),
        (503, None, None),
        (409, Some("IDEMPOTENCY_IN_PROGRESS"), None),
        (500, None, None),
    ])
    .prop_map(|(status, code, wait)| ScriptStep::new(status, code, wait))
}

/// Conditions that end a job with a terminal answer (see [`arb_terminal_conditions`]).
#[derive(Debug, Clone)]
pub struct TerminalConditions {
    concurrency: Option<ConcurrencyConfig>,
    credits: Option<u64>,
    monthly_quota: Option<u64>,
    anonymous_cap: Option<u32>,
    script: Option<(Vec<ScriptStep>, bool)>,
}

impl TerminalConditions {
    /// Sets them on a scenario.
    pub fn apply(&self, s: &mut Scenario) {
        s.api.concurrency = self.concurrency.clone();
        let account: &mut AccountConfig = &mut s.api.accounts[0];
        account.credits = self.credits;
        account.monthly_quota = self.monthly_quota;
        s.api.anonymous_cap = self.anonymous_cap;
        s.fleet.anonymous = self.anonymous_cap.is_some();
        if let Some((steps, repeat)) = &self.script {
            s.api.script = steps.clone();
            s.api.script_repeat = *repeat;
        }
    }
}

/// Terminal conditions, each usually off: a concurrency cap (`queue_full`,
/// advice 1–30 s), credits and a monthly quota that may run out mid-run
/// (as low as zero), anonymous callers with an hourly cap, and a script of
/// one to four answers, sometimes repeated forever.
pub fn arb_terminal_conditions() -> impl Strategy<Value = TerminalConditions> {
    (
        prop::option::weighted(0.2, (1u32..=4, prop::sample::select(vec![1u64, 2, 5, 30]))),
        prop::option::weighted(0.2, 0u64..=20),
        prop::option::weighted(0.2, 0u64..=20),
        prop::option::weighted(0.15, 1u32..=5),
        prop::option::weighted(0.3, (prop::collection::vec(arb_script_step(), 1..=4), any::<bool>())),
    )
        .prop_map(|(concurrency, credits, monthly_quota, anonymous_cap, script)| TerminalConditions {
            concurrency: concurrency
                .map(|(max_in_flight, retry_after_s)| ConcurrencyConfig { max_in_flight, retry_after_s }),
            credits,
            monthly_quota,
            anonymous_cap,
            script,
        })
}

/// 1–16 workers and 1–200 jobs, at most six per worker. Shrinks toward one
/// worker and one job; the extremes (16 workers, 96 jobs on them) are
/// reachable.
pub fn arb_fleet() -> impl Strategy<Value = Fleet> {
    (1u32..=16)
        .prop_flat_map(|workers| (Just(workers), 1u32..=(workers * 6).min(200)))
        .prop_map(|(workers, jobs)| Fleet { workers, jobs, ..Fleet::default() })
}

/// Relative weights of keyed POSTs, unkeyed POSTs and GETs. Shrinks toward
/// keyed only; a mix with no weight at all becomes keyed only.
pub fn arb_op_mix() -> impl Strategy<Value = OpMix> {
    (1u32..=3, 0u32..=2, 0u32..=2).prop_flat_map(|(k, u, s)| {
        (prop_oneof![Just(k), Just(0)], Just(u), Just(s)).prop_map(|(keyed, unsafe_post, safe)| {
            let keyed = if keyed + unsafe_post + safe == 0 { 1 } else { keyed };
            OpMix { keyed, unsafe_post, safe, idempotent: 0 }
        })
    })
}

/// Latency between 0 and 45 ms per message and turmoil's step: 1 ms first;
/// 2 and 5 ms steps make timers fire late (the checkers' clock slack).
pub fn arb_net() -> impl Strategy<Value = NetConfig> {
    (0u64..=5, 0u64..=40, prop_oneof![6 => Just(1u64), 1 => Just(2), 1 => Just(5)])
        .prop_map(|(min, extra, tick)| NetConfig { min_latency: MS(min), max_latency: MS(min + extra), tick: MS(tick) })
}

/// One fault at a time in `0..=horizon_ms`. A lost answer (the simplest)
/// first; then a latency spike (20 ms to 3 s: longer than short attempt
/// timeouts), a partition and its repair, a hold and its release (up to 2 s,
/// messages delivered late but all of them), a server bounce (running
/// requests die, connections break), a keep-alive connection closed as a
/// client reuses it (each timing), the caller cancelling the jobs
/// running then. Lasting faults last 50 ms to 4 s.
pub fn arb_fault(horizon_ms: u64) -> impl Strategy<Value = ScheduledFault> {
    let at = 0u64..=horizon_ms;
    let lasting = 50u64..=4_000;
    prop_oneof![
        at.clone().prop_map(|at| ScheduledFault { at: MS(at), fault: Fault::LoseAnswer }),
        (at.clone(), lasting.clone(), prop::sample::select(vec![20u64, 200, 3_000])).prop_map(|(at, d, latency)| {
            ScheduledFault { at: MS(at), fault: Fault::LatencySpike { latency: MS(latency), until: MS(at + d) } }
        }),
        (at.clone(), lasting.clone())
            .prop_map(|(at, d)| ScheduledFault { at: MS(at), fault: Fault::Partition { until: MS(at + d) } }),
        (at.clone(), 50u64..=2_000)
            .prop_map(|(at, d)| ScheduledFault { at: MS(at), fault: Fault::Hold { until: MS(at + d) } }),
        at.clone().prop_map(|at| ScheduledFault { at: MS(at), fault: Fault::Bounce }),
        (at.clone(), prop::sample::select(CloseTiming::ALL.to_vec()))
            .prop_map(|(at, timing)| ScheduledFault { at: MS(at), fault: Fault::CloseRace { timing } }),
        at.prop_map(|at| ScheduledFault { at: MS(at), fault: Fault::Cancel }),
    ]
}

/// An explicit fault schedule: up to `max` faults in the first 8 s, in time
/// order. Shrinks toward fewer, earlier, shorter and simpler faults.
pub fn arb_fault_schedule(max: usize) -> impl Strategy<Value = Vec<ScheduledFault>> {
    prop::collection::vec(arb_fault(8_000), 0..=max).prop_map(|mut v| {
        v.sort_by_key(|f| f.at);
        v
    })
}

/// Faults: a steady loss of answers (usually none, up to 30%) and a schedule.
pub fn arb_faults() -> impl Strategy<Value = Faults> {
    (mostly(0u32, 1u32..=300), arb_fault_schedule(5))
        .prop_map(|(lost_answers_per_mille, schedule)| Faults { lost_answers_per_mille, schedule })
}

/// A retry budget shared by the fleet: usually none; else gRPC's token bucket
/// (as small as 1 token, which refuses every retry, with refunds from the
/// smallest the validator accepts, 0.001, to a whole token per success) or a percentage budget.
pub fn arb_budget() -> impl Strategy<Value = Option<BudgetConfig>> {
    prop::option::weighted(
        0.2,
        prop_oneof![
            (1u32..=20, 1u32..=1_000).prop_map(|(max_tokens, token_ratio_milli)| BudgetConfig::TokenBucket {
                max_tokens,
                token_ratio_milli
            }),
            (1u64..=20, 0u32..=10, 0u32..=500).prop_map(|(ttl, min_per_sec, per_mille)| BudgetConfig::Percent {
                ttl: Duration::from_secs(ttl),
                min_per_sec,
                per_mille
            }),
        ],
    )
}

/// Puts the parts together, with a time limit no correct run reaches.
fn assemble(api: ApiConfig, fleet: Fleet, mix: OpMix, policy: Policy, net: NetConfig, faults: Faults) -> Scenario {
    let mut s = Scenario {
        name: "proptest".into(),
        description: "generated by tests/it/strategies.rs".into(),
        api,
        fleet: Fleet { mix, ..fleet },
        policy,
        net,
        faults,
        ..Scenario::default()
    };
    s.time_limit = hunt::time_limit(&s);
    s
}

/// Any scenario: API, terminal conditions, fleet, mix, retry budget, policy,
/// network, faults.
pub fn arb_scenario() -> impl Strategy<Value = Scenario> {
    (
        arb_api_config(),
        arb_terminal_conditions(),
        arb_fleet(),
        arb_op_mix(),
        arb_budget(),
        arb_policy(),
        arb_net(),
        arb_faults(),
    )
        .prop_map(|(api, terminal, fleet, mix, budget, policy, net, faults)| {
            let mut s = assemble(api, Fleet { budget, ..fleet }, mix, policy, net, faults);
            terminal.apply(&mut s);
            s.time_limit = hunt::time_limit(&s);
            s
        })
}

/// Scenarios that press on the deadline: deadlines of 1–15 s (1 s first),
/// attempt timeouts of 100 ms–5 s, limiter windows up to 10 s and scripts
/// with advice up to 30 s (longer than what is left), and faults that make
/// attempts hang (holds, latency spikes) or fail fast (partitions).
pub fn arb_tight_scenario() -> impl Strategy<Value = Scenario> {
    (arb_scenario(), mostly(1_000u64, 1_000u64..=15_000), 100u64..=5_000).prop_map(|(mut s, deadline, timeout)| {
        s.policy.deadline = MS(deadline);
        s.policy.attempt_timeout = MS(timeout);
        s.time_limit = hunt::time_limit(&s);
        s
    })
}

/// Every answer a short retryable refusal, forever: a repeated script of
/// 429 RATE_LIMITED (either spelling), 503 and 409 IN_PROGRESS with advice
/// of 0–2 s or none, only keyed POSTs and GETs (an unkeyed POST rightly stops
/// at a 503), no faults, and a deadline and `max_single_wait` long enough for
/// every retry. So every job must make exactly `max_retries + 1` attempts.
pub fn arb_exhausting_scenario() -> impl Strategy<Value = Scenario> {
    let step = prop::sample::select(vec![
        (429, Some("RATE_LIMITED")),
        (429, Some("rate_limited")),
        (503, Some("unavailable")),
        (409, Some("IDEMPOTENCY_IN_PROGRESS")),
    ]);
    let wait = prop_oneof![Just(Some(1u64)), Just(Some(0)), Just(Some(2)), Just(None)];
    let script = prop::collection::vec((step, wait), 1..=3);
    (arb_api_config(), arb_fleet(), arb_op_mix(), arb_policy(), arb_net(), script).prop_map(
        |(mut api, fleet, mut mix, mut policy, net, script)| {
            api.script = script.into_iter().map(|((status, code), wait)| ScriptStep::new(status, code, wait)).collect();
            api.script_repeat = true;
            // A date advice read against a skewed client clock is not short.
            api.clock_skew_ms = 0;
            mix.unsafe_post = 0;
            if mix.keyed + mix.safe == 0 {
                mix.keyed = 1;
            }
            policy.idempotency_keys = true;
            let fleet = Fleet { jobs: fleet.jobs.min(fleet.workers * 2), ..fleet };
            // Advice ≤ 2 s, read as up to 4 s from a date; the larger of it
            // and the backoff, plus the spread, per retry.
            let spread = policy.spread.largest();
            let per_retry = MS(4_000).max(policy.backoff.cap) + spread + MS(500);
            policy.max_single_wait = policy.max_single_wait.max(MS(5_000));
            policy.deadline = per_retry * policy.max_retries + policy.min_attempt_time + MS(5_000);
            assemble(api, fleet, mix, policy, net, Faults::default())
        },
    )
}

/// Faults that lose answers after the server charged: a steady loss of up to
/// 50% (20% first), lost answers, partitions, holds and bounces in the
/// schedule, processing times that outlast short attempt timeouts (retries
/// meet 409 IN_PROGRESS, bounces kill running requests), and keyed POSTs in
/// every mix.
pub fn arb_lossy_scenario() -> impl Strategy<Value = Scenario> {
    (
        arb_scenario(),
        prop_oneof![Just(200u32), 0u32..=500],
        arb_fault_schedule(8),
        mostly(0u64, 20u64..=2_000),
        prop_oneof![Just(MS(5_000)), (100u64..=3_000).prop_map(MS)],
    )
        .prop_map(|(mut s, lost, schedule, processing, timeout)| {
            s.faults = Faults { lost_answers_per_mille: lost, schedule };
            s.api.processing_ms = processing;
            s.policy.attempt_timeout = timeout;
            s.fleet.mix.keyed = s.fleet.mix.keyed.max(1);
            s.time_limit = hunt::time_limit(&s);
            s
        })
}

/// Contention: 2–16 workers against as few as one write per window, so most
/// first attempts are refused with advice, in every advice form, envelope,
/// date form and skew.
pub fn arb_throttled_scenario() -> impl Strategy<Value = Scenario> {
    (arb_scenario(), 2u32..=16, 1u32..=8).prop_map(|(mut s, workers, writes)| {
        s.fleet.workers = workers;
        s.fleet.jobs = s.fleet.jobs.clamp(workers, workers * 3);
        s.api.limiter.writes = writes;
        s.api.limiter.reads = writes * 4;
        s.api.script.clear();
        s.time_limit = hunt::time_limit(&s);
        s
    })
}

/// Terminal answers and unkeyed POSTs under ambiguous failures: the terminal
/// conditions are always on in some form, unkeyed POSTs are in every mix,
/// and answers get lost, connections break and partitions come and go.
pub fn arb_terminal_scenario() -> impl Strategy<Value = Scenario> {
    (arb_lossy_scenario(), 1u32..=3, prop::collection::vec(arb_script_step(), 1..=4), 0u64..=6).prop_map(
        |(mut s, unsafe_weight, script, credits)| {
            s.fleet.mix.unsafe_post = unsafe_weight;
            if s.api.script.is_empty() {
                s.api.script = script;
            }
            if s.api.accounts[0].credits.is_none() {
                s.api.accounts[0].credits = Some(credits);
            }
            s.time_limit = hunt::time_limit(&s);
            s
        },
    )
}

/// Advice longer than what is left, on every answer: a repeated 429
/// (RATE_LIMITED or `queue_full`) whose advice `w` (1–120 s) is either longer
/// than `max_single_wait`, or fits it but not the deadline (the deadline is
/// cut to less than `w + min_attempt_time`). The advice is read (a form with
/// a wait, no skew) and no fault keeps an answer from the client, so every
/// job must give up after one attempt, zero sleep.
pub fn arb_too_long_scenario() -> impl Strategy<Value = Scenario> {
    let form = prop_oneof![
        Just(AdviceForm::Both),
        Just(AdviceForm::HeaderSeconds),
        Just(AdviceForm::HeaderDate),
        Just(AdviceForm::BodyOnly)
    ];
    (
        arb_scenario(),
        form,
        1u64..=120,
        any::<bool>(),
        prop_oneof![Just("RATE_LIMITED"), Just("queue_full")],
        1u64..=1_000,
    )
        .prop_map(|(mut s, form, w, past_max, code, short)| {
            let advice = Duration::from_secs(w);
            let p = &mut s.policy;
            p.use_advice = true;
            if past_max {
                // Read without `Date`, a `resetAt` or date advice is measured
                // from the client's receipt: up to one trip's latency shorter.
                let margin = s.net.max_latency + s.net.tick + MS(1);
                p.max_single_wait = p.max_single_wait.min(advice - margin);
            } else {
                p.max_single_wait = p.max_single_wait.max(advice + MS(2_000));
                p.deadline = (advice + p.min_attempt_time).saturating_sub(MS(short)).max(MS(1));
            }
            s.api.script = vec![ScriptStep::new(429, Some(code), Some(w))];
            s.api.script_repeat = true;
            s.api.advice = form;
            s.api.clock_skew_ms = 0;
            // A lost answer or a broken connection advises nothing: its
            // retry waits a backoff, rightly. Only answers here.
            s.faults = Faults::default();
            s.fleet.gate = Default::default();
            s.time_limit = hunt::time_limit(&s);
            s
        })
}

/// Calm scenarios for liveness: only keyed POSTs, nothing terminal, no
/// steady loss, faults that all heal (lost answers, bounces, partitions,
/// holds and spikes in the first 8 s; no cancellation, which ends jobs by
/// design), then the policy raised until
/// [`crate::sim::checks::invariants::liveness_expected`] holds (`hunt::make_ample`).
pub fn arb_calm_scenario() -> impl Strategy<Value = Scenario> {
    (arb_api_config(), arb_fleet(), arb_policy(), arb_net(), arb_fault_schedule(5)).prop_map(
        |(api, fleet, policy, net, mut schedule)| {
            schedule.retain(|f| f.fault != Fault::Cancel);
            let mix = OpMix::default();
            let faults = Faults { lost_answers_per_mille: 0, schedule };
            let mut s = assemble(api, fleet, mix, policy, net, faults);
            hunt::make_ample(&mut s);
            s.time_limit = hunt::time_limit(&s);
            s
        },
    )
}

#[cfg(test)]
mod tests {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRunner};

    use super::*;

    /// Every generated scenario passes the validator, so no property (and
    /// no shrunk failure) can end as a config error that hides the real one.
    #[test]
    fn every_generated_scenario_is_valid() {
        let mut runner = TestRunner::new_with_rng(
            Config::default(),
            proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
        );
        let strategies: [(&str, BoxedStrategy<Scenario>); 9] = [
            ("arb_scenario", arb_scenario().boxed()),
            ("arb_tight_scenario", arb_tight_scenario().boxed()),
            ("arb_exhausting_scenario", arb_exhausting_scenario().boxed()),
            ("arb_lossy_scenario", arb_lossy_scenario().boxed()),
            ("arb_throttled_scenario", arb_throttled_scenario().boxed()),
            ("arb_terminal_scenario", arb_terminal_scenario().boxed()),
            ("arb_too_long_scenario", arb_too_long_scenario().boxed()),
            ("arb_calm_scenario", arb_calm_scenario().boxed()),
            ("arb_scenario (budgets)", arb_scenario().prop_filter("a budget", |s| s.fleet.budget.is_some()).boxed()),
        ];
        for (name, strategy) in strategies {
            for case in 0..400 {
                let s = strategy.new_tree(&mut runner).expect("a value").current();
                s.validate().unwrap_or_else(|e| panic!("{name} case {case}: {e}\n{}", s.to_toml()));
            }
        }
    }

    /// `arb_fault` draws every fault kind that needs nothing of the
    /// scenario (the limiter service's partition needs per-worker hosts and
    /// the service, which `arb_scenario` does not build).
    #[test]
    fn arb_fault_draws_every_kind_that_needs_nothing() {
        use crate::sim::world::faults::FaultKind;
        use crate::sim::world::faults::Needs;
        let mut runner = TestRunner::new_with_rng(
            Config::default(),
            proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
        );
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..500 {
            seen.insert(arb_fault(8_000).new_tree(&mut runner).expect("a fault").current().fault.kind());
        }
        let wanted: std::collections::BTreeSet<FaultKind> =
            FaultKind::ALL.into_iter().filter(|k| k.needs() == Needs::Nothing).collect();
        assert_eq!(seen, wanted);
    }
}
