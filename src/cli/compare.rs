//! `retrysim compare`: every policy row of a preset on several seeds, side by side.

use std::process::ExitCode;

use crate::sim::run::runner::{Report, RunError, RunOptions, Traces};
use crate::sim::run::scenario::GateConfig;
use crate::sim::tools::compare::{self, DEFAULT_SEEDS};
use crate::sim::tools::timeline;
use clap::builder::PossibleValuesParser;
use clap::{Args, ValueEnum};

use super::progress::{self, Meter};
use super::{MAX_THREADS, Outcome, UserError, WallArgs, check_writable, default_threads, wall_stopped, write_svg};

/// The picture of `compare --svg`: every row run again on `seed` (the
/// comparison keeps figures, not ledgers), its limiter panel drawn.
fn rows_svg(preset: &compare::Preset, seed: u64, options: RunOptions) -> Result<String, UserError> {
    let mut reports = Vec::new();
    for row in &preset.rows {
        let report = options.traces(Traces::None).run(&row.scenario, seed).map_err(|e| UserError(e.to_string()))?;
        reports.push((row.name.clone(), report));
    }
    let rows: Vec<(String, &Report)> = reports.iter().map(|(n, r)| (n.clone(), r)).collect();
    Ok(timeline::compare_svg(&preset.name, seed, &rows))
}

/// How `compare` prints its result.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum CompareFormat {
    /// Aligned columns for a terminal: medians, and the ranges beneath.
    Table,
    /// `{"preset", "seeds", "rows": [{"policy", "<figure>": {"median", "min", "max"}}]}`.
    Json,
    /// A header line and one line per row.
    Csv,
    /// The medians as a Markdown table (the comparison tables in docs/guide/).
    Markdown,
}

/// Arguments of `retrysim compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The preset: which scenario and which policy rows (blinkimg-1s is
    /// brief 002's table, berlin brief 003's).
    #[arg(long, default_value = "blinkimg-1s", value_parser = PossibleValuesParser::new(compare::PRESETS))]
    preset: String,
    /// Run seeds 1..=K; each figure is the median over them, with its range.
    #[arg(long, value_name = "K", default_value_t = DEFAULT_SEEDS, value_parser = clap::value_parser!(u32).range(1..=1000))]
    seeds: u32,
    #[arg(long, value_enum, default_value = "table")]
    format: CompareFormat,
    /// Run only these rows (comma-separated names; the ideal row is added for the ratios).
    #[arg(long, value_name = "ROWS", value_delimiter = ',')]
    rows: Vec<String>,
    /// Print one row's scenario as TOML (for `retrysim run --config`) instead of comparing.
    #[arg(long, value_name = "ROW", conflicts_with = "rows")]
    show: Option<String>,
    /// Threads to run on, 1 to 256 (default: the machine's parallelism, at
    /// most 256). The result does not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_THREADS)))]
    threads: Option<u32>,
    #[command(flatten)]
    wall: WallArgs,
    /// Also write each row's requests per limiter window against capacity
    /// (its run on the first seed), stacked on one time axis with the ideal
    /// row first, to this file as an SVG picture.
    #[arg(long, value_name = "FILE.svg", conflicts_with = "show")]
    svg: Option<std::path::PathBuf>,
}

fn unknown_row(preset: &compare::Preset, name: &str) -> UserError {
    UserError(format!("preset {} has no row {name:?}; its rows are: {}", preset.name, preset.row_names().join(", ")))
}

/// Runs the comparison.
pub fn run(args: CompareArgs) -> Outcome {
    let mut preset = compare::preset(&args.preset).ok_or_else(|| UserError(compare::unknown(&args.preset)))?;
    if let Some(name) = &args.show {
        let row = preset.row(name).ok_or_else(|| unknown_row(&preset, name))?;
        return Ok((row.scenario.to_toml(), ExitCode::SUCCESS));
    }
    if !args.rows.is_empty() {
        if let Some(bad) = args.rows.iter().find(|n| preset.row(n).is_none()) {
            return Err(unknown_row(&preset, bad));
        }
        preset.rows.retain(|r| args.rows.contains(&r.name) || r.scenario.fleet.gate == GateConfig::Ideal);
    }
    if let Some(path) = &args.svg {
        // Before the comparison, not after it: a typo costs nothing.
        check_writable(path, "--svg")?;
    }
    let threads = args.threads.map_or_else(default_threads, |t| t as usize);
    let options = args.wall.options(None);
    progress::catch_interrupts(
        "compare",
        progress::GRACE,
        "the runs under way did not stop within a second, so no table is printed",
    );
    let total = preset.rows.len() as u64 * u64::from(args.seeds);
    let meter = Meter::new("compare", "runs", total);
    let progress = |done: usize, _: usize| meter.set(done as u64, "");
    let stop = || progress::interrupted().is_some();
    let result = compare::run_observed(&preset, args.seeds, threads, options, &progress, &stop);
    meter.finish();
    let result = result.map_err(|e| match e.wall_bound {
        Some(_) => wall_stopped(
            &RunError {
                scenario: format!("{} row {}", e.preset, e.row),
                seed: e.seed,
                message: e.message.clone(),
                wall_bound: e.wall_bound,
            },
            &e.replay(),
        ),
        None => UserError(e.to_string()),
    })?;
    if let Some((signal, code)) = progress::interrupted() {
        let mut result = result;
        // The table's header names the seeds that ran, not those asked for.
        let ran: std::collections::BTreeSet<u64> =
            result.rows.iter().flat_map(|r| r.runs.iter().map(|f| f.seed)).collect();
        result.seeds = ran.into_iter().collect();
        let done: usize = result.rows.iter().map(|r| r.runs.len()).sum();
        let mut out = format!(
            "compare: interrupted by {signal} after {done} of {total} runs; each row's figures cover the seeds it finished:"
        );
        for r in &result.rows {
            out.push_str(&format!("\n  {}: {} of {} seeds", r.policy, r.runs.len(), args.seeds));
        }
        if !result.rows.is_empty() {
            out.push('\n');
            out.push_str(&result.render_table());
        }
        return Ok((out, ExitCode::from(code)));
    }
    if let Some(path) = &args.svg {
        write_svg(path, &rows_svg(&preset, result.seeds.first().copied().unwrap_or(1), options)?)?;
    }
    let out = match args.format {
        CompareFormat::Table => result.render_table(),
        CompareFormat::Json => result.to_json(),
        CompareFormat::Csv => result.to_csv(),
        CompareFormat::Markdown => result.to_markdown(),
    };
    Ok((out, ExitCode::SUCCESS))
}
