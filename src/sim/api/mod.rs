//! Simulated APIs.
