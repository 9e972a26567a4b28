//! Every scenario key and the values it allows, in one table ([`KEYS`]).
//!
//! A scenario is checked against this table twice: its TOML text before it
//! is read (so a wrong type or a value out of range names its key, not the
//! table around it) and the `Scenario` value itself, whatever built it (a
//! file, a preset, a generator, a user's code). The second walk refuses any
//! key the table does not list, so a new field cannot skip its range: the
//! named scenarios' test fails until it has one. `docs/guide/scenario-keys.md`
//! is [`markdown`]'s output, kept in step by a test.
//!
//! The ranges are what the simulator handles with room to spare, not what is
//! realistic: a range exists so that arithmetic on user numbers cannot wrap,
//! a run cannot spin without virtual time passing, and memory stays bounded.
//! Cross-key rules (`min_latency <= max_latency`, `heartbeat < silence`, ...)
//! live in `Scenario::validate`.

use std::time::Duration;

use serde::Serialize;

use crate::sim::world::faults::FaultKind;

/// Why a scenario is not runnable: what is wrong, naming the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidScenario(pub String);

impl std::fmt::Display for InvalidScenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidScenario {}

/// The largest scenario file read, in bytes: the biggest shipped scenario is
/// a few kilobytes, and a TOML parser's memory grows with its input.
pub const MAX_SCENARIO_BYTES: usize = 1 << 20;

/// The latest `api.epoch_unix_s` (about the year 9892): HTTP-dates have four
/// digits of year, and a run may add its `time_limit`, a clock skew and an
/// advice of a year to the epoch.
pub const MAX_EPOCH_UNIX_S: i128 = 250_000_000_000;

const DAY: u64 = 24 * 3600;
/// The longest duration any key takes (`time_limit`'s own maximum).
const LONGEST: Duration = Duration::from_secs(90 * DAY);

/// What one key allows.
#[derive(Debug, Clone, Copy)]
pub enum Allowed {
    /// A whole number in `min..=max`.
    Int {
        /// The least allowed.
        min: i128,
        /// The most allowed.
        max: i128,
    },
    /// A duration in `min..=max`, written as text (`"1500ms"`, `"2m 30s"`).
    Duration {
        /// The least allowed.
        min: Duration,
        /// The most allowed.
        max: Duration,
    },
    /// `true` or `false`.
    Bool,
    /// One of these names.
    Choice(&'static [&'static str]),
    /// Text of at most this many bytes, printable (no control characters).
    Text(usize),
    /// Text of at most this many bytes, visible ASCII only (sent in a header).
    Token(usize),
    /// A list of at most this many entries (each entry has keys of its own).
    List(usize),
}

/// One scenario key: its path (`[]` stands for every entry of a list),
/// what it allows and why, when the range is not self-evident.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// The dotted path, as in the TOML file (`fleet.workers`,
    /// `api.script[].status`); `policy.*` keys hold for
    /// `fleet.deferral.policy.*` too.
    pub path: &'static str,
    /// The values it allows.
    pub allowed: Allowed,
    /// A note on the range (empty when it says nothing more).
    pub why: &'static str,
}

const fn int(path: &'static str, min: i128, max: i128, why: &'static str) -> Key {
    Key { path, allowed: Allowed::Int { min, max }, why }
}

const fn dur(path: &'static str, min: Duration, max: Duration, why: &'static str) -> Key {
    Key { path, allowed: Allowed::Duration { min, max }, why }
}

const fn flag(path: &'static str) -> Key {
    Key { path, allowed: Allowed::Bool, why: "" }
}

const fn choice(path: &'static str, names: &'static [&'static str]) -> Key {
    Key { path, allowed: Allowed::Choice(names), why: "" }
}

const fn text(path: &'static str, max: usize) -> Key {
    Key { path, allowed: Allowed::Text(max), why: "" }
}

const fn list(path: &'static str, max: usize, why: &'static str) -> Key {
    Key { path, allowed: Allowed::List(max), why }
}

const ZERO: Duration = Duration::ZERO;
const MS: Duration = Duration::from_millis(1);
const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
const fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}
const MILLION: i128 = 1_000_000;
const BILLION: i128 = 1_000_000_000;
const LONGEST_MS: i128 = 90 * DAY as i128 * 1000;
const JITTERS: &[&str] = &["none", "full", "equal", "decorrelated"];
const AIMD_RATES: &[&str] = &["off", "aimd", "cubic"];

