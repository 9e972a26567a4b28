//! Imports `retrysim::internals` (hidden, no semver promise) for retrysim's own
//! client on `SimTransport` with the runner's options, for the tests that share
//! this module.
//!
//! What the integration tests share: the `retrysim` binary, a run that must
//! finish, and the one replay line every failure prints.
//!
//! The replay line is the same for every scenario, named or generated: the
//! scenario saved as TOML under the tests' target directory, and the command
//! that traces it (`cargo run --release -- trace --config FILE --seed N`).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use retrysim::RetryClient;
use retrysim::core::policy::Policy;
use retrysim::internals::run::clients::Retrysim;
use retrysim::internals::run::runner::{Report, RunOptions};
use retrysim::internals::run::scenario::Scenario;
use retrysim::internals::world::net::SimTransport;
use retrysim::testing::{Host, Promises, from_fn};

/// Runs the `retrysim` binary with `args`: its exit code (-1 when a signal
/// ended it), standard output and standard error.
pub fn retrysim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_retrysim")).args(args).output().expect("the retrysim binary runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The standard output of `retrysim args`, which must succeed.
pub fn retrysim_ok(args: &[&str]) -> String {
    let (code, out, err) = retrysim(args);
    assert_eq!(code, 0, "retrysim {args:?}: {err}");
    out
}

/// Runs `s` with `seed` under the default options; a run that does not
/// finish fails the test with the replay line.
pub fn run(s: &Scenario, seed: u64) -> Report {
    run_under(RunOptions::new(), s, seed)
}

/// [`run`] under `options`.
pub fn run_under(options: RunOptions, s: &Scenario, seed: u64) -> Report {
    options.run(s, seed).unwrap_or_else(|e| {
        panic!("scenario {} seed {seed} did not finish: {}\n{}", e.scenario, e.message, replay(s, seed))
    })
}

/// The line that replays `s` with `seed`: it saves the scenario (under a
/// name that is its own, so two scenarios never share a file) and returns
/// `replay: cargo run --release -- trace --config FILE --seed SEED`.
pub fn replay(s: &Scenario, seed: u64) -> String {
    let toml = s.to_toml();
    let mut hash = DefaultHasher::new();
    toml.hash(&mut hash);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replays");
    let path = dir.join(format!("{}-{seed}-{:016x}.toml", s.name, hash.finish()));
    match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &toml)) {
        Ok(()) => format!("replay: cargo run --release -- trace --config {} --seed {seed}", path.display()),
        Err(e) => format!("replay: (could not save the scenario: {e}) the scenario:\n{toml}"),
    }
}

/// The [`replay`] line of the run `r` (its scenario as it ran, its seed).
pub fn replay_run(r: &Report) -> String {
    replay(&r.scenario_config, r.seed)
}

/// Runs `s` with `seed` and retrysim's driver, behind the fleet's gate and
/// budget when it has them, which declares the scenario's policy and runs
/// `slip` of it: the slip a configuration read in the wrong unit, or a step
/// off, makes. The checks judge by the declared policy.
pub fn run_slipped(s: &Scenario, seed: u64, slip: fn(&mut Policy)) -> Report {
    let make = from_fn("runs-another-policy", move |host: Host<'_>| {
        let declared = host.scenario.policy.clone();
        let mut running = declared.clone();
        slip(&mut running);
        let mut client = RetryClient::new(host.clock.clone(), SimTransport::new(), running);
        if let Some(gate) = host.gate.clone() {
            client = client.with_gate(gate);
        }
        if let Some(budget) = host.budget.clone() {
            client = client.with_budget(budget);
        }
        Retrysim::new(client, Promises::of_policy(&declared))
    });
    RunOptions::new().run_subject(s, seed, Arc::new(make)).unwrap_or_else(|e| panic!("{e}\n{}", replay(s, seed)))
}
