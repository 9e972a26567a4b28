//! Imports `retrysim::internals` (hidden, no semver promise) for the runner's
//! options and step counts, the hunt's `check_seed` and the comparison presets:
//! it measures the workings themselves.
//!
//! The speed measurements' yardstick: the plain discrete-event
//! model of `blinkimg-1s` that `cargo bench --bench baseline` runs against
//! the harness counts what the harness counts, so the ratio it prints
//! compares the same work.

use retrysim::internals::run::runner::{self, Report, RunError, RunOptions, StepCounts, Traces};
use retrysim::internals::run::scenario;

#[path = "../../benches/baseline/des.rs"]
mod des;
#[path = "../../benches/baseline/worlds.rs"]
mod worlds;

#[test]
fn the_discrete_event_baseline_counts_what_the_harness_counts() {
    let s = scenario::blinkimg_1s();
    let m = des::Model::blinkimg_1s();
    assert_eq!((m.workers, m.jobs), (s.fleet.workers, s.fleet.jobs));
    assert_eq!((m.limit, m.window_ms), (s.api.limiter.writes, s.api.limiter.window_ms));
    assert_eq!(m.spread_ms, s.policy.spread.max.as_millis() as u64);
    for seed in [1, 7] {
        let r = RunOptions::new().traces(Traces::None).run(&s, seed).expect("finishes");
        let c = des::run(&m, seed);
        assert_eq!((c.requests, c.limited, c.charged), (r.requests, r.limited, r.charged), "seed {seed}");
    }
}

#[test]
fn the_discrete_event_baseline_is_deterministic_and_limits_like_the_api() {
    let m = des::Model::blinkimg_1s();
    assert_eq!(des::run(&m, 3), des::run(&m, 3));
    // A window that holds every job: no 429.
    let roomy = des::run(&des::Model { limit: 120, ..m }, 1);
    assert_eq!((roomy.requests, roomy.limited, roomy.charged), (120, 0, 120));
    // A limit of 1 a window: every job after the first meets its window full.
    let tight = des::run(&des::Model { limit: 1, jobs: 3, workers: 3, ..m }, 1);
    assert_eq!((tight.charged, tight.limited), (3, 3), "{tight:?}");
}

#[test]
fn the_readme_baseline_table_is_the_bench_runs_counts() {
    let rows = crate::readme::table_after("Measured speed", "`cargo bench --bench baseline`");
    let mut expected: Vec<(String, [String; 4])> = worlds::worlds()
        .into_iter()
        .map(|w| {
            let r = RunOptions::new().traces(Traces::None).run(&w.scenario, 1).expect("finishes");
            (w.label.to_owned(), [r.requests, r.limited, r.charged, r.virtual_ms].map(|n| n.to_string()))
        })
        .collect();
    let c = des::run(&des::Model::blinkimg_1s(), 1);
    expected.push((
        "discrete-event model".to_owned(),
        [c.requests, c.limited, c.charged, c.virtual_ms].map(|n| n.to_string()),
    ));
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
    for (row, (label, figures)) in rows.iter().zip(expected) {
        assert!(row.len() >= 5, "docs/guide/speed.md: the table after the bench's command is not its table: {row:?}");
        assert_eq!(
            (&row[0], &row[1..5]),
            (&label, &figures[..]),
            "docs/guide/speed.md row {row:?}: run `cargo bench --bench baseline` and copy its table"
        );
    }
}

#[test]
fn the_baseline_benchs_worlds_are_the_layouts_they_are_named_for() {
    use retrysim::internals::run::scenario::Hosts;
    let [shared, per_worker, service] = worlds::worlds();
    assert_eq!((shared.scenario.fleet.hosts, shared.scenario.fleet.coordinator.is_none()), (Hosts::Shared, true));
    assert_eq!(
        (per_worker.scenario.fleet.hosts, per_worker.scenario.fleet.coordinator.is_none()),
        (Hosts::PerWorker, true)
    );
    let coordinator = service.scenario.fleet.coordinator.expect("the limiter service world runs a coordinator");
    assert_eq!(service.scenario.fleet.hosts, Hosts::PerWorker);
    assert_eq!(coordinator.heartbeat, std::time::Duration::from_millis(100));
    // Only the layout differs: the same fleet, API and policy as blinkimg-1s.
    for w in [&per_worker, &service] {
        assert_eq!((w.scenario.fleet.workers, w.scenario.fleet.jobs), (8, 120), "{}", w.label);
        assert_eq!(w.scenario.api, shared.scenario.api, "{}", w.label);
        assert_eq!(w.scenario.policy, shared.scenario.policy, "{}", w.label);
    }
}

