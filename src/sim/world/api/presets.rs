//! Named-API presets: the simulated API wearing the face of an API people
//! call through typed clients, so that such a client, pointed at the model
//! by base URL, runs unchanged (`[api] preset`; docs/guide/typed-clients.md).
//!
//! A preset is the API's *face*: its routes and methods, how a caller
//! authenticates, the success bodies and the error envelope. Everything
//! behind the face is the model's and keeps its own keys: the limiter, the
//! accounts and their quotas, the idempotency store, the advice (`advice`,
//! `dialect`, `rate_limited_status`). The named scenarios `openai-chat` and
//! `github-issues` set those to what each API documents. The ledger keeps
//! the model's own codes (`RATE_LIMITED`, `QUOTA_EXCEEDED`), so every check
//! reads a preset's run as any other; only the wire speaks the preset.
//!
//! # OpenAI (`preset = "openai"`)
//! From the API reference (platform.openai.com/docs/api-reference/chat) and
//! the error-code guide (platform.openai.com/docs/guides/error-codes):
//! - `POST /v1/chat/completions` creates a completion: a job, charged as
//!   one (a body with a `model` string and a non-empty `messages` array,
//!   else 400). It answers 200 with a `chat.completion` object (`id`,
//!   `object`, `created`, `model`, `choices[].message`, `usage`: the model
//!   counts 1,000 tokens a request, as its `openai` dialect does).
//!   `GET /v1/chat/completions/{id}` reads a stored one (the read budget).
//! - `Authorization: Bearer <key>` (the account's key).
//! - Errors are `{"error":{"message","type","param","code"}}`: a request-rate
//!   refusal is 429 with `type: "requests"`, `code: "rate_limit_exceeded"`;
//!   a spent quota is 429 with `type` and `code` `"insufficient_quota"`
//!   (waiting does not help); a bad key 401 `invalid_api_key`; an unknown
//!   route 404 `Invalid URL (METHOD /path)`.
//!
//! # GitHub (`preset = "github"`)
//! From the REST docs (docs.github.com/en/rest/issues/issues, "Create an
//! issue", "Get an issue"; docs.github.com/en/rest/using-the-rest-api/
//! troubleshooting-the-rest-api):
//! - `POST /repos/{owner}/{repo}/issues` creates an issue: a job (a body
//!   with a `title`, else 400), answered 201 with the issue (`id`,
//!   `number`, `title`, `state`). `GET /repos/{owner}/{repo}/issues/{n}`
//!   reads one (the read budget; 404 for an issue never created).
//! - `Authorization: Bearer <token>` or `Authorization: token <token>`.
//! - Errors are `{"message","documentation_url"}`; the primary limit's is
//!   `API rate limit exceeded for user ID 1.` GitHub answers it 403 or 429
//!   with `x-ratelimit-remaining: 0` (the `github` dialect's fields); the
//!   model answers `rate_limited_status`, 429 unless set.
//!
//! Not modelled: streaming, tokens as a budget of their own, OpenAI's
//! `x-request-id`, GitHub's secondary limits and its 422 validation errors
//! (a body without a title is a 400 here).

use http::HeaderMap;
use serde::Deserialize;

use super::config::Preset;
use super::endpoint::Endpoint;
use super::envelope::{ErrorCode, Refusal};
use super::names;

/// What a request says about who sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential<'a> {
    /// No credential at all: anonymous.
    Absent,
    /// A key (or token) to look up.
    Key(&'a str),
    /// A credential that cannot be read: a 401.
    Unreadable,
}

/// The OpenAI model the preset names in its answers.
const OPENAI_MODEL: &str = "gpt-4o-mini";
/// Where GitHub's rate-limit errors point.
const GITHUB_RATE_LIMIT_DOCS: &str = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api";
/// Where GitHub's other errors point.
const GITHUB_DOCS: &str = "https://docs.github.com/rest";

impl Preset {
    /// Every preset that is not the model's own API.
    pub const NAMED: [Preset; 2] = [Preset::OpenAi, Preset::GitHub];