/// The AIMD gate's keys under `prefix` (`fleet.gate`, `fleet.coordinator.fallback`).
macro_rules! aimd_keys {
    ($prefix:literal) => {
        [
            int(concat!($prefix, ".initial_limit"), 1, 100_000, "attempts in flight at the start"),
            int(concat!($prefix, ".min_limit"), 1, 100_000, ""),
            int(concat!($prefix, ".max_limit"), 1, 100_000, ""),
            int(concat!($prefix, ".increase"), 0, 100_000, ""),
            int(concat!($prefix, ".backoff_per_mille"), 1, 999, "a throttle keeps this share of the window"),
            choice(concat!($prefix, ".rate"), AIMD_RATES),
            int(
                concat!($prefix, ".initial_rate_milli"),
                0,
                BILLION,
                "attempts per second in thousandths; 0: unpaced until a throttle",
            ),
            int(concat!($prefix, ".min_rate_milli"), 1, BILLION, ""),
            int(concat!($prefix, ".max_rate_milli"), 1, BILLION, ""),
            int(concat!($prefix, ".rate_increase_milli"), 0, BILLION, ""),
        ]
    };
}

/// A policy's keys under `policy.` (and `fleet.deferral.policy.`, read as these).
const POLICY: [Key; 18] = [
    text("policy.name", 200),
    int("policy.max_retries", 0, u32::MAX as i128, "4294967295: no cap but the deadline"),
    dur("policy.deadline", MS, LONGEST, "must be positive: a zero deadline sends nothing"),
    dur("policy.max_single_wait", ZERO, LONGEST, ""),
    dur("policy.min_attempt_time", ZERO, LONGEST, ""),
    dur("policy.attempt_timeout", MS, LONGEST, "must be positive: a zero timeout ends every attempt unanswered"),
    dur("policy.backoff.base", ZERO, LONGEST, ""),
    dur("policy.backoff.cap", ZERO, LONGEST, ""),
    choice("policy.backoff.jitter", JITTERS),
    choice("policy.advice_mode", &["advice_plus_spread", "max_of_advice_and_backoff"]),
    int("policy.spread.per_mille", 0, 1000, "the spread's share of the advice"),
    dur("policy.spread.min", ZERO, LONGEST, ""),
    dur("policy.spread.max", ZERO, LONGEST, ""),
    dur("policy.spread.rounded_zero", ZERO, LONGEST, ""),
    flag("policy.escalate"),
    int("policy.unclear_max_retries", 0, u32::MAX as i128, ""),
    flag("policy.use_advice"),
    flag("policy.idempotency_keys"),
];

