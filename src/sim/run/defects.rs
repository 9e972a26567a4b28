//! Deliberate defects: the negative controls that show each invariant check
//! can fail, and what `retrysim hunt --sabotage` plants.
//!
//! They live here, in the harness, and never in the production types: each
//! defect is built *around* retrysim's unchanged driver, as a plausible slip
//! a user could make with its public API (a classifier that calls a quota
//! a full window, a transport that mints a new key, a policy configured
//! with one retry more than promised). The client still declares the
//! scenario's policy as its promise, so the checks hold it to that.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

use crate::client::IDEMPOTENCY_KEY;
use crate::core::budget::RetryBudget;
use crate::core::classify::{Class, Classifier, DefaultTable, Outcome};
use crate::core::policy::Policy;
use crate::env::{Rng, Transport, TransportError, seeded_rng};
use crate::gate::aimd::{AimdConfig, RateControl};
use crate::gate::{Admission, Feedback, Gate};
use crate::locks::lock;
use crate::sim::world::api::CLIENT_HEADER;

/// Defines [`Defects`] and [`TABLE`] from one list: each defect once, with
/// its field, its command-line name and what slips, in a fixed order.
macro_rules! defects {
    ($($(#[doc = $doc:literal])* $field:ident = $name:literal, $slip:literal;)*) => {
        /// Which deliberate defects are on. All off by default, and absent from a
        /// scenario's TOML unless set (`[client.defects]`).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct Defects {
            $($(#[doc = $doc])* pub $field: bool,)*
        }

        /// Every defect, in a fixed order: its command-line name, what slips
        /// (a few words), and its switch in [`Defects`].
        const TABLE: &[Defect] = &[$(Defect { name: $name, slip: $slip, flag: |d| &mut d.$field },)*];
    };
}

/// One row of [`TABLE`].
struct Defect {
    name: &'static str,
    slip: &'static str,
    flag: fn(&mut Defects) -> &mut bool,
}

defects! {
    /// A fresh Idempotency-Key on every attempt after the first (a
    /// transport that mints its own key).
    fresh_key_each_attempt = "fresh-key-each-attempt", "a transport mints a new Idempotency-Key per attempt";
    /// Sleep the advice even when it passes the deadline (the client runs
    /// with ten times the deadline it declares).
    ignore_deadline = "ignore-deadline", "sleeps the advice past the deadline";
    /// Retry on the backoff alone, ignoring Retry-After.
    ignore_retry_after = "ignore-retry-after", "retries on the backoff alone";
    /// Retry after a terminal answer such as QUOTA_EXCEEDED (a classifier
    /// that calls every terminal answer a full window).
    retry_terminal = "retry-terminal", "every terminal answer read as a full window";
    /// Replay an unsafe POST after an ambiguous failure (the caller vouches
    /// for every request as replayable).
    replay_unsafe = "replay-unsafe", "an unsafe POST replayed after a lost answer";
    /// One attempt more than `max_retries + 1`.
    extra_attempt = "extra-attempt", "one attempt more than promised";
    /// A classification table with the quota codes (`QUOTA_EXCEEDED`,
    /// `insufficient_quota`) listed as throttling: a terminal 429 retried.
    quota_as_throttled = "quota-as-throttled", "a terminal 429 (QUOTA_EXCEEDED) retried";
    /// Of several `Retry-After` lines only the first is read (a middleware
    /// that copies `headers.get(RETRY_AFTER)`), where the largest valid one binds.
    first_retry_after_line = "first-retry-after-line", "of several Retry-After lines, the first (shorter) one read";
    /// The fleet's AIMD gate is told every 429 as a neutral outcome (a
    /// wrapper that forwards the transport's class), so it never backs off.
    aimd_ignores_429 = "aimd-ignores-429", "an AIMD gate that does not back off on a 429";
    /// The fleet's AIMD gate is told every success as a neutral outcome (a
    /// wrapper that reports only failures), so it never raises its limit.
    aimd_never_grows = "aimd-never-grows", "an AIMD gate that never raises its limit on successes";
    /// The deadline rule forgets `min_attempt_time`: a wait may end with
    /// less time left than an attempt needs.
    deadline_ignores_min_attempt_time = "deadline-ignores-min-attempt-time", "the deadline rule forgets min_attempt_time";
    /// A token-bucket retry budget refunds a whole token per success
    /// instead of `token_ratio` (a ratio read in tokens, not thousandths).
    budget_refunds_too_much = "budget-refunds-too-much", "a token-bucket budget refunds a whole token per success";
    /// The simulated fixed window admits one request more than its limit (a
    /// defect of the model, not the client: the hunt sets `api.window_admits_one_more`).
    window_admits_one_more = "window-admits-one-more", "the simulated fixed window admits one request over its limit";
    /// The deferral queue drops every other job the front end defers, the first included.
    deferral_drops_jobs = "deferral-drops-jobs", "the deferral queue drops every other deferred job";
    /// The fleet's gate is told every answer without its rate-limit reset
    /// (a wrapper forwarding only `Limit` and `Remaining`), so a pacing gate
    /// cannot wait for the window's reset and probes into refusals.
    pacing_ignores_reset = "pacing-ignores-reset", "a pacing gate that does not wait for the advertised window reset";
    /// The driver is handed a cancellation token of its own (a wrapper that
    /// writes `CancellationToken::new()` where it meant the caller's
    /// `child_token()`), so a cancelled job sleeps its retry wait out.
    ignore_cancel = "ignore-cancel", "a cancelled job sleeps its retry wait out";
    /// A classification table that reads every throttled answer as unclear
    /// (the rate-limit codes left out of `throttled_codes`): the client
    /// gives up once `unclear_max_retries` is spent, though the advice was valid.
    throttled_as_unclear = "throttled-as-unclear", "a throttled answer with valid advice read as unclear";
    /// The spread turned off (a zeroed `Spread` where the declared policy
    /// has one): a zero advice is retried at once, in step with every client told it.
    spread_off = "spread-off", "the spread turned off: a zero advice retried at once";
    /// The simulated API truncates a refusal's wait where it promises to
    /// round it up (a defect of the model: the hunt sets `api.advice_rounds_down`).
    advice_rounds_down = "advice-rounds-down", "the simulated API advises a wait that ends before the window's reset";
    /// The simulated idempotency store forgets a key once its request
    /// completes (a defect of the model: the hunt sets `api.store_forgets_answers`).
    store_forgets_answers = "store-forgets-answers", "the simulated idempotency store forgets a completed key";
    /// A transport that reads a pooled connection closed or reset after the
    /// request was written as "nothing sent" (the resend rule of a pool
    /// stretched past what hyper-util and Go allow), so the driver replays an
    /// unkeyed POST that may have run.
    closed_after_write_as_not_sent = "closed-after-write-as-not-sent", "a connection closed after the write read as not sent: an unkeyed POST replayed";
    /// A classification table without the transient statuses (an empty
    /// `transient_statuses`): a 502, 503 or 504 stops the job as terminal.
    transient_as_terminal = "transient-as-terminal", "a 502, 503 or 504 read as terminal: the job stops on a passing failure";
    /// The backoff configured at twice the declared base and cap (a
    /// window read in the wrong unit, or doubled once too often): every
    /// wait drawn from it may be up to twice what the policy promises.
    wait_doubled = "wait-doubled", "the backoff planned at twice its window";
    /// The spread capped at a millisecond (bounds read in the wrong unit)
    /// where the declared policy has a wider one: a non-zero advice is
    /// retried on its exact instant, in step with every client told it.
    spread_not_drawn = "spread-not-drawn", "the spread on an advice never drawn: it is retried on its exact instant";
    /// The backoff drawn with full jitter where the declared jitter keeps
    /// part of the window (equal, decorrelated) or all of it (none): a
    /// jitter setting the client does not read.
    jitter_full = "jitter-full", "the backoff drawn from zero where the declared jitter keeps part of its window";
    /// Escalation turned off where the declared policy escalates (a
    /// setting the client does not read): a throttled answer after the
    /// first waits the plain advice again, not a second more per refusal.
    escalation_skipped = "escalation-skipped", "a repeated throttled refusal waits the plain advice";
    /// The advice taken as it is where the declared policy takes the
    /// longer of the advice and the backoff draw (`max_of_advice_and_backoff`
    /// read as `advice_plus_spread`): the advice alone, however long the backoff.
    max_of_advice_only = "max-of-advice-only", "the longer of advice and backoff waited as the advice alone";
    /// Every retry charged twice to the fleet's retry budget (a driver that
    /// withdraws on the failed attempt and again on the retry, as gRFC A6
    /// charges the failure): the budget refuses long before it is spent.
    budget_charged_twice = "budget-charged-twice", "every retry charged twice to the retry budget: it refuses while half is left";
    /// The fleet's gate is told every answer without its `Retry-After` (a
    /// wrapper forwarding only the status and the rate-limit headers), so
    /// a pacing gate does not hold the fleet on a refusal: the other jobs
    /// go on into refusals while the refused one waits its advice.
    pacing_ignores_retry_after = "pacing-ignores-retry-after", "a pacing gate that does not hold the fleet for a refusal's Retry-After";
    /// The fleet's AIMD gates built without their pacing (a config loader
    /// that drops `rate` and reads it as `off`): a throttle cuts the window
    /// but never slows the pace, so the fleet keeps its send rate into
    /// the refusals.
    aimd_pacing_off = "aimd-pacing-off", "an AIMD gate built without its pacing: a throttle never slows the pace";
    /// The fleet's gate is told a reset given as a Unix time as the seconds
    /// left against the answer's `Date` (a middleware that normalises the
    /// headers): a pacing gate then trusts a bound up to 2 s late instead
    /// of learning the window of a whole-second server.
    pacing_trusts_rounded_reset = "pacing-trusts-rounded-reset", "a pacing gate told a whole-second Unix reset as seconds left";
    /// A client that reads only `Retry-After` (and the body): every field of
    /// a rate-limit dialect on a 429 or a 403 goes unread (a transport that
    /// hands the driver a response without them, as a client written before
    /// the dialects sees it), so where a dialect is the only advice the
    /// client retries on its backoff alone.
    reads_only_retry_after = "reads-only-retry-after", "a client that reads only Retry-After: a rate-limit dialect's advice unread";
    /// Every jitter draw the same (a random source stubbed with a constant,
    /// a test double left in): each wait is the same fraction of its range,
    /// half the window with full jitter, half the cap of a spread.
    jitter_constant = "jitter-constant", "every jitter draw the same: each wait the same fraction of its range";
    /// The jitter drawn from a generator seeded alike in every job (a
    /// constant seed, or the build's): the keys stay the worker's, but each
    /// retry of a fleet draws what every other job drew at that retry.
    jitter_same_draw = "jitter-same-draw", "the jitter drawn alike in every worker: a fleet retries in step";
    /// Each jitter draw keeps only its top two bits (a generator of two bits
    /// scaled up, `rand() % 4`): four possible fractions of each range.
    jitter_four_values = "jitter-four-values", "the jitter drawn from four possible values";
    /// Equal jitter drawn where the declared jitter is full (a setting the
    /// client reads wrongly): no wait under half its window, inside every bound.
    equal_declared_full = "equal-declared-full", "equal jitter drawn where full jitter is declared";
    /// A body read into an error type whose `code` is required (a reader
    /// that fails on a code-less body and falls back to "no advice"): the
    /// hint of a code-less refusal's body (`retry_after_seconds`,
    /// `resetAt`) goes unread, so where it is the only advice the client
    /// retries on its backoff alone.
    body_advice_needs_code = "body-advice-needs-code", "the body's advice unread when the body has no code";
    /// The code read only from `error.code`, the default envelope's member
    /// (a reader written against Blinkimg's envelope): a code in
    /// `error.type` (Sume's) goes unread, so a quota refusal reads as an
    /// unclear 429 and a throttled one spends the unclear retries.
    code_only_default_member = "code-only-default-member", "the code read only from error.code: error.type unread";
    /// The deferral queue starts a background run once the *first* advice
    /// its front end was given has passed, not the last (a queue that reads
    /// the run's trace from the front): where the front end was told a short
    /// wait and then a longer one, the background run comes back early.
    deferral_first_advice = "deferral-first-advice", "a deferred job run again after its front end's first advice, not its last";
    /// The fleet's pacing gate counts none of its attempts still in flight
    /// against the window that starts at a reset (a gate that zeroes its
    /// count there): where answers take long enough that attempts sent
    /// before the reset land in the new window, it lets a whole window's
    /// worth more go after them.
    pacing_forgets_in_flight = "pacing-forgets-in-flight", "a pacing gate that forgets its attempts in flight at a window reset";
}

/// How a defective client draws its jitter: the `jitter-*` defects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JitterSlip {
    /// Every draw the same, `2^63`: half of each range.
    Constant,
    /// Every job's draws from one generator seeded alike.
    SameDraw,
    /// Each draw's top two bits only.
    FourValues,
}

impl Defects {
    /// How the defective client draws its jitter, if a `jitter-*` defect is on.
    pub(crate) fn jitter_slip(&self) -> Option<JitterSlip> {
        if self.jitter_constant {
            Some(JitterSlip::Constant)
        } else if self.jitter_same_draw {
            Some(JitterSlip::SameDraw)
        } else if self.jitter_four_values {
            Some(JitterSlip::FourValues)
        } else {
            None
        }
    }
}

/// A job's generator as a client with a [`JitterSlip`] draws from it: the
/// first `keep` draws (the idempotency key's) pass through, every later one
/// (the jitter's: two per decision) slips. The job's own generator is drawn
/// as often as an honest client draws it.
pub(crate) struct SlippedDraws<'a> {
    inner: &'a mut dyn Rng,
    slip: JitterSlip,
    keep: u32,
    same: Pcg64,
}

impl<'a> SlippedDraws<'a> {
    /// `inner` with `slip`, passing the first `keep` draws through.
    pub fn new(inner: &'a mut dyn Rng, slip: JitterSlip, keep: u32) -> SlippedDraws<'a> {
        SlippedDraws { inner, slip, keep, same: seeded_rng(0x5eed) }
    }
}

impl Rng for SlippedDraws<'_> {
    fn draw(&mut self) -> u64 {
        let real = self.inner.draw();
        if self.keep > 0 {
            self.keep -= 1;
            return real;
        }
        match self.slip {
            JitterSlip::Constant => 1 << 63,
            JitterSlip::SameDraw => self.same.draw(),
            JitterSlip::FourValues => real & (3 << 62),
        }
    }
}

/// The defects by their command-line names, in a fixed order.
pub const NAMES: [&str; TABLE.len()] = {
    let mut names = [""; TABLE.len()];
    let mut i = 0;
    while i < TABLE.len() {
        names[i] = TABLE[i].name;
        i += 1;
    }
    names
};

/// What slips, in a few words, for defect `name` (one of [`NAMES`]).
pub fn describe(name: &str) -> &'static str {
    TABLE.iter().find(|d| d.name == name).map_or("", |d| d.slip)
}

