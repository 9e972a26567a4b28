//! The fleet's hosts: where workers run, which gate and budget they share,
//! and what the runner measures about them.
//!
//! - `hosts = "shared"`: one host ([`FLEET_HOST`]), one task per worker; the
//!   gate and the budget are single objects shared in memory.
//! - `hosts = "per_worker"`: one host per worker (`w0`, `w1`, ...), which
//!   share nothing but the network. Each builds its own budget and its own
//!   gate, unless `fleet.coordinator` runs the gate on the `limiter` host
//!   (see [`limiter_service`](crate::sim::world::limiter_service)).
//!
//! The jobs themselves are handed out by the harness (a stand-in for the
//! batch's job queue, which is not what is under test).
//!
//! Everything the checkers need is recorded as facts here, outside the
//! gates' decisions: the gates' own [`GateFact`]s, the workers' route
//! switches, and the admission queue's depth as seen from outside the gate.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::core::budget::{PercentBudget, RetryBudget, TokenBucketBudget};
use crate::env::seeded_rng;
use crate::gate::aimd::{Aimd, GateFact, GateLog};
use crate::gate::pacing::{Pacing, PacingState};
use crate::gate::{Admission, Feedback, Gate};
use crate::locks::lock;
use crate::sim::run::clients::builtin;
use crate::sim::run::deferral::{self, DeferralQueue};
use crate::sim::run::job::{JobRecord, Traces, compact, run_job};
use crate::sim::run::scenario::{BudgetConfig, Builtin, GateConfig, Hosts, Scenario};
use crate::sim::run::seed::derive;
use crate::sim::run::subject::{BlindSpot, Host, MakeSubject, Promises, Subject};
use crate::sim::world::limiter_service::{
    Granted, Hello, LIMITER_HOST, RemoteGate, RouteFact, RouteLog, ServiceLog, Told, serve_limiter,
};
use crate::sim::world::net::sim_now;
use crate::sim::world::oracle::{IdealGate, IdealSchedule};
use crate::sim::world::timers::SimClock;

/// The fleet's host name.
pub const FLEET_HOST: &str = "fleet";

/// Wraps a retry budget (see [`Hooks`]).
pub type WrapBudget = fn(Arc<dyn RetryBudget>) -> Arc<dyn RetryBudget>;
/// Wraps a gate (see [`Hooks`]).
pub type WrapGate = fn(Arc<dyn Gate>) -> Arc<dyn Gate>;

/// Test hooks: wrap what the fleet would use, e.g. with a deliberately
/// leaky gate or budget, to show that a checker catches it (a negative
/// control). The default wraps nothing.
#[derive(Clone, Copy, Default)]
pub struct Hooks {
    /// Wraps each retry budget the fleet builds.
    pub budget: Option<WrapBudget>,
    /// Wraps each gate the fleet builds: the shared one, each worker's
    /// local one, or (with a coordinator) each worker's remote gate.
    pub gate: Option<WrapGate>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks").field("budget", &self.budget.is_some()).field("gate", &self.gate.is_some()).finish()
    }
}

/// What the fleet's gates did, for checkers and reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FleetFacts {
    /// The fleet gate's facts: the shared one, or the limiter service's.
    pub gate: Vec<GateFact>,
    /// Per worker host: its own gate's facts (its local gate, or its
    /// fallback while the limiter service is unreachable).
    pub local: BTreeMap<u32, Vec<GateFact>>,
    /// Per-worker hosts with a coordinator: every switch between the service
    /// and the fallback.
    pub routes: Vec<RouteFact>,
    /// With a coordinator: every slot the limiter service freed, in order,
    /// with the `DONE` line that freed it.
    #[serde(skip)]
    pub service_told: Vec<Told>,
    /// With a coordinator: every slot the limiter service granted, in order.
    #[serde(skip)]
    pub service_granted: Vec<Granted>,
    /// With a coordinator: every `HELLO` the limiter service heard, in order.
    #[serde(skip)]
    pub service_hellos: Vec<Hello>,
    /// The fleet gate's queue depth, `(when, depth)` at every change.
    #[serde(skip)]
    pub depth: Vec<(Duration, u32)>,
    /// Every cancellation the caller made (`cancel` faults), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cancels: Vec<Cancellation>,
}

