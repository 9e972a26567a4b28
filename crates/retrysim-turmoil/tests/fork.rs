//! Tests of what the fork adds to turmoil 0.7.2 (see FORK.md):
//! `Sim::step_by`, `Sim::next_delivery`, `Sim::step_lazily` and
//! `Sim::step_by_lazily` with `Sim::lazy_woken` and `Sim::lazy_ticks`,
//! `Sim::work`, and `turmoil::current_host_addr`.
//!
//! Most tests run a scenario stepped the new way and the same scenario
//! stepped by plain `step`s, and compare what the hosts saw: when each task
//! ran, in which order, with which clocks. Where such a comparison could
//! pass only because the scenario never depends on what is compared, the
//! test also shows that it does: plain runs that differ among themselves,
//! or a control run that steps wrongly and is told apart.

use std::collections::BTreeSet;
use std::future::pending;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use turmoil::net::{TcpListener, TcpStream, UdpSocket};
use turmoil::{Builder, Result, Sim};

const MS: Duration = Duration::from_millis(1);
const PORT: u16 = 1738;

/// What the hosts saw, in the order they saw it.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, line: impl Into<String>) {
        self.0.lock().unwrap().push(line.into());
    }

    /// A line with the running host's clocks as its software sees them.
    fn clocks(&self, what: &str) {
        let host = turmoil::current_host_addr().expect("called from a host");
        self.push(format!(
            "{what} on {host}: elapsed {:?} sim_elapsed {:?} since_epoch {:?}",
            turmoil::elapsed(),
            turmoil::sim_elapsed().unwrap(),
            turmoil::since_epoch().unwrap(),
        ));
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Every sleeping timer of the simulated software, with its host and its
/// deadline as a simulation time: what a caller of `step_by` and
/// `step_lazily` has to know (retrysim keeps such a registry).
#[derive(Clone, Default)]
struct Timers(Arc<Mutex<Vec<(IpAddr, Duration)>>>);

impl Timers {
    /// `tokio::time::sleep`, registered while it waits.
    async fn sleep(&self, duration: Duration) {
        let host = turmoil::current_host_addr().expect("called from a host");
        let entry = (host, turmoil::sim_elapsed().unwrap() + duration);
        self.0.lock().unwrap().push(entry);
        let _registered = Registered(self, entry);
        tokio::time::sleep(duration).await;
    }

    /// The earliest deadline of any host.
    fn earliest(&self) -> Option<Duration> {
        self.0.lock().unwrap().iter().map(|&(_, at)| at).min()
    }

    /// Whether a timer of `host` is due by `end`.
    fn due(&self, host: IpAddr, end: Duration) -> bool {
        self.0
            .lock()
            .unwrap()
            .iter()
            .any(|&(h, at)| h == host && at <= end)
    }
}

/// Takes a timer out of the registry when its sleep ends or is dropped.
struct Registered<'t>(&'t Timers, (IpAddr, Duration));

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let mut timers = (self.0).0.lock().unwrap();
        let at = timers
            .iter()
            .position(|e| *e == self.1)
            .expect("registered");
        timers.remove(at);
    }
}

/// How a run is stepped.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// `step` every tick.
    Plain,
    /// `step_by` over every stretch in which nothing can happen (no timer
    /// fires, no message becomes deliverable), `step` otherwise.
    Skip,
    /// `step_lazily` every tick, told of every timer.
    Lazy,
    /// `Skip`, with `step_lazily` in place of `step` and `step_by_lazily`
    /// in place of `step_by`.
    SkipLazy,
    /// Control: `Skip`, but each skip one tick longer than idle.
    Overshoot,
    /// Control: `step_lazily` every tick, told of no timer.
    LazyBlind,
}

/// What stepping a run did.
#[derive(Debug, Default)]
struct Stepped {
    /// Calls to a step function.
    steps: u64,
    /// Ticks that `step_by` covered beyond the first of each of its steps.
    skipped: u64,
    /// `Sim::lazy_ticks` at the end.
    lazy_ticks: u64,
    /// `Sim::lazy_woken` at the end.
    lazy_woken: bool,
}

