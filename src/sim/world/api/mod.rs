//! Simulated rate-limited APIs: pure state machines that answer HTTP requests
//! and keep a ledger of what happened.
//!
//! The model is the reference the retry core is checked against, so it copies
//! the real APIs of briefs 000 (Sume) and 002 (Blinkimg) where their behaviour
//! shapes a retry policy: @fastify/rate-limit's fixed window, `queue_full`,
//! monthly quotas, credits, and the idempotency store.
//!
//! It is sans-IO: no clock, no randomness, no network, no hash-ordered state.
//! Virtual time since the simulation's start is an argument, and the server's
//! wall clock is derived from it (`epoch + now + skew`). A request has two
//! phases so the network layer can model a request that runs while others
//! arrive: [`Api::begin`] either answers at once or returns a [`Ticket`], and
//! [`Api::complete`] finishes that ticket, charging and storing its answer.
//!
//! A request passes these checks in order, and the first that objects answers:
//! the script, the route (404), the key (401), the request-rate limiter (429,
//! refused requests count), the concurrency cap (429 `queue_full`), the
//! idempotency store (replay, or 409), the request itself (400, unknown job
//! 404), the monthly quota (429) and the credits (402). So a rate-limited
//! repeat of a stored key gets a 429, and a replay never meets the quota or
//! credit check (brief 002).

mod account;
mod admission;
mod config;
mod dialect;
mod endpoint;
mod envelope;
pub(crate) mod habits;
mod idempotency;
mod leaky;
mod ledger;
pub(crate) mod limiter;
mod presets;
mod response;
mod wallclock;

#[cfg(test)]
mod dialect_flow_tests;
#[cfg(test)]
mod flow_tests;
#[cfg(test)]
mod nginx_flow_tests;
#[cfg(test)]
mod testkit;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response};

pub use config::{
    AccountConfig, AdviceForm, ApiConfig, ConcurrencyConfig, DateForm, Dialect, Envelope, KeepAlive, LimiterConfig,
    LimiterKind, Preset, RateLimitFields, RateLimitedBody, ResetForm, RetryAfterRounding, ScriptStep,
};
pub use ledger::{Advertised, Arrival, ArrivalOutcome, Ledger, LossDecision, NO_KEY};

use account::{Account, HourlyCap, Reservation};
use endpoint::{BudgetKind, Endpoint};
use idempotency::{IdempotencyStore, StoredAnswer};
use ledger::{Settled, body_digest};
use response::Answer;
use wallclock::WallClock;

/// Whether the API (wearing `preset`) has a route for `method` and `path`:
/// a request without one is answered 404 before any limiter counts it.
pub(crate) fn has_route(preset: Preset, method: &str, path: &str) -> bool {
    http::Method::from_bytes(method.as_bytes()).is_ok_and(|m| preset.route(&m, path).is_some())
}

/// Response header: the answer's index into [`Ledger::arrivals`].
pub const ARRIVAL_HEADER: &str = "x-retrysim-arrival";
/// Request header: which simulated worker sent the request (ledger only).
pub const CLIENT_HEADER: &str = "x-retrysim-client";
/// Request header: the API key; absent means anonymous.
pub const API_KEY_HEADER: &str = "x-api-key";
/// Request header: the client's idempotency key for a POST.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Response header on a replayed idempotent answer.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The headers above as names, made once: looking a header up by its name
/// as text parses and validates the text every time.
pub(crate) mod names {
    use http::HeaderName;

    pub(crate) static ARRIVAL: HeaderName = HeaderName::from_static(super::ARRIVAL_HEADER);
    pub(crate) static CLIENT: HeaderName = HeaderName::from_static(super::CLIENT_HEADER);
    pub(crate) static API_KEY: HeaderName = HeaderName::from_static(super::API_KEY_HEADER);
    pub(crate) static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static(super::IDEMPOTENCY_KEY_HEADER);
    pub(crate) static REPLAYED: HeaderName = HeaderName::from_static(super::REPLAYED_HEADER);
}

/// The arrival index an answer carries in [`ARRIVAL_HEADER`].
pub fn arrival_index(response: &Response<Bytes>) -> Option<usize> {
    response.headers().get(&names::ARRIVAL)?.to_str().ok()?.parse().ok()
}

/// What [`Api::begin`] decided.
#[derive(Debug)]
pub enum Begin {
    /// Answered at once (a refusal, a replay, a scripted answer).
    Answer(Response<Bytes>),
    /// Accepted: it runs until [`Ticket::ready_at`], then call [`Api::complete`].
    Run(Ticket),
}

/// An accepted request that is running. Not `Clone`: it completes once.
#[derive(Debug)]
pub struct Ticket {
    arrival: usize,
    ready_at: Duration,
}

