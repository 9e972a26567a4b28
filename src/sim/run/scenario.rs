//! A scenario: the API, the network, the fleet, the policy and the faults,
//! all in one value that a TOML file can describe. And the named scenarios
//! taken from the briefs.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::core::backoff::{AdviceMode, Backoff, Jitter, Spread};
use crate::core::duration_text;
use crate::core::policy::Policy;
use crate::gate::aimd::AimdConfig;
use crate::gate::pacing::PacingConfig;
use crate::sim::run::defects::Defects;
use crate::sim::world::api::{
    AdviceForm, ApiConfig, Envelope, LimiterConfig, LimiterKind, RateLimitFields, RateLimitedBody, ResetForm,
    RetryAfterRounding, ScriptStep,
};
use crate::sim::world::faults::Needs;
pub use crate::sim::world::limiter_service::CoordinatorConfig;
use crate::sim::world::net::{Fault, FaultClass, ScheduledFault};

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
    /// Which built-in client runs the jobs (retrysim's own unless a
    /// comparison or a negative control says otherwise), and its defects.
    #[serde(skip_serializing_if = "ClientConfig::is_default")]
    pub client: ClientConfig,
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
    /// Workers running at once, each one job at a time.
    pub workers: u32,
    /// Jobs in the shared queue.
    pub jobs: u32,
    /// The mix of operations, as weights.
    pub mix: OpMix,
    /// The job every poll (the mix's `safe`) asks for, `job_<n>`, as a
    /// status page watches one job; unset, job `n`'s poll asks for
    /// `job_<n>`, which the API has created only if that many jobs were.
    pub polled_job: Option<u32>,
    /// The job operation: `compress` (1 credit) or `convert` (2 credits).
    pub op: String,
    /// Send requests without an API key (anonymous caps apply).
    pub anonymous: bool,
    /// The gate every attempt of the fleet passes (none by default).
    pub gate: GateConfig,
    /// A retry budget shared by the fleet (none by default). With
    /// per-worker hosts each process has its own, as gRPC's and Finagle's are.
    pub budget: Option<BudgetConfig>,
    /// Where the workers run: `shared` (one host, a task per worker: the
    /// default) or `per_worker` (one host, i.e. one process, per worker).
    #[serde(skip_serializing_if = "Hosts::is_shared")]
    pub hosts: Hosts,
    /// Per-worker hosts only: run `gate` in a limiter service on its own
    /// host and make every worker ask it over the network (brief 003: "a
    /// semaphore inside one worker cannot control twenty separate workers").
    pub coordinator: Option<CoordinatorConfig>,
    /// Brief 000's deferral: an interactive give-up on a too-long advice is
    /// queued under its key (the caller answers 202) for background workers.
    pub deferral: Option<DeferralConfig>,
}

/// Where a fleet's workers run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hosts {
    /// One host; each worker is a task on it, and they share one gate and one budget.
    #[default]
    Shared,
    /// One host per worker (`w0`, `w1`, ...): separate processes that share
    /// nothing but the network. A gate is then local to each worker unless a
    /// `coordinator` runs it as a service.
    PerWorker,
}

impl Hosts {
    /// Whether this is the default.
    pub fn is_shared(&self) -> bool {
        *self == Hosts::Shared
    }
}

/// Brief 000's deferral queue: "store the job request in your own queue with
/// its idempotency key, and return 202 Accepted to your user. A worker can
/// retry later with a longer budget."
///
/// The fleet's `policy` is the interactive front end's. When it gives up
/// because the advice is too long (`advice_too_long`, `deadline_would_pass`),
/// the job, its request and its key go to a FIFO queue and the front end
/// answers 202 at once. `workers` background workers take jobs from the
/// queue, wait out the advice the front end was given (never retrying
/// earlier than advised), and run the job again under `policy` with the
/// *same* `Idempotency-Key`. A background give-up of the same kind puts the
/// job back at the end of the queue, at most `max_passes` runs in all.
///
/// # Default
/// `workers = 1`, `policy` = the `background` preset (120 s), `max_passes = 3`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeferralConfig {
    /// Background workers (tasks on the fleet host).
    pub workers: u32,
    /// The background policy.
    pub policy: Policy,
    /// Background runs per job, at most.
    pub max_passes: u32,
    /// Deliberate defects of the background client (negative controls).
    #[serde(skip_serializing_if = "Defects::is_off")]
    pub defects: Defects,
}

