//! Rate-limit dialects: the ways real servers tell a refusal's wait in
//! fields of their own, beside `Retry-After` or instead of it. One home for
//! each dialect's field names, formatting and rounding, copied from its
//! public source; `[api] dialect` picks one (docs/guide/real-servers-habits.md
//! has the table).
//!
//! A dialect speaks on every 429 that advises a wait: the request-rate
//! refusals, `queue_full`, the monthly quota and scripted 429s. It describes
//! the limit that refused as exhausted (remaining 0) until the wait ends, so
//! a client that reads the dialect alone knows when to come back. The
//! `advice` key decides independently whether `Retry-After` (and the body's
//! hint) goes beside it: `advice = "none"` leaves the dialect the only advice.
//!
//! # The dialects and their sources
//! - `ietf`: draft-ietf-httpapi-ratelimit-headers-10/-11 (§3, §4), RFC 9651
//!   structured fields: `RateLimit-Policy: "writes";q=30;w=1` and `RateLimit:
//!   "writes";r=0;t=2`; `t` is the wait in whole seconds, rounded up, `w` the
//!   window rounded up (the draft has no sub-second precision). Written as
//!   the `structured` habit writes them (`structured_fields`).
//! - `express_draft6`, `express_draft7`, `express_draft8`: express-rate-limit
//!   8.6's `standardHeaders` (`source/headers.ts`): the reset is
//!   `Math.max(0, Math.ceil(ms / 1000))`, the window `Math.ceil(windowMs /
//!   1000)`. Draft 6 sends `RateLimit-Policy: 5;w=60`, `RateLimit-Limit`,
//!   `RateLimit-Remaining` and `RateLimit-Reset` (only when the reset is not
//!   0: `if (resetSeconds)`); draft 7 `RateLimit-Policy: 5;w=60` and
//!   `RateLimit: limit=5, remaining=0, reset=37`; draft 8 `RateLimit-Policy:
//!   "5-in-1min"; q=5; w=60; pk=:…:` and `RateLimit: "5-in-1min"; r=0; t=37`,
//!   the name its default `identifier` (`source/rate-limit.ts`: `{limit}-in-`
//!   then the window in `sec` under a minute, `min` under an hour, `hr(s)`,
//!   `day(s)`). Its `pk` is a SHA-256 of the client's key cut to 12 hex
//!   digits, in base64; here a 48-bit FNV-1a digest of the account stands in
//!   for the hash (12 hex digits, base64: the same form, 16 characters).
//! - `openai`: OpenAI's API (platform.openai.com/docs/guides/rate-limits,
//!   "Rate limits in headers"; `retry-after-ms` as the openai-python client
//!   reads it): `retry-after-ms` the wait in milliseconds rounded up, and
//!   `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` where the reset
//!   is a Go duration (`1s`, `12ms`, `6m0s`, `1.5s`) until the limit is back
//!   to its *initial* state: an upper bound on the wait, not the next free
//!   slot. The model has no tokens: a request counts as 1,000 of them, so the
//!   token fields mirror the request fields.
//! - `github`: GitHub's REST API primary limit
//!   (docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api):
//!   `x-ratelimit-limit`, `-remaining` (0 when exceeded), `-used`, `-reset`
//!   (Unix seconds: here the refusal's end rounded up to a whole second, so
//!   it is never early), `-resource: core`. A client needs the answer's
//!   `Date` (or its own clock) to turn the reset into a wait. GitHub answers
//!   403 or 429; the model answers 429.
//!
//! Not modelled: the fields on answers that were not refused (the
//! `rate_limit_headers` habit writes those), GitHub's secondary limits, and
//! the reset that express-rate-limit draws from `windowMs` for a store
//! without a reset time.

use std::time::Duration;

use http::HeaderName;

use super::config::Dialect;
use super::limiter::{Standing, ceil_seconds};
use super::wallclock::WallTime;

/// How a dialect rounds the wait it writes: always up, so it is never early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rounding {
    /// Whole seconds left, rounded up (`t`, `reset`, `RateLimit-Reset`).
    Seconds,
    /// Milliseconds left, rounded up (`retry-after-ms`).
    Millis,
    /// The end of the wait as a whole Unix second, rounded up (`x-ratelimit-reset`).
    UnixSecond,
}