// Skipping virtual time in which nothing happens (src/sim/run/advance.rs)
// must change nothing but speed: each run below goes once with skipping and
// once tick by tick, and every figure, trace, ledger entry and hunt verdict
// must be the same.

use retrysim::env::Clock;
use retrysim::internals::checks::hunt::{Kind, Target, check_seed};
use retrysim::internals::run::clients::ScenarioClient;
use retrysim::internals::run::scenario::Scenario;
use retrysim::testing::{BoxFuture, Host, Job, JobEnd, MakeSubject, Promises, Subject};
use std::sync::Arc;

/// A run's whole report (its records, traces and the server's ledger
/// included) as text, without how it was stepped.
fn shown(run: &Result<Report, RunError>) -> String {
    format!("{:?}", run.as_ref().map(|r| Report { stepping: StepCounts::default(), ..r.clone() }))
}

/// How a run was stepped (nothing, for a run that failed).
fn counts(run: &Result<Report, RunError>) -> StepCounts {
    run.as_ref().map(|r| r.stepping).unwrap_or_default()
}

/// The whole report of a run with skipping, of the same run tick by tick,
/// and how many ticks the first skipped.
fn both_ways(s: &Scenario, seed: u64) -> (String, String, u64) {
    let fast = runner::run(s, seed);
    let plain = RunOptions::new().plain_ticks(true).run(s, seed);
    assert_eq!(counts(&plain).skipped_ticks, 0, "{} seed {seed}: a plain run skipped", s.name);
    (shown(&fast), shown(&plain), counts(&fast).skipped_ticks)
}

#[test]
fn skipping_idle_ticks_changes_no_named_scenarios_run() {
    let mut skipped = 0;
    for name in scenario::NAMES {
        let s = scenario::named(name).expect("named");
        for seed in [1, 7] {
            let (fast, plain, n) = both_ways(&s, seed);
            assert!(fast == plain, "{name} seed {seed}: the run differs when idle ticks are skipped");
            skipped += n;
        }
    }
    assert!(skipped > 0, "no run skipped a tick: the comparison above compared nothing");
}

#[test]
fn skipping_idle_ticks_changes_no_hunt_seeds_run_or_verdict() {
    let honest = Target::of(Kind::All);
    let mut sabotaged = Target::of(Kind::All);
    sabotaged.sabotage.ignore_retry_after = true;
    let mut skipped = 0;
    for target in [honest, sabotaged] {
        for seed in 1..=40 {
            let (fast, plain, n) = both_ways(&target.scenario(seed), seed);
            assert!(fast == plain, "{} seed {seed}: the run differs when idle ticks are skipped", target.replay(seed));
            skipped += n;
            let verdict = format!("{:?}", check_seed(seed, &target, false, &RunOptions::new()));
            let plain = check_seed(seed, &target, false, &RunOptions::new().plain_ticks(true));
            assert_eq!(verdict, format!("{plain:?}"));
        }
    }
    assert!(skipped > 0, "no hunt seed skipped a tick");
}

#[test]
fn deadline_wins_skips_nearly_all_its_ticks() {
    // Five attempts 20 s apart at a 1 ms tick: all but a few hundred of its
    // ticks are waits in which nothing happens.
    let s = scenario::named("deadline-wins").expect("named");
    let r = runner::run(&s, 3).expect("finishes");
    let ticks = r.virtual_ms / s.net.tick.as_millis() as u64;
    let skipped = r.stepping.skipped_ticks;
    assert!(skipped * 100 > ticks * 95, "skipped {skipped} of {ticks} ticks");
}

/// retrysim's client behind a Subject that does not say where it sleeps.
struct Undeclared(Arc<dyn Subject>);

impl Subject for Undeclared {
    fn promises(&self) -> Promises {
        self.0.promises()
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        self.0.run(job)
    }
}

struct MakeUndeclared(u64);

impl MakeSubject for MakeUndeclared {
    fn label(&self, _: &Scenario) -> String {
        "undeclared".into()
    }

    fn make(&self, host: Host<'_>) -> Arc<dyn Subject> {
        Arc::new(Undeclared(ScenarioClient::new(self.0).make(host)))
    }
}

