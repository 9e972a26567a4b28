//! `retrysim hunt`: many seeds, each its own random scenario and fault
//! schedule, every invariant checked, and for each failing seed the command
//! that reproduces it. Seed ranges (`--start`, `--seeds`) let a CI matrix
//! shard a large hunt.
//!
//! Standard output is a function of the arguments (results are sorted by
//! seed). Progress (a bar on a terminal, else a line every few seconds), and
//! the wall-clock throughput at the end, go to standard error. On SIGINT or
//! SIGTERM it prints the summary of the seeds that finished, every failing
//! one's replay line with it, and exits 130 or 143.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use crate::sim::checks::hunt::{self, DeterminismSample, Finding, HuntConfig, Kind, SeedResult, Target};
use crate::sim::checks::shards;
use crate::sim::run::work::{Work, WorkTally};
use clap::{Args, ValueEnum};

use super::progress::{self, Meter};
use super::{Format, MAX_THREADS, Outcome, UserError, WallArgs, default_threads, read_bounded};

/// Which scenarios to draw.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum KindArg {
    /// 2–16 workers sharing a queue of jobs.
    Fleet,
    /// One worker, one to three jobs.
    Single,
    /// Each seed picks one of the two.
    All,
}

impl From<KindArg> for Kind {
    fn from(k: KindArg) -> Kind {
        match k {
            KindArg::Fleet => Kind::Fleet,
            KindArg::Single => Kind::Single,
            KindArg::All => Kind::All,
        }
    }
}

/// Arguments of `retrysim hunt`.
#[derive(Debug, Args)]
pub struct HuntArgs {
    /// How many seeds to run (the default catches every deliberate defect
    /// of `--sabotage` on at least 10 seeds; about 2 s on two cores).
    #[arg(long, default_value_t = 500)]
    seeds: u64,
    /// The first seed; the hunt runs START..START+SEEDS.
    #[arg(long, default_value_t = 1)]
    start: u64,
    /// Which scenarios the seeds draw.
    #[arg(long, value_enum, default_value = "all")]
    scenario_kind: KindArg,
    /// Worker threads, 1 to 256 (default: the available cores, at most
    /// 256; never more than the seeds). The output does not depend on it.
    #[arg(long, value_name = "THREADS", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_THREADS)))]
    jobs: Option<u32>,
    /// Run a seed twice to check determinism (invariant 8) when the seed is
    /// divisible by this number; 1 (every seed, about twice the time) is the
    /// default, 0 checks none.
    #[arg(long, default_value_t = 1, value_name = "N")]
    determinism_every: u64,
    /// Turn on a deliberate defect in every policy (a negative control: the
    /// hunt must then find violations). Repeatable. An unknown name lists
    /// them all (`sim::run::defects::NAMES`).
    #[arg(long, value_name = "DEFECT")]
    sabotage: Vec<String>,
    /// Print seed SEED's scenario as TOML (for `retrysim run --config FILE --seed SEED`) and exit.
    #[arg(long, value_name = "SEED", conflicts_with_all = ["seeds", "start", "jobs"])]
    dump: Option<u64>,
    /// Merge shard summaries (files written by `--format json`, one seed
    /// range each) into one verdict, and exit 1 if any shard failed.
    #[arg(long, value_name = "SUMMARY", num_args = 1.., conflicts_with_all = ["seeds", "start", "jobs", "dump", "sabotage"])]
    merge: Vec<std::path::PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// After the verdict, print the work the hunt did, counted: simulations,
    /// steps, host polls, messages delivered, requests and timer wakes, in
    /// all and by kind (every run counts, a determinism check's second run
    /// too). The verdict is the same with or without it.
    #[arg(long, conflicts_with_all = ["dump", "merge"])]
    work: bool,
    #[command(flatten)]
    wall: WallArgs,
}