impl Defects {
    /// Whether every defect is off.
    pub fn is_off(&self) -> bool {
        *self == Defects::default()
    }

    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        TABLE.iter().find(|d| d.name == name).map(|d| (d.flag)(self))
    }

    /// Turns on the defect named `name` (one of [`NAMES`]); `false` for an unknown name.
    pub fn set(&mut self, name: &str) -> bool {
        self.flag(name).map(|f| *f = true).is_some()
    }

    /// The names of the defects that are on, in [`NAMES`] order.
    pub fn names(&self) -> Vec<&'static str> {
        let mut copy = *self;
        TABLE.iter().filter(|d| *(d.flag)(&mut copy)).map(|d| d.name).collect()
    }

    /// The AIMD gate the defective fleet really builds, from the config it declares.
    pub fn running_gate(&self, declared: AimdConfig) -> AimdConfig {
        if self.aimd_pacing_off {
            return AimdConfig { rate: RateControl::Off, ..declared };
        }
        declared
    }

    /// The policy the defective client really runs, from the one it declares.
    pub fn running_policy(&self, declared: &Policy) -> Policy {
        let mut p = declared.clone();
        if self.ignore_deadline {
            p.deadline = p.deadline.saturating_mul(10);
        }
        if self.ignore_retry_after {
            p.use_advice = false;
        }
        if self.extra_attempt {
            p.max_retries = p.max_retries.saturating_add(1);
        }
        if self.deadline_ignores_min_attempt_time {
            p.min_attempt_time = std::time::Duration::ZERO;
        }
        if self.wait_doubled {
            p.backoff.base = p.backoff.base.saturating_mul(2);
            p.backoff.cap = p.backoff.cap.saturating_mul(2);
        }
        if self.jitter_full {
            p.backoff.jitter = crate::core::backoff::Jitter::Full;
        }
        if self.equal_declared_full && p.backoff.jitter == crate::core::backoff::Jitter::Full {
            p.backoff.jitter = crate::core::backoff::Jitter::Equal;
        }
        if self.escalation_skipped {
            p.escalate = false;
        }
        if self.max_of_advice_only {
            p.advice_mode = crate::core::backoff::AdviceMode::AdvicePlusSpread;
        }
        if self.spread_not_drawn {
            let one = std::time::Duration::from_millis(1);
            p.spread = crate::core::backoff::Spread { per_mille: 0, min: one, max: one, ..p.spread };
        }
        if self.spread_off {
            let zero = std::time::Duration::ZERO;
            p.spread = crate::core::backoff::Spread { per_mille: 0, min: zero, max: zero, rounded_zero: zero };
        }
        p
    }

    /// The classifier the defective client uses.
    pub fn classifier(&self) -> Arc<dyn Classifier> {
        let mut table = DefaultTable::default();
        if self.quota_as_throttled {
            let quota = ["QUOTA_EXCEEDED", "insufficient_quota"];
            table.terminal_codes.retain(|c| !quota.contains(&c.as_str()));
            table.throttled_codes.extend(quota.map(str::to_owned));
        }
        if self.transient_as_terminal {
            table.transient_statuses.clear();
        }
        let classifier: Arc<dyn Classifier> =
            if self.retry_terminal { Arc::new(TerminalAsThrottled(table)) } else { Arc::new(table) };
        if self.throttled_as_unclear { Arc::new(ThrottledAsUnclear(classifier)) } else { classifier }
    }
}