impl Default for DeferralConfig {
    fn default() -> Self {
        DeferralConfig { workers: 1, policy: Policy::background(), max_passes: 3, defects: Defects::default() }
    }
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
    TokenBucket {
        /// The bucket's size; a retry costs one token and is refused once half or less is left.
        max_tokens: u32,
        /// Tokens a success puts back, in thousandths.
        token_ratio_milli: u32,
    },
    /// Finagle/tower: `per_mille` of deposits over `ttl`, plus `min_per_sec`.
    Percent {
        /// How long a deposit counts (a sliding window).
        #[serde(with = "duration_text")]
        ttl: Duration,
        /// A reserve of retries per second of `ttl`, so an idle client can still retry.
        min_per_sec: u32,
        /// What a success deposits, in thousandths of a retry.
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
    /// `PUT /v1/uploads/<id>`: an upload stored under the client's own id,
    /// idempotent by its method, so sent without a key and replayable.
    pub idempotent: u32,
}

impl Default for OpMix {
    fn default() -> Self {
        OpMix { keyed: 1, unsafe_post: 0, safe: 0, idempotent: 0 }
    }
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet {
            workers: 1,
            jobs: 1,
            mix: OpMix::default(),
            polled_job: None,
            op: "compress".into(),
            anonymous: false,
            gate: GateConfig::None,
            budget: None,
            hosts: Hosts::Shared,
            coordinator: None,
            deferral: None,
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
    /// The slowest a message can be.
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
            client: ClientConfig::default(),
            net: NetConfig::default(),
            faults: Faults::default(),
            time_limit: Duration::from_secs(3600),
        }
    }
}

/// Which built-in client runs a scenario's jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Builtin {
    /// retrysim's driver under the scenario's policy.
    #[default]
    Retrysim,
    /// Brief 002's unkeyed client: no `Idempotency-Key`, and it resends a
    /// POST after a network error as if nothing could have run ("retried
    /// network errors like any other").
    NoKeyNaive,
    /// Retries at once, ignoring Retry-After (brief 002's first row).
    RetryAtOnce,
    /// Waits `min(8 s, 100 ms × 2^n)`, ignoring Retry-After.
    ExponentialNoJitter,
    /// Waits uniform `[0, min(8 s, 100 ms × 2^n)]`, ignoring Retry-After.
    ExponentialFullJitter,
}

impl Builtin {
    /// Every built-in client.
    pub const ALL: [Builtin; 5] = [
        Builtin::Retrysim,
        Builtin::NoKeyNaive,
        Builtin::RetryAtOnce,
        Builtin::ExponentialNoJitter,
        Builtin::ExponentialFullJitter,
    ];

    /// The policy this client really runs, from the scenario's: the
    /// baselines read no advice and use brief 002's fixed backoffs.
    pub fn policy(self, scenario: &Policy) -> Policy {
        let ms = Duration::from_millis;
        let ignoring = |backoff| Policy { use_advice: false, backoff, ..scenario.clone() };
        match self {
            Builtin::Retrysim => scenario.clone(),
            Builtin::NoKeyNaive => Policy { idempotency_keys: false, ..scenario.clone() },
            Builtin::RetryAtOnce => ignoring(Backoff { base: ms(0), cap: ms(0), jitter: Jitter::None }),
            Builtin::ExponentialNoJitter => ignoring(Backoff { base: ms(100), cap: ms(8_000), jitter: Jitter::None }),
            Builtin::ExponentialFullJitter => ignoring(Backoff { base: ms(100), cap: ms(8_000), jitter: Jitter::Full }),
        }
    }
}

/// A scenario's choice of client: a built-in one, and deliberate defects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientConfig {
    /// The client.
    pub kind: Builtin,
    /// Deliberate defects (negative controls); all off by default.
    #[serde(skip_serializing_if = "Defects::is_off")]
    pub defects: Defects,
}

impl ClientConfig {
    /// Whether this is retrysim's own client with no defect.
    pub fn is_default(&self) -> bool {
        *self == ClientConfig::default()
    }
}

pub use super::keys::InvalidScenario;

/// A TOML reader's error, a number past TOML's 64 bits said as such (the
/// command line cuts long quoted lines where it prints errors).
fn toml_error(e: toml::de::Error) -> InvalidScenario {
    let text = e.to_string();
    let mut out = text.trim_end().to_owned();
    if text.contains("as i128") {
        out.push_str("\nthe number does not fit in TOML's integers (-9223372036854775808..=9223372036854775807)");
    }
    InvalidScenario(out)
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), InvalidScenario> {
    if ok { Ok(()) } else { Err(InvalidScenario(what())) }
}

impl Scenario {
    /// The classes of transport fault this scenario can show a client, in
    /// order: from its steady lost answers and its schedule.
    pub fn fault_classes(&self) -> Vec<FaultClass> {
        let mut classes = std::collections::BTreeSet::new();
        if self.faults.lost_answers_per_mille > 0 {
            classes.insert(FaultClass::AnswerLost);
        }
        for f in &self.faults.schedule {
            classes.extend(FaultClass::of_fault(&f.fault));
        }
        classes.into_iter().collect()
    }

