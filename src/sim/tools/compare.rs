//! Policies side by side: brief 002's table, reproduced and extended.
//!
//! A [`Preset`] is a list of named rows, each a whole [`Scenario`] (API,
//! fleet, policy, gate, faults), so a row may change anything, and adding a
//! row is one [`Preset::push`]. [`run`] runs every row on seeds `1..=K` and
//! summarises each figure as its median and its range over the seeds. The
//! row whose gate is the oracle ([`GateConfig::Ideal`]) is the yardstick:
//! every row is also shown as a ratio to its time and its requests.
//!
//! The presets:
//! - `blinkimg-1s`: brief 002's mock (8 workers, 120 jobs, 30 writes per 1 s
//!   window, 50 tries), the brief's six policies, the ideal, and pacing.
//! - `blinkimg-60s`: the real API's limits (120 writes and 1,200 reads per
//!   60 s window), 8 workers, 480 jobs, the same rows.
//! - `berlin`: brief 003's overnight batch (the named `berlin-*` scenarios):
//!   160 two-second AI summaries under the `batch` policy against a token
//!   bucket of 2.5 requests a second (bursts of 25); 4 workers, 40 workers,
//!   40 workers through AIMD admission control, the ideal, and pacing.
//!
//! # Ticks
//!
//! turmoil advances virtual time in fixed ticks. `blinkimg-1s` keeps the
//! 1 ms tick: its runs last seconds. The long-window presets run minutes of
//! virtual time on a 10 ms tick: every message then takes one tick, so an
//! attempt (connect, request, answer) takes about 30 ms instead of 3 ms,
//! like a real API over the internet. When every tick was stepped that made
//! them about 6 times cheaper; now that idle ticks are skipped, about 1.2
//! times. Measured on `blinkimg-60s` (`cargo bench --bench
//! compare`, the `tick` table), the median time of every row moves by
//! +0.3% (ideal, pacing) to +1.5% (exponential without jitter), except
//! retrying at once: how many jobs survive until the next window depends
//! only on how fast 50 tries burn, so at 30 ms a try it gives up on 312 jobs
//! over 60 s, at 3 ms on 360 jobs in 7 s.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::core::policy::Policy;
use crate::gate::pacing::PacingConfig;
use crate::sim::checks::hunt::SeedLoop;
use crate::sim::run::runner::{Report, RunOptions, Traces};
use crate::sim::run::scenario::{self, Builtin, GateConfig, Scenario};
use crate::sim::world::api::{LimiterConfig, LimiterKind};

/// The presets, in the order `retrysim compare` lists them.
pub const PRESETS: [&str; 4] = ["blinkimg-1s", "blinkimg-60s", "berlin", "habits"];

/// The number of seeds a comparison runs by default (brief 002: "the median
/// of 5 runs"; the command line's).
#[cfg(feature = "cli")]
pub const DEFAULT_SEEDS: u32 = 5;

/// One row of a comparison: a name and the scenario it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The row's label in the table, e.g. a policy's name.
    pub name: String,
    /// What the row runs, on every seed.
    pub scenario: Scenario,
}

/// A comparison: named rows, run on the same seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// The name `compare` is called with.
    pub name: String,
    /// What the comparison shows, in one line.
    pub description: String,
    /// The rows, in table order.
    pub rows: Vec<Row>,
}

impl Preset {
    /// An empty preset.
    pub fn new(name: &str, description: &str) -> Preset {
        Preset { name: name.into(), description: description.into(), rows: Vec::new() }
    }

    /// Appends a row; the scenario takes the row's name (reports and
    /// `retrysim run --config` show it).
    pub fn push(&mut self, name: &str, mut scenario: Scenario) -> &mut Preset {
        scenario.name = name.into();
        self.rows.push(Row { name: name.into(), scenario });
        self
    }

