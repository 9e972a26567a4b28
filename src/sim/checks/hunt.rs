//! Regression hunting: many seeds, each its own random scenario ("swarm"
//! testing, as TigerBeetle's VOPR does), every invariant checked.
//!
//! [`swarm`] turns one seed into a whole scenario — API, limiter, advice form,
//! clock skew, fleet, operation mix, policy, network and an explicit fault
//! schedule — deterministically, from `derive(seed, "swarm", 0)` and PCG-64.
//! The runner then uses the same seed for the run itself (its own streams), so
//! `(seed, kind)` alone reproduces everything, on one commit and lockfile.
//!
//! [`hunt`] runs a range of seeds on worker threads (each runs whole
//! simulations) and returns the results sorted by seed, so its output does
//! not depend on the number of threads or on scheduling.
//!
//! Its parts: the world generator (`hunt/worlds.rs`: [`swarm`]), the checks
//! every run is judged by ([`judge`], here), the seed runner
//! (`hunt/seeds.rs`: [`check_seed`], [`hunt`]) on the one seed loop that
//! `retrysim compare` and `testing::Harness::hunt` share too
//! (`hunt/seed_loop.rs`), and the merging of shards
//! (`sim::checks::shards`: [`merge_summaries`]).
//!
//! Swarm scenarios are bounded so that a hunt stays fast: short limiter
//! windows and deadlines, at most 16 workers, 200 jobs and six jobs per
//! worker, faults within the first 8 s. About three in ten are *calm*: only
//! keyed jobs, nothing terminal, faults that heal, and an ample policy, so
//! that liveness ([`liveness_expected`](crate::sim::checks::invariants::liveness_expected)) is checked on them too.
//!
//! Determinism (invariant 8) costs a second run of the seed. Measured on two
//! shared cores, a seed averages about 2 ms of CPU per run (about 6 s of
//! virtual time; the runner skips idle ticks), so checking every seed keeps
//! `retrysim hunt --seeds 1000` at about 2 s (3.8 s of CPU, `/usr/bin/time`):
//! the CLI checks every seed unless told to sample
//! ([`DeterminismSample`]). Running every seed twice, in parallel threads,
//! is also what found the task-order bug fixed in `sim::world::net::serve`.

use serde::Serialize;

use crate::sim::checks::check_report;
use crate::sim::checks::invariants::Violation;
// Named only by the docs of `judge` and `Finding` (the seed runner moved to `hunt/seeds.rs`).
#[allow(unused_imports)]
use crate::sim::checks::invariants::{self as check, Invariant};
use crate::sim::run::defects::Defects;
use crate::sim::run::scenario::Scenario;
use crate::sim::run::seed::derive;

mod seed_loop;
mod seeds;
mod worlds;
#[cfg(test)]
mod worlds_tests;

pub(crate) use seed_loop::SeedLoop;
pub use seeds::{Catch, DeterminismSample, HuntConfig, catches, check_seed, hunt, hunt_watched};
pub use worlds::{make_ample, swarm, time_limit};

/// Which scenarios a hunt draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// 2–16 workers sharing a queue of jobs: limiter contention, fleet faults.
    Fleet,
    /// One worker, one to three jobs: one operation's decisions up close.
    Single,
    /// Each seed picks `fleet` or `single` (from the seed).
    All,
}

impl Kind {
    /// The name the CLI uses.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Fleet => "fleet",
            Kind::Single => "single",
            Kind::All => "all",
        }
    }

    /// The concrete kind a seed runs: `All` picks one from the seed.
    pub fn resolve(self, seed: u64) -> Kind {
        match self {
            Kind::All if derive(seed, "swarm-kind", 0).is_multiple_of(2) => Kind::Fleet,
            Kind::All => Kind::Single,
            k => k,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The deliberate defects, by the names the CLI uses (see [`Defects`]).
pub use crate::sim::run::defects::NAMES as DEFECTS;

/// What a hunt draws for each seed: the kind of scenario, and optionally
/// deliberate defects in every policy (a negative control: the hunt must
/// then find violations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The kind of scenario every seed draws.
    pub kind: Kind,
    /// Defects put into every policy; none for an honest hunt.
    pub sabotage: Defects,
}

impl Target {
    /// Swarm scenarios of `kind`, policies as drawn.
    pub fn of(kind: Kind) -> Target {
        Target { kind, sabotage: Defects::default() }
    }

    /// Seed `seed`'s scenario: [`swarm`], with the defects turned on.
    pub fn scenario(&self, seed: u64) -> Scenario {
        let mut s = swarm(seed, self.kind);
        s.client.defects = self.sabotage;
        s.api.window_admits_one_more = self.sabotage.window_admits_one_more;
        s.api.advice_rounds_down = self.sabotage.advice_rounds_down;
        s.api.store_forgets_answers = self.sabotage.store_forgets_answers;
        s
    }

    /// The one-line command that reproduces seed `seed` of this hunt.
    pub fn replay(&self, seed: u64) -> String {
        let mut cmd = format!("retrysim hunt --seeds 1 --start {seed} --scenario-kind {}", self.kind);
        for d in self.sabotage.names() {
            cmd.push_str(" --sabotage ");
            cmd.push_str(d);
        }
        cmd
    }
}

/// One finding of a hunt: a broken invariant, or a run that failed outright.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The seed that shows it.
    pub seed: u64,
    /// The kind the seed ran (`fleet` or `single`).
    pub kind: Kind,
    /// The invariant's name (see [`Invariant`]), or `run-failed` when the
    /// simulation stopped or panicked.
    pub invariant: String,
    /// How many violations of this invariant the seed had.
    pub count: usize,
    /// The first one.
    pub message: String,
    /// The command that reproduces it.
    pub replay: String,
}

/// What one seed came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeedResult {
    /// The seed run.
    pub seed: u64,
    /// The kind of scenario it drew.
    pub kind: Kind,
    /// Virtual time the run simulated (0 when it failed).
    pub virtual_ms: u64,
    /// Jobs the scenario ran.
    pub jobs: u64,
    /// Whether the seed's run was repeated to check determinism.
    pub determinism_checked: bool,
    /// Whether liveness applied to it.
    pub liveness_checked: bool,
    /// What the checks found; empty when the seed passed.
    pub findings: Vec<Finding>,
}

/// Every check one run is judged by, but determinism (it needs a second
/// run, [`check::check_determinism`]): the trace-based and black-box
/// invariants with liveness where it applies ([`check_report`]), then every
/// property of the registry's judges
/// (`judges::check_properties`:
/// the fleet controls, the model's self-check, the too-careful checks, the
/// give-up reasons, the bounds on waits and their spread). [`check_seed`] and
/// `testing::Harness::check` both judge by it, so a user's `cargo test` and
/// `retrysim hunt` agree.
pub fn judge(r: &crate::sim::run::runner::Report) -> (Vec<Violation>, Vec<crate::sim::checks::fleet::FleetViolation>) {
    (check_report(r), crate::sim::checks::judges::check_properties(r))
}