#[test]
fn a_client_that_does_not_declare_its_timers_is_stepped_tick_by_tick() {
    // The harness cannot see a timer such a client arms on tokio directly,
    // so it must not skip: the run is the plain one.
    let s = scenario::named("deadline-wins").expect("named");
    let run = |options: RunOptions| options.run_subject(&s, 3, Arc::new(MakeUndeclared(3)));
    let fast = run(RunOptions::new());
    assert_eq!(counts(&fast).skipped_ticks, 0);
    assert_eq!(shown(&fast), shown(&run(RunOptions::new().plain_ticks(true))));
    // The same client declared skips.
    let declared = runner::run(&s, 3).expect("finishes");
    assert!(declared.stepping.skipped_ticks > 0);
}

#[test]
fn the_readme_scenarios_table_is_the_bench_runs_virtual_times() {
    let rows = crate::readme::table_after("Measured speed", "`cargo bench --bench scenarios`");
    let (total, named) = rows.split_last().expect("rows");
    assert_eq!(total[0], "all named scenarios");
    let names: Vec<&str> = named.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        names,
        scenario::NAMES,
        "docs/guide/speed.md rows: run `cargo bench --bench scenarios` and copy its table"
    );
    // The bench's virtual time: the median over seeds 0..15. The three
    // 42-host scenarios take most of a second each a run, so they are left
    // to the bench.
    for row in named.iter().filter(|r| !r[0].starts_with("berlin-40-processes-")) {
        let s = scenario::named(&row[0]).expect("named");
        let mut virtuals: Vec<u64> = (0..15)
            .map(|seed| RunOptions::new().traces(Traces::None).run(&s, seed).expect("finishes").virtual_ms)
            .collect();
        virtuals.sort_unstable();
        assert_eq!(row[1], virtuals[virtuals.len() / 2].to_string(), "docs/guide/speed.md row {row:?}");
    }
}

/// A hyper-util client with a connection pool on the harness's timer, up to
/// three tries a second apart: a client that is not retrysim's but sleeps
/// only where the harness sees it, and says so.
struct Pooled {
    client: hyper_util::client::legacy::Client<retrysim::testing::SimConnector, http_body_util::Full<bytes::Bytes>>,
}

impl Subject for Pooled {
    fn promises(&self) -> Promises {
        Promises::nothing().max_attempts(3)
    }

    fn sleeps_on_harness_clock(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            for attempt in 1..=3 {
                let mut req = http::Request::new(http_body_util::Full::new(job.request.body().clone()));
                *req.method_mut() = job.request.method().clone();
                *req.uri_mut() = job.request.uri().clone();
                *req.headers_mut() = job.request.headers().clone();
                if let Ok(res) = self.client.request(req).await {
                    let status = res.status().as_u16();
                    if status != 429 {
                        return JobEnd::succeeded(status).attempts(attempt);
                    }
                }
                job.clock.sleep(std::time::Duration::from_secs(1)).await;
            }
            JobEnd::gave_up("attempts_exhausted").attempts(3)
        })
    }
}

struct MakePooled;

impl MakeSubject for MakePooled {
    fn label(&self, _: &Scenario) -> String {
        "pooled".into()
    }

    fn make(&self, _: Host<'_>) -> Arc<dyn Subject> {
        let net = retrysim::testing::SimNet;
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .retry_canceled_requests(false)
            .pool_timer(net.timer())
            .build(net.connector());
        Arc::new(Pooled { client })
    }
}

#[test]
fn a_hyper_client_on_the_harness_timer_skips_and_runs_the_same() {
    let s = scenario::blinkimg_1s();
    let run = |options: RunOptions| options.run_subject(&s, 2, Arc::new(MakePooled));
    let fast = run(RunOptions::new());
    let plain = run(RunOptions::new().plain_ticks(true));
    assert_eq!(shown(&fast), shown(&plain));
    let fast = fast.expect("finishes");
    assert!(fast.succeeded > 0 && fast.limited > 0, "{}", fast.render_text());
    assert!(fast.stepping.skipped_ticks > 0, "a declared client's waits are skipped");
}

// Leaving idle hosts out of busy steps (turmoil's `step_lazily`) must
// change nothing either: each run below goes with it, with every host
// ticked in every step (skipping idle stretches still on), and tick by tick.

/// The report of a run under `options` (lazy hosts), with every host
/// ticked, tick by tick, how many host ticks the first left out and whether
/// it went again (a host owing ticks was woken: turmoil's TCP flow control
/// wakes a sender blocked on a full send buffer from the receiving host).
fn three_ways(s: &Scenario, seed: u64, options: RunOptions) -> (String, String, String, u64, u64) {
    let lazy = options.run(s, seed);
    let eager = options.eager_hosts(true).run(s, seed);
    assert_eq!(counts(&eager).lazy_ticks, 0, "{} seed {seed}: an eager run left a host out", s.name);
    let plain = options.plain_ticks(true).run(s, seed);
    let StepCounts { lazy_ticks, lazy_replays, .. } = counts(&lazy);
    (shown(&lazy), shown(&eager), shown(&plain), lazy_ticks, lazy_replays)
}