impl Ticket {
    /// The request's index into [`Ledger::arrivals`] (unit tests only).
    #[cfg(test)]
    pub fn arrival(&self) -> usize {
        self.arrival
    }

    /// When the request finishes running: arrival + `processing_ms` (plus
    /// the delay of nginx's `burst`, behind a leaky bucket).
    pub fn ready_at(&self) -> Duration {
        self.ready_at
    }
}

/// Who is asking: an account (by index), or a caller without a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Account(usize),
    Anonymous,
}

/// Whose budget an answer's `RateLimit-*` headers describe; `None` before the limiter.
type Meter = Option<(Caller, BudgetKind)>;

/// What a running request holds until it completes or is aborted.
#[derive(Debug, Clone)]
struct Run {
    caller: Caller,
    endpoint: Endpoint,
    /// (scope, key) in the idempotency store, when the request is keyed.
    idempotency: Option<(String, String)>,
    /// Credits it costs (charged on completion).
    cost: u64,
    /// The account's credits and quota it holds while it runs.
    reservation: Option<Reservation>,
    /// How long nginx's `burst` holds it before it runs (zero for other limiters).
    held: Duration,
}

/// One simulated API: its configuration, its state, and its ledger.
#[derive(Debug, Clone)]
pub struct Api {
    config: ApiConfig,
    clock: WallClock,
    accounts: Vec<Account>,
    anonymous: Option<HourlyCap>,
    idempotency: IdempotencyStore,
    /// Requests between `begin` and `complete`, by arrival index.
    running: BTreeMap<usize, Run>,
    jobs: BTreeSet<String>,
    jobs_created: u64,
    uploads_created: u64,
    script_next: usize,
    ledger: Ledger,
    /// The `Date` value of the last wall-clock second answered in.
    date: Option<(u64, http::HeaderValue)>,
}

impl Api {
    /// A fresh API at virtual time zero. A key listed by two accounts belongs
    /// to the first ([`ApiConfig::validate`] reports it).
    pub fn new(config: ApiConfig) -> Api {
        Api {
            clock: WallClock::new(config.epoch_unix_s, config.clock_skew_ms),
            accounts: config
                .accounts
                .iter()
                .map(|a| Account::new(a, &config.limiter, config.window_admits_one_more))
                .collect(),
            anonymous: config.anonymous_cap.map(HourlyCap::new),
            idempotency: IdempotencyStore::default(),
            running: BTreeMap::new(),
            jobs: BTreeSet::new(),
            jobs_created: 0,
            uploads_created: 0,
            script_next: 0,
            ledger: Ledger::default(),
            date: None,
            config,
        }
    }

    /// The configuration the API was built with.
    pub fn config(&self) -> &ApiConfig {
        &self.config
    }

    /// What the API saw and charged so far: the ground truth the checkers read.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Takes the ledger out, leaving an empty one: the runner's, once the
    /// simulation is over, so a big run's ledger is never held twice.
    pub fn take_ledger(&mut self) -> Ledger {
        std::mem::take(&mut self.ledger)
    }

