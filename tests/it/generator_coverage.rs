//! Imports `retrysim::internals` (hidden, no semver promise) for the hunt's
//! generator (`hunt::swarm`), read seed by seed.
//!
//! The hunt's generator draws the whole world: every scenario key (a leaf
//! of a scenario's TOML) is drawn away from its default by at least one seed of the default hunt
//! (`retrysim hunt`: seeds 1..=500), unless it is listed below with the
//! reason it is not drawn; every fault kind is drawn; and the values at the
//! edges, where a comparison off by one shows, are drawn too. Every value of
//! every server habit (from the habits' own list, `habits::KNOBS`) is
//! checked by `hunt::worlds`'s unit test `the_default_hunt_draws_every_habit`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use retrysim::internals::checks::hunt::{Kind, swarm};
use retrysim::internals::run::runner::{JobOutcome, run};
use retrysim::internals::run::scenario::{BudgetConfig, GateConfig, Hosts, NAMES, Scenario, named};
use retrysim::internals::world::net::ScheduledFault;
use serde_json::Value;

/// The default hunt's range.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=500;

/// Keys the generator leaves at their default on purpose, each with why.
const NOT_DRAWN: &[(&str, &str)] = &[
    ("name", "a label, not a world"),
    ("description", "a label, not a world"),
    ("time_limit", "computed from the rest of the scenario"),
    ("api.accounts.0.name", "a label: the account's name changes no behaviour"),
    ("api.accounts.0.keys.0", "a label: the API key's text changes no behaviour"),
    ("api.accounts.0.keys.1", "a label: the API key's text changes no behaviour"),
    (
        "client.kind",
        "the hunt judges retrysim's own client; the baselines break the invariants by design (`retrysim compare` runs them)",
    ),
];

/// Key prefixes the generator never draws, each with why.
const NOT_DRAWN_PREFIX: &[(&str, &str)] = &[
    ("client.defects.", "deliberate defects: `--sabotage` turns them on, never the generator"),
    ("fleet.deferral.defects.", "deliberate defects: `--sabotage` turns them on, never the generator"),
];

/// Every leaf of `v`, by its dotted path (array elements by index).
fn leaves(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                leaves(&p, x, out);
            }
        }
        Value::Array(xs) if !xs.is_empty() => {
            for (i, x) in xs.iter().enumerate() {
                leaves(&format!("{prefix}.{i}"), x, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned(), v.clone());
        }
    }
}

fn flat(s: &Scenario) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    leaves("", &serde_json::to_value(s).expect("a scenario serializes"), &mut out);
    out
}

fn exempt(key: &str) -> bool {
    NOT_DRAWN.iter().any(|(k, _)| *k == key) || NOT_DRAWN_PREFIX.iter().any(|(p, _)| key.starts_with(p))
}

#[test]
fn the_default_hunt_draws_every_scenario_key_away_from_its_default() {
    let default = flat(&Scenario::default());
    let drawn: Vec<BTreeMap<String, Value>> = SEEDS.map(|seed| flat(&swarm(seed, Kind::All))).collect();
    // Every key: the default scenario's, the named scenarios' (they set the
    // keys a default leaves out of its TOML) and the drawn ones'.
    let mut keys: BTreeSet<String> = default.keys().cloned().collect();
    for name in NAMES {
        keys.extend(flat(&named(name).expect("a named scenario")).into_keys());
    }
    for d in &drawn {
        keys.extend(d.keys().cloned());
    }
    // A key whose value is a table (a budget, a deferral) is drawn when a
    // seed sets any key under it.
    let value = |m: &BTreeMap<String, Value>, k: &str| match m.get(k) {
        Some(v) => v.clone(),
        None if m.keys().any(|x| x.starts_with(&format!("{k}."))) => Value::Bool(true),
        None => Value::Null,
    };
    let never: Vec<&String> = keys
        .iter()
        .filter(|k| !exempt(k))
        .filter(|k| {
            let by_default = value(&default, k);
            drawn.iter().all(|d| value(d, k) == by_default)
        })
        .collect();
    assert!(never.is_empty(), "seeds {SEEDS:?} never draw these keys away from their default: {never:#?}");
}

