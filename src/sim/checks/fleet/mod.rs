//! Checkers for the fleet controls, one file for what each judges: the
//! pacing gate (`pacing.rs`), an AIMD gate and its rules (`aimd.rs`), the
//! shared retry budget (`budget.rs`), the concurrency gate (`gate.rs`), the
//! limiter service (`coordinator.rs`), the workers' fallback (`fallback.rs`)
//! and deferral (`deferral.rs`). Like `sim::checks::invariants`, they read
//! only what a run left behind: the jobs' traces, the server's ledger, and
//! the facts the gates recorded. The gates and budgets never check
//! themselves. Each property is an entry of
//! [`registry`](crate::sim::checks::registry).
//!
//! | property | from |
//! |---|---|
//! | retries stay within the shared budget's allowance | traces (`wait` = a granted retry, `done` = a deposit) |
//! | a budget refuses a retry only when it may be spent | traces (`wait`, and `gave up` for an exhausted budget) |
//! | admissions leave the gate in FIFO order, never above the window | the gate's facts |
//! | requests running at the API never exceed the gate's limit | the ledger, against the gate's limit over time |
//! | partitioned from the limiter, no worker exceeds its fallback limit | the ledger and the route switches |
//! | a deferred job is charged exactly once, under its one key | the ledger and the traces |
//! | the interactive path never waits past its budget | the traces |
//! | an AIMD gate backs off on a 429 after its guard (budgeted efficiency) | traces and the gate's facts |
//! | the limiter service's AIMD gate grows on successes told on a window half used (efficiency), and no AIMD gate by more than a slot a success | the service's record and the gate's facts |
//! | an AIMD gate spaces admissions by its rate, which only a throttle switches on and moves within its config's steps | the gate's facts |
//! | an AIMD gate counts its attempts out, cuts once per window of attempts, by `β` | the gate's facts |
//! | an AIMD gate admits its first ticket the instant it queues, and its queue's head whenever the window has room and the pace allows | the gate's facts |
//! | a pacing gate reading rate-limit headers lets no 429 through after two windows, nor one its attempts in flight counted | the ledger and the traces |
//! | nor holds an attempt through a window it left half unused | the ledger and the traces |
//! | nor, against whole-second headers, past a window's end by more than the second it probes | the ledger and the traces |
//! | a refusal's `Retry-After` holds the whole fleet at a shared pacing gate | the traces |

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::core::budget::TokenBucketBudget;
use crate::core::classify::Class;
use crate::core::policy::GiveUpReason;
use crate::gate::aimd::{GateEvent, GateFact};
use crate::sim::run::deferral::deferrable;
use crate::sim::run::runner::{JobOutcome, JobRecord, Report};
use crate::sim::run::scenario::{BudgetConfig, GateConfig, Hosts};
use crate::sim::world::api::Arrival;
use crate::sim::world::faults::Link;
use crate::sim::world::limiter_service::{Hello, Route};
use crate::sim::world::net::Fault;
use crate::trace::EventKind;

pub use crate::sim::checks::registry::FleetViolation;
pub use aimd::{aimd_backs_off, aimd_cuts, aimd_grows, aimd_paces, gate_admits};
pub use budget::{budget_allowance, budget_refusal};
pub use coordinator::{service_hears_outcomes, service_keeps_leases};
pub use deferral::deferred_charged_once;
pub use fallback::{fallback_only_when_cut_off, fallback_within_local_limit};
pub use gate::{api_within_gate_limit, gate_order, gate_window};
pub use pacing::{pacing_fills_windows, pacing_holds, pacing_learns_whole_seconds, pacing_spends_no_429};

mod aimd;
mod budget;
mod coordinator;
mod deferral;
mod fallback;
mod gate;
mod pacing;
#[cfg(test)]
mod tests;

use crate::sim::checks::registry::Property;
use aimd::*;
use gate::*;
use pacing::*;

fn v(check: Property, message: String) -> FleetViolation {
    FleetViolation { check, message }
}

/// Every fleet checker that applies to this run's configuration.
pub fn check_fleet(r: &Report) -> Vec<FleetViolation> {
    let mut out = budget_allowance(r);
    out.extend(budget_refusal(r));
    out.extend(gate_window(r));
    out.extend(gate_order(r));
    out.extend(pacing_holds(r));
    out.extend(api_within_gate_limit(r));
    out.extend(fallback_within_local_limit(r));
    out.extend(fallback_only_when_cut_off(r));
    out.extend(service_hears_outcomes(r));
    out.extend(service_keeps_leases(r));
    out.extend(deferred_charged_once(r));
    out.extend(aimd_backs_off(r));
    out.extend(aimd_grows(r));
    out.extend(aimd_paces(r));
    out.extend(aimd_cuts(r));
    out.extend(gate_admits(r));
    out.extend(pacing_spends_no_429(r));
    out.extend(pacing_fills_windows(r));
    out.extend(pacing_learns_whole_seconds(r));
    out
}