    /// Reads a scenario from TOML; unknown keys and wrong types are errors
    /// that name the key, and values out of range name the allowed range
    /// ([`keys::KEYS`](super::keys::KEYS)). A text over
    /// `MAX_SCENARIO_BYTES` is refused
    /// before it is parsed.
    pub fn from_toml(text: &str) -> Result<Scenario, InvalidScenario> {
        let max = super::keys::MAX_SCENARIO_BYTES;
        check(text.len() <= max, || {
            format!("the scenario is {} bytes, more than the {max} a scenario file may have", text.len())
        })?;
        // Every key has a default, so an empty file would run a scenario
        // nobody described: refuse it.
        let table: toml::Table = toml::from_str(text).map_err(toml_error)?;
        check(!table.is_empty(), || {
            "the scenario file sets nothing: start from one that `retrysim scenarios --show NAME` prints".into()
        })?;
        super::keys::check_toml(&table)?;
        let s: Scenario = toml::from_str(text).map_err(toml_error)?;
        s.validate()?;
        Ok(s)
    }

    /// The simulation's fixed epoch: the API's `epoch_unix_s`.
    pub fn epoch(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(self.api.epoch_unix_s)
    }

    /// The scenario as TOML, to copy and edit.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a scenario always serialises")
    }

    /// Checks every key against its range ([`keys::KEYS`](super::keys::KEYS)),
    /// then the rules between keys that the runner relies on.
    pub fn validate(&self) -> Result<(), InvalidScenario> {
        super::keys::check_value(self)?;
        let f = &self.fleet;
        // Each weight is at most a million (keys.rs), so the sum fits.
        let weights = [f.mix.keyed, f.mix.unsafe_post, f.mix.safe, f.mix.idempotent].map(u64::from);
        check(weights.iter().sum::<u64>() > 0, || "fleet.mix: at least one weight must be above 0".into())?;
        let n = &self.net;
        check(n.min_latency <= n.max_latency, || "net.min_latency must not exceed net.max_latency".into())?;
        let background = f.deferral.as_ref().map(|d| (&d.policy, "fleet.deferral.policy"));
        for (p, which) in std::iter::once((&self.policy, "policy")).chain(background) {
            check(p.backoff.base <= p.backoff.cap, || {
                format!("{which}.backoff.base must not exceed {which}.backoff.cap")
            })?;
        }
        let wall_ms = i128::from(self.api.epoch_unix_s) * 1000 + i128::from(self.api.clock_skew_ms);
        check(wall_ms >= 0, || {
            format!(
                "api.epoch_unix_s = {} with api.clock_skew_ms = {} starts the server's clock before 1970: \
                 raise epoch_unix_s or the skew",
                self.api.epoch_unix_s, self.api.clock_skew_ms
            )
        })?;
        self.api.validate().map_err(|e| InvalidScenario(format!("api.{e}")))?;
        self.validate_fleet_controls()
    }

    /// The rules between the fleet controls' keys: gates, hosts, the
    /// coordinator and deferral (their ranges are in `keys.rs`).
    fn validate_fleet_controls(&self) -> Result<(), InvalidScenario> {
        let f = &self.fleet;
        if let GateConfig::Aimd(c) = f.gate {
            c.validate().map_err(|e| InvalidScenario(format!("fleet.gate: {e}")))?;
        }
        let per_worker = f.hosts == Hosts::PerWorker;
        check(!per_worker || f.workers <= 256, || {
            format!("fleet.workers = {} is out of range for per_worker hosts: 1..=256", f.workers)
        })?;
        if let Some(c) = &f.coordinator {
            check(per_worker, || "fleet.coordinator needs fleet.hosts = \"per_worker\"".into())?;
            check(f.gate != GateConfig::None, || {
                "fleet.coordinator runs fleet.gate: set one (e.g. kind = \"aimd\")".into()
            })?;
            c.fallback.validate().map_err(|e| InvalidScenario(format!("fleet.coordinator.fallback: {e}")))?;
            check(c.heartbeat < c.silence, || "fleet.coordinator.heartbeat must be shorter than silence".into())?;
            check(c.lease >= c.silence, || "fleet.coordinator.lease must be at least silence".into())?;
        }
        if f.coordinator.is_none() {
            let needs = |f: &&ScheduledFault| f.fault.kind().needs() == Needs::LimiterService;
            if let Some(f) = self.faults.schedule.iter().find(needs) {
                return Err(InvalidScenario(format!("a {} fault needs fleet.coordinator", f.fault.kind().name())));
            }
        }
        if f.deferral.is_some() {
            check(!per_worker, || "fleet.deferral runs on the shared fleet host: use fleet.hosts = \"shared\"".into())?;
        }
        Ok(())
    }
}

fn script(steps: &[(u16, &str, u64)], repeat: bool) -> (Vec<ScriptStep>, bool) {
    let steps = steps.iter().map(|&(status, code, secs)| ScriptStep::new(status, Some(code), Some(secs))).collect();
    (steps, repeat)
}

