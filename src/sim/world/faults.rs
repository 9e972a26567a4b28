//! Faults, each kind in one home: what it is ([`Fault`], as scenario files
//! spell it), how the hunt draws its numbers ([`draw_network_fault`] and the
//! draws beside it), what it does to the simulated world when it starts and
//! heals ([`Fault::switches`], carried out by the runner), how a timeline labels
//! it ([`FaultKind::label`]), whether `retrysim serve` applies it
//! ([`FaultKind::served`], [`Fault::message_delay`]), which transport faults
//! a client sees ([`FaultClass::of_fault`]) and whether it excuses an answer
//! that came late or never ([`Fault::may_cut_answer`]).
//!
//! Each of these is an exhaustive `match`: adding a [`Fault`] variant fails
//! to compile here until every one says what the new kind does, and nowhere
//! else but where a new [`Switch`] (a new way to break the world) must be
//! carried out. Tests: this module's own, `generator_coverage` (the default
//! hunt draws every [`FaultKind`]) and `strategies` (`arb_fault` draws every
//! kind that needs nothing of the scenario).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::duration_text;

/// A fault at a scheduled virtual time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// The next answer the API produces after `at` is lost after the handler
    /// ran (and charged): the connection is cut before the answer leaves.
    LoseAnswer,
    /// Every message takes up to `latency` until `until`: the simulation's
    /// largest latency, on every link (a limiter service's too).
    LatencySpike {
        /// What each message takes meanwhile.
        #[serde(with = "duration_text")]
        latency: Duration,
        /// When it heals, in virtual time since the run began.
        #[serde(with = "duration_text")]
        until: Duration,
    },
    /// The fleet and the API cannot reach each other until `until`.
    Partition {
        /// When it heals, in virtual time since the run began.
        #[serde(with = "duration_text")]
        until: Duration,
    },
    /// Messages between the fleet and the API are held (not lost) until `until`.
    Hold {
        /// When it heals, in virtual time since the run began.
        #[serde(with = "duration_text")]
        until: Duration,
    },
    /// The API process restarts: open connections break, idle pooled ones
    /// too (the next request on one meets a reset); its state (the limiter,
    /// the idempotency store) lives on, as a real database would.
    Bounce,
    /// A keep-alive connection closing just as a client reuses it (the
    /// server's idle timeout racing the client's next request), in one of
    /// its three timings.
    CloseRace {
        /// When the close reaches the client, against its next write.
        timing: CloseTiming,
    },
    /// The fleet's workers cannot reach the limiter service (per-worker
    /// hosts with a coordinator) until `until`; the API stays reachable.
    LimiterPartition {
        /// When it heals, in virtual time since the run began.
        #[serde(with = "duration_text")]
        until: Duration,
    },
    /// The fleet's caller cancels every front-end job running at `at` (a
    /// user who closed the page, a deploy draining its workers). Each must
    /// end within one clock step, whether it was waiting to retry, queued
    /// at a gate or waiting for an answer (invariant 13).
    Cancel,
    /// A regional outage: the fleet reaches neither the API nor the limiter
    /// service until `until` (the zone or region both run in loses its
    /// network, as AWS us-east-1 did on 2021-12-07), then both come back at
    /// once. Neither partition alone does this to retry code: cut off from
    /// the service only, a worker's fallback gate paces requests the API
    /// answers; cut off from the API only, the service's gate still paces
    /// them. Here every worker falls back just as its attempts fail too, so
    /// its fallback gate must hold slots for attempts that never get an
    /// answer, and at the heal every worker dials the service again while
    /// the retries that waited out the outage come due together: the gate's
    /// limit and the service's leases meet the herd the outage gathered.
    /// Needs the limiter service (a fleet without it sees a partition).
    RegionalOutage {
        /// When it heals, in virtual time since the run began.
        #[serde(with = "duration_text")]
        until: Duration,
    },
}

