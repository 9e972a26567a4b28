//! Imports `retrysim::internals` (hidden, no semver promise) for the hunt's
//! sabotage table (`DEFECTS`, `catches`, `HuntConfig`) and the defects it
//! plants.
//!
//! The hunt with its default seed count catches every deliberate defect
//! (`retrysim hunt --sabotage`), and the table of how soon and how often
//! (`docs/guide/hunting.md`) is what the hunt measures now.

use retrysim::internals::checks::hunt::{self, Catch, DeterminismSample, HuntConfig, Kind, Target};
use retrysim::internals::run::defects;

/// `retrysim hunt`'s default range: seeds 1..=500.
const START: u64 = 1;
const SEEDS: u64 = 500;

/// The fewest failing seeds of 500 each defect must show: every class is
/// caught within the default count, on many seeds, not one (the guide's
/// table says how many, and this test keeps it current).
const AT_LEAST: u64 = 10;

/// The defects whose slip shows only where the hunt's worlds rarely go,
/// with the fewest failing seeds of 500 each must show instead (what it
/// shows now: the table below keeps the count current). `max-of-advice-only`
/// shortens a wait only in `max_of_advice_and_backoff` mode, on a wait that
/// is not an escalation (which takes the longer itself), where the jitter's
/// shortest draw is over the advice: a base of 2 s (or a grown window)
/// without full jitter against an advice of a second or two. The default
/// worlds draw that on 7 seeds of 500 (24 of 3000); the generator is left
/// as it is, since changing it moves every pinned seed. `aimd-never-grows`
/// is judged only where a limiter service's gate is AIMD (aimd-grows reads
/// what the workers told the service): 8 seeds of 500, then 7 once the
/// hunt drew a regional outage (the API and the limiter service cut off
/// at once) in a quarter of the coordinated fleets (seed 302 reported no
/// success to the gate while cut off), and 9 since the reach's worlds,
/// drawn before it, moved which fleets the outage cuts.
/// `deferral-first-advice` shows only in the reach's deferral world (a
/// fleet without a gate, a budget or per-worker hosts whose front end is
/// told `Retry-After: 0` and then 2 or 3 s), where the background run
/// comes back before the later advice ends: 6 seeds of 500.
/// `pacing-trusts-rounded-reset` shows only on a pacing gate's clean run
/// whose server tells whole seconds (drawn last: 10 seeds of 500), where
/// the rounded bound is late by more than the check's slack: 5 seeds of
/// 500. The same draw took 5 of the 10 seeds that caught
/// `pacing-ignores-reset`: on a whole-second server a gate without the reset
/// is held by each refusal's `Retry-After` (rounded past the reset) and
/// spends one refused probe per window, which pacing-no-429 allows once
/// there; 8 seeds of 500 remained, and 7 since the core reads every
/// rate-limit dialect (issue 53): on seed 391 the server's `Retry-After` is
/// malformed and its `X-RateLimit-Reset` a Unix time 2 s ahead, past the
/// drawn policy's `max_single_wait`, so its workers now give up at once
/// instead of retrying into the window a gate without the reset opens;
/// 4 since the reach's in-flight world (drawn on every clean pacing run
/// whose server tells seconds left) took seeds 37, 245 and 294, where
/// messages slower than the window leave no refusal a gate without the
/// reset could not explain (it sends one attempt at a time once the window
/// closes, and pacing-no-429 judges there only refusals out together with
/// the window's whole limit).
/// `equal-declared-full` shows only where one run draws at least 24
/// full-jitter waits on the backoff alone (jitter-spread's lowest-draw
/// test: none under half the window has a chance of 2^-24 there), a world
/// declaring full jitter whose failures carry no advice: 4 seeds of 500.
const RARE: [(&str, u64); 6] = [
    ("max-of-advice-only", 6),
    ("aimd-never-grows", 9),
    ("pacing-trusts-rounded-reset", 5),
    ("pacing-ignores-reset", 4),
    ("equal-declared-full", 4),
    ("deferral-first-advice", 6),
];