    /// A row by name.
    pub fn row(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// The row names, in order.
    pub fn row_names(&self) -> Vec<&str> {
        self.rows.iter().map(|r| r.name.as_str()).collect()
    }
}

/// A preset by name, or `None`.
pub fn preset(name: &str) -> Option<Preset> {
    match name {
        "blinkimg-1s" => Some(blinkimg_1s()),
        "blinkimg-60s" => Some(blinkimg_60s()),
        "berlin" => Some(berlin()),
        "habits" => Some(habits()),
        _ => None,
    }
}

/// A clear error for an unknown preset, listing the valid ones (the command
/// line's).
#[cfg(any(feature = "cli", test))]
pub fn unknown(name: &str) -> String {
    format!("unknown preset {name:?}; the presets are: {}", PRESETS.join(", "))
}

/// One of brief 002's naive clients on `base`: 50 tries, like every row of
/// the seed, and the policy the client really runs written out in full.
fn baseline(base: &Scenario, name: &str, kind: Builtin, description: &str) -> Scenario {
    let policy = Policy { name: name.into(), ..kind.policy(&scenario::retry_after_jitter()) };
    let mut s = with_policy(base, policy, description);
    s.client.kind = kind;
    s
}

fn with_policy(base: &Scenario, policy: Policy, description: &str) -> Scenario {
    Scenario { policy, description: description.into(), ..base.clone() }
}

fn with_gate(base: &Scenario, gate: GateConfig, description: &str) -> Scenario {
    let mut s = Scenario { description: description.into(), ..base.clone() };
    s.fleet.gate = gate;
    s
}

/// The rows every Blinkimg preset has, on `base` (whose policy is Retry-After + jitter).
fn blinkimg_rows(p: &mut Preset, base: &Scenario) {
    for (name, kind, description) in [
        ("retry-at-once", Builtin::RetryAtOnce, "retry at once, ignoring Retry-After"),
        ("exponential-no-jitter", Builtin::ExponentialNoJitter, "wait min(8 s, 100 ms * 2^n), ignoring Retry-After"),
        (
            "exponential-full-jitter",
            Builtin::ExponentialFullJitter,
            "wait uniform[0, min(8 s, 100 ms * 2^n)], ignoring Retry-After",
        ),
    ] {
        p.push(name, baseline(base, name, kind, description));
    }
    p.push("retry-after-jitter", with_policy(base, base.policy.clone(), "wait Retry-After plus 0-250 ms"));
    for (name, keys) in [("no-key-10pct-lost", false), ("key-10pct-lost", true)] {
        let mut s = base.clone();
        s.faults.lost_answers_per_mille = 100;
        s.policy.idempotency_keys = keys;
        if keys {
            s.description = "Retry-After + jitter, 10% of answers lost after charging, with an Idempotency-Key".into();
        } else {
            // Brief 002's unkeyed client retried network errors like any other.
            s.policy.name = "no-key-naive".into();
            s.client.kind = Builtin::NoKeyNaive;
            s.description = "Retry-After + jitter, 10% of answers lost after charging, no key: replays".into();
        }
        p.push(name, s);
    }
    p.push("ideal", with_gate(base, GateConfig::Ideal, "the oracle: knows the window, paces perfectly"));
    p.push(
        "pacing",
        with_gate(
            base,
            GateConfig::Pacing(PacingConfig::default()),
            "the Pacing gate: holds the fleet on RateLimit-* and Retry-After",
        ),
    );
}

/// Brief 002's setup: 8 workers, 120 jobs, 30 writes per 1 s window.
///
/// The API sends `RateLimit-*` headers on every answer (as the
/// `@fastify/rate-limit` behind it does); only the pacing row reads them.
pub fn blinkimg_1s() -> Preset {
    let mut base = scenario::blinkimg_1s();
    base.api.rate_limit_headers = true;
    let mut p = Preset::new(
        "blinkimg-1s",
        "seed 002's mock: 8 workers, 120 jobs, 30 writes per 1 s fixed window, 50 tries per job",
    );
    blinkimg_rows(&mut p, &base);
    p
}

/// The real API's limits: 120 writes and 1,200 reads per 60 s window,
/// 8 workers, 480 jobs (four windows' worth), on a 10 ms tick.
pub fn blinkimg_60s() -> Preset {
    let mut base = scenario::blinkimg_1s();
    base.api.limiter = LimiterConfig {
        kind: LimiterKind::FixedWindow,
        writes: 120,
        reads: 1_200,
        window_ms: 60_000,
        ..LimiterConfig::default()
    };
    base.api.rate_limit_headers = true;
    base.fleet.jobs = 480;
    base.net.tick = Duration::from_millis(10);
    let mut p = Preset::new(
        "blinkimg-60s",
        "the real API's limits: 8 workers, 480 jobs, 120 writes per 60 s fixed window, 50 tries per job (10 ms tick)",
    );
    blinkimg_rows(&mut p, &base);
    p
}

/// Brief 003's overnight batch, as the named `berlin-*` scenarios model it:
/// 160 two-second AI summaries under the `batch` policy (5 retries, 90 s
/// deadline, full jitter 1 s..30 s) against a token bucket of 2.5 requests a
/// second with bursts of 25. Four workers never meet a 429; forty do, unless
/// an admission queue, the oracle or the pacing gate holds them.
pub fn berlin() -> Preset {
    let named = |name: &str| scenario::named(name).expect("the berlin scenarios are named");
    let mut p = Preset::new(
        "berlin",
        "seed 003: 160 two-second summaries, batch policy (90 s), 2.5/s token bucket with bursts of 25",
    );
    for name in ["berlin-4-workers", "berlin-40-workers", "berlin-40-workers-admission"] {
        p.push(name, named(name));
    }
    let forty = named("berlin-40-workers");
    p.push("ideal", with_gate(&forty, GateConfig::Ideal, "40 workers behind the oracle"));
    let mut paced = with_gate(&forty, GateConfig::Pacing(PacingConfig::default()), "40 workers behind the Pacing gate");
    paced.api.rate_limit_headers = true;
    p.push("pacing", paced);
    p
}

/// The habits of the `habits` preset: a name, what it is, and how it
/// changes brief 002's API (see `sim::world::api::habits` for their sources).
pub const HABITS: [(&str, &str); 12] = [
    ("fastify", "@fastify/rate-limit, seed 002's API: Retry-After rounded up, RateLimit-* in seconds left"),
    ("retry-after-down-mid", "Flask-Limiter's truncated Retry-After, the run 0.5 s into a wall-clock second"),
    ("retry-after-down-late", "Flask-Limiter's truncated Retry-After, the run 0.9 s into a wall-clock second"),
    ("retry-after-truncated", "Retry-After int(reset - now), 0 for a whole 1 s window, with an HTML 429"),
    ("reset-unix", "X-RateLimit-Reset in whole Unix seconds (int(reset + 1)) against a whole-second Date"),
    ("no-date", "X-RateLimit-Reset in Unix seconds and no Date header to measure it against"),
    ("ietf-fields", "only draft-10's structured RateLimit and RateLimit-Policy fields"),
    ("html-429", "429 as Flask-Limiter's HTML page: Retry-After, but no error code"),
    ("moving-window", "limits' moving window: refusals are free, slots free one by one"),
    ("flask-fixed", "all of Flask-Limiter's habits, fixed window, 0.5 s into a wall-clock second"),
    ("flask-moving", "all of Flask-Limiter's habits, moving window, 0.5 s into a wall-clock second"),
    ("flask-fixed-late", "all of Flask-Limiter's habits, fixed window, 0.9 s into a wall-clock second"),
];

/// Brief 002's API with one habit (a name of [`HABITS`]) applied.
pub fn with_habit(habit: &str) -> Option<Scenario> {
    use crate::sim::run::scenario::{HALF_SECOND_PHASE_MS, LATE_PHASE_MS, flask_limiter_habits};
    use crate::sim::world::api::{RateLimitFields, RateLimitedBody, ResetForm, RetryAfterRounding};
    let mut s = scenario::blinkimg_1s();
    s.api.rate_limit_headers = true;
    let api = &mut s.api;
    match habit {
        "fastify" => {}
        "retry-after-down-mid" | "retry-after-down-late" => {
            api.retry_after_rounding = RetryAfterRounding::Down;
            api.clock_skew_ms = if habit.ends_with("late") { LATE_PHASE_MS } else { HALF_SECOND_PHASE_MS };
        }
        "retry-after-truncated" => {
            api.retry_after_rounding = RetryAfterRounding::Truncate;
            api.rate_limited_body = RateLimitedBody::Html;
            api.advice = crate::sim::world::api::AdviceForm::HeaderSeconds;
            api.clock_skew_ms = HALF_SECOND_PHASE_MS;
            // Python's `http.server` (tests/conformance/rounding_server.py):
            // HTTP/1.1 keep-alive with no idle timeout.
            api.keep_alive.idle_timeout_ms = 0;
        }
        "reset-unix" | "no-date" => {
            api.rate_limit_fields = RateLimitFields::XRateLimit;
            api.rate_limit_reset = ResetForm::UnixSeconds;
            api.clock_skew_ms = HALF_SECOND_PHASE_MS;
            api.send_date = habit == "reset-unix";
        }
        "ietf-fields" => api.rate_limit_fields = RateLimitFields::Structured,
        "html-429" => {
            api.rate_limited_body = RateLimitedBody::Html;
            api.advice = crate::sim::world::api::AdviceForm::HeaderSeconds;
        }
        "moving-window" => api.limiter.kind = LimiterKind::MovingWindow,
        "flask-fixed" | "flask-moving" | "flask-fixed-late" => {
            flask_limiter_habits(api);
            if habit == "flask-moving" {
                api.limiter.kind = LimiterKind::MovingWindow;
            }
            if habit == "flask-fixed-late" {
                api.clock_skew_ms = LATE_PHASE_MS;
            }
        }
        _ => return None,
    }
    Some(s)
}

/// How each of brief 002's kinds of policy fares under each habit of
/// [`HABITS`]: retrying at once, exponential backoff with full jitter
/// (both ignore `Retry-After`), Retry-After plus jitter, and the Pacing
/// gate; then the production presets ([`Policy::PRESETS`]), whose retries
/// and deadlines are a service's, not brief 002's 50 tries. Rows are
/// `habit/policy`.
///
/// One ideal row is the yardstick for all: the oracle reads no header and
/// meets no refusal, and it admits an attempt only a whole window after an
/// earlier one came back, which both windows accept, so every habit gives it
/// the same schedule (a test runs it under each).
pub fn habits() -> Preset {
    let mut p = Preset::new(
        "habits",
        "seed 002's setup (8 workers, 120 jobs, 30 writes per 1 s) under real servers' habits; rows are habit/policy",
    );
    for (habit, what) in HABITS {
        let base = with_habit(habit).expect("every habit of HABITS applies");
        let rows = [
            ("retry-at-once", baseline(&base, "retry-at-once", Builtin::RetryAtOnce, "retry at once")),
            (
                "exponential-full-jitter",
                baseline(
                    &base,
                    "exponential-full-jitter",
                    Builtin::ExponentialFullJitter,
                    "uniform[0, min(8 s, 100 ms * 2^n)]",
                ),
            ),
            ("retry-after-jitter", with_policy(&base, base.policy.clone(), "Retry-After plus 0-250 ms")),
            ("pacing", with_gate(&base, GateConfig::Pacing(PacingConfig::default()), "the Pacing gate")),
        ];
        for (policy, mut s) in rows {
            s.description = format!("{what}; {}", s.description);
            p.push(&format!("{habit}/{policy}"), s);
        }
        // The production presets, as a service ships them (the
        // comparison ran only 50-try policies, so nobody saw them lose jobs).
        for name in Policy::PRESETS {
            let policy = Policy::preset(name).expect("a preset");
            p.push(&format!("{habit}/{name}"), with_policy(&base, policy, &format!("{what}; the {name} preset")));
        }
    }
    let fastify = with_habit("fastify").expect("a habit");
    p.push("ideal", with_gate(&fastify, GateConfig::Ideal, "the oracle: knows the window, paces perfectly"));
    p
}

/// One figure over the seeds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    /// The middle value (the mean of the two middle ones for an even count).
    #[serde(serialize_with = "number")]
    pub median: f64,
    /// The lowest value.
    #[serde(serialize_with = "number")]
    pub min: f64,
    /// The highest value.
    #[serde(serialize_with = "number")]
    pub max: f64,
}