/// Calls every terminal answer a full window: QUOTA_EXCEEDED is retried.
struct TerminalAsThrottled(DefaultTable);

impl Classifier for TerminalAsThrottled {
    fn classify(&self, outcome: Outcome<'_>) -> Class {
        match self.0.classify(outcome) {
            Class::Terminal => Class::Throttled,
            class => class,
        }
    }
}

/// Reads every throttled answer as unclear: a valid advice then buys only
/// `unclear_max_retries` retries.
struct ThrottledAsUnclear(Arc<dyn Classifier>);

impl Classifier for ThrottledAsUnclear {
    fn classify(&self, outcome: Outcome<'_>) -> Class {
        match self.0.classify(outcome) {
            Class::Throttled => Class::Unclear,
            class => class,
        }
    }
}

/// A transport that replaces the `Idempotency-Key` of every attempt after a
/// job's first with a fresh one. Attempts are told apart by the job's label.
pub(crate) struct FreshKeys<T> {
    inner: T,
    state: Mutex<(BTreeMap<String, u32>, Pcg64)>,
}

impl<T> FreshKeys<T> {
    /// Wraps `inner`; fresh keys are drawn from a generator seeded with `seed`.
    pub fn new(inner: T, seed: u64) -> FreshKeys<T> {
        FreshKeys { inner, state: Mutex::new((BTreeMap::new(), seeded_rng(seed))) }
    }
}

