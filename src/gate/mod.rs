//! Gates: fleet-level control of when an attempt may go out.
//!
//! A per-operation retry policy cannot stop a fleet from overwhelming an API
//! (brief 003: "a semaphore inside one worker cannot control twenty separate
//! workers"). A [`Gate`] is shared by the workers of a fleet; every attempt,
//! first or retry, waits in it, so a delayed retry never jumps the queue of
//! new work. Gates learn from each answer through [`Gate::done`].
//!
//! - [`pacing::Pacing`]: reads the limiter's own signals (`RateLimit-*`,
//!   `X-RateLimit-*`, `Retry-After`) and holds the fleet before the limit.
//! - [`aimd::Aimd`]: admission control that bounds in-flight requests and
//!   adapts the rate: additive increase on success, multiplicative decrease
//!   on a throttled answer.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use http::HeaderMap;

use crate::core::classify::Class;

pub mod aimd;
pub mod pacing;

/// What one admitted attempt came to.
#[derive(Debug, Clone, Copy)]
pub struct Feedback<'a> {
    /// The monotonic time the outcome was known.
    pub now: Duration,
    /// The answer's status, if there was an answer.
    pub status: Option<u16>,
    /// The outcome's class.
    pub class: Class,
    /// The answer's headers, if there was an answer.
    pub headers: Option<&'a HeaderMap>,
}

/// A future that resolves when the gate lets an attempt through.
pub type Admission<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Shared admission for the attempts of many operations.
///
/// The driver calls [`admit`](Gate::admit) before every attempt and, once
/// the attempt is over (answered, failed, timed out or cancelled), exactly
/// one [`done`](Gate::done). Implementations take `&self` so one gate can be
/// shared in an `Arc`.
pub trait Gate: Send + Sync {
    /// Waits until one more attempt may go out.
    fn admit(&self) -> Admission<'_>;
    /// An admitted attempt finished.
    fn done(&self, feedback: &Feedback<'_>);
    /// How many attempts are waiting to be admitted (for queue-depth metrics).
    fn queued(&self) -> usize {
        0
    }
}