/// The refusal a dialect describes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused<'a> {
    /// Until a request would be admitted again.
    pub(crate) wait: Duration,
    /// Until the budget is whole again (at least `wait`): OpenAI's reset.
    pub(crate) full_reset: Duration,
    /// The limit per window of the budget that refused.
    pub(crate) limit: u32,
    /// Its window.
    pub(crate) window: Duration,
    /// The budget's name (`writes`, `reads`, `anonymous`): the IETF policy's.
    pub(crate) policy: &'a str,
    /// Whose budget it is (an account): express-rate-limit's partition key.
    pub(crate) key: &'a str,
    /// The server's wall clock at the refusal.
    pub(crate) wall: WallTime,
}

/// A dialect's fields for one refusal, and the wait they advise (from the
/// answer's instant: the earliest retry a client reading them may make).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spoken {
    pub(crate) fields: Vec<(HeaderName, String)>,
    pub(crate) advised: Option<Duration>,
}

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");
const OPENAI_FIELDS: [HeaderName; 6] = [
    HeaderName::from_static("x-ratelimit-limit-requests"),
    HeaderName::from_static("x-ratelimit-remaining-requests"),
    HeaderName::from_static("x-ratelimit-reset-requests"),
    HeaderName::from_static("x-ratelimit-limit-tokens"),
    HeaderName::from_static("x-ratelimit-remaining-tokens"),
    HeaderName::from_static("x-ratelimit-reset-tokens"),
];
const GITHUB_FIELDS: [HeaderName; 5] = [
    HeaderName::from_static("x-ratelimit-limit"),
    HeaderName::from_static("x-ratelimit-remaining"),
    HeaderName::from_static("x-ratelimit-used"),
    HeaderName::from_static("x-ratelimit-reset"),
    HeaderName::from_static("x-ratelimit-resource"),
];

/// OpenAI's stand-in token count of one request (the model has no tokens).
const TOKENS_PER_REQUEST: u32 = 1_000;

impl Dialect {
    /// Every dialect that speaks, in declaration order.
    pub const SPOKEN: [Dialect; 6] = [
        Dialect::Ietf,
        Dialect::ExpressDraft6,
        Dialect::ExpressDraft7,
        Dialect::ExpressDraft8,
        Dialect::OpenAi,
        Dialect::GitHub,
    ];

