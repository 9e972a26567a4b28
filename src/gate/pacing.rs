//! STUB (owned by the comparison work): a gate that paces on the limiter's signals.
use serde::{Deserialize, Serialize};

use super::{Admission, Feedback, Gate};

/// The pacing gate's settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PacingConfig {}

/// Paces a fleet ahead of the limit.
#[derive(Debug, Default)]
pub struct Pacing {}

impl Pacing {
    /// A pacing gate.
    pub fn new(_config: PacingConfig) -> Pacing {
        Pacing {}
    }
}

impl Gate for Pacing {
    fn admit(&self) -> Admission<'_> {
        Box::pin(async {})
    }
    fn done(&self, _feedback: &Feedback<'_>) {}
}