/// Runs the hunt (or dumps one seed's scenario).
pub fn run(args: HuntArgs) -> Outcome {
    let mut target = Target::of(Kind::from(args.scenario_kind));
    for name in &args.sabotage {
        if !target.sabotage.set(name) {
            return Err(UserError(format!("unknown defect {name:?}; the defects are: {}", hunt::DEFECTS.join(", "))));
        }
    }
    if !args.merge.is_empty() {
        return merge(&args.merge, args.format);
    }
    if let Some(seed) = args.dump {
        return Ok((target.scenario(seed).to_toml().trim_end().to_owned(), ExitCode::SUCCESS));
    }
    if args.seeds == 0 {
        return Err(UserError("--seeds must be at least 1".into()));
    }
    if args.start.checked_add(args.seeds - 1).is_none() {
        return Err(UserError(format!(
            "--start {} --seeds {} runs past the last seed, {}",
            args.start,
            args.seeds,
            u64::MAX
        )));
    }
    let threads = match args.jobs {
        Some(n) => n as usize,
        None => default_threads(),
    };
    // More threads than seeds would only wait.
    let threads = threads.min(usize::try_from(args.seeds).unwrap_or(usize::MAX)).max(1);
    let determinism = match args.determinism_every {
        0 => DeterminismSample::Off,
        1 => DeterminismSample::Every,
        n => DeterminismSample::OneIn(n),
    };
    let mut options = args.wall.options(None);
    // One tally a hunt, shared by its threads, for the process's life.
    let tally: Option<&'static WorkTally> = args.work.then(|| &*Box::leak(Box::default()));
    if let Some(tally) = tally {
        options = options.count_work(tally);
    }
    let config = HuntConfig { start: args.start, seeds: args.seeds, target, threads, determinism, options };

    progress::catch_interrupts(
        "hunt",
        progress::GRACE,
        "the summary was not ready within a second, so it is not printed",
    );
    let began = Instant::now();
    let results = run_seeds(&config)?;
    let wall = began.elapsed();

    let mut summary = Summary::of(&config, &results);
    let signal = progress::interrupted();
    if let Some((name, _)) = signal {
        summary.interrupted = Some(format!(
            "hunt: interrupted by {name} after {} of {} seeds; what follows covers the seeds that finished",
            summary.seeds_run, config.seeds
        ));
    }
    let virtual_s = summary.virtual_ms as f64 / 1000.0;
    eprintln!(
        "hunt: {} in {:.2}s wall on {threads} thread{}: {} seeds/s, {:.0}x virtual/wall ({:.0}s virtual)",
        seeds(summary.seeds_run),
        wall.as_secs_f64(),
        if threads == 1 { "" } else { "s" },
        per_second(summary.seeds_run as f64 / wall.as_secs_f64().max(1e-9)),
        virtual_s / wall.as_secs_f64().max(1e-9),
        virtual_s,
    );
    let code = match signal {
        Some((_, code)) => ExitCode::from(code),
        None if summary.violations.is_empty() => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    };
    summary.work = tally.map(|t| WorkByKind::of(&t.by_seed(), config.target.kind));
    let out = match args.format {
        Format::Json => serde_json::to_string_pretty(&summary).expect("a summary serialises"),
        Format::Text => summary.text(),
    };
    Ok((out, code))
}

/// `--work`: the work of a hunt's runs, in all and by the kind each seed drew.
#[derive(Debug, serde::Serialize)]
struct WorkByKind {
    all: WorkFigures,
    by_kind: BTreeMap<Kind, WorkFigures>,
}

/// One line of `--work`.
#[derive(Debug, Default, serde::Serialize)]
struct WorkFigures {
    seeds: u64,
    simulations: u64,
    steps: u64,
    host_polls: u64,
    messages_delivered: u64,
    requests: u64,
    timer_wakes: u64,
}

impl WorkFigures {
    fn add(&mut self, w: &Work) {
        self.seeds += 1;
        self.simulations += w.runs;
        self.steps += w.steps;
        self.host_polls += w.host_polls;
        self.messages_delivered += w.messages_delivered;
        self.requests += w.requests;
        self.timer_wakes += w.timer_wakes;
    }

