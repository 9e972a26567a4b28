//! Test *your* retry client in `cargo test`: run it through a simulated,
//! rate-limited API on virtual time, assert the invariants, snapshot what
//! it did, and hunt seeds for the run that breaks it.
//!
//! Your client implements [`Subject`]: the harness hands it one job at a
//! time (the request to send, the simulated network, a seeded random
//! generator, a clock on virtual time, a cancellation token) and it returns
//! how the job ended. It sends over the simulated network either through
//! [`SimNet::transport`] (retrysim's [`Transport`](crate::env::Transport)) or
//! through [`SimConnector`], a connector for `hyper_util`'s client and so for
//! any `tower` stack built on it. It declares what it [`Promises`] (at most
//! so many attempts, a deadline, honouring `Retry-After`), and the black-box
//! checks hold it to that from the server's ledger alone: your client needs
//! to write no trace.
//!
//! | to do | call |
//! |---|---|
//! | run one scenario for a seed | [`Harness::named`] / [`Harness::from_toml`], [`Harness::run`]; a scenario built in code: [`scenario`], [`Harness::of`] |
//! | assert the invariants, panicking with every violation and a replay line | [`Harness::assert_holds`] |
//! | holds, broken, or not applicable to a client blind to a fault the scenario injects | [`Checked::verdict`], [`Subject::blind_spots`] |
//! | the run as review text, for `insta::assert_snapshot!` | [`trace_text`] |
//! | hunt a seed range | [`Harness::hunt`], [`Hunt::assert_clean`]; random scenarios: [`Harness::swarm`] |
//! | write your own properties | the strategies in [`strategies`] (feature `proptest`) |
//! | a `reqwest_middleware` stack on virtual time (feature `sim-reqwest`) | `ReqwestStack`, with `SimReqwest` as its last middleware |
//! | a client that cannot ride turmoil's network (reqwest's own client and retry, another language): the same API on a real socket | [`Served::start`] (`retrysim serve` in process) |
//!
//! # Replaying a failure
//!
//! Every failure prints its seed and a line such as
//! `replay: RETRYSIM_SEED=42 cargo test my_client_survives -- --exact`.
//! With `RETRYSIM_SEED` set, [`Harness::hunt`] runs that one seed only, so
//! the same test reruns the failing run, byte for byte.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use retrysim::env::{Clock, Transport};
//! use retrysim::testing::{BoxFuture, Harness, Job, JobEnd, Promises, Subject, from_fn, trace_text};
//!
//! /// A hand-written loop: up to 4 tries, waiting what `Retry-After` says.
//! struct MyLoop;
//!
//! impl Subject for MyLoop {
//!     fn promises(&self) -> Promises {
//!         Promises::nothing().max_attempts(4).honours_retry_after(true)
//!     }
//!
//!     fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
//!         Box::pin(async move {
//!             let transport = job.net.transport();
//!             for attempt in 1..=4 {
//!                 let res = match transport.send(job.request_copy()).await {
//!                     Ok(res) => res,
//!                     Err(_) => return JobEnd::gave_up("network error").attempts(attempt),
//!                 };
//!                 if res.status().is_success() {
//!                     return JobEnd::succeeded(res.status().as_u16()).attempts(attempt);
//!                 }
//!                 if res.status() != 429 || attempt == 4 {
//!                     return JobEnd::gave_up(format!("status {}", res.status().as_u16())).attempts(attempt);
//!                 }
//!                 let secs = res.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok());
//!                 job.clock.sleep(Duration::from_secs(secs.unwrap_or(1))).await;
//!             }
//!             unreachable!("the loop returns on its last attempt")
//!         })
//!     }
//! }
//!
//! let harness = Harness::named("once-429-then-200").unwrap().with_client(from_fn("my-loop", |_| MyLoop));
//! let report = harness.assert_holds(1);
//! assert_eq!(report.succeeded, 1);
//! // insta::assert_snapshot!(trace_text(&report));
//! assert!(trace_text(&report).contains("request 2  POST /v1/jobs"));
//! harness.hunt(1..20).assert_clean();
//! ```
//!
//! # Declaring your jitter
//!
//! A client that draws its backoff waits at random says how in its
//! promises ([`Promises::jitter`]); `jitter-spread` then tests the waits
//! that followed answers advising nothing, read from the server's ledger,
//! against that draw. Undeclared (the default), they are not judged.
//!
//! ```
//! use std::time::Duration;
//! use retrysim::core::backoff::{Backoff, Jitter};
//! use retrysim::env::{Clock, Transport};
//! use retrysim::testing::{BoxFuture, Job, JobEnd, Promises, Subject};
//!
//! /// Up to 5 tries, waiting full jitter over 200 ms doubling up to 3 s.
//! struct Jittered(Backoff);
//!
//! impl Subject for Jittered {
//!     fn promises(&self) -> Promises {
//!         Promises::nothing().max_attempts(5).jitter(self.0)
//!     }
//!
//!     fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
//!         Box::pin(async move {
//!             let transport = job.net.transport();
//!             for n in 0..5 {
//!                 match transport.send(job.request_copy()).await {
//!                     Ok(res) if res.status().is_success() => return JobEnd::succeeded(res.status().as_u16()),
//!                     Ok(res) if res.status() != 429 => return JobEnd::gave_up(format!("status {}", res.status())),
//!                     _ => {}
//!                 }
//!                 if n < 4 {
//!                     // A fresh draw from the job's seeded generator, as declared.
//!                     job.clock.sleep(self.0.wait(n, None, job.rng.draw())).await;
//!                 }
//!             }
//!             JobEnd::gave_up("attempts_exhausted")
//!         })
//!     }
//! }
//!
//! let full = Backoff::new(Duration::from_millis(200), Duration::from_secs(3), Jitter::Full);
//! assert_eq!(Jittered(full).promises().jitter, Some(full));
//! ```

