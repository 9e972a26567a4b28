//! The hunt's reach (issue 54): worlds the draws before make seldom or
//! never together, where a defect in how the core reads a refusal's body, or
//! in when the deferral queue runs a job again, would pass every check.
//! Drawn last (after the nginx draw), so no other seed's scenario moves.
//!
//! - **Advice in the body of a code-less 429**: the only advice a refusal
//!   carries is the body's hint (`resetAt` in Blinkimg's envelope,
//!   `retry_after_seconds` in Sume's), and the body names no code. The core
//!   reads the hint whatever the code (`core::advice::read_advice`); a
//!   reader that needs a code first retries on its backoff alone.
//! - **A code in each member the core reads**: `error.code` (Blinkimg) and
//!   `error.type` (Sume), on refusals whose class shows in what the client
//!   does next: a quota refusal with a short advice (terminal: never
//!   retried) and rate-limit refusals that outnumber the unclear retries
//!   (throttled: retried past them). A reader of `error.code` alone sees a
//!   Sume refusal as an unclear 429.
//! - **A deferral whose front end was told more than one advice**: the
//!   fleet's opening requests are told `Retry-After: 0` and their retries a
//!   wait longer than the front end's budget, so each deferred job's run
//!   saw a short advice and then a longer one, and its background run must
//!   wait for the last.
//! - **A pacing gate with attempts in flight across its resets**
//!   ([`pacing_in_flight`], drawn after the fault kinds, on every pacing
//!   gate's clean run whose server tells seconds left): messages slower
//!   than the window, so attempts sent before the gate's reset land in the
//!   new window, and more workers than the window takes, so the gate is
//!   what stops them. The gate counts the
//!   attempts in flight at a reset against the new window; one that forgot
//!   them lets a whole window's worth more go after them.

use std::time::Duration;

use super::{Draw, Draws, S};
use crate::sim::run::scenario::{GateConfig, Hosts, Scenario};
use crate::sim::world::api::{
    AdviceForm, Dialect, Envelope, KeepAlive, LimiterKind, RateLimitedBody, ResetForm, ScriptStep,
};

/// One of the reach's worlds, sometimes: never on a calm scenario (its
/// refusals would break the liveness it checks) nor on a pacing gate's clean
/// run (whose check needs the limiter alone to refuse), nor behind nginx
/// (whose error page carries no envelope). `free_fleet`: a fleet whose
/// budget is not what the checks must see stop it (not contended, not the
/// policy edges' one budget), which may defer.
pub(super) fn draw_reach(g: &mut Draw, s: &mut Scenario, calm: bool, pacing_clean: bool, free_fleet: bool) {
    // Nor with a pacing gate: the gate on `Retry-After` alone (drawn before)
    // is what `pacing-hold` judges, and these worlds would take its seeds.
    let pacing = matches!(s.fleet.gate, GateConfig::Pacing(_));
    if calm || pacing_clean || pacing || s.api.limiter.kind == LimiterKind::LeakyBucket {
        return;
    }
    if may_defer(s, free_fleet) && g.chance(600) {
        deferral_told_twice(g, s);
        return;
    }
    if !g.chance(200) {
        return;
    }
    // The body's hint alone needs no dialect beside it; where one was drawn
    // (`generator_coverage` counts its seeds) the code's world keeps it.
    if g.chance(500) && s.api.dialect == Dialect::None {
        body_advice_without_code(g, s)
    } else {
        a_code_in_each_member(g, s)
    }
}

/// Where the deferral may run: a free fleet without the limiter service
/// (the deferral's queue lives on the one shared host).
fn may_defer(s: &Scenario, free_fleet: bool) -> bool {
    free_fleet && s.fleet.coordinator.is_none()
}

/// Refusals in the envelope (not an HTML page), their advice in `form`
/// unless a dialect was drawn: its advice (alone or beside another) stays.
fn enveloped(s: &mut Scenario, form: AdviceForm) {
    s.api.rate_limited_body = RateLimitedBody::Envelope;
    if s.api.dialect == Dialect::None {
        s.api.advice = form;
    }
}

/// Code-less 429s first, whose only advice is the body's hint: no
/// `Retry-After`, no rate-limit headers (and no dialect: drawn only where
/// none was). A code-less 429 is
/// unclear, so the policy retries as many of them as come, with a wait it
/// may take.
fn body_advice_without_code(g: &mut Draw, s: &mut Scenario) {
    s.api.envelope = g.pick(&[Envelope::Blinkimg, Envelope::Sume]);
    enveloped(s, AdviceForm::BodyOnly);
    s.api.rate_limit_headers = false;
    let (wait, n) = (g.range(1, 3), g.range(1, 3));
    s.api.script.splice(0..0, vec![ScriptStep::new(429, None, Some(wait)); n as usize]);
    let p = &mut s.policy;
    p.use_advice = true;
    p.unclear_max_retries = p.unclear_max_retries.max(n as u32);
    p.max_retries = p.max_retries.max(n as u32 + 1);
    p.max_single_wait = p.max_single_wait.max(S(wait));
    p.deadline = p.deadline.max(S(30));
}