    /// The preset's name as a scenario writes it (`preset = "..."`).
    pub fn name(self) -> &'static str {
        match self {
            Preset::None => "none",
            Preset::OpenAi => "openai",
            Preset::GitHub => "github",
        }
    }

    /// Why retrysim's own clients cannot run against this preset (they call
    /// the model's `POST /v1/jobs`, which it does not serve), and what to do
    /// instead.
    pub(crate) fn refuses_own_client(self) -> String {
        format!(
            "[api] preset = \"{}\" serves that API's own routes, and retrysim's built-in clients call the model's (POST /v1/jobs): every job would end on a 404. Run your own client against it (`retrysim serve --config FILE` and point it at the address printed, or the harness's `run_subject`), or remove `preset` to run the built-in client",
            self.name()
        )
    }

    /// Routes a request; `None` is a 404. A preset's ids map onto the
    /// model's jobs (`chatcmpl-3` and issue 3 are `job_3`).
    pub(crate) fn route(self, method: &http::Method, path: &str) -> Option<Endpoint> {
        match self {
            Preset::None => Endpoint::route(method, path),
            Preset::OpenAi => match (method.as_str(), path) {
                ("POST", "/v1/chat/completions") => Some(Endpoint::CreateJob),
                ("GET", p) => {
                    let id = p.strip_prefix("/v1/chat/completions/")?.strip_prefix("chatcmpl-")?;
                    job_id(id)
                }
                _ => None,
            },
            Preset::GitHub => {
                let rest = repo_path(path)?;
                match (method.as_str(), rest) {
                    ("POST", "issues") => Some(Endpoint::CreateJob),
                    ("GET", r) => job_id(r.strip_prefix("issues/")?),
                    _ => None,
                }
            }
        }
    }

    /// The credential a request carries, where this API reads it.
    pub(crate) fn credential(self, headers: &HeaderMap) -> Credential<'_> {
        let (name, schemes): (&http::HeaderName, &[&str]) = match self {
            Preset::None => (&names::API_KEY, &[""]),
            Preset::OpenAi => (&http::header::AUTHORIZATION, &["Bearer "]),
            Preset::GitHub => (&http::header::AUTHORIZATION, &["Bearer ", "token "]),
        };
        let Some(value) = headers.get(name) else { return Credential::Absent };
        let Ok(text) = value.to_str() else { return Credential::Unreadable };
        schemes.iter().find_map(|s| text.strip_prefix(s)).map_or(Credential::Unreadable, Credential::Key)
    }

    /// What creating a job costs in credits, if its body is one the API
    /// takes; `None` is a 400.
    pub(crate) fn job_cost(self, body: &[u8]) -> Option<u64> {
        match self {
            Preset::None => super::endpoint::job_op(body).map(super::endpoint::Op::cost),
            Preset::OpenAi => {
                let chat: ChatRequest = serde_json::from_slice(body).ok()?;
                (!chat.model.is_empty() && !chat.messages.is_empty()).then_some(1)
            }
            Preset::GitHub => {
                let issue: IssueRequest = serde_json::from_slice(body).ok()?;
                (issue.title.is_string() || issue.title.is_number()).then_some(1)
            }
        }
    }

    /// The status and body of a job created as `id` (`job_N`) at `unix_s`.
    /// The model's own API is not answered here (`Api::complete` keeps it).
    pub(crate) fn created(self, id: &str, unix_s: u64) -> (u16, serde_json::Value) {
        let n = id.strip_prefix("job_").unwrap_or(id);
        match self {
            Preset::OpenAi => (200, chat_completion(n, unix_s)),
            Preset::GitHub | Preset::None => (201, issue(n)),
        }
    }

    /// The status and body of a read of job `id` (`job_N`).
    pub(crate) fn fetched(self, id: &str, unix_s: u64) -> (u16, serde_json::Value) {
        let (_, body) = self.created(id, unix_s);
        (200, body)
    }

    /// The error body of `refusal` in this API's envelope; `method` and
    /// `path` name an unknown route the way OpenAI does.
    pub(crate) fn error_body(self, refusal: &Refusal, method: &str, path: &str) -> serde_json::Value {
        let wait = refusal.retry_after_s.map_or(String::new(), |s| format!(" Please try again in {s}s."));
        match self {
            Preset::OpenAi => {
                let (message, kind, code) = match refusal.kind {
                    Some(ErrorCode::RateLimited | ErrorCode::QueueFull) => (
                        format!("Rate limit reached for {OPENAI_MODEL} on requests per min (RPM).{wait}"),
                        "requests",
                        Some("rate_limit_exceeded"),
                    ),
                    Some(ErrorCode::QuotaExceeded) => (
                        "You exceeded your current quota, please check your plan and billing details.".into(),
                        "insufficient_quota",
                        Some("insufficient_quota"),
                    ),
                    Some(ErrorCode::Unauthorized) => {
                        ("Incorrect API key provided.".into(), "invalid_request_error", Some("invalid_api_key"))
                    }
                    Some(ErrorCode::NotFound) => {
                        (format!("Invalid URL ({method} {path})"), "invalid_request_error", None)
                    }
                    Some(ErrorCode::BadRequest) => (
                        "Invalid request: 'model' and a non-empty 'messages' are required.".into(),
                        "invalid_request_error",
                        None,
                    ),
                    _ => (refusal.message.clone(), "invalid_request_error", refusal.code.as_deref()),
                };
                let error = serde_json::json!({ "message": message, "type": kind, "param": null, "code": code });
                serde_json::json!({ "error": error })
            }
            Preset::GitHub | Preset::None => {
                let (message, docs) = match refusal.kind {
                    Some(ErrorCode::RateLimited | ErrorCode::QueueFull | ErrorCode::QuotaExceeded) => {
                        ("API rate limit exceeded for user ID 1.".to_owned(), GITHUB_RATE_LIMIT_DOCS)
                    }
                    Some(ErrorCode::Unauthorized) => ("Bad credentials".into(), GITHUB_DOCS),
                    Some(ErrorCode::NotFound) => ("Not Found".into(), GITHUB_DOCS),
                    Some(ErrorCode::BadRequest) => ("Problems parsing JSON".into(), GITHUB_DOCS),
                    _ => (refusal.message.clone(), GITHUB_DOCS),
                };
                serde_json::json!({ "message": message, "documentation_url": docs })
            }
        }
    }
}

