//! Integration tests, compiled as one binary (faster to build and link).
mod blackbox;
mod cancel;
mod cli;
mod compare;
mod docs;
mod driver;
mod external_user;
mod fleet;
mod foreign;
mod function_lengths;
mod generator_coverage;
mod habits;
mod harness_checks;
#[cfg(feature = "https")]
mod https;
mod hunt_catches;
mod hunt_seeds;
mod hunt_workflow;
mod integrations;
mod layers;
mod lean_build;
mod long_runs;
mod negative_controls;
mod properties;
mod readme;
mod real_servers;
#[cfg(feature = "reqwest-middleware")]
mod reqwest_driver;
mod reqwest_stack;
mod rust_source;
mod scenarios;
mod serve;
mod snapshots;
mod speed;
mod support;
mod timeline;
mod tokio_seed;
