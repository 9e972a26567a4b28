//! The model's self-check: every invariant judges the client, so a slip in
//! the simulated API itself (a limiter that stops counting something) would
//! pass unseen and weaken every check that rests on it. This replays the
//! ledger's arrivals through a small reference limiter of the API's kind,
//! written apart from `sim::world::api::limiter`, and compares each verdict
//! the API gave ([`check_model`]), the wait each refusal advised
//! ([`check_model_advice`]) and the `RateLimit-*` standing each answer told
//! ([`check_advertised`]); and through a reference map of idempotency keys,
//! written apart from `sim::world::api::idempotency`, and compares what the
//! store did with each keyed request ([`check_idempotency`]); and holds
//! the answers the scenario scripts to what it declares ([`check_script`]),
//! its concurrency cap to its number ([`check_concurrency`]), its runs to
//! its processing time ([`check_run_times`]), its polls
//! to the jobs it created ([`check_polls`]), its credits to the prices
//! and each account's balance and monthly quota ([`check_credits`]), its
//! lost answers to the seed ([`check_lost_answers`]), its connections to
//! its keep-alive settings ([`check_keep_alive`]) and its close races to
//! idle reused connections ([`check_close_races`]).
//! A finding blames the model, not the client.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::sim::run::runner::Report;
use crate::sim::world::api::{
    Advertised, AdviceForm, ApiConfig, Arrival, ArrivalOutcome, Dialect, LimiterConfig, LimiterKind,
    RetryAfterRounding, ScriptStep,
};
mod network;
pub use network::{check_close_races, check_keep_alive, check_lost_answers};

/// One verdict of the API's limiter the reference disagrees with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelViolation {
    /// The arrival's number in the ledger.
    pub arrival: usize,
    /// What differed.
    pub message: String,
}

/// The one finding about arrival `i` (`a`): what the model did, `what`,
/// after the arrival's time, method and path.
fn blame(i: usize, a: &Arrival, what: String) -> Vec<ModelViolation> {
    let message = format!("blames the model: arrival {i} at {} ms ({} {}){what}", a.at.as_millis(), a.method, a.path);
    vec![ModelViolation { arrival: i, message }]
}

/// @fastify/rate-limit's fixed window, as its documentation states it: the
/// window opens at the first hit after the previous one closed, and every
/// hit in it counts, refused or not.
#[derive(Debug, Default)]
struct Window {
    start: Option<Duration>,
    hits: u64,
}

impl Window {
    /// Whether a hit at `at` is allowed under `limit` per `window`.
    fn hit(&mut self, at: Duration, limit: u64, window: Duration) -> bool {
        if self.start.is_none_or(|s| at >= s + window) {
            self.start = Some(at);
            self.hits = 0;
        }
        self.hits += 1;
        self.hits <= limit
    }

    /// When the current window ends (the instant a refused hit may come back).
    fn reset(&self, window: Duration) -> Option<Duration> {
        self.start.map(|s| s + window)
    }
}

/// Whether the API refused `a` at its request-rate limiter: 429 with the
/// rate-limit code (or none, an HTML page), or a refusal of another status
/// without a code or with that one (`rate_limited_status`: nginx's 503).
fn refused_by_limiter(a: &Arrival) -> bool {
    let rate_limited = a.code.as_deref().is_none_or(|c| c.eq_ignore_ascii_case("rate_limited"));
    rate_limited && (a.status == 429 || (a.outcome == ArrivalOutcome::Refused && a.status >= 400))
}

/// A request-rate limiter of one (account, budget) as its design is usually
/// stated, written apart from `sim::world::api::limiter` (which keeps the
/// bucket's tokens and the windows' counts; this keeps the times).
#[derive(Debug)]
enum Reference {
    /// @fastify/rate-limit's fixed window ([`Window`]).
    Fixed(Window),
    /// The token bucket as the generic cell rate algorithm: `tat` is when
    /// the bucket will be full again, in nanoseconds times the limit (each
    /// admitted request pushes it one window on, and it never lags `now`);
    /// a request is admitted while that is no further than a whole bucket
    /// (`limit` windows, in the same units) ahead of it.
    Gcra { tat: u128 },
    /// The times of the admitted requests; a request is admitted while fewer
    /// than `limit` of them are younger than a window, or, where `edge`
    /// (`limits`' moving window), no older than one.
    Log { admitted: Vec<Duration>, edge: bool },
    /// nginx's `limit_req` as the generic cell rate algorithm over whole
    /// milliseconds: each admitted request takes one interval (1 / rate) of
    /// the bucket, `tat` is when the bucket has drained everything admitted
    /// (in milliseconds times thousandths of a request per second, so one
    /// request is 1,000,000), and a request is admitted while what is left
    /// ahead of it is at most `burst` intervals; it is `held` until that is
    /// drained (none with `nodelay`). Exact where the rate is whole requests
    /// per second, where nginx's own truncation of the drain loses nothing.
    Leaky { tat: Option<u128>, burst: u128, nodelay: bool, held: Duration },
}

