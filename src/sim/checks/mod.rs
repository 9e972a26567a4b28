//! Checking runs: the invariants from the trace and from the ledger alone,
//! the fleet's properties, and the hunt over seeds.
pub mod blackbox;
pub mod fleet;
pub mod hunt;
pub mod invariants;
pub mod model;
#[cfg(feature = "proptest")]
pub mod strategies;