impl Fault {
    /// When the fault heals, for faults that last.
    pub fn until(&self) -> Option<Duration> {
        match self {
            Fault::LatencySpike { until, .. }
            | Fault::Partition { until }
            | Fault::Hold { until }
            | Fault::LimiterPartition { until }
            | Fault::RegionalOutage { until } => Some(*until),
            Fault::LoseAnswer | Fault::Bounce | Fault::Cancel | Fault::CloseRace { .. } => None,
        }
    }

    /// The fault's kind, without its numbers.
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::LoseAnswer => FaultKind::LoseAnswer,
            Fault::LatencySpike { .. } => FaultKind::LatencySpike,
            Fault::Partition { .. } => FaultKind::Partition,
            Fault::Hold { .. } => FaultKind::Hold,
            Fault::Bounce => FaultKind::Bounce,
            Fault::CloseRace { .. } => FaultKind::CloseRace,
            Fault::LimiterPartition { .. } => FaultKind::LimiterPartition,
            Fault::Cancel => FaultKind::Cancel,
            Fault::RegionalOutage { .. } => FaultKind::RegionalOutage,
        }
    }

    /// What the simulated world does when the fault starts (`start`) or
    /// heals, in order: the runner carries each out (`sim::run::runner`).
    /// A kind that breaks the world in several ways at once (several
    /// links) lists each [`Switch`].
    pub(crate) fn switches(&self, start: bool) -> Vec<Switch> {
        let one = match self {
            Fault::LoseAnswer => Switch::LoseNextAnswer,
            Fault::LatencySpike { latency, .. } => Switch::MaxLatency(start.then_some(*latency)),
            Fault::Partition { .. } => Switch::Cut { link: Link::Api, on: start },
            Fault::Hold { .. } => Switch::Hold { link: Link::Api, on: start },
            Fault::Bounce => Switch::Bounce,
            Fault::CloseRace { timing } => Switch::CloseRace(*timing),
            Fault::LimiterPartition { .. } => Switch::Cut { link: Link::Limiter, on: start },
            Fault::Cancel => Switch::CancelRunning,
            Fault::RegionalOutage { .. } => {
                return vec![
                    Switch::Cut { link: Link::Api, on: start },
                    Switch::Cut { link: Link::Limiter, on: start },
                ];
            }
        };
        vec![one]
    }

    /// Until when this fault cuts `link` (messages on it lost), if it
    /// does: read from its [`switches`](Fault::switches), so the checks
    /// that ask which faults cut the fleet off from the limiter service
    /// (`checks::fleet`) learn of a new kind that does without an edit.
    pub(crate) fn cuts(&self, link: Link) -> Option<Duration> {
        let cut = self.switches(true).contains(&Switch::Cut { link, on: true });
        cut.then(|| self.until()).flatten()
    }

    /// How long this fault, started at `at`, holds a message sent at `now`
    /// between the fleet and the API (zero when it does not): what
    /// `retrysim serve` waits before it answers.
    pub(crate) fn message_delay(&self, at: Duration, now: Duration) -> Duration {
        match *self {
            Fault::Hold { until } if at <= now && now < until => until - now,
            Fault::LatencySpike { latency, until } if at <= now && now < until => latency,
            Fault::Hold { .. } | Fault::LatencySpike { .. } => Duration::ZERO,
            Fault::LoseAnswer
            | Fault::Partition { .. }
            | Fault::Bounce
            | Fault::CloseRace { .. }
            | Fault::LimiterPartition { .. }
            | Fault::Cancel
            | Fault::RegionalOutage { .. } => Duration::ZERO,
        }
    }

    /// Whether this fault, started at `from`, may have held, slowed or
    /// dropped an answer that left the API at `left` and was on its way
    /// until `end` (so the client may never have read it): the excuse the
    /// black-box checks give a late or unread answer.
    pub(crate) fn may_cut_answer(&self, from: Duration, left: Duration, end: Duration) -> bool {
        match self {
            Fault::Hold { until }
            | Fault::LatencySpike { until, .. }
            | Fault::Partition { until }
            | Fault::RegionalOutage { until } => from <= end && left <= *until,
            Fault::Bounce => left <= from && from <= end,
            // A close race drops a request unread: no answer left.
            Fault::LoseAnswer | Fault::LimiterPartition { .. } | Fault::Cancel | Fault::CloseRace { .. } => false,
        }
    }
}