impl Reference {
    fn new(kind: LimiterKind) -> Reference {
        match kind {
            LimiterKind::FixedWindow => Reference::Fixed(Window::default()),
            LimiterKind::TokenBucket => Reference::Gcra { tat: 0 },
            LimiterKind::SlidingWindow => Reference::Log { admitted: Vec::new(), edge: false },
            LimiterKind::MovingWindow => Reference::Log { admitted: Vec::new(), edge: true },
            LimiterKind::LeakyBucket => Reference::Leaky { tat: None, burst: 0, nodelay: false, held: Duration::ZERO },
        }
    }

    /// The reference of the API's limiter, with nginx's `burst` and `nodelay`.
    fn of(limiter: &LimiterConfig) -> Reference {
        match Reference::new(limiter.kind) {
            Reference::Leaky { tat, held, .. } => {
                Reference::Leaky { tat, burst: u128::from(limiter.burst), nodelay: limiter.nodelay, held }
            }
            other => other,
        }
    }

    /// How long the latest admitted request was held before it ran.
    fn held(&self) -> Duration {
        match self {
            Reference::Leaky { held, .. } => *held,
            _ => Duration::ZERO,
        }
    }

    /// A request at `at` under `limit` per `window`: `None` if admitted,
    /// else how long until one would be.
    fn hit(&mut self, at: Duration, limit: u64, window: Duration) -> Option<Duration> {
        match self {
            Reference::Fixed(w) => {
                let admitted = w.hit(at, limit, window);
                let reset = w.reset(window).unwrap_or(at);
                (!admitted).then(|| reset.saturating_sub(at))
            }
            Reference::Gcra { .. } | Reference::Log { .. } | Reference::Leaky { .. } if limit == 0 => Some(window),
            Reference::Gcra { tat } => {
                let (now, step) = (at.as_nanos() * u128::from(limit), window.as_nanos());
                let due = (*tat).max(now) + step;
                let ahead = due - now;
                let bucket = u128::from(limit) * step;
                if ahead <= bucket {
                    *tat = due;
                    return None;
                }
                let ns = (ahead - bucket).div_ceil(u128::from(limit));
                Some(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
            }
            Reference::Log { admitted, edge } => {
                admitted.retain(|&t| if *edge { t + window >= at } else { t + window > at });
                if (admitted.len() as u64) < limit {
                    admitted.push(at);
                    return None;
                }
                let oldest = admitted.iter().min().copied().unwrap_or(at);
                Some((oldest + window).saturating_sub(at))
            }
            Reference::Leaky { tat, burst, nodelay, held } => {
                const ONE: u128 = 1_000_000;
                let rate = leaky_rate(limit, window);
                let now = at.as_millis() * rate;
                let ahead = tat.map_or(0, |t| t.saturating_sub(now));
                if ahead > *burst * ONE {
                    let ms = (ahead - *burst * ONE + now).div_ceil(rate);
                    return Some(Duration::from_millis(ms as u64).saturating_sub(at));
                }
                *tat = Some(tat.map_or(now, |t| t.max(now)) + ONE);
                *held = if *nodelay { Duration::ZERO } else { Duration::from_millis((ahead / rate) as u64) };
                None
            }
        }
    }

    /// The budget at `at` without counting a request, as `RateLimit-*`
    /// headers tell it: (remaining, until it is whole again). A zero-limit
    /// bucket never fills; it says one window.
    fn standing(&self, at: Duration, limit: u64, window: Duration) -> (u64, Duration) {
        match self {
            Reference::Fixed(Window { start: Some(s), hits }) if at < *s + window => {
                (limit.saturating_sub(*hits), *s + window - at)
            }
            Reference::Fixed(_) => (limit, Duration::ZERO),
            Reference::Gcra { .. } if limit == 0 => (0, window),
            Reference::Gcra { tat } => {
                let (now, step) = (at.as_nanos() * u128::from(limit), window.as_nanos());
                let ahead = tat.saturating_sub(now);
                let remaining = u128::from(limit).saturating_sub(ahead.div_ceil(step));
                let ns = ahead.div_ceil(u128::from(limit));
                (remaining as u64, Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
            }
            Reference::Log { admitted, .. } => {
                let live = admitted.iter().filter(|&&t| t + window > at);
                let oldest = live.clone().min();
                let remaining = limit.saturating_sub(live.count() as u64);
                (remaining, oldest.map_or(Duration::ZERO, |&t| t + window - at))
            }
            Reference::Leaky { .. } if limit == 0 => (0, window),
            Reference::Leaky { tat, burst, .. } => {
                let rate = leaky_rate(limit, window);
                let now = at.as_millis() * rate;
                let ahead = tat.map_or(0, |t| t.saturating_sub(now));
                let room = if ahead > burst * 1_000_000 { 0 } else { (burst * 1_000_000 - ahead) / 1_000_000 + 1 };
                let empty = tat.map_or(Duration::ZERO, |t| Duration::from_millis(t.div_ceil(rate) as u64));
                (room as u64, empty.saturating_sub(at))
            }
        }
    }
}

/// nginx's rate in thousandths of a request per second (`limit` per `window`), at least 1.
fn leaky_rate(limit: u64, window: Duration) -> u128 {
    (u128::from(limit) * 1_000_000 / window.as_millis().max(1)).max(1)
}

/// Whether `a` counts against the writes' budget (anything but `GET`) or the reads'.
fn writes(a: &Arrival) -> bool {
    a.method != "GET"
}

/// What each limiter kind is called in a finding.
fn described(kind: LimiterKind) -> &'static str {
    match kind {
        LimiterKind::FixedWindow => "a fixed window",
        LimiterKind::TokenBucket => "a token bucket",
        LimiterKind::SlidingWindow => "a sliding window",
        LimiterKind::MovingWindow => "a moving window",
        LimiterKind::LeakyBucket => "nginx's leaky bucket",
    }
}

/// One arrival as the reference limiter judges it.
struct Judged<'a> {
    i: usize,
    a: &'a Arrival,
    /// The budget of its kind (writes or reads) per window.
    limit: u64,
    /// `None` if the reference admits it, else how long until it would
    /// admit one.
    refused: Option<Duration>,
    /// How long the reference holds it before it runs (nginx's `burst`).
    held: Duration,
    /// The standing its answer must tell, (remaining, reset): the
    /// reference's at the instant the answer went out, after every request
    /// on the same budget that arrived before it. `None` where the ledger
    /// does not fix it: never answered, or another request on the same
    /// budget arrived in that same instant (it may have been counted before
    /// the answer went out, or after).
    told: Option<(u64, Duration)>,
}

