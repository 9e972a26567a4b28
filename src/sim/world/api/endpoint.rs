//! The API's routes, what each costs, and how long its answers are kept.

use std::time::Duration;

use serde::Deserialize;

/// Which request-rate budget a request draws from. Reads and writes are
/// counted apart so that polling cannot starve job creation (brief 002).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BudgetKind {
    Read,
    Write,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `POST /v1/jobs`: creates a job and charges its credits.
    CreateJob,
    /// `POST /v1/uploads`: stores an upload; free.
    CreateUpload,
    /// `GET /v1/jobs/<id>`: polls a job.
    GetJob(String),
    /// `PUT /v1/uploads/<id>`: stores an upload under the client's own id;
    /// free, and idempotent by its method (a repeat stores the same again).
    PutUpload(String),
}

/// How long a stored idempotent job answer is replayed (brief 002).
pub(crate) const JOB_RETENTION: Duration = Duration::from_secs(24 * 3_600);
/// How long a stored idempotent upload answer is replayed (brief 002).
pub(crate) const UPLOAD_RETENTION: Duration = Duration::from_secs(14 * 60);

impl Endpoint {
    /// Routes a request; `None` is a 404. The query string is ignored.
    pub(crate) fn route(method: &http::Method, path: &str) -> Option<Endpoint> {
        match (method.as_str(), path) {
            ("POST", "/v1/jobs") => Some(Endpoint::CreateJob),
            ("POST", "/v1/uploads") => Some(Endpoint::CreateUpload),
            ("GET", p) => one_segment(p, "/v1/jobs/").map(Endpoint::GetJob),
            ("PUT", p) => one_segment(p, "/v1/uploads/").map(Endpoint::PutUpload),
            _ => None,
        }
    }

    pub(crate) fn budget(&self) -> BudgetKind {
        match self {
            Endpoint::GetJob(_) => BudgetKind::Read,
            Endpoint::CreateJob | Endpoint::CreateUpload | Endpoint::PutUpload(_) => BudgetKind::Write,
        }
    }

    /// Only writes use the idempotency store; a read is safe to repeat anyway.
    pub(crate) fn retention(&self) -> Option<Duration> {
        match self {
            Endpoint::CreateJob => Some(JOB_RETENTION),
            Endpoint::CreateUpload => Some(UPLOAD_RETENTION),
            Endpoint::GetJob(_) | Endpoint::PutUpload(_) => None,
        }
    }
}

/// The one non-empty path segment after `prefix`, if that is all `path` is.
fn one_segment(path: &str, prefix: &str) -> Option<String> {
    let id = path.strip_prefix(prefix)?;
    (!id.is_empty() && !id.contains('/')).then(|| id.to_owned())
}

/// What a job does; it decides the price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Op {
    Compress,
    Convert,
}

impl Op {
    /// Credits per job: a compression costs 1, a conversion 2 (brief 002).
    pub(crate) fn cost(self) -> u64 {
        match self {
            Op::Compress => 1,
            Op::Convert => 2,
        }
    }
}

#[derive(Deserialize)]
struct JobRequest {
    #[serde(rename = "uploadId")]
    #[allow(dead_code)] // required by the API, unused by the model
    upload_id: String,
    options: JobOptions,
}

#[derive(Deserialize)]
struct JobOptions {
    op: Op,
}

/// Reads `{"uploadId":"u1","options":{"op":"compress"|"convert"}}`; `None` is a 400.
pub(crate) fn job_op(body: &[u8]) -> Option<Op> {
    serde_json::from_slice::<JobRequest>(body).ok().map(|r| r.options.op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn routes_and_budgets() {
        assert_eq!(Endpoint::route(&Method::POST, "/v1/jobs"), Some(Endpoint::CreateJob));
        assert_eq!(Endpoint::route(&Method::POST, "/v1/uploads"), Some(Endpoint::CreateUpload));
        let get = Endpoint::route(&Method::GET, "/v1/jobs/job_3").unwrap();
        assert_eq!((get.clone(), get.budget()), (Endpoint::GetJob("job_3".into()), BudgetKind::Read));
        assert_eq!(Endpoint::CreateUpload.budget(), BudgetKind::Write);
        let put = Endpoint::route(&Method::PUT, "/v1/uploads/u7").unwrap();
        assert_eq!(
            (put.clone(), put.budget(), put.retention()),
            (Endpoint::PutUpload("u7".into()), BudgetKind::Write, None)
        );
        for (m, p) in [
            (Method::GET, "/v1/jobs"),
            (Method::GET, "/v1/jobs/"),
            (Method::PUT, "/v1/jobs"),
            (Method::PUT, "/v1/uploads/"),
            (Method::DELETE, "/v1/uploads/u1"),
            (Method::POST, "/v2/jobs"),
        ] {
            assert_eq!(Endpoint::route(&m, p), None, "{m} {p}");
        }
    }

    #[test]
    fn compress_costs_one_convert_two() {
        assert_eq!(job_op(br#"{"uploadId":"u1","options":{"op":"compress"}}"#).map(Op::cost), Some(1));
        assert_eq!(job_op(br#"{"uploadId":"u1","options":{"op":"convert"}}"#).map(Op::cost), Some(2));
        assert_eq!(job_op(br#"{"uploadId":"u1","options":{"op":"resize"}}"#), None);
        assert_eq!(job_op(br#"{"options":{"op":"compress"}}"#), None);
    }

    #[test]
    fn retention_is_a_day_for_jobs_and_fourteen_minutes_for_uploads() {
        assert_eq!(Endpoint::CreateJob.retention(), Some(Duration::from_secs(86_400)));
        assert_eq!(Endpoint::CreateUpload.retention(), Some(Duration::from_secs(840)));
        assert_eq!(Endpoint::GetJob("j".into()).retention(), None);
    }
}
