//! The seed runner: one seed run and judged ([`check_seed`]), and a range
//! of them on the shared [`SeedLoop`] ([`hunt`], [`catches`]).

use std::panic::{AssertUnwindSafe, catch_unwind};

use serde::Serialize;

use super::seed_loop::SeedLoop;
use super::{Finding, Kind, SeedResult, Target, judge};
use crate::sim::checks::invariants::{self as check, Invariant, Violation};
use crate::sim::run::runner::RunOptions;
use crate::sim::run::scenario::Scenario;

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default()
}

/// Runs one seed under `options` and judges it by [`judge`] (invariants
/// 1–7, 9, 11, 12 and 13 from the trace and, black-box, from the ledger, 10
/// when the scenario qualifies, the fleet checks and the model's), and by 8
/// when `determinism` is set (a second run).
pub fn check_seed(seed: u64, target: &Target, determinism: bool, options: &RunOptions) -> SeedResult {
    let s = target.scenario(seed);
    let replay = target.replay(seed);
    let ran = target.kind.resolve(seed);
    let liveness = check::liveness_expected(&s).is_ok();
    let mut result = SeedResult {
        seed,
        kind: ran,
        virtual_ms: 0,
        jobs: s.fleet.jobs as u64,
        determinism_checked: determinism,
        liveness_checked: liveness,
        findings: Vec::new(),
    };
    // A run the wall-time bound stopped says so, and its replay line raises the bound.
    let wall_bound = std::cell::Cell::new(None);
    let run = |s: &Scenario| match catch_unwind(AssertUnwindSafe(|| options.run(s, seed))) {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) if e.wall_bound.is_some() => {
            wall_bound.set(e.wall_bound);
            Err(format!("the wall-time bound stopped the run, not a verdict on the client ({})", e.message))
        }
        Ok(Err(e)) => Err(format!(
            "the simulation did not finish ({}); the time limit covers every job's deadline, so a job outlived it or a host hung",
            e.message
        )),
        Err(p) => Err(format!("the simulation panicked: {}", panic_text(p.as_ref()))),
    };
    let failed = |message: String| {
        let longer =
            wall_bound.get().map(|b| format!(" --max-wall {}m", b.as_secs().saturating_mul(6).div_ceil(60).max(1)));
        Finding {
            seed,
            kind: ran,
            invariant: "run-failed".into(),
            count: 1,
            message,
            replay: format!("{replay}{}", longer.unwrap_or_default()),
        }
    };
    let first = match run(&s) {
        Ok(r) => r,
        Err(message) => {
            result.findings.push(failed(message));
            return result;
        }
    };
    result.virtual_ms = first.virtual_ms;
    let (mut violations, fleet) = judge(&first);
    let mut fleet_by: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for x in fleet {
        fleet_by.entry(x.check.name()).or_default().push(x.message);
    }
    if determinism {
        match run(&s) {
            Ok(second) => violations.extend(check::check_determinism(&first, &second)),
            Err(message) => result.findings.push(failed(format!("second run for determinism: {message}"))),
        }
    }
    let mut by: std::collections::BTreeMap<Invariant, Vec<Violation>> = Default::default();
    for x in violations {
        by.entry(x.invariant).or_default().push(x);
    }
    for (invariant, xs) in by {
        result.findings.push(Finding {
            seed,
            kind: ran,
            invariant: invariant.to_string(),
            count: xs.len(),
            message: xs[0].message.clone(),
            replay: replay.clone(),
        });
    }
    for (property, xs) in fleet_by {
        result.findings.push(Finding {
            seed,
            kind: ran,
            invariant: property.to_owned(),
            count: xs.len(),
            message: xs[0].clone(),
            replay: replay.clone(),
        });
    }
    result
}

/// Which seeds a hunt repeats to check determinism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeterminismSample {
    /// Every seed: twice the cost.
    Every,
    /// Seeds divisible by this number.
    OneIn(u64),
    /// None.
    Off,
}

impl DeterminismSample {
    /// Whether seed `seed` runs twice.
    pub fn applies(self, seed: u64) -> bool {
        match self {
            DeterminismSample::Every => true,
            DeterminismSample::OneIn(n) => n > 0 && seed.is_multiple_of(n),
            DeterminismSample::Off => false,
        }
    }
}

