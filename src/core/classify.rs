//! What an attempt's outcome means for the retry loop.
//!
//! A 429 is a *definite* refusal: nothing ran, so even an unsafe POST may be
//! sent again. A connection that broke after the request went out is
//! *ambiguous*: the server may have run it, so only a replayable operation may
//! be retried. The same status carries different meanings, so the body's
//! `error.code` (or `error.type`) decides between a full window and an
//! exhausted quota.

use http::{Method, StatusCode};
use serde::Serialize;

/// How a transport failure relates to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportFailure {
    /// The request never left (connect refused, no route): nothing ran.
    NotSent,
    /// The request may have arrived (reset, timeout after sending): the
    /// server may have run it.
    MaybeArrived,
}

/// One attempt's outcome as the classifier sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// An answer with its status and the body's error code, if any.
    Answer { status: StatusCode, code: Option<&'a str> },
    /// No answer.
    Transport(TransportFailure),
}

/// What the retry loop does with an outcome (see the table in the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// 2xx: done.
    Success,
    /// A full rate window: wait the advice, retry.
    Throttled,
    /// Retrying cannot help (quota, credits, a client error): stop.
    Terminal,
    /// A 429 with no or an unknown code: a bounded number of retries.
    Unclear,
    /// The same key is still running on the server: back off, same key.
    InProgress,
    /// A 503 or a request that never left: retry if the operation may be replayed.
    Transient,
    /// The request may have run: retry only a replayable operation.
    Ambiguous,
}

/// How safe it is to send an operation again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// GET, HEAD, OPTIONS, TRACE: no side effects.
    Safe,
    /// PUT, DELETE: repeating has the effect of doing it once.
    Idempotent,
    /// A POST (or PATCH) carrying an `Idempotency-Key` that is reused on
    /// every attempt: the server deduplicates.
    Keyed,
    /// A POST without a key: a replay may run it twice.
    Unsafe,
}

impl Operation {
    /// The class of a request by its method and whether it carries a key.
    pub fn of(method: &Method, has_key: bool) -> Operation {
        match *method {
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE => Operation::Safe,
            Method::PUT | Method::DELETE => Operation::Idempotent,
            _ if has_key => Operation::Keyed,
            _ => Operation::Unsafe,
        }
    }

    /// Whether the operation may be sent again after the server may have run it.
    pub fn replayable(self) -> bool {
        !matches!(self, Operation::Unsafe)
    }
}

