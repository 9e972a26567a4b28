use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::Arc;

use rand::rngs::SmallRng;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio::task::LocalSet;
use tokio::time::{sleep, Duration, Instant};

use super::Result;

thread_local! {
    /// What [`crate::Sim::interrupt_when`] asked to be looked at inside a
    /// host's tick, on the thread that steps the simulation.
    static INTERRUPT: std::cell::RefCell<Option<std::rc::Rc<dyn Fn() -> bool>>> =
        const { std::cell::RefCell::new(None) };
    /// Polls of ticks on this thread since the interrupt was last looked at.
    static POLLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Polls of hosts' ticks between two looks at the interrupt (counted
/// across ticks and hosts): a look may read a clock, a poll runs up to a
/// batch of tasks.
const INTERRUPT_EVERY: u32 = 1024;

/// Sets (or clears) the interrupt looked at inside ticks on this thread.
pub(crate) fn set_interrupt(f: Option<std::rc::Rc<dyn Fn() -> bool>>) {
    INTERRUPT.with(|i| *i.borrow_mut() = f);
}

/// Why a tick stopped before its end: [`crate::Sim::interrupt_when`]'s
/// function answered true while a host was busy inside one tick (tasks
/// that stay ready without letting virtual time pass).
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the simulation was interrupted inside a step")
    }
}

impl std::error::Error for Interrupted {}

/// Counts one poll on this thread and, every [`INTERRUPT_EVERY`] polls,
/// asks the function [`crate::Sim::interrupt_when`] set: whether to stop.
///
/// A host's tick counts its own polls; software whose tasks are spawned on
/// the host's runtime (`tokio::spawn`, which a tick's count never sees when
/// they keep the runtime busy) calls this from its own futures' polls, and
/// ends them when it answers true, so that the tick can end.
pub fn look_for_interrupt() -> bool {
    let polls = POLLS.with(|p| {
        p.set((p.get() + 1) % INTERRUPT_EVERY);
        p.get()
    });
    polls == 0 && INTERRUPT.with(|i| i.borrow().as_ref().is_some_and(|f| f()))
}

/// Polls `inner`, looking at the interrupt every [`INTERRUPT_EVERY`] polls;
/// `None` when it answered true.
struct Interruptible<'w, F> {
    inner: Pin<&'w mut F>,
}

impl<F: Future> Future for Interruptible<'_, F> {
    type Output = Option<F::Output>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<F::Output>> {
        if look_for_interrupt() {
            return std::task::Poll::Ready(None);
        }
        self.inner.as_mut().poll(cx).map(Some)
    }
}

// To support re-creation, we need to store a factory of the future that
// represents the software. This is somewhat annoying in that it requires
// boxxing to avoid generics.
type Software<'a> = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Result>>> + 'a>;

/// Runtime kinds.
pub enum Kind<'a> {
    /// A runtime for executing test code.
    Client,

    /// A runtime that is running simulated host software.
    Host { software: Software<'a> },

    /// A runtime without any software. The network topology uses this for
    /// time tracking and message delivery.
    NoSoftware,
}

/// Runtime configuration.
#[derive(Clone, Default)]
pub struct Config {
    /// Whether io is enabled on the runtime.
    pub enable_io: bool,

    /// Rng used to seed the tokio runtime.
    ///
    /// Only used if the `tokio_unstable` cfg flag is set.
    #[cfg_attr(not(tokio_unstable), expect(dead_code))]
    pub rng: Option<SmallRng>,
}

/// Per host simulated runtime.
///
/// The tokio runtime is paused (see [`Builder::start_paused`]), which gives us
/// control over when and how to advance time. In particular, see [`Rt::tick`],
/// which lets the runtime do a bit more work.
pub struct Rt<'a> {
    pub kind: Kind<'a>,

    /// Handle to the Tokio runtime driving this simulated host. Each runtime
    /// may have a different sense of "now" which simulates clock skew.
    tokio: Runtime,

    /// Local task set used for running !Send tasks.
    local: LocalSet,

    /// A user readable name to identify the node.
    pub nodename: Arc<str>,

    /// Optional handle to a host's software. When software finishes, the handle is
    /// consumed to check for error, which is propagated up to fail the simulation.
    handle: Option<JoinHandle<Result>>,

    /// Runtime configuration.
    config: Config,

    /// The clock at each park of the scheduler, while `step_by` listens.
    parks: Arc<ParkLog>,

    /// Whether a task of the host may be ready to run (see [`Watch`]).
    watch: Watch,

    /// Ticks of the simulation this host was not ticked in (`Sim::step_lazily`).
    pub(crate) owed: u64,

    /// `tokio.metrics()`, kept (patched): `runnable` reads its global queue
    /// for every host in every lazy step, and each `metrics()` clones the
    /// runtime's handle.
    metrics: tokio::runtime::RuntimeMetrics,

    /// The host's connection attempts in progress (its `Host::connecting`,
    /// patched): read for every host in every lazy step without looking
    /// the host up.
    pub(crate) connecting: Arc<std::sync::atomic::AtomicUsize>,
}