/// A fault's kind: [`Fault`] without its numbers. Everything the harness
/// knows about a kind is here, each in an exhaustive `match`, so a new
/// [`Fault`] variant does not compile until it says how it is labelled,
/// whether `retrysim serve` applies it, where the hunt draws it and what
/// it needs; how it is applied and whether it excuses a late answer are
/// [`Fault`]'s own matches above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// [`Fault::LoseAnswer`].
    LoseAnswer,
    /// [`Fault::LatencySpike`].
    LatencySpike,
    /// [`Fault::Partition`].
    Partition,
    /// [`Fault::Hold`].
    Hold,
    /// [`Fault::Bounce`].
    Bounce,
    /// [`Fault::CloseRace`].
    CloseRace,
    /// [`Fault::LimiterPartition`].
    LimiterPartition,
    /// [`Fault::Cancel`].
    Cancel,
    /// [`Fault::RegionalOutage`].
    RegionalOutage,
}

impl FaultKind {
    /// Every kind, in [`Fault`]'s order.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::LoseAnswer,
        FaultKind::LatencySpike,
        FaultKind::Partition,
        FaultKind::Hold,
        FaultKind::Bounce,
        FaultKind::CloseRace,
        FaultKind::LimiterPartition,
        FaultKind::Cancel,
        FaultKind::RegionalOutage,
    ];

    /// Every kind's [`name`](FaultKind::name), in [`FaultKind::ALL`]'s
    /// order: the values the scenario keys' registry allows.
    pub(crate) const NAMES: [&'static str; FaultKind::ALL.len()] = {
        let mut names = [""; FaultKind::ALL.len()];
        let mut i = 0;
        while i < names.len() {
            names[i] = FaultKind::ALL[i].name();
            i += 1;
        }
        names
    };

    /// The kind as scenario files spell it (`kind = "lose_answer"`).
    pub const fn name(self) -> &'static str {
        match self {
            FaultKind::LoseAnswer => "lose_answer",
            FaultKind::LatencySpike => "latency_spike",
            FaultKind::Partition => "partition",
            FaultKind::Hold => "hold",
            FaultKind::Bounce => "bounce",
            FaultKind::CloseRace => "close_race",
            FaultKind::LimiterPartition => "limiter_partition",
            FaultKind::Cancel => "cancel",
            FaultKind::RegionalOutage => "regional_outage",
        }
    }

    /// The kind's label on a timeline (`retrysim timeline`'s fault bands).
    pub fn label(self) -> &'static str {
        match self {
            FaultKind::LoseAnswer => "lose-answer",
            FaultKind::LatencySpike => "latency",
            FaultKind::Partition => "partition",
            FaultKind::Hold => "hold",
            FaultKind::Bounce => "bounce",
            FaultKind::LimiterPartition => "limiter-partition",
            FaultKind::Cancel => "cancel",
            FaultKind::CloseRace => "close-race",
            FaultKind::RegionalOutage => "regional-outage",
        }
    }

    /// Whether `retrysim serve` (a real socket, no simulated network)
    /// applies it: it loses answers and delays them, and cannot cut, bounce
    /// or race a real connection, nor cancel a real caller's jobs (and it
    /// runs no limiter service).
    pub(crate) fn served(self) -> bool {
        match self {
            FaultKind::LoseAnswer | FaultKind::LatencySpike | FaultKind::Hold => true,
            FaultKind::Partition
            | FaultKind::Bounce
            | FaultKind::LimiterPartition
            | FaultKind::Cancel
            | FaultKind::CloseRace
            | FaultKind::RegionalOutage => false,
        }
    }

    /// What a scenario must have for the kind to mean anything (a scenario
    /// that schedules it without fails validation).
    pub(crate) fn needs(self) -> Needs {
        match self {
            FaultKind::LimiterPartition | FaultKind::RegionalOutage => Needs::LimiterService,
            FaultKind::LoseAnswer
            | FaultKind::LatencySpike
            | FaultKind::Partition
            | FaultKind::Hold
            | FaultKind::Bounce
            | FaultKind::CloseRace
            | FaultKind::Cancel => Needs::Nothing,
        }
    }

    /// The swarm's draw that schedules the kind (`sim::checks::hunt`'s
    /// generator), by its function's name; its numbers are drawn here
    /// ([`draw_network_fault`], [`draw_close_race`], [`draw_cancel`],
    /// [`draw_limiter_partition`]); a kind added now is drawn in
    /// [`draw_last`], at its end. `generator_coverage` checks that the
    /// default hunt draws every kind. (Read by the tests: a kind that
    /// lacks a draw fails to build them.)
    #[cfg(test)]
    pub(crate) fn swarm_draw(self) -> &'static str {
        match self {
            FaultKind::LoseAnswer
            | FaultKind::LatencySpike
            | FaultKind::Partition
            | FaultKind::Hold
            | FaultKind::Bounce => "draw_faults",
            FaultKind::CloseRace => "draw_keep_alive",
            FaultKind::LimiterPartition => "draw_hosts, draw_coordinated_outage",
            FaultKind::Cancel => "draw_cancel",
            FaultKind::RegionalOutage => "draw_last",
        }
    }
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// What a fault kind needs of the scenario it is scheduled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// Any scenario.
    Nothing,
    /// Per-worker hosts with the limiter service (`fleet.coordinator`).
    LimiterService,
}

