//! The knobs of a simulated API, as a user writes them in TOML.
//!
//! Every field has a default, and the defaults are brief 002's real Blinkimg API:
//! a fixed 60 s window of 120 writes and 1,200 reads per account, the Blinkimg
//! error envelope, `Retry-After` in seconds mirrored into the body's `resetAt`,
//! a `Date` header, no clock skew. A scenario changes only what it tests.

use serde::{Deserialize, Serialize};

/// One simulated API. Unknown TOML keys are an error (a typo must not silently
/// fall back to a default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// The real API the model stands in for (its routes, authentication,
    /// bodies and error envelope: [`Preset`]); `none` is the model's own.
    #[serde(skip_serializing_if = "is_default")]
    pub preset: Preset,
    /// The per-account request-rate limiter (separate read and write budgets).
    pub limiter: LimiterConfig,
    /// Accounts and their keys; keys of one account share its budgets.
    pub accounts: Vec<AccountConfig>,
    /// A server-wide cap on requests running at once (Sume's `queue_full`).
    pub concurrency: Option<ConcurrencyConfig>,
    /// Requests per wall-clock hour allowed without a key; `None` refuses
    /// keyless requests with 401.
    pub anonymous_cap: Option<u32>,
    /// The JSON shape of every error answer.
    pub envelope: Envelope,
    /// How a refusal's wait is told to the client.
    pub advice: AdviceForm,
    /// The HTTP-date form used when `advice` is `HeaderDate`.
    pub date_form: DateForm,
    /// Send a `Date` header (IMF-fixdate of the server's wall clock).
    pub send_date: bool,
    /// The server's wall clock at virtual time zero, seconds since the Unix epoch.
    pub epoch_unix_s: u64,
    /// How far the server's wall clock is ahead of the true one (negative: behind).
    pub clock_skew_ms: i64,
    /// A deliberate defect of the model, for the negative control of its
    /// self-check (`retrysim hunt --sabotage window-admits-one-more`): the
    /// fixed window admits one request more than its limit.
    #[serde(skip_serializing_if = "is_default")]
    pub window_admits_one_more: bool,
    /// A deliberate defect of the model, for the negative control of its
    /// advice check (`retrysim hunt --sabotage advice-rounds-down`): a
    /// request-rate refusal that promises to round its wait up to whole
    /// seconds truncates it, so the advice ends before the window's reset.
    #[serde(skip_serializing_if = "is_default")]
    pub advice_rounds_down: bool,
    /// A deliberate defect of the model, for the negative control of its
    /// idempotency check (`retrysim hunt --sabotage store-forgets-answers`):
    /// the idempotency store forgets a key once its request completes, so a
    /// repeat runs (and charges) again instead of being replayed.
    #[serde(skip_serializing_if = "is_default")]
    pub store_forgets_answers: bool,
    /// Send the request-rate headers (`rate_limit_fields` says which) on
    /// every answer that passed authentication.
    pub rate_limit_headers: bool,
    /// Which request-rate headers `rate_limit_headers` sends.
    #[serde(skip_serializing_if = "is_default")]
    pub rate_limit_fields: RateLimitFields,
    /// How `RateLimit-Reset` / `X-RateLimit-Reset` tells the reset.
    #[serde(skip_serializing_if = "is_default")]
    pub rate_limit_reset: ResetForm,
    /// How a request-rate refusal's wait becomes whole `Retry-After` seconds.
    #[serde(skip_serializing_if = "is_default")]
    pub retry_after_rounding: RetryAfterRounding,
    /// The body of a request-rate refusal (429 `RATE_LIMITED`).
    #[serde(skip_serializing_if = "is_default")]
    pub rate_limited_body: RateLimitedBody,
    /// The status of a request-rate refusal: 429, or nginx `limit_req`'s
    /// default 503 (`limit_req_status` sets it, 400..=599). Its code is still
    /// `RATE_LIMITED` in the ledger; the client sees only the status.
    #[serde(skip_serializing_if = "is_429")]
    pub rate_limited_status: u16,
    /// The rate-limit dialect every 429 that advises a wait speaks besides
    /// `Retry-After` (`advice = "none"`: instead of it). See
    /// [`Dialect`] and docs/guide/real-servers-habits.md.
    #[serde(skip_serializing_if = "is_default")]
    pub dialect: Dialect,
    /// How long an accepted request runs between `begin` and `complete`.
    pub processing_ms: u64,
    /// Answers handed to arriving requests, in order, before any other check.
    pub script: Vec<ScriptStep>,
    /// Start the script over when it runs out (instead of resuming normal handling).
    pub script_repeat: bool,
    /// How the API keeps connections open between requests (HTTP/1.1 keep-alive).
    #[serde(skip_serializing_if = "is_default")]
    pub keep_alive: KeepAlive,
}