use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use crate::sim::checks::hunt;
use crate::sim::checks::invariants as check;
use crate::sim::run::render::{Show, render_run};
use crate::sim::run::runner::RunOptions;

// The front door re-exports on purpose what a user's test names: the client
// boundary, the scenario and its faults, the report and what it holds, and
// the checks' verdicts. The rest of `sim` is the harness's workings.
pub use crate::sim::checks::blackbox::{BlackBoxCheck, BlackBoxViolation, black_box};
pub use crate::sim::checks::fleet::FleetViolation;
pub use crate::sim::checks::hunt::Kind;
pub use crate::sim::checks::invariants::{Invariant, Violation};
pub use crate::sim::checks::registry::{Check, Property};
pub use crate::sim::run::job::{JobKind, JobRecord};
#[cfg(feature = "sim-reqwest")]
pub use crate::sim::run::reqwest_stack::{ReqwestStack, SimReqwest};
pub use crate::sim::run::runner::{Report, RunError};
pub use crate::sim::run::scenario::Scenario;
pub use crate::sim::run::subject::{
    BlindSpot, BoxFuture, Host, Job, JobEnd, JobOutcome, MakeSubject, Promises, SimNet, Subject, from_fn,
};
pub use crate::sim::serve::{Limits, ServeError, ServeOptions, ServeReport, Served};
pub use crate::sim::world::api::{Arrival, ArrivalOutcome, Ledger};
pub use crate::sim::world::connector::SimConnector;
pub use crate::sim::world::faults::FaultKind;
pub use crate::sim::world::net::{CloseTiming, Fault, FaultClass, RacedRequest, ScheduledFault};
pub use crate::sim::world::timers::{SimClock, SimTimer};

/// A scenario's configuration, for scenarios written or changed in code:
/// start from a named one ([`named`](scenario::named)) or a TOML file
/// ([`Scenario::from_toml`]) and set the fields your test is about. Every
/// type here is also what the TOML keys hold (docs/guide/scenario-keys.md);
/// the faults a schedule holds are [`ScheduledFault`] and [`Fault`].
pub mod scenario {
    pub use crate::sim::run::scenario::{
        BudgetConfig, Builtin, ClientConfig, CoordinatorConfig, Faults, Fleet, GateConfig, Hosts, InvalidScenario,
        NAMES, NetConfig, OpMix, Scenario, named,
    };
    pub use crate::sim::world::api::{
        AccountConfig, AdviceForm, ApiConfig, ConcurrencyConfig, DateForm, Dialect, Envelope, KeepAlive, LimiterConfig,
        LimiterKind, Preset, RateLimitFields, RateLimitedBody, ResetForm, RetryAfterRounding, ScriptStep,
    };
}

/// proptest strategies over scenarios, policies and fault schedules, for
/// properties of your own (feature `proptest`). Each is named `arb_*`.
#[cfg(feature = "proptest")]
pub mod strategies {
    pub use crate::sim::checks::strategies::{
        TerminalConditions, arb_advice_form, arb_api_config, arb_budget, arb_calm_scenario, arb_exhausting_scenario,
        arb_fault, arb_fault_schedule, arb_faults, arb_fleet, arb_jitter, arb_limiter, arb_lossy_scenario, arb_net,
        arb_op_mix, arb_policy, arb_preset, arb_random_policy, arb_scenario, arb_script_step, arb_seed, arb_skew,
        arb_terminal_conditions, arb_terminal_scenario, arb_throttled_scenario, arb_tight_scenario,
        arb_too_long_scenario,
    };
}

