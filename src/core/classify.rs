//! What an attempt's outcome means for the retry loop.
//!
//! A 429 is a *definite* refusal: nothing ran, so even an unsafe POST may be
//! sent again. A connection that broke after the request went out is
//! *ambiguous*: the server may have run it, so only a replayable operation may
//! be retried. The same status carries different meanings, so the body's
//! `error.code` (or `error.type`) decides between a full window and an
//! exhausted quota. A 429 without a code the table knows is still throttling
//! when the server advised a wait (a valid `Retry-After` or a body hint):
//! limiters such as Flask-Limiter answer an HTML page and `Retry-After`, and
//! that advice is the server saying "the window is full, come back then".
//! Advice in any dialect counts ([`read_advice`]: `RateLimit`,
//! `X-RateLimit-*`, `retry-after-ms`, ...), and a 403 whose headers show an
//! exhausted limit and carry advice is throttling too (GitHub's primary
//! limit answers 403 or 429 with `x-ratelimit-remaining: 0`).

use std::time::SystemTime;

use http::{HeaderMap, Method, StatusCode};
use serde::Serialize;

use super::advice::{Advice, limit_exhausted, read_advice};
use super::body::ErrorEnvelope;

/// How a transport failure relates to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportFailure {
    /// The request never left (connect refused, no route): nothing ran.
    NotSent,
    /// The request may have arrived (reset, timeout after sending): the
    /// server may have run it.
    MaybeArrived,
    /// The request cannot be sent as it is, and no retry can change that:
    /// an unsupported scheme, a URI without a host, a server certificate the
    /// client does not trust. Nothing was sent; the default table
    /// calls it [`Class::Terminal`], so the operation ends at the first attempt.
    Unsendable,
}

/// One attempt's outcome as the classifier sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// An answer: its status, the body's error code, its headers, and whether
    /// it carried valid advice. Build it with [`Outcome::answer`], which reads
    /// the code and the advice the same way the retry loop does.
    Answer {
        /// The answer's HTTP status.
        status: StatusCode,
        /// The body's `error.code` (else `error.type`), if the body is an envelope.
        code: Option<&'a str>,
        /// The response's headers, for tables that read vendor headers.
        headers: &'a HeaderMap,
        /// A valid advised wait exists: a valid `Retry-After` line, else the
        /// body's `error.retry_after_seconds` or `error.resetAt`, else any
        /// rate-limit dialect (see [`read_advice`]).
        advised: bool,
    },
    /// No answer.
    Transport(TransportFailure),
}

impl<'a> Outcome<'a> {
    /// The outcome of an answer, from its parsed error body (if any) and
    /// headers. `received_at` is the client's wall clock at receipt: it only
    /// anchors an RFC 850 date's two-digit year, so that "is the advice valid"
    /// is answered exactly as [`read_advice`] answers it.
    pub fn answer(
        status: StatusCode,
        headers: &'a HeaderMap,
        envelope: Option<&'a ErrorEnvelope>,
        received_at: SystemTime,
    ) -> Outcome<'a> {
        Outcome::advised(status, headers, envelope, &read_advice(headers, envelope, received_at))
    }

    /// [`Outcome::answer`] with the answer's advice already read by
    /// [`read_advice`], for a caller that acts on the advice too and reads
    /// the headers and body once.
    pub fn advised(
        status: StatusCode,
        headers: &'a HeaderMap,
        envelope: Option<&'a ErrorEnvelope>,
        advice: &Advice,
    ) -> Outcome<'a> {
        let code = envelope.and_then(|e| e.code.as_deref());
        Outcome::Answer { status, code, headers, advised: advice.wait.is_some() }
    }
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
    /// A 429 with no or an unknown code and no valid advice: a bounded
    /// number of retries.
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

