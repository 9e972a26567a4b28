//! Integration tests, compiled as one binary (faster to build and link).
mod cli;
mod driver;
mod scenarios;
mod snapshots;
