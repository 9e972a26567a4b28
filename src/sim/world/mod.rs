//! What is simulated: the API, the network, the fleet, the limiter service
//! and the deferral queue.
pub mod api;
pub mod connector;
pub mod deferral;
pub mod fleet;
pub mod limiter_service;
pub mod net;
pub mod timers;
