//! Integration tests, compiled as one binary (faster to build and link).
mod blackbox;
mod cli;
mod compare;
mod driver;
mod fleet;
mod negative_controls;
mod properties;
mod scenarios;
mod snapshots;
mod strategies;
