//! What the driver did, event by event, in a form a reviewer can read in a
//! diff: one line per event, monotonic (virtual) milliseconds, and the reason
//! for every wait and every stop.
//!
//! A trace never holds a secret: no header values except a shortened
//! `Idempotency-Key`, no bodies, no query strings, only the error code of an
//! answer.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::core::classify::{Class, TransportFailure};
use crate::core::policy::{GiveUpReason, WaitBasis, WaitWhy, secs};
use crate::core::retry_after::{Advice, AdviceSource, HeaderState};

/// One event, at a monotonic time in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Milliseconds on the driver's monotonic clock.
    pub at_ms: u64,
    /// What happened then.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// A fleet gate held the attempt before it went out.
    Admitted {
        /// How long the gate held it.
        queued_ms: u64,
    },
    /// An attempt went out.
    Attempt {
        /// The attempt's number, from 1.
        n: u32,
        /// The HTTP method, which decides whether a replay is safe.
        method: String,
        /// The path only: a query string may hold a secret.
        path: String,
        /// The shortened key ([`short_key`]).
        key: Option<String>,
        /// The attempt's own timeout, cut to what the deadline leaves.
        timeout_ms: u64,
    },
    /// An answer came back.
    Answer {
        /// The attempt it answers.
        n: u32,
        /// The HTTP status.
        status: u16,
        /// The body's `error.code` (else `error.type`).
        code: Option<String>,
        /// How the classifier read it.
        class: Class,
        /// The advised wait it carried, and where from.
        advice: AdviceView,
        /// The server replayed a stored answer for this idempotency key.
        replayed: bool,
    },
    /// No answer came back.
    NoAnswer {
        /// The attempt that got no answer.
        n: u32,
        /// What the transport reported.
        failure: TransportFailure,
        /// How the classifier read it: whether the request may have run.
        class: Class,
    },
    /// The driver sleeps before the next attempt.
    Wait {
        /// The sleep, spread included.
        ms: u64,
        /// Where the wait came from.
        why: WaitWhy,
    },
    /// A success.
    Done {
        /// The successful status.
        status: u16,
        /// Attempts made, this one included.
        attempts: u32,
        /// Total sleep between attempts.
        waited_ms: u64,
    },
    /// The driver stopped without success.
    GaveUp {
        /// The rule that stopped it.
        reason: GiveUpReason,
        /// Attempts made.
        attempts: u32,
        /// Total sleep between attempts.
        waited_ms: u64,
    },
}

/// The advice of an answer as it appears in a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdviceView {
    /// Where the advised wait came from.
    pub source: AdviceSource,
    /// Whether the `Retry-After` header was valid (`None`: there was none).
    pub header_valid: Option<bool>,
    /// The advised wait before jitter, exact at any size.
    pub wait_ms: Option<Millis>,
    /// Why the header was invalid.
    pub error: Option<String>,
    /// Whether a date was measured against the server's `Date`.
    pub server_date: bool,
}

impl From<&Advice> for AdviceView {
    fn from(a: &Advice) -> Self {
        let (header_valid, error) = match &a.header {
            HeaderState::Missing => (None, None),
            HeaderState::Valid => (Some(true), None),
            HeaderState::Invalid { reason } => (Some(false), Some(reason.clone())),
        };
        AdviceView {
            source: a.source,
            header_valid,
            wait_ms: a.wait.map(Millis::of),
            error,
            server_date: a.server_date_used,
        }
    }
}

/// Whole milliseconds of a duration (rounded down), exact at any size: an
/// advice can exceed u64::MAX ms (a `Retry-After` of 2^64 - 1 seconds), and
/// a saturated count would show it 1000x too small. In JSON a number up to
/// 2^53 - 1 and a string of the digits above (see
/// [`millis_json`](crate::core::millis_json)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(pub u128);

impl Millis {
    /// The whole milliseconds of `d`.
    pub fn of(d: Duration) -> Millis {
        Millis(d.as_millis())
    }

    /// The count as a `Duration` (`Duration::MAX` if it holds no such count).
    pub fn duration(self) -> Duration {
        match u64::try_from(self.0 / 1000) {
            Ok(secs) => Duration::new(secs, (self.0 % 1000) as u32 * 1_000_000),
            Err(_) => Duration::MAX,
        }
    }

    /// The count, saturating at u64::MAX: for comparisons where anything
    /// that large is simply "too long".
    pub fn saturating_u64(self) -> u64 {
        u64::try_from(self.0).unwrap_or(u64::MAX)
    }
}

impl Serialize for Millis {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        crate::core::millis_json::write_ms(self.0, s)
    }
}