    /// The dialect's name as a scenario writes it (`dialect = "..."`).
    pub fn name(self) -> &'static str {
        match self {
            Dialect::None => "none",
            Dialect::Ietf => "ietf",
            Dialect::ExpressDraft6 => "express_draft6",
            Dialect::ExpressDraft7 => "express_draft7",
            Dialect::ExpressDraft8 => "express_draft8",
            Dialect::OpenAi => "openai",
            Dialect::GitHub => "github",
        }
    }

    /// How the dialect rounds the wait it writes; `None` for no dialect.
    pub(crate) fn rounding(self) -> Option<Rounding> {
        match self {
            Dialect::None => None,
            Dialect::Ietf | Dialect::ExpressDraft6 | Dialect::ExpressDraft7 | Dialect::ExpressDraft8 => {
                Some(Rounding::Seconds)
            }
            Dialect::OpenAi => Some(Rounding::Millis),
            Dialect::GitHub => Some(Rounding::UnixSecond),
        }
    }

    /// The longest advice the dialect writes for a refusal whose wait is
    /// `wait`: the wait rounded up as the dialect rounds it (a whole Unix
    /// second can add almost a second). Never less than `wait`.
    pub fn latest(self, wait: Duration) -> Duration {
        match self.rounding() {
            None => wait,
            Some(Rounding::Seconds) => Duration::from_secs(ceil_seconds(wait)),
            Some(Rounding::Millis) => Duration::from_millis(ceil_millis(wait)),
            Some(Rounding::UnixSecond) => wait + Duration::from_secs(1),
        }
    }

    /// Whether the dialect advises every refused wait in whole seconds left
    /// (at least one second for any wait, as `Retry-After` rounded up
    /// does): `retry-after-ms` may advise less, and so may a whole Unix
    /// second read without `Date`.
    pub fn advises_whole_seconds(self) -> bool {
        self.rounding() == Some(Rounding::Seconds)
    }

    /// Whether the dialect's advice is a wall-clock instant (read against
    /// `Date` or the client's own clock), as an HTTP-date `Retry-After` is.
    pub fn is_dated(self) -> bool {
        self.rounding() == Some(Rounding::UnixSecond)
    }

    /// Every field name any dialect writes: what a client that reads only
    /// `Retry-After` does not read.
    pub(crate) fn every_field() -> impl Iterator<Item = HeaderName> {
        [RATELIMIT, RATELIMIT_POLICY, RATELIMIT_LIMIT, RATELIMIT_REMAINING, RATELIMIT_RESET, RETRY_AFTER_MS]
            .into_iter()
            .chain(OPENAI_FIELDS)
            .chain(GITHUB_FIELDS)
    }

    /// The names of the fields the dialect writes on a refusal (that of a
    /// wait of a second), in order.
    pub(crate) fn field_names(self) -> Vec<HeaderName> {
        let refused = Refused {
            wait: Duration::from_secs(1),
            full_reset: Duration::from_secs(1),
            limit: 1,
            window: Duration::from_secs(1),
            policy: "writes",
            key: "",
            wall: WallTime::from_unix_seconds(0),
        };
        self.speak(&refused).fields.into_iter().map(|(name, _)| name).collect()
    }

    /// The fields the dialect writes for `refused`, in the order its source
    /// sets them, and the wait they advise.
    pub(crate) fn speak(self, r: &Refused<'_>) -> Spoken {
        let t = ceil_seconds(r.wait);
        let w = ceil_seconds(r.window);
        let (limit, seconds) = (r.limit, Some(Duration::from_secs(t)));
        let (fields, advised) = match self {
            Dialect::None => (vec![], None),
            Dialect::Ietf => {
                let standing = Standing { limit, remaining: 0, reset: r.wait };
                let (policy, current) = structured_fields(r.policy, standing, r.window);
                (vec![(RATELIMIT_POLICY, policy), (RATELIMIT, current)], seconds)
            }
            Dialect::ExpressDraft6 => {
                let mut fields = vec![
                    (RATELIMIT_POLICY, format!("{limit};w={w}")),
                    (RATELIMIT_LIMIT, limit.to_string()),
                    (RATELIMIT_REMAINING, "0".to_owned()),
                ];
                // `if (resetSeconds)`: a reset of 0 is not sent, and then nothing says when.
                if t > 0 {
                    fields.push((RATELIMIT_RESET, t.to_string()));
                }
                (fields, seconds.filter(|_| t > 0))
            }
            Dialect::ExpressDraft7 => (
                vec![
                    (RATELIMIT_POLICY, format!("{limit};w={w}")),
                    (RATELIMIT, format!("limit={limit}, remaining=0, reset={t}")),
                ],
                seconds,
            ),
            Dialect::ExpressDraft8 => {
                let name = express_identifier(limit, r.window);
                let pk = partition_key(r.key);
                (
                    vec![
                        (RATELIMIT_POLICY, format!("\"{name}\"; q={limit}; w={w}; pk=:{pk}:")),
                        (RATELIMIT, format!("\"{name}\"; r=0; t={t}")),
                    ],
                    seconds,
                )
            }
            Dialect::OpenAi => {
                let ms = ceil_millis(r.wait);
                let reset = go_duration(ceil_millis(r.full_reset.max(r.wait)));
                let tokens = u64::from(limit) * u64::from(TOKENS_PER_REQUEST);
                let [lr, rr, sr, lt, rt, st] = OPENAI_FIELDS;
                (
                    vec![
                        (RETRY_AFTER_MS, ms.to_string()),
                        (lr, limit.to_string()),
                        (rr, "0".to_owned()),
                        (sr, reset.clone()),
                        (lt, tokens.to_string()),
                        (rt, "0".to_owned()),
                        (st, reset),
                    ],
                    Some(Duration::from_millis(ms)),
                )
            }
            Dialect::GitHub => {
                let reset = r.wall.plus(r.wait).ceil_to_second();
                let [l, rem, used, at, resource] = GITHUB_FIELDS;
                (
                    vec![
                        (l, limit.to_string()),
                        (rem, "0".to_owned()),
                        (used, limit.to_string()),
                        (at, reset.unix_seconds().to_string()),
                        (resource, "core".to_owned()),
                    ],
                    Some(reset.since(r.wall)),
                )
            }
        };
        Spoken { fields, advised }
    }
}

/// Milliseconds, rounded up.
fn ceil_millis(d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    ms.saturating_add(u64::from(!d.subsec_nanos().is_multiple_of(1_000_000)))
}

/// express-rate-limit's default `identifier`: `{limit}-in-{duration}`, the
/// window in JavaScript's number formatting (`0.25sec`, `1min`, `2hrs`).
fn express_identifier(limit: u32, window: Duration) -> String {
    let ms = window.as_millis() as f64;
    let (seconds, minutes, hours, days) = (ms / 1e3, ms / 6e4, ms / 3.6e6, ms / 8.64e7);
    let duration = if seconds < 60.0 {
        format!("{seconds}sec")
    } else if minutes < 60.0 {
        format!("{minutes}min")
    } else if hours < 24.0 {
        format!("{hours}hr{}", if hours > 1.0 { "s" } else { "" })
    } else {
        format!("{days}day{}", if days > 1.0 { "s" } else { "" })
    };
    format!("{limit}-in-{duration}")
}