/// Maps an outcome to a class. Replace [`DefaultTable`] to teach the core
/// another API's codes.
pub trait Classifier: Send + Sync {
    /// Classifies one outcome.
    fn classify(&self, outcome: Outcome<'_>) -> Class;
}

/// The default table (DESIGN.md "Classification").
///
/// # Default
/// - throttled codes: `RATE_LIMITED`, `rate_limited`, `queue_full`
/// - terminal 429 codes: `QUOTA_EXCEEDED`, `insufficient_quota`, `SIGNUP_REQUIRED`, `signup_required`
/// - transient 5xx: 502, 503, 504
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultTable {
    /// 429 codes that mean "the window is full, wait".
    pub throttled_codes: Vec<String>,
    /// 429 codes that mean "no amount of waiting helps soon".
    pub terminal_codes: Vec<String>,
    /// 5xx statuses worth a retry.
    pub transient_statuses: Vec<u16>,
}

impl Default for DefaultTable {
    fn default() -> Self {
        let s = |v: &[&str]| v.iter().map(|c| c.to_string()).collect();
        DefaultTable {
            throttled_codes: s(&["RATE_LIMITED", "rate_limited", "queue_full"]),
            terminal_codes: s(&["QUOTA_EXCEEDED", "insufficient_quota", "SIGNUP_REQUIRED", "signup_required"]),
            transient_statuses: vec![502, 503, 504],
        }
    }
}

impl Classifier for DefaultTable {
    fn classify(&self, outcome: Outcome<'_>) -> Class {
        let (status, code) = match outcome {
            Outcome::Transport(TransportFailure::NotSent) => return Class::Transient,
            Outcome::Transport(TransportFailure::MaybeArrived) => return Class::Ambiguous,
            Outcome::Answer { status, code } => (status, code),
        };
        let listed = |list: &[String]| code.is_some_and(|c| list.iter().any(|l| l == c));
        match status.as_u16() {
            200..=299 => Class::Success,
            429 if listed(&self.throttled_codes) => Class::Throttled,
            429 if listed(&self.terminal_codes) => Class::Terminal,
            429 => Class::Unclear,
            409 if code.is_some_and(|c| c.eq_ignore_ascii_case("IDEMPOTENCY_IN_PROGRESS")) => Class::InProgress,
            s if self.transient_statuses.contains(&s) => Class::Transient,
            _ => Class::Terminal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(status: u16, code: Option<&str>) -> Class {
        let status = StatusCode::from_u16(status).unwrap();
        DefaultTable::default().classify(Outcome::Answer { status, code })
    }

    #[test]
    fn every_row_of_the_default_table() {
        assert_eq!(class(200, None), Class::Success);
        assert_eq!(class(201, None), Class::Success);
        for c in ["RATE_LIMITED", "rate_limited", "queue_full"] {
            assert_eq!(class(429, Some(c)), Class::Throttled, "{c}");
        }
        for c in ["QUOTA_EXCEEDED", "insufficient_quota", "SIGNUP_REQUIRED"] {
            assert_eq!(class(429, Some(c)), Class::Terminal, "{c}");
        }
        assert_eq!(class(402, Some("INSUFFICIENT_CREDITS")), Class::Terminal);
        assert_eq!(class(429, None), Class::Unclear);
        assert_eq!(class(429, Some("SOMETHING_NEW")), Class::Unclear);
        assert_eq!(class(409, Some("IDEMPOTENCY_IN_PROGRESS")), Class::InProgress);
        assert_eq!(class(409, Some("idempotency_in_progress")), Class::InProgress);
        assert_eq!(class(409, Some("IDEMPOTENCY_KEY_REUSED")), Class::Terminal);
        assert_eq!(class(400, None), Class::Terminal);
        assert_eq!(class(404, Some("NOT_FOUND")), Class::Terminal);
        assert_eq!(class(503, None), Class::Transient);
        assert_eq!(class(500, None), Class::Terminal);
        let t = DefaultTable::default();
        assert_eq!(t.classify(Outcome::Transport(TransportFailure::NotSent)), Class::Transient);
        assert_eq!(t.classify(Outcome::Transport(TransportFailure::MaybeArrived)), Class::Ambiguous);
    }

    #[test]
    fn the_table_is_replaceable() {
        let mut t = DefaultTable::default();
        t.transient_statuses.push(500);
        t.terminal_codes.push("DAILY_CAP".into());
        let s = StatusCode::from_u16;
        assert_eq!(t.classify(Outcome::Answer { status: s(500).unwrap(), code: None }), Class::Transient);
        assert_eq!(t.classify(Outcome::Answer { status: s(429).unwrap(), code: Some("DAILY_CAP") }), Class::Terminal);
    }

    #[test]
    fn operation_classes() {
        assert_eq!(Operation::of(&Method::GET, false), Operation::Safe);
        assert_eq!(Operation::of(&Method::HEAD, true), Operation::Safe);
        assert_eq!(Operation::of(&Method::PUT, false), Operation::Idempotent);
        assert_eq!(Operation::of(&Method::DELETE, false), Operation::Idempotent);
        assert_eq!(Operation::of(&Method::POST, true), Operation::Keyed);
        assert_eq!(Operation::of(&Method::POST, false), Operation::Unsafe);
        assert_eq!(Operation::of(&Method::PATCH, false), Operation::Unsafe);
        assert!(!Operation::Unsafe.replayable());
        assert!(Operation::Keyed.replayable());
    }
}