const SCENARIO: [Key; 111] = {
    let [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9] = aimd_keys!("fleet.gate");
    let [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9] = aimd_keys!("fleet.coordinator.fallback");
    [
        text("name", 200),
        text("description", 2000),
        dur("time_limit", s(1), LONGEST, "virtual time after which a run is stopped as stuck"),
        // The API.
        choice("api.preset", &["none", "openai", "github"]),
        choice(
            "api.limiter.kind",
            &["fixed_window", "token_bucket", "sliding_window", "moving_window", "leaky_bucket"],
        ),
        int("api.limiter.writes", 0, BILLION, ""),
        int("api.limiter.reads", 0, BILLION, ""),
        int("api.limiter.window_ms", 1, LONGEST_MS, "must be positive: 0 would turn the limiter off"),
        int("api.limiter.burst", 0, MILLION, "leaky_bucket only (nginx's burst): requests held, not refused"),
        flag("api.limiter.nodelay"),
        list("api.accounts", 1000, ""),
        text("api.accounts[].name", 200),
        list("api.accounts[].keys", 100, "at least one"),
        Key { path: "api.accounts[].keys[]", allowed: Allowed::Token(200), why: "sent as a header" },
        int("api.accounts[].credits", 0, 1_000_000_000_000, "unset: unlimited"),
        int("api.accounts[].monthly_quota", 0, 1_000_000_000_000, "unset: none"),
        int("api.concurrency.max_in_flight", 1, 100_000, ""),
        int("api.concurrency.retry_after_s", 0, 90 * DAY as i128, ""),
        int("api.anonymous_cap", 0, BILLION, "unset: keyless requests are refused with 401"),
        choice("api.envelope", &["blinkimg", "sume"]),
        choice(
            "api.advice",
            &["header_seconds", "header_date", "body_only", "both", "none", "malformed", "several_lines"],
        ),
        choice("api.date_form", &["imf_fixdate", "rfc850", "asctime"]),
        flag("api.send_date"),
        int("api.epoch_unix_s", 0, MAX_EPOCH_UNIX_S, "up to about the year 9892: HTTP-dates have four digits"),
        int("api.clock_skew_ms", -(DAY as i128) * 1000, DAY as i128 * 1000, "a day either way"),
        flag("api.window_admits_one_more"),
        flag("api.advice_rounds_down"),
        flag("api.store_forgets_answers"),
        flag("api.rate_limit_headers"),
        choice("api.rate_limit_fields", &["draft6", "x_ratelimit", "structured", "draft6_and_structured"]),
        choice("api.rate_limit_reset", &["seconds_left", "unix_seconds"]),
        choice("api.retry_after_rounding", &["up", "down", "truncate"]),
        choice("api.rate_limited_body", &["envelope", "html", "nginx"]),
        int("api.rate_limited_status", 400, 599, "429, or nginx limit_req's default 503"),
        choice(
            "api.dialect",
            &["none", "ietf", "express_draft6", "express_draft7", "express_draft8", "openai", "github"],
        ),
        int("api.processing_ms", 0, 3_600_000, "up to an hour"),
        list("api.script", 10_000, ""),
        int("api.script[].status", 100, 999, ""),
        text("api.script[].code", 200),
        int("api.script[].retry_after_s", 0, 365 * DAY as i128, "up to a year"),
        list("api.script[].written_codes", 16, ""),
        text("api.script[].written_codes[]", 200),
        list("api.script[].headers", 32, "[name, value] pairs; a legal, unreserved header each"),
        list("api.script[].headers[]", 2, "a [name, value] pair"),
        text("api.script[].headers[][]", 1024),
        flag("api.script_repeat"),
        flag("api.keep_alive.enabled"),
        int("api.keep_alive.idle_timeout_ms", 0, LONGEST_MS, "0: never"),
        int("api.keep_alive.max_requests", 0, BILLION, "0: no cap"),
        flag("api.keep_alive.close_after_error"),
        // The fleet.
        int("fleet.workers", 1, 1024, "1..=256 with per_worker hosts"),
        int("fleet.jobs", 1, 100_000, ""),
        int("fleet.mix.keyed", 0, MILLION, "weights; at least one above 0"),
        int("fleet.mix.unsafe", 0, MILLION, ""),
        int("fleet.mix.safe", 0, MILLION, ""),
        int("fleet.mix.idempotent", 0, MILLION, ""),
        int("fleet.polled_job", 0, MILLION, "unset: each poll asks for its own job"),
        choice("fleet.op", &["compress", "convert"]),
        flag("fleet.anonymous"),
        choice("fleet.hosts", &["shared", "per_worker"]),
        choice("fleet.gate.kind", &["none", "ideal", "pacing", "aimd"]),
        int("fleet.gate.headroom", 0, BILLION, "pacing: attempts per window left unused"),
        dur("fleet.gate.max_hold", ZERO, LONGEST, "pacing"),
        flag("fleet.gate.learn"),
        flag("fleet.gate.learn_phase"),
        a0,
        a1,
        a2,
        a3,
        a4,
        a5,
        a6,
        a7,
        a8,
        a9,
        choice("fleet.budget.kind", &["token_bucket", "percent"]),
        int("fleet.budget.max_tokens", 1, 1000, "gRFC A6"),
        int("fleet.budget.token_ratio_milli", 1, MILLION, "tokens a success puts back, in thousandths"),
        dur("fleet.budget.ttl", s(1), s(60), "Finagle, tower"),
        int("fleet.budget.min_per_sec", 0, MILLION, ""),
        int("fleet.budget.per_mille", 0, MILLION, "0% to 100000%"),
        dur("fleet.coordinator.silence", ms(10), s(3600), ""),
        dur(
            "fleet.coordinator.heartbeat",
            ms(10),
            s(3600),
            "must be positive and shorter than silence: the service sends WAIT this often",
        ),
        dur("fleet.coordinator.connect_timeout", MS, s(3600), ""),
        dur(
            "fleet.coordinator.retry_after",
            ms(100),
            s(3600),
            "a refused worker asks again after this: shorter ones open a connection per worker per tick",
        ),
        dur("fleet.coordinator.lease", ms(10), LONGEST, "at least silence"),
        f0,
        f1,
        f2,
        f3,
        f4,
        f5,
        f6,
        f7,
        f8,
        f9,
        int("fleet.deferral.workers", 1, 64, ""),
        int("fleet.deferral.max_passes", 1, 100, ""),
        Key { path: "fleet.deferral.defects.*", allowed: Allowed::Bool, why: "deliberate defects (negative controls)" },
        // Which client, and its defects.
        choice(
            "client.kind",
            &["retrysim", "no-key-naive", "retry-at-once", "exponential-no-jitter", "exponential-full-jitter"],
        ),
        Key { path: "client.defects.*", allowed: Allowed::Bool, why: "deliberate defects (negative controls)" },
        // The network and its faults.
        dur("net.min_latency", ZERO, s(10), ""),
        dur("net.max_latency", ZERO, s(10), "at least min_latency"),
        dur("net.tick", Duration::from_micros(100), s(1), "virtual time per simulation step"),
        int("faults.lost_answers_per_mille", 0, 1000, ""),
        list("faults.schedule", 10_000, ""),
        dur("faults.schedule[].at", ZERO, LONGEST, ""),
        choice("faults.schedule[].fault.kind", &FaultKind::NAMES),
        dur("faults.schedule[].fault.latency", ZERO, s(60), ""),
        dur("faults.schedule[].fault.until", ZERO, LONGEST, ""),
        choice("faults.schedule[].fault.timing", &["fin_before_write", "fin_after_write", "rst"]),
    ]
};

