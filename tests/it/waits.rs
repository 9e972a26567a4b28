//! Imports `retrysim::internals` (hidden, no semver promise) for the wait
//! checks one by one (`check_waits`), to show each failing.
//!
//! The checks that a planned wait stays between the shortest and the
//! longest the declared policy may plan and that the spread on an advice is
//! drawn (`sim::checks::waits`), each shown able to fail: a client built
//! here from the public API runs a policy other than the one it declares (a
//! backoff twice as long; full jitter where equal jitter is declared; a
//! spread capped at a millisecond, or at half its declared cap; no
//! escalation where it is declared; the
//! advice alone where the longer of advice and backoff is declared), the
//! slip a configuration read in the wrong unit, or not read, makes. The
//! honest client on the same runs passes.

use std::time::Duration;

use retrysim::core::backoff::{AdviceMode, Backoff, Jitter, Spread};
use retrysim::core::policy::Policy;
use retrysim::internals::checks::fleet::FleetViolation;
use retrysim::internals::checks::waits::check_waits;
use retrysim::internals::run::scenario::{Scenario, named};
use retrysim::internals::world::api::AdviceForm;
use retrysim::trace::EventKind;

use crate::support::run_slipped;

const SEEDS: [u64; 3] = [1, 2, 3];

/// Always 429 with a `Retry-After` that is not valid: every wait is the
/// batch preset's backoff (1 s doubling to 30 s, full jitter), five of them.
fn backoff_world() -> Scenario {
    let mut s = named("five-retries-six-attempts").expect("a named scenario");
    s.api.advice = AdviceForm::Malformed;
    s
}

/// [`backoff_world`] with equal jitter declared: each wait keeps half its window.
fn equal_jitter_world() -> Scenario {
    let mut s = backoff_world();
    s.policy.backoff.jitter = Jitter::Equal;
    s
}

/// Always 429 with `Retry-After: 1`, under the standard preset without
/// escalation: five waits of the advice plus a spread of up to 200 ms.
fn advice_world() -> Scenario {
    let mut s = named("five-retries-six-attempts").expect("a named scenario");
    s.policy = Policy::standard().to_builder().escalate(false).build();
    s.policy.max_retries = 5;
    s
}

/// [`advice_world`] with escalation: from the second refusal on, the
/// advice plus a second per refusal after the first.
fn escalation_world() -> Scenario {
    let mut s = advice_world();
    s.policy.escalate = true;
    s
}

/// [`advice_world`] in `max_of_advice_and_backoff` mode over a decorrelated
/// backoff of 2 s to 8 s: every wait at least the base, 2 s, over the 1 s advice.
fn max_of_world() -> Scenario {
    let mut s = advice_world();
    s.policy.advice_mode = AdviceMode::MaxOfAdviceAndBackoff;
    s.policy.backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(8), Jitter::Decorrelated);
    s
}

/// [`advice_world`] with forty retries: forty waits of the advice plus a
/// spread drawn under one cap, 200 ms.
fn many_waits_world() -> Scenario {
    let mut s = advice_world();
    s.policy.max_retries = 40;
    s.policy.deadline = Duration::from_secs(120);
    s
}

fn honest(_: &mut Policy) {}

fn doubled(p: &mut Policy) {
    p.backoff.base *= 2;
    p.backoff.cap *= 2;
}

fn full_jitter(p: &mut Policy) {
    p.backoff.jitter = Jitter::Full;
}

fn one_ms_spread(p: &mut Policy) {
    let one = Duration::from_millis(1);
    p.spread = Spread::new(0, one, one).rounded_zero(p.spread.rounded_zero);
}

/// A spread of 10% of the advice where 20% is declared: for a 1 s advice
/// 100 ms (the floor), under half the declared 200 ms cap every time.
fn half_spread(p: &mut Policy) {
    p.spread.per_mille /= 2;
}

fn no_escalation(p: &mut Policy) {
    p.escalate = false;
}

fn advice_only(p: &mut Policy) {
    p.advice_mode = AdviceMode::AdvicePlusSpread;
}

fn found<'a>(vs: &'a [FleetViolation], property: &str) -> Option<&'a FleetViolation> {
    vs.iter().find(|v| v.check.name() == property)
}

#[test]
fn the_honest_client_keeps_its_waits_in_bounds_and_draws_its_spread() {
    for s in
        [backoff_world(), equal_jitter_world(), advice_world(), escalation_world(), max_of_world(), many_waits_world()]
    {
        for seed in SEEDS {
            let r = run_slipped(&s, seed, honest);
            let waits = r
                .records
                .iter()
                .flat_map(|j| &j.trace.events)
                .filter(|e| matches!(e.kind, EventKind::Wait { .. }))
                .count();
            assert!(waits >= 5, "{} seed {seed}: {waits} waits", s.name);
            let vs = check_waits(&r);
            assert!(vs.is_empty(), "{} seed {seed}: {vs:?}", s.name);
        }
    }
}

/// On every seed of `world`, the client changed by `defect` breaks `check`
/// (blaming the client, in words containing `words`) and not `other`.
fn caught_by(world: &Scenario, defect: fn(&mut Policy), check: &str, words: &str, other: &str) {
    for seed in SEEDS {
        let vs = check_waits(&run_slipped(world, seed, defect));
        let v = found(&vs, check).unwrap_or_else(|| panic!("seed {seed}: not caught: {vs:?}"));
        assert!(v.message.starts_with("blames the client") && v.message.contains(words), "{}", v.message);
        assert!(found(&vs, other).is_none(), "seed {seed}: {other} too: {vs:?}");
    }
}

#[test]
fn a_backoff_twice_as_long_breaks_the_wait_upper_bound() {
    caught_by(&backoff_world(), doubled, "wait-upper-bound", "backoff's longest draw", "backoff-floor");
}

#[test]
fn a_spread_of_one_millisecond_is_not_drawn() {
    // A shorter spread is within the upper bound.
    caught_by(&advice_world(), one_ms_spread, "advice-spread-drawn", "each of the 5 waits", "wait-upper-bound");
}

#[test]
fn a_spread_under_half_its_declared_cap_every_time_does_not_reach_it() {
    // Narrower, so within every bound, and drawn.
    caught_by(&many_waits_world(), half_spread, "advice-spread-drawn", "each of the 40 waits", "wait-upper-bound");
}

#[test]
fn full_jitter_where_equal_is_declared_breaks_the_backoff_floor() {
    // Full jitter stays under the window.
    caught_by(&equal_jitter_world(), full_jitter, "backoff-floor", "Equal jitter keeps", "wait-upper-bound");
}

#[test]
fn a_repeated_refusal_waited_as_the_plain_advice_breaks_the_wait_lower_bound() {
    // The second refusal's floor is the 1 s advice plus a second; the
    // plain advice plus a spread of at most 200 ms stays under the upper bound.
    caught_by(
        &escalation_world(),
        no_escalation,
        "wait-lower-bound",
        "escalated for refusal 1 (1 s added",
        "wait-upper-bound",
    );
}

#[test]
fn the_advice_alone_where_the_longer_backoff_is_declared_breaks_the_wait_lower_bound() {
    caught_by(
        &max_of_world(),
        advice_only,
        "wait-lower-bound",
        "Decorrelated jitter), longer than the advice",
        "wait-upper-bound",
    );
}
