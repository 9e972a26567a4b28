//! Imports `retrysim::internals` (hidden, no semver promise) for the scenario
//! key registry (`keys::KEYS`, `Allowed`, `markdown`) and the fleet's `Hooks`,
//! checked key by key.
//!
//! Hostile input: every scenario key and flag is checked before a run, and
//! whatever a user feeds the `retrysim` binary ends in a bounded time and
//! memory with exit 0 only for valid input, never a panic.
//!
//! - the inputs issue 51 listed, each refused naming its key (or bounded);
//! - a host busy inside one step is stopped by the wall bound, a run that
//!   sends without end by the request cap, and a panic anywhere outside a
//!   user's job fails the run;
//! - the fuzz target: `scenario_and_flag_mutations_end_cleanly`, a proptest
//!   over mutations of a scenario file (every key at its bounds and one past
//!   them, wrong types, huge and negative numbers) and of the flags, each run
//!   as a child process under a clock and a memory watch. It runs
//!   [`FUZZ_CASES`] cases in `cargo test` (`PROPTEST_CASES` for more, as the
//!   nightly hunt workflow does); every case it finds is kept in
//!   `proptest-regressions/hostile.txt` and replayed first.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed, TestRunner};
use retrysim::core::budget::RetryBudget;
use retrysim::env::Clock;
use retrysim::internals::run::fleet::Hooks;
use retrysim::internals::run::keys::{Allowed, KEYS, Key};
use retrysim::internals::run::runner::RunOptions;
use retrysim::internals::run::scenario::{self, Scenario};
use retrysim::testing::{BoxFuture, Harness, Job, JobEnd, Promises, Subject, Verdict, from_fn};

use crate::support::retrysim;

/// Cases the fuzz target runs when `PROPTEST_CASES` is unset.
const FUZZ_CASES: u32 = 40;

/// The most memory a child may use (resident, peak) on any input.
const MAX_RSS_KB: i64 = 1 << 20;

/// The longest a child may take on any input: its `--max-wall` plus room.
const MAX_CHILD: Duration = Duration::from_secs(40);

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hostile");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `retrysim run --config FILE`, with `edit` applied to a named scenario's TOML.
fn edited(name: &str, file: &str, edit: impl Fn(&mut toml::Table)) -> PathBuf {
    let mut table: toml::Table = toml::from_str(&scenario::named(name).unwrap().to_toml()).unwrap();
    edit(&mut table);
    let path = scratch(file);
    std::fs::write(&path, toml::to_string(&table).unwrap()).unwrap();
    path
}

fn set(table: &mut toml::Table, path: &str, value: toml::Value) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().unwrap();
    let mut t = table;
    for p in parts {
        t = t.entry(p).or_insert_with(|| toml::Value::Table(toml::Table::new())).as_table_mut().unwrap();
    }
    t.insert(last.into(), value);
}

fn text(s: &str) -> toml::Value {
    toml::Value::String(s.into())
}

