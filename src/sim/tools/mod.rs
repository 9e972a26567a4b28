//! Tools on top of runs: policy comparisons, the ideal schedule, review text.
pub mod compare;
pub mod oracle;
pub mod render;
pub mod timeline;
