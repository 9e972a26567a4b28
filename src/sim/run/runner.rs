//! Runs a scenario in a turmoil simulation and reports what happened.
//!
//! The API is one host, the fleet another (its workers are tasks: one host
//! per worker would multiply turmoil's per-tick cost for no behaviour the
//! checks need), unless `fleet.hosts = "per_worker"` asks for a host per
//! worker to model separate processes (see [`fleet`]).
//! The runner steps the simulation itself so it can switch scheduled faults
//! on and off at exact virtual times.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::panics;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::locks::lock;
use crate::sim::run::advance::{StepMode, Stepping, advance};
use crate::sim::run::clients::ScenarioClient;
use crate::sim::run::fleet::{self, FLEET_HOST, FleetFacts, Hooks, Shared, fleet_hosts};
use crate::sim::run::job::job_of_label;
use crate::sim::run::scenario::Scenario;
use crate::sim::run::seed::derive;
use crate::sim::run::subject::{BlindSpot, MakeSubject, Promises};
use crate::sim::run::work::{Work, WorkTally};
use crate::sim::world::api::{Api, Ledger, Preset};
use crate::sim::world::faults::{Link, Switch};
use crate::sim::world::limiter_service::LIMITER_HOST;
use crate::sim::world::net::{API_HOST, ConnRecord, Fault, RacedRequest, Server, ServerFaults, serve};
use crate::sim::world::timers;
use crate::trace::EventKind;

/// turmoil's per-host TCP capacity: the listener backlog and each stream's
/// buffer, in messages (turmoil's default is 64; buffers grow lazily).
pub(crate) const TCP_CAPACITY: usize = 1 << 16;

pub use crate::sim::run::job::{JobOutcome, JobRecord, PLANTED_SECRETS, Traces};
pub use crate::sim::run::work::StepCounts;

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The master seed.
    pub seed: u64,
    /// The client's label: the policy's name for retrysim's client.
    pub policy: String,
    /// Virtual time until the last job ended.
    pub virtual_ms: u64,
    /// Requests that reached the API.
    pub requests: u64,
    /// TCP connections the API accepted (keep-alive reuses them).
    pub connections: u64,
    /// Requests a close race dropped after the client wrote them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub close_races: Vec<RacedRequest>,
    /// Each connection the API accepted, as its server kept it (for the
    /// model's keep-alive self-check). Not in the JSON report.
    #[serde(skip)]
    pub server_connections: Vec<ConnRecord>,
    /// Answers with status 429.
    pub limited: u64,
    /// Requests the API charged for (ran and billed).
    pub charged: u64,
    /// Jobs run.
    pub jobs: u64,
    /// Jobs whose final answer was a success.
    pub succeeded: u64,
    /// Give-ups by reason.
    pub gave_up: BTreeMap<String, u64>,
    /// Give-ups of any reason.
    pub gave_up_total: u64,
    /// Attempts beyond each job's first.
    pub retries: u64,
    /// Total time slept between attempts, over all jobs.
    pub slept_ms: u64,
    /// The most attempts any one job made: `max_retries + 1` at most.
    pub max_attempts_per_job: u32,
    /// Share of jobs whose first attempt was answered 429.
    pub first_attempt_429_rate: f64,
    /// Median job latency on the front end, virtual ms.
    pub p50_latency_ms: u64,
    /// 99th-percentile job latency on the front end, virtual ms.
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
    /// What the client under test promised (the black-box checks hold it to this).
    #[serde(skip)]
    pub promises: Promises,
    /// Whether the client wrote retrysim's trace ([`Subject::writes_trace`](crate::sim::run::subject::Subject::writes_trace)):
    /// then the trace-based checks apply too.
    #[serde(skip)]
    pub traced: bool,
    /// The fault classes the client's path cannot show it
    /// ([`Subject::blind_spots`](crate::sim::run::subject::Subject::blind_spots)).
    #[serde(skip)]
    pub blind_spots: Vec<BlindSpot>,
    /// How the runner stepped through virtual time (never part of what
    /// happened: compare reports without it).
    #[serde(skip)]
    pub stepping: StepCounts,
}