/// Something the test does to the simulation between steps.
type Action = Box<dyn FnOnce(&mut Sim<'static>)>;

/// A simulation, the log and the timer registry its software shares, and
/// what the test does to it at which simulation times.
struct Run {
    sim: Sim<'static>,
    tick: Duration,
    log: Log,
    timers: Timers,
    actions: Vec<(Duration, Action)>,
}

impl Run {
    fn new(builder: &mut Builder, tick: Duration) -> Run {
        let sim = builder
            .tick_duration(tick)
            .epoch(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
            .build();
        Run {
            sim,
            tick,
            log: Log::default(),
            timers: Timers::default(),
            actions: Vec::new(),
        }
    }

    /// Does `action` before the first step that starts at or after `at`.
    fn at(&mut self, at: Duration, action: impl FnOnce(&mut Sim<'static>) + 'static) {
        self.actions.push((at, Box::new(action)));
        self.actions.sort_by_key(|(at, _)| *at);
    }

    /// Steps until the clients finish, as `mode` says, and returns the log.
    /// A stretch is skipped only when it ends before the earliest timer and
    /// the network's next delivery, and no later than the next action; the
    /// first step, and the step after an action, are never skipped
    /// (software that starts is ready to run without a timer).
    fn drive(&mut self, mode: Mode) -> (Result<Stepped>, Vec<String>) {
        let result = self.drive_inner(mode);
        (result, self.log.lines())
    }

    fn drive_inner(&mut self, mode: Mode) -> Result<Stepped> {
        let mut stepped = Stepped::default();
        let timers = self.timers.clone();
        let mut fresh = true;
        loop {
            while self
                .actions
                .first()
                .is_some_and(|(at, _)| *at <= self.sim.elapsed())
            {
                let (_, action) = self.actions.remove(0);
                action(&mut self.sim);
                fresh = true;
            }
            let skips = matches!(mode, Mode::Skip | Mode::SkipLazy | Mode::Overshoot);
            let mut ticks = if skips && !fresh {
                self.idle_ticks()
            } else {
                0
            };
            if mode == Mode::Overshoot && ticks > 0 {
                ticks += 1;
            }
            fresh = false;
            let done = if ticks >= 2 {
                stepped.skipped += ticks - 1;
                let by = self.tick * u32::try_from(ticks).unwrap();
                if mode == Mode::SkipLazy {
                    self.sim
                        .step_by_lazily(by, &|host, end| timers.due(host, end))?
                } else {
                    self.sim.step_by(by)?
                }
            } else {
                match mode {
                    Mode::Lazy | Mode::SkipLazy => {
                        self.sim.step_lazily(&|host, end| timers.due(host, end))?
                    }
                    Mode::LazyBlind => self.sim.step_lazily(&|_, _| false)?,
                    _ => self.sim.step()?,
                }
            };
            stepped.steps += 1;
            stepped.lazy_ticks = self.sim.lazy_ticks();
            stepped.lazy_woken = self.sim.lazy_woken();
            if done {
                return Ok(stepped);
            }
        }
    }

    /// How many ticks from now nothing can happen in: the step must end
    /// before the earliest timer (a timer due at the step's end fires in
    /// it) and before the next delivery (a message deliverable by the
    /// step's end is handed over at its start), and may end at the next
    /// action. At most 10 s.
    fn idle_ticks(&self) -> u64 {
        let now = self.sim.elapsed();
        let tick = self.tick.as_nanos();
        let mut ticks = 10_000_000_000 / tick;
        if let Some((at, _)) = self.actions.first() {
            ticks = ticks.min(at.saturating_sub(now).as_nanos() / tick);
        }
        let first = [self.timers.earliest(), self.sim.next_delivery()]
            .into_iter()
            .flatten()
            .min();
        if let Some(first) = first {
            ticks = ticks.min(first.saturating_sub(now).as_nanos().saturating_sub(1) / tick);
        }
        ticks as u64
    }
}

/// The log and what stepping did, failing on a run that failed.
fn ok((result, log): (Result<Stepped>, Vec<String>)) -> (Stepped, Vec<String>) {
    (result.expect("the run fails"), log)
}

// ---------------------------------------------------------------------------
// Sim::step_by

/// Two clients whose tasks wake at the same instants: "a"'s by their own
/// timers, by a task of "a" that another woke, and by a task of "b" (through
/// memory the hosts share), after a prelude of `prelude` 1 ms sleeps and a
/// wait of `wait` ms in which nothing happens. They log the order they run
/// in. Which of two tasks ready at the same instant runs first depends on
/// the counter tokio's scheduler keeps of its passes (every 31st pass takes
/// the queue of tasks woken from outside the runtime first).
fn same_instant(tick: Duration, prelude: u64, wait: u64, mode: Mode) -> (Stepped, Vec<String>) {
    let mut run = Run::new(&mut Builder::new(), tick);
    let across = Arc::new(Notify::new());

    // Registered first, so ticked before "a" in every step: its wake of a
    // task of "a" lands in the instant that task's timers fire in.
    let (log, timers, to_a) = (run.log.clone(), run.timers.clone(), across.clone());
    run.sim.client("b", async move {
        let start = Instant::now();
        for round in 0..3 {
            let at = Duration::from_millis(prelude + wait + round * 5);
            timers.sleep(at - start.elapsed()).await;
            log.push(format!("b {round}"));
            to_a.notify_one();
        }
        Ok(())
    });

    let (log, timers) = (run.log.clone(), run.timers.clone());
    run.sim.client("a", async move {
        for _ in 0..prelude {
            timers.sleep(MS).await;
        }
        let start = Instant::now();
        for round in 0..3 {
            let at = Duration::from_millis(wait + round * 5);
            let within = Arc::new(Notify::new());
            let mut tasks = Vec::new();
            for name in ["l1", "l2"] {
                let (log, timers, within) = (log.clone(), timers.clone(), within.clone());
                tasks.push(tokio::task::spawn_local(async move {
                    timers.sleep(at - start.elapsed()).await;
                    log.push(format!("a {round} {name}"));
                    within.notify_one();
                }));
            }
            let (l, w) = (log.clone(), within.clone());
            tasks.push(tokio::task::spawn_local(async move {
                w.notified().await;
                l.push(format!("a {round} l-woken"));
            }));
            for name in ["r1", "r2"] {
                let (log, timers) = (log.clone(), timers.clone());
                tasks.push(tokio::spawn(async move {
                    timers.sleep(at - start.elapsed()).await;
                    log.push(format!("a {round} {name}"));
                }));
            }
            let (l, a) = (log.clone(), across.clone());
            tasks.push(tokio::spawn(async move {
                a.notified().await;
                l.push(format!("a {round} r-woken"));
            }));
            for task in tasks {
                task.await?;
            }
            log.clocks(&format!("a {round} done"));
        }
        Ok(())
    });

    ok(run.drive(mode))
}

#[test]
fn step_by_keeps_the_order_of_tasks_woken_at_one_instant() {
    for tick in [MS, 5 * MS] {
        let mut orders = BTreeSet::new();
        for prelude in 0..40 {
            let wait = 20 + 7 * prelude;
            let (_, plain) = same_instant(tick, prelude, wait, Mode::Plain);
            let (stepped, skip) = same_instant(tick, prelude, wait, Mode::Skip);
            assert!(stepped.skipped > 0, "{stepped:?}");
            assert_eq!(skip, plain, "tick {tick:?} prelude {prelude} wait {wait}");
            let order: Vec<_> = plain
                .iter()
                .filter(|l| !l.contains("done"))
                .cloned()
                .collect();
            orders.insert(order);
        }
        // The order differs from one run to another: the comparison above
        // would see a `step_by` that left the counters elsewhere.
        assert!(orders.len() > 2, "tick {tick:?}: {orders:?}");
    }
}

/// A client that sleeps, a host crashed and restarted, and a client added
/// late, each logging its clocks whenever it runs.
fn clocks(mode: Mode) -> (Stepped, Vec<String>, Duration) {
    let mut run = Run::new(&mut Builder::new(), MS);

    let (log, timers) = (run.log.clone(), run.timers.clone());
    run.sim.client("sleeper", async move {
        log.clocks("sleeper start");
        timers.sleep(40 * MS).await;
        log.clocks("sleeper 40");
        timers.sleep(100 * MS).await;
        log.clocks("sleeper 140");
        Ok(())
    });

    let (log, timers) = (run.log.clone(), run.timers.clone());
    run.sim.host("bouncer", move || {
        let (log, timers) = (log.clone(), timers.clone());
        async move {
            log.clocks("bouncer start");
            timers.sleep(30 * MS).await;
            log.clocks("bouncer 30");
            pending().await
        }
    });
    run.at(5 * MS, |sim| sim.crash("bouncer"));
    run.at(60 * MS, |sim| sim.bounce("bouncer"));

    let (log, timers) = (run.log.clone(), run.timers.clone());
    run.at(10 * MS, move |sim| {
        sim.client("late", async move {
            log.clocks("late start");
            timers.sleep(25 * MS).await;
            log.clocks("late 25");
            Ok(())
        })
    });

    let (stepped, log) = ok(run.drive(mode));
    (stepped, log, run.sim.elapsed())
}

#[test]
fn step_by_moves_the_clocks_as_plain_steps_do() {
    let (plain_stepped, plain, plain_elapsed) = clocks(Mode::Plain);
    let (stepped, skip, elapsed) = clocks(Mode::Skip);
    assert!(stepped.skipped > 100, "{stepped:?}");
    assert_eq!(stepped.steps + stepped.skipped, plain_stepped.steps);
    assert_eq!(skip, plain);
    assert_eq!(elapsed, plain_elapsed);
    assert_eq!(elapsed, 141 * MS);
    // The late client's clocks start at its registration, the bounced
    // host's software sees the time it was away.
    assert!(
        plain
            .iter()
            .any(|l| l.starts_with("late 25") && l.contains("elapsed 25ms sim_elapsed 35ms")),
        "{plain:#?}"
    );
    assert!(
        plain
            .iter()
            .any(|l| l.starts_with("bouncer 30") && l.contains("sim_elapsed 90ms")),
        "{plain:#?}"
    );
}

#[test]
fn step_by_moves_elapsed_by_its_duration() -> Result {
    let mut sim = Builder::new().tick_duration(MS).build();
    sim.client("c", pending());
    sim.step()?;
    sim.step_by(37 * MS)?;
    assert_eq!(sim.elapsed(), 38 * MS);
    sim.step_by(MS)?;
    sim.step()?;
    assert_eq!(sim.elapsed(), 40 * MS);
    Ok(())
}

/// The error of a run that outlives its duration.
fn duration_error(skip: bool) -> String {
    let mut sim = Builder::new()
        .tick_duration(MS)
        .simulation_duration(30 * MS)
        .build();
    sim.client("c", pending());
    sim.step().unwrap();
    if skip {
        sim.step_by(20 * MS).unwrap();
    }
    loop {
        if let Err(e) = sim.step() {
            return e.to_string();
        }
    }
}

#[test]
fn step_by_counts_its_ticks_in_the_duration_error() {
    let plain = duration_error(false);
    assert!(plain.contains("steps: 32"), "{plain}");
    assert_eq!(duration_error(true), plain);
}

/// A client pinging an echo server over UDP, with random latencies, and a
/// second client pinging it now and then; everyone logs when it received
/// what, with its clocks.
fn udp_ping_pong(mode: Mode) -> (Stepped, Vec<String>) {
    let mut builder = Builder::new();
    builder
        .min_message_latency(2 * MS)
        .max_message_latency(30 * MS)
        .rng_seed(7);
    let mut run = Run::new(&mut builder, MS);

    let log = run.log.clone();
    run.sim.host("server", move || {
        let log = log.clone();
        async move {
            let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, PORT)).await?;
            let mut buf = [0; 64];
            loop {
                let (n, from) = sock.recv_from(&mut buf).await?;
                log.clocks(&format!(
                    "server got {:?} from {from}",
                    String::from_utf8_lossy(&buf[..n])
                ));
                sock.send_to(&buf[..n], from).await?;
            }
        }
    });

    for (name, rounds, pause) in [("pinger", 12u64, 3u64), ("rare", 3, 45)] {
        let (log, timers) = (run.log.clone(), run.timers.clone());
        run.sim.client(name, async move {
            let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, PORT)).await?;
            let server = SocketAddr::from((turmoil::lookup("server"), PORT));
            let mut buf = [0; 64];
            for round in 0..rounds {
                timers
                    .sleep(Duration::from_millis(pause * (round % 3)))
                    .await;
                sock.send_to(format!("{name} {round}").as_bytes(), server)
                    .await?;
                let (n, _) = sock.recv_from(&mut buf).await?;
                log.clocks(&format!(
                    "{name} got {:?}",
                    String::from_utf8_lossy(&buf[..n])
                ));
            }
            Ok(())
        });
    }

    ok(run.drive(mode))
}

