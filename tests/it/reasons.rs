//! Imports `retrysim::internals` (hidden, no semver promise) for the reason and
//! careful checks one by one (`check_reasons`, `check_careful`) and retrysim's
//! own client on `SimTransport`, to show each check failing.
//!
//! The checks that a client stops for the reason its answers give and keeps
//! the bound on unclear retries (`sim::checks::reasons`), each shown able to
//! fail: a classifier built here from the public API makes the slip a
//! classification table can make, on a world whose 429s carry neither a
//! code nor any advice (the habit of an HTML 429 page without
//! `Retry-After`). A client that runs a bound a step off the policy it
//! declares stops one unclear 429 early, gives up on a wait that just fits
//! the deadline, or takes an advice of exactly `max_single_wait` as too
//! long (`throttled-retried`). The honest client on the same runs passes.

use std::sync::Arc;
use std::time::Duration;

use retrysim::RetryClient;
use retrysim::core::backoff::{AdviceMode, Spread};
use retrysim::core::classify::{Class, Classifier, DefaultTable, Outcome};
use retrysim::core::policy::GiveUpReason;
use retrysim::internals::checks::careful::check_careful;
use retrysim::internals::checks::fleet::FleetViolation;
use retrysim::internals::checks::hunt::{Kind, Target};
use retrysim::internals::checks::reasons::check_reasons;
use retrysim::internals::checks::registry::Property;
use retrysim::internals::run::clients::Retrysim;
use retrysim::internals::run::runner::{Report, RunOptions};
use retrysim::internals::run::scenario::{Scenario, named};
use retrysim::internals::world::api::AdviceForm;
use retrysim::internals::world::net::SimTransport;
use retrysim::testing::{Host, Promises, from_fn};
use retrysim::trace::{Event, EventKind};

use crate::support::run_slipped;

const SEEDS: [u64; 3] = [1, 2, 3];

/// `html-429-no-code` with no advice at all: every refusal is unclear.
fn unclear_world() -> Scenario {
    let mut s = named("html-429-no-code").expect("a named scenario");
    s.api.advice = AdviceForm::None;
    // This file's own bound, not a preset's (the presets allow 8): small,
    // so that every seed meets it and one more.
    s.policy.unclear_max_retries = 2;
    s
}

/// The default table, except for unclear answers, read as `unclear`.
struct Unclear(Class);

impl Classifier for Unclear {
    fn classify(&self, outcome: Outcome<'_>) -> Class {
        match DefaultTable::default().classify(outcome) {
            Class::Unclear => self.0,
            class => class,
        }
    }
}

/// Runs `s` with retrysim's driver under the scenario's policy; with
/// `unclear_as`, unclear answers are read as that class.
fn sim(s: &Scenario, seed: u64, unclear_as: Option<Class>) -> Report {
    let make = from_fn("unclear-read-otherwise", move |host: Host<'_>| {
        let policy = host.scenario.policy.clone();
        let mut client = RetryClient::new(host.clock.clone(), SimTransport::new(), policy.clone());
        if let Some(class) = unclear_as {
            client = client.with_classifier(Arc::new(Unclear(class)));
        }
        Retrysim::new(client, Promises::of_policy(&policy))
    });
    RunOptions::new().run_subject(s, seed, Arc::new(make)).unwrap_or_else(|e| panic!("{e}"))
}

fn found<'a>(vs: &'a [FleetViolation], property: &str) -> Option<&'a FleetViolation> {
    vs.iter().find(|v| v.check.name() == property)
}

#[test]
fn the_honest_client_gives_up_on_unclear_429s_as_unclear_and_passes() {
    let s = unclear_world();
    for seed in SEEDS {
        let r = sim(&s, seed, None);
        assert!(r.gave_up.get("unclear_exhausted").copied().unwrap_or(0) > 0, "seed {seed}: {:?}", r.gave_up);
        let vs = check_reasons(&r);
        assert!(vs.is_empty(), "seed {seed}: {vs:?}");
    }
}

#[test]
fn unclear_429s_retried_as_throttled_break_the_unclear_bound() {
    let s = unclear_world();
    for seed in SEEDS {
        let vs = check_reasons(&sim(&s, seed, Some(Class::Throttled)));
        let v = found(&vs, "unclear-bound").unwrap_or_else(|| panic!("seed {seed}: not caught: {vs:?}"));
        assert!(v.message.starts_with("blames the client") && v.message.contains("allows 2"), "{}", v.message);
    }
}

#[test]
fn an_unclear_429_read_as_terminal_breaks_the_give_up_reason() {
    let s = unclear_world();
    for seed in SEEDS {
        let vs = check_reasons(&sim(&s, seed, Some(Class::Terminal)));
        let v = found(&vs, "give-up-reason").unwrap_or_else(|| panic!("seed {seed}: not caught: {vs:?}"));
        assert!(v.message.contains("as terminal on a 429 (no code)"), "{}", v.message);
    }
}

#[test]
fn a_client_that_stops_one_unclear_429_early_breaks_the_give_up_reason() {
    let s = unclear_world();
    assert_eq!(s.policy.unclear_max_retries, 2);
    for seed in SEEDS {
        let vs = check_reasons(&run_slipped(&s, seed, |p| p.unclear_max_retries -= 1));
        let v = found(&vs, "give-up-reason").unwrap_or_else(|| panic!("seed {seed}: not caught: {vs:?}"));
        assert!(v.message.contains("as unclear after 2 unclear 429(s), though the declared policy"), "{}", v.message);
    }
}