/// HTTP/1.1 keep-alive as the server does it. The defaults are Fastify's
/// (the server behind brief 002's @fastify/rate-limit): `keepAliveTimeout`
/// 72 s and `maxRequestsPerSocket` 0, no cap (fastify.dev, "Server" options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeepAlive {
    /// Keep connections open after an answer; `false` sends `Connection:
    /// close` on every answer (an HTTP/1.0 server, gunicorn's sync workers).
    pub enabled: bool,
    /// How long an idle connection stays open before the server closes it
    /// (a FIN); 0: never (Python's `http.server`). nginx: 75 s, Node.js: 5 s,
    /// waitress: 120 s.
    pub idle_timeout_ms: u64,
    /// Answers on one connection, the last with `Connection: close`; 0: no
    /// cap (nginx's `keepalive_requests`: 1,000).
    pub max_requests: u32,
    /// Close the connection after every answer of status 400 or more
    /// (`Connection: close`), as CPython's `http.server` `send_error` and
    /// nginx's own error pages for 400, 413, 414, 500 and 501 do.
    pub close_after_error: bool,
}

impl KeepAlive {
    /// Whether the `served`-th answer on a connection (from 1), of
    /// `status`, closes it (`Connection: close`): the cap reached, or an
    /// error where the server closes after errors.
    pub fn closes_after(&self, served: u32, status: u16) -> bool {
        (self.max_requests > 0 && served >= self.max_requests) || (self.close_after_error && status >= 400)
    }
}

impl Default for KeepAlive {
    fn default() -> KeepAlive {
        KeepAlive { enabled: true, idle_timeout_ms: 72_000, max_requests: 0, close_after_error: false }
    }
}

impl Default for ApiConfig {
    fn default() -> ApiConfig {
        ApiConfig {
            preset: Preset::None,
            limiter: LimiterConfig::default(),
            accounts: vec![AccountConfig {
                name: "acme".into(),
                keys: vec!["key-a".into(), "key-b".into()],
                credits: None,
                monthly_quota: None,
            }],
            concurrency: None,
            anonymous_cap: None,
            envelope: Envelope::Blinkimg,
            advice: AdviceForm::Both,
            date_form: DateForm::ImfFixdate,
            send_date: true,
            epoch_unix_s: 1_791_450_000,
            window_admits_one_more: false,
            advice_rounds_down: false,
            store_forgets_answers: false,
            clock_skew_ms: 0,
            rate_limit_headers: false,
            rate_limit_fields: RateLimitFields::default(),
            rate_limit_reset: ResetForm::default(),
            retry_after_rounding: RetryAfterRounding::default(),
            rate_limited_body: RateLimitedBody::default(),
            rate_limited_status: 429,
            dialect: Dialect::default(),
            processing_ms: 0,
            script: Vec::new(),
            script_repeat: false,
            keep_alive: KeepAlive::default(),
        }
    }
}

impl ApiConfig {
    /// The calendar month `(year, 1..=12)` on the server's wall clock at
    /// virtual instant `now`: the month a quota reservation counts in.
    pub(crate) fn month_at(&self, now: std::time::Duration) -> (i64, u32) {
        self.wall_at(now).month()
    }

    /// The hour (since the Unix epoch) on the server's wall clock at virtual
    /// instant `now`: the hour the anonymous cap counts in.
    pub(crate) fn hour_at(&self, now: std::time::Duration) -> u64 {
        self.wall_at(now).hour()
    }

    fn wall_at(&self, now: std::time::Duration) -> super::wallclock::WallTime {
        super::wallclock::WallClock::new(self.epoch_unix_s, self.clock_skew_ms).at(now)
    }