/// The inputs of issue 51 that hung, panicked or passed silently: each is
/// refused with exit 2 and a message that names its key, value and range.
#[test]
fn the_issues_inputs_are_refused_naming_key_value_and_range() {
    let cases: [(&str, &str, toml::Value, &str); 7] = [
        ("berlin-40-processes-coordinated", "fleet.coordinator.heartbeat", text("0s"), "10ms..=1h"),
        ("berlin-40-processes-limiter-partition", "fleet.coordinator.retry_after", text("0s"), "100ms..=1h"),
        ("berlin-40-processes-limiter-partition", "fleet.coordinator.retry_after", text("1ms"), "100ms..=1h"),
        ("blinkimg-1s", "api.epoch_unix_s", toml::Value::Integer(i64::MAX), "0..=250000000000"),
        ("blinkimg-1s", "fleet.mix.safe", toml::Value::Integer(4_294_967_295), "0..=1000000"),
        ("blinkimg-1s", "policy.attempt_timeout", text("0s"), "must be positive"),
        ("blinkimg-1s", "fleet.gate.max_limit", text("x"), "an integer in 1..=100000"),
    ];
    for (i, (name, key, value, range)) in cases.into_iter().enumerate() {
        let path = edited(name, &format!("issue-{i}.toml"), |t| set(t, key, value.clone()));
        let (code, _, err) = retrysim(&["run", "--config", path.to_str().unwrap(), "--seed", "3"]);
        assert_eq!(code, 2, "{key} = {value}: {err}");
        assert!(err.contains(&format!("{key} = ")) && err.contains(range), "{key} = {value}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A scenario whose API wears a named preset serves that API's routes only;
/// retrysim's built-in clients call the model's `POST /v1/jobs`. `run` and
/// `trace` refuse it saying what to run instead, rather than reporting every
/// job ended on a 404; the same file is what `retrysim serve` is given.
#[test]
fn a_preset_api_with_the_built_in_client_is_refused_saying_what_to_run() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/typed-client/openai-chat.toml");
    for command in ["run", "trace"] {
        let (code, out, err) = retrysim(&[command, "--config", file, "--seed", "1"]);
        assert_eq!(code, 2, "{command}: {out}{err}");
        assert!(err.contains("[api] preset = \"openai\"") && err.contains("retrysim serve"), "{command}: {err}");
        assert!(out.is_empty(), "{command} printed a report: {out}");
    }
    let s = Scenario::from_toml(&std::fs::read_to_string(file).unwrap()).unwrap();
    let e = RunOptions::new().run(&s, 1).expect_err("the built-in client against a preset");
    assert!(e.message.contains("POST /v1/jobs"), "{e}");
    // Without the preset the same scenario runs, and its jobs are served.
    let mut plain = s.clone();
    plain.api.preset = Default::default();
    let r = RunOptions::new().run(&plain, 1).unwrap();
    assert!(r.succeeded > 0, "no job succeeded without the preset: {} gave up", r.gave_up_total);
}

/// Numbers past TOML's 64 bits, a file over the size bound and one dense
/// line: refused, and the message stays short.
#[test]
fn oversized_numbers_and_files_are_refused_briefly() {
    let big = scratch("big-int.toml");
    std::fs::write(&big, "name = \"x\"\n[fleet]\njobs = 18446744073709551616\n").unwrap();
    let (code, _, err) = retrysim(&["run", "--config", big.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not fit in TOML's integers"), "{err}");

    let huge = scratch("huge.toml");
    let line = format!("description = \"{}\"\n", "x".repeat(2 << 20));
    std::fs::write(&huge, format!("name = \"x\"\n{line}")).unwrap();
    let (code, _, err) = retrysim(&["run", "--config", huge.to_str().unwrap()]);
    assert_eq!(code, 2, "{}", &err[..err.len().min(500)]);
    assert!(err.contains("over the 1 MiB (1048576 bytes) a scenario file may have"), "{}", &err[..err.len().min(500)]);

    let dense = scratch("dense.toml");
    std::fs::write(&dense, format!("name = \"x\"\nbad = [{}\n", "1,".repeat(100_000))).unwrap();
    let (code, _, err) = retrysim(&["run", "--config", dense.to_str().unwrap()]);
    assert_eq!(code, 2, "{}", &err[..err.len().min(500)]);
    assert!(err.len() < 2_000, "{} bytes of error: {}", err.len(), &err[..500]);
}

/// A client whose task never lets virtual time pass (it yields forever):
/// the step it is in never ends on its own.
struct Spins;

impl Subject for Spins {
    fn promises(&self) -> Promises {
        Promises::nothing()
    }

    fn run<'a>(&'a self, _job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            loop {
                tokio::task::yield_now().await;
            }
        })
    }
}

#[test]
fn a_host_busy_inside_one_step_is_stopped_by_the_wall_bound() {
    let s = scenario::named("blinkimg-1s").unwrap();
    let options = RunOptions::new().max_wall(Some(Duration::from_millis(300)));
    let e = options.run_subject(&s, 1, Arc::new(from_fn("spins", |_| Spins))).unwrap_err();
    assert_eq!(e.wall_bound, Some(Duration::from_millis(300)), "{e}");
    assert!(e.message.contains("stopped after 300ms of wall time"), "{e}");
}

#[test]
fn a_run_that_sends_without_end_stops_at_the_request_cap() {
    let mut s = scenario::named("blinkimg-1s").unwrap();
    s.api.limiter.writes = 0;
    s.policy.use_advice = false;
    s.policy.backoff.base = Duration::ZERO;
    s.policy.backoff.cap = Duration::ZERO;
    s.policy.max_retries = 100_000;
    s.policy.deadline = Duration::from_secs(24 * 3600);
    s.time_limit = Duration::from_secs(2 * 24 * 3600);
    let e = RunOptions::new().max_requests(2_000).run(&s, 1).unwrap_err();
    let sent: usize =
        e.message.strip_prefix("stopped at ").and_then(|m| m.split(' ').next()?.parse().ok()).unwrap_or(0);
    assert!((2_000..2_100).contains(&sent), "{e}");
    assert!(e.message.contains("requests, the most one run may send"), "{e}");
    assert_eq!(e.wall_bound, None);
    // Under the cap, the same run is unchanged by it.
    let mut short = s.clone();
    short.policy.max_retries = 3;
    let capped = RunOptions::new().max_requests(2_000).run(&short, 1).unwrap();
    let json = |r| serde_json::to_string(&r).unwrap();
    assert_eq!(json(capped), json(RunOptions::new().run(&short, 1).unwrap()));
}

/// A client that starts a task of its own which panics: tokio catches it,
/// the job returns, and the report alone would look like a pass.
struct PanicsAside;

impl Subject for PanicsAside {
    fn promises(&self) -> Promises {
        Promises::nothing()
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            if job.number == 2 {
                tokio::spawn(async { panic!("a task beside the job") });
            }
            job.clock.sleep(Duration::from_millis(5)).await;
            JobEnd::gave_up("done").attempts(0)
        })
    }
}

