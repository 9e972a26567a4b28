//! The server's ledger: what arrived, what was charged, what was advised.
//!
//! The invariant checkers (`sim::checks::invariants`) read only client traces and this
//! ledger; the model never checks itself. So the ledger records facts the
//! checkers need and the client cannot see: every charge per idempotency key
//! (invariant 3), and each client's not-before instant (invariant 4).
//! Durations serialize as whole milliseconds of virtual time.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Serialize, Serializer};

/// The `charges` key for charged requests that carried no idempotency key.
pub const NO_KEY: &str = "(no key)";

/// What the API saw and did, request by request: the server's own record,
/// which the checkers judge the clients by.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ledger {
    /// Every request, in arrival order; its index is its arrival number.
    pub arrivals: Vec<Arrival>,
    /// Charges per idempotency key (`NO_KEY` for unkeyed ones).
    pub charges: BTreeMap<String, u32>,
    /// All charges: jobs created.
    pub charged: u64,
    /// All credits taken by those charges.
    pub credits_spent: u64,
    /// Per client, the latest `answered_at + advised wait` any answer gave it.
    #[serde(serialize_with = "ms_map")]
    pub not_before: BTreeMap<String, Duration>,
    /// Every answer the server produced and then decided whether to lose
    /// (`lost_answers_per_mille`, a scheduled `lose_answer`), in the order
    /// it decided: the model's self-check replays the decisions from the
    /// seed. Not in the JSON ledger.
    #[serde(skip)]
    pub loss_decisions: Vec<LossDecision>,
}

/// One answer's fate: kept or lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossDecision {
    /// When the server decided (virtual time).
    pub at: Duration,
    /// The arrival it answered, where the answer names one.
    pub arrival: Option<usize>,
    /// Whether the answer was lost.
    pub lost: bool,
}

/// One request as the API saw it: when, from whom, and what it did with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Arrival {
    /// When the request arrived (virtual time).
    #[serde(serialize_with = "ms")]
    pub at: Duration,
    /// The simulated worker (`x-retrysim-client`), `"(unknown)"` if absent.
    pub client: String,
    /// The account the key belongs to; `None` before authentication or when anonymous.
    pub account: Option<String>,
    /// The HTTP method.
    pub method: String,
    /// The request's path, without the query.
    pub path: String,
    /// The `Idempotency-Key` it carried, if any.
    pub idempotency_key: Option<String>,
    /// The answer's status; 0 while the request is still running.
    pub status: u16,
    /// The error code as written in the body.
    pub code: Option<String>,
    /// What the server did with it.
    pub outcome: ArrivalOutcome,
    /// The wait this answer advised, from `answered_at` (refusals answer on
    /// arrival); `None` if it advised none.
    #[serde(serialize_with = "ms_opt")]
    pub retry_after: Option<Duration>,
    /// When the answer was produced (`at`, or the completion of a run).
    #[serde(serialize_with = "ms_opt")]
    pub answered_at: Option<Duration>,
    /// The network lost the answer after the server produced it.
    pub lost: bool,
    /// The request body's 64-bit FNV-1a digest: `retrysim serve` groups requests
    /// with neither a client label nor a key into operations by it. Not in
    /// the JSON ledger.
    #[serde(skip)]
    pub body_digest: u64,
    /// The budget the answer's `RateLimit-*` headers told, as the server
    /// saw it when it answered; `None` where it sent none. Not in the JSON
    /// ledger.
    #[serde(skip)]
    pub advertised: Option<Advertised>,
    /// The wait the answer's rate-limit dialect advised (`[api] dialect`),
    /// from `answered_at`, apart from `retry_after` (which is `Retry-After`
    /// and the body's hint): a client that reads only `Retry-After` is held
    /// to `retry_after`, retrysim's own client to both. `None` (and absent
    /// from the JSON ledger) where no dialect spoke.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "ms_opt")]
    pub dialect_wait: Option<Duration>,
}

impl Arrival {
    /// The earliest wait any advice of the answer allows: the shorter of
    /// `retry_after` and `dialect_wait` (a client may follow either; the IETF
    /// draft has `Retry-After` win where both are sent).
    pub fn any_advice(&self) -> Option<Duration> {
        match (self.retry_after, self.dialect_wait) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A budget's standing as an answer's `RateLimit-*` headers tell it, before
/// the header form writes it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advertised {
    /// Requests per window (or per hour, for anonymous callers).
    pub limit: u32,
    /// Requests left in it.
    pub remaining: u32,
    /// Until the budget is whole again (zero when it already is).
    pub reset: Duration,
}

/// A request body's 64-bit FNV-1a digest: the same bytes, the same digest,
/// on every machine and build (std's hasher promises neither).
pub fn body_digest(body: &[u8]) -> u64 {
    body.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// What the server did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalOutcome {
    /// Accepted and still running (between `begin` and `complete`).
    Running,
    /// Ran and charged (a job was created).
    Charged,
    /// Ran without a charge (a read, an upload).
    Accepted,
    /// A stored idempotent answer was replayed; nothing ran, nothing was charged.
    Replayed,
    /// Turned away by a limiter, the concurrency cap, the quota or the credits.
    Refused,
    /// 409: the same idempotency key is still running.
    InProgressConflict,
    /// 409: the same idempotency key came with a different request.
    KeyReused,
    /// 400, 401, 404: the request itself is wrong.
    Rejected,
    /// A scripted answer; nothing ran.
    Scripted,
    /// The run was abandoned (e.g. the server went down) and never answered.
    Aborted,
}

impl Ledger {
    pub(crate) fn arrive(&mut self, arrival: Arrival) -> usize {
        self.arrivals.push(arrival);
        self.arrivals.len() - 1
    }

