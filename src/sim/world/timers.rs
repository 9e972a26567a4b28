//! The deadline of every timer a simulated task waits on, in simulation
//! time, so the runner can skip straight over virtual time in which nothing
//! happens ([`advance`](crate::sim::run::advance)).
//!
//! Every sleep of the harness goes through [`sleep`], [`sleep_until`] or
//! [`timeout`]: the clients' and the gates' clock ([`SimClock`]), the API's
//! processing time, the limiter service. They
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

use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::env::{Clock, TokioClock};
use crate::locks::lock;

/// The pending deadlines of one simulation.
#[derive(Debug, Default)]
pub struct Timers {
    deadlines: Mutex<Deadlines>,
    /// Set when something may sleep on a timer this registry does not see.
    unseen: AtomicBool,
    /// Whether deadlines are kept by host too (only a run that leaves idle
    /// hosts out asks [`due_by`](Timers::due_by)).
    by_host: AtomicBool,
    /// Hosts whose connection pools read the simulation's clock
    /// ([`SimTimer::now`]), and the first connection reused on a host whose
    /// pool never did.
    pool_clocks: Mutex<PoolClocks>,
    /// Timers that fired (for [`Work`](crate::sim::run::work::Work)).
    fired: AtomicU64,
}

/// Which hosts' pools keep simulated time.
#[derive(Debug, Default)]
struct PoolClocks {
    on_sim_time: BTreeSet<Option<IpAddr>>,
    off_sim_time: Option<String>,
}

/// Simulation time of each pending deadline, with how many timers wait for
/// it: of every host, and of each host by its address (`None`: armed out of
/// a host's context, which counts for every host).
#[derive(Debug, Default)]
struct Deadlines {
    all: BTreeMap<Duration, u32>,
    /// Read only by lookups, by [`Timers::earliest_running`]'s minimum and
    /// into [`Timers::due_by`]'s set, so its order decides nothing. FxHash:
    /// every timer armed and dropped looks its host up, and the keys are
    /// the simulation's own.
    by_host: FxHashMap<Option<IpAddr>, BTreeMap<Duration, u32>>,
}

impl Timers {
    /// The earliest pending deadline of a host that `runs` (or armed out of
    /// any host's context), in simulation time: a timer of a host whose
    /// software no longer runs (a client that finished) never fires, and
    /// must not stop a skip. Every deadline when they are not kept by host.
    pub(crate) fn earliest_running(&self, mut runs: impl FnMut(IpAddr) -> bool) -> Option<Duration> {
        let deadlines = lock(&self.deadlines);
        if !self.by_host.load(Ordering::Relaxed) {
            return deadlines.all.keys().next().copied();
        }
        // Asks whether a host runs only when its deadline would be the
        // earliest so far (turmoil looks the host up by name and address).
        let mut earliest: Option<Duration> = None;
        for (host, of_host) in &deadlines.by_host {
            let Some(&first) = of_host.keys().next() else { continue };
            if earliest.is_none_or(|e| first < e) && host.is_none_or(&mut runs) {
                earliest = Some(first);
            }
        }
        earliest
    }

    /// The hosts with a timer due by `end`, read at once: a lazy step asks
    /// it of every host it may leave out, and one read of the registry a
    /// step costs less than a lookup a host. A step's hosts arm timers only
    /// for themselves, so a host ticked earlier in the step adds nothing
    /// the later ones are asked (one that drops a later host's timer through
    /// memory they share at most has that host ticked, as a plain step
    /// would). A timer armed out of any host's context
    /// counts for every host. Only meaningful after
    /// [`keep_by_host`](Timers::keep_by_host), before any timer registers.
    pub(crate) fn due_by(&self, end: Duration) -> DueBy {
        let deadlines = lock(&self.deadlines);
        // Every host's deadlines are in `all` too: when none of them is due,
        // no host's is (most steps that deliver a message).
        if deadlines.all.keys().next().is_none_or(|&first| first > end) {
            return DueBy::default();
        }
        let mut due = DueBy::default();
        for (host, of_host) in &deadlines.by_host {
            if of_host.keys().next().is_some_and(|&first| first <= end) {
                match host {
                    Some(addr) => due.hosts.push(*addr),
                    None => due.any = true,
                }
            }
        }
        due
    }

