//! Answers become responses, and every response is recorded in the ledger.
//!
//! All answers share the same headers: `content-type: application/json`, the
//! server's `Date` (unless turned off), `RateLimit-*` (when on, once the caller
//! is known), and the arrival index the network layer uses to mark a lost answer.

use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode, header};

use super::admission::Early;
use super::envelope::{self, ErrorCode, Refusal, Style};
use super::ledger::Settled;
use super::limiter::ceil_seconds;
use super::{ARRIVAL_HEADER, Api, ArrivalOutcome, Caller, Meter, REPLAYED_HEADER};

/// An answer before it becomes a response: what to send and what to record.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) body: Bytes,
    pub(super) retry_after: Option<String>,
    pub(super) replayed: bool,
    pub(super) meter: Meter,
    pub(super) settled: Settled,
}

impl Api {
    pub(super) fn early_answer(&self, early: Early, arrival: usize, now: Duration) -> Answer {
        match early {
            Early::Scripted(step) if step.status < 400 => {
                let settled =
                    Settled { status: step.status, code: None, outcome: ArrivalOutcome::Scripted, advised: None };
                let body = Bytes::from_static(br#"{"scripted":true}"#);
                Answer { status: step.status, body, retry_after: None, replayed: false, meter: None, settled }
            }
            Early::Scripted(step) => {
                let refusal = Refusal {
                    status: step.status,
                    code: step.code,
                    message: "Scripted answer".into(),
                    retry_after_s: step.retry_after_s,
                };
                self.error_answer(&refusal, ArrivalOutcome::Scripted, None, arrival, now)
            }
            Early::Refused { code, wait_s, meter } => {
                let outcome = match code {
                    ErrorCode::IdempotencyInProgress => ArrivalOutcome::InProgressConflict,
                    ErrorCode::IdempotencyKeyReused => ArrivalOutcome::KeyReused,
                    ErrorCode::NotFound | ErrorCode::Unauthorized | ErrorCode::BadRequest => ArrivalOutcome::Rejected,
                    _ => ArrivalOutcome::Refused,
                };
                let refusal = Refusal::new(code, self.config.envelope, wait_s);
                self.error_answer(&refusal, outcome, meter, arrival, now)
            }
            Early::Replay { stored, meter } => {
                let settled =
                    Settled { status: stored.status, code: None, outcome: ArrivalOutcome::Replayed, advised: None };
                Answer { status: stored.status, body: stored.body, retry_after: None, replayed: true, meter, settled }
            }
        }
    }

    fn error_answer(
        &self,
        refusal: &Refusal,
        outcome: ArrivalOutcome,
        meter: Meter,
        arrival: usize,
        now: Duration,
    ) -> Answer {
        let style = Style {
            envelope: self.config.envelope,
            advice: self.config.advice,
            date_form: self.config.date_form,
            wall: self.clock.at(now),
        };
        let rendered = envelope::render(refusal, &style, arrival);
        let settled =
            Settled { status: refusal.status, code: refusal.code.clone(), outcome, advised: rendered.advised };
        Answer {
            status: refusal.status,
            body: rendered.body,
            retry_after: rendered.retry_after_header,
            replayed: false,
            meter,
            settled,
        }
    }

    /// Turns an answer into a response and records it in the ledger.
    pub(super) fn send(&mut self, arrival: usize, answer: Answer, now: Duration) -> Response<Bytes> {
        let wall = self.clock.at(now);
        let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = Response::builder().status(status).header(header::CONTENT_TYPE, "application/json");
        if self.config.send_date {
            response = response.header(header::DATE, wall.imf_fixdate());
        }
        if let Some(value) = &answer.retry_after {
            response = response.header(header::RETRY_AFTER, value);
        }
        if let (true, Some((caller, budget))) = (self.config.rate_limit_headers, answer.meter) {
            let standing = match caller {
                Caller::Account(i) => self.accounts[i].standing(budget, now),
                Caller::Anonymous => self.anonymous.as_ref().expect("anonymous callers have a cap").standing(wall),
            };
            response = response
                .header("ratelimit-limit", standing.limit)
                .header("ratelimit-remaining", standing.remaining)
                .header("ratelimit-reset", ceil_seconds(standing.reset));
        }
        if answer.replayed {
            response = response.header(REPLAYED_HEADER, "true");
        }
        response = response.header(ARRIVAL_HEADER, arrival);
        self.ledger.settle(arrival, answer.settled, now);
        response.body(answer.body).expect("every header value is valid ASCII")
    }
}