/// The environment variable that narrows [`Harness::hunt`] to one seed.
pub const SEED_VAR: &str = "RETRYSIM_SEED";

/// A scenario that could not be loaded, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError(pub String);

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScenarioError {}

/// Where each seed's scenario comes from.
#[derive(Clone)]
enum Source {
    /// One scenario; the seed draws jitter, latencies, losses and the job mix.
    Fixed(Box<Scenario>),
    /// A random scenario per seed ([`hunt::swarm`]): faults, limits, fleets.
    Swarm(Kind),
}

/// A scenario (or a family of random ones) and the client to put into it.
#[derive(Clone)]
pub struct Harness {
    source: Source,
    /// The user's client; `None`: the scenario's own, built for each run
    /// with that run's seed, as the hunt builds it.
    client: Option<Arc<dyn MakeSubject>>,
    determinism: bool,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scenario = match &self.source {
            Source::Fixed(s) => s.name.clone(),
            Source::Swarm(kind) => format!("swarm of kind {kind}"),
        };
        f.debug_struct("Harness").field("scenario", &scenario).field("determinism", &self.determinism).finish()
    }
}

impl Harness {
    /// A named scenario (see `retrysim scenarios`), with retrysim's own client
    /// until [`with_client`](Harness::with_client) puts yours in.
    pub fn named(name: &str) -> Result<Harness, ScenarioError> {
        let s = scenario::named(name).ok_or_else(|| {
            ScenarioError(format!(
                "no scenario named {name:?}; the named scenarios are: {}",
                scenario::NAMES.join(", ")
            ))
        })?;
        Ok(Harness::of(s))
    }

    /// A scenario written in TOML (the format `retrysim hunt --dump` and
    /// `compare --show` write).
    pub fn from_toml(text: &str) -> Result<Harness, ScenarioError> {
        let s = Scenario::from_toml(text).map_err(|e| ScenarioError(format!("the scenario TOML is invalid: {e}")))?;
        Ok(Harness::of(s))
    }

