//! The sans-IO decision core. No tokio, no IO, no ambient time or randomness:
//! every instant and every random draw is an argument.
pub mod advice;
pub mod backoff;
pub mod body;
pub mod budget;
pub mod classify;
pub mod policy;
pub use advice::retry_after;

/// Durations in configuration files as human text (`"1500ms"`, `"90s"`,
/// `"2m 30s"`), so a number never has an ambiguous unit.
pub mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `d` as humantime text, e.g. `"1s 500ms"`.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    /// Reads humantime text; the error says what is accepted.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!(
                "invalid duration {text:?} ({e}): write a number with a unit, like \"1500ms\", \"90s\" or \"2m 30s\""
            ))
        })
    }
}

/// Durations in JSON output as whole milliseconds (rounded down), exact at
/// any size. A `Duration` holds up to about 1.8e22 ms, more than a u64
/// (a `Retry-After: 18446744073709551615` is 2^64 - 1 seconds), and many
/// JSON parsers read numbers as doubles, exact only up to 2^53 - 1. So a
/// value up to 2^53 - 1 ms (about 285,000 years) is a JSON number, and a
/// larger one the exact decimal digits as a JSON string: a consumer either
/// reads the right number or meets a string, never a smaller number.
pub mod millis_json {
    use std::time::Duration;

    use serde::Serializer;

    /// The largest count written as a JSON number (JavaScript's
    /// `Number.MAX_SAFE_INTEGER`).
    pub const MAX_NUMBER: u128 = (1 << 53) - 1;

    /// Writes a count of milliseconds: a number up to [`MAX_NUMBER`], else a string.
    pub fn write_ms<S: Serializer>(ms: u128, s: S) -> Result<S::Ok, S::Error> {
        if ms <= MAX_NUMBER { s.serialize_u64(ms as u64) } else { s.collect_str(&ms) }
    }

    /// Writes `d` in whole milliseconds (for `serialize_with`).
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        write_ms(d.as_millis(), s)
    }

    /// Writes `Some(d)` as [`serialize`] does and `None` as `null`.
    pub fn serialize_opt<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => serialize(d, s),
            None => s.serialize_none(),
        }
    }
}