/// A users's client whose own task panics: the harness reports the client
/// broken, with the panic and the replay line.
#[test]
fn a_users_client_panicking_in_a_task_of_its_own_is_broken_with_its_replay_line() {
    let h = Harness::of(scenario::named("blinkimg-1s").unwrap()).with_client(from_fn("panics-aside", |_| PanicsAside));
    let checked = h.check(1);
    assert_eq!(checked.verdict(), Verdict::Broken);
    let shown = checked.to_string();
    assert!(shown.contains("a task beside the job") && shown.contains("replay: RETRYSIM_SEED=1"), "{shown}");
}

/// A budget that panics when asked for a retry.
struct PanickingBudget;

impl RetryBudget for PanickingBudget {
    fn deposit(&self, _: Duration) {}
    fn withdraw(&self, _: Duration) -> bool {
        panic!("the budget broke")
    }
}

fn panicking_budget(_: Arc<dyn RetryBudget>) -> Arc<dyn RetryBudget> {
    Arc::new(PanickingBudget)
}

/// retrysim's own client panicking (here through a planted budget) fails the
/// run: the report of a run with a panic is not a result.
#[test]
fn a_panic_in_retrysims_own_client_fails_the_run_with_the_first_panic() {
    let s = scenario::named("berlin-40-workers-budget").unwrap();
    let hooks = Hooks { budget: Some(panicking_budget), ..Hooks::default() };
    let e = RunOptions::new().hooks(hooks).run(&s, 1).unwrap_err();
    assert!(e.message.contains("time(s) (in retrysim's own code"), "{e}");
    assert!(e.message.contains("the first: the budget broke at tests/it/hostile.rs:"), "{e}");
    assert!(e.to_string().contains("replay: retrysim run --scenario berlin-40-workers-budget --seed 1"), "{e}");
}

// The fuzz target.

/// One mutation of the base scenario: a key and the value written there.
#[derive(Debug, Clone)]
struct Mutation {
    key: &'static str,
    value: toml::Value,
}

/// The values worth trying for a key: its bounds and one past them, the
/// other type, huge, negative and fractional numbers.
fn values_for(k: &Key) -> Vec<toml::Value> {
    use toml::Value::{Boolean, Float, Integer, String as Text};
    let mut v = vec![Integer(0), Integer(-1), Integer(i64::MAX), Integer(i64::MIN), Float(1e300), Boolean(true)];
    v.push(Text("x".into()));
    match k.allowed {
        Allowed::Int { min, max } => {
            let near = |n: i128| Integer(n.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64);
            v.extend([near(min), near(max), near(max + 1), near(min - 1)]);
        }
        Allowed::Duration { min, max } => {
            let d = |d: Duration| Text(humantime::format_duration(d).to_string());
            v.extend([d(min), d(max), d(max + Duration::from_millis(1)), Text("0s".into()), Text("-1s".into())]);
            v.push(Text("18446744073709551615s".into()));
        }
        Allowed::Choice(names) => v.extend(names.iter().map(|n| Text((*n).into()))),
        Allowed::Text(max) | Allowed::Token(max) => {
            v.extend([Text("a\u{1b}[31mred\n".into()), Text("k".repeat(max + 1)), Text(String::new())]);
        }
        Allowed::List(max) => v.push(toml::Value::Array(vec![Integer(1); max + 1])),
        Allowed::Bool => v.push(Boolean(false)),
    }
    v
}

fn every_key() -> Vec<&'static Key> {
    KEYS.iter().flat_map(|k| k.iter()).filter(|k| !k.path.contains('*')).collect()
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    let keys = every_key();
    (0..keys.len()).prop_flat_map(move |i| {
        let k = keys[i];
        let values = values_for(k);
        (0..values.len()).prop_map(move |j| Mutation { key: k.path, value: values[j].clone() })
    })
}