/// Why a run could not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    /// The scenario that failed.
    pub scenario: String,
    /// The seed that reproduces it.
    pub seed: u64,
    /// What went wrong.
    pub message: String,
    /// The wall-time bound ([`RunOptions::max_wall`]) when that is what
    /// stopped the run: the simulation itself may be fine, only slow.
    pub wall_bound: Option<Duration>,
}

impl RunError {
    fn of(s: &Scenario, seed: u64, message: String) -> RunError {
        RunError { scenario: s.name.clone(), seed, message, wall_bound: None }
    }
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

/// What [`RunOptions::progress`] calls.
pub type ProgressFn = fn(&Progress<'_>);

/// What a long run is doing, for [`RunOptions::progress`].
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    /// The scenario's name.
    pub scenario: &'a str,
    /// The master seed.
    pub seed: u64,
    /// Wall time since the run started.
    pub wall: Duration,
    /// Virtual time simulated so far.
    pub virtual_time: Duration,
    /// The scenario's `time_limit`: where virtual time stops at the latest.
    pub time_limit: Duration,
    /// Front-end jobs that have ended.
    pub jobs_ended: usize,
    /// Front-end jobs in the scenario.
    pub jobs: u32,
}

/// How a run is stepped and watched, and what it keeps: one value, built
/// the way turmoil's `Builder` is (chain the settings, then
/// [`run`](RunOptions::run) or [`run_subject`](RunOptions::run_subject)),
/// and nothing process-wide: two runs with different options may go on at
/// once on two threads.
///
/// None of it changes what happens in a run: a run that ends within the
/// wall-time bound has the same report, byte for byte, whatever the options
/// (only [`Report::stepping`] says how it was stepped, and `traces` how much
/// of each job's trace was kept).
///
/// # Default
/// - every job keeps its whole trace ([`Traces::All`]);
/// - no hooks;
/// - no wall-time bound and no progress;
/// - at most `MAX_REQUESTS` requests a run;
/// - idle stretches skipped, and idle hosts left out of busy steps of runs
///   with `LAZY_MIN_HOSTS` hosts or more.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    traces: Traces,
    hooks: Hooks,
    max_wall: Option<Duration>,
    max_requests: Option<usize>,
    progress: Option<(Duration, ProgressFn)>,
    steps: StepMode,
    work: Option<&'static WorkTally>,
}

impl RunOptions {
    /// The defaults (see above).
    pub fn new() -> RunOptions {
        RunOptions::default()
    }

    /// Keeps whole traces only for the jobs `traces` names: every figure of
    /// the report is the same, and memory no longer grows with each job's
    /// events (see [`Traces`]).
    pub fn traces(mut self, traces: Traces) -> RunOptions {
        self.traces = traces;
        self
    }

    /// Wraps what the fleet builds with `hooks` (tests use it to plant a
    /// deliberately broken gate or budget). A hooked run is stepped tick by
    /// tick: the harness cannot see where hooked code sleeps.
    pub fn hooks(mut self, hooks: Hooks) -> RunOptions {
        self.hooks = hooks;
        self
    }

    /// Stops a run (with a [`RunError`] whose `wall_bound` is set) once it
    /// has taken this much wall time; `None`: no bound. The wall clock is
    /// read between steps, never by the simulation.
    pub fn max_wall(mut self, bound: Option<Duration>) -> RunOptions {
        self.max_wall = bound;
        self
    }

    /// Stops a run once it has sent this many requests (a [`RunError`]
    /// that names the cap): the API keeps every request for the checks, so
    /// this bounds a run's memory. `MAX_REQUESTS` by default.
    pub fn max_requests(mut self, cap: usize) -> RunOptions {
        self.max_requests = Some(cap);
        self
    }

