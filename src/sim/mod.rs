//! The deterministic simulation harness.
pub mod api;
pub mod check;
pub mod hunt;
pub mod net;
pub mod oracle;
pub mod render;
pub mod runner;
pub mod scenario;
pub mod seed;