/// Always 429 with `Retry-After: 1`, answered 2 ms in (no latency, no
/// processing, 1 ms ticks), waited with no spread: the deadline (1502 ms)
/// leaves the first answer exactly the wait and `min_attempt_time` (500 ms),
/// so the one retry fits and the second does not.
fn deadline_edge_world() -> Scenario {
    let mut s = named("five-retries-six-attempts").expect("a named scenario");
    (s.net.min_latency, s.net.max_latency, s.net.tick) = (Duration::ZERO, Duration::ZERO, Duration::from_millis(1));
    s.api.processing_ms = 0;
    s.api.advice = AdviceForm::HeaderSeconds;
    let p = &mut s.policy;
    p.spread = Spread::new(0, Duration::ZERO, Duration::ZERO).rounded_zero(Duration::ZERO);
    (p.advice_mode, p.escalate) = (AdviceMode::AdvicePlusSpread, false);
    (p.min_attempt_time, p.deadline) = (Duration::from_millis(500), Duration::from_millis(1_502));
    s
}

/// Always 429 with `Retry-After: 1` under a policy whose longest single
/// wait is exactly that second: not too long.
fn longest_wait_world() -> Scenario {
    let mut s = named("five-retries-six-attempts").expect("a named scenario");
    s.api.advice = AdviceForm::HeaderSeconds;
    s.policy.max_single_wait = Duration::from_secs(1);
    s
}

#[test]
fn the_honest_client_retries_where_a_wait_just_fits() {
    for (s, attempts) in [(deadline_edge_world(), 2), (longest_wait_world(), 6)] {
        for seed in SEEDS {
            let r = sim(&s, seed, None);
            assert!(r.records.iter().all(|j| j.attempts == attempts), "{} seed {seed}: {:?}", s.name, r.gave_up);
            let vs: Vec<_> = check_reasons(&r).into_iter().chain(check_careful(&r)).collect();
            assert!(vs.is_empty(), "{} seed {seed}: {vs:?}", s.name);
        }
    }
}

#[test]
fn a_wait_that_just_fits_the_deadline_given_up_on_breaks_the_give_up_reason() {
    for seed in SEEDS {
        let vs = check_reasons(&run_slipped(&deadline_edge_world(), seed, |p| {
            p.min_attempt_time += Duration::from_millis(1)
        }));
        let v = found(&vs, "give-up-reason").unwrap_or_else(|| panic!("seed {seed}: not caught: {vs:?}"));
        assert!(
            v.message.contains("1000 ms it planned and the last attempt's 500 ms fit the 1500 ms left"),
            "{}",
            v.message
        );
    }
}

#[test]
fn an_advice_of_exactly_the_longest_wait_taken_as_too_long_breaks_throttled_retried() {
    for seed in SEEDS {
        let vs =
            check_careful(&run_slipped(&longest_wait_world(), seed, |p| p.max_single_wait -= Duration::from_millis(1)));
        let v = found(&vs, "throttled-retried").unwrap_or_else(|| panic!("seed {seed}: not caught: {vs:?}"));
        assert!(v.message.contains("gave up (advice too long"), "{}", v.message);
    }
}

/// Default-hunt fleets (seeds 1..=500) whose gates hold jobs in their queues
/// until no attempt fits the deadline: 36, 36 and 51 of their jobs give up
/// at the gate.
const GATE_SEEDS: [u64; 3] = [12, 52, 71];

/// Hunt seed `seed`'s world, as the default hunt draws it.
fn gate_world(seed: u64) -> Scenario {
    Target::of(Kind::All).scenario(seed)
}

/// The `deadline_would_pass` give-ups that no answer or failure came right before.
fn gave_up_at_the_gate(r: &Report) -> usize {
    let at_gate = |events: &[Event]| match events.iter().position(|e| matches!(e.kind, EventKind::GaveUp { .. })) {
        Some(i) => {
            matches!(&events[i].kind, EventKind::GaveUp { reason: GiveUpReason::DeadlineWouldPass { .. }, .. })
                && !matches!(
                    events[..i].last().map(|e| &e.kind),
                    Some(EventKind::Answer { .. } | EventKind::NoAnswer { .. })
                )
        }
        None => false,
    };
    r.records.iter().filter(|j| at_gate(&j.trace.events)).count()
}

#[test]
fn the_honest_client_gives_up_at_the_gate_once_only_the_last_attempt_fits() {
    for seed in GATE_SEEDS {
        let r = run_slipped(&gate_world(seed), seed, |_| {});
        assert!(gave_up_at_the_gate(&r) > 0, "seed {seed}: no job gave up at the gate: {:?}", r.gave_up);
        let vs = check_reasons(&r);
        assert!(vs.is_empty(), "seed {seed}: {vs:?}");
    }
}

#[test]
fn a_client_that_leaves_the_gate_while_an_attempt_still_fits_breaks_the_give_up_reason() {
    for seed in GATE_SEEDS {
        // Two milliseconds more for the last attempt: one over the check's
        // slack for the trace's flooring.
        let vs =
            check_reasons(&run_slipped(&gate_world(seed), seed, |p| p.min_attempt_time += Duration::from_millis(2)));
        // Some of its give-ups follow an answer (the other branch); the gate's are these.
        let at_gate = vs
            .iter()
            .filter(|v| v.check == Property::GiveUpReason)
            .find(|v| v.message.contains("before an attempt as the deadline would pass, though"));
        assert!(at_gate.is_some(), "seed {seed}: not caught at the gate: {vs:?}");
    }
}
