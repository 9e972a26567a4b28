//! The swarm's world generator: one seed becomes a whole scenario — API,
//! limiter, advice form, clock skew, fleet, operation mix, policy, network
//! and an explicit fault schedule — deterministically, from
//! `derive(seed, "swarm", 0)` and PCG-64 ([`swarm`]). Each draw below is
//! made in a fixed order; a new one goes last so no other seed's scenario
//! moves. A fault's own numbers are drawn in its home
//! (`sim::world::faults`), which names the draw here that schedules it.

use std::time::Duration;

use rand_pcg::Pcg64;

use super::Kind;
use crate::core::backoff::{AdviceMode, Backoff, Jitter, Spread};
use crate::core::policy::Policy;
use crate::env::{Rng, seeded_rng};
use crate::gate::aimd::{AimdConfig, RateControl};
use crate::sim::checks::invariants as check;
use crate::sim::run::scenario::{BudgetConfig, CoordinatorConfig, DeferralConfig, GateConfig, Hosts, OpMix, Scenario};
use crate::sim::run::seed::derive;
use crate::sim::world::api::{
    AccountConfig, AdviceForm, ConcurrencyConfig, DateForm, Dialect, Envelope, KeepAlive, LimiterConfig, LimiterKind,
    RateLimitedBody, ScriptStep,
};
use crate::sim::world::faults::{self, Draws};

mod reach;

/// Draws for the swarm, from one PCG-64 stream.
pub(crate) struct Draw(Pcg64);

impl Draws for Draw {
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.0.draw() % (hi - lo + 1)
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[(self.0.draw() % xs.len() as u64) as usize].clone()
    }
}

const S: fn(u64) -> Duration = Duration::from_secs;
/// 2026-11-01T00:00:00Z, a month boundary near the API's default epoch.
const NOVEMBER_2026: u64 = 1_793_491_200;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// The scenario seed `seed` stands for, deterministically. `kind` decides
/// the fleet's shape ([`Kind::All`] lets the seed choose).
pub fn swarm(seed: u64, kind: Kind) -> Scenario {
    let kind = kind.resolve(seed);
    // The draw order is the seed contract: a seed names its scenario only
    // through the order of the draws below, step by step, each step's draws
    // in the order they are written (a draw made and not used included).
    // Moving, adding or removing a draw changes the scenario of every seed
    // after it; a new draw goes last, as the cancellation's did.
    let mut g = Draw(seeded_rng(derive(seed, "swarm", 0)));
    let calm = g.chance(300);
    let mut s = Scenario {
        name: format!("swarm-{kind}-{seed}"),
        description: format!(
            "retrysim hunt: seed {seed}, kind {kind}{}",
            if calm { ", calm (liveness checked)" } else { "" }
        ),
        ..Scenario::default()
    };
    let (workers, jobs) = draw_fleet(&mut g, &mut s, kind, calm);
    draw_api(&mut g, &mut s, calm, jobs);
    draw_policy(&mut g, &mut s, calm);
    draw_network(&mut g, &mut s);
    draw_faults(&mut g, &mut s, calm);
    // Fleet controls, rarely (never in calm scenarios: they may rightly refuse).
    let (mut pacing_clean, mut contended) = (false, false);
    if !calm && kind == Kind::Fleet {
        contended = draw_budget(&mut g, &mut s, workers);
        draw_deferral(&mut g, &mut s, contended);
        pacing_clean = draw_gate(&mut g, &mut s, contended);
    }
    draw_cancel(&mut g, &mut s, calm, pacing_clean);
    draw_habits(&mut g, &mut s, pacing_clean);
    draw_boundaries(&mut g, &mut s, calm);
    draw_hosts(&mut g, &mut s, kind, calm, pacing_clean || contended);
    if !calm && !pacing_clean {
        draw_edges(&mut g, &mut s, kind);
    }
    draw_keep_alive(&mut g, &mut s, calm);
    let mut one_budget = false;
    if !calm && !pacing_clean {
        one_budget = draw_policy_edges(&mut g, &mut s, kind);
    }
    if s.fleet.mix.safe > 0 && g.chance(500) {
        // Polls of one early job: before it is created a 404, after it a 200.
        s.fleet.polled_job = Some(g.range(1, 3) as u32);
    }
    if !calm && !pacing_clean && g.chance(100) {
        draw_repeated_code(&mut g, &mut s);
    }
    if !calm && g.chance(150) {
        // PUTs, idempotent by their method: replayed after a lost answer
        // though they carry no key.
        s.fleet.mix.idempotent = g.range(1, 2) as u32;
    }
    let coordinable = kind == Kind::Fleet && !calm && !(pacing_clean || contended || one_budget);
    if coordinable && s.fleet.deferral.is_none() && s.fleet.coordinator.is_none() && g.chance(300) {
        draw_coordinated_outage(&mut g, &mut s);
    }
    if kind == Kind::Fleet && !calm && !contended && s.fleet.gate == GateConfig::None && g.chance(500) {
        // A pacing gate on `Retry-After` alone: no rate-limit headers, so
        // every refusal holds the gate's jobs (the `pacing-hold` check).
        s.fleet.gate = GateConfig::Pacing(Default::default());
        s.api.rate_limit_headers = false;
    }
    let own = s.fleet.coordinator.is_none();
    if let GateConfig::Aimd(c) = &mut s.fleet.gate
        && g.chance(500)
    {
        draw_aimd_pacing(&mut g, c, own);
    }
    if pacing_clean && s.faults.schedule.is_empty() && g.chance(500) {
        draw_whole_seconds(&mut g, &mut s);
    }
    if !matches!(s.fleet.gate, GateConfig::Pacing(_)) && g.chance(300) {
        draw_dialect(&mut g, &mut s);
    }
    if !calm && s.fleet.gate == GateConfig::None && s.api.dialect == Dialect::None && g.chance(100) {
        draw_nginx(&mut g, &mut s);
    }
    let free_fleet = kind == Kind::Fleet && !contended && !one_budget;
    reach::draw_reach(&mut g, &mut s, calm, pacing_clean, free_fleet);
    // The fault kinds added since: their home draws them, last.
    let drawn = faults::Drawn { calm, limiter_service: s.fleet.coordinator.is_some() };
    faults::draw_last(&mut g, drawn, &mut s.faults.schedule);
    // A pacing gate with attempts in flight across its resets: after the
    // fault kinds, so only the seeds that draw it move.
    reach::pacing_in_flight(&mut g, &mut s, pacing_clean);
    if calm {
        make_ample(&mut s);
    }
    s.time_limit = time_limit(&s);
    s
}