/// Sees the wakes that reach a host's `LocalSet` from outside its tick: a
/// task woken by another host, by the caller between steps, or by a timer
/// that fired at the end of the tick. The `LocalSet` is polled with a waker
/// that sets `woken` and passes the wake on; the tick's own sleep is polled
/// with the plain waker, so its wake does not count. `woken` is cleared
/// when a tick starts, and starts set (software spawned on a new
/// `LocalSet` is ready without a wake).
///
/// Off (`on` false) until `Sim::step_lazily` first asks: the plain waker
/// everywhere, and `woken` stays set.
struct Watch {
    on: bool,
    woken: Arc<std::sync::atomic::AtomicBool>,
    /// The waker the runtime polls with, and its wrapper.
    wakers: std::cell::RefCell<Option<(std::task::Waker, std::task::Waker)>>,
}

impl Watch {
    fn new() -> Watch {
        Watch {
            on: false,
            woken: Arc::new(true.into()),
            wakers: Default::default(),
        }
    }

    /// Remembers `waker` and its wrapper, unless they are the ones held.
    ///
    /// Held when `waker` has the same data and the same functions as the
    /// plain waker held. `Waker::will_wake` compares the vtables' addresses,
    /// and tokio's runtime waker and the clone held carry the same functions
    /// in vtables at different addresses: `will_wake` said no on nearly
    /// every poll (a new `Arc`, and a new waker for the `LocalSet` to
    /// register, each time).
    fn wrap(&self, waker: &std::task::Waker) {
        if self.wakers.borrow().as_ref().is_some_and(|(plain, _)| {
            plain.data() == waker.data() && *plain.vtable() == *waker.vtable()
        }) {
            return;
        }
        let wrapped = std::task::Waker::from(Arc::new(Flag {
            woken: self.woken.clone(),
            inner: waker.clone(),
        }));
        *self.wakers.borrow_mut() = Some((waker.clone(), wrapped));
    }
}

/// A waker that records that it woke.
struct Flag {
    woken: Arc<std::sync::atomic::AtomicBool>,
    inner: std::task::Waker,
}

impl std::task::Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, std::sync::atomic::Ordering::Relaxed);
        self.inner.wake_by_ref();
    }
}

/// Polls `inner` (a `LocalSet::run_until`) with the watch's flagging waker.
struct Watched<'w, F> {
    inner: Pin<&'w mut F>,
    watch: &'w Watch,
}

impl<F: Future> Future for Watched<'_, F> {
    type Output = F::Output;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let watch = self.watch;
        watch.wrap(cx.waker());
        let wakers = watch.wakers.borrow();
        let (_, wrapped) = wakers.as_ref().expect("just wrapped");
        self.inner
            .as_mut()
            .poll(&mut std::task::Context::from_waker(wrapped))
    }
}

/// Polls `inner` (the tick's sleep) with the plain waker.
struct Unwatched<'w, F> {
    inner: Pin<&'w mut F>,
    watch: &'w Watch,
}

impl<F: Future> Future for Unwatched<'_, F> {
    type Output = F::Output;

    fn poll(
        mut self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let watch = self.watch;
        let wakers = watch.wakers.borrow();
        let (plain, _) = wakers.as_ref().expect("polled through `Watched` first");
        self.inner
            .as_mut()
            .poll(&mut std::task::Context::from_waker(plain))
    }
}

