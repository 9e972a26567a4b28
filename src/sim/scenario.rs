//! A scenario: the API, the network, the fleet, the policy and the faults,
//! all in one value that a TOML file can describe. And the named scenarios
//! taken from the seed documents.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::backoff::{AdviceMode, Backoff, Jitter, Spread};
use crate::core::duration_text;
use crate::core::policy::Policy;
use crate::gate::aimd::AimdConfig;
use crate::gate::pacing::PacingConfig;
use crate::sim::api::{AdviceForm, ApiConfig, Envelope, LimiterConfig, LimiterKind, ScriptStep};
use crate::sim::net::ScheduledFault;

/// Everything one simulation run needs except the seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    /// The scenario's name, shown in reports and traces.
    pub name: String,
    /// One line on what it shows.
    pub description: String,
    /// The simulated API.
    pub api: ApiConfig,
    /// The clients.
    pub fleet: Fleet,
    /// The retry policy every worker runs.
    pub policy: Policy,
    /// The simulated network.
    pub net: NetConfig,
    /// Faults injected into the network and the server.
    pub faults: Faults,
    /// Virtual time after which the run is stopped as stuck.
    #[serde(with = "duration_text")]
    pub time_limit: Duration,
}

/// The clients: `workers` concurrent workers share a queue of `jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Fleet {
    pub workers: u32,
    pub jobs: u32,
    /// The mix of operations, as weights.
    pub mix: OpMix,
    /// The job operation: `compress` (1 credit) or `convert` (2 credits).
    pub op: String,
    /// Send requests without an API key (anonymous caps apply).
    pub anonymous: bool,
    /// The gate every attempt of the fleet passes (none by default).
    pub gate: GateConfig,
    /// A retry budget shared by the fleet (none by default).
    pub budget: Option<BudgetConfig>,
}

/// Which fleet gate to run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GateConfig {
    /// Every worker sends when its policy says.
    #[default]
    None,
    /// The oracle that knows the API's window (the comparison's "ideal" row).
    Ideal,
    /// Paces on the limiter's own headers.
    Pacing(PacingConfig),
    /// AIMD admission control.
    Aimd(AimdConfig),
}

/// A shared retry budget and its numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BudgetConfig {
    /// gRPC retry throttling: `max_tokens`, refund `token_ratio_milli`/1000 per success.
    TokenBucket { max_tokens: u32, token_ratio_milli: u32 },
    /// Finagle/tower: `per_mille` of deposits over `ttl`, plus `min_per_sec`.
    Percent {
        #[serde(with = "duration_text")]
        ttl: Duration,
        min_per_sec: u32,
        per_mille: u32,
    },
}

/// Relative weights of the kinds of operation in a fleet's jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpMix {
    /// `POST /v1/jobs` with an Idempotency-Key (when the policy gives keys).
    pub keyed: u32,
    /// `POST /v1/jobs` without a key, whatever the policy says.
    #[serde(rename = "unsafe")]
    pub unsafe_post: u32,
    /// `GET /v1/jobs/<id>`.
    pub safe: u32,
}

impl Default for OpMix {
    fn default() -> Self {
        OpMix { keyed: 1, unsafe_post: 0, safe: 0 }
    }
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet {
            workers: 1,
            jobs: 1,
            mix: OpMix::default(),
            op: "compress".into(),
            anonymous: false,
            gate: GateConfig::None,
            budget: None,
        }
    }
}

/// The simulated network's timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetConfig {
    /// One message's latency is drawn between these two.
    #[serde(with = "duration_text")]
    pub min_latency: Duration,
    #[serde(with = "duration_text")]
    pub max_latency: Duration,
    /// turmoil's step: virtual time advanced per simulation step.
    #[serde(with = "duration_text")]
    pub tick: Duration,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            min_latency: Duration::from_millis(1),
            max_latency: Duration::from_millis(3),
            tick: Duration::from_millis(1),
        }
    }
}

