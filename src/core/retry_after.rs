//! `Retry-After` (and the body's hints) to an advised wait.
//!
//! SKELETON: the helper implementing this file owns it; the public items below
//! are the contract the rest of the crate codes against.

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use serde::Serialize;

use super::body::ErrorEnvelope;

/// Where an advised wait came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AdviceSource {
    /// `Retry-After: 12`
    HeaderSeconds,
    /// `Retry-After: <HTTP-date>` in any of RFC 9110's three forms.
    HeaderDate,
    /// `error.retry_after_seconds` in the body.
    BodySeconds,
    /// `error.resetAt` in the body.
    BodyReset,
    /// No usable advice: the policy's backoff decides.
    None,
}

/// Why a `Retry-After` field value was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvalidRetryAfter {
    /// A short, human explanation, e.g. `"'+5' is not 1*DIGIT delta-seconds or an HTTP-date"`.
    pub reason: String,
}

/// What the header said, independent of which source was finally used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum HeaderState {
    /// No `Retry-After` field line.
    Missing,
    /// At least one field line was valid (the largest valid wait was taken).
    Valid,
    /// Field lines were present but none was valid.
    Invalid { reason: String },
}

/// The advised wait for one response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advice {
    pub source: AdviceSource,
    /// The advised wait before any jitter; `None` exactly when `source` is `None`.
    pub wait: Option<Duration>,
    pub header: HeaderState,
    /// True when a date was measured against the response's own valid `Date` header.
    pub server_date_used: bool,
}

impl Advice {
    /// No advice at all (e.g. a transport error).
    pub fn none() -> Advice {
        Advice { source: AdviceSource::None, wait: None, header: HeaderState::Missing, server_date_used: false }
    }
}

/// Parses strict delta-seconds: `1*DIGIT` (ASCII) after trimming spaces and tabs; saturates.
pub fn parse_delta_seconds(value: &[u8]) -> Result<u64, InvalidRetryAfter> {
    let _ = value;
    todo!()
}

/// Reads the advice of one response: its `Retry-After` field lines, its `Date`,
/// and its parsed error body; `received_at` is the client's wall clock at receipt.
pub fn read_advice(headers: &HeaderMap, body: Option<&ErrorEnvelope>, received_at: SystemTime) -> Advice {
    let _ = (headers, body, received_at);
    todo!()
}
