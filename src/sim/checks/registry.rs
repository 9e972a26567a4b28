//! Every check in one registry: its id ([`Check`]), what it reads
//! ([`Source`]), whom a finding blames ([`Blame`]), and its negative control
//! ([`Control`]: the deliberate defect, or the test, that must trip it).
//!
//! A check is one of three kinds, each with the id its findings carry:
//!
//! - a numbered **invariant** ([`Invariant`], found as a [`Violation`]),
//!   read from retrysim's trace beside the ledger, or from two runs;
//! - a **black-box** check ([`BlackBoxCheck`], found as a
//!   [`BlackBoxViolation`]), the ledger-only form of an invariant, for any
//!   client;
//! - an unnumbered **property** ([`Property`], found as a
//!   [`FleetViolation`]): the fleet controls' checks, the model's
//!   self-check, the too-careful checks, the give-up reasons and the bounds
//!   on waits.
//!
//! [`Check::all`] lists every one; `markdown_table` (test builds) renders them for
//! docs/DESIGN.md (a test keeps the document's table equal to it), and
//! [`PROPERTY_JUDGES`](crate::sim::checks::judges::PROPERTY_JUDGES) is the
//! list of checkers `hunt::judge` runs. Adding a property is one line in
//! the `properties!` list below (its id, name, statement, sources, blame
//! and control), its checker, and the checker's line in `PROPERTY_JUDGES`
//! naming what it reports.

use std::fmt;

use crate::sim::checks::blackbox::{BlackBoxCheck, BlackBoxViolation};
use crate::sim::checks::invariants::{Invariant, Violation};

/// What a check reads of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// retrysim's trace of each job: what the client read, planned and sent.
    Traces,
    /// The server's ledger: every arrival, its answer and what it charged.
    Ledger,
    /// Each run of a job as the harness saw it: start, end, outcome.
    Jobs,
    /// The facts the fleet's gates recorded (admissions, limits, rates).
    GateFacts,
    /// The limiter service's record and the workers' route switches.
    Service,
    /// The network's connections, close races and the fault schedule.
    Network,
    /// A second run of the same seed.
    SecondRun,
}

impl Source {
    /// The source's name in the registry's table.
    pub fn name(self) -> &'static str {
        match self {
            Source::Traces => "traces",
            Source::Ledger => "ledger",
            Source::Jobs => "jobs",
            Source::GateFacts => "gate facts",
            Source::Service => "limiter service",
            Source::Network => "network",
            Source::SecondRun => "a second run",
        }
    }
}

/// Whom a finding blames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Blame {
    /// The client under test, with its gates and budgets.
    Client,
    /// The simulated API (the model's self-check).
    Model,
    /// The simulated limiter service the fleet's workers share.
    Service,
}

impl Blame {
    /// The side's name in the registry's table.
    pub fn name(self) -> &'static str {
        match self {
            Blame::Client => "client",
            Blame::Model => "model",
            Blame::Service => "limiter service",
        }
    }
}

/// The negative control that shows a check can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Control {
    /// A deliberate defect (`retrysim hunt --sabotage NAME`, one of
    /// [`defects::NAMES`](crate::sim::run::defects::NAMES)) the default hunt
    /// catches by this check (docs/guide/hunting.md's sabotage table).
    Defect(&'static str),
    /// A test that breaks the rule on purpose and expects this check to
    /// find it: the file and the test function's name.
    Test(&'static str, &'static str),
}

impl fmt::Display for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Control::Defect(d) => write!(f, "`--sabotage {d}`"),
            Control::Test(path, name) => write!(f, "`{path}` `{name}`"),
        }
    }
}

/// Defines [`Property`] from one list: each property once, with its name,
/// its statement, what it reads, whom it blames and its negative control.
macro_rules! properties {
    ($($id:ident = $name:literal, $statement:literal, [$($source:ident),+], $blame:ident, $control:expr;)*) => {
        /// An unnumbered check: a fleet control's property, the model's
        /// self-check, a too-careful check, a give-up reason or a bound on
        /// waits. Its findings are [`FleetViolation`]s.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Property {
            $(#[doc = $statement] $id,)*
        }

        impl Property {
            /// Every property, in the registry's order.
            pub const ALL: &'static [Property] = &[$(Property::$id,)*];

            /// The name findings print (`budget-allowance`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Property::$id => $name,)*
                }
            }

            fn entry(self) -> Entry {
                match self {
                    $(Property::$id => Entry {
                        check: Check::Property(self),
                        statement: $statement,
                        reads: &[$(Source::$source),+],
                        blames: Blame::$blame,
                        control: $control,
                    },)*
                }
            }
        }
    };
}

