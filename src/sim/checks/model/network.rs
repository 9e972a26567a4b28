//! The model's network, judged: the answers it lost ([`check_lost_answers`]),
//! its connections against the keep-alive settings ([`check_keep_alive`])
//! and its close races ([`check_close_races`]).

use std::time::Duration;

use super::{ModelViolation, blame};
use crate::env::{Rng, seeded_rng};
use crate::sim::run::runner::Report;
use crate::sim::run::seed::derive;
use crate::sim::world::api::LossDecision;
use crate::sim::world::net::{CloseTiming, ConnRecord, Fault};

/// The answers the network lost are the ones the scenario asked to lose
/// (`model-lost-answers`): replayed from the seed, the server's k-th
/// decision draws the k-th number of its generator (`derive(seed,
/// "server", 0)`, one draw per answer whatever the outcome) and loses the
/// answer where a scheduled `lose_answer` is still unspent (armed before
/// the decision's instant) or the draw is under `lost_answers_per_mille`.
/// A run with a scheduled loss at the instant of a decision is not judged
/// (either order is right). And every arrival the ledger marks lost was
/// lost by a decision. Without it a server that never lost an answer, or
/// lost others, passed every check: the clients' checks read the losses
/// from the same ledger.
pub fn check_lost_answers(r: &Report) -> Vec<ModelViolation> {
    let faults = &r.scenario_config.faults;
    let per_mille = u64::from(faults.lost_answers_per_mille);
    let mut scheduled: Vec<Duration> =
        faults.schedule.iter().filter(|f| matches!(f.fault, Fault::LoseAnswer)).map(|f| f.at).collect();
    scheduled.sort();
    let decisions = &r.ledger.loss_decisions;
    if decisions.iter().any(|d| scheduled.contains(&d.at)) {
        return Vec::new();
    }
    let found = |k: usize, d: &LossDecision, what: String| {
        let message = match d.arrival {
            Some(i) => {
                format!("blames the model: arrival {i}'s answer (decision {k}, at {} ms) {what}", d.at.as_millis())
            }
            None => format!("blames the model: answer {k} (at {} ms) {what}", d.at.as_millis()),
        };
        vec![ModelViolation { arrival: d.arrival.unwrap_or(0), message }]
    };
    let mut draws = seeded_rng(derive(r.seed, "server", 0));
    let (mut armed, mut next) = (0, 0);
    for (k, d) in decisions.iter().enumerate() {
        let draw = draws.draw() % 1000;
        while scheduled.get(next).is_some_and(|&at| at < d.at) {
            (armed, next) = (armed + 1, next + 1);
        }
        let expected = if armed > 0 {
            armed -= 1;
            true
        } else {
            draw < per_mille
        };
        if d.lost != expected {
            let (was, should) = if d.lost { ("was lost", "keep") } else { ("was kept", "lose") };
            return found(
                k,
                d,
                format!(
                    "{was}; the seed's draw ({draw} of 1000, lost under {per_mille}) and the schedule's {} scheduled losses say {should} it",
                    scheduled.len()
                ),
            );
        }
    }
    let decided: std::collections::BTreeSet<usize> =
        decisions.iter().filter(|d| d.lost).filter_map(|d| d.arrival).collect();
    if let Some((i, a)) = r.ledger.arrivals.iter().enumerate().find(|(i, a)| a.lost && !decided.contains(i)) {
        return blame(i, a, ": marked lost in the ledger, though no decision lost it".into());
    }
    Vec::new()
}

