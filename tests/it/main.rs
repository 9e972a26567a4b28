//! Integration tests, compiled as one binary (faster to build and link).
mod driver;
mod negative_controls;
mod properties;
mod strategies;