/// Every arrival that reached the limiter, judged by a reference limiter
/// of the API's kind per (account, writes or reads).
fn reference_limiter(r: &Report) -> Vec<Judged<'_>> {
    let api = &r.scenario_config.api;
    let window = Duration::from_millis(api.limiter.window_ms.max(1));
    // Per budget: its reference, and the instant and index of its latest arrival.
    let mut limiters: BTreeMap<(&str, bool), (Reference, Duration, usize)> = BTreeMap::new();
    let mut judged: Vec<Judged<'_>> = Vec::new();
    // Answers not yet reached by the replay: (when it went out, index in `judged`).
    let mut waiting: Vec<(Duration, usize)> = Vec::new();
    // Reads the standing of every waiting answer that went out before `until`
    // (all of them at the end): every arrival up to its instant is counted.
    let settle = |until: Option<Duration>,
                  waiting: &mut Vec<(Duration, usize)>,
                  judged: &mut Vec<Judged<'_>>,
                  limiters: &BTreeMap<(&str, bool), (Reference, Duration, usize)>| {
        waiting.retain(|&(sent, k)| {
            if until.is_some_and(|t| sent >= t) {
                return true;
            }
            let j = &mut judged[k];
            let key = (j.a.account.as_deref().unwrap_or_default(), writes(j.a));
            if let Some((reference, latest, by)) = limiters.get(&key) {
                let tied = *latest == sent && *by != j.i;
                j.told = (!tied).then(|| reference.standing(sent, j.limit, window));
            }
            false
        });
    };
    for (i, a) in r.ledger.arrivals.iter().enumerate() {
        let Some(account) = a.account.as_deref() else { continue };
        settle(Some(a.at), &mut waiting, &mut judged, &limiters);
        let write = writes(a);
        let limit = u64::from(if write { api.limiter.writes } else { api.limiter.reads });
        let entry = limiters.entry((account, write)).or_insert_with(|| (Reference::of(&api.limiter), a.at, i));
        let refused = entry.0.hit(a.at, limit, window);
        let held = if refused.is_none() { entry.0.held() } else { Duration::ZERO };
        (entry.1, entry.2) = (a.at, i);
        if let Some(sent) = a.answered_at {
            waiting.push((sent, judged.len()));
        }
        judged.push(Judged { i, a, limit, refused, held, told: None });
    }
    settle(None, &mut waiting, &mut judged, &limiters);
    judged
}

/// Replays the ledger through a reference limiter of the API's kind, per
/// account and budget (writes: `POST`; reads: `GET`); an arrival counts
/// when it reached the limiter (the ledger names its account: past the
/// script, the route and the key), and the API refused it there when it
/// answered 429 with the rate-limit code (or none, an HTML page).
/// Then the hourly cap on anonymous callers (`check_anonymous_cap`).
pub fn check_model(r: &Report) -> Vec<ModelViolation> {
    let limiter = &r.scenario_config.api.limiter;
    let window = limiter.window_ms.max(1);
    for Judged { i, a, limit, refused: reference, .. } in reference_limiter(r) {
        let refused = refused_by_limiter(a);
        if reference.is_some() != refused {
            let said = if refused { "refused" } else { "allowed" };
            let should = if reference.is_none() { "allow" } else { "refuse" };
            let kind = described(limiter.kind);
            return blame(i, a, format!(": the API {said} it, {kind} of {limit} per {window} ms would {should} it"));
        }
    }
    check_anonymous_cap(r)
}

