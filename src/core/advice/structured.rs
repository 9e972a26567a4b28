//! The IETF `RateLimit` field (draft-ietf-httpapi-ratelimit-headers),
//! parsed as RFC 9651 Structured Fields by the `sfv` crate.
//!
//! - Draft -08 to -11 (express-rate-limit `draft-8`): a List of service
//!   limit Items, `RateLimit: "default";r=0;t=30`, each with `r` (remaining
//!   quota units, a non-negative Integer, required), `t` (seconds until
//!   more quota is available, a non-negative Integer, optional) and `pk`
//!   (a partition key, not needed here). Several field lines are one List
//!   (RFC 9651 §4.2: joined with commas).
//! - Draft -07 (express-rate-limit `draft-7`): the Dictionary
//!   `RateLimit: limit=5, remaining=0, reset=37` (Integers), which is not a
//!   valid List; it is read when the List parse fails.
//!
//! The wait (in [`read_advice`](super::read_advice)) is the longest `t` of the items with `r=0`: an
//! item with quota left does not bound it, and an exhausted item without
//! `t` says nothing of when. A field that parses as neither form, or whose
//! items break these rules, is malformed and ignored whole ("Malformed
//! RateLimit header fields MUST be ignored"). `RateLimit-Policy` is
//! informative ("MAY be ignored") and not read for the wait.

use std::time::Duration;

use http::HeaderMap;
use sfv::{BareItem, Dictionary, List, ListEntry, Parameters, Parser, key_ref};

use super::AdviceSource;

/// The field's name.
pub const RATELIMIT: &str = "ratelimit";

/// One quota's current standing, as the `RateLimit` field tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceLimit {
    /// Quota units left (`r`, or the draft -07 `remaining`).
    pub remaining: u64,
    /// Seconds until more quota is available (`t`, or `reset`), if said.
    pub reset: Option<u64>,
}

/// Which form the field was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// The List of the draft -08 and later.
    List,
    /// The Dictionary of the draft -07.
    Dictionary,
}