/// The server keeps connections alive as its `keep_alive` says
/// (`model-keep-alive`), from what it recorded of each connection
/// ([`ConnRecord`]): the n-th answer on a connection is marked
/// `Connection: close` exactly when
/// [`KeepAlive::closes_after`](crate::sim::world::api::KeepAlive::closes_after) says so of
/// n (counted here, from the answers) and its status; and, with an idle
/// timeout, no request reaches a connection more than the timeout (and a
/// tick for the server's timer) after it went idle (accepted, or answered
/// its last request): by then the server has closed it. A connection the
/// server closed was idle then, and closed on time: at its idle timeout
/// (within a tick), unless a `fin_before_write` race asked, and then within
/// a tick of a race the fault schedule holds. Clients only see
/// a connection close, which they handle either way, so a server that
/// closed too early or never closed an idle one passed every other check.
pub fn check_keep_alive(r: &Report) -> Vec<ModelViolation> {
    let keep = r.scenario_config.api.keep_alive;
    if !keep.enabled {
        return Vec::new();
    }
    let found = |n: usize, c: &ConnRecord, what: String| {
        let message = format!("blames the model: connection {n} (accepted at {} ms) {what}", c.opened.as_millis());
        vec![ModelViolation { arrival: 0, message }]
    };
    let timeout = (keep.idle_timeout_ms > 0).then(|| Duration::from_millis(keep.idle_timeout_ms));
    let slack = r.scenario_config.net.tick + Duration::from_millis(1);
    // When a `fin_before_write` race asked the server to close its idle connections.
    let rounds: Vec<Duration> = r
        .scenario_config
        .faults
        .schedule
        .iter()
        .filter(|f| matches!(f.fault, Fault::CloseRace { timing: CloseTiming::FinBeforeWrite }))
        .map(|f| f.at)
        .collect();
    for (n, c) in r.server_connections.iter().enumerate() {
        for (k, a) in c.answers.iter().enumerate() {
            let served = u32::try_from(k + 1).unwrap_or(u32::MAX);
            if a.closes != keep.closes_after(served, a.status) {
                let (did, should) = if a.closes { ("was closed", "stays open") } else { ("stayed open", "closes") };
                return found(
                    n,
                    c,
                    format!(
                        "{did} after answer {served} ({}, at {} ms); with max_requests = {} and close_after_error = {} it {should}",
                        a.status,
                        a.at.as_millis(),
                        keep.max_requests,
                        keep.close_after_error
                    ),
                );
            }
        }
        if let Some(close) = c.closed {
            let at = close.at.as_millis();
            if close.requests != close.answers {
                let running = close.requests.saturating_sub(close.answers);
                return found(n, c, format!("was closed at {at} ms with {running} request(s) on it not yet answered"));
            }
            let idle_since = close.answers.checked_sub(1).and_then(|k| c.answers.get(k)).map_or(c.opened, |a| a.at);
            match timeout {
                _ if close.asked => {
                    if !rounds.iter().any(|&t| t <= close.at && close.at <= t + slack) {
                        return found(
                            n,
                            c,
                            format!(
                                "was closed at {at} ms as a `fin_before_write` race asked, where none was scheduled in the tick before"
                            ),
                        );
                    }
                }
                None => return found(n, c, format!("was closed at {at} ms as idle, where it has no idle timeout")),
                Some(t) if close.at < idle_since + t || close.at > idle_since + t + slack => {
                    let idle = (close.at - idle_since.min(close.at)).as_millis();
                    let t = t.as_millis();
                    return found(
                        n,
                        c,
                        format!("was closed at {at} ms as idle after {idle} ms, where its idle timeout is {t} ms"),
                    );
                }
                Some(_) => {}
            }
        }
        let Some(timeout) = timeout else { continue };
        for (i, &at) in c.requests.iter().enumerate() {
            let idle_since = match i {
                0 => c.opened,
                _ => match c.answers.get(i - 1) {
                    Some(a) => a.at,
                    None => break,
                },
            };
            if at > idle_since + timeout + slack {
                return found(
                    n,
                    c,
                    format!(
                        "took request {} at {} ms, {} ms after it went idle, past its idle timeout of {} ms",
                        i + 1,
                        at.as_millis(),
                        (at - idle_since).as_millis(),
                        timeout.as_millis()
                    ),
                );
            }
        }
    }
    Vec::new()
}

/// A close race strikes only where a real one can (`model-close-races`):
/// the next request on a kept-alive connection that was idle, that is one
/// the server had answered before and on which every earlier request was
/// answered, and a request that was there (its head names a method). A
/// race that struck a fresh or busy connection, or a connection the client
/// had just closed, injects a fault no server makes, and the clients'
/// checks, which read the raced requests from the report, cannot tell.
pub fn check_close_races(r: &Report) -> Vec<ModelViolation> {
    for (k, x) in r.close_races.iter().enumerate() {
        let on = x.on;
        let what = if x.method.is_empty() {
            "struck no request (the client had closed the connection)".to_owned()
        } else if on.answers == 0 {
            format!("struck the first request on connection {}: a fresh connection, not a reused one", on.connection)
        } else if on.requests != on.answers {
            let running = on.requests.saturating_sub(on.answers);
            format!(
                "struck connection {} with {running} request(s) on it not yet answered: a busy one, not an idle one",
                on.connection
            )
        } else {
            continue;
        };
        let message = format!("blames the model: close race {k} ({:?}, at {} ms) {what}", x.timing, x.at.as_millis());
        return vec![ModelViolation { arrival: 0, message }];
    }
    Vec::new()
}