/// Keep-alive as servers do it (Fastify's 72 s, Node's 5 s, an idle timeout
/// at and just under the clients' 4 s pool, none at all as HTTP/1.0 or
/// `http.server`, a cap of requests, closing after an error), and, unless
/// calm, close races on reused connections: more often where an unkeyed
/// POST may meet one after its write.
fn draw_keep_alive(g: &mut Draw, s: &mut Scenario, calm: bool) {
    s.api.keep_alive = KeepAlive {
        enabled: g.chance(900),
        idle_timeout_ms: g.pick(&[72_000, 72_000, 5_000, 4_000, 3_999, 1_000, 0]),
        max_requests: g.pick(&[0, 0, 0, 1, 2, 100]),
        close_after_error: g.chance(200),
    };
    let unkeyed = !s.policy.idempotency_keys || s.fleet.mix.unsafe_post > 0;
    if calm || !g.chance(if unkeyed { 600 } else { 250 }) {
        return;
    }
    for _ in 0..g.range(1, 4) {
        s.faults.schedule.push(faults::draw_close_race(g));
    }
    s.faults.schedule.sort_by_key(|f| f.at);
}

/// The edges of the policy's own limits, on scenarios that are neither
/// calm nor a pacing gate's clean runs (drawn last, after the keep-alive):
/// a decision off by one there passes every world the draws above make.
/// The answers they need go before any script already drawn (the unclear
/// 429s replace it). One of:
/// - unclear 429s only (no code the table lists, no advice), so every run
///   meets its `unclear_max_retries` and one more;
/// - a `Retry-After` of exactly `max_single_wait`, which is not too long;
/// - `Retry-After: 0` under a spread whose cap is a millisecond or less
///   (or none), where the wait is the spread's floor alone;
/// - a wait that ends exactly where the deadline leaves the last attempt
///   its reserve (`min_attempt_time`), which still fits;
/// - a fleet on a percent budget whose `ttl` is a second or two, with lost
///   answers to spend it, so the window renews many times in a run;
/// - a 409 that is not `IDEMPOTENCY_IN_PROGRESS` (a key reused with another
///   body, a plain conflict), which waiting does not fix.
fn draw_policy_edges(g: &mut Draw, s: &mut Scenario, kind: Kind) -> bool {
    if !g.chance(300) {
        return false;
    }
    let refused = |code: Option<&str>, wait: Option<u64>| ScriptStep::new(429, code, wait);
    match g.range(0, 5) {
        0 => {
            s.api.script = vec![refused(g.pick(&[None, Some("TOO_MANY_REQUESTS")]), None)];
            s.api.script_repeat = true;
            let p = &mut s.policy;
            p.unclear_max_retries = g.range(1, 3) as u32;
            p.max_retries = p.max_retries.max(p.unclear_max_retries + 1);
            p.deadline = p.deadline.max(S(60));
        }
        1 => {
            let m = g.range(1, 3);
            s.api.advice = AdviceForm::HeaderSeconds;
            s.api.script.splice(0..0, vec![refused(Some("RATE_LIMITED"), Some(m)); g.range(1, 3) as usize]);
            let p = &mut s.policy;
            (p.use_advice, p.max_single_wait) = (true, S(m));
            p.max_retries = p.max_retries.max(4);
            p.deadline = p.deadline.max(S(60));
        }
        2 => {
            s.api.advice = g.pick(&[AdviceForm::Both, AdviceForm::HeaderSeconds, AdviceForm::BodyOnly]);
            s.api.script.splice(0..0, vec![refused(Some("RATE_LIMITED"), Some(0)); g.range(2, 6) as usize]);
            let p = &mut s.policy;
            let max = g.pick(&[Duration::ZERO, Duration::from_micros(500), MS(1), MS(2)]);
            p.spread =
                Spread { per_mille: 0, min: Duration::ZERO, max, rounded_zero: g.pick(&[Duration::ZERO, MS(1)]) };
            p.use_advice = true;
            p.max_retries = p.max_retries.max(7);
            p.deadline = p.deadline.max(S(30));
        }
        3 if kind == Kind::Fleet => {
            let ttl = g.pick(&[S(1), S(1), S(2)]);
            let (min_per_sec, per_mille) = (g.range(1, 3) as u32, g.pick(&[0, 0, 100, 500, 1_000]));
            // One budget for the whole fleet, nothing else that stops a retry.
            s.fleet.budget = Some(BudgetConfig::Percent { ttl, min_per_sec, per_mille });
            (s.fleet.gate, s.fleet.deferral, s.fleet.hosts, s.fleet.coordinator) =
                (GateConfig::None, None, Hosts::Shared, None);
            s.faults.schedule.retain(|f| f.fault.kind().needs() != faults::Needs::LimiterService);
            // Lost answers found out quickly, and jobs for several windows:
            // the fleet asks for more retries a window than the reserve.
            s.faults.lost_answers_per_mille = g.range(100, 300) as u32;
            contend(s, s.fleet.workers.into());
            s.policy.attempt_timeout = g.pick(&[MS(200), MS(500)]);
            s.fleet.jobs = s.fleet.jobs.max(s.fleet.workers * 30).min(400);
            return true;
        }
        4 => {
            // A wait that ends exactly where the deadline leaves the last
            // attempt its reserve: the first answer comes 2 ms in (a tick
            // each way), and a millisecond either side is drawn too.
            (s.net.min_latency, s.net.max_latency, s.net.tick) = (Duration::ZERO, Duration::ZERO, MS(1));
            s.api.processing_ms = 0;
            s.api.advice = AdviceForm::HeaderSeconds;
            s.api.script.insert(0, refused(Some("RATE_LIMITED"), Some(1)));
            let p = &mut s.policy;
            p.spread = Spread { per_mille: 0, min: Duration::ZERO, max: Duration::ZERO, rounded_zero: Duration::ZERO };
            (p.use_advice, p.advice_mode) = (true, AdviceMode::AdvicePlusSpread);
            p.max_single_wait = p.max_single_wait.max(S(1));
            p.max_retries = p.max_retries.max(1);
            p.min_attempt_time = g.ms(100, 900);
            p.deadline = S(1) + p.min_attempt_time + MS(g.pick(&[1, 2, 2, 2, 3]));
        }
        5 => {
            let conflict =
                ScriptStep::new(409, g.pick(&[Some("IDEMPOTENCY_KEY_REUSED"), Some("CONFLICT"), None]), None);
            s.api.script.splice(0..0, vec![conflict; g.range(1, 3) as usize]);
        }
        _ => {}
    }
    false
}

