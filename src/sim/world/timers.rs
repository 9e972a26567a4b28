//! The deadline of every timer a simulated task waits on, in simulation
//! time, so the runner can skip straight over virtual time in which nothing
//! happens (issue 16, [`advance`](crate::sim::run::advance)).
//!
//! Every sleep of the harness goes through [`sleep`], [`sleep_until`] or
//! [`timeout`]: the driver's clock ([`TokioClock`](crate::env::TokioClock)),
//! the API's processing time, the limiter service, the pacing gate. They
//! are tokio's own timers, registered here while they are pending: from
//! their first poll (when tokio arms the timer too) until they complete or
//! are dropped, which is after the task they woke has run. Outside a
//! simulation (no registry installed on the thread) they are tokio's
//! timers and nothing more.
//!
//! A client the harness cannot see into (a [`Subject`](crate::sim::run::subject::Subject)
//! that does not declare [`sleeps_on_harness_clock`](crate::sim::run::subject::Subject::sleeps_on_harness_clock))
//! marks the registry [`unseen`](Timers::unseen): the runner then steps
//! through every tick.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// The pending deadlines of one simulation.
#[derive(Debug, Default)]
pub struct Timers {
    /// Simulation time of each pending deadline, with how many timers wait for it.
    deadlines: Mutex<BTreeMap<Duration, u32>>,
    /// Set when something may sleep on a timer this registry does not see.
    unseen: AtomicBool,
}

impl Timers {
    /// The earliest pending deadline, in simulation time.
    pub fn earliest(&self) -> Option<Duration> {
        lock(&self.deadlines).keys().next().copied()
    }

    /// Whether something may wait on a timer not registered here.
    pub fn unseen(&self) -> bool {
        self.unseen.load(Ordering::Relaxed)
    }

    /// Records that something may wait on a timer not registered here.
    pub fn mark_unseen(&self) {
        self.unseen.store(true, Ordering::Relaxed);
    }

    fn register(self: Arc<Self>, deadline: Option<Instant>) -> Pending {
        // A deadline is taken in simulation time on the host that arms it: its
        // distance from the host's clock now. Out of a host's context (not
        // expected) it counts as due at once, which stops any skip.
        let at = match (turmoil::sim_elapsed(), deadline) {
            (Some(now), Some(deadline)) => now + deadline.saturating_duration_since(Instant::now()),
            (Some(_), None) => Duration::MAX,
            (None, _) => Duration::ZERO,
        };
        *lock(&self.deadlines).entry(at).or_default() += 1;
        Pending { timers: self, at }
    }
}

/// A registered deadline; unregistered when dropped.
struct Pending {
    timers: Arc<Timers>,
    at: Duration,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut deadlines = lock(&self.timers.deadlines);
        if let Some(n) = deadlines.get_mut(&self.at) {
            *n -= 1;
            if *n == 0 {
                deadlines.remove(&self.at);
            }
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Timers>>> = const { RefCell::new(None) };
}

/// The registry of the simulation running on this thread, if any.
fn current() -> Option<Arc<Timers>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Installs a fresh registry for the simulation about to run on this thread.
pub(crate) fn install() -> Installed {
    let timers = Arc::new(Timers::default());
    let previous = CURRENT.with(|c| c.replace(Some(timers.clone())));
    Installed { timers, previous }
}

/// The registry of a running simulation; uninstalled when dropped.
pub(crate) struct Installed {
    pub(crate) timers: Arc<Timers>,
    previous: Option<Arc<Timers>>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// `tokio::time::sleep(d)`, registered. The deadline is taken now, as
/// tokio's is.
pub fn sleep(d: Duration) -> impl Future<Output = ()> + Send + use<> {
    let deadline = Instant::now().checked_add(d);
    let timers = current();
    async move {
        let _pending = timers.map(|t| t.register(deadline));
        match deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            // Past tokio's range: its far-future timer, as `sleep` would.
            None => tokio::time::sleep(d).await,
        }
    }
}

/// `tokio::time::sleep_until(deadline)`, registered.
pub fn sleep_until(deadline: Instant) -> impl Future<Output = ()> + Send + use<> {
    let timers = current();
    async move {
        let _pending = timers.map(|t| t.register(Some(deadline)));
        tokio::time::sleep_until(deadline).await
    }
}

/// `tokio::time::timeout(d, f)`, its timer registered.
pub fn timeout<F: Future>(d: Duration, f: F) -> impl Future<Output = Result<F::Output, tokio::time::error::Elapsed>> {
    let deadline = Instant::now().checked_add(d);
    let timers = current();
    async move {
        let _pending = timers.map(|t| t.register(deadline));
        match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, f).await,
            None => tokio::time::timeout(d, f).await,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