/// Reads the `RateLimit` field: its form and every service limit, or
/// `None` when it is missing or malformed.
pub fn read(headers: &HeaderMap) -> Option<(Form, Vec<ServiceLimit>)> {
    let mut lines = headers.get_all(RATELIMIT).iter().peekable();
    lines.peek()?;
    let mut joined = Vec::new();
    for (i, line) in lines.enumerate() {
        if i > 0 {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(line.as_bytes());
    }
    if let Ok(list) = Parser::new(&joined).parse_list::<List>() {
        return read_list(&list).map(|limits| (Form::List, limits));
    }
    let dict = Parser::new(&joined).parse_dictionary::<Dictionary>().ok()?;
    read_dictionary(&dict).map(|limit| (Form::Dictionary, vec![limit]))
}

/// A non-negative Integer, as `u64`.
fn non_negative(item: &BareItem) -> Option<u64> {
    u64::try_from(i64::from(item.as_integer()?)).ok()
}

fn read_list(list: &List) -> Option<Vec<ServiceLimit>> {
    list.iter()
        .map(|entry| {
            let ListEntry::Item(item) = entry else { return None };
            read_params(&item.params)
        })
        .collect()
}

fn read_params(params: &Parameters) -> Option<ServiceLimit> {
    let remaining = non_negative(params.get(key_ref("r"))?)?;
    let reset = match params.get(key_ref("t")) {
        Some(t) => Some(non_negative(t)?),
        None => None,
    };
    Some(ServiceLimit { remaining, reset })
}

fn read_dictionary(dict: &Dictionary) -> Option<ServiceLimit> {
    let integer = |name: &str| match dict.get(key_ref(name)) {
        Some(ListEntry::Item(item)) => Some(non_negative(&item.bare_item)),
        Some(ListEntry::InnerList(_)) => Some(None),
        None => None,
    };
    // `limit` is not needed for the wait, but a malformed one spoils the field.
    if let Some(None) = integer("limit") {
        return None;
    }
    let remaining = integer("remaining")??;
    let reset = match integer("reset") {
        Some(reset) => Some(reset?),
        None => None,
    };
    Some(ServiceLimit { remaining, reset })
}

/// The wait the `RateLimit` field advises: the longest reset of its
/// exhausted quotas (`r=0`), named by the field's form.
pub(super) fn advice(headers: &HeaderMap) -> Option<(AdviceSource, Duration)> {
    let (form, limits) = read(headers)?;
    let longest = limits.iter().filter(|l| l.remaining == 0).filter_map(|l| l.reset).max()?;
    let source = match form {
        Form::List => AdviceSource::RateLimitField,
        Form::Dictionary => AdviceSource::RateLimitDictionary,
    };
    Some((source, Duration::from_secs(longest)))
}

/// Whether some quota of the field is exhausted.
pub(super) fn exhausted(headers: &HeaderMap) -> bool {
    read(headers).is_some_and(|(_, limits)| limits.iter().any(|l| l.remaining == 0))
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn field(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(RATELIMIT, HeaderValue::from_str(l).unwrap());
        }
        h
    }

    fn wait(lines: &[&str]) -> Option<(AdviceSource, Duration)> {
        advice(&field(lines))
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_drafts_example_and_express_draft8() {
        assert_eq!(wait(&[r#""default";r=0;t=30"#]), Some((AdviceSource::RateLimitField, s(30))));
        assert_eq!(wait(&[r#""5-in-1min"; r=0; t=37"#]), Some((AdviceSource::RateLimitField, s(37))));
        // A token as the policy's name, and a partition key, are fine.
        assert_eq!(wait(&["default;r=0;t=3;pk=:dHJpYWwxMjEzMjM=:"]), Some((AdviceSource::RateLimitField, s(3))));
    }

    #[test]
    fn express_draft7_dictionary() {
        assert_eq!(wait(&["limit=5, remaining=0, reset=37"]), Some((AdviceSource::RateLimitDictionary, s(37))));
        assert_eq!(wait(&["limit=5, remaining=2, reset=37"]), None, "quota left");
        assert_eq!(wait(&["limit=5, remaining=0"]), None, "no reset: no wait");
        assert!(exhausted(&field(&["limit=5, remaining=0"])));
        for bad in ["limit=5, remaining=-1, reset=3", "limit=x, remaining=0, reset=3", "remaining=0, reset=1.5"] {
            assert_eq!(wait(&[bad]), None, "{bad:?}");
        }
    }

    #[test]
    fn the_longest_exhausted_policy_bounds_the_wait() {
        let two = r#""burst";r=0;t=5, "daily";r=0;t=3600"#;
        assert_eq!(wait(&[two]), Some((AdviceSource::RateLimitField, s(3600))));
        // A policy with quota left does not bound it, however long its reset.
        let one_left = r#""burst";r=0;t=5, "daily";r=10;t=3600"#;
        assert_eq!(wait(&[one_left]), Some((AdviceSource::RateLimitField, s(5))));
        // Nothing exhausted: no advice, though the field is read.
        assert_eq!(wait(&[r#""a";r=1;t=5"#]), None);
        assert!(!exhausted(&field(&[r#""a";r=1;t=5"#])));
        // Exhausted without `t`: nothing said of when.
        assert_eq!(wait(&[r#""a";r=0"#]), None);
        assert_eq!(wait(&[r#""a";r=0, "b";r=0;t=7"#]), Some((AdviceSource::RateLimitField, s(7))));
    }

    #[test]
    fn several_lines_are_one_list() {
        assert_eq!(wait(&[r#""burst";r=0;t=5"#, r#""daily";r=0;t=60"#]), Some((AdviceSource::RateLimitField, s(60))));
        // One malformed line spoils the whole field.
        assert_eq!(wait(&[r#""burst";r=0;t=5"#, r#""daily";r=0;t=-1"#]), None);
    }

    #[test]
    fn malformed_fields_are_ignored() {
        for bad in [
            r#""a";t=30"#,          // no r
            r#""a";r=-1;t=30"#,     // negative r
            r#""a";r=0;t=-30"#,     // negative t
            r#""a";r=0;t=1.5"#,     // a Decimal t
            r#""a";r=0;t="30""#,    // a String t
            r#"("a" "b");r=0;t=3"#, // an inner list
            r#""a";r=0;t=30,"#,     // trailing comma
            "r=0;t=30;;",
            "",
            "\u{7f}",
        ] {
            let h = match HeaderValue::from_str(bad) {
                Ok(v) => {
                    let mut h = HeaderMap::new();
                    h.append(RATELIMIT, v);
                    h
                }
                Err(_) => continue,
            };
            assert_eq!(advice(&h), None, "{bad:?}");
        }
    }

    #[test]
    fn huge_numbers_are_malformed_or_exact_never_wrapped() {
        // RFC 9651 Integers have at most 15 digits: the largest is exact.
        let max = r#""a";r=0;t=999999999999999"#;
        assert_eq!(wait(&[max]), Some((AdviceSource::RateLimitField, s(999_999_999_999_999))));
        // One more digit is not an Integer: the field is malformed.
        assert_eq!(wait(&[r#""a";r=0;t=9999999999999999"#]), None);
        assert_eq!(wait(&["limit=5, remaining=0, reset=99999999999999999999"]), None);
    }

    #[test]
    fn missing_field_is_no_advice() {
        assert_eq!(advice(&HeaderMap::new()), None);
        assert!(!exhausted(&HeaderMap::new()));
    }
}