/// What the simulated world does when a fault starts or heals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Switch {
    /// The link is cut (`on`) or mended: messages on it are lost.
    Cut { link: Link, on: bool },
    /// Messages on the link are held (`on`), or released.
    Hold { link: Link, on: bool },
    /// Every message takes up to this long, or (`None`) the scenario's own
    /// largest latency again.
    MaxLatency(Option<Duration>),
    /// The API loses the next answer it produces, after it ran.
    LoseNextAnswer,
    /// The API process restarts.
    Bounce,
    /// A keep-alive connection closes as a client reuses it.
    CloseRace(CloseTiming),
    /// The fleet's caller cancels every front-end job running.
    CancelRunning,
}

/// A link a fault cuts or holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// Between the fleet's hosts and the API.
    Api,
    /// Between the fleet's hosts and the limiter service.
    Limiter,
}

/// The random draws a fault's numbers come from: the hunt's swarm
/// generator implements it over its one PCG-64 stream.
pub(crate) trait Draws {
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64;
    /// One of `xs`, uniformly.
    fn pick<T: Clone>(&mut self, xs: &[T]) -> T;
    /// Uniform in `lo..=hi` milliseconds.
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
    /// True with probability `per_mille / 1000`.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.range(0, 999) < per_mille
    }
}

/// What the swarm's generator has drawn of a world, as the kinds drawn by
/// [`draw_last`] need to know it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Drawn {
    /// A calm world (liveness checked): no faults.
    pub calm: bool,
    /// Per-worker hosts with the limiter service (`fleet.coordinator`).
    pub limiter_service: bool,
}