const FLEET_TESTS: &str = "tests/it/fleet.rs";
const MODEL_TESTS: &str = "src/sim/checks/model/tests.rs";
const AIMD_TESTS: &str = "src/sim/checks/fleet/aimd.rs";

properties! {
    BudgetAllowance = "budget-allowance", "Retries stay within the shared budget's allowance.",
        [Traces], Client, Control::Defect("budget-refunds-too-much");
    BudgetRefusal = "budget-refusal", "A budget refuses a retry only when it may be spent.",
        [Traces], Client, Control::Defect("budget-charged-twice");
    GateWindow = "gate-window", "Admissions never run above the gate's window.",
        [GateFacts], Client, Control::Test(FLEET_TESTS, "generated_fleets_keep_in_flight_within_the_window");
    GateFifo = "gate-fifo", "Admissions leave the gate in the order they queued.",
        [GateFacts], Client,
        Control::Test(FLEET_TESTS, "the_pacing_gate_admits_in_the_order_attempts_queued_and_one_that_lets_a_later_one_pass_is_caught");
    PacingHold = "pacing-hold", "A refusal's `Retry-After` holds the whole fleet at a shared pacing gate.",
        [Traces], Client, Control::Defect("pacing-ignores-retry-after");
    ApiWithinGateLimit = "api-within-gate-limit", "Requests running at the API never exceed the gate's limit.",
        [Ledger, GateFacts], Client, Control::Test(FLEET_TESTS, "negative_control_a_leaky_gate_is_caught_by_the_ledger");
    FallbackLimit = "fallback-limit", "Partitioned from the limiter, no worker exceeds its fallback limit.",
        [Ledger, Service], Client, Control::Test(FLEET_TESTS, "negative_control_a_worker_that_ignores_its_fallback_limit_is_caught");
    FallbackOnlyWhenCutOff = "fallback-only-when-cut-off", "Workers fall back only while the limiter service is cut off.",
        [Service, Network], Client,
        Control::Test(FLEET_TESTS, "workers_fall_back_only_while_the_limiter_service_is_cut_off_and_a_fallback_without_a_cause_is_caught");
    ServiceHearsOutcomes = "service-hears-outcomes", "The limiter service hears each attempt as its worker read it.",
        [Traces, Service], Client,
        Control::Test(FLEET_TESTS, "the_limiter_service_hears_each_attempt_as_its_worker_read_it_and_a_garbled_or_missing_report_is_caught");
    ServiceKeepsLeases = "service-keeps-leases", "The limiter service frees every slot it granted within its lease.",
        [Service], Service,
        Control::Test(FLEET_TESTS, "the_limiter_service_frees_every_slot_within_its_lease_and_a_leaked_one_is_caught");
    DeferredOnce = "deferred-once", "A deferred job is charged exactly once, under its one key.",
        [Ledger, Traces], Client, Control::Defect("deferral-drops-jobs");
    InteractiveBudget = "interactive-budget", "The interactive path never waits past its budget.",
        [Traces], Client, Control::Defect("ignore-deadline");
    AimdBacksOff = "aimd-backs-off", "An AIMD gate backs off on a 429 after its guard.",
        [Traces, GateFacts], Client, Control::Defect("aimd-ignores-429");
    AimdGrows = "aimd-grows", "An AIMD gate grows on successes told on a window half used, by at most a slot a success.",
        [Service, GateFacts], Client, Control::Defect("aimd-never-grows");
    AimdPace = "aimd-pace", "An AIMD gate spaces admissions by its rate, which only a throttle switches on.",
        [GateFacts], Client, Control::Defect("aimd-pacing-off");
    AimdCuts = "aimd-cuts", "An AIMD gate counts its attempts out and cuts once per window of attempts, by beta.",
        [GateFacts], Client, Control::Test(AIMD_TESTS, "aimd_cuts_passes_the_controller_and_catches_each_rule_broken");
    GateAdmits = "gate-admits", "An AIMD gate admits its first ticket at once, and its head whenever room and pace allow.",
        [GateFacts], Client, Control::Test("src/sim/checks/fleet/tests.rs", "a_gate_that_holds_its_first_ticket_is_caught");
    PacingNo429 = "pacing-no-429",
        "A pacing gate reading rate-limit headers lets no 429 through after two windows, nor one its attempts in flight counted.",
        [Ledger, Traces], Client, Control::Defect("pacing-ignores-reset");
    PacingFillsWindows = "pacing-fills-windows", "A pacing gate holds no attempt through a window it left half unused.",
        [Ledger, Traces], Client,
        Control::Test(FLEET_TESTS, "a_pacing_gate_that_leaves_a_window_half_unused_while_an_attempt_waits_through_it_is_caught");
    PacingLearnsWholeSeconds = "pacing-learns-whole-seconds",
        "Against whole-second headers, a pacing gate holds past a window's end by no more than the second it probes.",
        [Ledger, Traces], Client, Control::Defect("pacing-trusts-rounded-reset");
    ModelLimiter = "model-limiter", "The API's limiter gives the verdicts a reference limiter of its kind gives.",
        [Ledger], Model, Control::Defect("window-admits-one-more");
    ModelAdvice = "model-advice", "Each refusal advises the wait the reference limiter gives.",
        [Ledger], Model, Control::Defect("advice-rounds-down");
    ModelRatelimit = "model-ratelimit", "Each answer tells the `RateLimit-*` standing the reference gives.",
        [Ledger], Model, Control::Test(MODEL_TESTS, "every_advertised_standing_is_the_references_and_a_slip_is_seen");
    ModelIdempotency = "model-idempotency", "The idempotency store does with each keyed request what a reference map does.",
        [Ledger], Model, Control::Defect("store-forgets-answers");
    ModelScript = "model-script", "The scripted answers are served as the scenario declares.",
        [Ledger], Model, Control::Test(MODEL_TESTS, "the_script_is_served_as_declared_and_a_slip_is_seen");
    ModelConcurrency = "model-concurrency", "The concurrency cap is kept, and refuses only at its number.",
        [Ledger], Model, Control::Test(MODEL_TESTS, "the_concurrency_cap_is_kept_and_a_refusal_under_it_is_seen");
    ModelRunTime = "model-run-time", "Every run takes the scenario's processing time.",
        [Ledger], Model, Control::Test(MODEL_TESTS, "every_run_takes_the_scenarios_processing_time_and_a_slip_is_seen");
    ModelPolls = "model-polls", "Polls find the jobs the API created.",
        [Ledger], Model, Control::Test(MODEL_TESTS, "polls_find_the_jobs_created_and_a_lost_or_invented_job_is_seen");
    ModelCredits = "model-credits", "Credits are taken at the published prices, and each refusal for credits or quota is earned.",
        [Ledger], Model, Control::Test(MODEL_TESTS, "each_refusal_for_credits_or_quota_is_one_the_account_earned");
    ModelLostAnswers = "model-lost-answers", "The answers lost are the ones the seed and the fault schedule lose.",
        [Ledger, Network], Model, Control::Test(MODEL_TESTS, "the_answers_lost_are_the_ones_the_seed_and_the_schedule_lose");
    ModelKeepAlive = "model-keep-alive", "Connections close as the keep-alive settings say.",
        [Network], Model, Control::Test(MODEL_TESTS, "connections_close_as_the_keep_alive_settings_say");
    ModelCloseRaces = "model-close-races", "Close races strike only the next request on an idle reused connection.",
        [Network], Model, Control::Test(MODEL_TESTS, "close_races_strike_only_the_next_request_on_an_idle_reused_connection");
    ThrottledRetried = "throttled-retried", "A throttled answer with valid advice, inside the declared policy, is retried.",
        [Traces, Ledger], Client, Control::Defect("throttled-as-unclear");
    ZeroAdviceSpread = "zero-advice-spread", "A zero advice is never retried at once when the declared spread is on.",
        [Traces], Client, Control::Defect("spread-off");
    GiveUpReason = "give-up-reason", "A job gives up for the reason its answers give.",
        [Traces, Ledger], Client, Control::Defect("transient-as-terminal");
    UnclearBound = "unclear-bound", "Unclear 429s are retried no more often than the declared policy allows.",
        [Traces, Ledger], Client,
        Control::Test("tests/it/reasons.rs", "unclear_429s_retried_as_throttled_break_the_unclear_bound");
    WaitUpperBound = "wait-upper-bound", "A planned wait is at most the longest the declared policy may plan there.",
        [Traces], Client, Control::Defect("wait-doubled");
    AdviceSpreadDrawn = "advice-spread-drawn", "The spread on an advice is drawn, up to its cap.",
        [Traces], Client, Control::Defect("spread-not-drawn");
    BackoffFloor = "backoff-floor", "A wait on the backoff alone is at least the declared jitter's shortest draw.",
        [Traces], Client, Control::Defect("jitter-full");
    WaitLowerBound = "wait-lower-bound", "A wait after an advice is at least the shortest the declared policy plans there.",
        [Traces], Client, Control::Defect("escalation-skipped");
    JitterSpread = "jitter-spread", "A fleet's waits are spread as the declared jitter draws them.",
        [Traces], Client, Control::Defect("jitter-same-draw");
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken property ([`Property`]): a fleet control's, the model's, a
/// too-careful check's, a give-up reason's or a bound on waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetViolation {
    /// The property that broke.
    pub check: Property,
    /// What broke it, with the numbers that show it.
    pub message: String,
}