fn scripted(name: &str, description: &str, steps: &[(u16, &str, u64)], repeat: bool, policy: Policy) -> Scenario {
    let mut s = Scenario { name: name.into(), description: description.into(), policy, ..Scenario::default() };
    (s.api.script, s.api.script_repeat) = script(steps, repeat);
    s
}

/// Brief 002's mock: a fixed window of 30 writes per second, 8 workers, 120
/// jobs, 50 tries per job, Retry-After plus up to 250 ms of jitter.
pub fn blinkimg_1s() -> Scenario {
    let mut s = Scenario {
        name: "blinkimg-1s".into(),
        description: "seed 002: 8 workers, 120 jobs, 30 writes per 1 s window, Retry-After + jitter".into(),
        policy: retry_after_jitter(),
        ..Scenario::default()
    };
    s.api.limiter = LimiterConfig {
        kind: LimiterKind::FixedWindow,
        writes: 30,
        reads: 300,
        window_ms: 1000,
        ..LimiterConfig::default()
    };
    s.fleet.workers = 8;
    s.fleet.jobs = 120;
    s
}

/// Brief 002's best policy: wait Retry-After plus up to 250 ms, 50 tries.
pub fn retry_after_jitter() -> Policy {
    Policy {
        name: "retry-after-jitter".into(),
        max_retries: 49,
        deadline: Duration::from_secs(600),
        max_single_wait: Duration::from_secs(120),
        backoff: Backoff { base: Duration::from_millis(100), cap: Duration::from_secs(8), jitter: Jitter::Full },
        advice_mode: AdviceMode::AdvicePlusSpread,
        // Seed 002's client: a flat 0-250 ms on any advice, and no escalation.
        spread: Spread {
            per_mille: 0,
            min: Duration::from_millis(250),
            max: Duration::from_millis(250),
            rounded_zero: Duration::ZERO,
        },
        escalate: false,
        // Seed 002's client gave up after 2 unclear 429s (the presets allow
        // 8 since issue 55).
        unclear_max_retries: 2,
        ..Policy::standard()
    }
}

fn lost_answers(name: &str, keys: bool) -> Scenario {
    let mut s = blinkimg_1s();
    s.name = name.into();
    s.faults.lost_answers_per_mille = 100;
    s.policy.idempotency_keys = keys;
    if !keys {
        // Brief 002's unkeyed client retried network errors like any other:
        // exactly the replay the core refuses. Reproduce it to show the cost.
        s.policy.name = "no-key-naive".into();
        s.client.kind = Builtin::NoKeyNaive;
    }
    s.description = if keys {
        "seed 002: 10% of answers lost after charging; the Idempotency-Key keeps charges == jobs".into()
    } else {
        "seed 002: 10% of answers lost after charging; a naive client without a key replays and charges twice".into()
    };
    s
}

/// Brief 002's fleet on pooled keep-alive connections, without keys, as
/// the API closes them under it: every idle connection at 300 ms (the pool
/// sees it and resends), then a request dropped after its write at 700 ms
/// and one reset at 1,100 ms (ambiguous: an unkeyed POST must not be sent
/// again), and a restart at 1,500 ms that resets every pooled connection.
fn close_races(name: &str) -> Scenario {
    use crate::sim::world::net::CloseTiming;
    let mut s = blinkimg_1s();
    s.name = name.into();
    s.description = "seed 002's fleet on keep-alive connections without keys, the API closing them as the clients \
        reuse them: resent when the close came first, given up when it raced the write"
        .into();
    s.policy.idempotency_keys = false;
    let at = Duration::from_millis;
    let race = |ms, timing| ScheduledFault { at: at(ms), fault: Fault::CloseRace { timing } };
    s.faults.schedule = vec![
        race(300, CloseTiming::FinBeforeWrite),
        race(700, CloseTiming::FinAfterWrite),
        race(1_100, CloseTiming::Rst),
        ScheduledFault { at: at(1_500), fault: Fault::Bounce },
    ];
    s
}

/// Brief 003's Berlin batch: AI summaries that take 2 s each, the batch
/// preset with brief 003's 5 retries (90 s deadline, full jitter 1 s..30 s)
/// and an API that allows 2.5 summaries a second.
///
/// The limiter: a token bucket of 25 requests refilled at 25 per 10 s
/// (2.5/s, bursts of 25), like the requests-per-minute limits of AI APIs
/// that refill continuously. Four workers send at most 4 / 2 s = 2/s, under
/// the limit: they pass. Forty send up to 20/s: the burst is gone in about
/// two seconds and every worker meets 429s. 160 jobs: at 2.5/s the API
/// can finish them in about 64 s, inside the 90 s deadline.
pub fn berlin(name: &str, workers: u32) -> Scenario {
    // Brief 003's 5 retries (the batch preset allows 8 since issue 55):
    // the Berlin runs are brief 003's batch, which loses jobs without a gate.
    let policy = Policy { max_retries: 5, ..Policy::batch() };
    let mut s = Scenario { name: name.into(), policy, ..Scenario::default() };
    s.description =
        format!("seed 003: {workers} workers, 160 two-second AI summaries, 2.5/s token bucket, batch policy (90 s)");
    s.api.limiter = LimiterConfig {
        kind: LimiterKind::TokenBucket,
        writes: 25,
        reads: 250,
        window_ms: 10_000,
        ..LimiterConfig::default()
    };
    s.api.processing_ms = 2_000;
    s.fleet.workers = workers;
    s.fleet.jobs = 160;
    s.time_limit = Duration::from_secs(600);
    s
}

