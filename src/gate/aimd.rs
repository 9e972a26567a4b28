//! STUB (owned by the fleet-controls work): AIMD admission control.
use serde::{Deserialize, Serialize};

use super::{Admission, Feedback, Gate};

/// The admission controller's settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AimdConfig {}

/// Bounds in-flight attempts and adapts to 429s.
#[derive(Debug, Default)]
pub struct Aimd {}

impl Aimd {
    /// An admission controller.
    pub fn new(_config: AimdConfig) -> Aimd {
        Aimd {}
    }
}

impl Gate for Aimd {
    fn admit(&self) -> Admission<'_> {
        Box::pin(async {})
    }
    fn done(&self, _feedback: &Feedback<'_>) {}
}