    /// Finds what would make the model behave surprisingly: a zero window,
    /// an account without keys, a key claimed by two accounts (the first wins),
    /// a scripted status outside 100..=999 (sent as 500).
    pub fn validate(&self) -> Result<(), String> {
        if self.limiter.window_ms == 0 {
            return Err("limiter.window_ms = 0 would turn the limiter off: it must be at least 1 (ms)".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for account in &self.accounts {
            if account.keys.is_empty() {
                return Err(format!("account {:?} has no keys", account.name));
            }
            for key in &account.keys {
                if !seen.insert(key) {
                    return Err(format!("key {key:?} belongs to more than one account"));
                }
            }
        }
        if let Some(step) = self.script.iter().find(|s| !(100..=999).contains(&s.status)) {
            return Err(format!("script status {} is not an HTTP status", step.status));
        }
        if !(400..=599).contains(&self.rate_limited_status) {
            return Err(format!(
                "rate_limited_status = {} is not an error status: it must be in 400..=599 (429, or nginx's 503)",
                self.rate_limited_status
            ));
        }
        self.limiter.validate()?;
        if self.preset != Preset::None && self.advice == AdviceForm::BodyOnly {
            return Err(format!(
                "preset = \"{}\" writes its own error bodies, which have no place for a wait: advice = \"body_only\" would advise nothing; use \"header_seconds\", \"both\" (the header alone, under a preset) or \"none\"",
                self.preset.name()
            ));
        }
        if let Some(clash) = self.dialect_clash() {
            return Err(clash);
        }
        for (i, step) in self.script.iter().enumerate() {
            step.validate_headers().map_err(|e| format!("script step {} (status {}): {e}", i + 1, step.status))?;
        }
        Ok(())
    }
}

impl ApiConfig {
    /// Why `dialect` and the `rate_limit_headers` habit cannot go together,
    /// if they cannot: both would write a field of the same name on one
    /// refusal (two `RateLimit-Remaining` lines that disagree, or a
    /// `RateLimit` of two forms), which no real server sends.
    fn dialect_clash(&self) -> Option<String> {
        if !self.rate_limit_headers || self.dialect == Dialect::None {
            return None;
        }
        let habit: &[&str] = match self.rate_limit_fields {
            RateLimitFields::Draft6 => &["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"],
            RateLimitFields::XRateLimit => &["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"],
            RateLimitFields::Structured => &["ratelimit-policy", "ratelimit"],
            RateLimitFields::Draft6AndStructured => {
                &["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy", "ratelimit"]
            }
        };
        let clash = self.dialect.field_names().into_iter().find(|n| habit.contains(&n.as_str()))?;
        let fields = toml::Value::try_from(self.rate_limit_fields).map_or_else(|_| String::new(), |v| v.to_string());
        Some(format!(
            "dialect = \"{}\" and rate_limit_headers = true (rate_limit_fields = {fields}) both write {clash} on a refusal: turn rate_limit_headers off, or pick rate_limit_fields whose names the dialect does not use",
            self.dialect.name()
        ))
    }
}

/// Which algorithm counts requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimiterKind {
    /// @fastify/rate-limit: a window per account starting at its first hit;
    /// refused requests count too.
    FixedWindow,
    /// Capacity `limit`, refilled continuously at `limit` per window; refusals are free.
    TokenBucket,
    /// At most `limit` accepted requests in any trailing window; refusals are free.
    SlidingWindow,
    /// Flask-Limiter's `moving-window`, exactly as `limits`'
    /// `MovingWindowRateLimiter` over its memory storage does it: the sliding
    /// window above (refusals are free, a slot frees when its hit is one
    /// window old), except that a hit exactly one window after the
    /// `limit`-th newest accepted one is still refused. See `habits`.
    MovingWindow,
    /// nginx's `limit_req`: a leaky bucket kept in milliseconds that drains
    /// `writes` (or `reads`) per window; a request is refused when the
    /// excess it would leave passes `burst` (refusals are free), and an
    /// admitted request beyond the rate is *delayed* until the bucket has
    /// room for it, unless `nodelay`. See the module doc of `leaky`.
    LeakyBucket,
}

/// Request-rate budgets per account: `writes` and `reads` per `window_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimiterConfig {
    /// The limiting algorithm, after a real library.
    pub kind: LimiterKind,
    /// Writes (job and upload creation) allowed per window.
    pub writes: u32,
    /// Reads (job status) allowed per window.
    pub reads: u32,
    /// The window's length in milliseconds.
    pub window_ms: u64,
    /// `leaky_bucket` only: nginx's `burst`, the requests beyond the rate
    /// that are admitted (and delayed) rather than refused. 0: none.
    #[serde(skip_serializing_if = "is_default")]
    pub burst: u32,
    /// `leaky_bucket` only: nginx's `nodelay`, the burst is served at once
    /// instead of delayed.
    #[serde(skip_serializing_if = "is_default")]
    pub nodelay: bool,
}