/// The fewest failing seeds of 500 `defect` must show.
fn at_least(defect: &str) -> u64 {
    RARE.iter().find(|(d, _)| *d == defect).map_or(AT_LEAST, |(_, n)| *n)
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

fn table(catches: &[Catch]) -> String {
    let mut t = String::from(
        "| defect | what slips | first failing seed | failing seeds of 500 | caught by |\n|---|---|---:|---:|---|\n",
    );
    for c in catches {
        let first = c.first.map_or("none".to_owned(), |s| s.to_string());
        let by: Vec<String> = c.by_finding.iter().map(|(k, n)| format!("{k} {n}")).collect();
        t.push_str(&format!(
            "| `{}` | {} | {first} | {} | {} |\n",
            c.defect,
            defects::describe(c.defect),
            c.caught,
            by.join(", ")
        ));
    }
    t
}

#[test]
fn the_default_hunt_catches_every_defect_and_the_readme_table_is_current() {
    // The honest hunt over the same seeds is clean: every catch is the defect's.
    let honest = HuntConfig {
        start: START,
        seeds: SEEDS,
        target: Target::of(Kind::All),
        threads: threads(),
        determinism: DeterminismSample::Off,
        options: Default::default(),
    };
    let dirty: Vec<u64> =
        hunt::hunt(&honest, &|_, _| {}).iter().filter(|r| !r.findings.is_empty()).map(|r| r.seed).collect();
    assert!(dirty.is_empty(), "the honest hunt fails on seeds {dirty:?}");

    let catches: Vec<Catch> = hunt::DEFECTS.iter().map(|d| hunt::catches(d, START, SEEDS, threads())).collect();
    let measured = table(&catches);
    for c in &catches {
        let least = at_least(c.defect);
        assert!(c.caught >= least, "--sabotage {} fails only {} of {SEEDS} seeds:\n{measured}", c.defect, c.caught);
    }
    let (page, section) = crate::readme::page_and_section("Properties and regression hunting");
    assert!(
        section.contains("`cargo run --release -- hunt --sabotage DEFECT` (seeds 1..=500, the default)"),
        "{page} must name the command beside the table"
    );
    assert!(section.contains(&measured), "{page}'s sabotage table is stale; measured now:\n\n{measured}");
}

/// The checks that a client is not too careful, that it stops for the
/// reason its answers give, and that the model is right, each with the
/// deliberate defect it must catch: the first seed of the default range where
/// the defect fails shows the check's finding, which names the side it
/// blames, and the same seed without the defect passes that check.
#[test]
fn each_new_check_catches_its_defect_and_names_the_side_it_blames() {
    let cases = [
        ("throttled-as-unclear", "throttled-retried", "blames the client"),
        ("spread-off", "zero-advice-spread", "blames the client"),
        ("advice-rounds-down", "model-advice", "blames the model"),
        ("store-forgets-answers", "model-idempotency", "blames the model"),
        ("transient-as-terminal", "give-up-reason", "blames the client"),
        ("wait-doubled", "wait-upper-bound", "blames the client"),
        ("spread-not-drawn", "advice-spread-drawn", "blames the client"),
        ("jitter-full", "backoff-floor", "blames the client"),
        ("escalation-skipped", "wait-lower-bound", "blames the client"),
        ("max-of-advice-only", "wait-lower-bound", "blames the client"),
        ("budget-charged-twice", "budget-refusal", "blames the client"),
        ("jitter-constant", "jitter-spread", "blames the client"),
        ("jitter-same-draw", "jitter-spread", "blames the client"),
        ("jitter-four-values", "jitter-spread", "blames the client"),
        ("equal-declared-full", "jitter-spread", "blames the client"),
    ];
    let honest = Target::of(Kind::All);
    for (defect, property, blame) in cases {
        let mut target = Target::of(Kind::All);
        assert!(target.sabotage.set(defect), "{defect} is a defect");
        let found = (START..START + SEEDS).find_map(|seed| {
            let r = hunt::check_seed(seed, &target, false, &Default::default());
            r.findings.into_iter().find(|f| f.invariant == property).map(|f| (seed, f))
        });
        let (seed, finding) =
            found.unwrap_or_else(|| panic!("--sabotage {defect}: no seed of {SEEDS} broke {property}"));
        assert!(finding.message.starts_with(blame), "seed {seed}, --sabotage {defect}: {}", finding.message);
        let clean = hunt::check_seed(seed, &honest, false, &Default::default());
        assert!(
            clean.findings.iter().all(|f| f.invariant != property),
            "seed {seed} without {defect}: {:?}\nreplay: {}",
            clean.findings,
            honest.replay(seed)
        );
    }
}

/// The default hunt (`retrysim hunt`: seeds 1..=500, determinism on every
/// seed) is clean. This alone is what cargo-mutants runs against each
/// mutant (`.cargo/mutants.toml`): a mutant is caught when the hunt fails.
#[test]
fn the_default_hunt_is_clean() {
    let config = HuntConfig {
        start: START,
        seeds: SEEDS,
        target: Target::of(Kind::All),
        threads: threads(),
        determinism: DeterminismSample::Every,
        options: Default::default(),
    };
    let failing: Vec<String> = hunt::hunt(&config, &|_, _| {})
        .iter()
        .flat_map(|r| &r.findings)
        .map(|f| format!("seed {} {}: {}\n  replay: {}", f.seed, f.invariant, f.message, f.replay))
        .collect();
    assert!(failing.is_empty(), "the default hunt fails:\n{}", failing.join("\n"));
}

/// `reads-only-retry-after` (a client that reads only `Retry-After` and the
/// body) is caught in every rate-limit dialect the hunt draws, on the
/// default seeds, and only where the dialect is the only usable advice
/// (`advice = "none"`, or a malformed `Retry-After`): where `Retry-After`
/// or the body advises too, it is what such a client reads, and the ledger
/// holds it to that. Seeds 1..=500 catch it now on ietf 3, express_draft6
/// 6, express_draft7 2, express_draft8 6, openai 1, github 4 (22 seeds, all
/// advice-respected), and the honest client passes every one of them.
#[test]
fn a_client_that_reads_only_retry_after_is_caught_in_every_dialect_where_it_is_the_only_advice() {
    use retrysim::internals::world::api::{AdviceForm, Dialect};
    let mut target = Target::of(Kind::All);
    assert!(target.sabotage.set("reads-only-retry-after"));
    let honest = Target::of(Kind::All);
    let mut caught: std::collections::BTreeMap<Dialect, u64> = Default::default();
    for seed in START..START + SEEDS {
        let s = honest.scenario(seed);
        let r = hunt::check_seed(seed, &target, false, &Default::default());
        if r.findings.is_empty() {
            continue;
        }
        let alone = matches!(s.api.advice, AdviceForm::None | AdviceForm::Malformed);
        assert!(
            s.api.dialect != Dialect::None && alone,
            "seed {seed} (dialect {}, advice {:?}) caught: {:?}",
            s.api.dialect.name(),
            s.api.advice,
            r.findings
        );
        assert!(r.findings.iter().all(|f| f.invariant == "advice-respected"), "seed {seed}: {:?}", r.findings);
        let clean = hunt::check_seed(seed, &honest, false, &Default::default());
        assert!(clean.findings.is_empty(), "seed {seed} without the defect: {:?}", clean.findings);
        *caught.entry(s.api.dialect).or_default() += 1;
    }
    for dialect in Dialect::SPOKEN {
        assert!(caught.contains_key(&dialect), "{}: never caught in seeds 1..=500: {caught:?}", dialect.name());
    }
}