/// Whole milliseconds, saturating (event times and waits, which the
/// deadline bounds).
pub fn ms(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// A key as traces show it: `k:` and six hex digits of a stable hash. Equal
/// keys look equal, different keys almost surely differ, and the key itself
/// (which a replay could abuse) never appears.
pub fn short_key(key: &str) -> String {
    // FNV-1a: stable across platforms and releases, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("k:{:06x}", h >> 40)
}

/// The events of one logical operation, with a label such as `w0 job-1`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Trace {
    /// Who ran the operation, such as `w0 job-1`.
    pub label: String,
    /// The events in the order they happened.
    pub events: Vec<Event>,
}

impl Trace {
    /// An empty trace with a label.
    pub fn new(label: impl Into<String>) -> Trace {
        Trace { label: label.into(), events: Vec::new() }
    }

    /// Records an event at `at`.
    pub fn push(&mut self, at: Duration, kind: EventKind) {
        self.events.push(Event { at_ms: ms(at), kind });
    }

    /// One line per event; see [`render_event`].
    pub fn render(&self) -> String {
        let mut out = String::new();
        for e in &self.events {
            out.push_str(&render_event(&self.label, e));
            out.push('\n');
        }
        out
    }
}

fn advice_words(a: &AdviceView) -> String {
    let source = match a.source {
        AdviceSource::HeaderSeconds => "header seconds",
        AdviceSource::HeaderDate if a.server_date => "header date (vs server Date)",
        AdviceSource::HeaderDate => "header date (vs client clock)",
        AdviceSource::BodySeconds => "body retry_after_seconds",
        AdviceSource::BodyReset => "body resetAt",
        AdviceSource::RetryAfterMs => "header retry-after-ms",
        AdviceSource::RateLimitField => "RateLimit field",
        AdviceSource::RateLimitDictionary => "RateLimit field (draft-07 dictionary)",
        AdviceSource::RateLimitReset => "RateLimit-Reset",
        AdviceSource::XRateLimitReset => "X-RateLimit-Reset",
        AdviceSource::ResetUnixTime if a.server_date => "reset Unix time (vs server Date)",
        AdviceSource::ResetUnixTime => "reset Unix time (vs client clock)",
        AdviceSource::OpenAiReset => "x-ratelimit-reset-* (upper bound)",
        AdviceSource::None => "none",
    };
    let mut s = format!("advice: {source}");
    if let Some(w) = a.wait_ms {
        let _ = write!(s, " {}", secs(w.duration()));
    }
    match (a.header_valid, &a.error) {
        (Some(false), Some(e)) => {
            let _ = write!(s, " (header invalid: {e})");
        }
        (Some(true), _) if !matches!(a.source, AdviceSource::HeaderSeconds | AdviceSource::HeaderDate) => {
            s.push_str(" (header valid)");
        }
        _ => {}
    }
    s
}

fn wait_words(why: &WaitWhy) -> String {
    let d = |x: Duration| secs(x);
    match why.basis {
        WaitBasis::Advice(_) => format!("advice {} + jitter {}", d(why.base), d(why.jitter)),
        WaitBasis::Backoff => match why.window {
            Some(w) => format!("backoff draw {} from window {}", d(why.base), d(w)),
            None => format!("backoff {}", d(why.base)),
        },
        WaitBasis::BackoffOverAdvice => format!(
            "backoff draw {} (over advice {}) + jitter {}",
            d(why.base),
            d(why.advised.unwrap_or_default()),
            d(why.jitter)
        ),
        WaitBasis::Bound(_) => format!(
            "backoff cut to the server's bound {} (backoff window {})",
            d(why.base),
            d(why.window.unwrap_or_default())
        ),
        WaitBasis::RefusedAgain => format!(
            "refused again: {} (advice {} escalated, backoff window {}) + jitter {}",
            d(why.base),
            d(why.advised.unwrap_or_default()),
            d(why.window.unwrap_or_default()),
            d(why.jitter)
        ),
    }
}

