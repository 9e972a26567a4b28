//! **No part of the API, no semver promise.** The one door into the
//! simulator's workings (`sim`, crate-private) for this repository's own
//! tests, examples and benchmarks of how the harness works: negative
//! controls that plant defects, the hunt's generator and sabotage table,
//! the model's self-checks, the fleet checks one by one, the shard files,
//! the comparison presets. Each item is re-exported by name because one of
//! those files names it, under the path it has in `sim`; every file that
//! imports from here says why in its first lines. A test of your own client
//! needs only [`testing`](crate::testing).

pub mod checks {
    pub use crate::sim::checks::check_report;
    pub mod blackbox {
        pub use crate::sim::checks::blackbox::{
            BlackBoxCheck, BlackBoxViolation, Promises, check_black_box, check_black_box_with,
        };
    }
    pub mod careful {
        pub use crate::sim::checks::careful::check_careful;
    }
    pub mod fleet {
        pub use crate::sim::checks::fleet::{
            FleetViolation, aimd_backs_off, aimd_grows, api_within_gate_limit, budget_allowance, budget_refusal,
            check_fleet, deferred_charged_once, fallback_only_when_cut_off, fallback_within_local_limit, gate_order,
            gate_window, pacing_fills_windows, pacing_holds, pacing_learns_whole_seconds, pacing_spends_no_429,
            service_hears_outcomes, service_keeps_leases,
        };
    }
    pub mod hunt {
        pub use crate::sim::checks::hunt::{
            Catch, DEFECTS, DeterminismSample, HuntConfig, Kind, SeedResult, Target, catches, check_seed, hunt, judge,
            swarm,
        };
    }
    pub mod judges {
        pub use crate::sim::checks::judges::{Judge, PROPERTY_JUDGES};
    }
    pub mod invariants {
        pub use crate::sim::checks::invariants::{
            Invariant, Violation, check_determinism, check_liveness, check_run, liveness_expected,
        };
    }
    pub mod reasons {
        pub use crate::sim::checks::reasons::check_reasons;
    }
    pub mod registry {
        pub use crate::sim::checks::registry::{Check, Property};
    }
    #[cfg(feature = "cli")]
    pub mod shards {
        pub use crate::sim::checks::shards::MAX_SUMMARY_BYTES;
    }
    pub mod waits {
        pub use crate::sim::checks::waits::check_waits;
    }
}
pub mod run {
    pub mod clients {
        pub use crate::sim::run::clients::{Retrysim, ScenarioClient};
    }
    pub mod defects {
        pub use crate::sim::run::defects::{Defects, NAMES, describe};
    }
    pub mod fleet {
        pub use crate::sim::run::fleet::Hooks;
    }
    pub mod job {
        pub use crate::sim::run::job::{JobKind, job_of_label, kind_of, request};
    }
    pub mod keys {
        pub use crate::sim::run::keys::{Allowed, KEYS, Key, markdown};
    }
    pub mod render {
        pub use crate::sim::run::render::{DEFAULT_JOBS, Show, render_run, trace_json};
    }
    pub mod runner {
        pub use crate::sim::run::runner::{
            JobOutcome, JobRecord, PLANTED_SECRETS, Report, RunError, RunOptions, StepCounts, Traces, run,
        };
    }
    pub mod scenario {
        pub use crate::sim::run::scenario::{
            BudgetConfig, Builtin, ClientConfig, Fleet, GateConfig, HALF_SECOND_PHASE_MS, Hosts, NAMES, Scenario,
            berlin, blinkimg_1s, named, retry_after_jitter,
        };
    }
}
pub mod serve {
    pub use crate::sim::serve::{Limits, ServeError, ServeOptions, ServeReport, Served};
}
pub mod tools {
    pub mod compare {
        pub use crate::sim::tools::compare::{
            Comparison, Figure, HABITS, PRESETS, Preset, RowSummary, blinkimg_1s, blinkimg_60s, default_threads,
            habits, preset, replay, run, with_habit,
        };
    }
    pub mod timeline {
        pub use crate::sim::tools::timeline::{MAX_LANES, Mark, Timeline};
    }
}
pub mod world {
    pub mod api {
        pub use crate::sim::world::api::{
            AdviceForm, ApiConfig, Arrival, ArrivalOutcome, Dialect, LimiterKind, RateLimitFields, RateLimitedBody,
            ResetForm, RetryAfterRounding, ScriptStep,
        };
    }
    pub mod limiter_service {
        pub use crate::sim::world::limiter_service::{Hello, Route, Told};
    }
    pub mod net {
        pub use crate::sim::world::net::{CloseTiming, Fault, FaultClass, ScheduledFault, SimTransport};
    }
}