    /// How many registered timers have fired so far.
    pub(crate) fn fired(&self) -> u64 {
        self.fired.load(Ordering::Relaxed)
    }

    /// Whether something may wait on a timer not registered here.
    pub fn unseen(&self) -> bool {
        self.unseen.load(Ordering::Relaxed)
    }

    /// Keeps each deadline by its host too, for [`due_by`](Timers::due_by).
    pub fn keep_by_host(&self) {
        self.by_host.store(true, Ordering::Relaxed);
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
        let by_host = self.by_host.load(Ordering::Relaxed);
        let host = if by_host { turmoil::current_host_addr() } else { None };
        let mut deadlines = lock(&self.deadlines);
        *deadlines.all.entry(at).or_default() += 1;
        if by_host {
            *deadlines.by_host.entry(host).or_default().entry(at).or_default() += 1;
        }
        drop(deadlines);
        Pending { timers: self, at, host, by_host }
    }
}

/// The hosts with a timer due by a step's end ([`Timers::due_by`]).
#[derive(Debug, Default)]
pub(crate) struct DueBy {
    hosts: Vec<IpAddr>,
    /// A timer armed out of any host's context is due: it counts for every host.
    any: bool,
}

impl DueBy {
    /// Whether a timer of the host at `host` is due.
    pub(crate) fn has(&self, host: IpAddr) -> bool {
        self.any || self.hosts.contains(&host)
    }
}

impl Pending {
    /// The timer fired.
    fn fired(&self) {
        self.timers.fired.fetch_add(1, Ordering::Relaxed);
    }
}

/// A registered deadline; unregistered when dropped.
struct Pending {
    timers: Arc<Timers>,
    at: Duration,
    host: Option<IpAddr>,
    by_host: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut deadlines = lock(&self.timers.deadlines);
        release(&mut deadlines.all, self.at);
        if !self.by_host {
            return;
        }
        if let Some(of_host) = deadlines.by_host.get_mut(&self.host) {
            release(of_host, self.at);
        }
    }
}

/// One timer fewer waits for `at`.
fn release(deadlines: &mut BTreeMap<Duration, u32>, at: Duration) {
    if let Some(n) = deadlines.get_mut(&at) {
        *n -= 1;
        if *n == 0 {
            deadlines.remove(&at);
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Timers>>> = const { RefCell::new(None) };
}

/// The registry of the simulation running on this thread, if any.
impl Timers {
    /// A pool on this host asked [`SimTimer`] the time.
    fn pool_read_sim_time(&self) {
        lock(&self.pool_clocks).on_sim_time.insert(turmoil::current_host_addr());
    }

    /// A pooled connection was reused on this host: if its pool never asked
    /// [`SimTimer`] the time, its idle expiry reads another clock.
    pub(crate) fn connection_reused(&self, target: &str) {
        let host = turmoil::current_host_addr();
        let mut clocks = lock(&self.pool_clocks);
        if clocks.off_sim_time.is_none() && !clocks.on_sim_time.contains(&host) {
            let name = host.map_or_else(|| "a client".to_owned(), |a| format!("the client at {a}"));
            clocks.off_sim_time = Some(format!(
                "{name} reused a pooled connection to {target}, but its pool never read the simulation's clock: \
                 hyper-util's pool without a timer expires idle connections on the real clock, so the same seed \
                 could run differently; build the client with `.pool_timer(SimNet::timer())` (retrysim's SimTimer)"
            ));
        }
    }

    /// Why a run cannot be trusted to repeat: a pool on another clock.
    pub(crate) fn pool_clock_violation(&self) -> Option<String> {
        lock(&self.pool_clocks).off_sim_time.clone()
    }
}

/// The registry of the simulation running on this thread, if any.
pub(crate) fn installed() -> Option<Arc<Timers>> {
    current()
}

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
        let pending = timers.map(|t| t.register(deadline));
        match deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            // Past tokio's range: its far-future timer, as `sleep` would.
            None => tokio::time::sleep(d).await,
        }
        if let Some(p) = &pending {
            p.fired();
        }
    }
}