/// The `RateLimit-*` standing each answer told (`model-ratelimit`), against
/// the reference limiter's at the instant the answer went out (right after
/// the request for an answer given on arrival; for a run answered later,
/// after what arrived since, the window moved on to its end), unless another
/// request on the same budget arrived in that instant; and for callers
/// without a key (answered on arrival), the hourly cap's: the cap, what is
/// left of it this hour, and the time to the next hour on the server's
/// clock. The first finding only.
pub fn check_advertised(r: &Report) -> Vec<ModelViolation> {
    let api = &r.scenario_config.api;
    let told = |a: &Arrival| a.advertised.filter(|_| a.answered_at == Some(a.at));
    let differs = |i: usize, a: &Arrival, told: Advertised, limit: u64, remaining: u64, reset: Duration, of: &str| {
        let reference = (limit, remaining, reset);
        let said = (u64::from(told.limit), u64::from(told.remaining), told.reset);
        (said != reference).then(|| {
            let when = match a.answered_at {
                Some(sent) if sent != a.at => format!(", answered at {} ms,", sent.as_millis()),
                _ => String::new(),
            };
            let what = format!(
                "{when} advertised limit {}, remaining {}, reset {:?}; {of} says {limit}, {remaining}, {reset:?}",
                told.limit, told.remaining, told.reset
            );
            blame(i, a, what)
        })
    };
    for Judged { i, a, limit, told: reference, .. } in reference_limiter(r) {
        let (Some(advertised), Some((remaining, reset))) = (a.advertised, reference) else { continue };
        if let Some(found) = differs(i, a, advertised, limit, remaining, reset, described(api.limiter.kind)) {
            return found;
        }
    }
    let Some(cap) = api.anonymous_cap else { return Vec::new() };
    let hour = Duration::from_secs(3_600).as_nanos() as i128;
    let counted = anonymous_counts(r);
    for (k, &(i, a, count)) in counted.iter().enumerate() {
        let tied = counted.get(k + 1).is_some_and(|&(_, b, _)| b.at == a.at);
        let Some(advertised) = told(a).filter(|_| !tied) else { continue };
        let wall_ns = i128::from(api.epoch_unix_s) * 1_000_000_000
            + a.at.as_nanos() as i128
            + i128::from(api.clock_skew_ms) * 1_000_000;
        let reset = Duration::from_nanos((hour - wall_ns.rem_euclid(hour)) as u64);
        let remaining = u64::from(cap.saturating_sub(count));
        if let Some(found) = differs(i, a, advertised, u64::from(cap), remaining, reset, "the hourly anonymous cap") {
            return found;
        }
    }
    Vec::new()
}

/// Each anonymous request that counts against the hourly cap (past the
/// script and the route, and not a 401 for a key no account has), with
/// its count in the server's wall-clock hour, itself included.
fn anonymous_counts(r: &Report) -> Vec<(usize, &Arrival, u32)> {
    let api = &r.scenario_config.api;
    let mut hours: BTreeMap<u64, u32> = BTreeMap::new();
    let mut counted = Vec::new();
    for (i, a) in r.ledger.arrivals.iter().enumerate() {
        let counts = a.account.is_none()
            && a.outcome != ArrivalOutcome::Scripted
            && a.status != 401
            && crate::sim::world::api::has_route(api.preset, &a.method, &a.path);
        if counts {
            let count = hours.entry(api.hour_at(a.at)).or_default();
            *count += 1;
            counted.push((i, a, *count));
        }
    }
    counted
}

/// The hourly cap on callers without a key, replayed: every anonymous
/// request that reached it (past the script and the route; the ledger
/// names no account, and it was not a 401 for a key no account has) counts
/// in the server's wall-clock hour it arrived in, refused or not, and the
/// API refuses it with `SIGNUP_REQUIRED` exactly when it is past the cap.
fn check_anonymous_cap(r: &Report) -> Vec<ModelViolation> {
    let api = &r.scenario_config.api;
    let Some(cap) = api.anonymous_cap else { return Vec::new() };
    for (i, a, count) in anonymous_counts(r) {
        let refused = a.outcome == ArrivalOutcome::Refused
            && a.status == 429
            && a.code.as_deref().is_some_and(|c| c.eq_ignore_ascii_case("signup_required"));
        if refused != (count > cap) {
            let said = if refused { "refused" } else { "allowed" };
            let what = format!(": the API {said} the hour's anonymous request {count}, under a cap of {cap} per hour");
            return blame(i, a, what);
        }
    }
    Vec::new()
}

/// The earliest and latest wait a refusal `remaining` before the window's
/// reset may advise, by the API's rounding and advice form: rounded up
/// (the default), no earlier than the reset and at most its whole seconds;
/// truncated or Flask-Limiter's, up to a second early; a date is a whole
/// second of the server's clock (`HeaderDate`, and a line of
/// `SeveralLines`), up to a second later still.
fn advice_bounds(api: &crate::sim::world::api::ApiConfig, remaining: Duration) -> (Duration, Duration) {
    let second = Duration::from_secs(1);
    let whole_up = Duration::from_secs(remaining.as_secs() + u64::from(remaining.subsec_nanos() > 0)).max(second);
    let dated = matches!(api.advice, AdviceForm::HeaderDate | AdviceForm::SeveralLines);
    let date = if dated { second } else { Duration::ZERO };
    match api.retry_after_rounding {
        RetryAfterRounding::Up => (remaining, whole_up + date),
        RetryAfterRounding::Truncate => (remaining.saturating_sub(second), remaining + date),
        RetryAfterRounding::Down => (remaining.saturating_sub(second), remaining + second + date),
    }
}