/// A first answer whose body repeats its code member (legal JSON, RFC 8259
/// §4), drawn last: a quota refusal followed by a rate-limit code, which a
/// reader keeping the last member would retry; the same codes the other
/// way round; or a code the table does not know before a rate-limit code,
/// which is throttled, not terminal.
fn draw_repeated_code(g: &mut Draw, s: &mut Scenario) {
    let (means, written): (&str, [&str; 2]) = g.pick(&[
        ("QUOTA_EXCEEDED", ["QUOTA_EXCEEDED", "RATE_LIMITED"]),
        ("QUOTA_EXCEEDED", ["RATE_LIMITED", "QUOTA_EXCEEDED"]),
        ("RATE_LIMITED", ["SOMETHING_NEW", "RATE_LIMITED"]),
    ]);
    let step =
        ScriptStep { written_codes: written.map(str::to_owned).to_vec(), ..ScriptStep::new(429, Some(means), Some(1)) };
    s.api.script.insert(0, step);
}

/// The fleet: its workers and jobs (returned), the operation and the mix.
fn draw_fleet(g: &mut Draw, s: &mut Scenario, kind: Kind, calm: bool) -> (u64, u64) {
    let (workers, jobs) = match kind {
        Kind::Single => (1, g.range(1, 3)),
        _ => {
            let w = g.range(2, 16);
            (w, g.range(w, (w * 6).min(200)))
        }
    };
    s.fleet.workers = workers as u32;
    s.fleet.jobs = jobs as u32;
    s.fleet.op = g.pick(&["compress", "convert"]).into();
    s.fleet.mix = if calm {
        OpMix::default()
    } else {
        let mut m = OpMix {
            keyed: g.range(0, 3) as u32,
            unsafe_post: g.range(0, 2) as u32,
            safe: g.range(0, 2) as u32,
            idempotent: 0,
        };
        if m.keyed + m.unsafe_post + m.safe == 0 {
            m.keyed = 1;
        }
        m
    };
    (workers, jobs)
}

/// The API: its limiter, how it words advice and dates, its clock, and
/// (unless calm) caps, credits, quotas and a script of answers.
fn draw_api(g: &mut Draw, s: &mut Scenario, calm: bool, jobs: u64) {
    let api = &mut s.api;
    let window_ms = g.pick(&[250, 500, 1_000, 1_000, 2_000, 5_000, 10_000]);
    let writes = g.range(1, 40) as u32;
    api.limiter = LimiterConfig {
        kind: g.pick(&[
            LimiterKind::FixedWindow,
            LimiterKind::FixedWindow,
            LimiterKind::TokenBucket,
            LimiterKind::SlidingWindow,
        ]),
        writes,
        reads: writes * g.range(1, 10) as u32,
        window_ms,
        ..LimiterConfig::default()
    };
    api.advice = g.pick(&[
        AdviceForm::Both,
        AdviceForm::Both,
        AdviceForm::HeaderSeconds,
        AdviceForm::HeaderDate,
        AdviceForm::BodyOnly,
        AdviceForm::None,
        AdviceForm::Malformed,
        AdviceForm::SeveralLines,
        AdviceForm::SeveralLines,
    ]);
    api.envelope = g.pick(&[Envelope::Blinkimg, Envelope::Sume]);
    api.date_form = g.pick(&[DateForm::ImfFixdate, DateForm::Rfc850, DateForm::Asctime]);
    api.send_date = g.chance(800);
    api.clock_skew_ms = if g.chance(600) { 0 } else { g.pick(&[-3_600_000, -3_000, -500, 500, 3_000, 3_600_000]) };
    api.rate_limit_headers = g.chance(500);
    api.processing_ms = g.pick(&[0, 0, 0, 20, 200, 1_500]);
    if !calm {
        draw_refusals(g, s, jobs);
    }
}

