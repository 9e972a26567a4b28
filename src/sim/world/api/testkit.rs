//! Request builders and readers shared by the model's tests.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};

use super::{ApiConfig, LimiterConfig, LimiterKind};

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A request from worker `w1`; `headers` are (name, value) pairs.
pub(crate) fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Request<Bytes> {
    let mut b = Request::builder().method(method).uri(path).header("x-retrysim-client", "w1");
    for (name, value) in headers {
        b = b.header(*name, *value);
    }
    b.body(Bytes::from(body.to_owned())).unwrap()
}

pub(crate) fn job_body(op: &str) -> String {
    format!(r#"{{"uploadId":"u1","options":{{"op":"{op}"}}}}"#)
}

/// `POST /v1/jobs` with key `key-a`, an optional idempotency key, and `op`.
pub(crate) fn job(idem: Option<&str>, op: &str) -> Request<Bytes> {
    let mut headers = vec![("x-api-key", "key-a")];
    headers.extend(idem.map(|k| ("idempotency-key", k)));
    request("POST", "/v1/jobs", &headers, &job_body(op))
}

/// `POST /v1/uploads` with key `key-a` and an optional idempotency key.
pub(crate) fn upload(idem: Option<&str>) -> Request<Bytes> {
    let mut headers = vec![("x-api-key", "key-a")];
    headers.extend(idem.map(|k| ("idempotency-key", k)));
    request("POST", "/v1/uploads", &headers, r#"{"name":"a.png"}"#)
}

/// `GET path` with key `key`.
pub(crate) fn get(key: &str, path: &str) -> Request<Bytes> {
    request("GET", path, &[("x-api-key", key)], "")
}

/// A small fixed window: 3 writes and 5 reads per second.
pub(crate) fn small() -> ApiConfig {
    ApiConfig {
        limiter: LimiterConfig {
            kind: LimiterKind::FixedWindow,
            writes: 3,
            reads: 5,
            window_ms: 1_000,
            ..LimiterConfig::default()
        },
        ..ApiConfig::default()
    }
}

pub(crate) fn json(response: &Response<Bytes>) -> serde_json::Value {
    serde_json::from_slice(response.body()).unwrap()
}

pub(crate) fn text(response: &Response<Bytes>) -> &str {
    std::str::from_utf8(response.body()).unwrap()
}

pub(crate) fn header<'r>(response: &'r Response<Bytes>, name: &str) -> Option<&'r str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

/// The error code in either envelope.
pub(crate) fn code(response: &Response<Bytes>) -> String {
    let e = &json(response)["error"];
    e.get("code").or_else(|| e.get("type")).and_then(|c| c.as_str()).unwrap_or_default().to_owned()
}
