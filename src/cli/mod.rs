//! The `retrysim` subcommands. Each module owns its arguments and returns
//! the text to print, or a [`UserError`] that exits with code 2.

use std::path::Path;
use std::process::ExitCode;

use clap::ValueEnum;
use retrysim::core::policy::Policy;
use retrysim::sim::run::scenario::{self, Scenario};

pub mod compare;
pub mod explain;
pub mod hunt;
pub mod run;
pub mod serve;

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

/// A named scenario or a TOML file.
pub fn load_scenario(name: Option<&str>, config: Option<&Path>) -> Result<Scenario, UserError> {
    match (name, config) {
        (Some(n), _) => scenario::named(n).ok_or_else(|| UserError(scenario::unknown(n))),
        (None, Some(path)) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| UserError(format!("cannot read {}: {e}", path.display())))?;
            Scenario::from_toml(&text).map_err(|e| UserError(format!("{}: {e}", path.display())))
        }
        (None, None) => Err(UserError("give --scenario NAME or --config FILE.toml".into())),
    }
}