/// The draws of the kinds added after the generator's other draws were
/// set: the swarm's generator (`hunt/worlds.rs`) calls this after every
/// other draw, so a kind added here, after the draws already here, moves
/// no other seed's world: a regional outage in a quarter of the
/// coordinated fleets that are not calm (in half, it took two of the eight
/// seeds of 500 that catch `aimd-never-grows`: a fleet cut off from its
/// limiter service reports no successes to the gate; in a quarter, one).
pub(crate) fn draw_last(g: &mut impl Draws, drawn: Drawn, schedule: &mut Vec<ScheduledFault>) {
    if !drawn.calm && drawn.limiter_service && g.chance(250) {
        let outage = draw_regional_outage(g);
        let i = schedule.partition_point(|f| f.at <= outage.at);
        schedule.insert(i, outage);
    }
}

/// A regional outage starting in the first 6 s, 0.5 s to 5 s long.
pub(crate) fn draw_regional_outage(g: &mut impl Draws) -> ScheduledFault {
    let at = g.ms(0, 6_000);
    let until = at + g.ms(500, 5_000);
    ScheduledFault { at, fault: Fault::RegionalOutage { until } }
}

const MS: fn(u64) -> Duration = Duration::from_millis;
const S: fn(u64) -> Duration = Duration::from_secs;

/// A fault of the network or the API in the first 8 s: a lost answer
/// (twice as likely as the others), a latency spike, a partition, a hold
/// (at most 2 s) or a bounce, lasting faults 50 ms to 4 s.
pub(crate) fn draw_network_fault(g: &mut impl Draws) -> ScheduledFault {
    let at = g.ms(0, 8_000);
    let lasting = g.ms(50, 4_000);
    let fault = match g.range(0, 5) {
        0 | 1 => Fault::LoseAnswer,
        2 => Fault::LatencySpike { latency: g.pick(&[MS(20), MS(200), S(2)]), until: at + lasting },
        3 => Fault::Partition { until: at + lasting },
        4 => Fault::Hold { until: at + lasting.min(S(2)) },
        _ => Fault::Bounce,
    };
    ScheduledFault { at, fault }
}

/// A close race in the first 4 s: the two timings after the write, which a
/// client must not take for "not sent", twice as often as the one before it.
pub(crate) fn draw_close_race(g: &mut impl Draws) -> ScheduledFault {
    let timings = [CloseTiming::FinBeforeWrite, CloseTiming::FinAfterWrite, CloseTiming::Rst];
    let timings = [timings[0], timings[1], timings[1], timings[2], timings[2]];
    let at = g.ms(0, 4_000);
    ScheduledFault { at, fault: Fault::CloseRace { timing: g.pick(&timings) } }
}

/// The caller cancelling the jobs running at some moment of the first 8 s.
pub(crate) fn draw_cancel(g: &mut impl Draws) -> ScheduledFault {
    ScheduledFault { at: g.ms(0, 8_000), fault: Fault::Cancel }
}

/// The limiter service partitioned away from `at` for 0.5 s to 5 s.
pub(crate) fn draw_limiter_partition(g: &mut impl Draws, at: Duration) -> ScheduledFault {
    let until = at + g.ms(500, 5_000);
    ScheduledFault { at, fault: Fault::LimiterPartition { until } }
}

/// When a server's close of a keep-alive connection reaches the client,
/// against the client's next request on it (hyper #2136, golang/go #19943).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseTiming {
    /// The server closes every idle connection (a FIN) and the client sees
    /// it before it writes again: nothing is sent on it, and a pooled client
    /// sends on a new connection (hyper-util's `retry_canceled_requests`).
    FinBeforeWrite,
    /// The next request on a reused connection is written and read, then
    /// dropped unanswered and the connection closed (a FIN): it never ran,
    /// and the client cannot know that (hyper's `IncompleteMessage`).
    FinAfterWrite,
    /// The next request on a reused connection meets a reset (an RST), unread:
    /// it never ran, and the client sees `ECONNRESET` after writing.
    Rst,
}

impl CloseTiming {
    /// Every timing, in order.
    pub const ALL: [CloseTiming; 3] = [CloseTiming::FinBeforeWrite, CloseTiming::FinAfterWrite, CloseTiming::Rst];