    /// Calls `report` from the simulating thread about every `every` of
    /// wall time while a run goes on, first after `every`.
    pub fn progress(mut self, every: Duration, report: ProgressFn) -> RunOptions {
        self.progress = Some((every, report));
        self
    }

    /// Steps every tick instead of skipping idle stretches (for tests and
    /// benches that compare the ways; the report is the same).
    pub fn plain_ticks(mut self, on: bool) -> RunOptions {
        self.steps.plain_ticks = on;
        self
    }

    /// Ticks every host in every step that is stepped (idle stretches are
    /// still skipped unless [`plain_ticks`](RunOptions::plain_ticks)).
    pub fn eager_hosts(mut self, on: bool) -> RunOptions {
        self.steps.eager_hosts = on;
        self
    }

    /// Leaves idle hosts out of busy steps however few hosts a run has.
    pub fn lazy_hosts_always(mut self, on: bool) -> RunOptions {
        self.steps.lazy_always = on;
        self
    }

    /// Adds the [`Work`] of each run that finishes to `tally`, by seed
    /// (`retrysim hunt --work`).
    pub(crate) fn count_work(mut self, tally: &'static WorkTally) -> RunOptions {
        self.work = Some(tally);
        self
    }

    /// Runs `s` with `seed` and the client the scenario names (retrysim's
    /// own by default). The same scenario and seed give the same report and
    /// the same traces, byte for byte.
    ///
    /// Safe to call from inside an async test or `#[tokio::main]`: the
    /// simulation then runs on a thread of its own (turmoil builds its own
    /// runtime, which cannot nest in another).
    ///
    /// A panic anywhere in the run (retrysim's client included) fails it
    /// with a [`RunError`] that shows the first panic.
    ///
    /// A scenario whose API wears a named preset (`[api] preset`) is refused:
    /// retrysim's own clients speak the model's API (`POST /v1/jobs`), which a
    /// preset does not serve, so every job would end on a 404.
    pub fn run(&self, s: &Scenario, seed: u64) -> Result<Report, RunError> {
        if s.api.preset != Preset::None {
            return Err(RunError::of(s, seed, s.api.preset.refuses_own_client()));
        }
        self.run_made(s, seed, Arc::new(ScenarioClient::new(seed)), Client::Own)
    }

    /// [`run`](RunOptions::run) with the client `make` builds on each fleet
    /// host: any retry client behind the
    /// [`Subject`](crate::sim::run::subject::Subject) boundary. The
    /// scenario's `[client]` section is then ignored for the fleet
    /// (deferral's background workers stay retrysim's).
    ///
    /// A panic of that client in a job ends the job, and the checks report
    /// it ([`Report::records`]'s `panic`); a panic anywhere else in the run
    /// fails it with a [`RunError`] that shows the first one.
    pub fn run_subject(&self, s: &Scenario, seed: u64, make: Arc<dyn MakeSubject>) -> Result<Report, RunError> {
        self.run_made(s, seed, make, Client::Users)
    }

