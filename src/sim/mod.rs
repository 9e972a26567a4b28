//! The deterministic simulation harness.
pub mod api;