/// Brief 000's interactive front end over a `queue_full` API, with deferral.
///
/// The API runs two jobs at once (3 s each) and answers `queue_full` with a
/// 30 s Retry-After beyond that. Six interactive workers (10 s budget) take
/// 24 jobs: most meet `queue_full`, give up at once (advice too long) and
/// are deferred with their key (202). One background worker (120 s budget)
/// waits the 30 s out and runs them with the same key.
pub(crate) fn deferral_queue_full() -> Scenario {
    let mut s = Scenario { name: "deferral-queue-full".into(), policy: Policy::interactive(), ..Scenario::default() };
    s.description =
        "seed 000: interactive (10 s) front end defers queue_full (30 s advice) to a background worker (120 s), same key".into();
    s.api.envelope = Envelope::Sume;
    s.api.processing_ms = 3_000;
    s.api.concurrency = Some(crate::sim::world::api::ConcurrencyConfig { max_in_flight: 2, retry_after_s: 30 });
    s.fleet.workers = 6;
    s.fleet.jobs = 24;
    s.fleet.deferral = Some(DeferralConfig::default());
    s
}

/// What builds a named scenario, handed its name.
type Build = fn(&str) -> Scenario;

/// Every named scenario, in the order `retrysim scenarios` lists them: its
/// name, and what builds it. The one list of them.
const NAMED: [(&str, Build); 34] = [
    ("once-429-then-200", |name| {
        let once = &[(429, RATE_LIMITED, 1)];
        scripted(name, "seed 000: one 429 (Retry-After 1), then 201", once, false, Policy::standard())
    }),
    ("always-429-30s-budget-10s", |name| {
        let what = "seed 000: always 429 queue_full with 30 s advice; a 10 s budget gives up at once, zero sleep";
        scripted(name, what, &[(429, "queue_full", 30)], true, Policy::interactive())
    }),
    ("queue-full-30s", |name| {
        let what =
            "seed 000: one 429 queue_full with 30 s advice; interactive (10 s) gives up, background (120 s) succeeds";
        scripted(name, what, &[(429, "queue_full", 30)], false, Policy::interactive())
    }),
    ("two-429-then-success", |name| {
        let what = "seed 003: two 429s, then success, under the batch preset";
        scripted(name, what, &[(429, RATE_LIMITED, 2), (429, RATE_LIMITED, 2)], false, Policy::batch())
    }),
    ("five-retries-six-attempts", |name| {
        let what = "seed 003: always 429; five retries means six attempts";
        // Brief 003's 5 retries (the batch preset allows 8 since issue 55).
        scripted(name, what, &[(429, RATE_LIMITED, 1)], true, Policy { max_retries: 5, ..Policy::batch() })
    }),
    ("quota-exceeded", quota_exceeded),
    ("insufficient-credits-402", insufficient_credits),
    ("signup-required", signup_required),
    ("deadline-wins", |name| {
        let what = "seed 003: always 429 with 20 s advice against a 90 s deadline: the deadline wins";
        scripted(name, what, &[(429, RATE_LIMITED, 20)], true, Policy::batch())
    }),
    ("http-date-advice", http_date_advice),
    ("skewed-server-clock", skewed_server_clock),
    ("in-progress-409", in_progress),
    ("network-error-unsafe-post", network_error_unsafe_post),
    ("lost-answers-with-key", |name| lost_answers(name, true)),
    ("lost-answers-no-key", |name| lost_answers(name, false)),
    ("close-races-no-key", close_races),
    ("blinkimg-1s", |_| blinkimg_1s()),
    ("malformed-advice", |name| {
        let what = "seed 001: Retry-After: soon is invalid: fall back to the backoff";
        let mut s = scripted(name, what, &[(429, RATE_LIMITED, 2)], false, Policy::standard());
        s.api.advice = AdviceForm::Malformed;
        s
    }),
    ("berlin-4-workers", |name| berlin(name, 4)),
    ("berlin-40-workers", |name| berlin(name, 40)),
    ("berlin-40-workers-admission", |name| {
        let mut s = berlin(name, 40);
        s.description = "seed 003: the 40-worker batch through one AIMD admission queue (starts at 4 in flight)".into();
        s.fleet.gate = GateConfig::Aimd(AimdConfig::default());
        s
    }),
    ("berlin-40-workers-budget", |name| {
        let mut s = berlin(name, 40);
        s.description = "seed 001: the 40-worker batch with a shared gRPC retry budget (10 tokens, 0.1): retries stop, budget exhausted".into();
        s.fleet.budget = Some(BudgetConfig::TokenBucket { max_tokens: 10, token_ratio_milli: 100 });
        s
    }),
    ("berlin-40-processes-local-gates", berlin_local_gates),
    ("berlin-40-processes-coordinated", berlin_coordinated),
    ("berlin-40-processes-limiter-partition", berlin_limiter_partition),
    ("deferral-queue-full", |_| deferral_queue_full()),
    ("retry-after-rounded-down", retry_after_rounded_down),
    ("reset-unix-seconds", reset_unix_seconds),
    ("ietf-ratelimit-fields", ietf_ratelimit_fields),
    ("html-429-no-code", html_429_no_code),
    ("no-date-skewed-clock", no_date_skewed_clock),
    ("moving-window-1s", moving_window),
    ("flask-limiter-fixed", |name| flask_limiter(name, LimiterKind::FixedWindow)),
    ("flask-limiter-moving", |name| flask_limiter(name, LimiterKind::MovingWindow)),
];

