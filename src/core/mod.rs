//! The sans-IO decision core. No tokio, no IO, no ambient time or randomness:
//! every instant and every random draw is an argument.
pub mod backoff;
pub mod body;
pub mod budget;
pub mod classify;
pub mod policy;
pub mod retry_after;

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