/// What else refuses on a scenario that is not calm: a concurrency cap,
/// credits, a monthly quota, an anonymous cap, a script of answers.
fn draw_refusals(g: &mut Draw, s: &mut Scenario, jobs: u64) {
    let api = &mut s.api;
    if g.chance(150) {
        let retry_after_s = g.pick(&[1, 2, 5, 30]);
        api.concurrency = Some(ConcurrencyConfig { max_in_flight: g.range(1, 4) as u32, retry_after_s });
    }
    let account: &mut AccountConfig = &mut api.accounts[0];
    if g.chance(100) {
        account.credits = Some(g.range(0, jobs * 2));
    }
    if g.chance(200) {
        account.monthly_quota = Some(g.range(0, jobs * 2));
        // Half the time the month ends a few seconds in: the quota's
        // `Retry-After` is then short enough that a client misreading
        // it as throttling retries instead of giving up on a too-long wait.
        if g.chance(500) {
            api.epoch_unix_s = NOVEMBER_2026 - g.range(1, 5);
        }
    }
    if g.chance(80) {
        api.anonymous_cap = Some(g.range(1, 5) as u32);
        s.fleet.anonymous = true;
    }
    if g.chance(350) {
        let steps = g.range(1, 4);
        let api = &mut s.api;
        api.script = (0..steps).map(|_| script_step(g)).collect();
        api.script_repeat = g.chance(300);
    }
}

/// The policy: a preset or a random one, and (unless calm) sometimes a
/// short deadline with a large reserve for the last attempt.
fn draw_policy(g: &mut Draw, s: &mut Scenario, calm: bool) {
    s.policy =
        if g.chance(500) { Policy::preset(g.pick(&Policy::PRESETS)).expect("a preset") } else { random_policy(g) };
    if !calm && g.chance(400) {
        // A reserve for the last attempt that is a large part of a short
        // deadline: the deadline rule's `min_attempt_time` then decides.
        s.policy.deadline = g.pick(&[S(2), S(3), S(5)]);
        s.policy.min_attempt_time = g.ms(500, 1_500);
        s.policy.max_retries = s.policy.max_retries.max(3);
        // And waits that end near it: windows of at most a second, so the
        // advice fits the deadline, and a lone client is refused first.
        s.api.limiter.window_ms = s.api.limiter.window_ms.min(1_000);
        if s.api.script.is_empty() {
            let wait = g.range(1, 2);
            s.api.script = vec![ScriptStep::new(429, Some("RATE_LIMITED"), Some(wait)); g.range(1, 3) as usize];
        }
    }
}

/// The network's latencies and tick.
fn draw_network(g: &mut Draw, s: &mut Scenario) {
    let min_latency = g.ms(0, 5);
    s.net.min_latency = min_latency;
    s.net.max_latency = min_latency + g.ms(0, 40);
    s.net.tick = if g.chance(900) { MS(1) } else { g.pick(&[MS(2), MS(5)]) };
}

/// Lost answers (unless calm) and up to five scheduled faults.
fn draw_faults(g: &mut Draw, s: &mut Scenario, calm: bool) {
    if !calm && g.chance(200) {
        s.faults.lost_answers_per_mille = g.range(10, 200) as u32;
    }
    let faults = g.range(0, 5);
    s.faults.schedule = (0..faults).map(|_| faults::draw_network_fault(g)).collect();
    s.faults.schedule.sort_by_key(|f| f.at);
}

/// A shared retry budget, sometimes, for a fleet of `workers`. Whether the
/// fleet contends for the window with a small bucket: its retries, not a
/// gate or a deferral, must then be what the budget stops.
fn draw_budget(g: &mut Draw, s: &mut Scenario, workers: u64) -> bool {
    let mut contended = false;
    if g.chance(650) {
        s.fleet.budget = Some(if g.chance(800) {
            // Mostly small buckets with small refunds: a budget that
            // runs dry is one whose accounting the checks can see.
            let (mut max_tokens, mut token_ratio_milli) = (
                if g.chance(700) { g.range(2, 8) } else { g.range(2, 50) } as u32,
                g.pick(&[1, 10, 50, 100, 100, 250, 500, 1000]),
            );
            // Usually a fleet whose requests fail now and then while
            // most succeed: each failure spends a token, each success
            // refunds a little, so the bucket's accounting decides
            // which retries run. Failures are lost answers, spread
            // among the successes, on keyed jobs that may retry them.
            // (Refusals by a full window do not serve: a closed-loop
            // fleet refuses most of itself at once, the bucket runs dry
            // before any success refunds, and every job left gives up
            // in that window.)
            if g.chance(700) {
                s.faults.lost_answers_per_mille = g.range(100, 300) as u32;
                contend(s, workers);
                // A bucket that binds: refunds below the failure rate,
                // room for a retry (3 tokens), enough jobs to spend it.
                token_ratio_milli = token_ratio_milli.min(100);
                max_tokens = max_tokens.max(3);
                s.fleet.jobs = s.fleet.jobs.max(30);
                contended = true;
            }
            BudgetConfig::TokenBucket { max_tokens, token_ratio_milli }
        } else {
            BudgetConfig::Percent { ttl: S(10), min_per_sec: g.range(0, 10) as u32, per_mille: g.range(0, 500) as u32 }
        });
    }
    contended
}

/// A fleet of `workers` whose only failures are lost answers on keyed
/// jobs, with clients that keep retrying, so the bucket, not the policy,
/// stops them. Draws nothing.
fn contend(s: &mut Scenario, workers: u64) {
    let api = &mut s.api;
    api.limiter.writes = api.limiter.writes.max(workers as u32 * 4);
    api.limiter.reads = api.limiter.reads.max(api.limiter.writes);
    only_the_limiter_refuses(s);
    s.fleet.mix = OpMix::default();
    let p = &mut s.policy;
    p.idempotency_keys = true;
    p.unclear_max_retries = p.unclear_max_retries.max(3);
    p.max_retries = p.max_retries.max(12);
    p.deadline = p.deadline.max(S(60));
    p.max_single_wait = p.max_single_wait.max(S(30));
}