/// The caller cancelled the front-end jobs running at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cancellation {
    /// When (virtual ms): the first step boundary at or after the fault's `at`.
    pub at_ms: u64,
    /// The jobs that were running then, in order.
    pub jobs: Vec<u32>,
}

/// The names of the hosts the fleet's workers run on.
pub(crate) fn fleet_hosts(s: &Scenario) -> Vec<String> {
    match s.fleet.hosts {
        Hosts::Shared => vec![FLEET_HOST.to_owned()],
        Hosts::PerWorker => (0..s.fleet.workers).map(worker_host).collect(),
    }
}

/// Worker `w`'s host name with per-worker hosts.
pub(crate) fn worker_host(w: u32) -> String {
    format!("w{w}")
}

/// What the client under test declared, from the first one built.
#[derive(Debug, Clone)]
pub(crate) struct Made {
    /// What it promises.
    pub promises: Promises,
    /// Whether it writes retrysim's trace.
    pub traced: bool,
    /// The fault classes its path cannot show it.
    pub blind_spots: Vec<BlindSpot>,
}

/// What the hosts and the runner share (turmoil runs every host on one thread).
pub(crate) struct Shared {
    jobs: Mutex<VecDeque<u32>>,
    records: Mutex<Vec<JobRecord>>,
    gate_log: GateLog,
    local_logs: BTreeMap<u32, GateLog>,
    routes: RouteLog,
    service_log: ServiceLog,
    depth: Arc<Mutex<Depth>>,
    deferral: Arc<DeferralQueue>,
    /// What the first client built promised, and whether it writes a trace.
    made: Mutex<Option<Made>>,
    /// Which records keep their whole trace (the others are compacted as
    /// they arrive, so a big run's memory does not hold every event).
    traces: Traces,
    /// The cancellation token of every front-end job running now.
    running: Mutex<BTreeMap<u32, CancellationToken>>,
    cancels: Mutex<Vec<Cancellation>>,
    /// A worker task ended early because the run was interrupted inside a
    /// step ([`Interruptible`]).
    interrupted: std::sync::atomic::AtomicBool,
}

impl Shared {
    pub(crate) fn new(s: &Scenario, traces: Traces) -> Shared {
        let local_logs = match s.fleet.hosts {
            Hosts::PerWorker => (0..s.fleet.workers).map(|w| (w, GateLog::default())).collect(),
            Hosts::Shared => BTreeMap::new(),
        };
        Shared {
            jobs: Mutex::new((1..=s.fleet.jobs).collect()),
            records: Mutex::default(),
            gate_log: GateLog::default(),
            local_logs,
            routes: RouteLog::default(),
            service_log: ServiceLog::default(),
            depth: Arc::default(),
            deferral: Arc::new(DeferralQueue::new(s.fleet.workers)),
            made: Mutex::default(),
            traces,
            running: Mutex::default(),
            cancels: Mutex::default(),
            interrupted: false.into(),
        }
    }