#[test]
fn step_by_delivers_messages_in_flight_as_plain_steps_do() {
    let (_, plain) = udp_ping_pong(Mode::Plain);
    let (stepped, skip) = udp_ping_pong(Mode::Skip);
    assert!(stepped.skipped > 50, "{stepped:?}");
    assert_eq!(skip, plain);
    // Control: a skip one tick too long hands a message over a tick late.
    let (_, overshot) = udp_ping_pong(Mode::Overshoot);
    assert_ne!(overshot, plain);
}

// ---------------------------------------------------------------------------
// Sim::next_delivery

/// A client that sends one datagram to "server" per entry of `sends` (after
/// sleeping that long since the previous send), and a server that logs what
/// it receives and when.
fn one_way(builder: &mut Builder, clients: &[(&'static str, &'static [u64])]) -> Run {
    let mut run = Run::new(builder, MS);
    let log = run.log.clone();
    run.sim.host("server", move || {
        let log = log.clone();
        async move {
            let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, PORT)).await?;
            let mut buf = [0; 64];
            loop {
                let (n, _) = sock.recv_from(&mut buf).await?;
                let at = turmoil::sim_elapsed().unwrap();
                log.push(format!("{} at {at:?}", String::from_utf8_lossy(&buf[..n])));
            }
        }
    });
    for &(name, sends) in clients {
        let log = run.log.clone();
        run.sim.client(name, async move {
            let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, PORT)).await?;
            let server = SocketAddr::from((turmoil::lookup("server"), PORT));
            for (i, &after) in sends.iter().enumerate() {
                tokio::time::sleep(Duration::from_millis(after)).await;
                let at = turmoil::sim_elapsed().unwrap();
                log.push(format!("{name} sent {i} at {at:?}"));
                sock.send_to(format!("{name} {i}").as_bytes(), server)
                    .await?;
            }
            pending().await
        });
    }
    run
}

