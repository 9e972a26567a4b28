//! STUB (owned by the comparison work): the ideal client that knows the window.
use crate::gate::{Admission, Feedback, Gate};
use crate::sim::api::ApiConfig;

/// An oracle that admits exactly what the limiter will accept.
#[derive(Debug)]
pub struct IdealGate {}

impl IdealGate {
    /// The oracle for an API.
    pub fn new(_api: &ApiConfig) -> IdealGate {
        IdealGate {}
    }
}

impl Gate for IdealGate {
    fn admit(&self) -> Admission<'_> {
        Box::pin(async {})
    }
    fn done(&self, _feedback: &Feedback<'_>) {}
}
