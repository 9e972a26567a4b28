//! The world generator's tests: every seed's scenario is valid, a function
//! of the seed and round-trips through TOML; calm ones qualify for
//! liveness; and the default hunt draws every fault kind's draw and every
//! habit the homes list, as the key registry allows them.

use super::Kind;
use super::worlds::swarm;
use crate::sim::checks::invariants as check;
use crate::sim::run::scenario::Scenario;

#[test]
fn swarm_is_a_function_of_the_seed() {
    for seed in 0..50 {
        assert_eq!(swarm(seed, Kind::All), swarm(seed, Kind::All), "seed {seed}");
    }
    assert_ne!(swarm(1, Kind::Fleet), swarm(2, Kind::Fleet));
}

#[test]
fn every_swarm_scenario_is_valid() {
    // A scenario the validator rejects would end a hunt (or a shrunk
    // failure) as a config error that hides the real finding.
    for seed in 0..20_000 {
        for kind in [Kind::Fleet, Kind::Single] {
            swarm(seed, kind).validate().unwrap_or_else(|e| panic!("seed {seed} {kind}: {e}"));
        }
    }
}

#[test]
fn swarm_scenarios_round_trip_through_toml() {
    for seed in 0..50 {
        let s = swarm(seed, Kind::All);
        let back = Scenario::from_toml(&s.to_toml()).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", s.to_toml()));
        assert_eq!(back, s, "seed {seed}");
    }
}

#[test]
fn kinds_shape_the_fleet() {
    for seed in 0..30 {
        let s = swarm(seed, Kind::Single);
        assert_eq!(s.fleet.workers, 1);
        assert!((1..=3).contains(&s.fleet.jobs));
        let f = swarm(seed, Kind::Fleet);
        assert!((2..=16).contains(&f.fleet.workers) && (1..=200).contains(&f.fleet.jobs));
        assert_eq!(swarm(seed, Kind::All), swarm(seed, Kind::All.resolve(seed)));
    }
}

#[test]
fn calm_scenarios_qualify_for_liveness() {
    let calm: Vec<u64> = (0..200).filter(|&s| swarm(s, Kind::All).description.contains("calm")).collect();
    assert!(calm.len() > 30, "{} calm seeds of 200", calm.len());
    for seed in calm {
        let s = swarm(seed, Kind::All);
        assert_eq!(check::liveness_expected(&s), Ok(()), "seed {seed}");
    }
}

/// Each fault kind names the draw that schedules it (its home,
/// `sim::world::faults`), and that draw is here, or is the home's
/// `draw_last`, which the generator calls after every other draw but one:
/// the pacing gate in flight (`reach::pacing_in_flight`), which clears the
/// fault schedule of the few worlds it draws (so it must come after every
/// fault), and draws nothing elsewhere.
#[test]
fn every_fault_kind_names_a_draw_of_this_generator() {
    let (source, home) = (include_str!("worlds.rs"), include_str!("../../world/faults.rs"));
    let last = "faults::draw_last(&mut g, drawn, &mut s.faults.schedule);\n    // A pacing gate with attempts in flight across its resets: after the\n    // fault kinds, so only the seeds that draw it move.\n    reach::pacing_in_flight(&mut g, &mut s, pacing_clean);\n    if calm {\n        make_ample(&mut s);";
    assert!(
        source.contains(last),
        "the generator calls the home's draw_last after every other draw but the pacing gate in flight"
    );
    let reach = include_str!("worlds/reach.rs");
    let body = reach.split("fn pacing_in_flight(").nth(1).expect("reach::pacing_in_flight");
    let body = &body[..body.find("\n}\n").expect("its end")];
    assert!(body.contains("s.faults.schedule.clear();"), "pacing_in_flight clears the faults drawn before it");
    for kind in crate::sim::world::faults::FaultKind::ALL {
        for draw in kind.swarm_draw().split(", ") {
            let (file, at) = if draw == "draw_last" { (home, "\npub(crate) fn ") } else { (source, "\nfn ") };
            assert!(file.contains(&format!("{at}{draw}(")), "{kind}: no `fn {draw}` in the generator");
        }
    }
}

/// Every value of every server habit ([`habits::KNOBS`]: limiter kinds,
/// advice forms, date forms, envelopes, roundings, rate-limit fields and
/// resets, refusal bodies and dialects) is drawn by some seed of the
/// default hunt (`retrysim hunt`: seeds 1..=500).
#[test]
fn the_default_hunt_draws_every_habit() {
    use crate::sim::world::api::habits::registry::KNOBS;
    let drawn: Vec<Scenario> = (1..=500).map(|seed| swarm(seed, Kind::All)).collect();
    for knob in KNOBS {
        let seen: std::collections::BTreeSet<&str> = drawn.iter().map(|s| (knob.of)(&s.api)).collect();
        let never: Vec<&str> = (knob.names)().into_iter().filter(|v| !seen.contains(v)).collect();
        assert!(never.is_empty(), "seeds 1..=500 never draw {} = {never:?} (drawn: {seen:?})", knob.key);
    }
}

/// The scenario keys' registry allows exactly each habit's values.
#[test]
fn the_key_registry_allows_every_habit_value() {
    use crate::sim::run::keys::{Allowed, KEYS};
    use crate::sim::world::api::habits::registry::KNOBS;
    for knob in KNOBS {
        let key = KEYS.iter().flat_map(|k| k.iter()).find(|k| k.path == knob.key);
        let Some(Allowed::Choice(allowed)) = key.map(|k| k.allowed) else {
            panic!("{}: not a choice in the key registry", knob.key)
        };
        let (mut allowed, mut names) = (allowed.to_vec(), (knob.names)());
        allowed.sort_unstable();
        names.sort_unstable();
        assert_eq!(allowed, names, "{}", knob.key);
    }
}

/// The scenario keys' registry allows exactly the fault kinds and the
/// close races' timings of the faults' home.
#[test]
fn the_key_registry_allows_every_fault_kind() {
    use crate::sim::run::keys::{Allowed, KEYS};
    use crate::sim::world::{faults::FaultKind, net::CloseTiming};
    let choice = |path: &str| match KEYS.iter().flat_map(|k| k.iter()).find(|k| k.path == path) {
        Some(&crate::sim::run::keys::Key { allowed: Allowed::Choice(names), .. }) => names.to_vec(),
        _ => panic!("{path}: not a choice in the key registry"),
    };
    let kinds: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(choice("faults.schedule[].fault.kind"), kinds);
    let timings: Vec<&str> = CloseTiming::ALL.iter().map(|t| t.name()).collect();
    assert_eq!(choice("faults.schedule[].fault.timing"), timings);
}
