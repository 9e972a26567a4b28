//! Running a scenario: its description, the runner, the master seed, a job's
//! life, the client boundary, the built-in clients, deliberate defects, the
//! fleet's hosts, deferral, and the report's review text.
pub mod advance;
pub mod clients;
pub mod defects;
pub mod deferral;
pub mod fleet;
pub mod job;
pub mod keys;
mod panics;
pub mod render;
#[cfg(feature = "sim-reqwest")]
pub mod reqwest_stack;
pub mod runner;
pub mod scenario;
pub mod seed;
pub mod subject;
pub mod work;