/// A hunt's range and resources.
#[derive(Debug, Clone, Copy)]
pub struct HuntConfig {
    /// The first seed.
    pub start: u64,
    /// How many seeds, from `start` on.
    pub seeds: u64,
    /// What each seed draws.
    pub target: Target,
    /// Worker threads (at least one is used).
    pub threads: usize,
    /// Which seeds run twice to check the two runs agree.
    pub determinism: DeterminismSample,
    /// How each run is stepped and watched (its wall-time bound, say).
    pub options: RunOptions,
}

/// Runs `config.seeds` seeds from `config.start` on worker threads and
/// returns their results sorted by seed. `progress` is called by the worker
/// threads after each seed with (seeds done, findings so far).
pub fn hunt(config: &HuntConfig, progress: &(dyn Fn(u64, u64) + Sync)) -> Vec<SeedResult> {
    let (mut done, mut found) = (0, 0);
    let seed_loop = SeedLoop { threads: config.threads, name: "hunt-seeds", fall_back: true };
    let ran = seed_loop.run(seed_runs(config), run_seed(*config), &mut |r| {
        if let Some((_, r)) = r {
            done += 1;
            found += r.findings.len() as u64;
            progress(done, found);
        }
        false
    });
    ran.results.into_iter().map(|(_, r)| r).collect()
}

/// What a watched hunt ([`hunt_watched`]) came to.
#[derive(Debug)]
pub struct Hunted {
    /// The seeds that finished, sorted by seed.
    pub results: Vec<SeedResult>,
    /// The worker threads that ran them.
    pub threads: usize,
    /// Why a worker thread could not start, if one could not: with no
    /// thread at all, no seed ran.
    pub refused: Option<std::io::Error>,
}

/// [`hunt`], watched: `watch` is called on this thread with each seed's
/// result as it comes (`Some`), before each worker thread starts and every
/// 50 ms while it waits (`None`). When it returns true the hunt returns at
/// once with the seeds that finished; the seeds under way finish in their
/// threads, unread (a signal does not wait for a long run).
pub fn hunt_watched(config: &HuntConfig, watch: &mut dyn FnMut(Option<&SeedResult>) -> bool) -> Hunted {
    let seed_loop = SeedLoop { threads: config.threads, name: "hunt-seeds", fall_back: false };
    let ran = seed_loop.run(seed_runs(config), run_seed(*config), &mut |r| watch(r.map(|(_, r)| r)));
    Hunted { results: ran.results.into_iter().map(|(_, r)| r).collect(), threads: ran.threads, refused: ran.refused }
}

/// How many seeds `config` runs, as the seed loop counts runs.
fn seed_runs(config: &HuntConfig) -> usize {
    usize::try_from(config.seeds).unwrap_or(usize::MAX)
}

/// Run `i` of `config`'s seed loop: seed `start + i`, checked.
fn run_seed(config: HuntConfig) -> impl Fn(usize) -> SeedResult + Send + Sync + 'static {
    move |i| {
        let seed = config.start + i as u64;
        check_seed(seed, &config.target, config.determinism.applies(seed), &config.options)
    }
}

/// How a hunt with one deliberate defect fared: what `retrysim hunt
/// --start START --seeds SEEDS --sabotage DEFECT` reports as failing seeds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Catch {
    /// The defect (one of [`DEFECTS`](super::DEFECTS)).
    pub defect: &'static str,
    /// The first failing seed, if any.
    pub first: Option<u64>,
    /// How many seeds failed.
    pub caught: u64,
    /// How many seeds ran.
    pub seeds: u64,
    /// Failing seeds per finding (invariant or check), as the summary counts them.
    pub by_finding: std::collections::BTreeMap<String, u64>,
}

/// Hunts seeds `start..start + seeds` of [`Kind::All`] with `defect` on
/// (determinism not checked: a defect is deterministic too), on `threads`.
pub fn catches(defect: &'static str, start: u64, seeds: u64, threads: usize) -> Catch {
    let mut target = Target::of(Kind::All);
    assert!(target.sabotage.set(defect), "unknown defect {defect}");
    let config = HuntConfig {
        start,
        seeds,
        target,
        threads,
        determinism: DeterminismSample::Off,
        options: RunOptions::default(),
    };
    let results = hunt(&config, &|_, _| {});
    let failing: Vec<&SeedResult> = results.iter().filter(|r| !r.findings.is_empty()).collect();
    let mut by_finding = std::collections::BTreeMap::new();
    for f in failing.iter().flat_map(|r| &r.findings) {
        *by_finding.entry(f.invariant.clone()).or_default() += 1;
    }
    Catch { defect, first: failing.first().map(|r| r.seed), caught: failing.len() as u64, seeds, by_finding }
}
