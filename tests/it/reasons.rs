//! The checks that a client stops for the reason its answers give and keeps
//! the bound on unclear retries (`sim::checks::reasons`), each shown able to
//! fail: a classifier built here from the public API makes the slip a
//! classification table can make, on a world whose 429s carry neither a
//! code nor any advice (the habit of an HTML 429 page without
//! `Retry-After`). The honest client on the same runs passes.

use std::sync::Arc;

use retrysim::RetryClient;
use retrysim::core::classify::{Class, Classifier, DefaultTable, Outcome};
use retrysim::sim::checks::fleet::FleetViolation;
use retrysim::sim::checks::reasons::check_reasons;
use retrysim::sim::run::clients::Retrysim;
use retrysim::sim::run::runner::{Report, RunOptions};
use retrysim::sim::run::scenario::{Scenario, named};
use retrysim::sim::world::api::AdviceForm;
use retrysim::sim::world::net::SimTransport;
use retrysim::testing::{Host, Promises, from_fn};

const SEEDS: [u64; 3] = [1, 2, 3];

/// `html-429-no-code` with no advice at all: every refusal is unclear.
fn unclear_world() -> Scenario {
    let mut s = named("html-429-no-code").expect("a named scenario");
    s.api.advice = AdviceForm::None;
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
    vs.iter().find(|v| v.property == property)
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