    /// Records the `RateLimit-*` standing the answer to arrival `index` told.
    pub(crate) fn advertise(&mut self, index: usize, standing: Advertised) {
        self.arrivals[index].advertised = Some(standing);
    }

    /// Records the answer to arrival `index`, and the not-before it sets.
    pub(crate) fn settle(&mut self, index: usize, answer: Settled, now: Duration) {
        let a = &mut self.arrivals[index];
        a.status = answer.status;
        a.code = answer.code;
        a.outcome = answer.outcome;
        a.retry_after = answer.advised;
        a.dialect_wait = answer.dialect_advised;
        a.answered_at = Some(now);
        if let Some(wait) = answer.advised {
            let until = now + wait;
            let slot = self.not_before.entry(a.client.clone()).or_insert(until);
            *slot = (*slot).max(until);
        }
    }

    pub(crate) fn charge(&mut self, idempotency_key: Option<&str>, credits: u64) {
        *self.charges.entry(idempotency_key.unwrap_or(NO_KEY).to_owned()).or_insert(0) += 1;
        self.charged += 1;
        self.credits_spent += credits;
    }

    /// How many arrivals ended with `outcome`.
    pub fn count(&self, outcome: ArrivalOutcome) -> usize {
        self.arrivals.iter().filter(|a| a.outcome == outcome).count()
    }
}

/// One answer as the ledger records it.
pub(crate) struct Settled {
    pub(crate) status: u16,
    pub(crate) code: Option<String>,
    pub(crate) outcome: ArrivalOutcome,
    pub(crate) advised: Option<Duration>,
    /// The wait the answer's dialect advised, where one spoke.
    pub(crate) dialect_advised: Option<Duration>,
}

fn millis(d: &Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn ms<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(millis(d))
}

fn ms_opt<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&millis(d)),
        None => s.serialize_none(),
    }
}

fn ms_map<S: Serializer>(m: &BTreeMap<String, Duration>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(m.iter().map(|(k, v)| (k, millis(v))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_digest_is_fnv_1a() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(body_digest(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(body_digest(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(body_digest(b"foobar"), 0x8594_4171_f739_67e8);
    }

    fn arrival(client: &str, at: u64) -> Arrival {
        Arrival {
            at: Duration::from_millis(at),
            client: client.into(),
            account: None,
            method: "POST".into(),
            path: "/v1/jobs".into(),
            idempotency_key: None,
            status: 0,
            code: None,
            outcome: ArrivalOutcome::Running,
            retry_after: None,
            answered_at: None,
            lost: false,
            body_digest: 0,
            advertised: None,
            dialect_wait: None,
        }
    }

    fn refused(secs: u64) -> Settled {
        Settled {
            status: 429,
            code: Some("RATE_LIMITED".into()),
            outcome: ArrivalOutcome::Refused,
            advised: Some(Duration::from_secs(secs)),
            dialect_advised: None,
        }
    }

    #[test]
    fn not_before_keeps_the_latest_instant_per_client() {
        let mut l = Ledger::default();
        let a = l.arrive(arrival("w1", 1_000));
        let b = l.arrive(arrival("w1", 1_500));
        l.settle(a, refused(5), Duration::from_millis(1_000));
        l.settle(b, refused(1), Duration::from_millis(1_500));
        assert_eq!(l.not_before["w1"], Duration::from_millis(6_000), "a later, shorter wait does not lower it");
        assert_eq!(l.count(ArrivalOutcome::Refused), 2);
    }

    #[test]
    fn charges_are_counted_per_key_and_unkeyed_together() {
        let mut l = Ledger::default();
        l.charge(Some("k1"), 2);
        l.charge(None, 1);
        l.charge(None, 1);
        assert_eq!(l.charges.get("k1"), Some(&1));
        assert_eq!(l.charges.get(NO_KEY), Some(&2));
        assert_eq!((l.charged, l.credits_spent), (3, 4));
    }

    #[test]
    fn serializes_durations_as_milliseconds() {
        let mut l = Ledger::default();
        let i = l.arrive(arrival("w1", 250));
        l.settle(i, refused(2), Duration::from_millis(250));
        let json = serde_json::to_value(&l).unwrap();
        assert_eq!(json["arrivals"][0]["at"], 250);
        assert_eq!(json["arrivals"][0]["retry_after"], 2_000);
        assert_eq!(json["arrivals"][0]["outcome"], "refused");
        assert_eq!(json["not_before"]["w1"], 2_250);
    }
}
