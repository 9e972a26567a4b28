//! The `retrysim` command line: explain one decision, run and trace named
//! scenarios, compare policies, hunt for invariant violations.

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// A simulation allocates and frees for every request it simulates; see the
/// `mimalloc` line in Cargo.toml. The library leaves the allocator to you.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Explain(cli::explain::ExplainArgs),
    /// List the named scenarios, or print one as a TOML file to edit.
    Scenarios(cli::run::ScenariosArgs),
    /// Run one scenario with one seed and print the report.
    Run(cli::run::RunArgs),
    /// Run one scenario with one seed and print its retry trace (what the snapshots hold).
    Trace(cli::run::TraceArgs),
    /// Run every policy of a preset on several seeds, side by side.
    Compare(cli::compare::CompareArgs),
    /// Run many random scenarios and check every invariant.
    Hunt(cli::hunt::HuntArgs),
    /// Serve a scenario's API on a real socket and judge the clients by its ledger.
    Serve(cli::serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // An argument clap cannot take is quoted in its message, raw on a
        // terminal: when an argument holds a control character, the message
        // goes out plain (clap's colours and escape sequences stripped), the
        // other control characters escaped.
        Err(e) if e.use_stderr() && std::env::args_os().any(|a| a.to_string_lossy().chars().any(char::is_control)) => {
            let plain = e.render().to_string();
            eprint!("{}", cli::terminal::printable(&plain));
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
        Err(e) => e.exit(),
    };
    let outcome = match cli.command {
        Command::Explain(a) => cli::explain::run(a),
        Command::Scenarios(a) => cli::run::scenarios(a),
        Command::Run(a) => cli::run::run(a),
        Command::Trace(a) => cli::run::trace(a),
        Command::Compare(a) => cli::compare::run(a),
        Command::Hunt(a) => cli::hunt::run(a),
        Command::Serve(a) => cli::serve::run(a),
    };
    // A signal's watchdog lets the output be printed whole from here on.
    cli::progress::settle();
    match outcome {
        Ok((out, code)) => {
            // A closed pipe (`retrysim trace ... | head`) is not an error.
            let mut stdout = std::io::stdout().lock();
            // The user's text (a scenario's name, a body's code) is in it: no
            // control character of it acts on the terminal.
            match writeln!(stdout, "{}", cli::terminal::printable(&out)).and_then(|()| stdout.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("error: cannot write the output: {e}");
                    ExitCode::from(2)
                }
                _ => code,
            }
        }
        Err(cli::UserError(msg)) => {
            eprintln!("error: {}", cli::terminal::error_text(&msg));
            ExitCode::from(2)
        }
    }
}