    /// Whether a worker task was ended by an interrupt inside a step.
    pub(crate) fn interrupted(&self) -> bool {
        self.interrupted.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The next job off the queue, with the token its caller may cancel it by.
    fn next_job(&self) -> Option<(u32, CancellationToken)> {
        let job = lock(&self.jobs).pop_front()?;
        let cancel = CancellationToken::new();
        lock(&self.running).insert(job, cancel.clone());
        Some((job, cancel))
    }

    /// The caller cancels every front-end job running now (`now_ms`).
    pub(crate) fn cancel_running(&self, now_ms: u64) {
        let running = std::mem::take(&mut *lock(&self.running));
        for token in running.values() {
            token.cancel();
        }
        lock(&self.cancels).push(Cancellation { at_ms: now_ms, jobs: running.into_keys().collect() });
    }

    fn push(&self, mut record: JobRecord) {
        lock(&self.running).remove(&record.job);
        if !self.traces.keeps(&record) {
            compact(&mut record);
        }
        lock(&self.records).push(record);
    }

    /// How many front-end jobs have ended.
    pub(crate) fn ended(&self) -> usize {
        lock(&self.records).len()
    }

    /// Remembers what the first client built promised.
    fn made(&self, subject: &dyn Subject) {
        lock(&self.made).get_or_insert_with(|| Made {
            promises: subject.promises(),
            traced: subject.writes_trace(),
            blind_spots: subject.blind_spots(),
        });
    }

    /// What the client under test declared, once one was built.
    pub(crate) fn client(&self) -> Option<Made> {
        lock(&self.made).clone()
    }

    /// The jobs of `1..=jobs` with no record yet, in order.
    pub(crate) fn unfinished_jobs(&self, jobs: u32) -> Vec<u32> {
        let done: std::collections::BTreeSet<u32> = lock(&self.records).iter().map(|r| r.job).collect();
        (1..=jobs).filter(|j| !done.contains(j)).collect()
    }

    /// The front-end records, the background records, and the facts.
    pub(crate) fn take(&self) -> (Vec<JobRecord>, Vec<JobRecord>, FleetFacts) {
        let records = std::mem::take(&mut *lock(&self.records));
        let deferred = self.deferral.take_records();
        let service = std::mem::take(&mut *lock(&self.service_log));
        let facts = FleetFacts {
            gate: lock(&self.gate_log).clone(),
            local: self.local_logs.iter().map(|(&w, log)| (w, lock(log).clone())).collect(),
            routes: lock(&self.routes).clone(),
            service_told: service.told,
            service_granted: service.granted,
            service_hellos: service.hellos,
            depth: lock(&self.depth).series.clone(),
            cancels: std::mem::take(&mut *lock(&self.cancels)),
        };
        (records, deferred, facts)
    }
}

/// The fleet's gate, built inside the simulation (on the simulation's clock).
fn build_gate(s: &Scenario) -> Option<Arc<dyn Gate>> {
    let clock = SimClock::from_epoch(s.epoch());
    match s.fleet.gate {
        GateConfig::None => None,
        GateConfig::Ideal => {
            // Admission to arrival: a connect (a trip each way) and the
            // request, each message up to the latency and a tick late.
            let max_trip = (s.net.max_latency + s.net.tick) * 3 + s.net.tick;
            Some(Arc::new(IdealGate::with_clock(IdealSchedule::new(&s.api, max_trip), clock)))
        }
        GateConfig::Pacing(c) => {
            let state = PacingState::new(c);
            // A deliberate defect of the scenario's client (`[client.defects]`).
            let state = if s.client.defects.pacing_forgets_in_flight { state.forgetting_in_flight() } else { state };
            Some(Arc::new(Pacing::with_clock(state, clock)))
        }
        GateConfig::Aimd(c) => Some(Arc::new(Aimd::with_clock(c, clock))),
    }
}

/// The fleet's retry budget, if the scenario has one.
fn build_budget(s: &Scenario) -> Option<Arc<dyn RetryBudget>> {
    match s.fleet.budget? {
        // Built from the ratio, as gRPC's service config states it (exact:
        // a whole number of thousandths reads back as itself).
        BudgetConfig::TokenBucket { max_tokens, token_ratio_milli } => {
            Some(Arc::new(TokenBucketBudget::from_ratio(max_tokens, f64::from(token_ratio_milli) / 1000.0)))
        }
        BudgetConfig::Percent { ttl, min_per_sec, per_mille } => {
            Some(Arc::new(PercentBudget::new(ttl, min_per_sec, per_mille)))
        }
    }
}

/// Builds a gate from the scenario, an AIMD one writing its facts to `log`,
/// wrapped by the hook if there is one.
fn gate_for(s: &Scenario, log: &GateLog, hooks: Hooks) -> Option<Arc<dyn Gate>> {
    let gate: Arc<dyn Gate> = match s.fleet.gate {
        GateConfig::Aimd(c) => {
            let running = s.client.defects.running_gate(c);
            Arc::new(Aimd::with_clock(running, SimClock::from_epoch(s.epoch())).with_log(log.clone()))
        }
        _ => build_gate(s)?,
    };
    // A deliberate defect of the scenario's client (`[client.defects]`).
    let gate = s.client.defects.wrap_gate(gate);
    Some(match hooks.gate {
        Some(wrap) => wrap(gate),
        None => gate,
    })
}

fn budget_for(s: &Scenario, hooks: Hooks) -> Option<Arc<dyn RetryBudget>> {
    let budget = build_budget(s)?;
    // A deliberate defect of the scenario's client (`[client.defects]`).
    let ratio = match s.fleet.budget {
        Some(BudgetConfig::TokenBucket { token_ratio_milli, .. }) => Some(token_ratio_milli),
        _ => None,
    };
    let budget = s.client.defects.wrap_budget(budget, ratio);
    Some(match hooks.budget {
        Some(wrap) => wrap(budget),
        None => budget,
    })
}

/// Registers the fleet's hosts (and the limiter service's) with the simulation.
pub(crate) fn spawn(
    sim: &mut turmoil::Sim<'_>,
    s: &Scenario,
    seed: u64,
    hooks: Hooks,
    make: &Arc<dyn MakeSubject>,
    shared: &Arc<Shared>,
) {
    match s.fleet.hosts {
        Hosts::Shared => spawn_shared(sim, s, seed, hooks, make, shared),
        Hosts::PerWorker => spawn_per_worker(sim, s, seed, hooks, make, shared),
    }
}

fn spawn_shared(
    sim: &mut turmoil::Sim<'_>,
    s: &Scenario,
    seed: u64,
    hooks: Hooks,
    make: &Arc<dyn MakeSubject>,
    shared: &Arc<Shared>,
) {
    let (scenario, shared, make) = (Arc::new(s.clone()), shared.clone(), make.clone());
    sim.client(FLEET_HOST, async move {
        let clock = SimClock::from_epoch(scenario.epoch());
        let gate = gate_for(&scenario, &shared.gate_log, hooks)
            .map(|inner| Arc::new(MeteredGate { inner, depth: shared.depth.clone() }) as Arc<dyn Gate>);
        let budget = budget_for(&scenario, hooks);
        let host = Host { scenario: &scenario, clock: clock.clone(), worker: None, gate, budget };
        let subject = make.make(host);
        shared.made(&*subject);
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..scenario.fleet.workers {
            let (subject, scenario, shared, clock) = (subject.clone(), scenario.clone(), shared.clone(), clock.clone());
            let ended_by = shared.clone();
            tasks.spawn(Interruptible::new(ended_by, async move {
                let mut rng = seeded_rng(derive(seed, "worker", w as u64));
                while let Some((job, cancel)) = shared.next_job() {
                    let record = run_job(&*subject, &clock, &scenario, seed, (job, cancel), w, &mut rng).await;
                    if scenario.fleet.deferral.is_some() {
                        shared.deferral.offer(&record, &scenario);
                    }
                    shared.push(record);
                }
                shared.deferral.front_worker_done();
            }));
        }
        if let Some(d) = scenario.fleet.deferral.clone() {
            let host = Host { scenario: &scenario, clock: clock.clone(), worker: None, gate: None, budget: None };
            let background = builtin(Builtin::Retrysim, d.defects, &d.policy, host, seed);
            for i in 0..d.workers {
                let (client, scenario, queue, clock) =
                    (background.clone(), scenario.clone(), shared.deferral.clone(), clock.clone());
                tasks.spawn(Interruptible::new(shared.clone(), async move {
                    deferral::background_worker(i, &*client, &clock, &scenario, seed, &queue).await
                }));
            }
        }
        while tasks.join_next().await.is_some() {}
        Ok(())
    });
}

/// A task spawned on a host's runtime, which a host's tick does not see:
/// it looks for the run's interrupt ([`turmoil::look_for_interrupt`]) on
/// every poll and ends when there is one, so that a client that keeps the
/// runtime busy without letting virtual time pass cannot keep one step
/// going forever. Otherwise it is its inner future, poll for poll.
struct Interruptible<F> {
    shared: Arc<Shared>,
    inner: std::pin::Pin<Box<F>>,
}

impl<F: Future<Output = ()>> Interruptible<F> {
    fn new(shared: Arc<Shared>, inner: F) -> Interruptible<F> {
        Interruptible { shared, inner: Box::pin(inner) }
    }
}

impl<F: Future<Output = ()>> Future for Interruptible<F> {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if turmoil::look_for_interrupt() {
            self.shared.interrupted.store(true, std::sync::atomic::Ordering::Relaxed);
            return std::task::Poll::Ready(());
        }
        self.inner.as_mut().poll(cx)
    }
}

