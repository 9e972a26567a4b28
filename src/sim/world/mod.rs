//! What is simulated: the API, the network, the limiter service, the ideal
//! gate that knows the API's window, and the timers the runner watches.
pub mod api;
pub mod connector;
pub(crate) mod faults;
pub mod limiter_service;
pub mod net;
pub mod oracle;
#[cfg(test)]
mod pool_tests;
pub mod timers;