/// Whole numbers as JSON integers, others rounded to 4 decimals.
fn number<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        s.serialize_i64(*x as i64)
    } else {
        s.serialize_f64((x * 10_000.0).round() / 10_000.0)
    }
}

fn opt_number<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => number(x, s),
        None => s.serialize_none(),
    }
}

impl Figure {
    /// The median and range of `values` (all zero when empty).
    pub fn of(values: &[f64]) -> Figure {
        if values.is_empty() {
            return Figure { median: 0.0, min: 0.0, max: 0.0 };
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Figure { median, min: v[0], max: v[n - 1] }
    }
}

/// The figures of one run, as the comparison uses them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFigures {
    /// The seed run.
    pub seed: u64,
    /// Virtual time until the last job ended.
    pub virtual_ms: u64,
    /// Requests that reached the API.
    pub requests: u64,
    /// Answers with status 429.
    pub limited: u64,
    /// Requests the API charged for.
    pub charged: u64,
    /// Jobs run.
    pub jobs: u64,
    /// Jobs that ended in a success.
    pub succeeded: u64,
    /// Give-ups, whatever the reason.
    pub gave_up: u64,
    /// Share of jobs whose first attempt was answered 429.
    pub first_attempt_429_rate: f64,
    /// Median job latency, virtual ms.
    pub p50_latency_ms: u64,
    /// 99th-percentile job latency, virtual ms.
    pub p99_latency_ms: u64,
}