#[test]
fn next_delivery_is_none_when_nothing_is_in_flight() -> Result {
    let mut builder = Builder::new();
    builder
        .min_message_latency(5 * MS)
        .max_message_latency(5 * MS);
    let mut run = one_way(&mut builder, &[("client", &[3])]);
    let sim = &mut run.sim;
    assert_eq!(sim.next_delivery(), None);
    for _ in 0..3 {
        sim.step()?;
        assert_eq!(sim.next_delivery(), None, "at {:?}", sim.elapsed());
    }
    // Sent at 3 ms, in the step that ends at 4 ms.
    sim.step()?;
    assert_eq!(sim.next_delivery(), Some(9 * MS));
    for _ in 0..10 {
        sim.step()?;
    }
    assert_eq!(run.log.lines(), ["client sent 0 at 3ms", "client 0 at 8ms"]);
    assert_eq!(run.sim.next_delivery(), None);
    Ok(())
}

#[test]
fn next_delivery_is_when_a_step_hands_the_message_over() -> Result {
    // Two clients, one link slower than the other: the one sent later is
    // delivered first.
    let mut builder = Builder::new();
    builder.min_message_latency(MS).max_message_latency(MS);
    let mut run = one_way(&mut builder, &[("slow", &[0]), ("fast", &[5])]);
    run.sim.set_link_latency("slow", "server", 30 * MS);
    run.sim.set_link_latency("fast", "server", 10 * MS);
    let mut seen = Vec::new();
    while run.sim.elapsed() < 50 * MS {
        run.sim.step()?;
        let next = run.sim.next_delivery();
        if seen.last() != Some(&next) {
            seen.push(next);
        }
    }
    // Sent at 0 (in the step ending at 1 ms) and at 5 ms (in the step
    // ending at 6 ms); the latency counts from the step's end.
    assert_eq!(seen, [Some(31 * MS), Some(16 * MS), Some(31 * MS), None]);
    // Handed over in the step whose end reaches that time, at its start.
    assert_eq!(
        run.log.lines(),
        [
            "slow sent 0 at 0ns",
            "fast sent 0 at 5ms",
            "fast 0 at 15ms",
            "slow 0 at 30ms"
        ]
    );
    Ok(())
}