/// Flags worth trying on each command, valid and not.
const FLAGS: &[&[&str]] = &[
    &["--seed", "18446744073709551615"],
    &["--seed", "-1"],
    &["--max-wall", "1ns"],
    &["--max-wall", "0"],
    &["--max-wall", "99999999999999999999h"],
    &["--policy", "nonsense"],
    &["--policy", "batch"],
    &["--format", "json"],
    &["--client", "4294967295"],
];

/// The base scenario the mutations edit: a small fleet with a script step,
/// a scheduled fault and a pacing gate, so most keys have a table to land in.
fn base() -> toml::Table {
    let mut s = scenario::named("blinkimg-1s").unwrap();
    s.fleet.jobs = 20;
    s.api.script.push(retrysim::internals::world::api::ScriptStep::new(429, Some("RATE_LIMITED"), Some(1)));
    toml::from_str(&s.to_toml()).unwrap()
}

/// Where a mutation lands: `[]` is the list's first entry (made if missing).
fn apply(table: &mut toml::Table, m: &Mutation) {
    let mut t = table;
    let parts: Vec<&str> = m.key.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let (name, entry) = match part.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (*part, false),
        };
        if last && !entry {
            t.insert(name.into(), m.value.clone());
            return;
        }
        if entry {
            let list = t.entry(name).or_insert_with(|| toml::Value::Array(Vec::new()));
            let Some(items) = list.as_array_mut() else { return };
            if last {
                items.insert(0, m.value.clone());
                return;
            }
            if items.is_empty() {
                items.push(toml::Value::Table(toml::Table::new()));
            }
            let Some(inner) = items[0].as_table_mut() else { return };
            t = inner;
        } else {
            let next = t.entry(name).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let Some(inner) = next.as_table_mut() else { return };
            t = inner;
        }
    }
}

/// How a child process ended: its exit code (None: a signal), peak memory
/// and standard error.
struct Ended {
    code: Option<i32>,
    max_rss_kb: i64,
    stderr: String,
}

/// Runs `retrysim args` as a child, killed past [`MAX_CHILD`], and reads
/// its peak memory from `wait4`.
fn child(args: &[String]) -> Ended {
    let err_path = scratch(&format!("stderr-{}.txt", std::process::id()));
    let err_file = std::fs::File::create(&err_path).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(err_file)
        .spawn()
        .expect("the retrysim binary runs");
    let pid = child.id() as libc::pid_t;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let done = done.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if start.elapsed() > MAX_CHILD {
                    // SAFETY: `pid` is our child, not yet reaped (wait4 below reaps it).
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        })
    };
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, which std never waits for (the handle is forgotten).
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    std::mem::forget(child);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let killed = killer.join().unwrap();
    assert_eq!(waited, pid, "wait4 on the child");
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let code = (libc::WIFEXITED(status) && !killed).then(|| libc::WEXITSTATUS(status));
    Ended { code, max_rss_kb: usage.ru_maxrss, stderr }
}

fn fuzz_config() -> Config {
    let set = |name: &str| std::env::var_os(name).is_some();
    let mut c = Config::default();
    if !set("PROPTEST_CASES") {
        c.cases = FUZZ_CASES;
    }
    if !set("PROPTEST_RNG_SEED") {
        c.rng_seed = RngSeed::Fixed(0x51_f022);
    }
    c.max_shrink_iters = 32;
    c.failure_persistence = Some(Box::new(FileFailurePersistence::Direct(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/proptest-regressions/hostile.txt"
    ))));
    c
}