impl RunFigures {
    /// The figures of a report.
    pub fn of(r: &Report) -> RunFigures {
        RunFigures {
            seed: r.seed,
            virtual_ms: r.virtual_ms,
            requests: r.requests,
            limited: r.limited,
            charged: r.charged,
            jobs: r.jobs,
            succeeded: r.succeeded,
            gave_up: r.gave_up_total,
            first_attempt_429_rate: r.first_attempt_429_rate,
            p50_latency_ms: r.p50_latency_ms,
            p99_latency_ms: r.p99_latency_ms,
        }
    }
}

/// One row's figures over the seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowSummary {
    /// The row's name.
    pub policy: String,
    /// The row's scenario description.
    pub description: String,
    /// Virtual time until the last job ended, in seconds.
    pub virtual_s: Figure,
    /// Requests that reached the API.
    pub requests: Figure,
    /// Answers with status 429.
    pub limited: Figure,
    /// Requests the API charged for.
    pub charged: Figure,
    /// Jobs run.
    pub jobs: Figure,
    /// Jobs that ended in a success.
    pub succeeded: Figure,
    /// Give-ups, whatever the reason.
    pub gave_up: Figure,
    /// Share of jobs whose first attempt was answered 429.
    pub first_attempt_429_rate: Figure,
    /// Median job latency, virtual ms.
    pub p50_latency_ms: Figure,
    /// 99th-percentile job latency, virtual ms.
    pub p99_latency_ms: Figure,
    /// Median virtual time over the ideal row's (`None` without an ideal row).
    #[serde(serialize_with = "opt_number")]
    pub time_vs_ideal: Option<f64>,
    /// Median requests over the ideal row's.
    #[serde(serialize_with = "opt_number")]
    pub requests_vs_ideal: Option<f64>,
    /// Each seed's figures, in seed order (for tests and failure messages).
    #[serde(skip)]
    pub runs: Vec<RunFigures>,
}

