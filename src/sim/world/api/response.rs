//! Answers become responses, and every response is recorded in the ledger.
//!
//! All answers share the same headers: `content-type` (`application/json`, or
//! `text/html` for Flask-Limiter's page), the server's `Date` (unless turned
//! off), the request-rate headers in the configured form (when on, once the
//! caller is known), and the arrival index the network layer uses to mark a
//! lost answer.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};

use super::admission::Early;
use super::config::{Dialect, Preset, RateLimitFields, RateLimitedBody};
use super::dialect;
use super::endpoint::BudgetKind;
use super::envelope::{self, ErrorCode, JSON, Refusal, Style};
use super::habits;
use super::leaky;
use super::ledger::{Advertised, Settled};
use super::limiter::Standing;
use super::wallclock::WallTime;
use super::{Api, ArrivalOutcome, Caller, Meter, names};

/// An answer before it becomes a response: what to send and what to record.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) body: Bytes,
    pub(super) content_type: &'static str,
    pub(super) retry_after: Vec<String>,
    /// Headers after `Retry-After`: a dialect's fields, a script's own.
    pub(super) extra: Vec<(HeaderName, String)>,
    pub(super) replayed: bool,
    pub(super) meter: Meter,
    pub(super) settled: Settled,
}

impl Api {
    pub(super) fn early_answer(&self, early: Early, arrival: usize, now: Duration) -> Answer {
        match early {
            Early::Scripted(step) if step.status < 400 => {
                let settled = Settled {
                    status: step.status,
                    code: None,
                    outcome: ArrivalOutcome::Scripted,
                    advised: None,
                    dialect_advised: None,
                };
                let body = Bytes::from_static(br#"{"scripted":true}"#);
                let content_type = JSON;
                Answer {
                    status: step.status,
                    body,
                    content_type,
                    retry_after: Vec::new(),
                    extra: scripted_headers(&step.headers),
                    replayed: false,
                    meter: None,
                    settled,
                }
            }
            Early::Scripted(step) => {
                let wait = step.retry_after_s.map(Duration::from_secs);
                let headers = scripted_headers(&step.headers);
                let refusal = Refusal {
                    status: step.status,
                    code: step.code,
                    message: "Scripted answer".into(),
                    retry_after_s: step.retry_after_s,
                    written_codes: step.written_codes,
                    kind: None,
                };
                let mut answer = self.error_answer(&refusal, wait, ArrivalOutcome::Scripted, None, arrival, now);
                answer.extra.extend(headers);
                answer
            }
            Early::Refused { code, wait_s, wait, meter } => {
                let outcome = match code {
                    ErrorCode::IdempotencyInProgress => ArrivalOutcome::InProgressConflict,
                    ErrorCode::IdempotencyKeyReused => ArrivalOutcome::KeyReused,
                    ErrorCode::NotFound | ErrorCode::Unauthorized | ErrorCode::BadRequest => ArrivalOutcome::Rejected,
                    _ => ArrivalOutcome::Refused,
                };
                let mut refusal = Refusal::new(code, self.config.envelope, wait_s);
                if code == ErrorCode::RateLimited {
                    refusal.status = self.config.rate_limited_status;
                    match self.config.rate_limited_body {
                        RateLimitedBody::Html => return self.html_answer(refusal, wait, outcome, meter, now),
                        RateLimitedBody::Nginx => return self.nginx_answer(refusal, wait, outcome, meter, now),
                        RateLimitedBody::Envelope => {}
                    }
                }
                self.error_answer(&refusal, wait, outcome, meter, arrival, now)
            }
            Early::Replay { stored, meter } => {
                let settled = Settled {
                    status: stored.status,
                    code: None,
                    outcome: ArrivalOutcome::Replayed,
                    advised: None,
                    dialect_advised: None,
                };
                let (status, body) = (stored.status, stored.body);
                let retry_after = Vec::new();
                Answer {
                    status,
                    body,
                    content_type: JSON,
                    retry_after,
                    extra: Vec::new(),
                    replayed: true,
                    meter,
                    settled,
                }
            }
        }
    }

    /// How refusals are written right now.
    fn style(&self, now: Duration) -> Style {
        Style {
            envelope: self.config.envelope,
            advice: self.config.advice,
            date_form: self.config.date_form,
            wall: self.clock.at(now),
        }
    }

    /// A request-rate refusal as Flask-Limiter's HTML page: no code, the
    /// limit of the budget that refused in words, the wait only in the header.
    fn html_answer(
        &self,
        mut refusal: Refusal,
        wait: Option<Duration>,
        outcome: ArrivalOutcome,
        meter: Meter,
        now: Duration,
    ) -> Answer {
        refusal.code = None;
        let limiter = &self.config.limiter;
        let limit = match meter {
            Some((_, BudgetKind::Read)) => limiter.reads,
            _ => limiter.writes,
        };
        let page = habits::html_page(limit, Duration::from_millis(limiter.window_ms));
        let rendered = envelope::render_html(&refusal, &self.style(now), page);
        self.rendered_answer(&refusal, rendered, wait, outcome, meter, now)
    }

    /// A request-rate refusal as nginx's own error page for its status: no
    /// code, no wait in the body.
    fn nginx_answer(
        &self,
        mut refusal: Refusal,
        wait: Option<Duration>,
        outcome: ArrivalOutcome,
        meter: Meter,
        now: Duration,
    ) -> Answer {
        refusal.code = None;
        let page = leaky::nginx_page(refusal.status);
        let rendered = envelope::render_html(&refusal, &self.style(now), page);
        self.rendered_answer(&refusal, rendered, wait, outcome, meter, now)
    }

    fn error_answer(
        &self,
        refusal: &Refusal,
        wait: Option<Duration>,
        outcome: ArrivalOutcome,
        meter: Meter,
        arrival: usize,
        now: Duration,
    ) -> Answer {
        let rendered = match self.config.preset {
            Preset::None => envelope::render(refusal, &self.style(now), arrival),
            preset => {
                let asked = &self.ledger.arrivals[arrival];
                let body = preset.error_body(refusal, &asked.method, &asked.path);
                envelope::render_preset(refusal, &self.style(now), body)
            }
        };
        self.rendered_answer(refusal, rendered, wait, outcome, meter, now)
    }

    fn rendered_answer(
        &self,
        refusal: &Refusal,
        rendered: envelope::Rendered,
        wait: Option<Duration>,
        outcome: ArrivalOutcome,
        meter: Meter,
        now: Duration,
    ) -> Answer {
        let spoken = self.dialect_fields(refusal.status, wait, meter, now);
        let settled = Settled {
            status: refusal.status,
            code: refusal.code.clone(),
            outcome,
            advised: rendered.advised,
            dialect_advised: spoken.advised,
        };
        Answer {
            status: refusal.status,
            body: rendered.body,
            content_type: rendered.content_type,
            retry_after: rendered.retry_after_header,
            extra: spoken.fields,
            replayed: false,
            meter,
            settled,
        }
    }

    /// What the configured dialect says of a refusal of `status` that
    /// advises `wait`: nothing unless it is a 429 that advises a wait. The
    /// limit described is the budget the request drew from (a scripted
    /// answer, which draws from none, describes the writes').
    fn dialect_fields(&self, status: u16, wait: Option<Duration>, meter: Meter, now: Duration) -> dialect::Spoken {
        let (Some(wait), 429, true) = (wait, status, self.config.dialect != Dialect::None) else {
            return dialect::Spoken { fields: Vec::new(), advised: None };
        };
        let wall = self.clock.at(now);
        let limiter = &self.config.limiter;
        let window = Duration::from_millis(limiter.window_ms);
        let first = self.config.accounts.first().map_or("", |a| a.name.as_str());
        let (standing, window, policy, key) = match meter {
            Some((Caller::Account(i), budget)) => {
                let name = if budget == BudgetKind::Read { "reads" } else { "writes" };
                (self.accounts[i].standing(budget, now), window, name, self.accounts[i].name.as_str())
            }
            Some((Caller::Anonymous, _)) => {
                let cap = self.anonymous.as_ref().expect("anonymous callers have a cap");
                (cap.standing(wall), Duration::from_secs(3_600), "anonymous", "anonymous")
            }
            None => (Standing { limit: limiter.writes, remaining: 0, reset: wait }, window, "writes", first),
        };
        let refused =
            dialect::Refused { wait, full_reset: standing.reset, limit: standing.limit, window, policy, key, wall };
        self.config.dialect.speak(&refused)
    }

    /// Turns an answer into a response and records it in the ledger.
    pub(super) fn send(&mut self, arrival: usize, answer: Answer, now: Duration) -> Response<Bytes> {
        let wall = self.clock.at(now);
        let mut response = Response::new(answer.body);
        *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // Room for every header an answer can carry: no growing as they go in.
        *response.headers_mut() = HeaderMap::with_capacity(12);
        let date = self.config.send_date.then(|| self.date_value(wall));
        let headers = response.headers_mut();
        headers.append(header::CONTENT_TYPE, HeaderValue::from_static(answer.content_type));
        if let Some(date) = date {
            headers.append(header::DATE, date);
        }
        for value in answer.retry_after {
            headers.append(header::RETRY_AFTER, text_value(value));
        }
        for (name, value) in answer.extra {
            headers.append(name, text_value(value));
        }
        if let (true, Some((caller, budget))) = (self.config.rate_limit_headers, answer.meter) {
            let (standing, policy, window) = match caller {
                Caller::Account(i) => {
                    let name = if budget == BudgetKind::Read { "reads" } else { "writes" };
                    (self.accounts[i].standing(budget, now), name, Duration::from_millis(self.config.limiter.window_ms))
                }
                Caller::Anonymous => {
                    let cap = self.anonymous.as_ref().expect("anonymous callers have a cap");
                    (cap.standing(wall), "anonymous", Duration::from_secs(3_600))
                }
            };
            let Standing { limit, remaining, reset } = standing;
            self.ledger.advertise(arrival, Advertised { limit, remaining, reset });
            let fields = self.config.rate_limit_fields;
            let names = match fields {
                RateLimitFields::Draft6 | RateLimitFields::Draft6AndStructured => Some(DRAFT6_FIELDS),
                RateLimitFields::XRateLimit => Some(X_RATELIMIT_FIELDS),
                RateLimitFields::Structured => None,
            };
            if let Some([limit, remaining, reset]) = names {
                let reset_value = habits::reset_value(self.config.rate_limit_reset, standing.reset, wall);
                headers.append(limit, HeaderValue::from(standing.limit));
                headers.append(remaining, HeaderValue::from(standing.remaining));
                headers.append(reset, HeaderValue::from(reset_value));
            }
            if matches!(fields, RateLimitFields::Structured | RateLimitFields::Draft6AndStructured) {
                let (policy, current) = super::dialect::structured_fields(policy, standing, window);
                headers.append(RATELIMIT_POLICY, text_value(policy));
                headers.append(RATELIMIT, text_value(current));
            }
        }
        if answer.replayed {
            headers.append(names::REPLAYED.clone(), HeaderValue::from_static("true"));
        }
        headers.append(names::ARRIVAL.clone(), HeaderValue::from(arrival));
        self.ledger.settle(arrival, answer.settled, now);
        response
    }

    /// The `Date` of `wall`: formatted once per wall-clock second, as real
    /// servers keep it (hyper's server caches it the same way).
    fn date_value(&mut self, wall: WallTime) -> HeaderValue {
        let second = wall.unix_seconds();
        match &self.date {
            Some((s, value)) if *s == second => value.clone(),
            _ => {
                let value = text_value(wall.imf_fixdate());
                self.date = Some((second, value.clone()));
                value
            }
        }
    }
}

/// The request-rate fields of draft 6 and of the `X-RateLimit-*` habit:
/// limit, remaining, reset.
const DRAFT6_FIELDS: [HeaderName; 3] = [
    HeaderName::from_static("ratelimit-limit"),
    HeaderName::from_static("ratelimit-remaining"),
    HeaderName::from_static("ratelimit-reset"),
];
const X_RATELIMIT_FIELDS: [HeaderName; 3] = [
    HeaderName::from_static("x-ratelimit-limit"),
    HeaderName::from_static("x-ratelimit-remaining"),
    HeaderName::from_static("x-ratelimit-reset"),
];
/// Draft 10's structured fields.
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// A script's headers, as `ApiConfig::validate` let them through (one that
/// would not parse is left out rather than sent broken).
fn scripted_headers(headers: &[(String, String)]) -> Vec<(HeaderName, String)> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
            HeaderValue::from_str(value).is_ok().then(|| (name, value.clone()))
        })
        .collect()
}

/// A header value the model wrote: always visible ASCII.
fn text_value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).expect("every header value the model writes is visible ASCII")
}