#[test]
fn next_delivery_leaves_out_held_messages() -> Result {
    let mut builder = Builder::new();
    builder
        .min_message_latency(3 * MS)
        .max_message_latency(3 * MS);
    let mut run = one_way(&mut builder, &[("held", &[0]), ("free", &[10])]);
    run.sim.hold("held", "server");
    for _ in 0..5 {
        run.sim.step()?;
        // In flight, but held: it has no delivery time.
        assert_eq!(run.sim.next_delivery(), None);
    }
    for _ in 5..11 {
        run.sim.step()?;
    }
    // Only the free link's message counts.
    assert_eq!(run.sim.next_delivery(), Some(14 * MS));
    for _ in 11..20 {
        run.sim.step()?;
    }
    assert_eq!(run.sim.next_delivery(), None);
    run.sim.release("held", "server");
    // Released: deliverable now, handed over in the next step.
    assert_eq!(run.sim.next_delivery(), Some(20 * MS));
    run.sim.step()?;
    assert_eq!(run.sim.next_delivery(), None);
    assert_eq!(
        run.log.lines(),
        [
            "held sent 0 at 0ns",
            "free sent 0 at 10ms",
            "free 0 at 13ms",
            "held 0 at 20ms"
        ]
    );
    Ok(())
}

#[test]
fn next_delivery_leaves_out_messages_to_a_host_that_is_down() -> Result {
    let mut builder = Builder::new();
    builder
        .min_message_latency(3 * MS)
        .max_message_latency(3 * MS);
    let mut run = one_way(&mut builder, &[("client", &[0])]);
    run.sim.step()?;
    // In flight to a host that is down: no step hands it over.
    run.sim.crash("server");
    assert_eq!(run.sim.next_delivery(), None);
    for _ in 1..8 {
        run.sim.step()?;
        assert_eq!(run.sim.next_delivery(), None);
    }
    // Deliverable since the step that ended at 4 ms: up again, it is
    // handed over in the next step.
    run.sim.bounce("server");
    assert_eq!(run.sim.next_delivery(), Some(8 * MS));
    run.sim.step()?;
    assert_eq!(run.sim.next_delivery(), None);
    Ok(())
}

#[test]
fn next_delivery_leaves_out_dropped_messages() -> Result {
    let mut builder = Builder::new();
    builder
        .min_message_latency(3 * MS)
        .max_message_latency(3 * MS);
    let mut run = one_way(&mut builder, &[("client", &[0, 1])]);
    run.sim.step()?;
    assert_eq!(run.sim.next_delivery(), Some(4 * MS));
    run.sim.partition("client", "server");
    assert_eq!(run.sim.next_delivery(), None);
    for _ in 0..10 {
        run.sim.step()?;
        assert_eq!(run.sim.next_delivery(), None);
    }
    assert_eq!(
        run.log.lines(),
        ["client sent 0 at 0ns", "client sent 1 at 1ms"]
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Sim::step_lazily

/// Four hosts, most of them idle most of the time: an echo server, a client
/// pinging it, a client that sleeps long and then pings once, and a host
/// that is crashed and bounced while idle. Everyone logs its clocks.
fn mostly_idle(mode: Mode) -> (Result<Stepped>, Vec<String>) {
    let mut builder = Builder::new();
    builder
        .min_message_latency(MS)
        .max_message_latency(20 * MS)
        .rng_seed(11)
        .simulation_duration(Duration::from_secs(1));
    let mut run = Run::new(&mut builder, MS);

    let log = run.log.clone();
    run.sim.host("server", move || {
        let log = log.clone();
        async move {
            let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, PORT)).await?;
            let mut buf = [0; 64];
            loop {
                let (n, from) = sock.recv_from(&mut buf).await?;
                log.clocks(&format!(
                    "server got {:?}",
                    String::from_utf8_lossy(&buf[..n])
                ));
                sock.send_to(&buf[..n], from).await?;
            }
        }
    });

    for (name, first, rounds) in [("pinger", 0, 15u64), ("sleeper", 150, 1)] {
        let (log, timers) = (run.log.clone(), run.timers.clone());
        run.sim.client(name, async move {
            let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, PORT)).await?;
            let server = SocketAddr::from((turmoil::lookup("server"), PORT));
            timers.sleep(first * MS).await;
            log.clocks(&format!("{name} woke"));
            let mut buf = [0; 64];
            for round in 0..rounds {
                sock.send_to(format!("{name} {round}").as_bytes(), server)
                    .await?;
                let (n, _) = sock.recv_from(&mut buf).await?;
                log.clocks(&format!(
                    "{name} got {:?}",
                    String::from_utf8_lossy(&buf[..n])
                ));
                timers.sleep(7 * MS).await;
            }
            Ok(())
        });
    }

    let (log, timers) = (run.log.clone(), run.timers.clone());
    run.sim.host("idle", move || {
        let (log, timers) = (log.clone(), timers.clone());
        async move {
            log.clocks("idle start");
            loop {
                timers.sleep(Duration::from_millis(70)).await;
                log.clocks("idle woke");
            }
        }
    });
    run.at(50 * MS, |sim| sim.crash("idle"));
    run.at(90 * MS, |sim| sim.bounce("idle"));

    run.drive(mode)
}