impl<T: Transport> Transport for FreshKeys<T> {
    async fn send(&self, mut req: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        if req.headers().contains_key(IDEMPOTENCY_KEY) {
            let label = req.headers().get(CLIENT_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            let mut guard = lock(&self.state);
            let (seen, rng) = &mut *guard;
            let n = seen.entry(label).or_insert(0);
            *n += 1;
            if *n > 1 {
                let key = format!("{:016x}{:016x}", rng.draw(), rng.draw());
                req.headers_mut().insert(IDEMPOTENCY_KEY, HeaderValue::from_str(&key).expect("hex is a header value"));
            }
        }
        self.inner.send(req).await
    }
}

/// A gate that tells the gate it wraps every answer `when` picks as a
/// neutral outcome: with every 429 picked an AIMD gate never cuts its limit
/// (`aimd-ignores-429`), with every success it never raises it
/// (`aimd-never-grows`).
pub(crate) struct TellsNeutral {
    inner: Arc<dyn Gate>,
    when: fn(&Feedback<'_>) -> bool,
}

impl Gate for TellsNeutral {
    fn admit(&self) -> Admission<'_> {
        self.inner.admit()
    }

    fn done(&self, feedback: &Feedback<'_>) {
        if (self.when)(feedback) {
            self.inner.done(&Feedback { class: Class::Transient, ..*feedback });
        } else {
            self.inner.done(feedback);
        }
    }