    /// [`run`](RunOptions::run) or [`run_subject`](RunOptions::run_subject).
    fn run_made(
        &self,
        s: &Scenario,
        seed: u64,
        make: Arc<dyn MakeSubject>,
        client: Client,
    ) -> Result<Report, RunError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.simulate(s, seed, make, client);
        }
        std::thread::scope(|scope| {
            let name = format!("retrysim {} seed {seed}", s.name);
            let worker =
                std::thread::Builder::new().name(name).spawn_scoped(scope, || self.simulate(s, seed, make, client));
            match worker.map(|w| w.join()) {
                Ok(Ok(result)) => result,
                Ok(Err(panic)) => std::panic::resume_unwind(panic),
                Err(e) => Err(RunError::of(s, seed, format!("could not start the simulation's thread: {e}"))),
            }
        })
    }

    /// Runs `s`; when a host owing ticks was woken through shared memory (see
    /// [`advance`](crate::sim::run::advance)), the run is not the one of
    /// ticking every host, so it runs again with every host ticked.
    fn simulate(
        &self,
        s: &Scenario,
        seed: u64,
        make: Arc<dyn MakeSubject>,
        client: Client,
    ) -> Result<Report, RunError> {
        let counted = |report: Box<Report>| {
            if let Some(tally) = self.work {
                tally.add(seed, &report.stepping.work);
            }
            Ok(*report)
        };
        let (lazy_ticks, work) = match self.attempt(s, seed, make.clone(), true, client)? {
            Attempt::Finished(report) => return counted(report),
            Attempt::Woken { lazy_ticks, work } => (lazy_ticks, work),
        };
        match self.attempt(s, seed, make, false, client)? {
            Attempt::Finished(mut report) => {
                report.stepping.lazy_ticks = lazy_ticks;
                report.stepping.lazy_replays = 1;
                report.stepping.work += work;
                counted(report)
            }
            Attempt::Woken { .. } => {
                Err(RunError::of(s, seed, "a host was woken in a run that leaves no host out (a harness bug)".into()))
            }
        }
    }

    /// One run: builds the world, steps it to its end and gathers the report,
    /// or stops when a host left out of a step (`lazy`) was woken.
    fn attempt(
        &self,
        s: &Scenario,
        seed: u64,
        make: Arc<dyn MakeSubject>,
        lazy: bool,
        client: Client,
    ) -> Result<Attempt, RunError> {
        s.validate().map_err(|e| RunError::of(s, seed, e.0))?;
        let panics = panics::Watch::start();
        // Every simulated timer registers here while the simulation runs.
        let registry = timers::install();
        let stepping = Stepping::new(s, registry.timers.clone(), self.hooks, lazy, self.steps);
        let make = stepping.watch_clients(make);
        let mut sim = build_sim(s, seed);
        let server = Arc::new(Server::new(
            Api::new(s.api.clone()),
            ServerFaults::new(s.faults.lost_answers_per_mille, derive(seed, "server", 0)),
        ));
        let host_server = server.clone();
        sim.host(API_HOST, move || serve(host_server.clone()));
        let shared = Arc::new(Shared::new(s, self.traces));
        fleet::spawn(&mut sim, s, seed, self.hooks, &make, &shared);
        let world = World { s, seed, server: &server, shared: &shared, stepping: &stepping };
        let driven = self.drive(&mut sim, &world)?;
        let requests = lock(&server.api).ledger().arrivals.len() as u64;
        let work = Work::of_sim(&sim, requests, registry.timers.fired());
        let lazy_ticks = match driven {
            Driven::Woken { lazy_ticks } => return Ok(Attempt::Woken { lazy_ticks, work }),
            Driven::Finished { lazy_ticks } => lazy_ticks,
        };
        if let Some(why) = registry.timers.pool_clock_violation() {
            return Err(RunError::of(s, seed, why));
        }
        let mut report = gather(s, seed, &server, &shared, &*make);
        if let Some(why) = client.panicked(&panics.panics(), &report) {
            return Err(RunError::of(s, seed, why));
        }
        report.stepping = StepCounts { skipped_ticks: stepping.skipped_ticks(), lazy_ticks, lazy_replays: 0, work };
        Ok(Attempt::Finished(Box::new(report)))
    }

    /// Steps `sim` until the clients are done, switching scheduled faults at
    /// their times and watching the wall clock between steps.
    fn drive(&self, sim: &mut turmoil::Sim<'_>, world: &World<'_>) -> Result<Driven, RunError> {
        let mut watch = Watch::new(self);
        // Looked at inside steps too: a host busy within one tick never
        // reaches the look between steps.
        if let Some(deadline) = self.max_wall.and_then(|b| watch.began.checked_add(b)) {
            sim.interrupt_when(move || Instant::now() >= deadline);
        }
        let driven = self.drive_watched(sim, world, &mut watch);
        sim.clear_interrupt();
        driven
    }

    /// [`drive`](RunOptions::drive)'s loop, under `watch`.
    fn drive_watched(
        &self,
        sim: &mut turmoil::Sim<'_>,
        world: &World<'_>,
        watch: &mut Watch,
    ) -> Result<Driven, RunError> {
        let s = world.s;
        let schedule = fault_switches(s);
        let mut next = 0;
        loop {
            watch.look(sim, world)?;
            let requests = lock(&world.server.api).ledger().arrivals.len();
            if requests >= self.max_requests.unwrap_or(MAX_REQUESTS) {
                let message = format!(
                    "stopped at {requests} requests, the most one run may send (each is kept for the checks, \
                     about 1 KB, so the cap bounds a run's memory), at {} of \
                     virtual time with {} of {} jobs ended: shorten time_limit, the policy's deadline or \
                     max_retries, or give it a backoff",
                    humantime::format_duration(Duration::from_secs(sim.elapsed().as_secs())),
                    world.shared.ended(),
                    s.fleet.jobs
                );
                return Err(RunError::of(s, world.seed, message));
            }
            while next < schedule.len() && schedule[next].0 <= sim.elapsed() {
                let (_, i, start) = schedule[next];
                apply(sim, world.server, world.shared, &s.faults.schedule[i].fault, start, s);
                next += 1;
            }
            // A panic inside a host is a harness bug: report it with the replay
            // line instead of tearing down the caller (`retrysim run` exits 2).
            let next_fault = schedule.get(next).map(|f| f.0);
            let stepped = catch_unwind(AssertUnwindSafe(|| advance(sim, world.stepping, next_fault)));
            if world.shared.interrupted() {
                return Err(watch.stopped(sim, world));
            }
            if sim.lazy_woken() {
                return Ok(Driven::Woken { lazy_ticks: sim.lazy_ticks() });
            }
            let fail = |message| Err(RunError::of(s, world.seed, message));
            match stepped {
                Ok(Ok((true, _))) => return Ok(Driven::Finished { lazy_ticks: sim.lazy_ticks() }),
                Ok(Ok((false, ticks))) => watch.steps += ticks,
                Ok(Err(e)) if e.is::<turmoil::Interrupted>() => return Err(watch.stopped(sim, world)),
                Ok(Err(e)) => return fail(unfinished(e.to_string(), s, world.shared)),
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| panic.downcast_ref::<&str>().copied())
                        .unwrap_or("a panic without a message");
                    return fail(format!("the simulation panicked (a harness bug, please report it): {what}"));
                }
            }
        }
    }
}