impl fmt::Display for FleetViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.check, self.message)
    }
}

/// Any check's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Check {
    /// A numbered invariant.
    Invariant(Invariant),
    /// The ledger-only form of an invariant.
    BlackBox(BlackBoxCheck),
    /// An unnumbered property.
    Property(Property),
}

impl From<Invariant> for Check {
    fn from(i: Invariant) -> Check {
        Check::Invariant(i)
    }
}

impl From<BlackBoxCheck> for Check {
    fn from(b: BlackBoxCheck) -> Check {
        Check::BlackBox(b)
    }
}

impl From<Property> for Check {
    fn from(p: Property) -> Check {
        Check::Property(p)
    }
}

impl Violation {
    /// The check that broke.
    pub fn check(&self) -> Check {
        Check::Invariant(self.invariant)
    }
}

impl BlackBoxViolation {
    /// The check that broke, as the registry names it.
    pub fn id(&self) -> Check {
        Check::BlackBox(self.check)
    }
}

impl FleetViolation {
    /// The check that broke, as the registry names it.
    pub fn id(&self) -> Check {
        Check::Property(self.check)
    }
}

/// One check's entry in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its id.
    pub check: Check,
    /// What it holds, in one sentence.
    pub statement: &'static str,
    /// What it reads of a run.
    pub reads: &'static [Source],
    /// Whom its findings blame.
    pub blames: Blame,
    /// What must trip it.
    pub control: Control,
}