impl RowSummary {
    fn of(row: &Row, runs: Vec<RunFigures>) -> RowSummary {
        let fig = |f: fn(&RunFigures) -> f64| Figure::of(&runs.iter().map(f).collect::<Vec<_>>());
        RowSummary {
            policy: row.name.clone(),
            description: row.scenario.description.clone(),
            virtual_s: fig(|r| r.virtual_ms as f64 / 1000.0),
            requests: fig(|r| r.requests as f64),
            limited: fig(|r| r.limited as f64),
            charged: fig(|r| r.charged as f64),
            jobs: fig(|r| r.jobs as f64),
            succeeded: fig(|r| r.succeeded as f64),
            gave_up: fig(|r| r.gave_up as f64),
            first_attempt_429_rate: fig(|r| r.first_attempt_429_rate),
            p50_latency_ms: fig(|r| r.p50_latency_ms as f64),
            p99_latency_ms: fig(|r| r.p99_latency_ms as f64),
            time_vs_ideal: None,
            requests_vs_ideal: None,
            runs,
        }
    }

    /// Each seed's figures, one line per seed, for failure messages.
    pub fn runs_text(&self) -> String {
        self.runs
            .iter()
            .map(|r| {
                format!(
                    "  seed {}: {} ms, {} requests, {} limited, {} charged, {}/{} jobs, {} gave up",
                    r.seed, r.virtual_ms, r.requests, r.limited, r.charged, r.succeeded, r.jobs, r.gave_up
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A finished comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The preset's name.
    pub preset: String,
    /// The preset's description.
    pub description: String,
    /// The seeds every row ran, the same for all rows.
    pub seeds: Vec<u64>,
    /// One summary per row, in table order.
    pub rows: Vec<RowSummary>,
}

impl Comparison {
    /// A row by name.
    pub fn row(&self, name: &str) -> Option<&RowSummary> {
        self.rows.iter().find(|r| r.policy == name)
    }
}

/// A run of a comparison that did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompareError {
    /// The preset run.
    pub preset: String,
    /// The row that failed.
    pub row: String,
    /// The seed that reproduces it.
    pub seed: u64,
    /// What went wrong.
    pub message: String,
    /// The wall-time bound, when that is what stopped the run
    /// ([`RunError::wall_bound`](crate::sim::run::runner::RunError::wall_bound)).
    pub wall_bound: Option<Duration>,
}

impl CompareError {
    /// The command line that replays the failed run.
    pub fn replay(&self) -> String {
        replay(&self.preset, &self.row, self.seed)
    }
}

/// The command line that replays one row of a preset with one seed.
pub fn replay(preset: &str, row: &str, seed: u64) -> String {
    format!(
        "retrysim compare --preset {preset} --show {row} > row.toml && retrysim run --config row.toml --seed {seed}"
    )
}

impl std::fmt::Display for CompareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "preset {} row {} seed {} did not finish: {}\nreplay: {}",
            self.preset,
            self.row,
            self.seed,
            self.message,
            self.replay()
        )
    }
}