/// The most requests one run sends before it is stopped: the API keeps each
/// for the checks (about 1 KB with its traces), so this bounds a run's
/// memory (about 470 MB at the cap) whatever its `time_limit`. The largest named
/// scenario or comparison sends under 20,000 a run.
pub const MAX_REQUESTS: usize = 500_000;

/// Runs a scenario with a seed under the default [`RunOptions`]: the
/// scenario's own client, every trace kept, no wall-time bound.
pub fn run(s: &Scenario, seed: u64) -> Result<Report, RunError> {
    RunOptions::default().run(s, seed)
}

/// Whose client a run's jobs ran: a panic of a user's client in a job is a
/// finding about that client (the checks report it), any other panic a
/// failed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Own,
    Users,
}

impl Client {
    /// Why a run with these `panics` (as [`panics::Watch`] recorded them)
    /// failed, if it did.
    fn panicked(self, panics: &panics::Recorded, report: &Report) -> Option<String> {
        let users: Vec<&str> = match self {
            Client::Own => Vec::new(),
            Client::Users => report.records.iter().filter_map(|r| r.panic.as_deref()).collect(),
        };
        let mut theirs = users.len();
        let first = panics.first.iter().find(|p| {
            let user = theirs > 0 && users.iter().any(|u| p.starts_with(u));
            theirs -= usize::from(user);
            !user
        })?;
        let count = panics.count - users.len().min(panics.count);
        let whose = match self {
            Client::Own => "in retrysim's own code: a bug, please report it with the replay line",
            Client::Users => {
                "outside the client's jobs, in retrysim's own code: a bug, please report it with the replay line"
            }
        };
        Some(format!("it panicked {count} time(s) ({whose}); the first: {first}"))
    }
}

