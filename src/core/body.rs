//! The JSON error envelope a rate-limited API sends with a refusal.
//!
//! Two shapes are in the wild and both are read:
//! `{"error":{"code","message","requestId","resetAt"}}` (Blinkimg, seed 002) and
//! `{"error":{"type","message","retry_after_seconds"}}` (Sume, seed 000).

use serde::Deserialize;

/// The fields of an error body the core acts on. Unknown fields are ignored;
/// a body that is not JSON, or has no `error` object, reads as `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorEnvelope {
    /// `error.code`, else `error.type`: what kind of refusal this is.
    pub code: Option<String>,
    /// `error.message`, kept for the caller's error text.
    pub message: Option<String>,
    /// `error.retry_after_seconds` as sent (validated by `retry_after`).
    pub retry_after_seconds: Option<serde_json::Value>,
    /// `error.resetAt` as sent: an RFC 3339 instant (validated by `retry_after`).
    pub reset_at: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Outer {
    error: Inner,
}

#[derive(Deserialize)]
struct Inner {
    code: Option<serde_json::Value>,
    #[serde(rename = "type")]
    kind: Option<serde_json::Value>,
    message: Option<serde_json::Value>,
    retry_after_seconds: Option<serde_json::Value>,
    #[serde(rename = "resetAt")]
    reset_at: Option<serde_json::Value>,
}

fn text(v: Option<serde_json::Value>) -> Option<String> {
    match v {
        Some(serde_json::Value::String(s)) => Some(s),
        _ => None,
    }
}

impl ErrorEnvelope {
    /// Reads the envelope from a response body; `None` when the body is not
    /// such an envelope (empty, not JSON, no `error` object).
    pub fn parse(body: &[u8]) -> Option<ErrorEnvelope> {
        let outer: Outer = serde_json::from_slice(body).ok()?;
        let e = outer.error;
        let code = text(e.code).or_else(|| text(e.kind));
        Some(ErrorEnvelope {
            code,
            message: text(e.message),
            retry_after_seconds: e.retry_after_seconds.filter(|v| !v.is_null()),
            reset_at: e.reset_at.filter(|v| !v.is_null()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_envelopes() {
        let b = ErrorEnvelope::parse(
            br#"{"error":{"code":"RATE_LIMITED","message":"m","requestId":"r","resetAt":"2026-10-17T09:12:31.000Z"}}"#,
        )
        .unwrap();
        assert_eq!(b.code.as_deref(), Some("RATE_LIMITED"));
        assert_eq!(b.reset_at, Some(serde_json::json!("2026-10-17T09:12:31.000Z")));
        let s = ErrorEnvelope::parse(br#"{"error":{"type":"queue_full","retry_after_seconds":30}}"#).unwrap();
        assert_eq!(s.code.as_deref(), Some("queue_full"));
        assert_eq!(s.retry_after_seconds, Some(serde_json::json!(30)));
    }

    #[test]
    fn not_an_envelope() {
        assert_eq!(ErrorEnvelope::parse(b""), None);
        assert_eq!(ErrorEnvelope::parse(b"<html>"), None);
        assert_eq!(ErrorEnvelope::parse(br#"{"ok":true}"#), None);
        assert_eq!(ErrorEnvelope::parse(br#"{"error":"nope"}"#), None);
    }
}