/// Sixteen hosts that sleep through the run and one client busy every
/// millisecond for 100 ms, stepped as `mode` says; what the simulation
/// counted.
fn sixteen_idle_one_busy(mode: Mode) -> (Stepped, turmoil::Work) {
    let mut run = Run::new(&mut Builder::new(), MS);
    for i in 0..16 {
        let (log, timers) = (run.log.clone(), run.timers.clone());
        run.sim.host(format!("idle-{i}"), move || {
            let (log, timers) = (log.clone(), timers.clone());
            async move {
                timers.sleep(Duration::from_secs(60)).await;
                log.clocks("idle woke");
                Ok(())
            }
        });
    }
    let timers = run.timers.clone();
    run.sim.client("busy", async move {
        for _ in 0..100 {
            timers.sleep(MS).await;
        }
        Ok(())
    });
    let (stepped, log) = ok(run.drive(mode));
    assert!(log.is_empty(), "{log:?}");
    (stepped, run.sim.work())
}

#[test]
fn idle_hosts_are_polled_about_never() {
    // Every step polls all 17 hosts.
    let (plain_stepped, plain) = sixteen_idle_one_busy(Mode::Plain);
    assert_eq!(plain.steps, plain_stepped.steps);
    assert_eq!(plain.host_polls, 17 * plain.steps);
    assert!(plain.steps >= 100, "{plain:?}");
    // Lazily, the idle hosts are polled in the first step (software that
    // starts has something to do) and never again: the busy client alone
    // costs a poll a step.
    for mode in [Mode::Lazy, Mode::SkipLazy] {
        let (stepped, lazy) = sixteen_idle_one_busy(mode);
        assert_eq!(lazy.steps, stepped.steps, "{mode:?}");
        assert_eq!(lazy.host_polls, lazy.steps + 16, "{mode:?}: {lazy:?}");
        assert_eq!(stepped.lazy_ticks, 16 * (plain.steps - 1), "{mode:?}");
    }
    // Control: told of no timer, the busy client is not polled either and
    // the run never finishes.
    let mut run = Run::new(&mut Builder::new(), MS);
    run.sim.client("busy", async {
        tokio::time::sleep(5 * MS).await;
        Ok(())
    });
    for _ in 0..50 {
        assert!(!run.sim.step_lazily(&|_, _| false).unwrap());
    }
    assert_eq!(run.sim.work().host_polls, 1);
}

#[test]
fn a_link_that_emptied_dates_its_next_message_from_its_send() -> Result {
    // The network ticks only links that hold a message: this one holds
    // none from its first delivery until the second send, 40 ms later.
    let mut builder = Builder::new();
    builder
        .min_message_latency(5 * MS)
        .max_message_latency(5 * MS);
    let mut run = one_way(&mut builder, &[("client", &[0, 40])]);
    for _ in 0..60 {
        run.sim.step()?;
    }
    // Each 5 ms after its send (the latency counts from the end of the step
    // that sends, as in `next_delivery_is_none_when_nothing_is_in_flight`).
    assert_eq!(
        run.log.lines(),
        [
            "client sent 0 at 0ns",
            "client 0 at 5ms",
            "client sent 1 at 40ms",
            "client 1 at 45ms"
        ]
    );
    Ok(())
}

#[test]
fn work_counts_messages_handed_to_hosts() -> Result {
    let mut builder = Builder::new();
    builder
        .min_message_latency(3 * MS)
        .max_message_latency(3 * MS);
    let mut run = one_way(&mut builder, &[("a", &[0, 2]), ("b", &[5])]);
    for _ in 0..20 {
        run.sim.step()?;
    }
    assert_eq!(run.log.lines().len(), 6, "{:?}", run.log.lines());
    assert_eq!(run.sim.work().messages_delivered, 3);
    assert_eq!(run.sim.work().steps, 20);
    Ok(())
}