    fn queued(&self) -> usize {
        self.inner.queued()
    }
}

/// A gate that tells the gate it wraps every answer with its headers
/// edited (`pacing-ignores-reset`, `pacing-ignores-retry-after`).
pub(crate) struct EditsHeaders {
    inner: Arc<dyn Gate>,
    edit: fn(&mut HeaderMap),
}

impl Gate for EditsHeaders {
    fn admit(&self) -> Admission<'_> {
        self.inner.admit()
    }

    fn done(&self, feedback: &Feedback<'_>) {
        match feedback.headers {
            Some(h) => {
                let mut h = h.clone();
                (self.edit)(&mut h);
                self.inner.done(&Feedback { headers: Some(&h), ..*feedback });
            }
            None => self.inner.done(feedback),
        }
    }

    fn queued(&self) -> usize {
        self.inner.queued()
    }
}

/// Without its `RateLimit-Reset` / `X-RateLimit-Reset` field (nor the
/// structured field's `t`): a pacing gate then never learns when the
/// window resets.
fn drop_reset(h: &mut HeaderMap) {
    h.remove("ratelimit-reset");
    h.remove("x-ratelimit-reset");
    // The structured `RateLimit` field tells the reset as its `t` parameter.
    let structured: Vec<HeaderValue> = h
        .get_all("ratelimit")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| v.split(';').filter(|p| !p.trim().starts_with("t=")).collect::<Vec<_>>().join(";"))
        .filter_map(|v| HeaderValue::from_str(&v).ok())
        .collect();
    h.remove("ratelimit");
    for v in structured {
        h.append("ratelimit", v);
    }
}

