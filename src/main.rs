//! The `retrysim` command line: explain one decision, run and trace named
//! scenarios, compare policies, hunt for invariant violations.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

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
}

fn main() -> ExitCode {
    let outcome = match Cli::parse().command {
        Command::Explain(a) => cli::explain::run(a),
        Command::Scenarios(a) => cli::run::scenarios(a),
        Command::Run(a) => cli::run::run(a),
        Command::Trace(a) => cli::run::trace(a),
        Command::Compare(a) => cli::compare::run(a),
        Command::Hunt(a) => cli::hunt::run(a),
    };
    match outcome {
        Ok((out, code)) => {
            println!("{out}");
            code
        }
        Err(cli::UserError(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}