/// How one attempt at a run ended.
enum Attempt {
    Finished(Box<Report>),
    /// A host left out of a step was woken: the run must go again.
    Woken {
        lazy_ticks: u64,
        work: Work,
    },
}

/// How the stepping loop ended (with the host ticks it left out).
enum Driven {
    Finished { lazy_ticks: u64 },
    Woken { lazy_ticks: u64 },
}

/// What a run's stepping loop works on.
struct World<'a> {
    s: &'a Scenario,
    seed: u64,
    server: &'a Server,
    shared: &'a Shared,
    stepping: &'a Stepping,
}

/// The simulation for `s`, its hosts not yet added.
fn build_sim(s: &Scenario, seed: u64) -> turmoil::Sim<'static> {
    turmoil::Builder::new()
        .epoch(s.epoch())
        .rng_seed(derive(seed, "turmoil", 0))
        .tick_duration(s.net.tick)
        .min_message_latency(s.net.min_latency)
        .max_message_latency(s.net.max_latency)
        .simulation_duration(s.time_limit)
        // turmoil panics when a listener's backlog of unaccepted connections
        // is full (a real one drops the SYN). A Hold fault releases every
        // connect the fleet retried meanwhile at once: room for them all.
        .tcp_capacity(TCP_CAPACITY)
        .build()
}

/// Every switch of the scheduled faults, `(when, fault index, on)`, in order.
fn fault_switches(s: &Scenario) -> Vec<(Duration, usize, bool)> {
    let mut schedule: Vec<(Duration, usize, bool)> = Vec::new();
    for (i, f) in s.faults.schedule.iter().enumerate() {
        schedule.push((f.at, i, true));
        if let Some(until) = f.fault.until() {
            schedule.push((until.max(f.at), i, false));
        }
    }
    schedule.sort();
    schedule
}

/// The wall-clock watch over one run ([`RunOptions::max_wall`],
/// [`RunOptions::progress`]): it reads the wall clock between steps, about
/// every 256 ticks (a skip may cover more), never inside the simulation.
struct Watch {
    max_wall: Option<Duration>,
    progress: Option<(Duration, ProgressFn)>,
    began: Instant,
    shown: Duration,
    /// Ticks stepped, and at how many the watch last looked.
    steps: u64,
    looked: u64,
}

impl Watch {
    fn new(options: &RunOptions) -> Watch {
        Watch {
            max_wall: options.max_wall,
            progress: options.progress,
            began: Instant::now(),
            shown: Duration::ZERO,
            steps: 0,
            looked: 0,
        }
    }

    /// The error of a run the wall-time bound stopped.
    fn stopped(&self, sim: &turmoil::Sim<'_>, world: &World<'_>) -> RunError {
        let (s, bound) = (world.s, self.max_wall.unwrap_or_default());
        let message = format!(
            "stopped after {} of wall time, the bound, at {} of virtual time with {} of {} jobs ended",
            humantime::format_duration(bound),
            humantime::format_duration(Duration::from_secs(sim.elapsed().as_secs())),
            world.shared.ended(),
            s.fleet.jobs
        );
        RunError { wall_bound: Some(bound), ..RunError::of(s, world.seed, message) }
    }