/// A Unix-time reset (`RateLimit-Reset` / `X-RateLimit-Reset`) rewritten
/// as the seconds it leaves after the answer's `Date`: the same rounded
/// bound, no longer marked as read against whole seconds.
fn reset_as_seconds_left(h: &mut HeaderMap) {
    let Some(date) = h.get(http::header::DATE).and_then(|v| httpdate::parse_http_date(v.to_str().ok()?).ok()) else {
        return;
    };
    let date = date.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for name in ["ratelimit-reset", "x-ratelimit-reset"] {
        let unix = h.get(name).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
        if let Some(unix) = unix.filter(|&u| u >= 1_000_000_000) {
            h.insert(name, HeaderValue::from(unix.saturating_sub(date)));
        }
    }
}

/// Without its `Retry-After` lines: a pacing gate then never holds the
/// fleet on a refusal.
fn drop_retry_after(h: &mut HeaderMap) {
    h.remove(http::header::RETRY_AFTER);
}

impl Defects {
    /// The fleet gate the defects put around `gate` (the gate itself when none applies).
    pub fn wrap_gate(&self, gate: Arc<dyn Gate>) -> Arc<dyn Gate> {
        let neutral = |inner, when| -> Arc<dyn Gate> { Arc::new(TellsNeutral { inner, when }) };
        let gate = if self.aimd_ignores_429 { neutral(gate, |f| f.status == Some(429)) } else { gate };
        let gate = if self.aimd_never_grows { neutral(gate, |f| f.class == Class::Success) } else { gate };
        let edits = |inner, edit| -> Arc<dyn Gate> { Arc::new(EditsHeaders { inner, edit }) };
        let gate = if self.pacing_ignores_reset { edits(gate, drop_reset) } else { gate };
        let gate = if self.pacing_trusts_rounded_reset { edits(gate, reset_as_seconds_left) } else { gate };
        if self.pacing_ignores_retry_after { edits(gate, drop_retry_after) } else { gate }
    }
}

/// A retry budget whose every deposit is made `times` times over.
pub(crate) struct Refunds {
    inner: Arc<dyn RetryBudget>,
    times: u32,
}

impl RetryBudget for Refunds {
    fn deposit(&self, now: std::time::Duration) {
        for _ in 0..self.times {
            self.inner.deposit(now);
        }
    }

    fn withdraw(&self, now: std::time::Duration) -> bool {
        self.inner.withdraw(now)
    }
}

/// A retry budget charged twice for every retry.
pub(crate) struct ChargedTwice(Arc<dyn RetryBudget>);

impl RetryBudget for ChargedTwice {
    fn deposit(&self, now: std::time::Duration) {
        self.0.deposit(now);
    }

    fn withdraw(&self, now: std::time::Duration) -> bool {
        let first = self.0.withdraw(now);
        self.0.withdraw(now) && first
    }
}

impl Defects {
    /// The retry budget the defects put around `budget`, a token bucket
    /// refunding `token_ratio_milli` per success (`None`: another budget).
    pub fn wrap_budget(&self, budget: Arc<dyn RetryBudget>, token_ratio_milli: Option<u32>) -> Arc<dyn RetryBudget> {
        match token_ratio_milli {
            Some(r) if self.budget_refunds_too_much => {
                Arc::new(Refunds { inner: budget, times: 1000u32.div_ceil(r.max(1)).max(2) })
            }
            _ if self.budget_charged_twice => Arc::new(ChargedTwice(budget)),
            _ => budget,
        }
    }
}

/// A transport that, when `on`, reports a connection closed or reset after
/// the request was written (hyper's "connection closed before message
/// completed", a reset) as [`TransportFailure::NotSent`](crate::core::classify::TransportFailure::NotSent).
pub(crate) struct ClosedAsNotSent<T> {
    inner: T,
    on: bool,
}