fn spawn_per_worker(
    sim: &mut turmoil::Sim<'_>,
    s: &Scenario,
    seed: u64,
    hooks: Hooks,
    make: &Arc<dyn MakeSubject>,
    shared: &Arc<Shared>,
) {
    let scenario = Arc::new(s.clone());
    if let Some(config) = s.fleet.coordinator {
        let (scenario, shared) = (scenario.clone(), shared.clone());
        sim.host(LIMITER_HOST, move || {
            let (scenario, shared) = (scenario.clone(), shared.clone());
            async move {
                // The hook wraps the workers' remote gates, not the service's.
                let unhooked = Hooks { gate: None, ..hooks };
                let gate =
                    gate_for(&scenario, &shared.gate_log, unhooked).expect("validated: a coordinator has a gate");
                let gate: Arc<dyn Gate> = Arc::new(MeteredGate { inner: gate, depth: shared.depth.clone() });
                serve_limiter(gate, config, shared.service_log.clone()).await
            }
        });
    }
    for w in 0..s.fleet.workers {
        let (scenario, shared, make) = (scenario.clone(), shared.clone(), make.clone());
        sim.client(worker_host(w), async move {
            let clock = SimClock::from_epoch(scenario.epoch());
            let log = shared.local_logs[&w].clone();
            let gate: Option<Arc<dyn Gate>> = match scenario.fleet.coordinator {
                Some(c) => {
                    let fallback = Aimd::with_clock(c.fallback, SimClock::from_epoch(scenario.epoch())).with_log(log);
                    let interval = Duration::from_micros(1_000_000_000 / c.fallback.max_rate_milli.max(1) as u64);
                    let stagger = interval * w / scenario.fleet.workers;
                    let remote = RemoteGate::start(w, c, fallback, stagger, shared.routes.clone());
                    let remote: Arc<dyn Gate> = Arc::new(remote);
                    Some(match hooks.gate {
                        Some(wrap) => wrap(remote),
                        None => remote,
                    })
                }
                None => gate_for(&scenario, &log, hooks),
            };
            let budget = budget_for(&scenario, hooks);
            let host = Host { scenario: &scenario, clock: clock.clone(), worker: Some(w), gate, budget };
            let subject = make.make(host);
            shared.made(&*subject);
            let mut rng = seeded_rng(derive(seed, "worker", w as u64));
            while let Some((job, cancel)) = shared.next_job() {
                let record = run_job(&*subject, &clock, &scenario, seed, (job, cancel), w, &mut rng).await;
                shared.push(record);
            }
            Ok(())
        });
    }
}