/// One event as one line: time right-aligned, the label, then what happened
/// and why.
pub fn render_event(label: &str, e: &Event) -> String {
    let what = match &e.kind {
        EventKind::Admitted { queued_ms } => {
            format!("admitted after {} in the fleet queue", secs(Duration::from_millis(*queued_ms)))
        }
        EventKind::Attempt { n, method, path, key, timeout_ms } => {
            let key = key.as_deref().map(|k| format!("  key={k}")).unwrap_or_default();
            format!("attempt {n}  {method} {path}{key}  timeout {}", secs(Duration::from_millis(*timeout_ms)))
        }
        EventKind::Answer { status, code, class, advice, replayed, .. } => {
            let code = code.as_deref().map(|c| format!(" {c}")).unwrap_or_default();
            let replayed = if *replayed { " (idempotent replay)" } else { "" };
            let class = format!("{class:?}").to_lowercase();
            if advice.source == AdviceSource::None && advice.header_valid.is_none() {
                format!("<- {status}{code}{replayed}  [{class}]")
            } else {
                format!("<- {status}{code}{replayed}  [{class}]  {}", advice_words(advice))
            }
        }
        EventKind::NoAnswer { failure, class, .. } => {
            let f = match failure {
                TransportFailure::NotSent => "not sent",
                TransportFailure::MaybeArrived => "may have arrived",
                TransportFailure::Unsendable => "not sent, no retry can fix it",
            };
            format!("<- no answer ({f})  [{}]", format!("{class:?}").to_lowercase())
        }
        EventKind::Wait { ms, why } => format!("wait {} = {}", secs(Duration::from_millis(*ms)), wait_words(why)),
        EventKind::Done { status, attempts, waited_ms } => format!(
            "done: {status} after {attempts} attempt{}, waited {}",
            if *attempts == 1 { "" } else { "s" },
            secs(Duration::from_millis(*waited_ms))
        ),
        EventKind::GaveUp { reason, attempts, waited_ms } => format!(
            "gave up after {attempts} attempt{}, waited {}: {reason}",
            if *attempts == 1 { "" } else { "s" },
            secs(Duration::from_millis(*waited_ms))
        ),
    };
    format!("{:>8}ms  {label}  {what}", e.at_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_stable_and_hide_the_key() {
        assert_eq!(short_key("abc"), short_key("abc"));
        assert_ne!(short_key("abc"), short_key("abd"));
        assert!(!short_key("secret-key-123").contains("secret"));
        assert_eq!(short_key("abc").len(), 8);
    }

    #[test]
    fn an_escalated_wait_says_so() {
        use crate::core::policy::{WaitBasis, WaitWhy};
        let s = Duration::from_secs;
        let why = WaitWhy {
            basis: WaitBasis::RefusedAgain,
            advised: Some(s(1)),
            base: s(5),
            jitter: Duration::from_millis(200),
            window: Some(s(4)),
        };
        let line = render_event("w0", &Event { at_ms: 0, kind: EventKind::Wait { ms: 5_200, why } });
        assert!(line.contains("refused again: 5.000s (advice 1.000s escalated, backoff window 4.000s)"), "{line}");
    }

    #[test]
    fn lines_read_like_the_issue_example() {
        let mut t = Trace::new("w0 job-1");
        t.push(
            Duration::ZERO,
            EventKind::Attempt {
                n: 1,
                method: "POST".into(),
                path: "/v1/jobs".into(),
                key: Some("k:3f2a11".into()),
                timeout_ms: 30_000,
            },
        );
        let why = WaitWhy {
            basis: WaitBasis::Advice(AdviceSource::HeaderSeconds),
            advised: Some(Duration::from_secs(2)),
            base: Duration::from_secs(2),
            jitter: Duration::from_millis(180),
            window: None,
        };
        t.push(Duration::from_millis(21), EventKind::Wait { ms: 2180, why });
        t.push(Duration::from_millis(4512), EventKind::Done { status: 201, attempts: 3, waited_ms: 4512 });
        let text = t.render();
        assert_eq!(
            text,
            "       0ms  w0 job-1  attempt 1  POST /v1/jobs  key=k:3f2a11  timeout 30.000s\n\
            \x20     21ms  w0 job-1  wait 2.180s = advice 2.000s + jitter 0.180s\n\
            \x20   4512ms  w0 job-1  done: 201 after 3 attempts, waited 4.512s\n"
        );
    }

    #[test]
    fn a_huge_advice_is_shown_exactly() {
        // 2^64 - 1 s once saturated at u64::MAX ms, 1000x too small.
        let advice = Advice {
            source: AdviceSource::HeaderSeconds,
            wait: Some(Duration::from_secs(u64::MAX)),
            header: HeaderState::Valid,
            server_date_used: false,
        };
        let view = AdviceView::from(&advice);
        assert_eq!(serde_json::to_value(&view).unwrap()["wait_ms"], "18446744073709551615000");
        assert!(advice_words(&view).ends_with(" 18446744073709551615.000s"), "{}", advice_words(&view));
        assert_eq!(view.wait_ms.unwrap().duration(), Duration::from_secs(u64::MAX));
        assert_eq!(Millis(u128::MAX).duration(), Duration::MAX);
        let small = AdviceView { wait_ms: Some(Millis(1500)), ..view };
        assert_eq!(serde_json::to_value(&small).unwrap()["wait_ms"], 1500);
    }
}
