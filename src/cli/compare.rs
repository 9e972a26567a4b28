//! STUB (owned by the comparison work): `retrysim compare`.
use clap::Args;

use super::{Outcome, UserError};

/// Arguments of `retrysim compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {}

/// Runs the comparison.
pub fn run(_args: CompareArgs) -> Outcome {
    Err(UserError("compare is not built yet".into()))
}
