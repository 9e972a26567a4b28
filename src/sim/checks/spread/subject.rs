//! `jitter-spread` on a black-box [`Subject`](crate::testing::Subject) that
//! declares its jitter ([`Promises::jitter`](crate::testing::Promises::jitter)):
//! its waits read from the server's ledger alone.
//!
//! # Which waits
//!
//! A job's requests, in arrival order, from a client that sends one at a
//! time (as [the black-box checks](crate::sim::checks::blackbox) assume).
//! The wait after the job's `n`-th request (from 0) is judged when that
//! request's answer advised nothing (no `Retry-After` or body hint, no
//! dialect wait, no `RateLimit` fields: the wait is the backoff's alone),
//! was not lost, and a next request of the job arrived. What picks these
//! waits is known before their draws, so they stay independent uniform
//! draws (optional skipping, as in [the parent module](super)), with three
//! exclusions that keep it so:
//!
//! - **No fault schedule, no deferral, no fleet gate** (else nothing of the
//!   run is judged): a hold, partition or cancel could cut or delay a long
//!   draw and not a short one, a deferred job's background runs are another
//!   client's, and a gate adds its queueing to the wait.
//! - **The deadline.** With a promised deadline, a wait is judged only if
//!   its whole window fits in what the deadline leaves after the answer
//!   reached the client at the latest: a client may give up on a draw that
//!   would not fit, which selects by the draw.
//!
//! # How latency enters, and the cell
//!
//! The ledger knows when the answer left the server (`answered_at`, `t_a`)
//! and when the next request arrived (`t_b`), not when the client read the
//! one and sent the other. The scenario bounds both trips:
//!
//! - the answer is one message: `min_latency ..= max_latency + tick`;
//! - the request is one message on a pooled connection, or a connect and
//!   its data plus a step on a fresh one: `min_latency ..= 2 × (max_latency
//!   + tick) + tick`;
//! - the client's timer fires up to the clock's step late
//!   ([`clock_slack_ms`]).
//!
//! So the drawn wait `w` lies in `[t_b - t_a - (longest trips) - slack,
//! t_b - t_a - 2 × min_latency]`. Its cell is the draw `V` that range
//! shows (`w = V × W` for full jitter over window `W`, `W/2 + V × W/2`
//! for equal), widened by a nanosecond each way for the core's rounding.
//! The true `V` always lies in its cell, so the Kolmogorov–Smirnov and
//! lowest-draw tests keep their α (their statistics are bounds over every
//! draw inside the cells), and so does the few-values test: a cell is
//! `V` shifted by an unknown latency inside a fixed width `u`, so it holds
//! a given point for `V` in a range of `2u` at most, the `2 d w_i` of its
//! bound. Wider cells only weaken the tests, never raise a false alarm.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Draws, Kind, MS, cell};
use crate::core::backoff::{Backoff, Jitter};
use crate::sim::checks::invariants::clock_slack_ms;
use crate::sim::checks::waits::window_ns;
use crate::sim::run::job::job_of_label;
use crate::sim::run::runner::Report;
use crate::sim::run::scenario::GateConfig;
use crate::sim::world::api::Arrival;

/// The bounds on what the ledger's instants leave out of a wait (ns).
struct Trips {
    /// The least an answer's and a request's trips take together.
    least: u128,
    /// The most they take, with the timer's lateness.
    most: u128,
    /// The latest an answer reaches the client after it left.
    answer: u128,
}

impl Trips {
    fn of(r: &Report) -> Trips {
        let n = &r.scenario_config.net;
        let (min, trip, tick) = (n.min_latency.as_nanos(), (n.max_latency + n.tick).as_nanos(), n.tick.as_nanos());
        let slack = u128::from(clock_slack_ms(&r.scenario_config)) * MS;
        Trips { least: 2 * min, most: trip + (2 * trip + tick) + slack, answer: trip }
    }
}

/// Reads a declared black-box client's waits from the ledger into `draws`.
pub(super) fn walk(r: &Report, backoff: &Backoff, draws: &mut Draws) {
    let s = &r.scenario_config;
    let kind = match backoff.jitter {
        Jitter::Full => Kind::Full,
        Jitter::Equal => Kind::Equal,
        Jitter::None | Jitter::Decorrelated => return,
    };
    if !s.faults.schedule.is_empty() || s.fleet.deferral.is_some() || !matches!(s.fleet.gate, GateConfig::None) {
        return;
    }
    let trips = Trips::of(r);
    let mut jobs: BTreeMap<u32, Vec<&Arrival>> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        if let Some(job) = job_of_label(&a.client) {
            jobs.entry(job).or_default().push(a);
        }
    }
    let starts: BTreeMap<u32, u64> = r.records.iter().map(|j| (j.job, j.started_ms)).collect();
    let deadline = r.promises.deadline;
    for (job, arrivals) in &jobs {
        for (n, pair) in arrivals.windows(2).enumerate() {
            let (a, b) = (pair[0], pair[1]);
            let advised = a.retry_after.is_some() || a.dialect_wait.is_some() || a.advertised.is_some();
            let Some(answered) = a.answered_at.filter(|_| !advised && !a.lost) else { continue };
            let w = window_ns(backoff, u32::try_from(n).unwrap_or(u32::MAX));
            if w < MS {
                continue;
            }
            // Room for the whole window before the promised deadline, or the draw may have chosen.
            let fits = match (deadline, starts.get(job)) {
                (None, _) => true,
                (Some(d), Some(&start)) => {
                    answered.as_nanos() + trips.answer + w <= (Duration::from_millis(start) + d).as_nanos()
                }
                (Some(_), None) => false,
            };
            let gap = b.at.saturating_sub(answered).as_nanos();
            let Some(hi) = gap.checked_sub(trips.least).filter(|_| fits) else { continue };
            let lo = gap.saturating_sub(trips.most);
            let c = match kind {
                Kind::Equal => {
                    let (half, top) = (w / 2, w - w / 2);
                    if hi < half { None } else { cell(lo.saturating_sub(half), hi - half, top, top) }
                }
                _ => cell(lo, hi, w, w),
            };
            if let Some(c) = c {
                draws.add(kind, c, || {
                    format!(
                        "the first, job {job}: {} ms from the answer at {} ms to the next request's arrival, after request {}",
                        gap / MS,
                        answered.as_millis(),
                        n + 1
                    )
                });
            }
        }
    }
}
