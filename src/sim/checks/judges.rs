//! The checkers of properties, each with the properties it may report:
//! [`hunt::judge`](crate::sim::checks::hunt::judge) runs every one, in
//! [`PROPERTY_JUDGES`] order. Apart from [`registry`](crate::sim::checks::registry),
//! which the checkers name for their ids.

use crate::sim::checks::registry::{FleetViolation, Property};
use crate::sim::checks::{careful, fleet, model, reasons, spread, waits};
use crate::sim::run::runner::Report;

/// A checker of properties and what it may report.
#[derive(Debug, Clone, Copy)]
pub struct Judge {
    /// What the checker is called.
    pub name: &'static str,
    /// The checker.
    pub run: fn(&Report) -> Vec<FleetViolation>,
    /// Every property its findings may carry.
    pub reports: &'static [Property],
}

/// A model check's findings as properties.
fn model(check: Property, found: Vec<model::ModelViolation>) -> Vec<FleetViolation> {
    found.into_iter().map(|x| FleetViolation { check, message: x.message }).collect()
}

macro_rules! judges {
    ($($name:literal => $run:expr, [$($p:ident),+];)*) => {
        /// Every checker of properties, in the order `hunt::judge` runs them.
        pub const PROPERTY_JUDGES: &[Judge] = &[$(Judge { name: $name, run: $run, reports: &[$(Property::$p),+] },)*];
    };
}

judges! {
    "check_fleet" => fleet::check_fleet, [
        BudgetAllowance, BudgetRefusal, GateWindow, GateFifo, PacingHold, ApiWithinGateLimit, FallbackLimit,
        FallbackOnlyWhenCutOff, ServiceHearsOutcomes, ServiceKeepsLeases, DeferredOnce, InteractiveBudget,
        AimdBacksOff, AimdGrows, AimdPace, AimdCuts, GateAdmits, PacingNo429, PacingFillsWindows,
        PacingLearnsWholeSeconds
    ];
    "check_model" => |r| model(Property::ModelLimiter, model::check_model(r)), [ModelLimiter];
    "check_model_advice" => |r| model(Property::ModelAdvice, model::check_model_advice(r)), [ModelAdvice];
    "check_advertised" => |r| model(Property::ModelRatelimit, model::check_advertised(r)), [ModelRatelimit];
    "check_idempotency" => |r| model(Property::ModelIdempotency, model::check_idempotency(r)), [ModelIdempotency];
    "check_script" => |r| model(Property::ModelScript, model::check_script(r)), [ModelScript];
    "check_concurrency" => |r| model(Property::ModelConcurrency, model::check_concurrency(r)), [ModelConcurrency];
    "check_run_times" => |r| model(Property::ModelRunTime, model::check_run_times(r)), [ModelRunTime];
    "check_polls" => |r| model(Property::ModelPolls, model::check_polls(r)), [ModelPolls];
    "check_credits" => |r| model(Property::ModelCredits, model::check_credits(r)), [ModelCredits];
    "check_lost_answers" => |r| model(Property::ModelLostAnswers, model::check_lost_answers(r)), [ModelLostAnswers];
    "check_keep_alive" => |r| model(Property::ModelKeepAlive, model::check_keep_alive(r)), [ModelKeepAlive];
    "check_close_races" => |r| model(Property::ModelCloseRaces, model::check_close_races(r)), [ModelCloseRaces];
    "check_careful" => careful::check_careful, [ThrottledRetried, ZeroAdviceSpread];
    "check_reasons" => reasons::check_reasons, [GiveUpReason, UnclearBound];
    "check_waits" => waits::check_waits, [WaitUpperBound, AdviceSpreadDrawn, BackoffFloor, WaitLowerBound];
    "check_spread" => spread::check_spread, [JitterSpread];
}

/// Every property of `r` the judges find, in [`PROPERTY_JUDGES`] order.
pub fn check_properties(r: &Report) -> Vec<FleetViolation> {
    PROPERTY_JUDGES.iter().flat_map(|j| (j.run)(r)).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_property_has_a_judge() {
        let mut reported = BTreeSet::new();
        for j in PROPERTY_JUDGES {
            reported.extend(j.reports.iter().copied());
        }
        let missing: Vec<&str> = Property::ALL.iter().filter(|p| !reported.contains(p)).map(|p| p.name()).collect();
        assert!(missing.is_empty(), "no judge reports {missing:?}: hunt::judge would never check them");
    }
}