/// The fuzz target: a mutated scenario file and flags, run by the binary.
/// Asserts exactly: no panic, an end within [`MAX_CHILD`] and
/// [`MAX_RSS_KB`], and exit 0 only for a scenario `Scenario::from_toml`
/// accepts (bad input: exit 2 with a message).
#[test]
fn scenario_and_flag_mutations_end_cleanly() {
    let mut runner = TestRunner::new(fuzz_config());
    let strategy = (
        proptest::collection::vec(arb_mutation(), 1..=2),
        proptest::sample::select(vec!["run", "trace"]),
        proptest::option::of(proptest::sample::select(FLAGS.to_vec())),
    );
    let result = runner.run(&strategy, |(mutations, command, flag)| {
        let mut table = base();
        for m in &mutations {
            apply(&mut table, m);
        }
        let text = toml::to_string(&table).unwrap_or_default();
        let valid = Scenario::from_toml(&text).is_ok();
        let path = scratch(&format!("fuzz-{}.toml", std::process::id()));
        std::fs::write(&path, &text).unwrap();
        let mut args: Vec<String> = vec![command.into(), "--config".into(), path.display().to_string()];
        args.extend(["--max-wall".into(), "5s".into()]);
        args.extend(flag.iter().flat_map(|f| f.iter().map(|a| a.to_string())));
        let ended = child(&args);
        let shown = format!("{mutations:?} {args:?}: {}", ended.stderr.chars().take(600).collect::<String>());
        prop_assert!(ended.code.is_some(), "killed or signalled (time or memory): {shown}");
        prop_assert!(!ended.stderr.contains("panicked"), "a panic: {shown}");
        prop_assert!(ended.max_rss_kb < MAX_RSS_KB, "{} KB peak: {shown}", ended.max_rss_kb);
        let code = ended.code.unwrap();
        prop_assert!(code == 0 || code == 2, "exit {code}: {shown}");
        prop_assert!(code != 0 || valid, "exit 0 for a scenario from_toml refuses: {shown}");
        prop_assert!(valid || code == 2, "an invalid scenario must exit 2: {shown}");
        prop_assert!(code == 0 || !ended.stderr.trim().is_empty(), "exit {code} with nothing said: {shown}");
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}\n(the case is kept in proptest-regressions/hostile.txt and runs first next time)");
    }
}

/// Every key the fuzz target mutates lands where the scenario reads it: a
/// value out of range for each is refused by name (so the target reaches
/// every key, and the registry is what refuses).
#[test]
fn every_key_past_its_range_is_refused_by_name() {
    for k in every_key() {
        let past = match k.allowed {
            Allowed::Int { max, .. } if max < i128::from(i64::MAX) => toml::Value::Integer((max + 1) as i64),
            Allowed::Duration { max, .. } => {
                toml::Value::String(humantime::format_duration(max + Duration::from_millis(1)).to_string())
            }
            Allowed::Choice(_) => toml::Value::String("no-such-name".into()),
            Allowed::Text(max) | Allowed::Token(max) => toml::Value::String("k".repeat(max + 1)),
            Allowed::List(max) => toml::Value::Array(vec![toml::Value::Integer(1); max + 1]),
            _ => continue,
        };
        let mut table = base();
        apply(&mut table, &Mutation { key: k.path, value: past.clone() });
        let e = Scenario::from_toml(&toml::to_string(&table).unwrap()).expect_err(k.path);
        assert!(e.0.starts_with(&format!("{} ", k.path)), "{}: {e}", k.path);
    }
}

/// `docs/guide/scenario-keys.md` shows the registry's table as it is.
#[test]
fn the_scenario_keys_page_is_the_registry() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide/scenario-keys.md")).unwrap();
    let table = retrysim::internals::run::keys::markdown();
    assert!(
        page.contains(&table),
        "docs/guide/scenario-keys.md does not hold keys::markdown()'s table: regenerate it with\n\
         cargo test --release --test it hostile::the_scenario_keys_page_is_the_registry -- --nocapture\n\
         and paste this table:\n{table}"
    );
}

/// Arithmetic on user numbers cannot wrap: every key at its least and its
/// most (alone, on the small base scenario) is refused by a rule between
/// keys or runs without a panic, within a wall bound and a request cap.
#[test]
fn every_key_at_its_bounds_runs_without_a_panic() {
    let (mut ran, mut tried) = (0, 0);
    for k in every_key() {
        let ends = match k.allowed {
            Allowed::Int { min, max } => [min, max].map(|n| toml::Value::Integer(n as i64)).to_vec(),
            Allowed::Duration { min, max } => {
                [min, max].map(|d| toml::Value::String(humantime::format_duration(d).to_string())).to_vec()
            }
            Allowed::Choice(names) => names.iter().map(|n| toml::Value::String((*n).into())).collect(),
            _ => continue,
        };
        for value in ends {
            let mut table = base();
            apply(&mut table, &Mutation { key: k.path, value: value.clone() });
            tried += 1;
            let Ok(s) = Scenario::from_toml(&toml::to_string(&table).unwrap()) else { continue };
            let options = RunOptions::new().max_wall(Some(Duration::from_secs(2))).max_requests(20_000);
            if let Err(e) = options.run(&s, 1) {
                assert!(!e.message.contains("panicked"), "{} = {value}: {e}", k.path);
            }
            ran += 1;
        }
    }
    // Most bounds run; the rest break a rule between keys on this base (a
    // gate key without a gate kind, a min above its max, ...).
    assert!(ran * 3 >= tried * 2, "only {ran} of {tried} bounds ran: the base scenario refuses too many");
}