#[test]
fn step_lazily_runs_as_plain_steps_do() {
    let (plain_stepped, plain) = ok(mostly_idle(Mode::Plain));
    assert_eq!(plain_stepped.lazy_ticks, 0);
    for mode in [Mode::Lazy, Mode::SkipLazy] {
        let (stepped, lazy) = ok(mostly_idle(mode));
        assert_eq!(lazy, plain, "{mode:?}");
        assert!(!stepped.lazy_woken, "{mode:?}");
        // Host ticks left out: the sleeper's ~150, the idle host's while
        // it sleeps, the server's between pings.
        assert!(stepped.lazy_ticks > 150, "{mode:?} {stepped:?}");
        if mode == Mode::Lazy {
            assert_eq!(stepped.steps, plain_stepped.steps);
        }
    }
    // The sleeper's and the idle host's clocks when they next run were
    // caught up with the ticks they owed.
    assert!(
        plain
            .iter()
            .any(|l| l.starts_with("sleeper woke") && l.contains("sim_elapsed 150ms")),
        "{plain:#?}"
    );
    assert!(
        plain
            .iter()
            .any(|l| l.starts_with("idle start") && l.contains("sim_elapsed 90ms")),
        "{plain:#?}"
    );
    assert!(
        plain
            .iter()
            .any(|l| l.starts_with("idle woke") && l.contains("sim_elapsed 160ms")),
        "{plain:#?}"
    );

    // Control: told of no timer, `step_lazily` never ticks the sleeper
    // again (it has no message and no wake), and the run cannot finish.
    let (blind, _) = mostly_idle(Mode::LazyBlind);
    assert!(blind.is_err());
}

/// An echo server over TCP, a client that connects and talks to it, and a
/// bystander that sleeps.
fn tcp_echo(mode: Mode) -> (Stepped, Vec<String>) {
    let mut builder = Builder::new();
    builder
        .min_message_latency(2 * MS)
        .max_message_latency(15 * MS)
        .rng_seed(3);
    let mut run = Run::new(&mut builder, MS);

    let log = run.log.clone();
    run.sim.host("server", move || {
        let log = log.clone();
        async move {
            let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).await?;
            loop {
                let (mut stream, from) = listener.accept().await?;
                log.clocks(&format!("server accepted {from}"));
                let log = log.clone();
                tokio::task::spawn_local(async move {
                    let mut buf = [0; 64];
                    while let Ok(n @ 1..) = stream.read(&mut buf).await {
                        log.clocks(&format!("server got {n} bytes"));
                        stream.write_all(&buf[..n]).await.unwrap();
                    }
                });
            }
        }
    });

    let (log, timers) = (run.log.clone(), run.timers.clone());
    run.sim.client("client", async move {
        timers.sleep(4 * MS).await;
        for conn in 0..2 {
            let mut stream = TcpStream::connect(("server", PORT)).await?;
            log.clocks(&format!("client connected {conn}"));
            for round in 0..4u8 {
                stream.write_all(&[round; 3]).await?;
                let mut buf = [0; 3];
                stream.read_exact(&mut buf).await?;
                log.clocks(&format!("client got {buf:?}"));
                timers
                    .sleep(Duration::from_millis(u64::from(round) * 5))
                    .await;
            }
        }
        Ok(())
    });

    let (log, timers) = (run.log.clone(), run.timers.clone());
    run.sim.client("bystander", async move {
        timers.sleep(80 * MS).await;
        log.clocks("bystander woke");
        Ok(())
    });

    ok(run.drive(mode))
}

#[test]
fn step_lazily_runs_tcp_as_plain_steps_do() {
    let (_, plain) = tcp_echo(Mode::Plain);
    for mode in [Mode::Skip, Mode::Lazy, Mode::SkipLazy] {
        let (stepped, other) = tcp_echo(mode);
        assert_eq!(other, plain, "{mode:?}");
        assert!(!stepped.lazy_woken, "{mode:?}");
        if mode != Mode::Skip {
            assert!(stepped.lazy_ticks > 50, "{mode:?} {stepped:?}");
        }
    }
}

/// "waker" sleeps 20 ms and then wakes a task of "woken" through memory
/// the two share, which logs its clocks; "bystander" sleeps.
fn shared_wake(mode: Mode) -> (Stepped, Vec<String>) {
    let mut run = Run::new(&mut Builder::new(), MS);
    let notify = Arc::new(Notify::new());

    let (timers, to_woken) = (run.timers.clone(), notify.clone());
    run.sim.client("waker", async move {
        timers.sleep(20 * MS).await;
        to_woken.notify_one();
        Ok(())
    });
    let log = run.log.clone();
    run.sim.client("woken", async move {
        notify.notified().await;
        log.clocks("woken");
        Ok(())
    });
    let (log, timers) = (run.log.clone(), run.timers.clone());
    run.sim.client("bystander", async move {
        timers.sleep(30 * MS).await;
        log.clocks("bystander");
        Ok(())
    });

    ok(run.drive(mode))
}

#[test]
fn lazy_woken_reports_a_wake_through_memory_hosts_share() {
    let (stepped, plain) = shared_wake(Mode::Plain);
    assert!(!stepped.lazy_woken);
    assert!(
        plain[0].starts_with("woken on") && plain[0].contains("sim_elapsed 20ms"),
        "{plain:?}"
    );

    let (stepped, lazy) = shared_wake(Mode::Lazy);
    // "woken" owed its ticks since the start when "waker" woke it: it ran
    // the woken task at the start of its catch-up, early, so this run is
    // not the plain one, and says so.
    assert!(stepped.lazy_woken, "{stepped:?}");
    assert_ne!(lazy, plain);
}