    /// A scenario from a TOML file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Harness, ScenarioError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ScenarioError(format!("cannot read the scenario {}: {e}", path.display())))?;
        Harness::from_toml(&text).map_err(|e| ScenarioError(format!("{}: {e}", path.display())))
    }

    /// A scenario built in code (it is validated when it runs), with the
    /// client its `[client]` section names (retrysim's own by default),
    /// built for each run with that run's seed, as `retrysim hunt` builds
    /// it, until [`with_client`](Harness::with_client) puts yours in.
    pub fn of(s: Scenario) -> Harness {
        Harness { source: Source::Fixed(Box::new(s)), client: None, determinism: true }
    }

    /// A fresh random scenario for every seed: the hunt's swarm of fleets
    /// and single clients with holds, partitions, lost answers, skewed
    /// clocks and scripted answers. Each seed's own client is built with
    /// that seed, as the hunt builds it.
    pub fn swarm(kind: Kind) -> Harness {
        Harness { source: Source::Swarm(kind), client: None, determinism: true }
    }

    /// Puts your client into the scenario: `make` builds it on each fleet
    /// host (see [`from_fn`]).
    pub fn with_client(mut self, make: impl MakeSubject + 'static) -> Harness {
        self.client = Some(Arc::new(make));
        self
    }

    /// Whether [`check`](Harness::check) runs each seed twice and compares
    /// the runs byte for byte (invariant 8). On by default: a client that
    /// reads the wall clock or an ambient random generator shows up here.
    pub fn determinism(mut self, on: bool) -> Harness {
        self.determinism = on;
        self
    }

    /// The scenario seed `seed` runs.
    pub fn scenario(&self, seed: u64) -> Scenario {
        match &self.source {
            Source::Fixed(s) => (**s).clone(),
            Source::Swarm(kind) => hunt::swarm(seed, *kind),
        }
    }

    /// Runs seed `seed` and returns its report. Works from inside an async
    /// test too (the simulation then runs on a thread of its own).
    pub fn run(&self, seed: u64) -> Result<Report, RunError> {
        let s = self.scenario(seed);
        match &self.client {
            Some(make) => RunOptions::default().run_subject(&s, seed, make.clone()),
            None => RunOptions::default().run(&s, seed),
        }
    }

    /// Runs seed `seed` and checks every invariant that applies: the
    /// black-box checks against the client's [`Promises`], the trace-based
    /// ones when the client writes retrysim's trace, the fleet checks, the
    /// model's self-check, and determinism: the same checks as
    /// `retrysim hunt` (both judge by [`hunt::judge`]). When the scenario
    /// injects a fault class the client declared blind to
    /// ([`Subject::blind_spots`]), a run that broke nothing is
    /// [`Verdict::NotApplicable`], not a pass.
    pub fn check(&self, seed: u64) -> Checked {
        self.check_in(seed, current_test().as_deref())
    }

    fn check_in(&self, seed: u64, test: Option<&str>) -> Checked {
        let replay = replay_line(seed, test);
        let scenario = self.scenario(seed).name;
        let mut checked = Checked {
            seed,
            scenario,
            report: None,
            violations: Vec::new(),
            fleet: Vec::new(),
            run_error: None,
            not_applicable: Vec::new(),
            replay,
        };
        let first = match self.run(seed) {
            Ok(r) => r,
            Err(e) => {
                checked.run_error = Some(e.message);
                return checked;
            }
        };
        (checked.violations, checked.fleet) = hunt::judge(&first);
        checked.not_applicable = first.not_applicable();
        if self.determinism {
            match self.run(seed) {
                Ok(second) => checked.violations.extend(check::check_determinism(&first, &second)),
                Err(e) => checked.run_error = Some(format!("the second run (for determinism) failed: {}", e.message)),
            }
        }
        checked.report = Some(first);
        checked
    }

    /// [`check`](Harness::check), panicking with every violation and the
    /// replay line when one is found, or with the reason when the scenario
    /// is not applicable to the client ([`Verdict::NotApplicable`]); else
    /// the run's report.
    ///
    /// Every check a client faces, what turns it on and how to fix a
    /// failure: `docs/book/checks.md` in the repository.
    #[track_caller]
    pub fn assert_holds(&self, seed: u64) -> Report {
        let checked = self.check(seed);
        if !checked.passed() {
            panic!("{checked}");
        }
        checked.report.expect("a run that passed has a report")
    }

    /// Checks every seed of `seeds` (only the one in `RETRYSIM_SEED` when
    /// it is set), on as many threads as the machine has cores.
    pub fn hunt(&self, seeds: Range<u64>) -> Hunt {
        let seeds: Vec<u64> = match std::env::var(SEED_VAR) {
            Ok(v) => match v.trim().parse() {
                Ok(seed) => vec![seed],
                Err(_) => panic!("{SEED_VAR}={v:?} is not a seed: give a whole number, e.g. {SEED_VAR}=42"),
            },
            Err(_) => seeds.collect(),
        };
        let test = current_test();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let seed_loop = hunt::SeedLoop { threads, name: "harness-seeds", fall_back: true };
        let (harness, runs) = (self.clone(), seeds.len());
        let ran = seed_loop.run(
            runs,
            move |i| {
                let mut checked = harness.check_in(seeds[i], test.as_deref());
                checked.report = None;
                checked
            },
            &mut |_| false,
        );
        let checked = ran.results.into_iter().map(|(_, c)| c).collect();
        Hunt { checked }
    }
}

/// One seed's run, checked.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The seed that reproduces the run.
    pub seed: u64,
    /// The scenario's name.
    pub scenario: String,
    /// The run's report (`None` when the run failed, and in a [`Hunt`]).
    pub report: Option<Report>,
    /// Every violation of a numbered invariant found.
    pub violations: Vec<Violation>,
    /// Every broken [`Property`] found: the fleet's controls (budgets,
    /// gates, deferral), the model's self-check (`model-limiter`), the
    /// too-careful checks, the give-up reasons, the bounds on waits and
    /// their spread (`jitter-spread`).
    pub fleet: Vec<FleetViolation>,
    /// Why the run did not finish (a client that never returned, cut at the
    /// scenario's `time_limit`; an invalid scenario).
    pub run_error: Option<String>,
    /// The client's blind spots this scenario injects
    /// ([`Subject::blind_spots`]): when there are any, the run cannot show
    /// that the client holds, only what it broke.
    pub not_applicable: Vec<BlindSpot>,
    /// The one-line command that reruns this seed.
    pub replay: String,
}