#[derive(Deserialize)]
struct ChatRequest {
    model: String,
    messages: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct IssueRequest {
    title: serde_json::Value,
}

/// `{owner}/{repo}/rest` of `/repos/{owner}/{repo}/rest`: the part after the repository.
fn repo_path(path: &str) -> Option<&str> {
    let mut parts = path.strip_prefix("/repos/")?.splitn(3, '/');
    let (owner, repo, rest) = (parts.next()?, parts.next()?, parts.next()?);
    (!owner.is_empty() && !repo.is_empty()).then_some(rest)
}

/// The model's job of a preset's number (`3` is `job_3`): digits only.
fn job_id(n: &str) -> Option<Endpoint> {
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| Endpoint::GetJob(format!("job_{n}")))
}

fn chat_completion(n: &str, unix_s: u64) -> serde_json::Value {
    serde_json::json!({
        "id": format!("chatcmpl-{n}"),
        "object": "chat.completion",
        "created": unix_s,
        "model": OPENAI_MODEL,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": format!("Simulated completion {n}."), "refusal": null },
            "finish_reason": "stop",
            "logprobs": null
        }],
        "usage": { "prompt_tokens": 900, "completion_tokens": 100, "total_tokens": 1000 }
    })
}

fn issue(n: &str) -> serde_json::Value {
    let number: u64 = n.parse().unwrap_or(0);
    serde_json::json!({ "id": number, "number": number, "title": format!("Issue {n}"), "state": "open" })
}

#[cfg(test)]
mod tests;
