//! Tools on top of runs: policy comparisons and timeline pictures.
pub mod compare;
pub mod timeline;