/// When the scheduler parked, recorded only while `listening`.
struct ParkLog {
    /// The runtime's start: its timer wheel counts milliseconds from here.
    origin: Instant,
    listening: std::sync::atomic::AtomicBool,
    at: std::sync::Mutex<Vec<Instant>>,
}

impl<'a> Rt<'a> {
    pub(crate) fn client<F>(nodename: Arc<str>, client: F, mut config: Config) -> Self
    where
        F: Future<Output = Result> + 'static,
    {
        let (tokio, local, parks) = init(&mut config);
        let metrics = tokio.metrics();

        let handle = with(&tokio, &local, || tokio::task::spawn_local(client));

        Self {
            kind: Kind::Client,
            tokio,
            local,
            nodename,
            handle: Some(handle),
            config,
            parks,
            watch: Watch::new(),
            owed: 0,
            metrics,
            connecting: Arc::default(),
        }
    }

    pub(crate) fn host<F, Fut>(nodename: Arc<str>, software: F, mut config: Config) -> Self
    where
        F: Fn() -> Fut + 'a,
        Fut: Future<Output = Result> + 'static,
    {
        let (tokio, local, parks) = init(&mut config);
        let metrics = tokio.metrics();

        let software: Software = Box::new(move || Box::pin(software()));
        let handle = with(&tokio, &local, || tokio::task::spawn_local(software()));

        Self {
            kind: Kind::Host { software },
            tokio,
            local,
            nodename,
            handle: Some(handle),
            config,
            parks,
            watch: Watch::new(),
            owed: 0,
            metrics,
            connecting: Arc::default(),
        }
    }

    pub(crate) fn no_software() -> Self {
        let mut config = Config::default();
        let (tokio, local, parks) = init(&mut config);
        let metrics = tokio.metrics();

        Self {
            kind: Kind::NoSoftware,
            tokio,
            local,
            nodename: String::new().into(),
            handle: None,
            config,
            parks,
            watch: Watch::new(),
            owed: 0,
            metrics,
            connecting: Arc::default(),
        }
    }

    pub(crate) fn is_client(&self) -> bool {
        matches!(self.kind, Kind::Client)
    }

    fn is_host(&self) -> bool {
        matches!(self.kind, Kind::Host { .. })
    }

    /// Whether a task of the host may be ready to run: a wake reached its
    /// `LocalSet` since its last tick started (or it has a new `LocalSet`),
    /// or a task was woken into its runtime's queue from outside it.
    pub(crate) fn runnable(&self) -> bool {
        if !self.watch.on {
            return true;
        }
        self.watch.woken.load(std::sync::atomic::Ordering::Relaxed)
            || self.metrics.global_queue_depth() > 0
    }