/// The fewest seeds of the default hunt that must draw each rate-limit
/// dialect as the only advice (`advice = "none"`), and beside another
/// advice: where the dialect is alone, `reads-only-retry-after` shows.
/// What 1..=500 draws now, (alone, beside): ietf (13, 11), express_draft6
/// (12, 2), express_draft7 (11, 12), express_draft8 (19, 9), openai (8, 7),
/// github (8, 12): 124 seeds, 71 with the dialect alone.
const DIALECT_ALONE_AT_LEAST: usize = 8;
const DIALECT_BESIDE_AT_LEAST: usize = 2;

#[test]
fn the_default_hunt_draws_every_dialect_alone_and_beside_other_advice() {
    use retrysim::internals::world::api::{AdviceForm, Dialect};
    let mut counts: BTreeMap<Dialect, (usize, usize)> = BTreeMap::new();
    for seed in SEEDS {
        let s = swarm(seed, Kind::All);
        if s.api.dialect == Dialect::None {
            continue;
        }
        assert!(!s.api.rate_limit_headers, "seed {seed}: a dialect beside the rate-limit headers");
        let (alone, beside) = counts.entry(s.api.dialect).or_default();
        if s.api.advice == AdviceForm::None { *alone += 1 } else { *beside += 1 }
    }
    for dialect in Dialect::SPOKEN {
        let (alone, beside) = counts.get(&dialect).copied().unwrap_or_default();
        assert!(
            alone >= DIALECT_ALONE_AT_LEAST && beside >= DIALECT_BESIDE_AT_LEAST,
            "{}: {alone} seeds of {SEEDS:?} alone and {beside} beside other advice, under {DIALECT_ALONE_AT_LEAST} and {DIALECT_BESIDE_AT_LEAST}",
            dialect.name()
        );
    }
}

/// Every fault kind (`FaultKind::ALL`, from the faults' home) is scheduled
/// by some seed of the default hunt: a kind the generator never draws is
/// never hunted.
#[test]
fn the_default_hunt_draws_every_fault_kind() {
    use retrysim::testing::FaultKind;
    let mut seen: BTreeMap<FaultKind, usize> = BTreeMap::new();
    for seed in SEEDS {
        for f in swarm(seed, Kind::All).faults.schedule {
            *seen.entry(f.fault.kind()).or_default() += 1;
        }
    }
    let never: Vec<FaultKind> = FaultKind::ALL.into_iter().filter(|k| !seen.contains_key(k)).collect();
    assert!(never.is_empty(), "seeds {SEEDS:?} never draw {never:?} (drawn: {seen:?})");
}

