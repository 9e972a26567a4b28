//! Running a scenario: its description, the runner, the master seed, a job's
//! life, the client boundary, the built-in clients and deliberate defects.
pub mod advance;
pub mod clients;
pub mod defects;
pub mod job;
pub mod runner;
pub mod scenario;
pub mod seed;
pub mod subject;