    /// The timing's name in scenario files and reports.
    pub fn name(self) -> &'static str {
        match self {
            CloseTiming::FinBeforeWrite => "fin_before_write",
            CloseTiming::FinAfterWrite => "fin_after_write",
            CloseTiming::Rst => "rst",
        }
    }
}

/// A class of transport fault as a client sees it, whatever caused it. A
/// client path that cannot express one of these to the retry code above it
/// declares it a [`BlindSpot`](crate::sim::run::subject::BlindSpot), and a
/// scenario that injects it is then not applicable to that client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultClass {
    /// No connection could be made, so nothing was sent (a partition, a
    /// restarting API): retrysim's [`TransportFailure::NotSent`](crate::core::classify::TransportFailure::NotSent).
    ConnectFailed,
    /// The request reached the API and may have run, and its answer never
    /// came (a lost answer, a restart or a partition mid-exchange):
    /// retrysim's [`TransportFailure::MaybeArrived`](crate::core::classify::TransportFailure::MaybeArrived).
    AnswerLost,
    /// An answer held or slowed long enough for a client's own timeout to
    /// fire (a hold, a latency spike): the request may have run.
    AnswerLate,
}

impl FaultClass {
    /// Every class, in order.
    pub const ALL: [FaultClass; 3] = [FaultClass::ConnectFailed, FaultClass::AnswerLost, FaultClass::AnswerLate];

    /// The class's name in reports: `connect-failed`, `answer-lost`, `answer-late`.
    pub fn name(self) -> &'static str {
        match self {
            FaultClass::ConnectFailed => "connect-failed",
            FaultClass::AnswerLost => "answer-lost",
            FaultClass::AnswerLate => "answer-late",
        }
    }

    /// The classes `fault` can show a client.
    pub fn of_fault(fault: &Fault) -> &'static [FaultClass] {
        match fault {
            Fault::LoseAnswer => &[FaultClass::AnswerLost],
            // On a pooled connection a partition is a silent hang until the
            // client's own timeout: the request may have arrived.
            Fault::Partition { .. } | Fault::RegionalOutage { .. } => {
                &[FaultClass::ConnectFailed, FaultClass::AnswerLost, FaultClass::AnswerLate]
            }
            Fault::Bounce => &[FaultClass::ConnectFailed, FaultClass::AnswerLost],
            Fault::Hold { .. } | Fault::LatencySpike { .. } => &[FaultClass::AnswerLate],
            // Seen before the write: a pooled client resends by itself.
            Fault::CloseRace { timing: CloseTiming::FinBeforeWrite } => &[],
            Fault::CloseRace { .. } => &[FaultClass::AnswerLost],
            // Between the workers and the limiter service, or the caller's
            // own cancellation: nothing between the client and the API.
            Fault::LimiterPartition { .. } | Fault::Cancel => &[],
        }
    }
}

impl std::fmt::Display for FaultClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A fault and the virtual time it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledFault {
    /// When the fault starts, in virtual time since the run began.
    #[serde(with = "duration_text")]
    pub at: Duration,
    /// What happens then, e.g. `{ kind = "partition", until = "3s" }`.
    pub fault: Fault,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reports and findings name timings and fault classes as scenario
    /// files and JSON reports spell them (their serde names).
    #[test]
    fn timings_and_fault_classes_are_named_as_serde_spells_them() {
        let serde_name = |v: serde_json::Value| v.as_str().map(str::to_owned).expect("a string");
        for timing in CloseTiming::ALL {
            assert_eq!(timing.name(), serde_name(serde_json::to_value(timing).expect("serializes")));
        }
        for class in FaultClass::ALL {
            assert_eq!(class.name(), serde_name(serde_json::to_value(class).expect("serializes")));
            assert_eq!(class.to_string(), class.name());
        }
        assert_eq!([CloseTiming::FinBeforeWrite, CloseTiming::Rst].map(CloseTiming::name), ["fin_before_write", "rst"]);
        assert_eq!(FaultClass::AnswerLate.to_string(), "answer-late");
    }