    /// Stops the run past the bound; says what it does when it is time to.
    fn look(&mut self, sim: &turmoil::Sim<'_>, world: &World<'_>) -> Result<(), RunError> {
        if self.steps < self.looked + 256 || (self.max_wall.is_none() && self.progress.is_none()) {
            return Ok(());
        }
        self.looked = self.steps;
        let (s, wall) = (world.s, self.began.elapsed());
        if self.max_wall.is_some_and(|b| wall >= b) {
            return Err(self.stopped(sim, world));
        }
        if let Some((_, report)) = self.progress.filter(|&(every, _)| wall >= self.shown + every) {
            self.shown = wall;
            report(&Progress {
                scenario: &s.name,
                seed: world.seed,
                wall,
                virtual_time: sim.elapsed(),
                time_limit: s.time_limit,
                jobs_ended: world.shared.ended(),
                jobs: s.fleet.jobs,
            });
        }
        Ok(())
    }
}

/// The report of a run whose clients are done: records, ledger and facts.
fn gather(s: &Scenario, seed: u64, server: &Server, shared: &Shared, make: &dyn MakeSubject) -> Report {
    let (mut records, mut deferred_records, fleet_facts) = shared.take();
    records.sort_by_key(|r| r.job);
    deferred_records.sort_by_key(|r| (r.job, r.started_ms));
    let ledger = lock(&server.api).take_ledger();
    count_unreported_attempts(&mut records, &ledger);
    let made = shared.client();
    let promises = made.as_ref().map_or_else(|| Promises::of_policy(&s.policy), |m| m.promises.clone());
    let traced = made.as_ref().is_none_or(|m| m.traced);
    let mut report = report(s, seed, records, ledger, make.label(s), promises);
    report.traced = traced;
    report.connections = server.connections();
    report.close_races = server.raced();
    report.server_connections = server.connection_records();
    report.blind_spots = made.map(|m| m.blind_spots).unwrap_or_default();
    if !traced {
        // No trace to read the first answers from: the ledger's first arrival of each job.
        let mut first: BTreeMap<u32, bool> = BTreeMap::new();
        for a in &report.ledger.arrivals {
            if let Some(job) = job_of_label(&a.client) {
                first.entry(job).or_insert(a.status == 429);
            }
        }
        let limited = first.values().filter(|&&l| l).count();
        report.first_attempt_429_rate = if report.jobs == 0 { 0.0 } else { limited as f64 / report.jobs as f64 };
    }
    report.add_fleet_figures(deferred_records, fleet_facts);
    report
}

/// Why a run stopped early, with the jobs still running when it did.
fn unfinished(why: String, s: &Scenario, shared: &Shared) -> String {
    let running = shared.unfinished_jobs(s.fleet.jobs);
    if running.is_empty() {
        return why;
    }
    let shown: Vec<String> = running.iter().take(10).map(|j| j.to_string()).collect();
    let more = if running.len() > 10 { format!(" and {} more", running.len() - 10) } else { String::new() };
    format!(
        "{why}; {} job(s) never ended: {}{more} (a client that never returns, or waits past time_limit = {}: raise time_limit or fix the client)",
        running.len(),
        shown.join(", "),
        humantime::format_duration(s.time_limit)
    )
}

/// For a client that does not count its attempts: the requests the server
/// saw from the job (by its label).
fn count_unreported_attempts(records: &mut [JobRecord], ledger: &Ledger) {
    if records.iter().all(|r| r.attempts_reported) {
        return;
    }
    let mut seen: BTreeMap<u32, u32> = BTreeMap::new();
    for a in &ledger.arrivals {
        if let Some(job) = job_of_label(&a.client) {
            *seen.entry(job).or_default() += 1;
        }
    }
    for r in records.iter_mut().filter(|r| !r.attempts_reported) {
        r.attempts = seen.get(&r.job).copied().unwrap_or(0);
    }
}