impl<T> ClosedAsNotSent<T> {
    /// Wraps `inner`; a plain pass-through unless `on`.
    pub fn new(inner: T, on: bool) -> ClosedAsNotSent<T> {
        ClosedAsNotSent { inner, on }
    }
}

impl<T: Transport> Transport for ClosedAsNotSent<T> {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        use crate::core::classify::TransportFailure;
        self.inner.send(req).await.map_err(|mut e| {
            let closed = ["connection closed before message completed", "reset"].iter().any(|m| e.message.contains(m));
            if self.on && e.failure == TransportFailure::MaybeArrived && closed {
                e.failure = TransportFailure::NotSent;
            }
            e
        })
    }
}

/// A transport that reads advice as a careless middleware would: with
/// `first-retry-after-line`, only the first `Retry-After` line of every
/// response, as one copying `headers.get(..)` would; with
/// `reads-only-retry-after`, no field of any rate-limit dialect on a 429 or
/// a 403 (`Dialect::every_field`), as a client written before them
/// reads: `Retry-After` and the body are all it sees.
pub(crate) struct ReadsAdvice<T> {
    inner: T,
    first_line: bool,
    only_retry_after: bool,
    body_needs_code: bool,
    code_only: bool,
}

impl<T> ReadsAdvice<T> {
    /// Wraps `inner` with the advice-reading slips of `defects`; a plain
    /// pass-through when neither is on.
    pub fn new(inner: T, defects: &Defects) -> ReadsAdvice<T> {
        ReadsAdvice {
            inner,
            first_line: defects.first_retry_after_line,
            only_retry_after: defects.reads_only_retry_after,
            body_needs_code: defects.body_advice_needs_code,
            code_only: defects.code_only_default_member,
        }
    }
}

impl<T: Transport> Transport for ReadsAdvice<T> {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        let mut res = self.inner.send(req).await?;
        if self.first_line
            && let Some(first) = res.headers().get(http::header::RETRY_AFTER).cloned()
        {
            res.headers_mut().insert(http::header::RETRY_AFTER, first);
        }
        if self.only_retry_after && matches!(res.status().as_u16(), 403 | 429) {
            for name in crate::sim::world::api::Dialect::every_field() {
                res.headers_mut().remove(name);
            }
        }
        if self.body_needs_code || self.code_only {
            let body = misread_body(res.body(), self.body_needs_code, self.code_only);
            if let Some(body) = body {
                *res.body_mut() = body;
            }
        }
        Ok(res)
    }
}

