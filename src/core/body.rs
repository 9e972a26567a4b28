//! The JSON error envelope a rate-limited API sends with a refusal.
//!
//! Two shapes are in the wild and both are read:
//! `{"error":{"code","message","requestId","resetAt"}}` (Blinkimg, brief 002) and
//! `{"error":{"type","message","retry_after_seconds"}}` (Sume, brief 000).

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The fields of an error body the core acts on. Unknown fields are ignored;
/// a body that is not JSON, or has no `error` object, reads as `None`.
///
/// Any body that holds the envelope is read, however the rest of it looks:
/// a leading UTF-8 byte-order mark is skipped, a member whose value cannot be
/// read (`1e400` is beyond `f64`) spoils only that member, and duplicate
/// member names, legal JSON (RFC 8259 §4), are all kept in view rather than
/// failing the body. For a duplicated hint or message the last readable value
/// wins, as in `JSON.parse` and `serde_json::Value`; for a duplicated code see
/// [`ErrorEnvelope::codes`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorEnvelope {
    /// `error.code`, else `error.type`: what kind of refusal this is. With
    /// several, the last one (what most JSON readers would see).
    pub code: Option<String>,
    /// Every string `error.code` member in document order, else every
    /// `error.type`; more than one only when the body repeats the member.
    /// RFC 8259 leaves a repeated name's meaning to the reader, so the driver
    /// lets a terminal code among them win
    /// ([`classify_answer`](super::classify::classify_answer)): a body that
    /// says `QUOTA_EXCEEDED` anywhere is a refusal that waiting cannot fix,
    /// and retrying it on the strength of another copy would spend the
    /// quota's refusals for nothing.
    pub codes: Vec<String>,
    /// `error.message`, kept for the caller's error text.
    pub message: Option<String>,
    /// `error.retry_after_seconds` as sent (validated by `retry_after`).
    pub retry_after_seconds: Option<serde_json::Value>,
    /// `error.resetAt` as sent: an RFC 3339 instant (validated by `retry_after`).
    pub reset_at: Option<serde_json::Value>,
}

/// A member name, borrowed from the body unless it has escapes to undo.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// What the `error` objects of a body say, gathered in one pass over each
/// in document order. Every value is first only scanned (`RawValue`,
/// `IgnoredAny`: `serde_json`'s `ignore_value`), so a number out of range
/// fails nothing until the one member that holds it is read.
#[derive(Default)]
struct Gathered {
    /// How many `error` members were objects.
    errors: usize,
    codes: Vec<String>,
    types: Vec<String>,
    message: Option<String>,
    retry_after_seconds: Option<serde_json::Value>,
    reset_at: Option<serde_json::Value>,
}

/// A member's value when it is a string.
fn string(raw: &RawValue) -> Option<String> {
    let text = raw.get();
    // Checked first so a number or an object costs no error value.
    text.starts_with('"').then(|| serde_json::from_str(text).ok()).flatten()
}

/// A member's value when it is readable and not null.
fn value(raw: &RawValue) -> Option<serde_json::Value> {
    serde_json::from_str::<serde_json::Value>(raw.get()).ok().filter(|v| !v.is_null())
}

impl Gathered {
    /// One member of an `error` object.
    fn member(&mut self, name: &str, raw: &RawValue) {
        match name {
            "code" => self.codes.extend(string(raw)),
            "type" => self.types.extend(string(raw)),
            "message" => self.message = string(raw).or(self.message.take()),
            "retry_after_seconds" => self.retry_after_seconds = value(raw).or(self.retry_after_seconds.take()),
            "resetAt" => self.reset_at = value(raw).or(self.reset_at.take()),
            _ => {}
        }
    }

    /// One `error` member: read when it is an object, skipped otherwise.
    fn error(&mut self, raw: &RawValue) {
        // `raw` is valid JSON already, so reading it fails only when it is not
        // an object, before any member is visited.
        let Ok(ErrorObject(one)) = serde_json::from_str::<ErrorObject>(raw.get()) else { return };
        self.errors += 1;
        self.codes.extend(one.codes);
        self.types.extend(one.types);
        self.message = one.message.or(self.message.take());
        self.retry_after_seconds = one.retry_after_seconds.or(self.retry_after_seconds.take());
        self.reset_at = one.reset_at.or(self.reset_at.take());
    }
}

/// The members of one `error` object, as [`Gathered`].
struct ErrorObject(Gathered);

impl<'de> Deserialize<'de> for ErrorObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ErrorObject;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ErrorObject, A::Error> {
                let mut one = Gathered::default();
                while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
                    one.member(&name, map.next_value::<&'de RawValue>()?);
                }
                Ok(ErrorObject(one))
            }
        }
        d.deserialize_map(V)
    }
}

