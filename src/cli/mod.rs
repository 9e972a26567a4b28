//! The `retrysim` command line, inside the library behind feature `cli`
//! (crate-private: the binary, `src/main.rs`, is a separate crate and enters
//! through [`crate::cli_main`] alone). Each subcommand's module owns its
//! arguments and returns the text to print, or a [`UserError`] that exits
//! with code 2.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::core::policy::Policy;
use crate::sim::run::keys::MAX_SCENARIO_BYTES;
use crate::sim::run::runner::{ProgressFn, RunError, RunOptions};
use crate::sim::run::scenario::{self, Scenario};

mod compare;
mod explain;
mod hunt;
mod progress;
mod run;
mod serve;
mod terminal;

#[derive(Parser)]
#[command(
    name = "retrysim",
    version,
    about = "HTTP 429 retries you can prove: explain a decision, run scenarios in a deterministic simulation"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One response in, the core's decision and why out.
    Explain(explain::ExplainArgs),
    /// List the named scenarios, or print one as a TOML file to edit.
    Scenarios(run::ScenariosArgs),
    /// Run one scenario with one seed and print the report.
    Run(run::RunArgs),
    /// Run one scenario with one seed and print its retry trace (what the snapshots hold).
    Trace(run::TraceArgs),
    /// Run every policy of a preset on several seeds, side by side.
    Compare(compare::CompareArgs),
    /// Run many random scenarios and check every invariant.
    Hunt(hunt::HuntArgs),
    /// Serve a scenario's API on a real socket and judge the clients by its ledger.
    Serve(serve::ServeArgs),
}

/// Parses the arguments, runs the subcommand, prints its output; the exit
/// code says how it went (2 for bad input).
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // An argument clap cannot take is quoted in its message, raw on a
        // terminal: when an argument holds a control character, the message
        // goes out plain (clap's colours and escape sequences stripped), the
        // other control characters escaped.
        Err(e) if e.use_stderr() && std::env::args_os().any(|a| a.to_string_lossy().chars().any(char::is_control)) => {
            let plain = e.render().to_string();
            eprint!("{}", terminal::printable(&plain));
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
        Err(e) => e.exit(),
    };
    let outcome = match cli.command {
        Command::Explain(a) => explain::run(a),
        Command::Scenarios(a) => run::scenarios(a),
        Command::Run(a) => run::run(a),
        Command::Trace(a) => run::trace(a),
        Command::Compare(a) => compare::run(a),
        Command::Hunt(a) => hunt::run(a),
        Command::Serve(a) => serve::run(a),
    };
    // A signal's watchdog lets the output be printed whole from here on.
    progress::settle();
    match outcome {
        Ok((out, code)) => {
            // A closed pipe (`retrysim trace ... | head`) is not an error.
            let mut stdout = std::io::stdout().lock();
            // The user's text (a scenario's name, a body's code) is in it: no
            // control character of it acts on the terminal.
            match writeln!(stdout, "{}", terminal::printable(&out)).and_then(|()| stdout.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("error: cannot write the output: {e}");
                    ExitCode::from(2)
                }
                _ => code,
            }
        }
        Err(UserError(msg)) => {
            eprintln!("error: {}", terminal::error_text(&msg));
            ExitCode::from(2)
        }
    }
}

/// The most threads `compare --threads` and `hunt --jobs` take: a run
/// is CPU-bound, so more threads than cores only add memory (each thread a
/// stack, each run its world).
pub const MAX_THREADS: u32 = 256;

/// The threads a command runs on by default: the available cores, at most
/// [`MAX_THREADS`].
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS as usize)
}

/// Bad input: the message says what to do; the exit code is 2.
#[derive(Debug)]
pub struct UserError(pub String);

/// What a command printed and how it exits.
pub type Outcome = Result<(String, ExitCode), UserError>;

/// Output formats shared by the commands.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// A policy preset by name, or an error listing the presets.
pub fn policy_named(name: &str) -> Result<Policy, UserError> {
    Policy::preset(name)
        .ok_or_else(|| UserError(format!("unknown policy {name:?}; the presets are: {}", Policy::PRESETS.join(", "))))
}

/// Which scenario a command runs or serves: a named one or a TOML file
/// (`--scenario NAME | --config FILE.toml`).
#[derive(Debug, clap::Args)]
pub struct ScenarioSource {
    /// A named scenario (see `retrysim scenarios`).
    #[arg(long, required_unless_present = "config", conflicts_with = "config")]
    scenario: Option<String>,
    /// A scenario described in a TOML file (see `retrysim scenarios --show NAME`).
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
}

impl ScenarioSource {
    /// The scenario, or an error naming the unknown name or the bad file.
    pub fn load(&self) -> Result<Scenario, UserError> {
        match (&self.scenario, &self.config) {
            (Some(n), _) => scenario::named(n).ok_or_else(|| UserError(scenario::unknown(n))),
            (None, Some(path)) => {
                let bytes = read_bounded(path, MAX_SCENARIO_BYTES as u64, "a scenario file")?;
                let text = String::from_utf8(bytes)
                    .map_err(|e| UserError(format!("{} is not UTF-8 text: {e}", path.display())))?;
                Scenario::from_toml(&text).map_err(|e| UserError(format!("{}: {e}", path.display())))
            }
            (None, None) => Err(UserError("give --scenario NAME or --config FILE.toml".into())),
        }
    }

    /// The arguments that name it again, for a replay line.
    pub fn replay_args(&self) -> String {
        match (&self.scenario, &self.config) {
            (Some(name), _) => format!("--scenario {name}"),
            (None, Some(path)) => format!("--config {}", path.display()),
            (None, None) => String::new(),
        }
    }
}