/// Faults: a steady loss rate and a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Faults {
    /// Answers lost after the server ran the request, per mille.
    pub lost_answers_per_mille: u32,
    /// Faults at virtual times, applied in order.
    pub schedule: Vec<ScheduledFault>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            name: "custom".into(),
            description: String::new(),
            api: ApiConfig::default(),
            fleet: Fleet::default(),
            policy: Policy::standard(),
            net: NetConfig::default(),
            faults: Faults::default(),
            time_limit: Duration::from_secs(3600),
        }
    }
}

/// Why a scenario is not runnable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidScenario(pub String);

impl std::fmt::Display for InvalidScenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidScenario {}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), InvalidScenario> {
    if ok { Ok(()) } else { Err(InvalidScenario(what())) }
}

impl Scenario {
    /// Reads a scenario from TOML; unknown keys and wrong types are errors
    /// that name the key, and values out of range name the allowed range.
    pub fn from_toml(text: &str) -> Result<Scenario, InvalidScenario> {
        let s: Scenario = toml::from_str(text).map_err(|e| InvalidScenario(e.to_string().trim_end().to_owned()))?;
        s.validate()?;
        Ok(s)
    }

    /// The scenario as TOML, to copy and edit.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a scenario always serialises")
    }

    /// Checks the ranges the runner relies on.
    pub fn validate(&self) -> Result<(), InvalidScenario> {
        let f = &self.fleet;
        check((1..=1024).contains(&f.workers), || format!("fleet.workers = {} is out of range: 1..=1024", f.workers))?;
        check((1..=100_000).contains(&f.jobs), || format!("fleet.jobs = {} is out of range: 1..=100000", f.jobs))?;
        check(f.mix.keyed + f.mix.unsafe_post + f.mix.safe > 0, || {
            "fleet.mix: at least one weight must be above 0".into()
        })?;
        check(matches!(f.op.as_str(), "compress" | "convert"), || {
            format!("fleet.op = {:?}: use \"compress\" or \"convert\"", f.op)
        })?;
        let n = &self.net;
        check(n.min_latency <= n.max_latency, || "net.min_latency must not exceed net.max_latency".into())?;
        check((Duration::from_micros(100)..=Duration::from_secs(1)).contains(&n.tick), || {
            format!("net.tick = {:?} is out of range: 100us..=1s", n.tick)
        })?;
        check(self.faults.lost_answers_per_mille <= 1000, || {
            format!("faults.lost_answers_per_mille = {} is out of range: 0..=1000", self.faults.lost_answers_per_mille)
        })?;
        check(self.policy.backoff.base <= self.policy.backoff.cap, || {
            "policy.backoff.base must not exceed policy.backoff.cap".into()
        })?;
        check(self.time_limit >= Duration::from_secs(1), || "time_limit must be at least 1s".into())?;
        check(self.time_limit <= Duration::from_secs(90 * 24 * 3600), || "time_limit must be at most 90 days".into())?;
        Ok(())
    }
}

fn script(steps: &[(u16, &str, u64)], repeat: bool) -> (Vec<ScriptStep>, bool) {
    let steps = steps
        .iter()
        .map(|&(status, code, secs)| ScriptStep { status, code: Some(code.into()), retry_after_s: Some(secs) })
        .collect();
    (steps, repeat)
}

fn scripted(name: &str, description: &str, steps: &[(u16, &str, u64)], repeat: bool, policy: Policy) -> Scenario {
    let mut s = Scenario { name: name.into(), description: description.into(), policy, ..Scenario::default() };
    (s.api.script, s.api.script_repeat) = script(steps, repeat);
    s
}

/// Seed 002's mock: a fixed window of 30 writes per second, 8 workers, 120
/// jobs, 50 tries per job, Retry-After plus up to 250 ms of jitter.
pub fn blinkimg_1s() -> Scenario {
    let mut s = Scenario {
        name: "blinkimg-1s".into(),
        description: "seed 002: 8 workers, 120 jobs, 30 writes per 1 s window, Retry-After + jitter".into(),
        policy: retry_after_jitter(),
        ..Scenario::default()
    };
    s.api.limiter = LimiterConfig { kind: LimiterKind::FixedWindow, writes: 30, reads: 300, window_ms: 1000 };
    s.fleet.workers = 8;
    s.fleet.jobs = 120;
    s
}

