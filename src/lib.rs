//! retrysim: placeholder crate doc, rewritten when the core lands.
pub mod core;
pub mod sim;
