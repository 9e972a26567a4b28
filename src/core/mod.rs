//! The sans-IO decision core. No tokio, no IO, no ambient time or randomness:
//! every instant and every random draw is an argument.
pub mod body;
pub mod retry_after;