/// What is wrong with the dialect's advice of a request-rate refusal that
/// the reference limiter would lift `remaining` later, if anything: a
/// dialect speaks on every such refusal, never advises less than
/// `remaining`, and no more than its rounding adds ([`Dialect::latest`]).
fn dialect_advice(api: &ApiConfig, a: &Arrival, remaining: Duration) -> Option<String> {
    let dialect = api.dialect;
    // express's draft 6 leaves out a reset of 0, and with it the advice.
    if dialect == Dialect::None || (dialect == Dialect::ExpressDraft6 && remaining.is_zero()) {
        return None;
    }
    let Some(advised) = a.dialect_wait else {
        let name = dialect.name();
        return Some(format!(
            " was refused with no advice of its dialect recorded, where {name} advises every refusal"
        ));
    };
    let latest = dialect.latest(remaining);
    (advised < remaining || advised > latest).then(|| {
        format!(
            " was refused with a {} advice of {} ms; {} would admit a request {} ms later, so the dialect's rounding allows {} to {} ms",
            dialect.name(),
            advised.as_millis(),
            described(api.limiter.kind),
            remaining.as_millis(),
            remaining.as_millis(),
            latest.as_millis()
        )
    })
}

/// The wait each request-rate refusal advised, against the reference
/// limiter's: within the bounds of `advice_bounds`. Applies where
/// [`check_model`] does, to refusals the reference agrees with (a verdict it
/// disagrees with is `check_model`'s finding); the first finding only. A
/// refusal the ledger records no advice for is a finding too where the
/// form advises every one (a header, or the body of a JSON answer): the
/// checks of the client read the ledger's advice, not the bytes.
pub fn check_model_advice(r: &Report) -> Vec<ModelViolation> {
    let api = &r.scenario_config.api;
    for Judged { i, a, refused, .. } in reference_limiter(r) {
        let Some(remaining) = refused else { continue };
        if !refused_by_limiter(a) {
            continue;
        }
        if let Some(what) = dialect_advice(api, a, remaining) {
            return blame(i, a, what);
        }
        let Some(advised) = a.retry_after else {
            let advises = match api.advice {
                AdviceForm::None | AdviceForm::Malformed => false,
                AdviceForm::BodyOnly => a.code.is_some(),
                AdviceForm::Both | AdviceForm::HeaderSeconds | AdviceForm::HeaderDate | AdviceForm::SeveralLines => {
                    true
                }
            };
            if advises {
                let form = api.advice;
                return blame(
                    i,
                    a,
                    format!(" was refused with no advice recorded, where the {form:?} form advises every refusal"),
                );
            }
            continue;
        };
        let (earliest, latest) = advice_bounds(api, remaining);
        if advised < earliest || advised > latest {
            let what = format!(
                " was refused with an advice of {} ms; {} would admit a request {} ms later, so {:?} rounding in the {:?} form allows {} to {} ms",
                advised.as_millis(),
                described(api.limiter.kind),
                remaining.as_millis(),
                api.retry_after_rounding,
                api.advice,
                earliest.as_millis(),
                latest.as_millis()
            );
            return blame(i, a, what);
        }
    }
    Vec::new()
}

/// What the reference store holds for one (account, key).
struct Held {
    /// Method, path and body digest: what makes a repeat "the same".
    fingerprint: (String, String, u64),
    /// `None` while the first request runs; then when the answer is forgotten.
    expires: Option<Duration>,
}

/// What a store should do with a keyed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Run,
    Replay,
    Reused,
    InProgress,
}

/// What the API did with a keyed request, as an [`Expect`]; `None` where the
/// store was never asked (a refusal at the limiter or the concurrency cap,
/// a scripted answer).
fn did(a: &Arrival) -> Option<Expect> {
    let before_store =
        |a: &Arrival| refused_by_limiter(a) || a.code.as_deref().is_some_and(|c| c.eq_ignore_ascii_case("queue_full"));
    Some(match a.outcome {
        ArrivalOutcome::Replayed => Expect::Replay,
        ArrivalOutcome::KeyReused => Expect::Reused,
        ArrivalOutcome::InProgressConflict => Expect::InProgress,
        ArrivalOutcome::Scripted => return None,
        ArrivalOutcome::Refused if before_store(a) => return None,
        _ => Expect::Run,
    })
}

/// How long the API keeps a keyed answer for `path` (24 h for jobs, 14 min
/// for uploads, brief 002), `None` for a path the store does not serve.
fn retention(method: &str, path: &str) -> Option<Duration> {
    match (method, path) {
        ("POST", "/v1/jobs") => Some(Duration::from_secs(86_400)),
        ("POST", "/v1/uploads") => Some(Duration::from_secs(840)),
        _ => None,
    }
}

/// What the scenario's script says arrival `i` gets: step `i` (modulo the
/// script's length when it repeats), or nothing once it has run out.
fn script_step(api: &ApiConfig, i: usize) -> Option<&ScriptStep> {
    match api.script.len() {
        0 => None,
        n if api.script_repeat => api.script.get(i % n),
        _ => api.script.get(i),
    }
}