/// The names of the named scenarios, in the order `retrysim scenarios` lists them.
pub const NAMES: [&str; NAMED.len()] = {
    let mut names = [""; NAMED.len()];
    let mut i = 0;
    while i < NAMED.len() {
        names[i] = NAMED[i].0;
        i += 1;
    }
    names
};

/// A named scenario, or `None`.
pub fn named(name: &str) -> Option<Scenario> {
    NAMED.iter().find(|(n, _)| *n == name).map(|(n, build)| build(n))
}

const RATE_LIMITED: &str = "RATE_LIMITED";

fn quota_exceeded(name: &str) -> Scenario {
    let mut s = Scenario { name: name.into(), policy: Policy::batch(), ..Scenario::default() };
    s.description = "seed 002: a monthly quota of 2 credits and 3 jobs: the third stops at QUOTA_EXCEEDED".into();
    s.api.accounts[0].monthly_quota = Some(2);
    s.fleet.jobs = 3;
    s
}

fn insufficient_credits(name: &str) -> Scenario {
    let mut s = Scenario { name: name.into(), policy: Policy::batch(), ..Scenario::default() };
    s.description = "seed 002: 3 credits, conversions cost 2: the second job stops at 402".into();
    s.api.accounts[0].credits = Some(3);
    s.fleet.jobs = 2;
    s.fleet.op = "convert".into();
    s
}

fn signup_required(name: &str) -> Scenario {
    let mut s = Scenario { name: name.into(), policy: Policy::batch(), ..Scenario::default() };
    s.description = "seed 002: anonymous callers capped at 2 an hour: the third stops at SIGNUP_REQUIRED".into();
    s.api.anonymous_cap = Some(2);
    s.fleet.anonymous = true;
    s.fleet.jobs = 3;
    s
}

fn http_date_advice(name: &str) -> Scenario {
    let what = "seed 001: Retry-After as an HTTP-date, 3 s ahead";
    let mut s = scripted(name, what, &[(429, RATE_LIMITED, 3)], false, Policy::standard());
    s.api.advice = AdviceForm::HeaderDate;
    s
}

fn skewed_server_clock(name: &str) -> Scenario {
    let mut s = http_date_advice(name);
    s.description = "seed 001: the server clock an hour ahead; its Date header corrects the wait".into();
    s.api.clock_skew_ms = 3_600_000;
    s
}

fn in_progress(name: &str) -> Scenario {
    let mut s = Scenario { name: name.into(), policy: Policy::standard(), ..Scenario::default() };
    s.description =
        "seed 002: a 3 s job, a 1 s attempt timeout: the retry meets 409 IN_PROGRESS, then the replay".into();
    s.api.processing_ms = 3000;
    s.policy.attempt_timeout = Duration::from_secs(1);
    s
}

fn network_error_unsafe_post(name: &str) -> Scenario {
    let mut s = Scenario { name: name.into(), policy: Policy::standard(), ..Scenario::default() };
    s.description = "seed 001: the answer to an unkeyed POST is lost; it is not replayed".into();
    s.policy.idempotency_keys = false;
    s.faults.schedule.push(ScheduledFault { at: Duration::ZERO, fault: Fault::LoseAnswer });
    s
}

fn berlin_local_gates(name: &str) -> Scenario {
    let mut s = berlin(name, 40);
    s.description =
        "seed 003: 40 workers as separate hosts, each with its own AIMD gate: a local limiter cannot control the fleet"
            .into();
    s.fleet.hosts = Hosts::PerWorker;
    s.fleet.gate = GateConfig::Aimd(AimdConfig::default());
    // 42 hosts: a 10 ms tick keeps the run fast (latencies round up to it).
    s.net.tick = Duration::from_millis(10);
    s
}