    /// Watches the host's wakes from its next tick on (see [`Watch`]);
    /// until that tick it counts as runnable.
    pub(crate) fn watch(&mut self) {
        if !self.watch.on {
            self.watch.on = true;
            self.watch
                .woken
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub(crate) fn is_software_running(&self) -> bool {
        self.handle.is_some()
    }

    pub(crate) fn now(&self) -> Instant {
        let _guard = self.tokio.enter();
        Instant::now()
    }

    // This method is called by [`Sim::run`], which iterates through all the
    // runtimes and ticks each one. The magic of this method is described in the
    // documentation for [`LocalSet::run_until`], but it may not be entirely
    // obvious how things fit together.
    //
    // A [`LocalSet`] tracks the tasks to run, which may in turn spawn more
    // tasks. `run_until` drives a top level task to completion, but not its
    // children. If you look below, you may be confused. The task we run here
    // just sleeps and has no children! However, it's the _same `LocalSet`_ that
    // is used to run software on the host.
    //
    // In this way, every time `tick` is called, the following unfolds:
    //
    // 1. Time advances on the runtime
    // 2. We schedule a new task that simply sleeps
    // 3. Other tasks on the `LocalSet` get a chance to run
    // 4. The sleep finishes
    // 5. The runtime pauses
    //
    // Returns whether the software has finished successfully or the error
    // that caused failure. Subsequent calls do not return the error as it is
    // expected to fail the simulation.
    pub(crate) fn tick(&mut self, duration: Duration) -> Result<bool> {
        let watch = &self.watch;
        let finished = if watch.on {
            watch
                .woken
                .store(false, std::sync::atomic::Ordering::Relaxed);
            // Made on its first poll, inside the runtime, as before.
            let sleep = std::pin::pin!(async { sleep(duration).await });
            let run = std::pin::pin!(self.local.run_until(Unwatched {
                inner: sleep,
                watch
            }));
            let watched = std::pin::pin!(Watched { inner: run, watch });
            self.tokio.block_on(Interruptible { inner: watched })
        } else {
            let run = std::pin::pin!(self.local.run_until(async {
                sleep(duration).await;
            }));
            self.tokio.block_on(Interruptible { inner: run })
        };
        if finished.is_none() {
            return Err(Box::new(Interrupted));
        }

        // pull for software completion
        match &self.handle {
            Some(handle) if handle.is_finished() => {
                // Consume handle to extract task result
                if let Some(h) = self.handle.take() {
                    match self.tokio.block_on(h) {
                        // If the host was crashed the JoinError is cancelled, which
                        // needs to be handled to not fail the simulation.
                        Err(je) if je.is_cancelled() => {}
                        res => res??,
                    }
                };
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Ok(true),
        }
    }

    /// Ticks by `duration`, `n + 1` ticks of `tick` (whole milliseconds),
    /// at once, and moves the scheduler's queue-choice counter on as `n + 1`
    /// idle ticks would have, without moving the clock further or running a
    /// task of the host (the caller only skips ticks in which nothing
    /// happens).
    ///
    /// tokio's current-thread scheduler's `u32` tick chooses between its
    /// local and global run queues (global queue first every 31st pass,
    /// tokio's default `global_queue_interval`) and counts one pass per
    /// park and one per task it runs. An idle tick parks at its start as
    /// many times as the long tick does (the wake that ended the previous
    /// tick leaves the time driver's `did_wake` set, so the first park
    /// returns at once), and once more at every multiple of 64 ms of the
    /// timer wheel strictly inside it: the tick's own sleep crosses into the
    /// wheel's next level there and cascades (so does any other timer's
    /// slot, in the same park). The long tick parks at the cascades of the
    /// timers actually in the wheel, on the ticks' boundaries or not; the
    /// park hook counts them. Only the counter's value modulo 31 decides
    /// anything, so at most 30 passes stand for any `n`: one park and up to
    /// 29 polls of an empty task ([`Passes`]); the park leaves `did_wake`
    /// set, as a tick does.
    ///
    /// The `LocalSet`'s own `u8` tick (remote queue first every 31st task)
    /// is left as the long tick left it: its remote queue only ever holds
    /// tasks woken from another thread (tokio's `Shared::schedule`), which
    /// a simulation, stepped on one thread, has none of.
    pub(crate) fn tick_idle(&mut self, duration: Duration, tick: Duration, n: u64) -> Result<bool> {
        use std::sync::atomic::Ordering::Relaxed;
        let start = self.now();
        self.parks.at.lock().unwrap().clear();
        self.parks.listening.store(true, Relaxed);
        let finished = self.tick(duration);
        self.parks.listening.store(false, Relaxed);
        let at = std::mem::take(&mut *self.parks.at.lock().unwrap());
        let first = at.iter().filter(|&&t| t == start).count() as u64;
        let later = at.len() as u64 - first;
        // The wheel's 64 ms multiples strictly inside the ticks.
        let tick_ms = tick.as_millis().max(1) as u64;
        let from = (start - self.parks.origin).as_millis() as u64;
        let to = from + duration.as_millis() as u64;
        let inside = match tick_ms {
            1 => 0,
            _ => (from / 64 + 1..to.div_ceil(64))
                .filter(|m| !(m * 64 - from).is_multiple_of(tick_ms))
                .count() as u64,
        };
        // Wanted modulo 31: (n + 1) ticks' first parks and the parks inside
        // them, less those the long tick made.
        let wanted = ((n + 1) % 31) * (first % 31) + inside;
        let core = (wanted % 31 + 31 - (first + later) % 31) % 31;
        if core > 0 {
            self.tokio.block_on(Passes {
                passes: core as u32,
                polled: false,
            });
        }
        finished
    }

    pub(crate) fn crash(&mut self) {
        if !self.is_host() {
            panic!("can only crash host's software");
        }

        if self.handle.take().is_some() {
            self.cancel_tasks();
        };
    }

    pub(crate) fn bounce(&mut self) {
        if !self.is_host() {
            panic!("can only bounce host's software");
        }

        self.cancel_tasks();

        if let Kind::Host { software } = &self.kind {
            let handle = with(&self.tokio, &self.local, || {
                tokio::task::spawn_local(software())
            });
            self.handle.replace(handle);
        };
    }

    /// Cancel all tasks within the [`Rt`] by dropping the current tokio
    /// [`Runtime`].
    ///
    /// Dropping the runtime blocks the calling thread until all futures have
    /// completed, which is desired here to ensure host software completes and
    /// all resources are dropped.
    ///
    /// Both the [`Runtime`] and [`LocalSet`] are replaced with new instances.
    fn cancel_tasks(&mut self) {
        let (tokio, local, parks) = init(&mut self.config);

        self.parks = parks;
        self.watch = Watch {
            on: self.watch.on,
            ..Watch::new()
        };
        _ = mem::replace(&mut self.tokio, tokio);
        self.metrics = self.tokio.metrics();
        drop(mem::replace(&mut self.local, local));
    }
}

fn init(config: &mut Config) -> (Runtime, LocalSet, Arc<ParkLog>) {
    let mut tokio_builder = tokio::runtime::Builder::new_current_thread();

    let log: Arc<std::sync::OnceLock<Arc<ParkLog>>> = Arc::default();
    let hook = log.clone();
    tokio_builder.on_thread_park(move || {
        if let Some(log) = hook
            .get()
            .filter(|l| l.listening.load(std::sync::atomic::Ordering::Relaxed))
        {
            log.at.lock().unwrap().push(Instant::now());
        }
    });

    #[cfg(tokio_unstable)]
    tokio_builder.unhandled_panic(tokio::runtime::UnhandledPanic::ShutdownRuntime);

    if config.enable_io {
        tokio_builder.enable_io();
    }

    #[cfg(tokio_unstable)]
    if let Some(rng) = &mut config.rng {
        let bytes: [u8; 32] = rand::Rng::random(rng);
        let seed = tokio::runtime::RngSeed::from_bytes(&bytes);
        tokio_builder.rng_seed(seed);
    }

    let tokio = tokio_builder
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();

    let parks = Arc::new(ParkLog {
        origin: tokio.block_on(async { Instant::now() }),
        listening: Default::default(),
        at: Default::default(),
    });
    _ = log.set(parks.clone());

    tokio.block_on(async {
        // Sleep to "round" `Instant::now()` to the closest `ms`
        tokio::time::sleep(Duration::from_millis(1)).await;
    });

    (tokio, new_local(), parks)
}

fn new_local() -> LocalSet {
    #[cfg(not(tokio_unstable))]
    let local = LocalSet::new();

    #[cfg(tokio_unstable)]
    let mut local = LocalSet::new();

    #[cfg(tokio_unstable)]
    local.unhandled_panic(tokio::runtime::UnhandledPanic::ShutdownRuntime);

    local
}

fn with<R>(tokio: &Runtime, local: &LocalSet, f: impl FnOnce() -> R) -> R {
    tokio.block_on(async { local.run_until(async { f() }).await })
}

/// Moves a current-thread scheduler's tick on by `passes` passes (1 to 61)
/// without moving a paused clock or running anything of the host's: its
/// first poll spawns an empty task on the runtime that is polled
/// `passes - 1` times ([`Spin`]; the scheduler counts a pass for each poll
/// it runs, and one more as it finds its queue empty) and wakes itself, so
/// the scheduler yields to the driver (`park_yield`, which does not move
/// the clock) and polls it again; the second poll is ready. Each poll wakes
/// itself, so the wake leaves the time driver's `did_wake` set, as the end
/// of a tick does. tokio's `event_interval` is 61 passes before a yield.
struct Passes {
    passes: u32,
    polled: bool,
}

impl Future for Passes {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        cx.waker().wake_by_ref();
        if self.polled {
            return std::task::Poll::Ready(());
        }
        self.polled = true;
        if self.passes > 1 {
            drop(tokio::spawn(Spin(self.passes - 1)));
        }
        std::task::Poll::Pending
    }
}

/// Ready on its `n`th poll (`n` at least 1), waking itself before.
struct Spin(u32);

impl Future for Spin {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.0 -= 1;
        if self.0 == 0 {
            return std::task::Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}