/// `tokio::time::sleep_until(deadline)`, registered.
pub fn sleep_until(deadline: Instant) -> impl Future<Output = ()> + Send + use<> {
    let timers = current();
    async move {
        let pending = timers.map(|t| t.register(Some(deadline)));
        tokio::time::sleep_until(deadline).await;
        if let Some(p) = &pending {
            p.fired();
        }
    }
}

/// `tokio::time::timeout(d, f)`, its timer registered.
pub fn timeout<F: Future>(d: Duration, f: F) -> impl Future<Output = Result<F::Output, tokio::time::error::Elapsed>> {
    let deadline = Instant::now().checked_add(d);
    let timers = current();
    async move {
        let pending = timers.map(|t| t.register(deadline));
        let result = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, f).await,
            None => tokio::time::timeout(d, f).await,
        };
        if let (Err(_), Some(p)) = (&result, &pending) {
            p.fired();
        }
        result
    }
}

/// The harness's [`Clock`]: tokio's time (virtual under turmoil), a wall
/// clock at `epoch + now()`, and sleeps registered with the simulation's
/// timers so that the runner sees their deadlines. It is what the harness
/// hands a client ([`Job::clock`](crate::sim::run::subject::Job::clock),
/// [`Host::clock`](crate::sim::run::subject::Host::clock)) and what it runs
/// the fleet's gates on. Outside a simulation its sleeps are tokio's.
#[derive(Debug, Clone)]
pub struct SimClock(TokioClock);

impl SimClock {
    /// A clock whose wall time is `epoch + now()`. Must be created inside a
    /// tokio runtime (a simulated host); `now()` counts from its creation.
    pub fn from_epoch(epoch: SystemTime) -> SimClock {
        SimClock(TokioClock::from_epoch(epoch))
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        self.0.now()
    }

    fn wall(&self) -> SystemTime {
        self.0.wall()
    }

    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
        sleep(d)
    }
}

/// A hyper [`Timer`](hyper::rt::Timer) on the simulation's clock whose
/// sleeps the harness sees: give it to a hyper or hyper-util client inside
/// the simulation (`.pool_timer(SimTimer)`, `.timer(SimTimer)`) in place of
/// hyper-util's `TokioTimer`, so that a [`Subject`](crate::sim::run::subject::Subject)
/// built on that client may declare
/// [`sleeps_on_harness_clock`](crate::sim::run::subject::Subject::sleeps_on_harness_clock).
/// Outside a simulation it is `TokioTimer`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimTimer;

impl hyper::rt::Timer for SimTimer {
    fn sleep(&self, d: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(SimSleep(Box::pin(sleep(d))))
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(SimSleep(Box::pin(sleep_until(Instant::from_std(deadline)))))
    }

    fn now(&self) -> std::time::Instant {
        if let Some(timers) = current() {
            timers.pool_read_sim_time();
        }
        // tokio's (virtual) clock, not the real one hyper's default reads.
        Instant::now().into_std()
    }
}

/// A registered sleep, as hyper wants one.
struct SimSleep(Pin<Box<dyn Future<Output = ()> + Send + Sync>>);

