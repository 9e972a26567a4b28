//! Checking runs: every check is an entry of [`registry`] (its id, what it
//! reads, whom it blames, its negative control). The invariants from the
//! trace ([`invariants`]) and from the ledger alone ([`blackbox`]), both at
//! once for one report ([`check_report`]); the properties of the fleet's
//! controls ([`fleet`]), the model ([`model`]), a too-careful client
//! ([`careful`]), give-up reasons ([`reasons`]), waits ([`waits`]) and their spread
//! ([`spread`]); and
//! the hunt over seeds ([`hunt`]).
pub mod blackbox;
pub mod careful;
pub mod fleet;
pub mod hunt;
pub mod invariants;
pub mod judges;
pub mod model;
pub mod reasons;
pub mod registry;
#[cfg(feature = "cli")]
pub mod shards;
pub mod spread;
#[cfg(feature = "proptest")]
pub mod strategies;
pub mod waits;

use crate::sim::checks::blackbox::black_box;
use crate::sim::checks::invariants::{Violation, cancel_ends_job, check_liveness, check_run, liveness_expected};
use crate::sim::run::runner::Report;

/// The numbered invariants' checks that apply to one run, as
/// [`Violation`]s (the properties are `judges::check_properties`'s;
/// `hunt::judge` runs both):
/// the black-box checks (`blackbox`) with what the client promised (a
/// deferred job's background runs with the background policy's), and,
/// when the client wrote retrysim's trace ([`Report::traced`]), the
/// trace-based checks of [`check_run`] and liveness where the scenario
/// expects it. Determinism (8) needs a second run: see
/// [`check_determinism`](invariants::check_determinism).
pub fn check_report(r: &Report) -> Vec<Violation> {
    let mut out = Vec::new();
    if r.traced {
        out.extend(check_run(r));
        if liveness_expected(&r.scenario_config).is_ok() {
            out.extend(check_liveness(r));
        }
    }
    out.extend(black_box(r).into_iter().map(Violation::from));
    cancel_ends_job(r, &mut out);
    out
}