/// Brief 000's deferral, sometimes: an interactive front end with a short
/// budget, whose give-ups that waiting fixes run again in the background.
fn draw_deferral(g: &mut Draw, s: &mut Scenario, contended: bool) {
    // Deferral only where no skewed date or monthly quota makes an
    // advice hours long, so that time_limit covers the background passes
    // (and a client misreading a quota does not simulate a month).
    let short_advice = s.api.clock_skew_ms == 0 && s.api.accounts.iter().all(|a| a.monthly_quota.is_none());
    // (Drawn either way, so the draws after it stay where they were.)
    if g.chance(800) && short_advice && !contended {
        defer(g, s);
        s.policy.max_single_wait = s.policy.max_single_wait.min(MS(500));
    }
}

/// A deferral queue with 1–3 background workers and passes, and a front
/// end's deadline of at most 2, 3 or 5 s (so that it gives up and defers).
pub(super) fn defer(g: &mut Draw, s: &mut Scenario) {
    s.fleet.deferral = Some(DeferralConfig {
        workers: g.range(1, 3) as u32,
        policy: Policy::background(),
        max_passes: g.range(1, 3) as u32,
        defects: Default::default(),
    });
    s.policy.deadline = s.policy.deadline.min(g.pick(&[S(2), S(3), S(5)]));
}

/// An AIMD gate's pacing away from its defaults (drawn last, so no other
/// seed's scenario moves): all three rate controls, pacing from the start
/// at the floor or above it, a deep or a shallow cut, and for a fleet's own
/// gate (not the limiter service's, whose window is drawn with it) a window
/// from one slot up. `aimd-pace` judges the rate from the gate's facts.
fn draw_aimd_pacing(g: &mut Draw, c: &mut AimdConfig, own: bool) {
    c.rate = g.pick(&[RateControl::Off, RateControl::Aimd, RateControl::Cubic]);
    c.initial_rate_milli = g.pick(&[0, 500, 4_000]);
    c.backoff_per_mille = g.pick(&[500, 700, 900]);
    if own {
        c.initial_limit = g.range(1, 8) as u32;
    }
}

/// A whole-second server on a pacing gate's clean run (drawn last, so no
/// other seed's scenario moves): the reset as a Unix time in whole seconds,
/// Flask-Limiter's `int(reset + 1)`, against a whole-second `Date`, at a
/// drawn phase of the server's second, over a window of whole seconds (a
/// server that tells its reset in seconds counts in seconds: `limits`' finest
/// granularity is one second) that the jobs fill six times over or more. The gate learns the window from what
/// happens instead of trusting a bound up to 2 s late (`src/gate/pacing.rs`,
/// "Whole-second servers"); `pacing-no-429` (a refused probe sent alone
/// aside), `pacing-fills-windows` and `pacing-learns-whole-seconds` judge it.
fn draw_whole_seconds(g: &mut Draw, s: &mut Scenario) {
    use crate::sim::world::api::{RateLimitFields, ResetForm};
    s.api.rate_limit_reset = ResetForm::UnixSeconds;
    s.api.rate_limit_fields = g.pick(&[RateLimitFields::Draft6, RateLimitFields::XRateLimit]);
    s.api.send_date = true;
    s.api.clock_skew_ms = g.pick(&[0, 1, 499, 500, 999]);
    let window = &mut s.api.limiter.window_ms;
    *window = (*window / 1_000).max(1) * 1_000;
    // Six windows' worth of jobs or more: the checks judge from the fourth.
    let writes = &mut s.api.limiter.writes;
    *writes = (*writes).min((s.fleet.jobs / 6).max(1));
}

/// A rate-limit dialect on every 429 that advises a wait (drawn last, so
/// no other seed's scenario moves): one of [`Dialect::SPOKEN`], half the
/// time the only advice (`advice = "none"`: no `Retry-After`, no hint in the
/// body), else beside the advice drawn before. No rate-limit headers besides
/// (`rate_limit_headers`), which would speak a second dialect on the same
/// refusal. Never with a pacing gate: it reads the rate-limit headers of one
/// habit (`rate_limit_fields`, `rate_limit_reset`), and would read GitHub's
/// Unix reset as seconds left. A calm scenario keeps a whole-second dialect
/// as its only advice ([`make_ample`]).
fn draw_dialect(g: &mut Draw, s: &mut Scenario) {
    s.api.dialect = g.pick(&Dialect::SPOKEN);
    if g.chance(500) {
        s.api.advice = AdviceForm::None;
    }
    s.api.rate_limit_headers = false;
}

/// nginx's `limit_req` in front of the API (drawn last, so no other seed's
/// scenario moves): its leaky bucket, without `burst`, with one (excess
/// held, not refused) or with `burst nodelay`; its default 503 or 429; its
/// own error page (no code, no wait in the body) and mostly no `Retry-After`
/// (nginx adds none unless told to with `add_header`), no rate-limit
/// headers (nginx sends none; drawn only where no dialect was). A rate in whole requests
/// per second, as nginx's `rate=Nr/s` (the model is exact there). Never
/// with a gate: the gates model a window, not a bucket that drains request
/// by request.
fn draw_nginx(g: &mut Draw, s: &mut Scenario) {
    s.api.limiter.kind = LimiterKind::LeakyBucket;
    s.api.limiter.window_ms = 1_000;
    s.api.rate_limit_headers = false;
    s.api.limiter.burst = g.pick(&[0, 0, 5, 10]);
    s.api.limiter.nodelay = s.api.limiter.burst > 0 && g.chance(500);
    s.api.rate_limited_status = g.pick(&[503, 429]);
    s.api.rate_limited_body = RateLimitedBody::Nginx;
    if g.chance(700) {
        s.api.advice = AdviceForm::None;
    }
}