/// A JSON error body as the body slips read it: with `needs_code`, an
/// `error` object without a `code` or `type` string loses its hints
/// (`retry_after_seconds`, `resetAt`); with `code_only`, every `error`
/// object loses its `type`. `None`: the body is not such an envelope, or
/// nothing changed (it is then passed on byte for byte).
fn misread_body(body: &Bytes, needs_code: bool, code_only: bool) -> Option<Bytes> {
    let mut doc: serde_json::Value = serde_json::from_slice(body).ok()?;
    let error = doc.get_mut("error")?.as_object_mut()?;
    let mut changed = false;
    if code_only {
        changed |= error.remove("type").is_some();
    }
    let coded = ["code", "type"].iter().any(|m| error.get(*m).is_some_and(serde_json::Value::is_string));
    if needs_code && !coded {
        for hint in ["retry_after_seconds", "resetAt"] {
            changed |= error.remove(hint).is_some();
        }
    }
    changed.then(|| Bytes::from(serde_json::to_vec(&doc).expect("a JSON value serializes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in NAMES {
            assert!(!describe(name).is_empty(), "{name}");
            let mut d = Defects::default();
            assert!(d.set(name));
            assert_eq!(d.names(), vec![name]);
        }
        assert!(!Defects::default().set("nope"));
        assert!(Defects::default().is_off());
    }

    /// Records the headers of every answer it is told of.
    struct Seen(Mutex<Vec<http::HeaderMap>>);

    impl Gate for Seen {
        fn admit(&self) -> Admission<'_> {
            Box::pin(async {})
        }
        fn done(&self, feedback: &Feedback<'_>) {
            self.0.lock().unwrap().push(feedback.headers.cloned().unwrap_or_default());
        }
        fn queued(&self) -> usize {
            0
        }
    }

    #[test]
    fn pacing_ignores_reset_hides_every_reset_form_and_keeps_the_rest() {
        let seen = Arc::new(Seen(Mutex::new(Vec::new())));
        let d = Defects { pacing_ignores_reset: true, ..Defects::default() };
        let gate = d.wrap_gate(seen.clone());
        let mut h = http::HeaderMap::new();
        h.insert("ratelimit-limit", HeaderValue::from_static("30"));
        h.insert("ratelimit-remaining", HeaderValue::from_static("0"));
        h.insert("ratelimit-reset", HeaderValue::from_static("1"));
        h.insert("x-ratelimit-reset", HeaderValue::from_static("1"));
        h.insert("ratelimit", HeaderValue::from_static("\"writes\";r=0;t=1"));
        let feedback =
            Feedback { now: std::time::Duration::ZERO, status: Some(200), class: Class::Success, headers: Some(&h) };
        gate.done(&feedback);
        Defects::default().wrap_gate(seen.clone()).done(&feedback);
        let seen = seen.0.lock().unwrap();
        assert_eq!(seen[0].get("ratelimit-remaining").unwrap(), "0");
        assert_eq!(seen[0].get("ratelimit").unwrap(), "\"writes\";r=0");
        assert!(seen[0].get("ratelimit-reset").is_none() && seen[0].get("x-ratelimit-reset").is_none());
        assert_eq!(seen[1], h, "without the defect the gate is told the answer as it came");
    }

    #[test]
    fn pacing_trusts_rounded_reset_tells_a_unix_reset_as_seconds_left_after_date() {
        let seen = Arc::new(Seen(Mutex::new(Vec::new())));
        let d = Defects { pacing_trusts_rounded_reset: true, ..Defects::default() };
        let mut h = http::HeaderMap::new();
        h.insert("date", HeaderValue::from_static("Thu, 08 Oct 2026 09:00:00 GMT")); // 1791450000
        h.insert("x-ratelimit-reset", HeaderValue::from_static("1791450002"));
        h.insert("ratelimit-reset", HeaderValue::from_static("1"));
        let feedback =
            Feedback { now: std::time::Duration::ZERO, status: Some(200), class: Class::Success, headers: Some(&h) };
        d.wrap_gate(seen.clone()).done(&feedback);
        let seen = seen.0.lock().unwrap();
        assert_eq!(seen[0].get("x-ratelimit-reset").unwrap(), "2");
        assert_eq!(seen[0].get("ratelimit-reset").unwrap(), "1", "seconds left already: unchanged");
        let told = crate::gate::pacing::RateLimitHeaders::read(&seen[0]);
        assert!(!told.reset_from_date, "the gate no longer knows the bound is whole seconds");
    }

    #[test]
    fn the_body_slips_hide_a_code_less_hint_and_the_type_member_only() {
        let read = |body: &str, needs_code, code_only| {
            let body = Bytes::from(body.to_owned());
            let seen = misread_body(&body, needs_code, code_only).unwrap_or(body);
            crate::core::body::ErrorEnvelope::parse(&seen).expect("still an envelope")
        };
        let codeless = r#"{"error":{"message":"slow down","retry_after_seconds":2}}"#;
        assert_eq!(read(codeless, false, false).retry_after_seconds, Some(serde_json::json!(2)));
        assert_eq!(read(codeless, true, false).retry_after_seconds, None, "a code-less body's hint unread");
        let coded = r#"{"error":{"code":"RATE_LIMITED","resetAt":"2026-10-17T09:12:32.250Z"}}"#;
        assert!(read(coded, true, false).reset_at.is_some(), "a coded body's hint still read");
        let sume = r#"{"error":{"type":"insufficient_quota","message":"m","retry_after_seconds":1}}"#;
        assert_eq!(read(sume, false, false).code.as_deref(), Some("insufficient_quota"));
        let misread = read(sume, false, true);
        assert_eq!((misread.code, misread.retry_after_seconds), (None, Some(serde_json::json!(1))));
        assert_eq!(read(sume, true, true).retry_after_seconds, None, "both slips: no code left, so no hint");
        let html = Bytes::from_static(b"<html>429</html>");
        assert_eq!(misread_body(&html, true, true), None, "a body that is not an envelope passes as it came");
        assert_eq!(misread_body(&Bytes::from(coded), true, true), None, "nothing to hide: passed byte for byte");
    }

    #[test]
    fn the_running_policy_breaks_the_declared_one() {
        let declared = Policy::batch();
        let d = Defects { ignore_deadline: true, ignore_retry_after: true, extra_attempt: true, ..Defects::default() };
        let p = d.running_policy(&declared);
        assert_eq!(p.deadline, declared.deadline * 10);
        assert!(!p.use_advice);
        assert_eq!(p.max_retries, declared.max_retries + 1);
        assert_eq!(Defects::default().running_policy(&declared), declared);
    }
}
