//! Runs a scenario in a turmoil simulation and reports what happened.
//!
//! The API is one host, the fleet another (its workers are tasks: one host
//! per worker would multiply turmoil's per-tick cost for no behaviour the
//! checks need), unless `fleet.hosts = "per_worker"` asks for a host per
//! worker to model separate processes (see [`fleet`](crate::sim::fleet)).
//! The runner steps the simulation itself so it can switch scheduled faults
//! on and off at exact virtual times.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::Request;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::client::{NoIdempotencyKey, RetryClient};
use crate::core::budget::{PercentBudget, RetryBudget, TokenBucketBudget};
use crate::core::classify::Operation;
use crate::env::{Rng, TokioClock};
use crate::gate::Gate;
use crate::gate::aimd::Aimd;
use crate::gate::pacing::{Pacing, PacingState};
use crate::sim::api::{Api, Ledger};
use crate::sim::fleet::{FleetFacts, Hooks, Shared, fleet_hosts};
use crate::sim::limiter_service::LIMITER_HOST;
use crate::sim::net::{API_HOST, Fault, Server, ServerFaults, SimTransport, serve};
use crate::sim::oracle::{IdealGate, IdealSchedule};
use crate::sim::scenario::{BudgetConfig, GateConfig, Scenario};
use crate::sim::seed::derive;
use crate::trace::{EventKind, Trace, ms};

/// turmoil's per-host TCP capacity: the listener backlog and each stream's
/// buffer, in messages (turmoil's default is 64; buffers grow lazily).
pub const TCP_CAPACITY: usize = 1 << 16;

/// The fleet's host name.
pub const FLEET_HOST: &str = "fleet";

/// Secrets planted in every request, so the checks can prove none leaks.
pub const PLANTED_SECRETS: [&str; 2] = ["sk-live-PLANTED-SECRET", "session=PLANTED-COOKIE"];

/// The kind of operation a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    Keyed,
    Unsafe,
    Safe,
}

/// How one job ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobOutcome {
    Succeeded { status: u16 },
    GaveUp { reason: String },
}

/// One job, start to end, with its trace.
#[derive(Debug, Clone, Serialize)]
pub struct JobRecord {
    pub job: u32,
    pub worker: u32,
    pub kind: JobKind,
    pub operation: Operation,
    pub started_ms: u64,
    pub finished_ms: u64,
    pub attempts: u32,
    pub waited_ms: u64,
    pub outcome: JobOutcome,
    /// The full key, for the checkers only: never rendered or serialised.
    #[serde(skip)]
    pub key: Option<String>,
    /// Every key the job's attempts carried, in order (checkers only).
    #[serde(skip)]
    pub attempt_keys: Vec<Option<String>>,
    pub trace: Trace,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub policy: String,
    /// Virtual time until the last job ended.
    pub virtual_ms: u64,
    /// Requests that reached the API.
    pub requests: u64,
    /// Answers with status 429.
    pub limited: u64,
    /// Requests the API charged for (ran and billed).
    pub charged: u64,
    pub jobs: u64,
    pub succeeded: u64,
    /// Give-ups by reason.
    pub gave_up: BTreeMap<String, u64>,
    pub gave_up_total: u64,
    /// Attempts beyond each job's first.
    pub retries: u64,
    /// Total time slept between attempts, over all jobs.
    pub slept_ms: u64,
    pub max_attempts_per_job: u32,
    /// Share of jobs whose first attempt was answered 429.
    pub first_attempt_429_rate: f64,
    pub p50_latency_ms: u64,
    pub p99_latency_ms: u64,
    /// The slowest job on the front end (first run, not a deferred one).
    pub max_latency_ms: u64,
    /// Share of jobs that finally failed (after deferral, if any).
    pub failure_rate: f64,
    /// Most attempts waiting at the fleet's admission gate at once.
    pub max_queue_depth: u64,
    /// The admission queue's depth over time: the largest in each virtual
    /// second, from 0 to the last change (empty without a gate).
    pub queue_depth: Vec<u32>,
    /// Total time attempts waited at the gate before going out.
    pub queued_ms: u64,
    /// Most requests at the API at once (from its ledger): each from its
    /// arrival to its answer, one refused on arrival for that instant.
    pub max_in_flight: u64,
    /// Jobs the front end gave up on and deferred (answered 202).
    pub deferred: u64,
    /// Deferred jobs that a background worker completed.
    pub completed_after_deferral: u64,
    /// Every job, by job number.
    #[serde(skip)]
    pub records: Vec<JobRecord>,
    /// Background runs of deferred jobs, by job number then run.
    #[serde(skip)]
    pub deferred_records: Vec<JobRecord>,
    /// What the fleet's gates did.
    #[serde(skip)]
    pub fleet_facts: FleetFacts,
    /// The server's ledger.
    #[serde(skip)]
    pub ledger: Ledger,
    /// The scenario that ran (with the seed's policy and faults).
    #[serde(skip)]
    pub scenario_config: Scenario,
}