impl std::error::Error for CompareError {}

/// How many threads to run on by default: the machine's parallelism.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs every row of `preset` on seeds `1..=seeds`, on up to `threads`
/// threads. Each run is its own deterministic simulation, so the result
/// does not depend on the thread count or the order runs finish in.
pub fn run(preset: &Preset, seeds: u32, threads: usize) -> Result<Comparison, CompareError> {
    run_observed(preset, seeds, threads, RunOptions::default(), &|_, _| {}, &|| false)
}

/// Row `row` of `preset` on `seed`: its figures, or why the run did not
/// finish (a panic in it too).
fn run_row(preset: &Preset, row: usize, seed: u64, options: RunOptions) -> Result<RunFigures, CompareError> {
    let r = &preset.rows[row];
    let failed = |message: String, wall_bound: Option<Duration>| CompareError {
        preset: preset.name.clone(),
        row: r.name.clone(),
        seed,
        message,
        wall_bound,
    };
    // Only the figures are read: no job keeps its events.
    match catch_unwind(AssertUnwindSafe(|| options.traces(Traces::None).run(&r.scenario, seed))) {
        Ok(Ok(report)) => Ok(RunFigures::of(&report)),
        Ok(Err(e)) => Err(failed(e.message, e.wall_bound)),
        Err(p) => {
            let text = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
            Err(failed(format!("the simulation panicked: {}", text.unwrap_or_default()), None))
        }
    }
}

/// [`run`], each run under `options` (its wall-time bound, say; only the
/// figures are read, so no job keeps its trace), calling `progress(runs
/// done, runs in all)` after each run, and returning as soon as `stop()` is
/// true (it is asked after each run and every 50 ms): each row then
/// summarises the seeds it finished (its `runs`), a row with none is left
/// out, and the comparison's `seeds` are still `1..=seeds`. The runs under
/// way then go on in their threads until they end, start no other run, and
/// are left out: a stop does not wait for a long run.
pub fn run_observed(
    preset: &Preset,
    seeds: u32,
    threads: usize,
    options: RunOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Comparison, CompareError> {
    let seed_list: Vec<u64> = (1..=u64::from(seeds)).collect();
    let tasks: Arc<Vec<(usize, u64)>> =
        Arc::new((0..preset.rows.len()).flat_map(|row| seed_list.iter().map(move |&seed| (row, seed))).collect());
    let shared = Arc::new(preset.clone());
    let work = {
        let tasks = tasks.clone();
        move |i: usize| {
            let (row, seed) = tasks[i];
            run_row(&shared, row, seed, options)
        }
    };
    let mut done = 0;
    let seed_loop = SeedLoop { threads, name: "compare-runs", fall_back: true };
    let ran = seed_loop.run(tasks.len(), work, &mut |r| {
        if r.is_some() {
            done += 1;
            progress(done, tasks.len());
        }
        stop()
    });
    let mut results: Vec<Option<Result<RunFigures, CompareError>>> = vec![None; tasks.len()];
    for (i, r) in ran.results {
        results[i] = Some(r);
    }
    let mut results = results.into_iter();
    let mut rows = Vec::with_capacity(preset.rows.len());
    for row in &preset.rows {
        // After `stop`, a row holds the seeds it finished; one with none is left out.
        let runs = results.by_ref().take(seed_list.len()).flatten().collect::<Result<Vec<_>, _>>()?;
        if !runs.is_empty() {
            rows.push(RowSummary::of(row, runs));
        }
    }
    let ideal = preset
        .rows
        .iter()
        .find(|r| r.scenario.fleet.gate == GateConfig::Ideal)
        .and_then(|ideal| rows.iter().position(|r| r.policy == ideal.name));
    if let Some((time, requests)) = ideal.map(|i| (rows[i].virtual_s.median, rows[i].requests.median)) {
        for r in &mut rows {
            r.time_vs_ideal = (time > 0.0).then(|| r.virtual_s.median / time);
            r.requests_vs_ideal = (requests > 0.0).then(|| r.requests.median / requests);
        }
    }
    Ok(Comparison { preset: preset.name.clone(), description: preset.description.clone(), seeds: seed_list, rows })
}

/// A number as the JSON has it: whole numbers bare, others to 4 decimals.
fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        format!("{}", x as i64)
    } else {
        format!("{}", (x * 10_000.0).round() / 10_000.0)
    }
}