impl Default for LimiterConfig {
    fn default() -> LimiterConfig {
        LimiterConfig {
            kind: LimiterKind::FixedWindow,
            writes: 120,
            reads: 1_200,
            window_ms: 60_000,
            burst: 0,
            nodelay: false,
        }
    }
}

impl LimiterConfig {
    /// `burst` and `nodelay` belong to the leaky bucket alone.
    fn validate(&self) -> Result<(), String> {
        if self.kind != LimiterKind::LeakyBucket && (self.burst != 0 || self.nodelay) {
            return Err(format!(
                "limiter.burst = {} and limiter.nodelay = {} are nginx's limit_req knobs: they need limiter.kind = \"leaky_bucket\"",
                self.burst, self.nodelay
            ));
        }
        Ok(())
    }
}

/// An account: its keys share one budget, one credit balance and one quota.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountConfig {
    /// The account's name, as the ledger records it.
    pub name: String,
    /// The API keys that draw on this account.
    pub keys: Vec<String>,
    /// The starting balance; `None` is unlimited.
    #[serde(default)]
    pub credits: Option<u64>,
    /// Credits the account may spend per calendar month (server wall clock).
    #[serde(default)]
    pub monthly_quota: Option<u64>,
}

/// A cap on requests running at once, refused with 429 `queue_full`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyConfig {
    /// Requests allowed to run at once on the whole API.
    pub max_in_flight: u32,
    /// The advised wait on `queue_full`; Sume's server default is 30 s (brief 000).
    #[serde(default = "default_queue_full_wait")]
    pub retry_after_s: u64,
}

fn default_queue_full_wait() -> u64 {
    30
}

/// The error body's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Envelope {
    /// `{"error":{"code","message","requestId","resetAt"}}` (brief 002).
    Blinkimg,
    /// `{"error":{"type","message","retry_after_seconds"}}` (brief 000).
    Sume,
}

/// How a refusal's wait reaches the client. The body hint is `resetAt` for
/// Blinkimg and `retry_after_seconds` for Sume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdviceForm {
    /// `Retry-After: N` only; the body has no wait hint.
    HeaderSeconds,
    /// `Retry-After: <HTTP-date>` in `date_form` only; the body has no wait hint.
    HeaderDate,
    /// No header; the wait only in the body.
    BodyOnly,
    /// `Retry-After: N` and the body hint (the real Blinkimg API).
    Both,
    /// No advice anywhere.
    None,
    /// `Retry-After: soon` and no body hint.
    Malformed,
    /// Several `Retry-After` lines in conflicting forms and no body hint:
    /// half the wait in seconds, `soon`, half the wait as an HTTP-date, then
    /// the wait in seconds. The largest valid line is the advice.
    SeveralLines,
}

/// Which request-rate headers an answer carries (with `rate_limit_headers`).
/// Every form describes the budget the request drew from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitFields {
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`: the IETF
    /// draft up to -06, as @fastify/rate-limit sends them with `enableDraftSpec`.
    #[default]
    Draft6,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`:
    /// Flask-Limiter's names, and @fastify/rate-limit's default ones.
    #[serde(rename = "x_ratelimit")]
    XRateLimit,
    /// The structured fields of draft-ietf-httpapi-ratelimit-headers-10:
    /// `RateLimit-Policy: "writes";q=30;w=1` and `RateLimit: "writes";r=12;t=1`.
    Structured,
    /// `Draft6` and `Structured` side by side, as a server migrating between them sends.
    Draft6AndStructured,
}

/// How the reset header (`RateLimit-Reset`, `X-RateLimit-Reset`) tells when
/// the budget is whole again. The structured field's `t` is always seconds left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResetForm {
    /// Whole seconds until the reset, rounded up (@fastify/rate-limit).
    #[default]
    SecondsLeft,
    /// The reset as whole Unix seconds, `int(reset + 1)` (Flask-Limiter): a
    /// client needs the answer's `Date` to turn it into a wait.
    UnixSeconds,
}