#[test]
fn lazy_hosts_change_no_42_host_scenarios_run() {
    for name in scenario::NAMES.iter().filter(|n| n.starts_with("berlin-40-processes-")) {
        let s = scenario::named(name).expect("named");
        for seed in [1, 7] {
            let (lazy, eager, plain, left_out, replays) = three_ways(&s, seed, RunOptions::new());
            assert_eq!(replays, 0, "{name} seed {seed}: a host owing ticks was woken, the run went again");
            assert!(lazy == eager, "{name} seed {seed}: the run differs when idle hosts are left out");
            assert!(lazy == plain, "{name} seed {seed}: the run differs from stepping every tick");
            // Most of the 42 hosts wait on the network most of the time.
            let host_ticks = 42 * lazy_run_ticks(&s, seed);
            assert!(left_out * 4 > host_ticks, "{name} seed {seed}: left out {left_out} of {host_ticks} host ticks");
        }
    }
}

/// The ticks a run of `s` covers.
fn lazy_run_ticks(s: &Scenario, seed: u64) -> u64 {
    let r = RunOptions::new().traces(Traces::None).run(s, seed).expect("finishes");
    r.virtual_ms / s.net.tick.as_millis() as u64
}

#[test]
fn lazy_hosts_change_no_hunt_seeds_run_or_verdict() {
    // A hunt's runs have two hosts, too few to leave one out by default
    // (`LAZY_MIN_HOSTS`): forced here.
    let target = Target::of(Kind::All);
    let (mut left_out, mut replays) = (0, 0);
    for seed in 1..=30 {
        let always = RunOptions::new().lazy_hosts_always(true);
        let (lazy, eager, plain, n, again) = three_ways(&target.scenario(seed), seed, always);
        replays += again;
        assert!(lazy == eager, "{}: the run differs when idle hosts are left out", target.replay(seed));
        assert!(lazy == plain, "{}: the run differs from stepping every tick", target.replay(seed));
        left_out += n;
        let verdict = format!("{:?}", check_seed(seed, &target, false, &RunOptions::new()));
        let lazy_verdict = format!("{:?}", check_seed(seed, &target, false, &always));
        assert_eq!(verdict, lazy_verdict, "{}", target.replay(seed));
    }
    assert!(left_out > 0, "no hunt seed left a host out");
    // Going again costs a run: it must stay the exception.
    assert!(replays <= 5, "{replays} of 30 hunt seeds went again");
}

/// retrysim's client, declared, whose jobs on every host take turns through
/// one semaphore: a job that ends wakes a job waiting on another host, in
/// memory the hosts share, not through the network.
struct TakingTurns {
    inner: Arc<dyn Subject>,
    turn: Arc<tokio::sync::Semaphore>,
}

impl Subject for TakingTurns {
    fn promises(&self) -> Promises {
        self.inner.promises()
    }

    fn sleeps_on_harness_clock(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            let _turn = self.turn.acquire().await.expect("never closed");
            self.inner.run(job).await
        })
    }
}

struct MakeTakingTurns(u64, Arc<tokio::sync::Semaphore>);

impl MakeSubject for MakeTakingTurns {
    fn label(&self, _: &Scenario) -> String {
        "taking-turns".into()
    }

    fn make(&self, host: Host<'_>) -> Arc<dyn Subject> {
        Arc::new(TakingTurns { inner: ScenarioClient::new(self.0).make(host), turn: self.1.clone() })
    }
}

#[test]
fn a_host_woken_through_shared_memory_while_left_out_makes_the_run_go_again_with_every_host() {
    let s = scenario::named("berlin-40-processes-local-gates").expect("named");
    let run = |options: RunOptions| {
        let make = MakeTakingTurns(1, Arc::new(tokio::sync::Semaphore::new(2)));
        options.run_subject(&s, 1, Arc::new(make))
    };
    let lazy = run(RunOptions::new());
    assert_eq!(counts(&lazy).lazy_replays, 1, "the cross-host wake was not seen");
    assert!(counts(&lazy).lazy_ticks > 0);
    let plain = run(RunOptions::new().plain_ticks(true));
    let (a, b) = (shown(&lazy), shown(&plain));
    assert!(a == b, "the run that went again differs from stepping every tick");
}