    fn line(&self, what: &str) -> String {
        format!(
            "work ({what}): {} over {} simulations of {}: {} steps, {} host polls, {} messages delivered, {} requests, {} timer wakes",
            seeds(self.seeds),
            self.simulations,
            if self.seeds == 1 { "it" } else { "them" },
            self.steps,
            self.host_polls,
            self.messages_delivered,
            self.requests,
            self.timer_wakes
        )
    }
}

impl WorkByKind {
    fn of(by_seed: &BTreeMap<u64, Work>, kind: Kind) -> WorkByKind {
        let mut w = WorkByKind { all: WorkFigures::default(), by_kind: BTreeMap::new() };
        for (&seed, work) in by_seed {
            w.all.add(work);
            w.by_kind.entry(kind.resolve(seed)).or_default().add(work);
        }
        w
    }

    fn text(&self) -> String {
        let mut lines = vec![self.all.line("all")];
        lines.extend(self.by_kind.iter().map(|(k, f)| f.line(&k.to_string())));
        lines.join("\n")
    }
}

/// Runs the seeds on `config.threads` threads, with a progress meter, until
/// they are all done or a signal arrives; the results sorted by seed. On a
/// signal the threads still running a seed are left to the process's exit:
/// the summary does not wait for them. A signal that comes while the
/// threads start stops the starting too; when the system refuses a thread,
/// the hunt goes on with those it has (an error if it has none).
fn run_seeds(config: &HuntConfig) -> Result<Vec<SeedResult>, UserError> {
    let meter = Meter::new("hunt", "seeds", config.seeds);
    let (mut done, mut failing) = (0u64, 0u64);
    let hunted = hunt::hunt_watched(config, &mut |r| {
        if let Some(r) = r {
            done += 1;
            failing += u64::from(!r.findings.is_empty());
        }
        meter.set(done, &format!(", {failing} failing"));
        progress::interrupted().is_some()
    });
    meter.finish();
    match hunted.refused {
        Some(e) if hunted.threads == 0 => return Err(UserError(format!("cannot start a worker thread: {e}"))),
        Some(e) => {
            eprintln!(
                "warning: hunt runs on {} threads, not {}: cannot start more ({e})",
                hunted.threads, config.threads
            )
        }
        None => {}
    }
    Ok(hunted.results)
}

/// `--merge`: shard summaries into one verdict. Each file is read (at most
/// [`shards::MAX_SUMMARY_BYTES`]) and checked on its own, then dropped:
/// memory holds the findings, not the files.
fn merge(files: &[std::path::PathBuf], format: Format) -> Outcome {
    let mut parsed = Vec::new();
    for f in files {
        let name = f.display().to_string();
        let text = read_bounded(f, shards::MAX_SUMMARY_BYTES, "a shard summary")?;
        parsed.push(shards::parse_shard(&name, &text).map_err(UserError)?);
    }
    let merged = shards::merge_shards(parsed).map_err(UserError)?;
    let code = if merged.violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    let out = match format {
        Format::Json => serde_json::to_string_pretty(&merged).expect("a merged summary serialises"),
        Format::Text => merged.text(),
    };
    Ok((out, code))
}

/// What a hunt found, as printed.
#[derive(Debug, serde::Serialize)]
struct Summary {
    start: u64,
    seeds_run: u64,
    scenario_kind: Kind,
    /// Deliberate defects turned on (`--sabotage`).
    sabotage: Vec<&'static str>,
    /// Seeds of each concrete kind.
    kinds: BTreeMap<Kind, u64>,
    determinism_checked: u64,
    liveness_checked: u64,
    /// Virtual time simulated, over all first runs.
    virtual_ms: u64,
    jobs: u64,
    /// Findings per invariant (violations counted once per seed).
    by_invariant: BTreeMap<String, u64>,
    violations: Vec<Finding>,
    /// Set when a signal stopped the hunt early: the line that says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    interrupted: Option<String>,
    /// The last seed that ran.
    #[serde(skip)]
    last: u64,
    /// `--work`: what the runs did, counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    work: Option<WorkByKind>,
}

