//! The deterministic simulation harness, in four parts:
//!
//! - [`world`]: what is simulated. The API and its limiters
//!   ([`world::api`]), the network and its faults ([`world::net`], and
//!   [`world::connector`] for foreign client stacks), the fleet of workers
//!   ([`world::fleet`]), the shared limiter service
//!   ([`world::limiter_service`]) and the deferral queue ([`world::deferral`]).
//! - [`run`]: running it. A [`run::scenario`] and a seed go in; the
//!   [`run::runner`] builds the world, steps it and gathers the report. Every
//!   random draw derives from the one master seed ([`run::seed`]). A job's
//!   life is [`run::job`]: the request, one run through the client under test
//!   (the [`run::subject`] boundary), the record. retrysim's own client and
//!   the seed documents' baselines are [`run::clients`]; deliberate defects
//!   for negative controls are [`run::defects`].
//! - [`checks`]: checking it. The numbered invariants from the trace
//!   ([`checks::invariants`]) and from the ledger alone
//!   ([`checks::blackbox`]), the fleet's properties ([`checks::fleet`]), and
//!   the seed hunt ([`checks::hunt`]).
//! - [`tools`]: on top. Policy comparisons ([`tools::compare`]), the ideal
//!   schedule ([`tools::oracle`]) and the review text ([`tools::render`]).
pub mod checks;
pub mod run;
pub mod serve;
pub mod tools;
pub mod world;