fn berlin_coordinated(name: &str) -> Scenario {
    let mut s = berlin(name, 40);
    s.description =
        "seed 003: 40 workers as separate hosts, coordinated by an AIMD limiter service over the network".into();
    s.fleet.hosts = Hosts::PerWorker;
    s.net.tick = Duration::from_millis(10);
    s.fleet.gate = GateConfig::Aimd(AimdConfig::default());
    s.fleet.coordinator =
        Some(CoordinatorConfig { fallback: AimdConfig::fixed(1, 50), ..CoordinatorConfig::default() });
    s
}

fn berlin_limiter_partition(name: &str) -> Scenario {
    let mut s = berlin_coordinated(name);
    s.description =
        "seed 003: the limiter service is partitioned away from 10 s to 40 s: workers fail open to 1 in flight, 1 per 20 s"
            .into();
    s.faults.schedule.push(ScheduledFault {
        at: Duration::from_secs(10),
        fault: Fault::LimiterPartition { until: Duration::from_secs(40) },
    });
    s
}

/// The server's wall clock half a second ahead: a run then starts half-way
/// through one of the server's wall-clock seconds. Real runs start at any
/// phase, and every whole-second habit (`Date`, a Unix-seconds reset,
/// Flask-Limiter's truncated `Retry-After`) depends on it: at phase 0 each
/// 1 s window would open just after a whole second, and a truncated
/// `Retry-After` would almost never say 0. Half a second is the mean phase.
/// The clients read only the server's own `Date` in these scenarios, so for
/// them this is the phase, not a skew.
pub const HALF_SECOND_PHASE_MS: i64 = 500;

/// The server's wall clock 0.9 s ahead: a phase at which brief 002's
/// refusals, which come early in each window, fall in the wall-clock second
/// of the window's reset, so Flask-Limiter's truncated `Retry-After` says 0.
/// At [`HALF_SECOND_PHASE_MS`] the same workload never sees a 0.
pub(crate) const LATE_PHASE_MS: i64 = 900;

/// Flask-Limiter's habits on an API (see `sim::world::api::habits` for the source
/// of each): `X-RateLimit-*` headers on every answer (with
/// `RATELIMIT_HEADERS_ENABLED`), the reset in Unix seconds, `int(int(reset
/// + 1) - now)` as `Retry-After`, Werkzeug's HTML 429 page without a code,
/// and only the header to carry the wait. `Date` is sent (Werkzeug's server
/// sends it, truncated to the second), and the run starts at
/// [`HALF_SECOND_PHASE_MS`]. Connections are kept alive as waitress keeps
/// them (the WSGI server of the calibration's Flask-Limiter): idle ones
/// closed after its `channel_timeout` of 120 s, no cap.
pub(crate) fn flask_limiter_habits(api: &mut ApiConfig) {
    api.rate_limit_headers = true;
    api.rate_limit_fields = RateLimitFields::XRateLimit;
    api.rate_limit_reset = ResetForm::UnixSeconds;
    api.retry_after_rounding = RetryAfterRounding::Down;
    api.rate_limited_body = RateLimitedBody::Html;
    api.advice = AdviceForm::HeaderSeconds;
    api.send_date = true;
    api.clock_skew_ms = HALF_SECOND_PHASE_MS;
    api.keep_alive.idle_timeout_ms = 120_000;
}

/// A Flask-Limiter server (`limits`' fixed or moving window, 30 POSTs per
/// 1 s, in memory) in front of brief 002's workload: 8 workers, 120 jobs,
/// Retry-After plus up to 250 ms of jitter. The later calibration runs the
/// same against the real Flask-Limiter.
pub(crate) fn flask_limiter(name: &str, kind: LimiterKind) -> Scenario {
    let mut s = blinkimg_1s();
    s.name = name.into();
    s.api.limiter.kind = kind;
    flask_limiter_habits(&mut s.api);
    let window = if kind == LimiterKind::MovingWindow { "moving" } else { "fixed" };
    s.description = format!(
        "Flask-Limiter ({window} window, 30 per 1 s) under seed 002's 8 workers and 120 jobs: HTML 429, truncated Retry-After, Unix reset"
    );
    s
}

/// One habit at a time on brief 002's setup (`blinkimg-1s`), each against
/// what it changes: the advice, the headers a pacing gate reads, the body's
/// code, the clock, the window.
fn habit(name: &str, description: &str) -> Scenario {
    let mut s = blinkimg_1s();
    s.name = name.into();
    s.description = description.into();
    s
}

fn retry_after_rounded_down(name: &str) -> Scenario {
    let mut s = habit(
        name,
        "seed 002's setup, Retry-After truncated as Flask-Limiter does, 0.9 s into a second: a 429 says 0, the retry meets the same window",
    );
    s.api.retry_after_rounding = RetryAfterRounding::Down;
    s.api.clock_skew_ms = LATE_PHASE_MS;
    s
}

