//! Integration tests, compiled as one binary (faster to build and link).
mod compare;
mod driver;