fn count(x: f64) -> String {
    if x.fract() == 0.0 { format!("{x:.0}") } else { format!("{x:.1}") }
}

fn seconds(x: f64) -> String {
    format!("{x:.2}")
}

fn percent(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn range(f: Figure, show: fn(f64) -> String) -> String {
    if f.min == f.max { show(f.min) } else { format!("{}-{}", show(f.min), show(f.max)) }
}

fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.2}x"))
}

impl Comparison {
    /// A table for a terminal: one line of medians per row, and under it a
    /// line with each figure's range over the seeds.
    pub fn render_table(&self) -> String {
        let head = [
            "policy",
            "time s",
            "time x",
            "requests",
            "req x",
            "limited",
            "charged",
            "done/jobs",
            "gave up",
            "1st 429",
            "p50 ms",
            "p99 ms",
        ];
        let mut lines: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
        for r in &self.rows {
            lines.push(vec![
                r.policy.clone(),
                seconds(r.virtual_s.median),
                ratio(r.time_vs_ideal),
                count(r.requests.median),
                ratio(r.requests_vs_ideal),
                count(r.limited.median),
                count(r.charged.median),
                format!("{}/{}", count(r.succeeded.median), count(r.jobs.median)),
                count(r.gave_up.median),
                percent(r.first_attempt_429_rate.median),
                count(r.p50_latency_ms.median),
                count(r.p99_latency_ms.median),
            ]);
            lines.push(vec![
                String::new(),
                range(r.virtual_s, seconds),
                String::new(),
                range(r.requests, count),
                String::new(),
                range(r.limited, count),
                range(r.charged, count),
                range(r.succeeded, count),
                range(r.gave_up, count),
                range(r.first_attempt_429_rate, percent),
                range(r.p50_latency_ms, count),
                range(r.p99_latency_ms, count),
            ]);
        }
        let widths: Vec<usize> =
            (0..head.len()).map(|c| lines.iter().map(|l| l[c].chars().count()).max().unwrap_or(0)).collect();
        let seeds = match (self.seeds.first(), self.seeds.last()) {
            (Some(a), Some(b)) if a != b => format!("seeds {a}..={b}"),
            (Some(a), _) => format!("seed {a}"),
            _ => "no seeds".into(),
        };
        let mut out = format!(
            "{}: {}\nmedian over {seeds}; the line under each row is the min-max; x = ratio to the ideal row\n\n",
            self.preset, self.description
        );
        for (i, line) in lines.iter().enumerate() {
            let cells: Vec<String> = line
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(c, (cell, &w))| if c == 0 { format!("{cell:<w$}") } else { format!("{cell:>w$}") })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
            if i == 0 {
                out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
                out.push('\n');
            }
        }
        out.trim_end().to_owned()
    }

    /// `{"preset", "description", "seeds", "rows": [{"policy", <figure>: {median, min, max}, ...}]}`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("comparisons serialise")
    }

    /// The medians as a Markdown table, one line per row: what the guide's
    /// comparison tables hold (docs/guide/comparing-policies.md; a test keeps
    /// them in step).
    pub fn to_markdown(&self) -> String {
        let mut out = String::from(
            "| policy | time s | requests | limited | charged | gave up |\n|---|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {:.2} | {} | {} | {} | {} |\n",
                r.policy, r.virtual_s.median, r.requests.median, r.limited.median, r.charged.median, r.gave_up.median
            ));
        }
        out
    }

    /// A header line and one line per row: each figure as `_median`, `_min`, `_max` columns.
    pub fn to_csv(&self) -> String {
        const FIGURES: [&str; 10] = [
            "virtual_s",
            "requests",
            "limited",
            "charged",
            "jobs",
            "succeeded",
            "gave_up",
            "first_attempt_429_rate",
            "p50_latency_ms",
            "p99_latency_ms",
        ];
        let mut head = vec!["preset".to_owned(), "policy".to_owned()];
        for f in FIGURES {
            head.extend(["median", "min", "max"].map(|s| format!("{f}_{s}")));
        }
        head.extend(["time_vs_ideal".to_owned(), "requests_vs_ideal".to_owned()]);
        let mut out = head.join(",");
        for r in &self.rows {
            let figures = [
                r.virtual_s,
                r.requests,
                r.limited,
                r.charged,
                r.jobs,
                r.succeeded,
                r.gave_up,
                r.first_attempt_429_rate,
                r.p50_latency_ms,
                r.p99_latency_ms,
            ];
            let mut cells = vec![self.preset.clone(), r.policy.clone()];
            for f in figures {
                cells.extend([num(f.median), num(f.min), num(f.max)]);
            }
            cells.extend([r.time_vs_ideal, r.requests_vs_ideal].map(|x| x.map(num).unwrap_or_default()));
            out.push('\n');
            out.push_str(&cells.join(","));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range() {
        assert_eq!(Figure::of(&[3.0, 1.0, 2.0]), Figure { median: 2.0, min: 1.0, max: 3.0 });
        assert_eq!(Figure::of(&[4.0, 1.0, 2.0, 3.0]), Figure { median: 2.5, min: 1.0, max: 4.0 });
        assert_eq!(Figure::of(&[]), Figure { median: 0.0, min: 0.0, max: 0.0 });
    }

    #[test]
    fn every_preset_resolves_validates_and_has_one_ideal_row() {
        for name in PRESETS {
            let p = preset(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(p.name, name);
            let ideal: Vec<_> = p.rows.iter().filter(|r| r.scenario.fleet.gate == GateConfig::Ideal).collect();
            assert_eq!(ideal.len(), 1, "{name}");
            for r in &p.rows {
                r.scenario.validate().unwrap_or_else(|e| panic!("{name}/{}: {e}", r.name));
                assert_eq!(r.scenario.name, r.name);
                assert!(!r.scenario.description.is_empty(), "{name}/{}", r.name);
                let back = Scenario::from_toml(&r.scenario.to_toml()).unwrap();
                assert_eq!(back, r.scenario, "{name}/{} round-trips through TOML", r.name);
            }
        }
        assert!(preset("nope").is_none());
        assert!(unknown("nope").contains("blinkimg-1s, blinkimg-60s, berlin"));
    }

    #[test]
    fn seed_002s_rows_are_all_there() {
        assert_eq!(
            blinkimg_1s().row_names(),
            [
                "retry-at-once",
                "exponential-no-jitter",
                "exponential-full-jitter",
                "retry-after-jitter",
                "no-key-10pct-lost",
                "key-10pct-lost",
                "ideal",
                "pacing"
            ]
        );
    }

    #[test]
    fn the_habits_preset_crosses_every_habit_with_eight_policies_and_one_ideal() {
        let p = habits();
        assert_eq!(p.rows.len(), HABITS.len() * 8 + 1);
        assert_eq!(
            p.row_names()[..4],
            [
                "fastify/retry-at-once",
                "fastify/exponential-full-jitter",
                "fastify/retry-after-jitter",
                "fastify/pacing"
            ]
        );
        assert_eq!(p.row_names().last(), Some(&"ideal"));
        for (habit, _) in HABITS {
            let rows: Vec<_> = p.rows.iter().filter(|r| r.name.starts_with(&format!("{habit}/"))).collect();
            assert_eq!(rows.len(), 8, "{habit}");
            for (row, preset) in rows[4..].iter().zip(Policy::PRESETS) {
                assert_eq!(row.name, format!("{habit}/{preset}"));
                assert_eq!(row.scenario.policy, Policy::preset(preset).unwrap());
            }
            let control = with_habit("fastify").unwrap().api;
            assert!(habit == "fastify" || rows.iter().all(|r| r.scenario.api != control), "{habit} changes the API");
        }
    }

    #[test]
    fn json_numbers_are_integers_when_whole() {
        let f = Figure { median: 144.0, min: 0.1234567, max: 2.5 };
        assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"median":144,"min":0.1235,"max":2.5}"#);
    }
}