/// How a request-rate refusal's wait becomes whole `Retry-After` seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryAfterRounding {
    /// `max(1, ceil(wait))` (@fastify/rate-limit): never early, never zero.
    #[default]
    Up,
    /// Flask-Limiter's `int(int(reset + 1) - now)` on the server's wall clock:
    /// the whole seconds between now's second and the reset's. A reset in the
    /// current wall-clock second says `Retry-After: 0`, and the advice is up
    /// to a second early.
    Down,
    /// `int(reset - now)`: the wait truncated to whole seconds, so `0` for a
    /// whole 1 s window (tests/conformance/rounding_server.py).
    Truncate,
}

/// The body of a request-rate refusal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitedBody {
    /// The JSON `envelope`, with its error code.
    #[default]
    Envelope,
    /// Flask-Limiter's default: Werkzeug's HTML error page
    /// (`<title>429 Too Many Requests</title>`, `<p>30 per 1 second</p>`),
    /// `text/html`, no error code and no wait in the body.
    Html,
    /// nginx's own error page for `rate_limited_status`
    /// (`<title>503 Service Temporarily Unavailable</title>`, `text/html`),
    /// no error code and no wait in the body.
    Nginx,
}

fn is_429(status: &u16) -> bool {
    *status == 429
}

/// Whether a value is its type's default (such knobs stay out of the TOML,
/// so scenarios written before them print as they did).
fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// RFC 9110's three HTTP-date forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DateForm {
    /// `Sun, 06 Nov 1994 08:49:37 GMT`
    ImfFixdate,
    /// `Sunday, 06-Nov-94 08:49:37 GMT`
    Rfc850,
    /// `Sun Nov  6 08:49:37 1994`
    Asctime,
}

/// One scripted answer, e.g. "429 once, then normal" or "always 429, wait 30 s".
/// A scripted answer never charges; its advice follows `advice` and `envelope`.
///
/// Build one with [`ScriptStep::new`] and add what it writes besides with
/// the setters (each named as its field):
/// `ScriptStep::new(429, Some("RATE_LIMITED"), Some(2)).headers(vec![("retry-after-ms".into(), "1500".into())])`.
/// The struct is `#[non_exhaustive]`, so a knob added later breaks no
/// user's code; in TOML a missing optional key keeps its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ScriptStep {
    /// The status to answer; below 400 answers a scripted success.
    pub status: u16,
    /// The error code, written verbatim in either envelope; `None` omits it.
    #[serde(default)]
    pub code: Option<String>,
    /// The advised wait in seconds; `None` advises none.
    #[serde(default)]
    pub retry_after_s: Option<u64>,
    /// The code members the body writes in place of `code`, in order, e.g.
    /// `["QUOTA_EXCEEDED", "RATE_LIMITED"]`: a repeated name is legal JSON
    /// (RFC 8259 §4 leaves its meaning open), and a reader that keeps the
    /// last member sees another code. `code` stays what the answer means,
    /// which the ledger records and the checks judge by. Empty (the
    /// default): `code` alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub written_codes: Vec<String>,
    /// Headers the answer carries besides the model's own, in order, as
    /// `[name, value]` pairs: `headers = [["retry-after-ms", "1500"]]`. A
    /// name may repeat (several field lines). At most
    /// [`ScriptStep::MAX_HEADERS`], each value at most
    /// [`ScriptStep::MAX_HEADER_VALUE`] bytes of visible ASCII; not the
    /// transport's framing nor the model's own bookkeeping (see
    /// [`ScriptStep::validate_headers`]). The ledger records no advice from
    /// them: the checks judge only the advice the model words itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
}

impl ScriptStep {
    /// A step that answers `status` with `code` (written once) and advises
    /// `retry_after_s` seconds.
    pub fn new(status: u16, code: Option<&str>, retry_after_s: Option<u64>) -> ScriptStep {
        ScriptStep {
            status,
            code: code.map(str::to_owned),
            retry_after_s,
            written_codes: Vec::new(),
            headers: Vec::new(),
        }
    }

    /// This step, writing `codes` in place of `code`, in order (the field
    /// `written_codes`; empty: `code` alone).
    pub fn written_codes(mut self, codes: Vec<String>) -> ScriptStep {
        self.written_codes = codes;
        self
    }