/// Why a run could not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    pub scenario: String,
    pub seed: u64,
    pub message: String,
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "scenario {} seed {} did not finish: {}\nreplay: retrysim run --scenario {} --seed {}",
            self.scenario, self.seed, self.message, self.scenario, self.seed
        )
    }
}

impl std::error::Error for RunError {}

/// The simulation's fixed epoch: the scenario's API epoch.
pub fn epoch(s: &Scenario) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(s.api.epoch_unix_s)
}

pub(crate) fn kind_of(s: &Scenario, seed: u64, job: u32) -> JobKind {
    let m = s.fleet.mix;
    let total = (m.keyed + m.unsafe_post + m.safe) as u64;
    let pick = derive(seed, "mix", job as u64) % total;
    if pick < m.keyed as u64 {
        JobKind::Keyed
    } else if pick < (m.keyed + m.unsafe_post) as u64 {
        JobKind::Unsafe
    } else {
        JobKind::Safe
    }
}

pub(crate) fn request(s: &Scenario, kind: JobKind, job: u32, worker: u32) -> Request<Bytes> {
    let b = match kind {
        JobKind::Safe => Request::get(format!("http://{API_HOST}/v1/jobs/job_{job}")),
        JobKind::Keyed | JobKind::Unsafe => Request::post(format!("http://{API_HOST}/v1/jobs")),
    };
    let mut b = b
        .header("x-retrysim-client", format!("w{worker} job-{job}"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", PLANTED_SECRETS[0]))
        .header("cookie", PLANTED_SECRETS[1]);
    if !s.fleet.anonymous {
        let keys = &s.api.accounts.first().map(|a| a.keys.clone()).unwrap_or_default();
        if !keys.is_empty() {
            b = b.header("x-api-key", keys[worker as usize % keys.len()].as_str());
        }
    }
    if kind == JobKind::Unsafe {
        b = b.extension(NoIdempotencyKey);
    }
    let body = match kind {
        JobKind::Safe => Bytes::new(),
        _ => Bytes::from(format!(r#"{{"uploadId":"u{job}","options":{{"op":"{}"}}}}"#, s.fleet.op)),
    };
    b.body(body).expect("the request parts are valid")
}

fn percentile(sorted: &[u64], p: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() as u64 * p).div_ceil(100).max(1) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Runs a scenario with a seed. The same scenario and seed give the same
/// report and the same traces, byte for byte.
pub fn run(s: &Scenario, seed: u64) -> Result<Report, RunError> {
    run_with(s, seed, Hooks::default())
}

/// [`run`], with what the fleet builds wrapped by `hooks` (tests use it to
/// plant a deliberately broken gate or budget).
pub fn run_with(s: &Scenario, seed: u64, hooks: Hooks) -> Result<Report, RunError> {
    let fail = |message: String| RunError { scenario: s.name.clone(), seed, message };
    s.validate().map_err(|e| fail(e.0))?;
    let mut sim = turmoil::Builder::new()
        .epoch(epoch(s))
        .rng_seed(derive(seed, "turmoil", 0))
        .tick_duration(s.net.tick)
        .min_message_latency(s.net.min_latency)
        .max_message_latency(s.net.max_latency)
        .simulation_duration(s.time_limit)
        // turmoil panics when a listener's backlog of unaccepted connections
        // is full (a real one drops the SYN). A Hold fault releases every
        // connect the fleet retried meanwhile at once: room for them all.
        .tcp_capacity(TCP_CAPACITY)
        .build();

    let server = Arc::new(Server {
        api: Mutex::new(Api::new(s.api.clone())),
        faults: Mutex::new(ServerFaults::new(s.faults.lost_answers_per_mille, derive(seed, "server", 0))),
    });
    let host_server = server.clone();
    sim.host(API_HOST, move || serve(host_server.clone()));

    let shared = Arc::new(Shared::new(s));
    crate::sim::fleet::spawn(&mut sim, s, seed, hooks, &shared);

    let mut schedule: Vec<(Duration, usize, bool)> = Vec::new();
    for (i, f) in s.faults.schedule.iter().enumerate() {
        schedule.push((f.at, i, true));
        if let Some(until) = f.fault.until() {
            schedule.push((until.max(f.at), i, false));
        }
    }
    schedule.sort();
    let mut next = 0;
    loop {
        while next < schedule.len() && schedule[next].0 <= sim.elapsed() {
            let (_, i, start) = schedule[next];
            apply(&mut sim, &server, &s.faults.schedule[i].fault, start, s);
            next += 1;
        }
        // A panic inside a host is a harness bug: report it with the replay
        // line instead of tearing down the caller (`retrysim run` exits 2).
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.step())) {
            Ok(Ok(true)) => break,
            Ok(Ok(false)) => {}
            Ok(Err(e)) => return Err(fail(e.to_string())),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic without a message");
                return Err(fail(format!("the simulation panicked (a harness bug, please report it): {what}")));
            }
        }
    }

    let (mut records, mut deferred_records, fleet_facts) = shared.take();
    records.sort_by_key(|r| r.job);
    deferred_records.sort_by_key(|r| (r.job, r.started_ms));
    let ledger = server.api.lock().unwrap_or_else(|e| e.into_inner()).ledger().clone();
    let mut report = report(s, seed, records, ledger);
    report.add_fleet_figures(deferred_records, fleet_facts);
    Ok(report)
}

/// The fleet's gate, built inside the simulation (it reads tokio's clock).
pub(crate) fn build_gate(s: &Scenario) -> Option<Arc<dyn Gate>> {
    match s.fleet.gate {
        GateConfig::None => None,
        GateConfig::Ideal => Some(Arc::new(IdealGate::new(IdealSchedule::new(&s.api)))),
        GateConfig::Pacing(c) => Some(Arc::new(Pacing::new(PacingState::new(c)))),
        GateConfig::Aimd(c) => Some(Arc::new(Aimd::new(c))),
    }
}

/// The fleet's retry budget, if the scenario has one.
pub(crate) fn build_budget(s: &Scenario) -> Option<Arc<dyn RetryBudget>> {
    match s.fleet.budget? {
        BudgetConfig::TokenBucket { max_tokens, token_ratio_milli } => {
            Some(Arc::new(TokenBucketBudget::new(max_tokens, token_ratio_milli)))
        }
        BudgetConfig::Percent { ttl, min_per_sec, per_mille } => {
            Some(Arc::new(PercentBudget::new(ttl, min_per_sec, per_mille)))
        }
    }
}

fn apply(sim: &mut turmoil::Sim<'_>, server: &Server, fault: &Fault, start: bool, s: &Scenario) {
    let fleet = fleet_hosts(s);
    match (fault, start) {
        (Fault::Partition { .. } | Fault::Hold { .. } | Fault::LimiterPartition { .. }, _) if fleet.len() > 1 => {
            for host in &fleet {
                let peer = if matches!(fault, Fault::LimiterPartition { .. }) { LIMITER_HOST } else { API_HOST };
                match (fault, start) {
                    (Fault::Hold { .. }, true) => sim.hold(host.as_str(), peer),
                    (Fault::Hold { .. }, false) => sim.release(host.as_str(), peer),
                    (_, true) => sim.partition(host.as_str(), peer),
                    (_, false) => sim.repair(host.as_str(), peer),
                }
            }
        }
        (Fault::LimiterPartition { .. }, true) => sim.partition(fleet[0].as_str(), LIMITER_HOST),
        (Fault::LimiterPartition { .. }, false) => sim.repair(fleet[0].as_str(), LIMITER_HOST),
        (Fault::LoseAnswer, _) => server.faults.lock().unwrap_or_else(|e| e.into_inner()).lose_next += 1,
        (Fault::LatencySpike { latency, .. }, true) => sim.set_max_message_latency(*latency),
        (Fault::LatencySpike { .. }, false) => sim.set_max_message_latency(s.net.max_latency),
        (Fault::Partition { .. }, true) => sim.partition(FLEET_HOST, API_HOST),
        (Fault::Partition { .. }, false) => sim.repair(FLEET_HOST, API_HOST),
        (Fault::Hold { .. }, true) => sim.hold(FLEET_HOST, API_HOST),
        (Fault::Hold { .. }, false) => sim.release(FLEET_HOST, API_HOST),
        (Fault::Bounce, _) => {
            sim.bounce(API_HOST);
            // The restart kills the requests that were running: their keys
            // must not stay "in progress" forever.
            server.api.lock().unwrap_or_else(|e| e.into_inner()).abort_running(sim.elapsed());
        }
    }
}

/// Runs job `job` on worker `worker`: its request, under the client's policy.
pub(crate) async fn run_job(
    client: &RetryClient<TokioClock, SimTransport>,
    s: &Scenario,
    seed: u64,
    job: u32,
    worker: u32,
    rng: &mut dyn Rng,
) -> JobRecord {
    let kind = kind_of(s, seed, job);
    let req = request(s, kind, job, worker);
    execute_job(client, req, kind, job, worker, format!("w{worker} job-{job}"), rng).await
}

/// Runs one request to its end and records it. A request that already
/// carries an `Idempotency-Key` (a deferred job) keeps it.
pub(crate) async fn execute_job(
    client: &RetryClient<TokioClock, SimTransport>,
    req: Request<Bytes>,
    kind: JobKind,
    job: u32,
    worker: u32,
    label: String,
    rng: &mut dyn Rng,
) -> JobRecord {
    use crate::env::Clock;
    let has_key = kind == JobKind::Keyed
        && (client.policy().idempotency_keys || req.headers().contains_key(crate::client::IDEMPOTENCY_KEY));
    let operation = Operation::of(req.method(), has_key);
    let mut trace = Trace::new(label);
    let started = client.clock().now();
    let mut attempt_keys = Vec::new();
    let result =
        client.execute_recording_keys(req, rng, &CancellationToken::new(), &mut trace, &mut attempt_keys).await;
    let finished = client.clock().now();
    let (outcome, attempts, waited, key) = match result {
        Ok(res) => {
            let attempts = trace.events.iter().filter(|e| matches!(e.kind, EventKind::Attempt { .. })).count() as u32;
            let waited = trace.events.iter().find_map(|e| match e.kind {
                EventKind::Done { waited_ms, .. } => Some(waited_ms),
                _ => None,
            });
            let key = attempt_keys.last().cloned().flatten();
            (JobOutcome::Succeeded { status: res.status().as_u16() }, attempts, waited.unwrap_or(0), key)
        }
        Err(e) => {
            (JobOutcome::GaveUp { reason: e.reason.kind().to_owned() }, e.attempts, ms(e.waited), e.idempotency_key)
        }
    };
    JobRecord {
        job,
        worker,
        kind,
        operation,
        started_ms: ms(started),
        finished_ms: ms(finished),
        attempts,
        waited_ms: waited,
        outcome,
        key,
        attempt_keys,
        trace,
    }
}

fn report(s: &Scenario, seed: u64, records: Vec<JobRecord>, ledger: Ledger) -> Report {
    let mut gave_up = BTreeMap::new();
    let mut succeeded = 0;
    for r in &records {
        match &r.outcome {
            JobOutcome::Succeeded { .. } => succeeded += 1,
            JobOutcome::GaveUp { reason } => *gave_up.entry(reason.clone()).or_insert(0) += 1,
        }
    }
    let first_429 = records
        .iter()
        .filter(|r| {
            r.trace.events.iter().find_map(|e| match e.kind {
                EventKind::Answer { n: 1, status, .. } => Some(status == 429),
                _ => None,
            }) == Some(true)
        })
        .count();
    let mut lat: Vec<u64> = records.iter().map(|r| r.finished_ms - r.started_ms).collect();
    lat.sort_unstable();
    let jobs = records.len() as u64;
    Report {
        scenario: s.name.clone(),
        seed,
        policy: s.policy.name.clone(),
        virtual_ms: records.iter().map(|r| r.finished_ms).max().unwrap_or(0),
        requests: ledger.arrivals.len() as u64,
        limited: ledger.arrivals.iter().filter(|a| a.status == 429).count() as u64,
        charged: ledger.charged,
        jobs,
        succeeded,
        gave_up_total: gave_up.values().sum(),
        gave_up,
        retries: records.iter().map(|r| r.attempts.saturating_sub(1) as u64).sum(),
        slept_ms: records.iter().map(|r| r.waited_ms).sum(),
        max_attempts_per_job: records.iter().map(|r| r.attempts).max().unwrap_or(0),
        first_attempt_429_rate: if jobs == 0 { 0.0 } else { first_429 as f64 / jobs as f64 },
        p50_latency_ms: percentile(&lat, 50),
        p99_latency_ms: percentile(&lat, 99),
        max_latency_ms: lat.last().copied().unwrap_or(0),
        failure_rate: 0.0,
        max_queue_depth: 0,
        queue_depth: Vec::new(),
        queued_ms: records.iter().map(queued_ms).sum(),
        max_in_flight: max_in_flight(&ledger),
        deferred: 0,
        completed_after_deferral: 0,
        records,
        deferred_records: Vec::new(),
        fleet_facts: FleetFacts::default(),
        ledger,
        scenario_config: s.clone(),
    }
}

/// Time a job's attempts waited at the gate.
fn queued_ms(r: &JobRecord) -> u64 {
    r.trace
        .events
        .iter()
        .map(|e| match e.kind {
            EventKind::Admitted { queued_ms } => queued_ms,
            _ => 0,
        })
        .sum()
}

/// The most requests running at the API at once, counted at each arrival
/// (the arrival included): a request runs from its arrival until its
/// answer, and one answered on arrival counts for that instant.
fn max_in_flight(ledger: &Ledger) -> u64 {
    // (time, order, step): at one instant, ends (0) before starts (1)
    // before momentary requests (2).
    let mut edges: Vec<(Duration, u8)> = Vec::new();
    for a in &ledger.arrivals {
        match a.answered_at {
            Some(end) if end <= a.at => edges.push((a.at, 2)),
            end => {
                edges.push((a.at, 1));
                edges.extend(end.map(|e| (e, 0)));
            }
        }
    }
    edges.sort_unstable();
    let (mut now, mut max) = (0u64, 0u64);
    for (_, kind) in edges {
        match kind {
            0 => now = now.saturating_sub(1),
            1 => {
                now += 1;
                max = max.max(now);
            }
            _ => max = max.max(now + 1),
        }
    }
    max
}

impl Report {
    /// Adds what only the fleet knows: deferred jobs' background runs (a
    /// deferred job's final outcome is its last background run's), the gate's
    /// queue depth, and the gates' facts.
    fn add_fleet_figures(&mut self, deferred_records: Vec<JobRecord>, facts: FleetFacts) {
        let mut last: BTreeMap<u32, &JobRecord> = BTreeMap::new();
        for d in &deferred_records {
            last.insert(d.job, d);
        }
        self.deferred = last.len() as u64;
        if !last.is_empty() {
            let mut gave_up = BTreeMap::new();
            let mut succeeded = 0;
            for r in &self.records {
                match &last.get(&r.job).unwrap_or(&r).outcome {
                    JobOutcome::Succeeded { .. } => succeeded += 1,
                    JobOutcome::GaveUp { reason } => *gave_up.entry(reason.clone()).or_insert(0) += 1,
                }
            }
            self.completed_after_deferral =
                last.values().filter(|d| matches!(d.outcome, JobOutcome::Succeeded { .. })).count() as u64;
            self.succeeded = succeeded;
            self.gave_up_total = gave_up.values().sum();
            self.gave_up = gave_up;
            let background_attempts: u64 = deferred_records.iter().map(|d| d.attempts as u64).sum();
            self.retries += background_attempts;
            self.slept_ms += deferred_records.iter().map(|d| d.waited_ms).sum::<u64>();
            self.queued_ms += deferred_records.iter().map(queued_ms).sum::<u64>();
            self.virtual_ms = self.virtual_ms.max(deferred_records.iter().map(|d| d.finished_ms).max().unwrap_or(0));
        }
        self.failure_rate = if self.jobs == 0 { 0.0 } else { self.gave_up_total as f64 / self.jobs as f64 };
        self.max_queue_depth = facts.depth.iter().map(|&(_, d)| d as u64).max().unwrap_or(0);
        self.queue_depth = depth_per_second(&facts.depth);
        self.deferred_records = deferred_records;
        self.fleet_facts = facts;
    }
}

/// The largest depth in each virtual second, from second 0 to the last change.
fn depth_per_second(changes: &[(Duration, u32)]) -> Vec<u32> {
    let Some(&(end, _)) = changes.last() else { return Vec::new() };
    let mut out = vec![0u32; end.as_secs() as usize + 1];
    let mut depth = 0;
    let mut second = 0usize;
    for &(at, d) in changes {
        let s = at.as_secs() as usize;
        // Seconds without a change keep the depth they started with.
        while second < s {
            second += 1;
            out[second] = out[second].max(depth);
        }
        depth = d;
        out[s] = out[s].max(d);
    }
    out
}

impl Report {
    /// The report as aligned text, one figure per line.
    pub fn render_text(&self) -> String {
        let mut rows = vec![
            ("scenario", self.scenario.clone()),
            ("seed", self.seed.to_string()),
            ("policy", self.policy.clone()),
            ("virtual time", format!("{} ms", self.virtual_ms)),
            ("jobs", self.jobs.to_string()),
            ("succeeded", self.succeeded.to_string()),
            ("gave up", self.gave_up_total.to_string()),
        ];
        for (reason, n) in &self.gave_up {
            rows.push(("  by reason", format!("{reason}: {n}")));
        }
        rows.extend([
            ("requests", self.requests.to_string()),
            ("limited (429)", self.limited.to_string()),
            ("charged", self.charged.to_string()),
            ("retries", self.retries.to_string()),
            ("slept", format!("{} ms", self.slept_ms)),
            ("max attempts/job", self.max_attempts_per_job.to_string()),
            ("first-attempt 429", format!("{:.1}%", self.first_attempt_429_rate * 100.0)),
            ("latency p50 / p99", format!("{} ms / {} ms", self.p50_latency_ms, self.p99_latency_ms)),
            ("latency max", format!("{} ms", self.max_latency_ms)),
            ("failure rate", format!("{:.1}%", self.failure_rate * 100.0)),
            ("max in flight", self.max_in_flight.to_string()),
        ]);
        if self.scenario_config.fleet.gate != crate::sim::scenario::GateConfig::None {
            rows.extend([
                ("max queue depth", self.max_queue_depth.to_string()),
                ("queued at gate", format!("{} ms", self.queued_ms)),
            ]);
        }
        if self.scenario_config.fleet.deferral.is_some() {
            rows.extend([
                ("deferred (202)", self.deferred.to_string()),
                ("done after defer", self.completed_after_deferral.to_string()),
            ]);
        }
        rows.iter().map(|(k, v)| format!("{k:<18} {v}")).collect::<Vec<_>>().join("\n")
    }
}