impl Summary {
    fn of(config: &HuntConfig, results: &[SeedResult]) -> Summary {
        let mut s = Summary {
            start: config.start,
            seeds_run: results.len() as u64,
            scenario_kind: config.target.kind,
            sabotage: config.target.sabotage.names(),
            kinds: BTreeMap::new(),
            determinism_checked: results.iter().filter(|r| r.determinism_checked).count() as u64,
            liveness_checked: results.iter().filter(|r| r.liveness_checked).count() as u64,
            virtual_ms: results.iter().map(|r| r.virtual_ms).sum(),
            jobs: results.iter().map(|r| r.jobs).sum(),
            by_invariant: BTreeMap::new(),
            violations: Vec::new(),
            interrupted: None,
            work: None,
            last: results.last().map_or(config.start, |r| r.seed),
        };
        for r in results {
            *s.kinds.entry(r.kind).or_default() += 1;
            for f in &r.findings {
                *s.by_invariant.entry(f.invariant.clone()).or_default() += 1;
                s.violations.push(f.clone());
            }
        }
        s
    }

    fn text(&self) -> String {
        let verdict = self.verdict();
        match &self.work {
            Some(work) => format!("{verdict}\n{}", work.text()),
            None => verdict,
        }
    }

    fn verdict(&self) -> String {
        let mut out = String::new();
        if let Some(line) = &self.interrupted {
            let _ = writeln!(out, "{line}");
        }
        let last = self.last;
        let kinds: Vec<String> = self.kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let failing: std::collections::BTreeSet<u64> = self.violations.iter().map(|f| f.seed).collect();
        let sabotage =
            if self.sabotage.is_empty() { String::new() } else { format!(", sabotage: {}", self.sabotage.join(" + ")) };
        // An interrupted hunt leaves the seeds that were running unfinished:
        // the range then holds more seeds than ran.
        let finished = if self.interrupted.is_some() && last - self.start + 1 != self.seeds_run {
            format!(", {} of them finished", self.seeds_run)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "hunt: seeds {}..={last}{finished} ({}; {}{sabotage}), {} failing",
            self.start,
            self.scenario_kind,
            kinds.join(", "),
            failing.len()
        );
        let _ = writeln!(
            out,
            "checked: invariants 1-7, 9, 11-13, the fleet checks, the too-careful checks, the give-up reasons, the bounds on waits and the model's limiter, advice, RateLimit headers, idempotency store, script, concurrency cap, run times, polls, credits, lost answers, keep-alive and close races on {}, determinism (8) on {}, liveness (10) on {}; {} jobs, {} s virtual",
            seeds(self.seeds_run),
            self.determinism_checked,
            self.liveness_checked,
            self.jobs,
            self.virtual_ms / 1000
        );
        if self.violations.is_empty() {
            let _ = write!(out, "no violations");
            return out;
        }
        let _ = writeln!(out, "violations by invariant (seeds):");
        for (inv, n) in &self.by_invariant {
            let _ = writeln!(out, "  {inv:<28} {n}");
        }
        let _ = writeln!(out, "failing seeds:");
        for f in &self.violations {
            let more = if f.count > 1 { format!(" (and {} more)", f.count - 1) } else { String::new() };
            let _ = writeln!(out, "  seed {} [{}] {}: {}{more}", f.seed, f.kind, f.invariant, f.message);
            let _ = writeln!(out, "    replay: {}", f.replay);
        }
        let first = &self.violations[0];
        let seed = first.seed;
        let dump = first.replay.replace(&format!("--seeds 1 --start {seed}"), &format!("--dump {seed}"));
        let _ = write!(
            out,
            "to inspect a seed's scenario and trace: {dump} > seed-{seed}.toml && retrysim trace --config seed-{seed}.toml --seed {seed}"
        );
        out
    }
}

/// `1 seed`, `2 seeds`.
fn seeds(n: u64) -> String {
    if n == 1 { "1 seed".into() } else { format!("{n} seeds") }
}

/// A rate with the digits it needs: `13`, `0.4` (a slow seed is not `0`).
fn per_second(rate: f64) -> String {
    if rate >= 10.0 { format!("{rate:.0}") } else { format!("{rate:.1}") }
}