/// Seed 002's best policy: wait Retry-After plus up to 250 ms, 50 tries.
pub fn retry_after_jitter() -> Policy {
    Policy {
        name: "retry-after-jitter".into(),
        max_retries: 49,
        deadline: Duration::from_secs(600),
        max_single_wait: Duration::from_secs(120),
        backoff: Backoff { base: Duration::from_millis(100), cap: Duration::from_secs(8), jitter: Jitter::Full },
        advice_mode: AdviceMode::AdvicePlusSpread,
        spread: Spread { per_mille: 0, min: Duration::from_millis(250), max: Duration::from_millis(250) },
        ..Policy::standard()
    }
}

fn lost_answers(name: &str, keys: bool) -> Scenario {
    let mut s = blinkimg_1s();
    s.name = name.into();
    s.faults.lost_answers_per_mille = 100;
    s.policy.idempotency_keys = keys;
    if !keys {
        // Seed 002's unkeyed client retried network errors like any other:
        // exactly the replay the core refuses. Reproduce it to show the cost.
        s.policy.name = "no-key-naive".into();
        s.policy.sabotage.replay_unsafe = true;
    }
    s.description = if keys {
        "seed 002: 10% of answers lost after charging; the Idempotency-Key keeps charges == jobs".into()
    } else {
        "seed 002: 10% of answers lost after charging; a naive client without a key replays and charges twice".into()
    };
    s
}

/// The names of the named scenarios, in the order `retrysim scenarios` lists them.
pub const NAMES: [&str; 17] = [
    "once-429-then-200",
    "always-429-30s-budget-10s",
    "queue-full-30s",
    "two-429-then-success",
    "five-retries-six-attempts",
    "quota-exceeded",
    "insufficient-credits-402",
    "signup-required",
    "deadline-wins",
    "http-date-advice",
    "skewed-server-clock",
    "in-progress-409",
    "network-error-unsafe-post",
    "lost-answers-with-key",
    "lost-answers-no-key",
    "blinkimg-1s",
    "malformed-advice",
];