    /// This step, carrying `headers` besides the model's own, in order (the
    /// field `headers`; checked by [`ScriptStep::validate_headers`] when the
    /// scenario is).
    pub fn headers(mut self, headers: Vec<(String, String)>) -> ScriptStep {
        self.headers = headers;
        self
    }

    /// The most headers one scripted answer may carry.
    pub const MAX_HEADERS: usize = 32;
    /// The longest value, in bytes, of a scripted header.
    pub const MAX_HEADER_VALUE: usize = 1_024;
    /// Headers a script may not set: the transport's framing, and the
    /// arrival number the network layer reads to mark a lost answer.
    pub const RESERVED_HEADERS: [&str; 5] =
        ["content-length", "transfer-encoding", "connection", "upgrade", super::ARRIVAL_HEADER];

    /// Whether `headers` can be sent: a legal name (RFC 9110 token, as the
    /// `http` crate checks it) not in [`ScriptStep::RESERVED_HEADERS`], a
    /// legal value of visible ASCII (spaces and tabs inside) no longer than
    /// [`ScriptStep::MAX_HEADER_VALUE`], and no more than
    /// [`ScriptStep::MAX_HEADERS`] of them. The error names the header and
    /// what is wrong.
    pub fn validate_headers(&self) -> Result<(), String> {
        if self.headers.len() > Self::MAX_HEADERS {
            return Err(format!("{} headers, at most {} allowed", self.headers.len(), Self::MAX_HEADERS));
        }
        for (name, value) in &self.headers {
            let parsed = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("header name {name:?} is not a legal field name (RFC 9110 token characters)"))?;
            if Self::RESERVED_HEADERS.contains(&parsed.as_str()) {
                return Err(format!(
                    "header {name:?} is set by the transport or the model, not a script (reserved: {})",
                    Self::RESERVED_HEADERS.join(", ")
                ));
            }
            if value.len() > Self::MAX_HEADER_VALUE {
                return Err(format!(
                    "header {name:?}: value of {} bytes, at most {} allowed",
                    value.len(),
                    Self::MAX_HEADER_VALUE
                ));
            }
            if !value.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)) || value.trim() != value {
                return Err(format!(
                    "header {name:?}: value {value:?} is not legal: visible ASCII, with spaces or tabs only inside"
                ));
            }
            http::HeaderValue::from_str(value).map_err(|e| format!("header {name:?}: value {value:?}: {e}"))?;
        }
        Ok(())
    }
}

/// A rate-limit dialect a refusal speaks besides (or instead of)
/// `Retry-After`. See the module doc of `sim::world::api::dialect` for each
/// one's source and rounding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// No fields of a dialect: the advice is `Retry-After` and the body's hint alone.
    #[default]
    None,
    /// draft-ietf-httpapi-ratelimit-headers-10/-11: `RateLimit: "writes";r=0;t=2`.
    Ietf,
    /// express-rate-limit `draft-6`: `RateLimit-Limit/-Remaining/-Reset`.
    ExpressDraft6,
    /// express-rate-limit `draft-7`: `RateLimit: limit=5, remaining=0, reset=37`.
    ExpressDraft7,
    /// express-rate-limit `draft-8`: `RateLimit: "5-in-1min"; r=0; t=37`.
    ExpressDraft8,
    /// OpenAI: `retry-after-ms`, `x-ratelimit-*-requests` / `-tokens`.
    #[serde(rename = "openai")]
    OpenAi,
    /// GitHub's primary limit: `x-ratelimit-remaining: 0`, `x-ratelimit-reset` in Unix seconds.
    #[serde(rename = "github")]
    GitHub,
}