/// A whole body: an object whose `error` members are gathered.
struct Body(Gathered);

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Body;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
                let mut all = Gathered::default();
                while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
                    if name == "error" {
                        all.error(map.next_value::<&'de RawValue>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Body(all))
            }
        }
        d.deserialize_map(V)
    }
}

impl ErrorEnvelope {
    /// Reads the envelope from a response body; `None` when the body is not
    /// such an envelope (empty, not JSON, no `error` object). Never an error:
    /// an HTML 429 page is simply a body without a code.
    pub fn parse(body: &[u8]) -> Option<ErrorEnvelope> {
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        let Body(all) = serde_json::from_slice(body).ok()?;
        if all.errors == 0 {
            return None;
        }
        // `type` only when no string `code` is present.
        let codes = if all.codes.is_empty() { all.types } else { all.codes };
        Some(ErrorEnvelope {
            code: codes.last().cloned(),
            codes,
            message: all.message,
            retry_after_seconds: all.retry_after_seconds,
            reset_at: all.reset_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward reader the one-pass [`ErrorEnvelope::parse`]
    /// replaced, kept as its reference: every member of the body and of each
    /// `error` object collected first (duplicates kept, values unparsed),
    /// then each field looked up by name.
    fn reference(body: &[u8]) -> Option<ErrorEnvelope> {
        struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);
        impl<'de> Deserialize<'de> for Members<'de> {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = Members<'de>;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a JSON object")
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                        let mut members = Vec::new();
                        while let Some((Name(name), raw)) = map.next_entry::<Name<'de>, &'de RawValue>()? {
                            members.push((name, raw));
                        }
                        Ok(Members(members))
                    }
                }
                d.deserialize_map(V)
            }
        }
        fn parse(json: &[u8]) -> Option<Members<'_>> {
            serde_json::from_slice(json).ok()
        }
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        let outer = parse(body)?;
        let errors: Vec<Members> =
            outer.0.iter().filter(|(k, _)| k == "error").filter_map(|(_, raw)| parse(raw.get().as_bytes())).collect();
        if errors.is_empty() {
            return None;
        }
        let raws = |name: &'static str| {
            errors.iter().flat_map(|e| e.0.iter()).filter(move |(k, _)| k == name).map(|(_, raw)| raw.get())
        };
        let text = |name| raws(name).filter_map(|raw| serde_json::from_str::<String>(raw).ok()).collect::<Vec<_>>();
        let last = |name| {
            raws(name).filter_map(|raw| serde_json::from_str::<serde_json::Value>(raw).ok()).rfind(|v| !v.is_null())
        };
        let codes = text("code");
        let codes = if codes.is_empty() { text("type") } else { codes };
        Some(ErrorEnvelope {
            code: codes.last().cloned(),
            message: text("message").pop(),
            retry_after_seconds: last("retry_after_seconds"),
            reset_at: last("resetAt"),
            codes,
        })
    }

    /// Every `error` object of up to two members drawn from the names the
    /// reader looks for (one spelled with an escape) and values of every
    /// kind it must tell apart, inside six kinds of body: the one-pass
    /// reader agrees with the reference on each.
    #[test]
    fn the_one_pass_reader_agrees_with_the_reference() {
        let names = ["code", "type", "message", "retry_after_seconds", "resetAt", "requestId", "c\\u006fde"];
        let values = [
            r#""QUOTA_EXCEEDED""#,
            r#""a\"b""#,
            r#""\ud800""#,
            "7",
            "3",
            "2.5",
            "1e400",
            "-1e400",
            "null",
            "true",
            "{}",
            "[1e999]",
            r#""2026-10-17T09:12:31Z""#,
        ];
        let members: Vec<String> =
            names.iter().flat_map(|n| values.iter().map(move |v| format!("\"{n}\":{v}"))).collect();
        let mut objects = vec!["{}".to_owned()];
        for a in &members {
            objects.push(format!("{{{a}}}"));
            for b in &members {
                objects.push(format!("{{{a},{b}}}"));
            }
        }
        let mut compared = 0;
        for o in &objects {
            for body in [
                format!(r#"{{"error":{o}}}"#),
                format!(r#"{{"error":{o},"error":"x"}}"#),
                format!(r#"{{"x":1e400,"error":{o}}}"#),
                format!("\u{feff}{{\"error\":{o}}}"),
                format!(r#"{{"error":{o}}} trailing"#),
                format!(r#"{{"error":{o},"error":{{"code":"B","message":"m"}}}}"#),
                format!(r#"{{"error":{{"type":"t","retry_after_seconds":1}},"error":{o}}}"#),
            ] {
                assert_eq!(ErrorEnvelope::parse(body.as_bytes()), reference(body.as_bytes()), "{body}");
                compared += 1;
            }
        }
        assert_eq!(compared, 7 * (1 + 91 + 91 * 91));
    }

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

    /// Members the core does not read must not hide the ones it does.
    #[test]
    fn a_duplicate_member_keeps_the_code() {
        let b = ErrorEnvelope::parse(br#"{"error":{"code":"QUOTA_EXCEEDED","message":"a","message":"b"}}"#).unwrap();
        assert_eq!(b.code.as_deref(), Some("QUOTA_EXCEEDED"));
        let b = ErrorEnvelope::parse(br#"{"error":{"code":"QUOTA_EXCEEDED"},"error2":1,"error2":2}"#).unwrap();
        assert_eq!(b.code.as_deref(), Some("QUOTA_EXCEEDED"));
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let b = ErrorEnvelope::parse(b"\xEF\xBB\xBF{\"error\":{\"code\":\"QUOTA_EXCEEDED\"}}").unwrap();
        assert_eq!(b.code.as_deref(), Some("QUOTA_EXCEEDED"));
    }

    /// `1e400` is out of `f64`'s range: that hint is invalid, the rest of the body stands.
    #[test]
    fn an_out_of_range_number_spoils_only_its_hint() {
        let b = ErrorEnvelope::parse(
            br#"{"error":{"code":"QUOTA_EXCEEDED","retry_after_seconds":1e400,"resetAt":"2026-10-17T09:12:31Z"}}"#,
        )
        .unwrap();
        assert_eq!(b.code.as_deref(), Some("QUOTA_EXCEEDED"));
        assert_eq!(b.retry_after_seconds, None);
        assert_eq!(b.reset_at, Some(serde_json::json!("2026-10-17T09:12:31Z")));
        // Elsewhere in the body it is just an ignored member.
        let b = ErrorEnvelope::parse(br#"{"n":-1e400,"error":{"type":"queue_full","x":[1e999]}}"#).unwrap();
        assert_eq!(b.code.as_deref(), Some("queue_full"));
    }

    /// What `serde_json` does with a repeated name, which is why the envelope is not read
    /// through a derived struct: a struct refuses the body, a `Value` keeps the last.
    #[test]
    fn serde_json_on_duplicate_names() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code, reason = "only whether it parses matters")]
        struct Typed {
            message: String,
        }
        let dup = br#"{"message":"a","message":"b"}"#;
        let err = serde_json::from_slice::<Typed>(dup).unwrap_err();
        assert!(err.to_string().contains("duplicate field `message`"), "{err}");
        let v: serde_json::Value = serde_json::from_slice(dup).unwrap();
        assert_eq!(v["message"], "b");
        // And it refuses a number beyond f64 and a byte-order mark outright.
        assert!(serde_json::from_slice::<serde_json::Value>(b"1e400").is_err());
        assert!(serde_json::from_slice::<serde_json::Value>(b"\xEF\xBB\xBF{}").is_err());
    }

    #[test]
    fn repeated_members_last_readable_wins_and_every_code_is_kept() {
        let b = ErrorEnvelope::parse(
            br#"{"error":{"code":"QUOTA_EXCEEDED","code":"RATE_LIMITED","code":7,"message":"a","message":"b",
                "retry_after_seconds":3,"retry_after_seconds":1e400,"resetAt":null}}"#,
        )
        .unwrap();
        assert_eq!(b.codes, ["QUOTA_EXCEEDED", "RATE_LIMITED"]);
        assert_eq!(b.code.as_deref(), Some("RATE_LIMITED"));
        assert_eq!(b.message.as_deref(), Some("b"));
        assert_eq!(b.retry_after_seconds, Some(serde_json::json!(3)));
        assert_eq!(b.reset_at, None);
        // `error` itself repeated: both objects are read, in order.
        let b = ErrorEnvelope::parse(br#"{"error":{"code":"A"},"error":"x","error":{"type":"t","code":"B"}}"#).unwrap();
        assert_eq!((b.codes, b.code.as_deref()), (vec!["A".to_owned(), "B".to_owned()], Some("B")));
        // `type` only when no string `code` is present.
        let b = ErrorEnvelope::parse(br#"{"error":{"code":null,"type":"queue_full"}}"#).unwrap();
        assert_eq!((b.codes, b.code.as_deref()), (vec!["queue_full".to_owned()], Some("queue_full")));
    }

    #[test]
    fn a_body_that_is_not_an_envelope_is_none_never_an_error() {
        for body in [
            &b"<!doctype html><title>429 Too Many Requests</title>"[..],
            b"\xEF\xBB\xBF",
            b"\xEF\xBB\xBF<html>",
            b"{\"error\":{\"code\":\"X\"}",
            b"{\"error\":{\"code\":\"X\"}} trailing",
            b"[{\"error\":{\"code\":\"X\"}}]",
            b"\xff\xfe{",
        ] {
            assert_eq!(ErrorEnvelope::parse(body), None, "{}", body.escape_ascii());
        }
    }
}
