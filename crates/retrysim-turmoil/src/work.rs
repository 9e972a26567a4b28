//! What a simulation has done so far, counted (patched): see [`Sim::work`].
//!
//! [`Sim::work`]: crate::Sim::work

/// What a simulation has done so far, counted, not timed: so that a
/// caller can tell what a run cost per event, and a test can show that an
/// idle host costs nothing. Read it with [`Sim::work`](crate::Sim::work).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Work {
    /// Calls to `step`, `step_by` and `step_lazily` (a `step_by` of many
    /// ticks is one).
    pub steps: u64,
    /// Times a host's runtime was polled: a host ticked in a step, or
    /// ticked through the ticks it owed (`step_lazily`), is one poll.
    pub host_polls: u64,
    /// Messages the network handed to a host.
    pub messages_delivered: u64,
}
