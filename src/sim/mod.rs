//! The deterministic simulation harness.
pub mod api;
pub mod blackbox;
pub mod check;
pub mod compare;
pub mod connector;
pub mod deferral;
pub mod fleet;
pub mod fleet_check;
pub mod hunt;
pub mod limiter_service;
pub mod net;
pub mod oracle;
pub mod render;
pub mod runner;
pub mod scenario;
pub mod seed;
