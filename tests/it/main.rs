//! Integration tests, compiled as one binary (faster to build and link).
mod cli;
mod compare;
mod driver;
mod fleet;
mod habits;
mod negative_controls;
mod properties;
mod scenarios;
mod snapshots;
mod strategies;