fn reset_unix_seconds(name: &str) -> Scenario {
    let mut s = habit(
        name,
        "seed 002's setup behind the Pacing gate, X-RateLimit-Reset in whole Unix seconds (int(reset + 1)) against a whole-second Date",
    );
    s.api.rate_limit_headers = true;
    s.api.rate_limit_fields = RateLimitFields::XRateLimit;
    s.api.rate_limit_reset = ResetForm::UnixSeconds;
    s.api.clock_skew_ms = HALF_SECOND_PHASE_MS;
    s.fleet.gate = GateConfig::Pacing(PacingConfig::default());
    s
}

fn ietf_ratelimit_fields(name: &str) -> Scenario {
    let mut s = habit(
        name,
        "seed 002's setup behind the Pacing gate, only draft-10's structured RateLimit and RateLimit-Policy fields",
    );
    s.api.rate_limit_headers = true;
    s.api.rate_limit_fields = RateLimitFields::Structured;
    s.fleet.gate = GateConfig::Pacing(PacingConfig::default());
    s
}

fn html_429_no_code(name: &str) -> Scenario {
    let mut s =
        habit(name, "seed 002's setup, 429 as Flask-Limiter's HTML page: a valid Retry-After but no error code");
    s.api.rate_limited_body = RateLimitedBody::Html;
    s.api.advice = AdviceForm::HeaderSeconds;
    s
}

fn no_date_skewed_clock(name: &str) -> Scenario {
    let mut s = skewed_server_clock(name);
    s.description =
        "seed 001: the server clock an hour ahead and no Date header: the HTTP-date advice reads as an hour".into();
    s.api.send_date = false;
    s
}

fn moving_window(name: &str) -> Scenario {
    let mut s = habit(
        name,
        "seed 002's setup behind the Pacing gate on limits' moving window: slots free one by one, RateLimit-Reset tells only the first",
    );
    s.api.limiter.kind = LimiterKind::MovingWindow;
    s.api.rate_limit_headers = true;
    s.fleet.gate = GateConfig::Pacing(PacingConfig::default());
    s
}

/// A clear error for an unknown name, listing the valid ones (the command
/// line's).
#[cfg(any(feature = "cli", test))]
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

    #[test]
    fn fleet_controls_read_from_toml_and_name_their_key() {
        let s = Scenario::from_toml(
            r#"
            [fleet]
            workers = 3
            hosts = "per_worker"
            gate = { kind = "aimd", initial_limit = 2, rate = "cubic" }
            coordinator = { silence = "3s", fallback = { initial_limit = 1, min_limit = 1, max_limit = 1 } }
            [[faults.schedule]]
            at = "1s"
            fault = { kind = "limiter_partition", until = "2s" }
            "#,
        )
        .unwrap();
        assert_eq!(s.fleet.hosts, Hosts::PerWorker);
        assert_eq!(s.fleet.coordinator.unwrap().silence, Duration::from_secs(3));
        let GateConfig::Aimd(c) = s.fleet.gate else { panic!("{:?}", s.fleet.gate) };
        assert_eq!((c.initial_limit, c.rate), (2, crate::gate::aimd::RateControl::Cubic));

        let bad = |text: &str| Scenario::from_toml(text).unwrap_err().0;
        let e = bad("[fleet]\ncoordinator = {}\ngate = { kind = \"aimd\" }\n");
        assert!(e.contains("per_worker"), "{e}");
        let e = bad("[fleet]\nhosts = \"per_worker\"\ncoordinator = {}\n");
        assert!(e.contains("fleet.gate"), "{e}");
        let e = bad("[fleet]\nbudget = { kind = \"token_bucket\", max_tokens = 2000, token_ratio_milli = 100 }\n");
        assert!(e.contains("max_tokens") && e.contains("1..=1000"), "{e}");
        let e = bad("[fleet]\nbudget = { kind = \"percent\", ttl = \"500ms\", min_per_sec = 1, per_mille = 200 }\n");
        assert!(e.contains("fleet.budget.ttl") && e.contains("1s..=1m"), "{e}");
        let e = bad("[fleet]\ngate = { kind = \"aimd\", initial_limit = 0 }\n");
        assert!(e.contains("fleet.gate"), "{e}");
        let e = bad("[[faults.schedule]]\nat = \"1s\"\nfault = { kind = \"limiter_partition\", until = \"2s\" }\n");
        assert!(e.contains("coordinator"), "{e}");
        let e = bad("[fleet]\nhosts = \"per_worker\"\ndeferral = {}\n");
        assert!(e.contains("deferral"), "{e}");
        // Scenarios without fleet controls keep their TOML as it was.
        assert!(!named("blinkimg-1s").unwrap().to_toml().contains("hosts"));
    }
}