const NEGATIVE: &str = "tests/it/negative_controls.rs";

impl Check {
    /// Every check: the invariants in number order, the black-box checks,
    /// then the properties.
    pub fn all() -> impl Iterator<Item = Check> {
        let invariants = Invariant::ALL.into_iter().map(Check::Invariant);
        let black_box = BlackBoxCheck::ALL.into_iter().map(Check::BlackBox);
        invariants.chain(black_box).chain(Property::ALL.iter().copied().map(Check::Property))
    }

    /// Its name: the invariant's, the black-box check's or the property's.
    pub fn name(self) -> &'static str {
        match self {
            Check::Invariant(i) => i.name(),
            Check::BlackBox(b) => b.name(),
            Check::Property(p) => p.name(),
        }
    }

    /// The name a hunt's finding prints for it: a black-box check is
    /// reported as the invariant it is the ledger form of.
    pub fn finding(self) -> &'static str {
        match self {
            Check::BlackBox(b) => b.invariant().name(),
            other => other.name(),
        }
    }

    /// The number docs/DESIGN.md gives it: an invariant's own, a black-box
    /// check's invariant's, none for a property.
    pub fn number(self) -> Option<u8> {
        match self {
            Check::Invariant(i) => Some(i.number()),
            Check::BlackBox(b) => Some(b.invariant().number()),
            Check::Property(_) => None,
        }
    }

    /// Its entry in the registry.
    pub fn entry(self) -> Entry {
        match self {
            Check::Invariant(i) => invariant_entry(i),
            Check::BlackBox(b) => black_box_entry(b),
            Check::Property(p) => p.entry(),
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Check::BlackBox(b) => write!(f, "black-box {b}"),
            other => f.write_str(other.name()),
        }
    }
}