/// Which real API the simulated one stands in for: its routes, its
/// authentication, its bodies and its error envelope (`presets` says each
/// one's details and sources).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// The model's own API: `POST /v1/jobs`, `x-api-key`, the `envelope` key's bodies.
    #[default]
    None,
    /// OpenAI's chat completions: `POST /v1/chat/completions`, `Authorization: Bearer`.
    #[serde(rename = "openai")]
    OpenAi,
    /// GitHub's REST issues: `POST /repos/{owner}/{repo}/issues`, `Authorization: Bearer`.
    #[serde(rename = "github")]
    GitHub,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_seed_002s_real_api() {
        let c = ApiConfig::default();
        assert_eq!(
            c.limiter,
            LimiterConfig {
                kind: LimiterKind::FixedWindow,
                writes: 120,
                reads: 1_200,
                window_ms: 60_000,
                ..LimiterConfig::default()
            }
        );
        assert_eq!(c.accounts[0].keys, ["key-a", "key-b"]);
        assert_eq!((c.envelope, c.advice, c.send_date), (Envelope::Blinkimg, AdviceForm::Both, true));
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn toml_overrides_only_what_it_names() {
        let c: ApiConfig = toml::from_str(
            r#"
            envelope = "sume"
            advice = "header_date"
            date_form = "rfc850"
            concurrency = { max_in_flight = 2 }
            [limiter]
            kind = "token_bucket"
            writes = 30
            window_ms = 1000
            "#,
        )
        .unwrap();
        assert_eq!(c.limiter.kind, LimiterKind::TokenBucket);
        assert_eq!((c.limiter.writes, c.limiter.reads), (30, 1_200));
        assert_eq!(c.concurrency, Some(ConcurrencyConfig { max_in_flight: 2, retry_after_s: 30 }));
        assert_eq!(c.date_form, DateForm::Rfc850);
        assert_eq!(c.accounts, ApiConfig::default().accounts);
    }

    #[test]
    fn the_habits_read_from_toml_and_default_to_fastifys() {
        let c = ApiConfig::default();
        assert_eq!(
            (c.rate_limit_fields, c.rate_limit_reset, c.retry_after_rounding, c.rate_limited_body),
            (RateLimitFields::Draft6, ResetForm::SecondsLeft, RetryAfterRounding::Up, RateLimitedBody::Envelope)
        );
        let c: ApiConfig = toml::from_str(
            r#"
            rate_limit_fields = "x_ratelimit"
            rate_limit_reset = "unix_seconds"
            retry_after_rounding = "down"
            rate_limited_body = "html"
            limiter = { kind = "moving_window" }
            "#,
        )
        .unwrap();
        assert_eq!(c.rate_limit_fields, RateLimitFields::XRateLimit);
        assert_eq!(c.rate_limit_reset, ResetForm::UnixSeconds);
        assert_eq!(c.retry_after_rounding, RetryAfterRounding::Down);
        assert_eq!(c.rate_limited_body, RateLimitedBody::Html);
        assert_eq!(c.limiter.kind, LimiterKind::MovingWindow);
        for fields in ["draft6", "structured", "draft6_and_structured"] {
            toml::from_str::<ApiConfig>(&format!("rate_limit_fields = {fields:?}")).unwrap();
        }
        // Left at their defaults, the habits stay out of the TOML.
        let text = toml::to_string(&ApiConfig::default()).unwrap();
        for key in ["rate_limit_fields", "rate_limit_reset", "retry_after_rounding", "rate_limited_body"] {
            assert!(!text.contains(key), "{key} in\n{text}");
        }
        let back: ApiConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn a_bad_habit_names_its_key_and_the_allowed_values() {
        let cases = [
            ("retry_after_rounding = \"nearest\"", "`up`, `down`, `truncate`"),
            ("rate_limit_reset = \"unix\"", "`seconds_left` or `unix_seconds`"),
            ("rate_limit_fields = \"ietf\"", "`draft6`, `x_ratelimit`, `structured`, `draft6_and_structured`"),
            ("rate_limited_body = \"text\"", "`envelope`, `html`, `nginx`"),
            ("limiter = { kind = \"moving\" }", "`moving_window`"),
        ];
        for (line, allowed) in cases {
            let e = toml::from_str::<ApiConfig>(line).unwrap_err().to_string();
            let key = line.split([' ', '=']).next().unwrap();
            assert!(e.contains(key) && e.contains(allowed), "{line}:\n{e}");
        }
    }

    #[test]
    fn unknown_keys_are_rejected() {
        assert!(toml::from_str::<ApiConfig>("windw_ms = 5").is_err());
        assert!(toml::from_str::<ApiConfig>("[limiter]\nwindw_ms = 5").is_err());
    }

    #[test]
    fn validate_names_the_problem() {
        let mut c = ApiConfig::default();
        c.accounts.push(AccountConfig {
            name: "b".into(),
            keys: vec!["key-a".into()],
            credits: None,
            monthly_quota: None,
        });
        assert_eq!(c.validate(), Err("key \"key-a\" belongs to more than one account".into()));
        c.limiter.window_ms = 0;
        assert!(c.validate().unwrap_err().contains("window_ms"));
    }
}