/// The script served as the scenario declares it (`model-script`): the
/// API answers its arrivals, in the ledger's order, with the script's steps
/// first, each with its status and code (a success's code is none), and no
/// arrival past a script that does not repeat is answered by it. The first
/// finding only.
pub fn check_script(r: &Report) -> Vec<ModelViolation> {
    let api = &r.scenario_config.api;
    for (i, a) in r.ledger.arrivals.iter().enumerate() {
        let step = script_step(api, i);
        let served = a.outcome == ArrivalOutcome::Scripted;
        let as_said = step.is_some_and(|s| a.status == s.status && (s.status < 400 || a.code == s.code));
        if served != step.is_some() || (served && !as_said) {
            let said = step
                .map_or("no step".to_owned(), |s| format!("{} {}", s.status, s.code.as_deref().unwrap_or("(no code)")));
            let code = a.code.as_deref().unwrap_or("(no code)");
            return blame(
                i,
                a,
                format!(" was answered {} {code} ({:?}), where the script says {said}", a.status, a.outcome),
            );
        }
    }
    Vec::new()
}

/// The concurrency cap kept as declared (`model-concurrency`): a request
/// the API ran arrived while fewer than `max_in_flight` earlier runs were
/// surely still running (answered later, or never), and a `queue_full`
/// refusal came while at least that many may have been (answered in the
/// same millisecond or later, or abandoned at a time the ledger does not
/// keep). The first finding only.
pub fn check_concurrency(r: &Report) -> Vec<ModelViolation> {
    let Some(cap) = &r.scenario_config.api.concurrency else { return Vec::new() };
    let max = cap.max_in_flight as usize;
    let ran = |a: &Arrival| {
        matches!(
            a.outcome,
            ArrivalOutcome::Charged | ArrivalOutcome::Accepted | ArrivalOutcome::Running | ArrivalOutcome::Aborted
        )
    };
    let arrivals = &r.ledger.arrivals;
    for (i, a) in arrivals.iter().enumerate() {
        let earlier = arrivals[..i].iter().filter(|b| ran(b));
        let (mut surely, mut maybe) = (0, 0);
        for b in earlier {
            match b.answered_at {
                Some(end) if end > a.at => (surely, maybe) = (surely + 1, maybe + 1),
                Some(end) if end < a.at => {}
                None if b.outcome == ArrivalOutcome::Running => (surely, maybe) = (surely + 1, maybe + 1),
                _ => maybe += 1,
            }
        }
        let queue_full = a.outcome == ArrivalOutcome::Refused && a.code.as_deref() == Some("queue_full");
        let wrong = if ran(a) && surely >= max {
            format!("ran with {surely} earlier requests still running")
        } else if queue_full && maybe < max {
            format!("was refused queue_full with at most {maybe} requests running")
        } else {
            continue;
        };
        return blame(i, a, format!(" {wrong}, under a cap of {max} in flight"));
    }
    Vec::new()
}

/// Every request the API ran to its end (a job charged, an upload, a poll or
/// a part accepted) is answered the scenario's `processing_ms` after it
/// arrived (`model-run-time`), plus, behind nginx's leaky bucket, the delay
/// the reference limiter holds it for: the network waits for the run as
/// long as the API says it takes. The first finding only.
pub fn check_run_times(r: &Report) -> Vec<ModelViolation> {
    let processing = Duration::from_millis(r.scenario_config.api.processing_ms);
    let held: BTreeMap<usize, Duration> = if r.scenario_config.api.limiter.kind == LimiterKind::LeakyBucket {
        reference_limiter(r).iter().map(|j| (j.i, j.held)).collect()
    } else {
        BTreeMap::new()
    };
    for (i, a) in r.ledger.arrivals.iter().enumerate() {
        let ran = matches!(a.outcome, ArrivalOutcome::Charged | ArrivalOutcome::Accepted);
        let Some(end) = a.answered_at.filter(|_| ran) else { continue };
        let delay = held.get(&i).copied().unwrap_or_default();
        if end != a.at + delay + processing {
            let took = end.saturating_sub(a.at).as_millis();
            let mut what = format!(" ran {took} ms, where the scenario's processing_ms is {}", processing.as_millis());
            if !delay.is_zero() {
                what += &format!(" after nginx's burst held it {} ms", delay.as_millis());
            }
            return blame(i, a, what);
        }
    }
    Vec::new()
}

/// The number `k` of a job id `job_<k>` as the API writes them (the k-th
/// job created, from 1); `None` for any other text, which names no job.
fn job_number(id: &str) -> Option<usize> {
    let k: usize = id.strip_prefix("job_")?.parse().ok()?;
    (k >= 1 && id == format!("job_{k}")).then_some(k)
}