/// Reads the file at `path` whole, if it holds at most `max` bytes; `what`
/// (e.g. "a shard summary") names it in the error. A larger file is refused
/// before it is read, and a file that grows while read (or a device that
/// never ends) is cut off one byte past `max` and refused too.
pub fn read_bounded(path: &Path, max: u64, what: &str) -> Result<Vec<u8>, UserError> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| UserError(format!("cannot read {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(cannot)?;
    let too_big = |size: &str| {
        UserError(format!("{}: over the {} MiB ({max} bytes) {what} may have ({size})", path.display(), max >> 20))
    };
    let meta = file.metadata().map_err(cannot)?;
    if meta.is_dir() {
        return Err(UserError(format!("cannot read {}: it is a directory", path.display())));
    }
    if meta.len() > max {
        return Err(too_big(&format!("{} bytes", meta.len())));
    }
    let mut text = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut text).map_err(cannot)?;
    if text.len() as u64 > max {
        return Err(too_big("it went on past that"));
    }
    Ok(text)
}

/// Checks, before any work, that `flag`'s file can be written: its folder
/// exists and the file can be made. A file it made for the check is
/// removed again.
pub fn check_writable(path: &Path, flag: &str) -> Result<(), UserError> {
    let cannot = |why: String| UserError(format!("cannot write {flag} {}: {why}", path.display()));
    if path.is_dir() {
        return Err(cannot("it is a directory".into()));
    }
    let existed = path.exists();
    std::fs::OpenOptions::new().append(true).create(true).open(path).map_err(|e| {
        let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
        match folder {
            Some(dir) if !dir.is_dir() => cannot(format!("the folder {} does not exist", dir.display())),
            _ => cannot(e.to_string()),
        }
    })?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Writes an SVG picture (`--svg FILE`).
pub fn write_svg(path: &Path, svg: &str) -> Result<(), UserError> {
    std::fs::write(path, svg).map_err(|e| UserError(format!("cannot write --svg {}: {e}", path.display())))
}

/// The default of `--max-wall`: a run that needs longer is likely a config
/// mistake (see [`warn_long`]); a long run on purpose raises it.
pub const DEFAULT_MAX_WALL: &str = "10m";

/// How often a long run, `compare` or `hunt` says what it is doing when
/// standard error is not a terminal.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// `--max-wall`: the wall-time bound on each simulation a command runs.
#[derive(Debug, Clone, Args)]
pub struct WallArgs {
    /// Stop any one simulation that takes longer than this in wall time
    /// (e.g. 30s, 5m, 2h; at least 1ms, read to the millisecond; 0 for no
    /// bound). The output of a run that ends within it does not depend on it.
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_MAX_WALL, value_parser = parse_wall)]
    pub max_wall: Duration,
}

/// The smallest `--max-wall` but 0: the bound is read to the millisecond.
pub const MIN_WALL: Duration = Duration::from_millis(1);

fn parse_wall(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (write e.g. 30s, 5m, 2h, or 0 for no bound)"))?;
    if d < MIN_WALL {
        return Err(format!("{s} is below the smallest bound, 1ms (write e.g. 30s, 5m, 2h, or 0 for no bound)"));
    }
    // Whole milliseconds, as the messages show it.
    Ok(Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
}

impl WallArgs {
    /// The options every run of the command goes by: this bound, and
    /// `progress` (if any) every [`PROGRESS_EVERY`].
    pub fn options(&self, progress: Option<ProgressFn>) -> RunOptions {
        let options = RunOptions::new().max_wall((!self.max_wall.is_zero()).then_some(self.max_wall));
        match progress {
            Some(report) => options.progress(PROGRESS_EVERY, report),
            None => options,
        }
    }
}

/// The message for a run the wall bound stopped: what ran, the flag, and
/// the command that runs it again with a longer bound.
pub fn wall_stopped(e: &RunError, replay: &str) -> UserError {
    let bound = e.wall_bound.unwrap_or_default();
    let longer = short(Duration::from_secs(bound.as_secs().saturating_mul(6).div_ceil(60).max(1).saturating_mul(60)));
    UserError(format!(
        "scenario {} seed {} ran past the wall-time bound: {}\n\
         the bound is --max-wall {} (the default is {DEFAULT_MAX_WALL}; 0 turns it off)\n\
         replay: {replay} --max-wall {longer}",
        e.scenario,
        e.seed,
        e.message,
        short(bound),
    ))
}

/// A duration as one shell word `--max-wall` reads back: `90s`, `5m`, `2h`.
fn short(d: Duration) -> String {
    match d.as_secs() {
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s if d.subsec_nanos() == 0 => format!("{s}s"),
        _ => format!("{}ms", d.as_millis().max(1)),
    }
}

/// Ticks above which a scenario earns a warning: at the idle-tick cost
/// docs/guide/speed.md states (about 4 µs with two hosts), 100 million ticks
/// are several minutes of wall time even when nothing happens.
pub const LONG_TICKS: u128 = 100_000_000;

/// A warning on standard error for a scenario that may simulate so many
/// ticks that it runs for minutes or hours: meaningful (a long deadline
/// with many retries is a real policy), but more often a slip.
pub fn warn_long(s: &Scenario) {
    let ticks = s.time_limit.as_nanos() / s.net.tick.as_nanos().max(1);
    if ticks > LONG_TICKS {
        eprintln!(
            "warning: time_limit = {} at tick = {} is up to {ticks} simulation steps: if the jobs run that long \
             (policy deadline = {}, max_retries = {}), the run takes minutes to hours of wall time; \
             --max-wall bounds it",
            humantime::format_duration(s.time_limit),
            humantime::format_duration(s.net.tick),
            humantime::format_duration(s.policy.deadline),
            s.policy.max_retries,
        );
    }
}