/// The default table (docs/DESIGN.md "Classification").
///
/// A 429 whose code is in neither list is [`Class::Throttled`] when it
/// carries valid advice (`advised`) and [`Class::Unclear`]
/// otherwise. A listed terminal code wins over any advice: a quota does not
/// come back in 30 s because a header says so.
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
        let answer = match outcome {
            Outcome::Transport(TransportFailure::NotSent) => return Class::Transient,
            Outcome::Transport(TransportFailure::MaybeArrived) => return Class::Ambiguous,
            Outcome::Transport(TransportFailure::Unsendable) => return Class::Terminal,
            Outcome::Answer { status, code, advised, headers } => (status, code, advised, Some(headers)),
        };
        let (status, code, advised, headers) = answer;
        let listed = |list: &[String]| code.is_some_and(|c| list.iter().any(|l| l == c));
        match status.as_u16() {
            200..=299 => Class::Success,
            429 if listed(&self.throttled_codes) => Class::Throttled,
            429 if listed(&self.terminal_codes) => Class::Terminal,
            429 if advised => Class::Throttled,
            429 => Class::Unclear,
            // GitHub's primary limit: a 403 (or 429) with `x-ratelimit-remaining: 0`
            // (docs/DESIGN.md, "Rate-limit dialects"). Any other 403 is a refusal of access.
            403 if advised && headers.is_some_and(limit_exhausted) => Class::Throttled,
            409 if code.is_some_and(|c| c.eq_ignore_ascii_case("IDEMPOTENCY_IN_PROGRESS")) => Class::InProgress,
            s if self.transient_statuses.contains(&s) => Class::Transient,
            _ => Class::Terminal,
        }
    }
}

/// Classifies an answer as the driver does, and returns the code it acted on.
///
/// A body normally carries one code and this is `classifier.classify(
/// Outcome::answer(..))` with [`ErrorEnvelope::code`]. When the body repeats
/// the code member with different values ([`ErrorEnvelope::codes`]), the
/// first one the classifier calls [`Class::Terminal`] wins, else the last:
/// JSON leaves a repeated name's meaning open, and of the readings the one
/// that stops is the one that cannot waste a quota's refusals.
pub fn classify_answer<'a>(
    classifier: &dyn Classifier,
    status: StatusCode,
    headers: &'a HeaderMap,
    envelope: Option<&'a ErrorEnvelope>,
    received_at: SystemTime,
) -> (Class, Option<&'a str>) {
    let advice = read_advice(headers, envelope, received_at);
    classify_advised(classifier, status, headers, envelope, &advice)
}