/// A fleet gate, sometimes. Whether it is a pacing gate on the signals it
/// is built for with nothing else going on (`pacing-no-429` then checks it
/// spends no request on a 429).
fn draw_gate(g: &mut Draw, s: &mut Scenario, contended: bool) -> bool {
    if !g.chance(750) || contended {
        return false;
    }
    s.fleet.gate = g.pick(&[
        GateConfig::Pacing(Default::default()),
        GateConfig::Pacing(Default::default()),
        GateConfig::Aimd(Default::default()),
        GateConfig::Aimd(Default::default()),
    ]);
    // Mostly a pacing gate on the signals it is built for: the writes'
    // fixed window, which it alone uses, read from rate-limit headers, with nothing
    // else refusing or repeating a request. There it must spend no
    // request on a 429 (the `pacing-no-429` check).
    if !(matches!(s.fleet.gate, GateConfig::Pacing(_)) && g.chance(700)) {
        return false;
    }
    let api = &mut s.api;
    api.rate_limit_headers = true;
    api.limiter.kind = LimiterKind::FixedWindow;
    // A window the jobs fill four times over or more, so the
    // gate paces them past the first two windows.
    api.limiter.writes = api.limiter.writes.min((s.fleet.jobs / 4).max(1));
    api.clock_skew_ms = 0;
    // Answered on arrival: long-running requests straddle resets,
    // which the gate counts conservatively but not exactly.
    api.processing_ms = 0;
    only_the_limiter_refuses(s);
    s.fleet.deferral = None;
    // Writes only: one gate paces one budget (reads have their own).
    s.fleet.mix.safe = 0;
    if s.fleet.mix.keyed + s.fleet.mix.unsafe_post == 0 {
        s.fleet.mix.keyed = 1;
    }
    s.faults.lost_answers_per_mille = 0;
    s.faults.schedule.clear();
    true
}

/// The caller cancels the jobs running at some moment (drawn last, so the
/// draws above, and the scenarios without it, are unchanged). Not in calm
/// scenarios, whose every job must complete, nor where the pacing gate's
/// efficiency is checked on a run with nothing else going on.
fn draw_cancel(g: &mut Draw, s: &mut Scenario, calm: bool, pacing_clean: bool) {
    if !calm && !pacing_clean && g.chance(300) {
        let cancel = faults::draw_cancel(g);
        let i = s.faults.schedule.partition_point(|f| f.at <= cancel.at);
        s.faults.schedule.insert(i, cancel);
    }
}

/// Another server's habits, sometimes (drawn last, so the draws before
/// keep their places): how a refusal's wait becomes whole seconds
/// (Flask-Limiter's and a truncating server's say `Retry-After: 0` inside
/// the last second, so a zero advice is common), which rate-limit headers
/// are sent and how they tell the reset, an HTML 429 whose only advice is
/// the header, and `limits`' moving window. Never on a pacing gate's clean
/// runs, whose check reads the draft-6 headers of a fixed window.
fn draw_habits(g: &mut Draw, s: &mut Scenario, pacing_clean: bool) {
    use crate::sim::world::api::{RateLimitFields, RateLimitedBody, ResetForm, RetryAfterRounding};
    if pacing_clean || !g.chance(600) {
        return;
    }
    let api = &mut s.api;
    api.retry_after_rounding = g.pick(&[
        RetryAfterRounding::Up,
        RetryAfterRounding::Down,
        RetryAfterRounding::Down,
        RetryAfterRounding::Truncate,
        RetryAfterRounding::Truncate,
    ]);
    api.rate_limit_fields = g.pick(&[
        RateLimitFields::Draft6,
        RateLimitFields::XRateLimit,
        RateLimitFields::Structured,
        RateLimitFields::Draft6AndStructured,
    ]);
    api.rate_limit_reset = g.pick(&[ResetForm::SecondsLeft, ResetForm::UnixSeconds]);
    // An HTML page carries no body advice: only where a header says the wait.
    let header = !matches!(api.advice, AdviceForm::BodyOnly | AdviceForm::None | AdviceForm::Malformed);
    if g.chance(400) && header {
        api.rate_limited_body = RateLimitedBody::Html;
    }
    if g.chance(300) && api.limiter.kind == LimiterKind::SlidingWindow {
        api.limiter.kind = LimiterKind::MovingWindow;
    }
}

/// Values at the edges, sometimes (drawn after the habits): the uniform
/// draws above reach them rarely, and a comparison off by one shows only
/// there. A limit of one write, no retries, a spread whose cap is under a
/// millisecond or whose cover of a zero advice is off or a millisecond, no
/// escalation, a processing time of half the window.
fn draw_boundaries(g: &mut Draw, s: &mut Scenario, calm: bool) {
    if !g.chance(400) {
        return;
    }
    let edge = g.range(0, 5);
    let p = &mut s.policy;
    match edge {
        0 if !calm => s.api.limiter.writes = 1,
        1 if !calm => p.max_retries = 0,
        2 => p.spread = Spread { per_mille: 0, min: Duration::ZERO, max: Duration::from_micros(500), ..p.spread },
        3 => p.spread.rounded_zero = g.pick(&[Duration::ZERO, MS(1)]),
        4 => p.escalate = false,
        5 if !calm => s.api.processing_ms = s.api.limiter.window_ms / 2,
        _ => {}
    }
}