/// Every scenario key: the scenario's own, then a policy's.
pub const KEYS: [&[Key]; 2] = [&SCENARIO, &POLICY];

/// The entry for `path` (list entries as `[]`), if any.
fn key(path: &str) -> Option<&'static Key> {
    let path = path.strip_prefix("fleet.deferral.").filter(|p| p.starts_with("policy.")).unwrap_or(path);
    KeyIndex::get().find(path)
}

/// [`KEYS`] indexed for [`key`], which every scenario a run validates asks
/// once a key (a hunt's seed validates twice): the first entry that matches
/// a path, as a walk down the table in order would find it.
struct KeyIndex {
    /// Every entry, in the table's order.
    all: Vec<&'static Key>,
    /// Each exact path's first entry.
    exact: std::collections::HashMap<&'static str, usize>,
    /// The entries ending in `*`: their place and their prefix, in order.
    prefixes: Vec<(usize, &'static str)>,
}

impl KeyIndex {
    fn get() -> &'static KeyIndex {
        static INDEX: std::sync::OnceLock<KeyIndex> = std::sync::OnceLock::new();
        INDEX.get_or_init(|| {
            let all: Vec<&'static Key> = KEYS.iter().flat_map(|k| k.iter()).collect();
            let mut exact = std::collections::HashMap::new();
            let mut prefixes = Vec::new();
            for (i, k) in all.iter().enumerate() {
                match k.path.strip_suffix('*') {
                    Some(prefix) => prefixes.push((i, prefix)),
                    None => {
                        exact.entry(k.path).or_insert(i);
                    }
                }
            }
            KeyIndex { all, exact, prefixes }
        })
    }

    fn find(&self, path: &str) -> Option<&'static Key> {
        let exact = self.exact.get(path).copied();
        let prefix = self.prefixes.iter().find(|(_, p)| path.starts_with(p)).map(|&(i, _)| i);
        [exact, prefix].into_iter().flatten().min().map(|i| self.all[i])
    }
}

/// One value as both walks see it.
enum Leaf<'a> {
    Int(i128),
    Float,
    Bool(bool),
    Text(&'a str),
    Other(&'static str),
}

impl Leaf<'_> {
    fn shown(&self) -> String {
        match self {
            Leaf::Int(n) => n.to_string(),
            Leaf::Float => "a fraction".into(),
            Leaf::Bool(b) => b.to_string(),
            Leaf::Text(t) => format!("{:?}", shorten(t)),
            Leaf::Other(what) => (*what).into(),
        }
    }
}