/// A 16-character base64 partition key of `key`, in express-rate-limit's
/// form (12 hex digits of a digest, as ASCII, in base64); the digest is a
/// 48-bit FNV-1a here, not SHA-256.
fn partition_key(key: &str) -> String {
    let digest = super::ledger::body_digest(key.as_bytes()) >> 16;
    base64(format!("{digest:012x}").as_bytes())
}

/// Standard base64 of `bytes`, whose length is a multiple of three (no padding).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    bytes
        .chunks(3)
        .flat_map(|c| {
            let n = (u32::from(c[0]) << 16) | (u32::from(c[1]) << 8) | u32::from(c[2]);
            [18, 12, 6, 0].map(|shift| char::from(ALPHABET[((n >> shift) & 63) as usize]))
        })
        .collect()
}

/// Go's `time.Duration.String()` for whole milliseconds: `0s`, `12ms`,
/// `1s`, `1.5s`, `6m0s`, `1h0m0s`.
fn go_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1_000 % 60, ms % 1_000);
    let seconds = if frac == 0 {
        s.to_string()
    } else {
        let digits = format!("{frac:03}");
        format!("{s}.{}", digits.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// The draft-10 structured fields for one budget: `(RateLimit-Policy, RateLimit)`.
pub(crate) fn structured_fields(policy: &str, standing: Standing, window: Duration) -> (String, String) {
    let w = ceil_seconds(window).max(1);
    let t = ceil_seconds(standing.reset);
    (format!("\"{policy}\";q={};w={w}", standing.limit), format!("\"{policy}\";r={};t={t}", standing.remaining))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn structured_fields_follow_draft_10s_examples() {
        let standing = Standing { limit: 30, remaining: 12, reset: ms(400) };
        assert_eq!(
            structured_fields("writes", standing, ms(1_000)),
            ("\"writes\";q=30;w=1".to_owned(), "\"writes\";r=12;t=1".to_owned())
        );
        let whole = Standing { limit: 120, remaining: 120, reset: Duration::ZERO };
        assert_eq!(structured_fields("writes", whole, ms(60_000)).1, "\"writes\";r=120;t=0");
        // No sub-second windows in the draft: w rounds up.
        assert_eq!(structured_fields("writes", whole, ms(250)).0, "\"writes\";q=120;w=1");
    }

    /// A refusal of 5 per minute with `wait` ms to go, 500 ms into a wall second.
    fn refused(wait: u64) -> Refused<'static> {
        Refused {
            wait: ms(wait),
            full_reset: ms(wait.max(1_000) * 2),
            limit: 5,
            window: ms(60_000),
            policy: "writes",
            key: "acme",
            wall: WallTime::from_unix_ms(1_791_450_000_500),
        }
    }

    fn text(spoken: &Spoken) -> Vec<String> {
        spoken.fields.iter().map(|(n, v)| format!("{n}: {v}")).collect()
    }

    #[test]
    fn each_dialect_writes_its_sources_fields() {
        let r = refused(36_200);
        let cases: [(Dialect, &[&str]); 6] = [
            (Dialect::Ietf, &["ratelimit-policy: \"writes\";q=5;w=60", "ratelimit: \"writes\";r=0;t=37"]),
            (
                Dialect::ExpressDraft6,
                &["ratelimit-policy: 5;w=60", "ratelimit-limit: 5", "ratelimit-remaining: 0", "ratelimit-reset: 37"],
            ),
            (Dialect::ExpressDraft7, &["ratelimit-policy: 5;w=60", "ratelimit: limit=5, remaining=0, reset=37"]),
            (
                Dialect::ExpressDraft8,
                &["ratelimit-policy: \"5-in-1min\"; q=5; w=60; pk=:", "ratelimit: \"5-in-1min\"; r=0; t=37"],
            ),
            (
                Dialect::OpenAi,
                &[
                    "retry-after-ms: 36200",
                    "x-ratelimit-limit-requests: 5",
                    "x-ratelimit-remaining-requests: 0",
                    "x-ratelimit-reset-requests: 1m12.4s",
                    "x-ratelimit-limit-tokens: 5000",
                    "x-ratelimit-remaining-tokens: 0",
                    "x-ratelimit-reset-tokens: 1m12.4s",
                ],
            ),
            (
                Dialect::GitHub,
                &[
                    "x-ratelimit-limit: 5",
                    "x-ratelimit-remaining: 0",
                    "x-ratelimit-used: 5",
                    // 1_791_450_000.5 + 36.2 = ...036.7, rounded up.
                    "x-ratelimit-reset: 1791450037",
                    "x-ratelimit-resource: core",
                ],
            ),
        ];
        for (dialect, expected) in cases {
            let got = text(&dialect.speak(&r));
            assert_eq!(got.len(), expected.len(), "{dialect:?}: {got:?}");
            for (g, e) in got.iter().zip(expected) {
                assert!(g.starts_with(e), "{dialect:?}: {g} is not {e}");
            }
        }
    }

    #[test]
    fn the_advice_is_never_early_and_rounds_as_stated() {
        for dialect in Dialect::SPOKEN {
            for wait in [1, 999, 1_000, 1_001, 36_200, 59_999] {
                let advised = dialect.speak(&refused(wait)).advised.unwrap();
                assert!(advised >= ms(wait), "{dialect:?} {wait} ms advised {advised:?}");
                assert!(advised <= dialect.latest(ms(wait)), "{dialect:?} {wait} ms advised {advised:?}");
            }
        }
        assert_eq!(Dialect::Ietf.speak(&refused(1_001)).advised, Some(ms(2_000)));
        assert_eq!(Dialect::OpenAi.speak(&refused(1_001)).advised, Some(ms(1_001)));
        // The refusal ends at ...001.501: the reset says ...002, 1.5 s on.
        assert_eq!(Dialect::GitHub.speak(&refused(1_001)).advised, Some(ms(1_500)));
        assert_eq!(Dialect::None.speak(&refused(1_001)), Spoken { fields: vec![], advised: None });
    }

    #[test]
    fn express_draft6_sends_no_reset_of_zero_and_so_no_advice() {
        let spoken = Dialect::ExpressDraft6.speak(&refused(0));
        assert!(!text(&spoken).iter().any(|f| f.starts_with("ratelimit-reset")), "{spoken:?}");
        assert_eq!(spoken.advised, None);
        assert_eq!(Dialect::ExpressDraft7.speak(&refused(0)).advised, Some(Duration::ZERO));
    }

    #[test]
    fn express_identifiers_are_its_defaults() {
        assert_eq!(express_identifier(5, ms(60_000)), "5-in-1min");
        assert_eq!(express_identifier(30, ms(1_000)), "30-in-1sec");
        assert_eq!(express_identifier(3, ms(250)), "3-in-0.25sec");
        assert_eq!(express_identifier(3, ms(90_000)), "3-in-1.5min");
        assert_eq!(express_identifier(100, ms(3_600_000)), "100-in-1hr");
        assert_eq!(express_identifier(100, ms(7_200_000)), "100-in-2hrs");
        assert_eq!(express_identifier(100, ms(172_800_000)), "100-in-2days");
    }

    #[test]
    fn the_partition_key_is_sixteen_base64_characters() {
        let pk = partition_key("acme");
        assert_eq!(pk.len(), 16, "{pk}");
        assert!(pk.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/'), "{pk}");
        assert_ne!(pk, partition_key("other"));
        // Node's Buffer.from("000000000000").toString("base64"), and RFC 4648's "foobar".
        assert_eq!(base64(b"000000000000"), "MDAwMDAwMDAwMDAw");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn go_durations_print_as_go_does() {
        let cases = [
            (0, "0s"),
            (12, "12ms"),
            (999, "999ms"),
            (1_000, "1s"),
            (1_500, "1.5s"),
            (1_020, "1.02s"),
            (60_000, "1m0s"),
            (360_000, "6m0s"),
            (61_001, "1m1.001s"),
            (3_600_000, "1h0m0s"),
            (3_723_400, "1h2m3.4s"),
        ];
        for (ms, expected) in cases {
            assert_eq!(go_duration(ms), expected, "{ms} ms");
        }
    }

    #[test]
    fn every_field_covers_what_each_dialect_writes() {
        let all: Vec<HeaderName> = Dialect::every_field().collect();
        for dialect in Dialect::SPOKEN {
            for (name, _) in dialect.speak(&refused(1_500)).fields {
                assert!(all.contains(&name), "{dialect:?} writes {name}, not in every_field");
            }
        }
    }

    #[test]
    fn names_are_the_toml_spellings() {
        for dialect in Dialect::SPOKEN.into_iter().chain([Dialect::None]) {
            let toml = toml::to_string(&std::collections::BTreeMap::from([("d", dialect)])).unwrap();
            assert_eq!(toml.trim(), format!("d = \"{}\"", dialect.name()));
        }
    }
}