/// Refusals whose code decides what comes next, in either envelope's
/// member (Sume's `type` twice as often: Blinkimg's `code` is what most
/// draws write): a quota refusal with a one-second advice, or rate-limit
/// refusals one more than the unclear retries (one), with `Retry-After`
/// (or the dialect drawn before).
fn a_code_in_each_member(g: &mut Draw, s: &mut Scenario) {
    let envelope = g.pick(&[Envelope::Sume, Envelope::Sume, Envelope::Blinkimg]);
    s.api.envelope = envelope;
    enveloped(s, g.pick(&[AdviceForm::Both, AdviceForm::HeaderSeconds]));
    let (quota, limited) = match envelope {
        Envelope::Sume => ("insufficient_quota", "rate_limited"),
        Envelope::Blinkimg => ("QUOTA_EXCEEDED", "RATE_LIMITED"),
    };
    let steps = if g.chance(400) {
        vec![ScriptStep::new(429, Some(quota), Some(1))]
    } else {
        vec![ScriptStep::new(429, Some(limited), Some(1)); 2]
    };
    s.api.script.splice(0..0, steps);
    let p = &mut s.policy;
    p.use_advice = true;
    p.unclear_max_retries = 1;
    p.max_retries = p.max_retries.max(3);
    p.max_single_wait = p.max_single_wait.max(S(1));
    p.deadline = p.deadline.max(S(30));
}

/// A deferral (drawn as `draw_deferral` draws one, where none was, on one
/// shared host, with advice short enough that `time_limit` covers the
/// background passes: no skewed date, no monthly quota), and
/// the fleet's first requests told `Retry-After: 0` and the next as many a
/// wait of 2 or 3 s, longer than the front end's longest (at most
/// 500 ms): a keyed job deferred then saw both, and its background run
/// waits for the second. No gate, and a reserve for the last attempt of at
/// most 100 ms, and no retry budget, so the front end sends its retry
/// rather than giving up before it.
fn deferral_told_twice(g: &mut Draw, s: &mut Scenario) {
    if s.fleet.deferral.is_none() {
        super::defer(g, s);
    }
    enveloped(s, g.pick(&[AdviceForm::Both, AdviceForm::HeaderSeconds]));
    let workers = s.fleet.workers as usize;
    let wait = g.range(2, 3);
    let mut steps = vec![ScriptStep::new(429, Some("RATE_LIMITED"), Some(0)); workers];
    steps.extend(vec![ScriptStep::new(429, Some("RATE_LIMITED"), Some(wait)); workers]);
    s.api.script.splice(0..0, steps);
    s.api.script_repeat = false;
    (s.fleet.gate, s.fleet.budget, s.fleet.hosts) = (GateConfig::None, None, Hosts::Shared);
    s.api.clock_skew_ms = 0;
    s.api.accounts.iter_mut().for_each(|a| a.monthly_quota = None);
    s.fleet.mix.keyed = s.fleet.mix.keyed.max(1);
    let p = &mut s.policy;
    p.use_advice = true;
    p.max_retries = p.max_retries.max(2);
    p.max_single_wait = p.max_single_wait.min(Duration::from_millis(500));
    p.min_attempt_time = p.min_attempt_time.min(Duration::from_millis(100));
}

/// A pacing gate's clean run (`pacing_clean`, drawn before) whose attempts
/// are in flight across the gate's resets: every such run whose server
/// tells the seconds left (not the whole-second server's draw), drawn last
/// of all, after the fault kinds, so no other seed's scenario moves.
/// Windows of 1 or 2 s (whole seconds: the seconds left a window's first
/// answer tells are exact), each message taking between 0-20 ms and a
/// window and a half or two, so of the attempts the gate lets go at a
/// reset some land in the next window, still unanswered at the gate's next
/// reset; two or three times as many workers as the window takes (2 to 6),
/// so at each reset more are waiting than the window has room for; three
/// to six jobs a worker. Connections stay open (no close, no race), no
/// fault, and every attempt has time to be answered (the attempt timeout
/// covers a connect and the request, four messages); the deadline covers
/// the jobs' wait at the gate. `pacing-no-429` judges it (a refused
/// request that was out together with the window's whole limit, all sent
/// after the gate read it); a gate that forgot its attempts in flight at a
/// reset is refused there (`pacing-forgets-in-flight`).
pub(super) fn pacing_in_flight(g: &mut Draw, s: &mut Scenario, pacing_clean: bool) {
    if !pacing_clean || s.api.rate_limit_reset != ResetForm::SecondsLeft {
        return;
    }
    let window = g.pick(&[1_000, 1_000, 2_000]);
    let limit = g.range(2, 6);
    s.api.limiter.window_ms = window;
    s.api.limiter.writes = limit as u32;
    let workers = limit * g.range(2, 3);
    s.fleet.workers = workers as u32;
    s.fleet.jobs = (workers * g.range(3, 6)) as u32;
    s.net.min_latency = Duration::from_millis(g.range(0, 20));
    s.net.max_latency = Duration::from_millis(window * g.range(3, 4) / 2);
    s.net.tick = Duration::from_millis(1);
    s.api.keep_alive = KeepAlive { enabled: true, idle_timeout_ms: 72_000, max_requests: 0, close_after_error: false };
    s.faults.schedule.clear();
    let p = &mut s.policy;
    // A connect (a message each way), the request and its answer.
    p.attempt_timeout = p.attempt_timeout.max(s.net.max_latency * 4 + s.net.tick * 8 + Duration::from_millis(100));
    // Each window lets `limit` of the jobs go: the last waits about
    // jobs / limit windows of up to four messages' time each.
    let windows = u64::from(s.fleet.jobs).div_ceil(limit) + 2;
    p.deadline = p.deadline.max(s.net.max_latency * 4 * windows as u32 + Duration::from_millis(window * windows));
    p.max_retries = p.max_retries.max(3);
}