/// Polls answered by the jobs the API created (`model-polls`): a poll
/// (`GET /v1/jobs/<id>`) the API ran asked for a job created before it
/// arrived, and a poll it answered 404 `NOT_FOUND` asked for one that was
/// not. The reference set is the ledger's charged creations in the order
/// they were answered (the k-th is `job_<k>`); a creation answered in the
/// poll's own instant counts either way. A PUT of an upload
/// (`PUT /v1/uploads/<id>`) stores any id, so it is never answered 404.
/// The first finding only.
pub fn check_polls(r: &Report) -> Vec<ModelViolation> {
    let mut created: Vec<Duration> = r
        .ledger
        .arrivals
        .iter()
        .filter(|a| a.outcome == ArrivalOutcome::Charged)
        .filter_map(|a| a.answered_at)
        .collect();
    created.sort();
    for (i, a) in r.ledger.arrivals.iter().enumerate() {
        let not_found = a.status == 404 && a.code.as_deref().is_some_and(|c| c.eq_ignore_ascii_case("not_found"));
        let upload = a.path.strip_prefix("/v1/uploads/").filter(|id| !id.is_empty() && !id.contains('/'));
        if let (Some(id), true, "PUT") = (upload, not_found, a.method.as_str()) {
            return blame(i, a, format!(": a PUT of upload {id} answered 404, but the API stores any id"));
        }
        let Some(id) = a.path.strip_prefix("/v1/jobs/").filter(|_| a.method == "GET") else { continue };
        let ran = matches!(a.outcome, ArrivalOutcome::Accepted | ArrivalOutcome::Running | ArrivalOutcome::Aborted);
        if !ran && !not_found {
            continue;
        }
        let before = created.partition_point(|&t| t < a.at);
        let by_then = created.partition_point(|&t| t <= a.at);
        let k = job_number(id);
        let wrong = match k {
            Some(k) if not_found && k <= before => format!("answered 404, but job {k} was created before it"),
            Some(k) if ran && k > by_then => format!("ran, but only {by_then} jobs had been created by then"),
            None if ran => "ran, but the API names no job so".to_owned(),
            _ => continue,
        };
        return blame(i, a, format!(": a poll of {id} {wrong}"));
    }
    Vec::new()
}

/// Credits taken at the published prices (`model-credits`, brief 002: a
/// compression costs 1, a conversion 2): every job the fleet creates runs
/// the scenario's one operation, so the ledger's credits are its charged
/// jobs times that price. Nothing else reads the price, so a model that
/// charged another passed every check. Blames the last charged arrival;
/// nothing for an operation without a published price. Then each account's
/// balance and monthly quota (`check_reservations`): a model that never
/// refused a reservation passed every check too.
pub fn check_credits(r: &Report) -> Vec<ModelViolation> {
    let price = match r.scenario_config.fleet.op.as_str() {
        "compress" => 1,
        "convert" => 2,
        _ => return Vec::new(),
    };
    let l = &r.ledger;
    let last = l.arrivals.iter().rposition(|a| a.outcome == ArrivalOutcome::Charged);
    if let Some(last) = last.filter(|_| l.credits_spent != l.charged * price) {
        let op = &r.scenario_config.fleet.op;
        let what =
            format!(": the API took {} credits for {} jobs, where each {op} costs {price}", l.credits_spent, l.charged);
        return blame(last, &l.arrivals[last], what);
    }
    check_reservations(r, price)
}

/// Whether arrival `a` was refused by the monthly quota: 429 with the
/// quota's code in either envelope (`QUOTA_EXCEEDED`, `insufficient_quota`).
fn refused_by_quota(a: &Arrival) -> bool {
    a.outcome == ArrivalOutcome::Refused
        && a.status == 429
        && a.code.as_deref().is_some_and(|c| c == "QUOTA_EXCEEDED" || c == "insufficient_quota")
}

/// Replays each account's reservations in arrival order (the order the API
/// admitted them): a job's price is reserved against the balance and the
/// month's quota when it is admitted, and given back only when its run dies
/// (aborted, at its `answered_at`). Every job-creating POST that got as far
/// as the reservation is judged by what was held before it: admitted only
/// if both the quota and the balance could take it; refused by the quota
/// (429) only if the month's quota could not; refused for credits (402)
/// only if the quota could and the balance could not. A reservation counts
/// against the quota of the month (server wall clock) it was made in. An
/// arrival in the same millisecond as a release is not judged (which came
/// first is the network's). The first finding only.
fn check_reservations(r: &Report, price: u64) -> Vec<ModelViolation> {
    let api = &r.scenario_config.api;
    for account in api.accounts.iter().filter(|a| a.credits.is_some() || a.monthly_quota.is_some()) {
        // Each reservation held: its month, and when it was given back.
        let mut held: Vec<((i64, u32), Option<Duration>)> = Vec::new();
        let jobs = (r.ledger.arrivals.iter().enumerate())
            .filter(|(_, a)| a.account.as_deref() == Some(&account.name) && a.method == "POST" && a.path == "/v1/jobs");
        for (i, a) in jobs {
            let month = api.month_at(a.at);
            let reserved =
                matches!(a.outcome, ArrivalOutcome::Charged | ArrivalOutcome::Running | ArrivalOutcome::Aborted);
            let released = (a.outcome == ArrivalOutcome::Aborted).then_some(a.answered_at.unwrap_or(a.at));
            let live: Vec<(i64, u32)> =
                held.iter().filter(|(_, gone)| gone.is_none_or(|t| t > a.at)).map(|&(m, _)| m).collect();
            let tied = held.iter().any(|&(_, gone)| gone == Some(a.at));
            if reserved {
                held.push((month, released));
            }
            if tied {
                continue;
            }
            let in_month = live.iter().filter(|&&m| m == month).count() as u64 * price;
            let in_credits = live.len() as u64 * price;
            let quota_takes = account.monthly_quota.is_none_or(|q| in_month + price <= q);
            let balance_takes = account.credits.is_none_or(|c| in_credits + price <= c);
            let held_text = || {
                let quota = account.monthly_quota.map(|q| format!("{in_month} of its quota of {q} used this month"));
                let credits = account.credits.map(|c| format!("{in_credits} of its {c} credits held"));
                quota.into_iter().chain(credits).collect::<Vec<_>>().join(", ")
            };
            let wrong = if reserved && !(quota_takes && balance_takes) {
                "admitted a job"
            } else if refused_by_quota(a) && quota_takes {
                "refused a job for the monthly quota"
            } else if a.outcome == ArrivalOutcome::Refused && a.status == 402 && (!quota_takes || balance_takes) {
                "refused a job for credits (402)"
            } else {
                continue;
            };
            let what = format!(": {wrong} costing {price} for account {} with {}", account.name, held_text());
            return blame(i, a, what);
        }
    }
    Vec::new()
}