    /// One fault of each kind, with its numbers.
    fn one_of_each() -> Vec<ScheduledFault> {
        let ms = Duration::from_millis;
        let faults = [
            Fault::LoseAnswer,
            Fault::LatencySpike { latency: ms(200), until: ms(900) },
            Fault::Partition { until: ms(900) },
            Fault::Hold { until: ms(900) },
            Fault::Bounce,
            Fault::CloseRace { timing: CloseTiming::Rst },
            Fault::LimiterPartition { until: ms(900) },
            Fault::Cancel,
            Fault::RegionalOutage { until: ms(900) },
        ];
        faults.into_iter().map(|fault| ScheduledFault { at: ms(500), fault }).collect()
    }

    #[test]
    fn every_kind_is_listed_once_in_faults_order_with_its_own_label() {
        let kinds: Vec<FaultKind> = one_of_each().iter().map(|f| f.fault.kind()).collect();
        assert_eq!(kinds, FaultKind::ALL);
        let labels: std::collections::BTreeSet<&str> = FaultKind::ALL.iter().map(|k| k.label()).collect();
        assert_eq!(labels.len(), FaultKind::ALL.len(), "{labels:?}");
        assert_eq!(FaultKind::LatencySpike.to_string(), "latency");
        for f in one_of_each() {
            let serde = serde_json::to_value(&f.fault).expect("serializes");
            assert_eq!(serde["kind"].as_str(), Some(f.fault.kind().name()), "{:?}", f.fault);
        }
    }

    /// A fault that lasts is undone when it heals; one that does not last
    /// never heals, so its switch is the same either way.
    #[test]
    fn lasting_faults_switch_back_when_they_heal() {
        for f in one_of_each() {
            let (starts, heals) = (f.fault.switches(true), f.fault.switches(false));
            assert!(!starts.is_empty() && starts.len() == heals.len(), "{:?}: {starts:?} / {heals:?}", f.fault);
            for (on, off) in starts.into_iter().zip(heals) {
                match (f.fault.until(), on) {
                    (Some(_), Switch::Cut { link, on: true }) => assert_eq!(off, Switch::Cut { link, on: false }),
                    (Some(_), Switch::Hold { link, on: true }) => assert_eq!(off, Switch::Hold { link, on: false }),
                    (Some(_), Switch::MaxLatency(Some(_))) => assert_eq!(off, Switch::MaxLatency(None)),
                    (None, _) => assert_eq!(on, off, "{:?}", f.fault),
                    (Some(_), other) => panic!("{:?} lasts, and its start {other:?} is not undone", f.fault),
                }
            }
        }
    }

    /// The kinds that cut a link say until when; the limiter service's
    /// checks read it, so a regional outage counts as cutting the fleet off
    /// from the service, and from the API.
    #[test]
    fn cuts_are_read_from_the_switches() {
        let ms = Duration::from_millis;
        for f in one_of_each() {
            let kind = f.fault.kind();
            let api = matches!(kind, FaultKind::Partition | FaultKind::RegionalOutage);
            let limiter = matches!(kind, FaultKind::LimiterPartition | FaultKind::RegionalOutage);
            assert_eq!(f.fault.cuts(Link::Api), api.then_some(ms(900)), "{kind}");
            assert_eq!(f.fault.cuts(Link::Limiter), limiter.then_some(ms(900)), "{kind}");
            assert_eq!(kind.needs() == Needs::LimiterService, limiter, "{kind}");
        }
    }

