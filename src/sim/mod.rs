//! The deterministic simulation harness's workings, crate-private: a user
//! reaches them through [`testing`](crate::testing), which re-exports by
//! name what a test names; the repository's own tests of the workings go
//! through the hidden `internals` door (docs/DESIGN.md, "The public API").
//!
//! The harness is in layers that each use only the ones before them
//! (docs/DESIGN.md, "Layout"; `tests/it/layers.rs` holds the code to it):
//!
//! - [`world`]: what is simulated. The API and its limiters
//!   ([`world::api`]), the network and its faults ([`world::net`], and
//!   [`world::connector`] for foreign client stacks), the shared limiter
//!   service ([`world::limiter_service`]), the ideal gate ([`world::oracle`])
//!   and the timers the runner watches ([`world::timers`]).
//! - [`run`]: running it. A [`run::scenario`] and a seed go in; the
//!   [`run::runner`] builds the world, steps it ([`run::advance`]) and
//!   gathers the report. Every random draw derives from the one master seed
//!   ([`run::seed`]). A job's life is [`run::job`]: the request, one run
//!   through the client under test (the [`run::subject`] boundary), the
//!   record; the fleet's hosts run jobs ([`run::fleet`], with
//!   [`run::deferral`]). retrysim's own client and the briefs'
//!   baselines are [`run::clients`]; deliberate defects for negative
//!   controls are [`run::defects`]; the report's review text is
//!   [`run::render`].
//! - [`checks`]: checking it. The numbered invariants from the trace
//!   ([`checks::invariants`]) and from the ledger alone
//!   ([`checks::blackbox`]), the fleet's properties ([`checks::fleet`]), and
//!   the seed hunt ([`checks::hunt`]).
//! - [`tools`] and [`serve`]: on top. Policy comparisons ([`tools::compare`]),
//!   timeline pictures ([`tools::timeline`]), and the API model on a real
//!   socket ([`serve`]).
pub mod checks;
pub mod run;
pub mod serve;
pub mod tools;
pub mod world;