#[test]
fn a_two_host_run_ticks_every_host() {
    // Below `LAZY_MIN_HOSTS` watching wakes costs more than it saves.
    let s = scenario::named("berlin-40-workers").expect("named");
    assert_eq!(runner::run(&s, 1).expect("finishes").stepping.lazy_ticks, 0);
    let always = RunOptions::new().lazy_hosts_always(true).run(&s, 1).expect("finishes");
    assert!(always.stepping.lazy_ticks > 0);
}

#[test]
fn the_readme_hunt_bench_table_has_the_benchs_rows_and_the_hunts_verdict() {
    // `cargo bench --bench hunt` prints this table; the figures are measured
    // (never asserted), the rows and the failing-seed counts are checked here.
    let rows = crate::readme::table_after("Measured speed", "`cargo bench\n--bench hunt`");
    let labels: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(labels, ["every tick stepped", "idle ticks skipped", "ratio"], "{rows:?}");
    let honest = retrysim::internals::checks::hunt::HuntConfig {
        start: 1,
        seeds: 500,
        target: Target::of(Kind::All),
        threads: 2,
        determinism: retrysim::internals::checks::hunt::DeterminismSample::Off,
        options: RunOptions::new(),
    };
    let failing = retrysim::internals::checks::hunt::hunt(&honest, &|_, _| {});
    let failing = failing.iter().filter(|r| !r.findings.is_empty()).count();
    for row in &rows[..2] {
        assert_eq!(row[1], failing.to_string(), "docs/guide/speed.md's hunt bench table: {row:?}");
    }
    let ratio: f64 = rows[2][2].trim_end_matches('x').parse().expect("a ratio");
    let (plain, skip): (f64, f64) = (rows[0][2].parse().expect("a figure"), rows[1][2].parse().expect("a figure"));
    assert!((skip / plain - ratio).abs() < 0.05, "the ratio row is the two rows' ratio: {rows:?}");
}

/// The `cargo bench --bench compare` summary in `docs/guide/speed.md`: each preset's total
/// virtual time and requests over seeds 1..=5, and each fleet size's
/// requests, are what the runs give (the wall times are the machine's).
#[test]
fn the_readme_compare_bench_tables_count_what_the_runs_do() {
    use retrysim::internals::tools::compare;
    let thousands = |n: u64| {
        let digits = n.to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    let marker = "`cargo bench --bench compare` (divan";
    let rows = crate::readme::table_after("Measured speed", marker);
    assert!(!rows.is_empty(), "no preset table after {marker:?}");
    for name in compare::PRESETS {
        let c = compare::run(&compare::preset(name).expect("a preset"), 5, compare::default_threads())
            .expect("the comparison runs");
        let runs = || c.rows.iter().flat_map(|r| &r.runs);
        let virtual_s = runs().map(|r| r.virtual_ms).sum::<u64>() as f64 / 1e3;
        let requests = runs().map(|r| r.requests).sum::<u64>();
        // As the bench prints it (`{:.1}`), with thousands separated.
        let printed = format!("{virtual_s:.1}");
        let (whole, tenths) = printed.split_once('.').expect("one decimal");
        let whole: u64 = whole.parse().expect("a whole number of seconds");
        let expected = [format!("{}.{tenths}", thousands(whole)), thousands(requests)];
        let of_preset: Vec<_> = rows.iter().filter(|r| r[0] == name).collect();
        assert_eq!(of_preset.len(), 2, "docs/guide/speed.md: one row per thread count for {name}");
        for row in of_preset {
            assert_eq!(
                [&row[3], &row[5]],
                [&expected[0], &expected[1]],
                "docs/guide/speed.md row {row:?}: run `cargo bench --bench compare` and copy its summary"
            );
        }
    }
    let fleets = crate::readme::table_after("Measured speed", "Each fleet size, one run");
    let sizes = [(8, 120), (8, 1_200), (8, 12_000), (64, 1_200), (512, 1_200)];
    assert_eq!(fleets.len(), sizes.len(), "{fleets:?}");
    for (row, (workers, jobs)) in fleets.iter().zip(sizes) {
        let mut s = scenario::blinkimg_1s();
        (s.fleet.workers, s.fleet.jobs) = (workers, jobs);
        s.time_limit = std::time::Duration::from_secs(24 * 3600);
        let r = RunOptions::new().traces(Traces::None).run(&s, 1).expect("finishes");
        assert_eq!(row[1], thousands(r.requests), "docs/guide/speed.md row {row:?}: {workers} workers, {jobs} jobs");
    }
}