/// Per-worker hosts, sometimes (drawn after the boundaries, so the draws
/// before keep their places): each worker its own process, with its own
/// budget and its own gate, and, on a scenario that is not calm, sometimes
/// the limiter service that runs one AIMD gate for them all over the network
/// (brief 003), now and then partitioned away (the workers fall back to
/// their local limits). Not with a deferral (its queue lives on the shared
/// fleet host), nor where `shared_only`: a pacing gate's clean runs (its
/// check is of one shared gate), a contended bucket (one bucket, not a
/// gate, must be what stops the fleet's retries).
fn draw_hosts(g: &mut Draw, s: &mut Scenario, kind: Kind, calm: bool, shared_only: bool) {
    if kind != Kind::Fleet || shared_only || s.fleet.deferral.is_some() || !g.chance(300) {
        return;
    }
    s.fleet.hosts = Hosts::PerWorker;
    if calm || !g.chance(500) {
        return;
    }
    draw_coordinator(g, s);
    if g.chance(300) {
        draw_limiter_partition(g, s);
    }
}

/// The limiter service that runs one AIMD gate for the fleet's per-worker
/// hosts, its timings drawn.
fn draw_coordinator(g: &mut Draw, s: &mut Scenario) {
    let aimd = AimdConfig { initial_limit: g.range(1, 4) as u32, ..AimdConfig::default() };
    s.fleet.gate = GateConfig::Aimd(aimd);
    let silence = g.pick(&[MS(500), S(1), S(2)]);
    let heartbeat = silence / g.pick(&[2, 4, 5]) as u32;
    // The service reclaims a slot only after the longest attempt could have
    // reported back: a lease under the attempt timeout frees slots still in use.
    let attempt = s.policy.attempt_timeout + s.net.max_latency * 2 + s.net.tick * 4;
    let lease = silence.max(attempt + g.pick(&[MS(1), S(1), S(30)]));
    // The fallback: one attempt in flight, at most one every 10 s (the
    // default) or one a second.
    let fallback = AimdConfig::fixed(1, g.pick(&[100, 1_000]));
    s.fleet.coordinator = Some(CoordinatorConfig {
        fallback,
        silence,
        heartbeat,
        connect_timeout: g.pick(&[MS(100), MS(500)]),
        retry_after: g.pick(&[S(1), S(5)]),
        lease,
    });
}

/// The limiter service partitioned away from the workers for a while,
/// starting in the first 6 s.
fn draw_limiter_partition(g: &mut Draw, s: &mut Scenario) {
    let at = g.ms(0, 6_000);
    limiter_partition_from(g, s, at);
}

/// A partition of the limiter service from `at`, 0.5 s to 5 s long, in the
/// schedule's order; returns when it heals.
fn limiter_partition_from(g: &mut Draw, s: &mut Scenario, at: Duration) -> Duration {
    let partition = faults::draw_limiter_partition(g, at);
    let until = partition.fault.until().unwrap_or(at);
    let i = s.faults.schedule.partition_point(|f| f.at <= at);
    s.faults.schedule.insert(i, partition);
    until
}

/// A coordinated fleet that loses its limiter service once or twice
/// (drawn last, on a fleet whose draws above leave its hosts free to be
/// per-worker): the workers fall back and come back, and the service ends
/// sessions and reclaims leases. The draw in [`draw_hosts`] gives few of
/// these, and fewer outages.
fn draw_coordinated_outage(g: &mut Draw, s: &mut Scenario) {
    s.fleet.hosts = Hosts::PerWorker;
    draw_coordinator(g, s);
    // A quarter from the start (the first dial fails), a quarter soon
    // after (the first grants are out), half any time in the first 6 s.
    let at = match g.range(0, 3) {
        0 => Duration::ZERO,
        1 => g.ms(1, 500),
        _ => g.ms(0, 6_000),
    };
    let healed = limiter_partition_from(g, s, at);
    if g.chance(400) {
        // A second one after the first has healed: a worker reconnects twice.
        let at = healed + g.ms(500, 4_000);
        limiter_partition_from(g, s, at);
    }
}

/// More values at the edges, on scenarios that are neither calm nor a
/// pacing gate's clean runs (drawn last): a fleet whose workers are the
/// limiter's limit, one under it or one over it, so the opening burst fills
/// the window exactly, or leaves one slot, or is refused once; a token
/// bucket whose half is a whole number of tokens and whose refunds are
/// whole tokens, so a bucket drained by refusals stops at exactly half
/// (gRPC's `tokens > max / 2`, off by one there only); a network with no
/// latency and no spread, so a retry told a reset in milliseconds arrives
/// on the window's edge, and a request answered exactly one window (or one
/// millisecond less) after it arrived.
fn draw_edges(g: &mut Draw, s: &mut Scenario, kind: Kind) {
    if !g.chance(350) {
        return;
    }
    match g.range(0, 3) {
        0 if kind == Kind::Fleet => {
            let under = g.pick(&[0, 1, 2]);
            s.api.limiter.writes = (s.fleet.workers + 1).saturating_sub(under).max(1);
            s.api.limiter.reads = s.api.limiter.reads.max(s.api.limiter.writes);
        }
        1 if kind == Kind::Fleet => {
            let max_tokens = g.pick(&[2, 4, 6, 8]);
            s.fleet.budget = Some(BudgetConfig::TokenBucket { max_tokens, token_ratio_milli: 1_000 });
        }
        2 => {
            s.net.min_latency = Duration::ZERO;
            s.net.max_latency = Duration::ZERO;
            let p = &mut s.policy;
            p.spread = Spread { per_mille: 0, min: Duration::ZERO, max: Duration::ZERO, rounded_zero: Duration::ZERO };
        }
        3 => {
            let window = s.api.limiter.window_ms;
            s.api.processing_ms = window - g.range(0, 1);
        }
        _ => {}
    }
}