impl Future for SimSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for SimSleep {}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Timer;

    /// The earliest deadline the registry holds once a host has armed `arm`
    /// (polled it once) at 2 s of simulation time.
    fn registered(arm: fn() -> Pin<Box<dyn Future<Output = ()> + Send>>) -> Option<Duration> {
        let installed = install();
        let mut sim = turmoil::Builder::new().tick_duration(Duration::from_millis(1)).build();
        sim.client("c", async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let mut pending = arm();
            // One poll arms the timer; it stays armed while the host waits.
            assert!(futures_poll_once(pending.as_mut()).is_pending());
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(())
        });
        let mut seen = None;
        while !sim.step().expect("runs") {
            seen = seen.or(installed.timers.earliest_running(|_| true).filter(|&d| d > Duration::from_secs(2)));
        }
        seen
    }

    fn futures_poll_once(f: Pin<&mut (dyn Future<Output = ()> + Send)>) -> Poll<()> {
        let waker = std::task::Waker::noop();
        f.poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn a_deadline_is_due_for_its_own_host_only() {
        let installed = install();
        installed.timers.keep_by_host();
        let mut sim = turmoil::Builder::new().tick_duration(Duration::from_millis(1)).build();
        sim.client("sleeper", async {
            sleep(Duration::from_millis(500)).await;
            Ok(())
        });
        sim.client("other", async {
            std::future::pending::<()>().await;
            Ok(())
        });
        let (sleeper, other) = (sim.lookup("sleeper"), sim.lookup("other"));
        sim.step().expect("runs");
        let due = |host, ms| installed.timers.due_by(Duration::from_millis(ms)).has(host);
        assert!(!due(sleeper, 499) && due(sleeper, 500), "{:?}", installed.timers);
        assert!(!due(other, 500));
        // Kept by host only when asked: no deadline is anyone's.
        let installed = install();
        let mut sim = turmoil::Builder::new().tick_duration(Duration::from_millis(1)).build();
        sim.client("sleeper", async {
            sleep(Duration::from_millis(500)).await;
            Ok(())
        });
        let sleeper = sim.lookup("sleeper");
        sim.step().expect("runs");
        assert_eq!(installed.timers.earliest_running(|_| true), Some(Duration::from_millis(500)));
        assert!(!installed.timers.due_by(Duration::from_millis(500)).has(sleeper));
    }

    #[test]
    fn a_host_that_no_longer_runs_has_no_earliest_deadline() {
        let installed = install();
        installed.timers.keep_by_host();
        let mut sim = turmoil::Builder::new().tick_duration(Duration::from_millis(1)).build();
        for (name, ms) in [("late", 500), ("early", 300), ("middle", 400)] {
            sim.client(name, async move {
                sleep(Duration::from_millis(ms)).await;
                Ok(())
            });
        }
        let (late, early) = (sim.lookup("late"), sim.lookup("early"));
        sim.step().expect("runs");
        let earliest = |runs: &dyn Fn(IpAddr) -> bool| installed.timers.earliest_running(runs);
        assert_eq!(earliest(&|_| true), Some(Duration::from_millis(300)));
        assert_eq!(earliest(&|h| h != early), Some(Duration::from_millis(400)));
        assert_eq!(earliest(&|h| h == late), Some(Duration::from_millis(500)));
        assert_eq!(earliest(&|_| false), None);
    }

    #[test]
    fn every_kind_of_sleep_registers_its_deadline_in_simulation_time() {
        let at = |ms: u64| Some(Duration::from_millis(2_000 + ms));
        assert_eq!(registered(|| Box::pin(sleep(Duration::from_millis(500)))), at(500));
        assert_eq!(registered(|| Box::pin(sleep_until(Instant::now() + Duration::from_millis(70)))), at(70));
        assert_eq!(
            registered(|| Box::pin(async {
                drop(timeout(Duration::from_secs(9), std::future::pending::<()>()).await)
            })),
            at(9_000)
        );
        assert_eq!(registered(|| Box::pin(SimTimer.sleep(Duration::from_millis(300)))), at(300));
        assert_eq!(
            registered(|| Box::pin(async {
                let clock = SimClock::from_epoch(SystemTime::UNIX_EPOCH);
                clock.sleep(Duration::from_secs(4)).await
            })),
            at(4_000)
        );
    }
}
