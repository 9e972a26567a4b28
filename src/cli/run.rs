//! `retrysim scenarios`, `retrysim run` and `retrysim trace`: one scenario,
//! one seed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::sim::run::render::{Show, render_run};
use crate::sim::run::runner::{Progress, Report, Traces};
use crate::sim::run::scenario::{self, Scenario};
use crate::sim::tools::timeline::Timeline;
use clap::Args;

use super::{
    Format, Outcome, ScenarioSource, UserError, WallArgs, check_writable, policy_named, wall_stopped, warn_long,
    write_svg,
};
use super::{progress, terminal};

/// Arguments of `retrysim scenarios`.
#[derive(Debug, Args)]
pub struct ScenariosArgs {
    /// Print this scenario as TOML, to copy, edit and pass to `run --config`.
    #[arg(long, value_name = "NAME")]
    show: Option<String>,
    /// A name without `--show`: refused with the command that shows it.
    #[arg(hide = true, conflicts_with = "show")]
    name: Option<String>,
}

/// Lists the named scenarios, or prints one as TOML.
pub fn scenarios(args: ScenariosArgs) -> Outcome {
    if let Some(name) = args.name {
        let hint = match scenario::named(&name) {
            Some(_) => format!("to print that scenario as TOML, write: retrysim scenarios --show {name}"),
            None => format!("{}; `retrysim scenarios --show NAME` prints one", scenario::unknown(&name)),
        };
        return Err(UserError(format!("unexpected argument {name:?}: {hint}")));
    }
    if let Some(name) = args.show {
        let s = scenario::named(&name).ok_or_else(|| UserError(scenario::unknown(&name)))?;
        return Ok((s.to_toml(), ExitCode::SUCCESS));
    }
    let width = scenario::NAMES.iter().map(|n| n.len()).max().unwrap_or(0);
    let lines: Vec<String> = scenario::NAMES
        .iter()
        .map(|n| format!("{n:width$}  {}", scenario::named(n).expect("every listed name resolves").description))
        .collect();
    Ok((lines.join("\n"), ExitCode::SUCCESS))
}

/// Which scenario, seed and policy: shared by `run` and `trace`.
#[derive(Debug, Args)]
pub struct Target {
    #[command(flatten)]
    source: ScenarioSource,
    /// The master seed: the same seed gives the same run, byte for byte.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Replace the scenario's policy with a preset (interactive, background, batch, standard).
    #[arg(long)]
    policy: Option<String>,
    #[command(flatten)]
    wall: WallArgs,
    /// Also write the run's timeline to this file as an SVG picture: each
    /// attempt by outcome, the waits, requests per limiter window against
    /// capacity, the faults.
    #[arg(long, value_name = "FILE.svg")]
    svg: Option<PathBuf>,
}

impl Target {
    /// The scenario to run, with the policy override applied.
    pub fn scenario(&self) -> Result<Scenario, UserError> {
        let mut s = self.source.load()?;
        if let Some(p) = &self.policy {
            s.policy = policy_named(p)?;
        }
        Ok(s)
    }

    /// Runs it, keeping the whole trace of the jobs `traces` names: the
    /// wall time bounded by `--max-wall`, a line on standard error every few
    /// seconds while it goes on, and a warning first for a scenario that may
    /// run for hours.
    pub fn run(&self, command: &'static str, s: &Scenario, traces: Traces) -> Result<Report, UserError> {
        if let Some(path) = &self.svg {
            check_writable(path, "--svg")?;
        }
        // A run has nothing partial to print: a signal ends it at once.
        progress::catch_interrupts(command, Duration::ZERO, "the run did not finish");
        warn_long(s);
        let options = self.wall.options(Some(run_progress)).traces(traces);
        let report = options.run(s, self.seed).map_err(|e| match e.wall_bound {
            Some(_) => wall_stopped(&e, &self.replay(command)),
            // The CLI's own replay line: `--config FILE` where the run read one.
            None => UserError(format!(
                "scenario {} seed {} did not finish: {}\nreplay: {}",
                e.scenario,
                e.seed,
                e.message,
                self.replay(command)
            )),
        })?;
        if let Some(path) = &self.svg {
            write_svg(path, &Timeline::of_report(&report).to_svg())?;
        }
        Ok(report)
    }

    /// The command line that runs this target again.
    fn replay(&self, command: &str) -> String {
        let what = self.source.replay_args();
        let policy = self.policy.as_ref().map(|p| format!(" --policy {p}")).unwrap_or_default();
        format!("retrysim {command} {what} --seed {}{policy}", self.seed)
    }
}

/// A long run's sign of life (see [`RunOptions::progress`](crate::sim::run::runner::RunOptions::progress)).
fn run_progress(p: &Progress<'_>) {
    eprintln!(
        "run: {} seed {}: {} s of virtual time (time_limit {}), {}/{} jobs ended, {} s wall",
        terminal::printable(p.scenario),
        p.seed,
        p.virtual_time.as_secs(),
        humantime::format_duration(p.time_limit),
        p.jobs_ended,
        p.jobs,
        p.wall.as_secs()
    );
}

/// Arguments of `retrysim run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    target: Target,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// Runs one scenario and prints its report.
pub fn run(args: RunArgs) -> Outcome {
    // The report's figures only: no job keeps its events.
    let report = args.target.run("run", &args.target.scenario()?, Traces::None)?;
    let out = match args.format {
        Format::Json => serde_json::to_string_pretty(&report).expect("reports serialise"),
        Format::Text => report.render_text(),
    };
    Ok((out, ExitCode::SUCCESS))
}

/// Arguments of `retrysim trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(flatten)]
    target: Target,
    /// Show every job of this worker (e.g. 0 for w0) instead of the first jobs.
    #[arg(long, value_name = "ID")]
    client: Option<u32>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// Prints the run's trace: the same text the snapshots hold.
pub fn trace(args: TraceArgs) -> Outcome {
    let s = args.target.scenario()?;
    let show = match args.client {
        Some(w) if w >= s.fleet.workers => {
            return Err(UserError(format!("--client {w}: this scenario has workers 0..={}", s.fleet.workers - 1)));
        }
        Some(w) => Show::Client(w),
        None => Show::default_for_scenario(&s),
    };
    // Only the jobs shown keep their events.
    let traces = match show {
        Show::Client(w) => Traces::Worker(w),
        Show::FirstJobs(n) => Traces::FirstJobs(u32::try_from(n).unwrap_or(u32::MAX)),
    };
    let report = args.target.run("trace", &s, traces)?;
    let out = match args.format {
        Format::Text => render_run(&report, show).trim_end().to_owned(),
        Format::Json => {
            serde_json::to_string_pretty(&crate::sim::run::render::trace_json(&report, show)).expect("traces serialise")
        }
    };
    Ok((out, ExitCode::SUCCESS))
}
