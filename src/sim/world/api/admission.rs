//! Admission: the checks an arriving request passes, in the order that gives
//! the model its behaviour (see the module doc of `sim::world::api`).
//!
//! Admission only *decides*. A request either becomes a [`Run`] (credits and
//! idempotency key reserved), or an [`Early`] answer that `response` renders.

use std::time::Duration;

use bytes::Bytes;
use http::Request;

use super::account::Denial;
use super::config::RetryAfterRounding;
use super::endpoint::Endpoint;
use super::envelope::ErrorCode;
use super::habits;
use super::idempotency::{Fingerprint, Lookup, StoredAnswer};
use super::limiter::{Verdict, ceil_seconds};
use super::presets::Credential;
use super::{Api, Caller, Meter, Run, ScriptStep};

/// The idempotency scope of callers without a key.
const ANONYMOUS: &str = "(anonymous)";

/// An answer decided on arrival, before anything ran.
#[derive(Debug, Clone)]
pub(super) enum Early {
    /// The next step of the configured script.
    Scripted(ScriptStep),
    /// An error; `wait_s` is the wait to advise, if waiting helps, and
    /// `wait` the same wait before its rounding to whole seconds (what a
    /// dialect writes in its own rounding).
    Refused { code: ErrorCode, wait_s: Option<u64>, wait: Option<Duration>, meter: Meter },
    /// A stored idempotent answer.
    Replay { stored: StoredAnswer, meter: Meter },
}

impl Api {
    pub(super) fn admit(&mut self, req: &Request<Bytes>, arrival: usize, now: Duration) -> Result<Run, Early> {
        let refused = |code, wait_s: Option<u64>, meter| Early::Refused {
            code,
            wait_s,
            wait: wait_s.map(Duration::from_secs),
            meter,
        };
        if let Some(step) = self.next_script_step() {
            return Err(Early::Scripted(step));
        }
        let Some(endpoint) = self.config.preset.route(req.method(), req.uri().path()) else {
            return Err(refused(ErrorCode::NotFound, None, None));
        };
        let Some(caller) = self.authenticate(req) else {
            return Err(refused(ErrorCode::Unauthorized, None, None));
        };
        if let Caller::Account(i) = caller {
            self.ledger.arrivals[arrival].account = Some(self.accounts[i].name.clone());
        }
        let meter = Some((caller, endpoint.budget()));

        // Request rate: every request that gets this far counts.
        let verdict = match caller {
            Caller::Account(i) => self.accounts[i].hit(endpoint.budget(), now),
            Caller::Anonymous => self.anonymous.as_mut().map_or(Verdict::Allowed, |cap| cap.hit(self.clock.at(now))),
        };
        // nginx's burst: admitted, but held before it runs.
        let held = match verdict {
            Verdict::Delayed { by } => by,
            _ => Duration::ZERO,
        };
        if let Verdict::Refused { wait } = verdict {
            let code = if caller == Caller::Anonymous { ErrorCode::SignupRequired } else { ErrorCode::RateLimited };
            let rounding = match self.config.retry_after_rounding {
                RetryAfterRounding::Up if self.config.advice_rounds_down => RetryAfterRounding::Truncate,
                r => r,
            };
            let seconds = habits::retry_after_seconds(rounding, wait, self.clock.at(now));
            return Err(Early::Refused { code, wait_s: Some(seconds), wait: Some(wait), meter });
        }
        let queue = self.config.concurrency.as_ref();
        if let Some(cap) = queue.filter(|cap| self.running.len() >= cap.max_in_flight as usize) {
            return Err(refused(ErrorCode::QueueFull, Some(cap.retry_after_s), meter));
        }

        // Idempotency, for writes that carry a key.
        let scope = match caller {
            Caller::Account(i) => self.accounts[i].name.clone(),
            Caller::Anonymous => ANONYMOUS.to_owned(),
        };
        let keyed = endpoint.retention().and(self.ledger.arrivals[arrival].idempotency_key.clone());
        let fingerprint = Fingerprint {
            method: req.method().to_string(),
            path: req.uri().path().to_owned(),
            body: req.body().clone(),
        };
        if let Some(key) = &keyed {
            match self.idempotency.lookup(&scope, key, &fingerprint, now) {
                Lookup::Fresh => {}
                Lookup::Replay(stored) => return Err(Early::Replay { stored, meter }),
                Lookup::Reused => return Err(refused(ErrorCode::IdempotencyKeyReused, None, meter)),
                Lookup::InProgress => return Err(refused(ErrorCode::IdempotencyInProgress, None, meter)),
            }
        }

        // The request itself, then what it costs.
        let cost = match &endpoint {
            Endpoint::CreateJob => match self.config.preset.job_cost(req.body()) {
                Some(cost) => cost,
                None => return Err(refused(ErrorCode::BadRequest, None, meter)),
            },
            Endpoint::GetJob(id) if !self.jobs.contains(id) => return Err(refused(ErrorCode::NotFound, None, meter)),
            Endpoint::GetJob(_) | Endpoint::CreateUpload | Endpoint::PutUpload(_) => 0,
        };
        let reservation = match caller {
            Caller::Account(i) => match self.accounts[i].reserve(cost, self.clock.at(now)) {
                Ok(reservation) => Some(reservation),
                Err(Denial::Quota { wait }) => {
                    let wait_s = Some(ceil_seconds(wait).max(1));
                    return Err(Early::Refused { code: ErrorCode::QuotaExceeded, wait_s, wait: Some(wait), meter });
                }
                Err(Denial::Credits) => return Err(refused(ErrorCode::InsufficientCredits, None, meter)),
            },
            Caller::Anonymous => None,
        };

        let idempotency = keyed.map(|key| {
            self.idempotency.start(&scope, &key, fingerprint);
            (scope, key)
        });
        Ok(Run { caller, endpoint, idempotency, cost, reservation, held })
    }

    /// The caller behind `x-api-key` (a preset's `Authorization`); a keyless
    /// caller only if anonymous use is on.
    fn authenticate(&self, req: &Request<Bytes>) -> Option<Caller> {
        let key = match self.config.preset.credential(req.headers()) {
            Credential::Absent => return self.anonymous.is_some().then_some(Caller::Anonymous),
            Credential::Unreadable => return None,
            Credential::Key(key) => key,
        };
        let account = self.config.accounts.iter().position(|a| a.keys.iter().any(|k| k == key))?;
        Some(Caller::Account(account))
    }

    /// The next scripted answer, if the script has one left.
    fn next_script_step(&mut self) -> Option<ScriptStep> {
        let step = self.config.script.get(self.script_next)?.clone();
        self.script_next += 1;
        if self.config.script_repeat && self.script_next == self.config.script.len() {
            self.script_next = 0;
        }
        Some(step)
    }
}