/// Replays the ledger's keyed writes through a reference map of keys, in
/// time order (each arrival, then each answer or abandonment that ends a
/// run), and compares what the store did with each: run it (never seen,
/// or forgotten), replay its stored answer, 409 reused (another request
/// under the key) or 409 in progress. An arrival in the same millisecond as
/// a change to its key is not judged (the order within a step is the
/// network's). The first finding only.
pub fn check_idempotency(r: &Report) -> Vec<ModelViolation> {
    // (time, order, arrival): an arrival at 0, the end of its run at 1.
    let mut events: Vec<(Duration, u8, usize)> = Vec::new();
    for (i, a) in r.ledger.arrivals.iter().enumerate() {
        if a.account.is_none() || a.idempotency_key.is_none() || retention(&a.method, &a.path).is_none() {
            continue;
        }
        events.push((a.at, 0, i));
        let ends = matches!(a.outcome, ArrivalOutcome::Charged | ArrivalOutcome::Accepted | ArrivalOutcome::Aborted);
        if let (true, Some(t)) = (ends, a.answered_at) {
            events.push((t, 1, i));
        }
    }
    events.sort();
    // The millisecond each run with a key ended in: an arrival then races it.
    let mut ends: BTreeMap<(&str, &str, u128), Vec<usize>> = BTreeMap::new();
    for &(t, _, i) in events.iter().filter(|e| e.1 == 1) {
        let a = &r.ledger.arrivals[i];
        let slot = (a.account.as_deref().unwrap_or(""), a.idempotency_key.as_deref().unwrap_or(""), t.as_millis());
        ends.entry(slot).or_default().push(i);
    }
    let mut map: BTreeMap<(&str, &str), Held> = BTreeMap::new();
    let mut changed: BTreeMap<(&str, &str), Duration> = BTreeMap::new();
    for &(t, order, i) in &events {
        let a = &r.ledger.arrivals[i];
        let slot = (a.account.as_deref().unwrap_or(""), a.idempotency_key.as_deref().unwrap_or(""));
        let fingerprint = (a.method.clone(), a.path.clone(), a.body_digest);
        if order == 1 {
            // The run ended: an answer is kept for the retention, an abandoned run forgotten.
            if a.outcome == ArrivalOutcome::Aborted {
                map.remove(&slot);
            } else if let Some(h) = map.get_mut(&slot) {
                h.expires = retention(&a.method, &a.path).map(|keep| t + keep);
            }
            changed.insert(slot, t);
            continue;
        }
        let Some(done) = did(a) else { continue };
        if map.get(&slot).is_some_and(|h| h.expires.is_some_and(|e| t >= e)) {
            map.remove(&slot);
        }
        let expect = match map.get(&slot) {
            None => Expect::Run,
            Some(h) if h.fingerprint != fingerprint => Expect::Reused,
            Some(h) if h.expires.is_some() => Expect::Replay,
            Some(_) => Expect::InProgress,
        };
        let racing = changed.get(&slot).is_some_and(|&c| c.as_millis() == t.as_millis())
            || ends.get(&(slot.0, slot.1, t.as_millis())).is_some_and(|xs| xs.iter().any(|&j| j != i));
        if expect != done && !racing {
            return vec![ModelViolation {
                arrival: i,
                message: format!(
                    "blames the model: arrival {i} at {} ms ({} {}, a key of {}): the idempotency store answered {} ({done:?}), a reference map of keys would {expect:?} it",
                    t.as_millis(),
                    a.method,
                    a.path,
                    slot.0,
                    a.status,
                ),
            }];
        }
        // Follow what the API did, so one disagreement is reported once.
        if done == Expect::Run
            && matches!(
                a.outcome,
                ArrivalOutcome::Charged | ArrivalOutcome::Accepted | ArrivalOutcome::Running | ArrivalOutcome::Aborted
            )
        {
            map.insert(slot, Held { fingerprint, expires: None });
            changed.insert(slot, t);
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests;