fn script_step(g: &mut Draw) -> ScriptStep {
    let (status, code, wait): (u16, Option<&str>, Option<u64>) = g.pick(&[
        (429, Some("RATE_LIMITED"), Some(1)),
        (429, Some("rate_limited"), Some(2)),
        // `Retry-After: 0`, a boundary: the spread alone spaces the retry.
        (429, Some("RATE_LIMITED"), Some(0)),
        (429, Some("rate_limited"), Some(0)),
        (429, None, Some(1)),
        (429, Some("QUOTA_EXCEEDED"), Some(1)),
        (429, Some("insufficient_quota"), Some(2)),
        (429, Some("queue_full"), Some(30)),
        (503, Some("unavailable"), Some(1)),
        (503, None, None),
        (402, Some("INSUFFICIENT_CREDITS"), None),
        (409, Some("IDEMPOTENCY_IN_PROGRESS"), None),
        (500, None, None),
    ]);
    ScriptStep::new(status, code, wait)
}

fn random_policy(g: &mut Draw) -> Policy {
    let deadline = g.pick(&[S(2), S(5), S(10), S(30), S(60), S(120)]);
    let base = g.pick(&[MS(10), MS(50), MS(100), MS(500), S(1), S(2)]);
    let spread_min = g.ms(0, 200);
    Policy {
        name: format!("random-{}", g.range(0, 9999)),
        max_retries: g.range(0, 8) as u32,
        deadline,
        max_single_wait: g.pick(&[S(1), S(5), S(10), S(30), S(60)]),
        // Sometimes a reserve that is a large part of the deadline, so that
        // the deadline rule's `min_attempt_time` decides often.
        min_attempt_time: if g.chance(700) { g.ms(0, 1_000) } else { g.ms(1_000, deadline.as_millis() as u64 / 2) },
        attempt_timeout: g.pick(&[MS(200), MS(1_000), S(5), S(30)]),
        backoff: Backoff {
            base,
            cap: base.max(g.pick(&[S(1), S(8), S(30)])),
            jitter: g.pick(&[Jitter::None, Jitter::Full, Jitter::Full, Jitter::Equal, Jitter::Decorrelated]),
        },
        advice_mode: g.pick(&[AdviceMode::AdvicePlusSpread, AdviceMode::MaxOfAdviceAndBackoff]),
        spread: Spread {
            per_mille: g.range(0, 500) as u32,
            min: spread_min,
            max: spread_min + g.ms(0, 1_000),
            ..Spread::default()
        },
        escalate: true,
        unclear_max_retries: g.range(0, 3) as u32,
        use_advice: g.chance(950),
        idempotency_keys: g.chance(900),
    }
}

/// Takes away every refusal but the request-rate limiter's: no script, no
/// concurrency or anonymous cap, no credits or monthly quota, no anonymous
/// callers. Draws nothing.
fn only_the_limiter_refuses(s: &mut Scenario) {
    let api = &mut s.api;
    api.script.clear();
    api.concurrency = None;
    api.anonymous_cap = None;
    for a in &mut api.accounts {
        a.credits = None;
        a.monthly_quota = None;
    }
    s.fleet.anonymous = false;
}

/// Raises a calm scenario's numbers until [`check::liveness_expected`] holds
/// (for a scenario that meets its other conditions): the advice form, the
/// `Date` header, and the policy's timeouts, deadline and retries.
pub fn make_ample(s: &mut Scenario) {
    if matches!(s.api.advice, AdviceForm::None | AdviceForm::Malformed) && !s.api.dialect.advises_whole_seconds() {
        s.api.advice = AdviceForm::Both;
    }
    if s.api.clock_skew_ms != 0 {
        s.api.send_date = true;
    }
    let floor = s.net.max_latency * 2 + MS(s.api.processing_ms) + s.net.tick * 4 + MS(100);
    let longest = check::longest_advice(s);
    let p = &mut s.policy;
    p.use_advice = true;
    p.idempotency_keys = true;
    p.max_single_wait = p.max_single_wait.max(longest);
    p.attempt_timeout = p.attempt_timeout.max(floor);
    let (deadline, retries) = check::liveness_needs(s);
    let p = &mut s.policy;
    p.deadline = p.deadline.max(deadline);
    p.max_retries = p.max_retries.max(retries);
}

/// A virtual-time limit no correct run reaches: every job ends by its
/// deadline (invariant 1), and the queue hands jobs to idle workers, so the
/// last job starts within `ceil(jobs / workers)` job lifetimes; deferred
/// jobs add their background passes (each a background deadline after an
/// advice of at most [`check::longest_advice`], a 30 s `queue_full`, the
/// hour a keyless fleet's cap tells, or the clock skew a date carries). A
/// run that hits it has a job that outlived its deadline.
pub fn time_limit(s: &Scenario) -> Duration {
    let rounds = s.fleet.jobs.div_ceil(s.fleet.workers) + 1;
    let front = (s.policy.deadline + S(1)) * rounds + check::faults_heal_at(s);
    // Deferred jobs then run in the background, one pass after another,
    // each after the advice the last one was given. A keyless fleet past
    // the anonymous cap is told to wait for the wall-clock hour's end (up
    // to 3600 s), and a front end that defers on it (an answer whose
    // `X-RateLimit-Reset` shows the cap spent) waits that long: the
    // 100,000-seed hunt's seed 71097.
    let capped = s.fleet.anonymous && s.api.anonymous_cap.is_some();
    let background = s.fleet.deferral.as_ref().map_or(Duration::ZERO, |d| {
        let told = if capped { S(3600) } else { S(30) };
        let advice = check::longest_advice(s).max(told) + Duration::from_millis(s.api.clock_skew_ms.unsigned_abs());
        let pass = d.policy.deadline + advice + S(1);
        pass * d.max_passes * s.fleet.jobs.div_ceil(d.workers.max(1))
    });
    front + background
}