    /// How many requests are between `begin` and `complete` (unit tests only).
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.running.len()
    }

    /// An account's credits not yet charged or reserved; `None` when
    /// unlimited or unknown (unit tests only).
    #[cfg(test)]
    pub fn credits_left(&self, account: &str) -> Option<u64> {
        self.accounts.iter().find(|a| a.name == account)?.credits_left()
    }

    /// Phase 1: a request arrives at `now`. Either an immediate answer, or the
    /// request is accepted and runs for `processing_ms` (then call [`Api::complete`]).
    pub fn begin(&mut self, req: &Request<Bytes>, now: Duration) -> Begin {
        let text = |name: &HeaderName| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let arrival = self.ledger.arrive(Arrival {
            at: now,
            client: text(&names::CLIENT).unwrap_or_else(|| "(unknown)".into()),
            account: None,
            method: req.method().to_string(),
            path: req.uri().path().to_owned(),
            idempotency_key: text(&names::IDEMPOTENCY_KEY),
            status: 0,
            code: None,
            outcome: ArrivalOutcome::Running,
            retry_after: None,
            answered_at: None,
            lost: false,
            body_digest: body_digest(req.body()),
            advertised: None,
            dialect_wait: None,
        });
        match self.admit(req, arrival, now) {
            Ok(run) => {
                let ready_at = now + run.held + Duration::from_millis(self.config.processing_ms);
                self.running.insert(arrival, run);
                Begin::Run(Ticket { arrival, ready_at })
            }
            Err(early) => {
                let answer = self.early_answer(early, arrival, now);
                Begin::Answer(self.send(arrival, answer, now))
            }
        }
    }

    /// Phase 2: the accepted request finishes at `now`. The job is created and
    /// charged here, and a keyed answer is stored for replay.
    ///
    /// Panics if the ticket's run was aborted by [`Api::abort_running`]: the
    /// network layer must not answer a request the server lost.
    pub fn complete(&mut self, ticket: Ticket, now: Duration) -> Response<Bytes> {
        let index = ticket.arrival;
        let run = self.running.remove(&index).unwrap_or_else(|| panic!("arrival {index} was aborted, not running"));
        let (status, body, outcome) = match &run.endpoint {
            Endpoint::CreateJob => {
                self.jobs_created += 1;
                let id = format!("job_{}", self.jobs_created);
                self.jobs.insert(id.clone());
                let key = run.idempotency.as_ref().map(|(_, key)| key.as_str());
                self.ledger.charge(key, run.cost);
                let (status, body) = match self.config.preset {
                    Preset::None => (201, serde_json::json!({ "id": id, "status": "queued" })),
                    preset => preset.created(&id, self.clock.at(now).unix_seconds()),
                };
                (status, body, ArrivalOutcome::Charged)
            }
            Endpoint::CreateUpload => {
                self.uploads_created += 1;
                let id = format!("upl_{}", self.uploads_created);
                (201, serde_json::json!({ "id": id }), ArrivalOutcome::Accepted)
            }
            Endpoint::GetJob(id) => {
                let (status, body) = match self.config.preset {
                    Preset::None => (200, serde_json::json!({ "id": id, "status": "completed" })),
                    preset => preset.fetched(id, self.clock.at(now).unix_seconds()),
                };
                (status, body, ArrivalOutcome::Accepted)
            }
            Endpoint::PutUpload(id) => (200, serde_json::json!({ "id": id }), ArrivalOutcome::Accepted),
        };
        let body = Bytes::from(body.to_string());
        if let (Some((scope, key)), Some(retention)) = (&run.idempotency, run.endpoint.retention()) {
            if self.config.store_forgets_answers {
                self.idempotency.abandon(scope, key);
            } else {
                let answer = StoredAnswer { status, body: body.clone() };
                self.idempotency.finish(scope, key, answer, now + retention);
            }
        }
        let settled = Settled { status, code: None, outcome, advised: None, dialect_advised: None };
        let meter = Some((run.caller, run.endpoint.budget()));
        let content_type = envelope::JSON;
        let answer = Answer {
            status,
            body,
            content_type,
            retry_after: Vec::new(),
            extra: Vec::new(),
            replayed: false,
            meter,
            settled,
        };
        self.send(index, answer, now)
    }

    /// Convenience: `begin` and, if accepted, `complete` at the same instant
    /// (unit tests only).
    #[cfg(test)]
    pub fn handle(&mut self, req: &Request<Bytes>, now: Duration) -> Response<Bytes> {
        match self.begin(req, now) {
            Begin::Answer(response) => response,
            Begin::Run(ticket) => self.complete(ticket, now),
        }
    }

    /// One run dies without an answer: nothing is charged, and its credits,
    /// concurrency slot and idempotency key are released so a retry can run
    /// (unit tests only).
    #[cfg(test)]
    pub fn abort(&mut self, ticket: Ticket, now: Duration) {
        self.abort_arrival(ticket.arrival, now);
    }

    /// The server went down (e.g. a bounce): every running request dies: nothing is
    /// charged, its credits, slot and key are released. Limiter windows, balances and stored answers survive,
    /// as they would in a shared store. Returns how many runs died.
    pub fn abort_running(&mut self, now: Duration) -> usize {
        let dead: Vec<usize> = self.running.keys().copied().collect();
        for &index in &dead {
            self.abort_arrival(index, now);
        }
        dead.len()
    }

    fn abort_arrival(&mut self, index: usize, now: Duration) {
        let Some(run) = self.running.remove(&index) else { return };
        if let (Caller::Account(i), Some(reservation)) = (run.caller, run.reservation) {
            self.accounts[i].release(reservation);
        }
        if let Some((scope, key)) = &run.idempotency {
            self.idempotency.abandon(scope, key);
        }
        let settled =
            Settled { status: 0, code: None, outcome: ArrivalOutcome::Aborted, advised: None, dialect_advised: None };
        self.ledger.settle(index, settled, now);
    }

    /// Records the server's decision to keep or lose the answer to arrival
    /// `index` (`None`: an answer that names no arrival), made at `now`.
    pub fn loss_decided(&mut self, now: Duration, index: Option<usize>, lost: bool) {
        self.ledger.loss_decisions.push(LossDecision { at: now, arrival: index, lost });
    }

    /// The network lost arrival `index`'s answer after the server produced it
    /// (and, for a job, charged it). Panics on an index that never arrived.
    pub fn answer_lost(&mut self, index: usize) {
        let arrivals = self.ledger.arrivals.len();
        let arrival = self.ledger.arrivals.get_mut(index);
        arrival.unwrap_or_else(|| panic!("answer_lost({index}): only {arrivals} arrivals")).lost = true;
    }
}