/// The admission queue's depth as seen from outside the gate.
#[derive(Debug, Default)]
struct Depth {
    waiting: u32,
    series: Vec<(Duration, u32)>,
}

impl Depth {
    fn change(&mut self, up: bool) {
        self.waiting = if up { self.waiting + 1 } else { self.waiting.saturating_sub(1) };
        self.series.push((sim_now(), self.waiting));
    }
}

/// Counts the attempts that wait at a gate: an attempt is waiting from the
/// first time its admission is not granted at once until it is (or gives up).
struct MeteredGate {
    inner: Arc<dyn Gate>,
    depth: Arc<Mutex<Depth>>,
}

impl Gate for MeteredGate {
    fn admit(&self) -> Admission<'_> {
        Box::pin(Metered { inner: self.inner.admit(), depth: &self.depth, waiting: false })
    }

    fn done(&self, feedback: &Feedback<'_>) {
        self.inner.done(feedback);
    }

    fn queued(&self) -> usize {
        self.inner.queued()
    }
}

struct Metered<'a> {
    inner: Admission<'a>,
    depth: &'a Mutex<Depth>,
    waiting: bool,
}

impl Future for Metered<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(()) => {
                if std::mem::take(&mut self.waiting) {
                    lock(self.depth).change(false);
                }
                Poll::Ready(())
            }
            Poll::Pending => {
                if !self.waiting {
                    self.waiting = true;
                    lock(self.depth).change(true);
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Metered<'_> {
    fn drop(&mut self) {
        if self.waiting {
            lock(self.depth).change(false);
        }
    }
}
