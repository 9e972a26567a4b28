//! STUB (owned by the property-test work): `retrysim hunt`.
use clap::Args;

use super::{Outcome, UserError};

/// Arguments of `retrysim hunt`.
#[derive(Debug, Args)]
pub struct HuntArgs {}

/// Runs the hunt.
pub fn run(_args: HuntArgs) -> Outcome {
    Err(UserError("hunt is not built yet".into()))
}