/// Cuts or holds `link` (`on`), or mends or releases it: one fleet host
/// talks to the API as the fleet's, per-worker hosts each for themselves.
fn switch_link(sim: &mut turmoil::Sim<'_>, s: &Scenario, link: Link, hold: bool, on: bool) {
    let fleet = fleet_hosts(s);
    let peer = match link {
        Link::Api => API_HOST,
        Link::Limiter => LIMITER_HOST,
    };
    let hosts: Vec<&str> = match (fleet.len() > 1, link) {
        (true, _) => fleet.iter().map(String::as_str).collect(),
        (false, Link::Limiter) => vec![fleet[0].as_str()],
        (false, Link::Api) => vec![FLEET_HOST],
    };
    for host in hosts {
        match (hold, on) {
            (true, true) => sim.hold(host, peer),
            (true, false) => sim.release(host, peer),
            (false, true) => sim.partition(host, peer),
            (false, false) => sim.repair(host, peer),
        }
    }
}

/// Carries out what `fault` does to the world when it starts (`start`) or
/// heals ([`Fault::switches`]).
fn apply(sim: &mut turmoil::Sim<'_>, server: &Server, shared: &Shared, fault: &Fault, start: bool, s: &Scenario) {
    for switch in fault.switches(start) {
        carry_out(sim, server, shared, switch, s);
    }
}

/// Carries out one [`Switch`] of a fault.
fn carry_out(sim: &mut turmoil::Sim<'_>, server: &Server, shared: &Shared, switch: Switch, s: &Scenario) {
    match switch {
        Switch::Cut { link, on } => switch_link(sim, s, link, false, on),
        Switch::Hold { link, on } => switch_link(sim, s, link, true, on),
        Switch::LoseNextAnswer => lock(&server.faults).lose_next += 1,
        Switch::MaxLatency(latency) => sim.set_max_message_latency(latency.unwrap_or(s.net.max_latency)),
        Switch::CancelRunning => shared.cancel_running(crate::trace::ms(sim.elapsed())),
        Switch::CloseRace(timing) => server.close_race(timing),
        Switch::Bounce => {
            sim.bounce(API_HOST);
            // The restart kills the requests that were running: their keys
            // must not stay "in progress" forever.
            lock(&server.api).abort_running(sim.elapsed());
        }
    }
}

fn report(
    s: &Scenario,
    seed: u64,
    records: Vec<JobRecord>,
    ledger: Ledger,
    label: String,
    promises: Promises,
) -> Report {
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
        policy: label,
        virtual_ms: records.iter().map(|r| r.finished_ms).max().unwrap_or(0),
        requests: ledger.arrivals.len() as u64,
        connections: 0,
        close_races: Vec::new(),
        server_connections: Vec::new(),
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
        queued_ms: records.iter().map(JobRecord::queued_ms).sum(),
        max_in_flight: max_in_flight(&ledger),
        deferred: 0,
        completed_after_deferral: 0,
        records,
        deferred_records: Vec::new(),
        fleet_facts: FleetFacts::default(),
        ledger,
        scenario_config: s.clone(),
        promises,
        traced: true,
        blind_spots: Vec::new(),
        stepping: StepCounts::default(),
    }
}

fn percentile(sorted: &[u64], p: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() as u64 * p).div_ceil(100).max(1) as usize;
    sorted[rank.min(sorted.len()) - 1]
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
            self.queued_ms += deferred_records.iter().map(JobRecord::queued_ms).sum::<u64>();
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
    /// The client's blind spots that this run's scenario injects: each
    /// makes the run not applicable to the client (its checks cannot say
    /// that it holds), in the order of the fault classes.
    pub fn not_applicable(&self) -> Vec<BlindSpot> {
        let injected = self.scenario_config.fault_classes();
        let mut spots: Vec<BlindSpot> =
            self.blind_spots.iter().filter(|b| injected.contains(&b.class)).cloned().collect();
        spots.sort_by_key(|b| b.class);
        spots.dedup_by_key(|b| b.class);
        spots
    }

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
            ("connections", self.connections.to_string()),
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
        if self.scenario_config.fleet.gate != crate::sim::run::scenario::GateConfig::None {
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