/// [`classify_answer`] with the answer's advice already read by
/// [`read_advice`]: the driver reads it once, at one receipt time, for the
/// class and for the decision.
pub fn classify_advised<'a>(
    classifier: &dyn Classifier,
    status: StatusCode,
    headers: &'a HeaderMap,
    envelope: Option<&'a ErrorEnvelope>,
    advice: &Advice,
) -> (Class, Option<&'a str>) {
    let outcome = Outcome::advised(status, headers, envelope, advice);
    let Outcome::Answer { code, advised, .. } = outcome else {
        return (classifier.classify(outcome), None);
    };
    let codes = envelope.map_or(&[][..], |e| &e.codes[..]);
    if codes.len() > 1 {
        for c in codes {
            let one = Outcome::Answer { status, code: Some(c), headers, advised };
            if classifier.classify(one) == Class::Terminal {
                return (Class::Terminal, Some(c));
            }
        }
    }
    (classifier.classify(outcome), code)
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use http::HeaderValue;

    use super::*;

    static NO_HEADERS: LazyLock<HeaderMap> = LazyLock::new(HeaderMap::new);

    fn class(status: u16, code: Option<&str>) -> Class {
        let status = StatusCode::from_u16(status).unwrap();
        DefaultTable::default().classify(Outcome::Answer { status, code, headers: &NO_HEADERS, advised: false })
    }

    /// The class of a whole answer, as the driver builds it.
    fn class_of(status: u16, headers: &[(&'static str, &'static str)], body: &[u8]) -> Class {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(*n, HeaderValue::from_static(v));
        }
        let envelope = ErrorEnvelope::parse(body);
        let outcome =
            Outcome::answer(StatusCode::from_u16(status).unwrap(), &map, envelope.as_ref(), SystemTime::UNIX_EPOCH);
        DefaultTable::default().classify(outcome)
    }

    /// A repeated code member: a terminal code among them wins, in either order.
    #[test]
    fn a_terminal_code_among_repeated_codes_wins() {
        let map = HeaderMap::new();
        let run = |body: &[u8]| {
            let envelope = ErrorEnvelope::parse(body).unwrap();
            let (class, code) = classify_answer(
                &DefaultTable::default(),
                StatusCode::TOO_MANY_REQUESTS,
                &map,
                Some(&envelope),
                SystemTime::UNIX_EPOCH,
            );
            (class, code.map(str::to_owned))
        };
        let quota = (Class::Terminal, Some("QUOTA_EXCEEDED".to_owned()));
        assert_eq!(run(br#"{"error":{"code":"QUOTA_EXCEEDED","code":"RATE_LIMITED"}}"#), quota);
        assert_eq!(run(br#"{"error":{"code":"RATE_LIMITED","code":"QUOTA_EXCEEDED"}}"#), quota);
        // No terminal one: the last, as a JSON reader would see it.
        assert_eq!(
            run(br#"{"error":{"code":"SOMETHING_NEW","code":"RATE_LIMITED"}}"#),
            (Class::Throttled, Some("RATE_LIMITED".to_owned()))
        );
        // One code: exactly the classifier's answer.
        assert_eq!(run(br#"{"error":{"code":"queue_full","message":"a","message":"b"}}"#).0, Class::Throttled);
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
        assert_eq!(t.classify(Outcome::Transport(TransportFailure::Unsendable)), Class::Terminal);
    }

    #[test]
    fn a_429_with_valid_advice_and_no_known_code_is_throttled() {
        // Flask-Limiter's default refusal: an HTML page and `Retry-After`.
        let html = b"<!doctype html><title>429 Too Many Requests</title>";
        assert_eq!(class_of(429, &[("retry-after", "1")], html), Class::Throttled);
        // `Retry-After: 0` (truncated to whole seconds) is valid advice too.
        assert_eq!(class_of(429, &[("retry-after", "0")], b""), Class::Throttled);
        assert_eq!(class_of(429, &[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")], b""), Class::Throttled);
        // A body hint without a header, with an unknown code or none.
        assert_eq!(class_of(429, &[], br#"{"error":{"code":"SLOW_DOWN","retry_after_seconds":2}}"#), Class::Throttled);
        assert_eq!(
            class_of(429, &[], br#"{"error":{"message":"m","resetAt":"2026-10-17T09:12:31.000Z"}}"#),
            Class::Throttled
        );
        // Several lines, one valid: advice exists.
        assert_eq!(class_of(429, &[("retry-after", "soon"), ("retry-after", "3")], b""), Class::Throttled);
    }

    #[test]
    fn a_429_with_neither_advice_nor_a_known_code_stays_unclear() {
        assert_eq!(class_of(429, &[], b"<html>"), Class::Unclear);
        // Advice that is not valid is no advice.
        assert_eq!(class_of(429, &[("retry-after", "soon")], b""), Class::Unclear);
        assert_eq!(class_of(429, &[("retry-after", "-1")], br#"{"error":{"code":"SLOW_DOWN"}}"#), Class::Unclear);
        assert_eq!(class_of(429, &[], br#"{"error":{"retry_after_seconds":"2"}}"#), Class::Unclear);
        // Only a 429 is turned into throttling by advice.
        assert_eq!(class_of(400, &[("retry-after", "1")], b""), Class::Terminal);
    }

    #[test]
    fn a_known_code_wins_over_advice() {
        let quota = br#"{"error":{"code":"QUOTA_EXCEEDED"}}"#;
        assert_eq!(class_of(429, &[("retry-after", "30")], quota), Class::Terminal);
        assert_eq!(class_of(429, &[], br#"{"error":{"code":"RATE_LIMITED"}}"#), Class::Throttled);
    }

    #[test]
    fn the_table_is_replaceable() {
        let mut t = DefaultTable::default();
        t.transient_statuses.push(500);
        t.terminal_codes.push("DAILY_CAP".into());
        let s = StatusCode::from_u16;
        let h = &*NO_HEADERS;
        let answer = |status, code| Outcome::Answer { status, code, headers: h, advised: false };
        assert_eq!(t.classify(answer(s(500).unwrap(), None)), Class::Transient);
        assert_eq!(t.classify(answer(s(429).unwrap(), Some("DAILY_CAP"))), Class::Terminal);
    }

    /// A user's table can read the headers: here a vendor header that marks
    /// a daily quota, which no body code says.
    #[test]
    fn a_table_can_read_headers() {
        struct VendorQuota(DefaultTable);
        impl Classifier for VendorQuota {
            fn classify(&self, outcome: Outcome<'_>) -> Class {
                match outcome {
                    Outcome::Answer { headers, .. }
                        if headers.get("x-ratelimit-scope").is_some_and(|v| v == "daily") =>
                    {
                        Class::Terminal
                    }
                    _ => self.0.classify(outcome),
                }
            }
        }
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("3600"));
        let t = VendorQuota(DefaultTable::default());
        let at = SystemTime::UNIX_EPOCH;
        assert_eq!(t.classify(Outcome::answer(StatusCode::TOO_MANY_REQUESTS, &headers, None, at)), Class::Throttled);
        headers.insert("x-ratelimit-scope", HeaderValue::from_static("daily"));
        assert_eq!(t.classify(Outcome::answer(StatusCode::TOO_MANY_REQUESTS, &headers, None, at)), Class::Terminal);
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

    /// GitHub's primary limit answers 403 or 429 with `x-ratelimit-remaining:
    /// 0`: with advice, a 403 that shows an exhausted limit is throttling; a
    /// 403 without one, or without advice, is still a refusal of access.
    #[test]
    fn a_403_with_an_exhausted_limit_and_advice_is_throttled() {
        let received = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_791_450_000);
        let mut gh = HeaderMap::new();
        gh.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        gh.insert("x-ratelimit-reset", HeaderValue::from_static("1791450060"));
        let table = DefaultTable::default();
        let of = |status: u16, h: &HeaderMap| {
            classify_answer(&table, StatusCode::from_u16(status).unwrap(), h, None, received).0
        };
        assert_eq!(of(403, &gh), Class::Throttled);
        assert_eq!(of(429, &gh), Class::Throttled);
        // Remaining 0 but no reset: no advice, so a 403 stays terminal (and a 429 unclear).
        let mut no_reset = HeaderMap::new();
        no_reset.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        assert_eq!(of(403, &no_reset), Class::Terminal);
        assert_eq!(of(429, &no_reset), Class::Unclear);
        // Advice but quota left (GitHub's secondary limit sends Retry-After): terminal.
        let mut secondary = HeaderMap::new();
        secondary.insert("x-ratelimit-remaining", HeaderValue::from_static("4999"));
        secondary.insert("retry-after", HeaderValue::from_static("60"));
        assert_eq!(of(403, &secondary), Class::Terminal);
        // Any dialect's advice makes a code-less 429 throttled.
        let mut field = HeaderMap::new();
        field.insert("ratelimit", HeaderValue::from_static("\"default\";r=0;t=30"));
        assert_eq!(of(429, &field), Class::Throttled);
        assert_eq!(of(403, &field), Class::Throttled);
    }
}