fn invariant_entry(i: Invariant) -> Entry {
    use Control::{Defect, Test};
    use Source::{Jobs, Ledger, SecondRun, Traces};
    let (statement, reads, control): (&'static str, &'static [Source], Control) = match i {
        Invariant::Deadline => (
            "No sleep ends, and no attempt starts, past the deadline's last useful moment.",
            &[Traces],
            Defect("ignore-deadline"),
        ),
        Invariant::AttemptBound => {
            ("Attempts ≤ N+1; exactly N+1 when attempts ran out.", &[Traces], Defect("extra-attempt"))
        }
        Invariant::OneChargePerKey => {
            ("One charge per idempotency key.", &[Traces, Ledger], Defect("fresh-key-each-attempt"))
        }
        Invariant::AdviceRespected => {
            ("No retry earlier than the advised wait.", &[Traces, Ledger], Defect("ignore-retry-after"))
        }
        Invariant::NoUnsafeRetry => (
            "Nothing retried after a terminal answer; no unsafe replay after an ambiguous failure.",
            &[Traces, Ledger],
            Defect("retry-terminal"),
        ),
        Invariant::OneKeyPerOperation => (
            "One key per logical operation, reused on every attempt.",
            &[Traces, Ledger],
            Defect("fresh-key-each-attempt"),
        ),
        Invariant::TooLongGivesUpAtOnce => {
            ("A too-long advice gives up with zero sleep.", &[Traces, Ledger], Defect("ignore-deadline"))
        }
        Invariant::Determinism => (
            "The same seed gives a byte-identical trace, report and ledger.",
            &[SecondRun],
            Test(NEGATIVE, "different_runs_break_determinism"),
        ),
        Invariant::NoSecrets => (
            "No secret in any trace or report.",
            &[Traces, Jobs],
            Test(NEGATIVE, "a_secret_in_a_trace_breaks_no_secrets"),
        ),
        Invariant::Liveness => (
            "With faults healed and an ample budget, every job completes.",
            &[Jobs],
            Test(NEGATIVE, "jobs_that_give_up_break_liveness"),
        ),
        Invariant::FleetBudget => {
            ("Retries stay within the shared retry budget.", &[Traces], Defect("budget-refunds-too-much"))
        }
        Invariant::ClientReturns => (
            "The client under test returns from every job: it does not panic.",
            &[Jobs],
            Test("tests/it/foreign.rs", "a_panicking_client_is_a_violation_with_a_replay_line_not_a_crash"),
        ),
        Invariant::CancelEndsJob => {
            ("A job its caller cancels ends within one clock step.", &[Jobs, Source::Network], Defect("ignore-cancel"))
        }
    };
    Entry { check: Check::Invariant(i), statement, reads, blames: Blame::Client, control }
}

fn black_box_entry(b: BlackBoxCheck) -> Entry {
    use Source::{Jobs, Ledger};
    let (statement, reads): (&'static str, &'static [Source]) = match b {
        BlackBoxCheck::OneChargePerKey => {
            ("No idempotency key charged twice; no keyed job charged under two keys.", &[Ledger])
        }
        BlackBoxCheck::OneKeyPerJob => ("One job's requests carry one idempotency key.", &[Ledger]),
        BlackBoxCheck::AttemptBound => {
            ("No more requests in one run of a job than the attempts promised.", &[Ledger, Jobs])
        }
        BlackBoxCheck::EarlyRetry => {
            ("No request before the advice of the job's last received answer passed.", &[Ledger, Jobs])
        }
        BlackBoxCheck::AfterTerminal => ("No request after a terminal answer to the same job.", &[Ledger, Jobs]),
        BlackBoxCheck::Deadline => ("No run ends, or sends a request, past its deadline.", &[Ledger, Jobs]),
        BlackBoxCheck::UnkeyedReplay => {
            ("No unkeyed POST sent again after its answer was lost or never came.", &[Ledger, Jobs])
        }
        BlackBoxCheck::NoSecrets => ("No planted secret in what the client reported.", &[Jobs]),
        BlackBoxCheck::ClientPanicked => ("The client does not panic in a job.", &[Jobs]),
    };
    // One test slips each rule in turn in a hand-written loop and expects its check.
    let control = Control::Test("tests/it/foreign.rs", "each_slip_is_caught_by_its_black_box_check");
    Entry { check: Check::BlackBox(b), statement, reads, blames: Blame::Client, control }
}

/// The registry as a Markdown table, one row per check, for
/// docs/DESIGN.md "Invariants".
#[cfg(test)]
pub fn markdown_table() -> String {
    let mut t = String::from("| check | # | reads | blames | negative control |\n|---|---:|---|---|---|\n");
    for c in Check::all() {
        let e = c.entry();
        let number = c.number().map_or(String::new(), |n| n.to_string());
        let reads: Vec<&str> = e.reads.iter().map(|s| s.name()).collect();
        let id = match c {
            Check::BlackBox(b) => format!("black-box `{b}`"),
            other => format!("`{}`", other.name()),
        };
        t.push_str(&format!("| {id} | {number} | {} | {} | {} |\n", reads.join(", "), e.blames.name(), e.control));
    }
    t
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