#[test]
fn lazy_woken_reports_a_wake_from_the_caller_and_stays_true() -> Result {
    let mut sim = Builder::new().tick_duration(MS).build();
    let notify = Arc::new(Notify::new());
    let woken = notify.clone();
    sim.client("a", async move {
        woken.notified().await;
        Ok(())
    });
    sim.client("b", pending());
    let never = |_: IpAddr, _: Duration| false;
    for _ in 0..10 {
        sim.step_lazily(&never)?;
    }
    // Started (a first step) and then idle.
    assert_eq!(sim.lazy_ticks(), 18);
    assert!(!sim.lazy_woken());
    notify.notify_one();
    assert!(sim.step_lazily(&never).is_ok());
    assert!(sim.lazy_woken());
    for _ in 0..5 {
        sim.step()?;
    }
    assert!(sim.lazy_woken());
    Ok(())
}

// ---------------------------------------------------------------------------
// turmoil::current_host_addr

#[test]
fn current_host_addr_names_the_host_that_runs() -> Result {
    assert_eq!(turmoil::current_host_addr(), None);
    let mut sim = Builder::new().build();
    let seen = Arc::new(Mutex::new(Vec::new()));
    for name in ["one", "two"] {
        let seen = seen.clone();
        sim.host(name, move || {
            let seen = seen.clone();
            async move {
                let record = move |what: &str| {
                    let addr = turmoil::current_host_addr().expect("in a host");
                    seen.lock().unwrap().push((name, what.to_string(), addr));
                };
                record("software");
                let r = record.clone();
                tokio::task::spawn_local(async move { r("spawn_local") }).await?;
                let r = record.clone();
                tokio::spawn(async move { r("spawn") }).await?;
                pending().await
            }
        });
    }
    sim.step()?;
    // Between steps no host runs.
    assert_eq!(turmoil::current_host_addr(), None);
    sim.bounce("two");
    sim.step()?;
    let (one, two) = (sim.lookup("one"), sim.lookup("two"));
    assert_ne!(one, two);
    let seen = seen.lock().unwrap().clone();
    let mut expected = Vec::new();
    for (name, addr) in [("one", one), ("two", two), ("two", two)] {
        for what in ["software", "spawn_local", "spawn"] {
            expected.push((name, what.to_string(), addr));
        }
    }
    assert_eq!(seen, expected);
    Ok(())
}

/// `any_host_woken`: a host ticked early in a step whose task a host ticked
/// later wakes through shared memory has a task ready, and says so until its
/// next tick; with nothing woken, no host is ready.
#[test]
fn any_host_woken_sees_a_wake_through_shared_memory() -> Result {
    let notify = Arc::new(Notify::new());
    let mut sim = Builder::new().tick_duration(MS).build();
    let waiter = notify.clone();
    sim.host("early", move || {
        let waiter = waiter.clone();
        async move {
            loop {
                waiter.notified().await;
            }
        }
    });
    let waker = notify.clone();
    sim.client("late", async move {
        tokio::time::sleep(5 * MS).await;
        waker.notify_one();
        tokio::time::sleep(5 * MS).await;
        Ok(())
    });
    // The first call watches every host from its next tick; until then each is ready.
    assert!(sim.any_host_woken());
    let mut woken_after = Vec::new();
    for step in 1..=8 {
        sim.step()?;
        if sim.any_host_woken() {
            woken_after.push(step);
        }
    }
    // "late"'s own 5 ms sleep fires at the end of tick 5 (its task is ready
    // for tick 6); in tick 6 it wakes "early", after "early" ran in it.
    // Nothing else: no host is ready after the other steps.
    assert_eq!(woken_after, vec![5, 6]);
    Ok(())
}

/// The order the hosts of `enable_random_order` run in, step by step: each
/// of four hosts logs its name every tick.
fn random_order(seed: u64) -> Result<Vec<String>> {
    let mut builder = Builder::new();
    builder.enable_random_order().rng_seed(seed);
    let mut sim = builder.build();
    let log = Log::default();
    for name in ["a", "b", "c", "d"] {
        let log = log.clone();
        sim.host(name, move || {
            let log = log.clone();
            async move {
                loop {
                    log.push(name.to_string());
                    tokio::time::sleep(MS).await;
                }
            }
        });
    }
    for _ in 0..20 {
        sim.step()?;
    }
    // One line a step: the hosts in the order they ran.
    Ok(log.lines().chunks(4).map(|step| step.concat()).collect())
}

#[test]
fn random_order_runs_every_host_once_a_step_in_an_order_the_seed_decides() -> Result {
    let steps = random_order(7)?;
    assert_eq!(steps.len(), 20, "{steps:?}");
    for step in &steps {
        let mut hosts: Vec<char> = step.chars().collect();
        hosts.sort();
        assert_eq!(hosts, ['a', 'b', 'c', 'd'], "{steps:?}");
    }
    // Shuffled: more than one order (control: without the shuffle every
    // step runs a, b, c, d).
    let orders: BTreeSet<&String> = steps.iter().collect();
    assert!(orders.len() > 1, "{steps:?}");
    // The same seed, the same orders.
    assert_eq!(random_order(7)?, steps);
    Ok(())
}