/// `d` in the largest unit that divides it (`90days`, `1h`, `10ms`): every
/// bound in the table is one.
fn in_one_unit(d: Duration) -> String {
    const UNITS: [(u128, &str); 5] = [
        (86_400_000_000_000, "days"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
    ];
    let ns = d.as_nanos();
    match UNITS.iter().find(|(unit, _)| ns > 0 && ns.is_multiple_of(*unit)) {
        Some((unit, name)) => format!("{}{name}", ns / unit),
        None if ns == 0 => "0s".into(),
        None => format!("{}us", d.as_micros()),
    }
}

/// At most 60 characters of `t`, for an error message.
fn shorten(t: &str) -> String {
    match t.char_indices().nth(60) {
        Some((at, _)) => format!("{}...", &t[..at]),
        None => t.to_owned(),
    }
}

impl Allowed {
    /// What a user should write, for an error message and the docs.
    pub fn described(&self) -> String {
        match *self {
            Allowed::Int { min, max } => format!("an integer in {min}..={max}"),
            Allowed::Duration { min, max } => format!("a duration in {}..={}", in_one_unit(min), in_one_unit(max)),
            Allowed::Bool => "true or false".into(),
            Allowed::Choice(names) => {
                let names: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
                format!("one of {}", names.join(", "))
            }
            Allowed::Text(max) => format!("text of at most {max} bytes, no control characters"),
            Allowed::Token(max) => format!("at most {max} visible ASCII characters"),
            Allowed::List(max) => format!("a list of at most {max} entries"),
        }
    }

    /// Whether `leaf` is allowed.
    fn admits(&self, leaf: &Leaf<'_>) -> bool {
        match (*self, leaf) {
            (Allowed::Int { min, max }, Leaf::Int(n)) => (min..=max).contains(n),
            (Allowed::Duration { min, max }, Leaf::Text(t)) => {
                humantime::parse_duration(t).is_ok_and(|d| (min..=max).contains(&d))
            }
            (Allowed::Bool, Leaf::Bool(_)) => true,
            (Allowed::Choice(names), Leaf::Text(t)) => names.contains(t),
            (Allowed::Text(max), Leaf::Text(t)) => t.len() <= max && !t.chars().any(char::is_control),
            (Allowed::Token(max), Leaf::Text(t)) => {
                !t.is_empty() && t.len() <= max && t.bytes().all(|b| b.is_ascii_graphic())
            }
            _ => false,
        }
    }
}

/// Checks one value against its key's entry; `strict`: a key without one is
/// an error (the value walk), else it is left to the reader (the text walk,
/// where serde names unknown keys with the ones it expected).
fn check_leaf(path: &str, leaf: Leaf<'_>, strict: bool) -> Result<(), InvalidScenario> {
    let Some(k) = key(path) else {
        return match strict {
            true => Err(InvalidScenario(format!(
                "{path}: no range is written for this key (a retrysim bug: add it to src/sim/run/keys.rs)"
            ))),
            false => Ok(()),
        };
    };
    if matches!(k.allowed, Allowed::List(_)) || k.allowed.admits(&leaf) {
        return Ok(());
    }
    let mut why = match k.why {
        "" => String::new(),
        why => format!(" ({why})"),
    };
    if let (Allowed::Duration { .. }, Leaf::Text(t)) = (k.allowed, &leaf)
        && humantime::parse_duration(t).is_err()
    {
        why.push_str(" (a number with a unit, like \"1500ms\", \"90s\" or \"2m 30s\")");
    }
    Err(InvalidScenario(format!("{path} = {} is not allowed: write {}{why}", leaf.shown(), k.allowed.described())))
}

/// Checks a list's length against its key's entry.
fn check_list(path: &str, len: usize) -> Result<(), InvalidScenario> {
    match key(path).map(|k| k.allowed) {
        Some(Allowed::List(max)) if len > max => {
            Err(InvalidScenario(format!("{path} has {len} entries: write at most {max}")))
        }
        _ => Ok(()),
    }
}

/// Checks a scenario's TOML text, key by key, before it is read (types and
/// ranges; unknown keys are left to the reader, which lists the known ones).
pub(crate) fn check_toml(table: &toml::Table) -> Result<(), InvalidScenario> {
    fn walk(path: &str, value: &toml::Value) -> Result<(), InvalidScenario> {
        let leaf = match value {
            toml::Value::Table(t) => {
                return t.iter().try_for_each(|(k, v)| walk(&join(path, k), v));
            }
            toml::Value::Array(items) => {
                check_list(path, items.len())?;
                let inner = format!("{path}[]");
                return items.iter().try_for_each(|v| walk(&inner, v));
            }
            toml::Value::Integer(n) => Leaf::Int(i128::from(*n)),
            toml::Value::Float(_) => Leaf::Float,
            toml::Value::Boolean(b) => Leaf::Bool(*b),
            toml::Value::String(t) => Leaf::Text(t),
            toml::Value::Datetime(_) => Leaf::Other("a date"),
        };
        check_leaf(path, leaf, false)
    }
    table.iter().try_for_each(|(k, v)| walk(k, v))
}

/// Checks every key a scenario value (`Scenario`, serialised) has against
/// [`KEYS`]; a key with no entry is refused, so that none skips its range.
pub(crate) fn check_value(s: &impl Serialize) -> Result<(), InvalidScenario> {
    fn walk(path: &str, value: &serde_json::Value) -> Result<(), InvalidScenario> {
        use serde_json::Value;
        let leaf = match value {
            Value::Null => return Ok(()),
            Value::Object(o) => return o.iter().try_for_each(|(k, v)| walk(&join(path, k), v)),
            Value::Array(items) => {
                check_list(path, items.len())?;
                let inner = format!("{path}[]");
                return items.iter().try_for_each(|v| walk(&inner, v));
            }
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Leaf::Int(i128::from(i)),
                (None, Some(u)) => Leaf::Int(i128::from(u)),
                (None, None) => Leaf::Float,
            },
            Value::Bool(b) => Leaf::Bool(*b),
            Value::String(t) => Leaf::Text(t),
        };
        check_leaf(path, leaf, true)
    }
    let value =
        serde_json::to_value(s).map_err(|e| InvalidScenario(format!("the scenario does not serialise: {e}")))?;
    walk("", &value)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

/// The table of every key, as `docs/guide/scenario-keys.md` shows it.
pub fn markdown() -> String {
    let mut out = String::from("| key | allowed | note |\n|---|---|---|\n");
    for k in KEYS.iter().flat_map(|k| k.iter()) {
        let allowed = k.allowed.described().replace('|', "\\|");
        out.push_str(&format!("| `{}` | {allowed} | {} |\n", k.path, k.why));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_listed_once() {
        let mut seen = std::collections::BTreeSet::new();
        for k in KEYS.iter().flat_map(|k| k.iter()) {
            assert!(seen.insert(k.path), "{} is listed twice", k.path);
        }
    }

    #[test]
    fn a_value_out_of_range_names_its_key_value_and_range() {
        let table: toml::Table = toml::from_str("[fleet.coordinator]\nheartbeat = \"0s\"").unwrap();
        let e = check_toml(&table).unwrap_err().0;
        assert!(
            e.starts_with("fleet.coordinator.heartbeat = \"0s\" is not allowed: write a duration in 10ms..=1h"),
            "{e}"
        );
        assert!(e.contains("must be positive"), "{e}");
        let table: toml::Table = toml::from_str("[fleet.gate]\nkind = \"aimd\"\nmax_limit = \"x\"").unwrap();
        let e = check_toml(&table).unwrap_err().0;
        assert_eq!(e, "fleet.gate.max_limit = \"x\" is not allowed: write an integer in 1..=100000");
    }

    #[test]
    fn the_deferral_policy_reads_as_a_policy() {
        assert_eq!(key("fleet.deferral.policy.deadline").map(|k| k.path), Some("policy.deadline"));
        assert_eq!(key("fleet.deferral.defects.ignore_cancel").map(|k| k.path), Some("fleet.deferral.defects.*"));
        assert!(key("fleet.deferral.workers").is_some());
        assert!(key("fleet.nonsense").is_none());
    }

    #[test]
    fn the_index_finds_what_a_walk_down_the_table_finds() {
        let walk = |path: &str| {
            KEYS.iter().flat_map(|k| k.iter()).find(|k| match k.path.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => k.path == path,
            })
        };
        let mut paths: Vec<String> = KEYS.iter().flat_map(|k| k.iter()).map(|k| k.path.replace('*', "x")).collect();
        paths.extend(["fleet.nonsense", "", "api", "fleet.deferral.defects.", "policy.backoff"].map(String::from));
        for path in &paths {
            let (found, walked) = (KeyIndex::get().find(path), walk(path));
            assert_eq!(found.map(|k| (k.path, k.why)), walked.map(|k| (k.path, k.why)), "{path}");
        }
        assert!(KeyIndex::get().find("fleet.workers").is_some());
    }

    #[test]
    fn an_unlisted_key_of_a_value_is_refused() {
        assert!(check_leaf("api.new_knob", Leaf::Int(1), true).unwrap_err().0.contains("no range is written"));
        assert_eq!(check_leaf("api.new_knob", Leaf::Int(1), false), Ok(()));
    }
}
