//! Integration tests, compiled as one binary (faster to build and link).
mod blackbox;
mod cli;
mod compare;
mod docs;
mod driver;
mod external_user;
mod fleet;
mod foreign;
mod habits;
mod integrations;
mod lean_build;
mod negative_controls;
mod properties;
mod readme;
mod real_servers;
mod scenarios;
mod snapshots;