/// A value at an edge, as a predicate on a drawn scenario.
type Edge = (&'static str, fn(&Scenario) -> bool);

/// The edges the default hunt must reach: the limiter's limit (the
/// fleet's opening burst exactly fills a window, leaves one slot, or is one
/// over), one write a window, half a retry bucket (whole tokens from an even
/// bucket: a drained bucket's first refusal is at exactly half), zeros (no
/// retries, `Retry-After: 0`, no latency), and a window's edge (no latency
/// and no spread, so a retry told a reset in milliseconds arrives on it; a
/// request that runs exactly a window, or a millisecond less), and the
/// policy's own limits (`draw_policy_edges`: one unclear 429 over
/// `unclear_max_retries`, an advice of exactly `max_single_wait`, a zero
/// advice under a spread of a millisecond, a wait that ends where the
/// deadline leaves the last attempt its reserve, a percent budget that
/// renews every second, a 409 that waiting does not fix).
const EDGES: &[Edge] = &[
    ("workers = the limit (writes)", |s| s.fleet.workers > 1 && s.fleet.workers == s.api.limiter.writes),
    ("workers = the limit - 1", |s| s.fleet.workers > 1 && s.fleet.workers + 1 == s.api.limiter.writes),
    ("workers = the limit + 1", |s| s.fleet.workers > 1 && s.fleet.workers == s.api.limiter.writes + 1),
    ("a limit of one write", |s| s.api.limiter.writes == 1),
    ("half a bucket: an even token bucket refunding whole tokens", half_a_bucket),
    ("0 retries", |s| s.policy.max_retries == 0),
    ("Retry-After: 0", |s| s.api.script.iter().any(|x| x.status == 429 && x.retry_after_s == Some(0))),
    ("0 latency", |s| s.net.max_latency.is_zero()),
    ("a window's edge: no latency, no spread", |s| s.net.max_latency.is_zero() && s.policy.spread.largest().is_zero()),
    ("a window's edge: a request runs a whole window", |s| s.api.processing_ms == s.api.limiter.window_ms),
    ("a window's edge: a request runs a window less 1 ms", |s| s.api.processing_ms + 1 == s.api.limiter.window_ms),
    ("half a window: a request runs half the window", |s| {
        s.api.processing_ms > 0 && s.api.processing_ms * 2 == s.api.limiter.window_ms
    }),
    ("per-worker hosts", |s| s.fleet.hosts == Hosts::PerWorker && s.fleet.coordinator.is_none()),
    ("the limiter service", |s| s.fleet.coordinator.is_some()),
    ("the limiter service partitioned away", |s| {
        s.faults
            .schedule
            .iter()
            .any(|f| matches!(f.fault, retrysim::internals::world::net::Fault::LimiterPartition { .. }))
    }),
    ("the limiter service partitioned away from the start", |s| limiter_partitions(s).first() == Some(&Duration::ZERO)),
    ("the limiter service partitioned away twice", |s| limiter_partitions(s).len() > 1),
    ("unclear 429s only: no listed code, no advice", |s| {
        s.api.script_repeat && s.api.script.iter().all(|x| x.status == 429 && x.retry_after_s.is_none())
    }),
    ("Retry-After = max_single_wait", |s| {
        s.api.script.iter().any(|x| x.retry_after_s.map(Duration::from_secs) == Some(s.policy.max_single_wait))
    }),
    ("Retry-After: 0 under a spread cap of 1 ms or less", |s| {
        let p = &s.policy.spread;
        s.api.script.iter().any(|x| x.retry_after_s == Some(0)) && p.per_mille == 0 && p.max <= Duration::from_millis(1)
    }),
    ("a wait that ends where the deadline leaves min_attempt_time", |s| {
        s.api.script.first().is_some_and(|x| x.retry_after_s == Some(1))
            && s.policy.deadline == Duration::from_secs(1) + s.policy.min_attempt_time + Duration::from_millis(2)
    }),
    (
        "a percent budget whose ttl is a second",
        |s| matches!(s.fleet.budget, Some(BudgetConfig::Percent { ttl, .. }) if ttl == Duration::from_secs(1)),
    ),
    ("a 409 that is not IDEMPOTENCY_IN_PROGRESS", |s| {
        s.api.script.iter().any(|x| x.status == 409 && x.code.as_deref() != Some("IDEMPOTENCY_IN_PROGRESS"))
    }),
    ("a body that repeats its code member, a terminal one first", |s| {
        s.api.script.iter().any(|x| x.written_codes.len() > 1 && x.written_codes[0] == "QUOTA_EXCEEDED")
    }),
    ("a body that repeats its code member, an unknown one first", |s| {
        s.api.script.iter().any(|x| x.written_codes.len() > 1 && x.written_codes[0] == "SOMETHING_NEW")
    }),
    ("polls of one early job", |s| s.fleet.mix.safe > 0 && s.fleet.polled_job.is_some()),
    ("PUTs, idempotent by their method, with answers lost", |s| {
        s.fleet.mix.idempotent > 0 && s.faults.lost_answers_per_mille > 0
    }),
];

/// When each of a scenario's limiter partitions starts.
fn limiter_partitions(s: &Scenario) -> Vec<Duration> {
    let partition =
        |f: &&ScheduledFault| matches!(f.fault, retrysim::internals::world::net::Fault::LimiterPartition { .. });
    s.faults.schedule.iter().filter(partition).map(|f| f.at).collect()
}

/// The limiter service's rarer paths (a lease run out, a session replaced,
/// a worker redialling) need coordinated fleets that lose their service:
/// the counts docs/DESIGN.md gives for seeds 1..=500.
#[test]
fn the_default_hunt_draws_coordinated_fleets_that_lose_their_limiter_service() {
    let drawn: Vec<Scenario> = SEEDS.map(|seed| swarm(seed, Kind::All)).collect();
    let coordinated = drawn.iter().filter(|s| s.fleet.coordinator.is_some()).count();
    let partitioned = drawn.iter().filter(|s| !limiter_partitions(s).is_empty()).count();
    let design = std::fs::read_to_string("docs/DESIGN.md").expect("docs/DESIGN.md");
    let said = format!("seeds 1..=500 then draw {coordinated} coordinated fleets, {partitioned} of them partitioned");
    assert!(design.replace('\n', " ").contains(&said), "docs/DESIGN.md must say: {said}");
}

fn half_a_bucket(s: &Scenario) -> bool {
    matches!(s.fleet.budget, Some(BudgetConfig::TokenBucket { max_tokens, token_ratio_milli })
        if max_tokens % 2 == 0 && token_ratio_milli % 1000 == 0)
}

#[test]
fn the_default_hunt_draws_every_edge() {
    let drawn: Vec<Scenario> = SEEDS.map(|seed| swarm(seed, Kind::All)).collect();
    let never: Vec<&str> = EDGES.iter().filter(|(_, at)| !drawn.iter().any(at)).map(|(name, _)| *name).collect();
    assert!(never.is_empty(), "seeds {SEEDS:?} never draw these edges: {never:#?}");
}

/// Half a bucket is reached, not only drawn: some seed of the default hunt
/// with an even bucket refunding whole tokens has a retry the budget
/// refuses, and with whole tokens from an even bucket the first refusal is
/// at exactly half (`tokens > max / 2` is then false by equality).
#[test]
fn some_default_hunt_run_drains_a_bucket_to_exactly_half() {
    let refused = SEEDS.filter(|&seed| half_a_bucket(&swarm(seed, Kind::All))).find(|&seed| {
        let r = run(&swarm(seed, Kind::All), seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        r.records.iter().any(|j| matches!(&j.outcome, JobOutcome::GaveUp { reason } if reason == "budget_exhausted"))
    });
    assert!(refused.is_some(), "no seed of {SEEDS:?} with an even whole-token bucket ran it down to half");
}

/// A world of the hunt's reach (issue 54, `hunt::worlds::reach`), as a
/// predicate on a drawn scenario, with the fewest seeds of the default hunt
/// that must draw it.
type Reach = (&'static str, usize, fn(&Scenario) -> bool);

/// The reach's worlds: advice in the body of a code-less 429 (in each
/// envelope's hint: Blinkimg's `resetAt`, Sume's `retry_after_seconds`),
/// a code in each member the core reads (`error.code`, `error.type`; a
/// terminal one and a throttled one), and a deferral whose front end is
/// told `Retry-After: 0` and then a longer wait. Seeds 1..=500 draw now
/// (other draws make some of them too): 5 and 13 code-less 429s (Blinkimg,
/// Sume); 10 and 11 codes in `type` (terminal, throttled), 5 and 23 in
/// `code`; 24 deferrals told twice. Each must stay drawn on at least the
/// number beside it (`cargo test --release --test it -- --nocapture
/// the_default_hunt_draws_the_reach_worlds` prints the counts). And a
/// pacing gate's clean run whose messages are slower than its window, with
/// at least twice as many workers as the window takes (attempts in flight
/// across the gate's resets): 19 seeds.
const REACH: &[Reach] = &[
    ("a code-less 429 whose only advice is Blinkimg's resetAt", 4, |s| {
        body_advice_only_codeless(s) && s.api.envelope == Envelope::Blinkimg
    }),
    ("a code-less 429 whose only advice is Sume's retry_after_seconds", 4, |s| {
        body_advice_only_codeless(s) && s.api.envelope == Envelope::Sume
    }),
    ("a terminal code in error.type (Sume)", 4, |s| coded(s, Envelope::Sume, "insufficient_quota")),
    ("a throttled code in error.type (Sume), more than the unclear retries", 4, |s| {
        coded(s, Envelope::Sume, "rate_limited") && s.policy.unclear_max_retries == 1
    }),
    ("a terminal code in error.code (Blinkimg)", 2, |s| coded(s, Envelope::Blinkimg, "QUOTA_EXCEEDED")),
    ("a throttled code in error.code (Blinkimg), more than the unclear retries", 2, |s| {
        coded(s, Envelope::Blinkimg, "RATE_LIMITED") && s.policy.unclear_max_retries == 1
    }),
    ("a pacing gate's clean run with attempts in flight across its resets", 15, |s| {
        matches!(s.fleet.gate, GateConfig::Pacing(_))
            && s.api.rate_limit_headers
            && s.net.max_latency >= Duration::from_millis(s.api.limiter.window_ms)
            && s.fleet.workers >= 2 * s.api.limiter.writes
    }),
    ("a deferral whose front end is told Retry-After: 0, then a longer wait", 10, |s| {
        let waits: Vec<Option<u64>> = s.api.script.iter().map(|x| x.retry_after_s).collect();
        s.fleet.deferral.is_some() && waits.first() == Some(&Some(0)) && waits.iter().any(|w| w.is_some_and(|w| w >= 2))
    }),
];

use retrysim::testing::scenario::{AdviceForm, Dialect, Envelope, RateLimitedBody};

/// Whose only advice is the body's hint, with a code-less 429 scripted first.
fn body_advice_only_codeless(s: &Scenario) -> bool {
    let first = s.api.script.first();
    s.api.advice == AdviceForm::BodyOnly
        && s.api.dialect == Dialect::None
        && !s.api.rate_limit_headers
        && s.api.rate_limited_body == RateLimitedBody::Envelope
        && first.is_some_and(|x| x.status == 429 && x.code.is_none() && x.retry_after_s.is_some())
}

/// In `envelope`, a refusal scripted first with `code` and a valid `Retry-After`.
fn coded(s: &Scenario, envelope: Envelope, code: &str) -> bool {
    let first = s.api.script.first();
    s.api.envelope == envelope
        && (matches!(s.api.advice, AdviceForm::Both | AdviceForm::HeaderSeconds) || s.api.dialect != Dialect::None)
        && s.api.rate_limited_body == RateLimitedBody::Envelope
        && first.is_some_and(|x| x.status == 429 && x.code.as_deref() == Some(code) && x.retry_after_s.is_some())
}

#[test]
fn the_default_hunt_draws_the_reach_worlds() {
    let drawn: Vec<Scenario> = SEEDS.map(|seed| swarm(seed, Kind::All)).collect();
    let counts: Vec<(&str, usize, usize)> =
        REACH.iter().map(|(name, least, at)| (*name, *least, drawn.iter().filter(|s| at(s)).count())).collect();
    let short: Vec<&(&str, usize, usize)> = counts.iter().filter(|(_, least, n)| n < least).collect();
    assert!(short.is_empty(), "seeds {SEEDS:?} draw too few of these worlds (name, at least, drawn): {short:#?}");
    eprintln!("reach worlds drawn on seeds {SEEDS:?}: {counts:#?}");
}