/// What a checked run says about the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The run finished, every check held, and the client could see every
    /// fault the scenario injects.
    Holds,
    /// The run did not finish, or a check broke (whatever the client could see).
    Broken,
    /// Nothing broke, but the scenario injects a fault class the client's
    /// path cannot show it ([`Checked::not_applicable`]): the checks never
    /// met what they were to judge, so this is no pass.
    NotApplicable,
}

impl Checked {
    /// Whether the run finished, broke nothing, and was applicable to the
    /// client ([`Verdict::Holds`]).
    pub fn passed(&self) -> bool {
        self.verdict() == Verdict::Holds
    }

    /// Holds, broken, or not applicable to this client. A violation is
    /// reported even where the scenario is not applicable: what the client
    /// did is real, only a pass would not be.
    pub fn verdict(&self) -> Verdict {
        if self.run_error.is_some() || !self.violations.is_empty() || !self.fleet.is_empty() {
            Verdict::Broken
        } else if !self.not_applicable.is_empty() {
            Verdict::NotApplicable
        } else {
            Verdict::Holds
        }
    }
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.verdict() {
            Verdict::Holds => {
                return write!(f, "scenario {} seed {}: every invariant holds", self.scenario, self.seed);
            }
            Verdict::NotApplicable => {
                write!(
                    f,
                    "scenario {} seed {}: not applicable to this client, no check broke",
                    self.scenario, self.seed
                )?;
            }
            Verdict::Broken => write!(f, "scenario {} seed {}:", self.scenario, self.seed)?,
        }
        for b in &self.not_applicable {
            write!(
                f,
                "\n  not applicable: the scenario injects {}, which this client cannot see: {}",
                b.class, b.reason
            )?;
        }
        if let Some(e) = &self.run_error {
            write!(f, "\n  the run did not finish: {e}")?;
        }
        for v in &self.violations {
            write!(f, "\n  {v}")?;
        }
        for v in &self.fleet {
            write!(f, "\n  {v}")?;
        }
        write!(f, "\nreplay: {}", self.replay)
    }
}

/// A hunt's results, by seed.
#[derive(Debug, Clone)]
pub struct Hunt {
    /// Every seed checked, in order (without reports, to keep memory flat).
    pub checked: Vec<Checked>,
}

impl Hunt {
    /// The seeds that failed ([`Verdict::Broken`]).
    pub fn failures(&self) -> Vec<&Checked> {
        self.checked.iter().filter(|c| c.verdict() == Verdict::Broken).collect()
    }

    /// The seeds whose scenario was not applicable to the client
    /// ([`Verdict::NotApplicable`]): neither passes nor failures.
    pub fn not_applicable(&self) -> Vec<&Checked> {
        self.checked.iter().filter(|c| c.verdict() == Verdict::NotApplicable).collect()
    }

    /// Panics listing every failing seed (its violations and replay line),
    /// and when no seed at all could be judged (every one not applicable):
    /// a hunt that checked nothing is no pass.
    #[track_caller]
    pub fn assert_clean(&self) {
        let failed = self.failures();
        if !failed.is_empty() {
            let shown: Vec<String> = failed.iter().take(10).map(|c| c.to_string()).collect();
            let more = if failed.len() > 10 { format!("\n... and {} more", failed.len() - 10) } else { String::new() };
            panic!("{} of {} seeds broke an invariant:\n{}{more}", failed.len(), self.checked.len(), shown.join("\n"));
        }
        let not_applicable = self.not_applicable();
        if !self.checked.is_empty() && not_applicable.len() == self.checked.len() {
            panic!(
                "none of the {} seeds applies to this client, so the hunt judged nothing:\n{}",
                self.checked.len(),
                not_applicable[0]
            );
        }
    }
}

/// The run as review text: the report's numbers, then one line per event of
/// worker w0's jobs (a single worker's first six), in virtual-time order.
/// A client that writes no trace is shown as the server saw it. Stable
/// across runs of the same seed, so fit for `insta::assert_snapshot!`.
pub fn trace_text(r: &Report) -> String {
    render_run(r, Show::default_for(r))
}

/// The running test's name: the test harness names each test's thread
/// after it (not with `--test-threads=1`, which runs them on `main`).
fn current_test() -> Option<String> {
    std::thread::current().name().filter(|n| *n != "main").map(str::to_owned)
}

/// `RETRYSIM_SEED=<seed> cargo test <test> -- --exact`.
fn replay_line(seed: u64, test: Option<&str>) -> String {
    match test {
        Some(test) => format!("{SEED_VAR}={seed} cargo test {test} -- --exact"),
        None => format!("{SEED_VAR}={seed} cargo test"),
    }
}