/// A named scenario, or `None`.
pub fn named(name: &str) -> Option<Scenario> {
    let rl = "RATE_LIMITED";
    let s = match name {
        "once-429-then-200" => {
            scripted(name, "seed 000: one 429 (Retry-After 1), then 201", &[(429, rl, 1)], false, Policy::standard())
        }
        "always-429-30s-budget-10s" => scripted(
            name,
            "seed 000: always 429 queue_full with 30 s advice; a 10 s budget gives up at once, zero sleep",
            &[(429, "queue_full", 30)],
            true,
            Policy::interactive(),
        ),
        "queue-full-30s" => scripted(
            name,
            "seed 000: one 429 queue_full with 30 s advice; interactive (10 s) gives up, background (120 s) succeeds",
            &[(429, "queue_full", 30)],
            false,
            Policy::interactive(),
        ),
        "two-429-then-success" => scripted(
            name,
            "seed 003: two 429s, then success, under the batch preset",
            &[(429, rl, 2), (429, rl, 2)],
            false,
            Policy::batch(),
        ),
        "five-retries-six-attempts" => scripted(
            name,
            "seed 003: always 429; five retries means six attempts",
            &[(429, rl, 1)],
            true,
            Policy::batch(),
        ),
        "deadline-wins" => scripted(
            name,
            "seed 003: always 429 with 20 s advice against a 90 s deadline: the deadline wins",
            &[(429, rl, 20)],
            true,
            Policy::batch(),
        ),
        "quota-exceeded" => {
            let mut s = Scenario { name: name.into(), policy: Policy::batch(), ..Scenario::default() };
            s.description =
                "seed 002: a monthly quota of 2 credits and 3 jobs: the third stops at QUOTA_EXCEEDED".into();
            s.api.accounts[0].monthly_quota = Some(2);
            s.fleet.jobs = 3;
            s
        }
        "insufficient-credits-402" => {
            let mut s = Scenario { name: name.into(), policy: Policy::batch(), ..Scenario::default() };
            s.description = "seed 002: 3 credits, conversions cost 2: the second job stops at 402".into();
            s.api.accounts[0].credits = Some(3);
            s.fleet.jobs = 2;
            s.fleet.op = "convert".into();
            s
        }
        "signup-required" => {
            let mut s = Scenario { name: name.into(), policy: Policy::batch(), ..Scenario::default() };
            s.description =
                "seed 002: anonymous callers capped at 2 an hour: the third stops at SIGNUP_REQUIRED".into();
            s.api.anonymous_cap = Some(2);
            s.fleet.anonymous = true;
            s.fleet.jobs = 3;
            s
        }
        "http-date-advice" => {
            let mut s = scripted(
                name,
                "seed 001: Retry-After as an HTTP-date, 3 s ahead",
                &[(429, rl, 3)],
                false,
                Policy::standard(),
            );
            s.api.advice = AdviceForm::HeaderDate;
            s
        }
        "skewed-server-clock" => {
            let mut s = named("http-date-advice").expect("named");
            s.name = name.into();
            s.description = "seed 001: the server clock an hour ahead; its Date header corrects the wait".into();
            s.api.clock_skew_ms = 3_600_000;
            s
        }
        "malformed-advice" => {
            let mut s = scripted(
                name,
                "seed 001: Retry-After: soon is invalid: fall back to the backoff",
                &[(429, rl, 2)],
                false,
                Policy::standard(),
            );
            s.api.advice = AdviceForm::Malformed;
            s
        }
        "in-progress-409" => {
            let mut s = Scenario { name: name.into(), policy: Policy::standard(), ..Scenario::default() };
            s.description =
                "seed 002: a 3 s job, a 1 s attempt timeout: the retry meets 409 IN_PROGRESS, then the replay".into();
            s.api.processing_ms = 3000;
            s.policy.attempt_timeout = Duration::from_secs(1);
            s
        }
        "network-error-unsafe-post" => {
            let mut s = Scenario { name: name.into(), policy: Policy::standard(), ..Scenario::default() };
            s.description = "seed 001: the answer to an unkeyed POST is lost; it is not replayed".into();
            s.policy.idempotency_keys = false;
            s.faults.schedule.push(ScheduledFault { at: Duration::ZERO, fault: crate::sim::net::Fault::LoseAnswer });
            s
        }
        "lost-answers-with-key" => lost_answers(name, true),
        "lost-answers-no-key" => lost_answers(name, false),
        "blinkimg-1s" => blinkimg_1s(),
        _ => return None,
    };
    let _ = Envelope::Blinkimg;
    Some(s)
}

/// A clear error for an unknown name, listing the valid ones.
pub fn unknown(name: &str) -> String {
    format!("unknown scenario {name:?}; the named scenarios are: {}", NAMES.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_resolves_and_validates() {
        for n in NAMES {
            let s = named(n).unwrap_or_else(|| panic!("{n}"));
            assert_eq!(s.name, n);
            assert!(!s.description.is_empty(), "{n}");
            s.validate().unwrap();
        }
        assert!(named("nope").is_none());
        assert!(unknown("nope").contains("blinkimg-1s"));
    }

    #[test]
    fn every_named_scenario_round_trips_through_toml() {
        for n in NAMES {
            let s = named(n).unwrap();
            let back = Scenario::from_toml(&s.to_toml()).unwrap_or_else(|e| panic!("{n}: {e}\n{}", s.to_toml()));
            assert_eq!(back, s, "{n}");
        }
    }

    #[test]
    fn bad_files_name_the_key() {
        let e = Scenario::from_toml("[fleet]\nworkerz = 3\n").unwrap_err().0;
        assert!(e.contains("workerz") && e.contains("unknown field"), "{e}");
        let e = Scenario::from_toml("[fleet]\nworkers = \"three\"\n").unwrap_err().0;
        assert!(e.contains("workers"), "{e}");
        let e = Scenario::from_toml("[fleet]\nworkers = 0\n").unwrap_err().0;
        assert!(e.contains("fleet.workers") && e.contains("1..=1024"), "{e}");
        let e = Scenario::from_toml("[policy]\ndeadline = \"soon\"\n").unwrap_err().0;
        assert!(e.contains("deadline") && e.contains("90s"), "{e}");
    }
}