    /// The regional outage is drawn last, only in coordinated fleets that
    /// are not calm, in the schedule's order; elsewhere `draw_last` draws
    /// nothing at all (so no seed without one moves).
    #[test]
    fn the_regional_outage_is_drawn_only_where_the_limiter_service_runs() {
        struct Counted(u64, u64);
        impl Draws for Counted {
            fn range(&mut self, lo: u64, hi: u64) -> u64 {
                self.0 += 1;
                self.1 = self.1.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                lo + (self.1 >> 33) % (hi - lo + 1)
            }
            fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
                let i = self.range(0, xs.len() as u64 - 1);
                xs[i as usize].clone()
            }
        }
        let mut g = Counted(0, 7);
        let mut schedule = Vec::new();
        for (calm, limiter_service) in [(true, true), (false, false), (true, false)] {
            draw_last(&mut g, Drawn { calm, limiter_service }, &mut schedule);
        }
        assert_eq!((g.0, schedule.len()), (0, 0), "drew where it must not");
        let early = ScheduledFault { at: Duration::ZERO, fault: Fault::Bounce };
        let late = ScheduledFault { at: Duration::from_secs(7), fault: Fault::Bounce };
        let mut drawn = 0;
        for _ in 0..200 {
            let mut schedule = vec![early.clone(), late.clone()];
            draw_last(&mut g, Drawn { calm: false, limiter_service: true }, &mut schedule);
            if schedule.len() == 3 {
                drawn += 1;
                let outage = &schedule[1];
                let until = outage.fault.until().expect("lasts");
                assert_eq!(outage.fault.kind(), FaultKind::RegionalOutage);
                assert!(outage.at <= Duration::from_secs(6) && until >= outage.at + Duration::from_millis(500));
                assert!(until <= outage.at + Duration::from_secs(5));
            }
        }
        assert!((50..150).contains(&drawn), "{drawn} of 200");
    }

    /// docs/DESIGN.md's paragraph on the network names every kind, as
    /// scenario files spell it.
    #[test]
    fn the_design_names_every_kind() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/DESIGN.md");
        let design = std::fs::read_to_string(path).expect("docs/DESIGN.md reads");
        let from = design.find("Faults (`Fault`) at").expect("DESIGN.md lists the faults");
        let to = from + design[from..].find("*Adding a fault*").expect("then says how to add one");
        for kind in FaultKind::ALL {
            assert!(design[from..to].contains(&format!("`{}`", kind.name())), "DESIGN.md does not name {kind}");
        }
    }

    /// `retrysim serve` delays messages only for the kinds it serves, and
    /// only while they last; only the kinds that slow or cut the link
    /// excuse an answer that never came.
    #[test]
    fn served_kinds_delay_and_cutting_kinds_excuse() {
        let ms = Duration::from_millis;
        for f in one_of_each() {
            let kind = f.fault.kind();
            let delays = f.fault.message_delay(f.at, ms(600)) > Duration::ZERO;
            assert!(!delays || kind.served(), "{kind} delays messages but is not served");
            assert_eq!(f.fault.message_delay(f.at, ms(400)), Duration::ZERO, "{kind} before it starts");
            assert_eq!(f.fault.message_delay(f.at, ms(950)), Duration::ZERO, "{kind} after it heals");
            let cuts = f.fault.may_cut_answer(f.at, ms(450), ms(600));
            let expected = matches!(
                kind,
                FaultKind::LatencySpike
                    | FaultKind::Partition
                    | FaultKind::Hold
                    | FaultKind::Bounce
                    | FaultKind::RegionalOutage
            );
            assert_eq!(cuts, expected, "{kind} excuses an answer on its way when it starts");
            assert!(!f.fault.may_cut_answer(f.at, ms(950), ms(1_000)), "{kind} excuses an answer after it ended");
        }
        let served: Vec<FaultKind> = FaultKind::ALL.into_iter().filter(|k| k.served()).collect();
        assert_eq!(served, [FaultKind::LoseAnswer, FaultKind::LatencySpike, FaultKind::Hold]);
    }
}
