//! The hunt's generator draws the whole world: every scenario key (a leaf
//! of a scenario's TOML) and every variant of the API's habits is drawn
//! away from its default by at least one seed of the default hunt
//! (`retrysim hunt`: seeds 1..=500), unless it is listed below with the
//! reason it is not drawn.

use std::collections::{BTreeMap, BTreeSet};

use retrysim::sim::checks::hunt::{Kind, swarm};
use retrysim::sim::run::scenario::{NAMES, Scenario, named};
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
    ("fleet.hosts", "NOT DRAWN YET: per-worker hosts (the gates' fleet checks assume one shared gate)"),
];

/// Key prefixes the generator never draws, each with why.
const NOT_DRAWN_PREFIX: &[(&str, &str)] = &[
    ("client.defects.", "deliberate defects: `--sabotage` turns them on, never the generator"),
    ("fleet.deferral.defects.", "deliberate defects: `--sabotage` turns them on, never the generator"),
    ("fleet.coordinator", "NOT DRAWN YET: the limiter service needs per-worker hosts"),
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

/// Every habit a server can have, as the scenario's TOML spells it, the
/// default first: each one is drawn by some seed of the default hunt.
const HABITS: &[(&str, &[&str])] = &[
    ("api.limiter.kind", &["fixed_window", "token_bucket", "sliding_window", "moving_window"]),
    ("api.advice", &["both", "header_seconds", "header_date", "body_only", "none", "malformed", "several_lines"]),
    ("api.date_form", &["imf_fixdate", "rfc850", "asctime"]),
    ("api.envelope", &["blinkimg", "sume"]),
    ("api.retry_after_rounding", &["up", "down", "truncate"]),
    ("api.rate_limit_fields", &["draft6", "x_ratelimit", "structured", "draft6_and_structured"]),
    ("api.rate_limit_reset", &["seconds_left", "unix_seconds"]),
    ("api.rate_limited_body", &["envelope", "html"]),
];

#[test]
fn the_default_hunt_draws_every_habit_preset() {
    let default = flat(&Scenario::default());
    let mut seen: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for seed in SEEDS {
        let s = flat(&swarm(seed, Kind::All));
        for (key, all) in HABITS {
            // A habit left at its default is not in the TOML.
            let v = s.get(*key).or(default.get(*key)).and_then(Value::as_str).unwrap_or(all[0]);
            seen.entry(key).or_default().insert(v.to_owned());
        }
    }
    for (key, all) in HABITS {
        let never: Vec<&&str> = all.iter().filter(|v| !seen[key].contains(**v)).collect();
        let drawn = &seen[key];
        assert!(never.is_empty(), "seeds {SEEDS:?} never draw {key} = {never:?} (drawn: {drawn:?})");
        assert!(drawn.len() == all.len(), "{key}: a value this list does not know: {drawn:?}");
    }
}
