//! `retrysim explain`: one response in, the core's decision and why out.

use std::time::{Duration, SystemTime};

use crate::core::body::ErrorEnvelope;
use crate::core::classify::{
    Class, Classifier, DefaultTable, Operation, Outcome as AttemptOutcome, TransportFailure, classify_answer,
};
use crate::core::policy::{Attempted, Decision, Draws, Policy, decide, secs};
use crate::core::retry_after::{Advice, read_advice};
use crate::env::{Rng, seeded_rng};
use crate::trace::{AdviceView, Event, EventKind, Millis, render_event};
use clap::{Args, ValueEnum};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use serde_json::json;

use super::{Format, Outcome, UserError, policy_named};

/// How an attempt failed without an answer.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Failure {
    NotSent,
    MaybeArrived,
}

/// Arguments of `retrysim explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The answer's status (omit with --transport-error).
    #[arg(long, required_unless_present = "transport_error", value_parser = clap::value_parser!(u16).range(100..=599))]
    status: Option<u16>,
    /// No answer came: whether the request may have reached the server.
    #[arg(long, value_enum, conflicts_with = "status")]
    transport_error: Option<Failure>,
    /// A response header, `name: value`; repeat for several (several Retry-After lines too).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// The response body as sent (a JSON error envelope, or anything else: then no code); empty for none.
    #[arg(long, default_value = "")]
    body: String,
    /// The client's wall clock at receipt, RFC 3339 (default: the Date header, else the system clock).
    #[arg(long)]
    now: Option<String>,
    /// Time since the operation's first attempt, e.g. `3s`, `1500ms`.
    #[arg(long, default_value = "0s")]
    elapsed: String,
    /// Which attempt this answer is for (1 = the first); the earlier ones
    /// are taken to have had the same class (so a 429 at attempt 2 or later
    /// is an advice refused again).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    attempt: u32,
    /// Policy preset: interactive, background, batch, standard.
    #[arg(long, default_value = "standard")]
    policy: String,
    /// Seed for the jitter draws.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The request's method.
    #[arg(long, default_value = "POST")]
    method: String,
    /// The POST carries no Idempotency-Key (an unsafe operation).
    #[arg(long)]
    no_key: bool,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

fn parse_header(line: &str) -> Result<(HeaderName, HeaderValue), UserError> {
    let bad = |why: &str| UserError(format!("invalid header {line:?}: {why}; write it as 'name: value'"));
    let (name, value) = line.split_once(':').ok_or_else(|| bad("no ':'"))?;
    let name =
        HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad("the name is not a valid header name"))?;
    let value =
        HeaderValue::from_str(value.trim_start()).map_err(|_| bad("the value has characters a header cannot carry"))?;
    Ok((name, value))
}

fn parse_instant(text: &str, flag: &str) -> Result<SystemTime, UserError> {
    humantime::parse_rfc3339_weak(text).map_err(|e| {
        // humantime reads 1970 to 9999 and calls an earlier year "out of range".
        let year = text.trim().get(..4).and_then(|y| y.parse::<u32>().ok());
        match year {
            Some(y) if y < 1970 => UserError(format!(
                "{flag} {text:?}: dates before 1970 are not accepted (the clock starts at 1970-01-01T00:00:00Z); \
                 e.g. 1994-11-06T08:49:37Z"
            )),
            _ => UserError(format!("{flag} {text:?} is not an RFC 3339 time ({e}); e.g. 1994-11-06T08:49:37Z")),
        }
    })
}

/// Explains one decision.
pub fn run(args: ExplainArgs) -> Outcome {
    let text = explain(&args)?;
    Ok((text, std::process::ExitCode::SUCCESS))
}

fn explain(args: &ExplainArgs) -> Result<String, UserError> {
    let read = Read::of(args)?;
    let decision = read.decide(args.attempt, args.seed);
    Ok(match args.format {
        Format::Json => read.json(&decision),
        Format::Text => read.text(&decision, &args.body),
    })
}

/// The response to explain as the core sees it, read from the arguments.
struct Read {
    policy: Policy,
    operation: Operation,
    elapsed: Duration,
    envelope: Option<ErrorEnvelope>,
    class: Class,
    advice: Advice,
    status: Option<u16>,
    code: Option<String>,
    /// A `Retry-After` of more seconds than a `u64` holds, its digits as
    /// sent: the core reads it as `u64::MAX` s (see [`beyond_u64`]).
    sent_seconds: Option<String>,
}

impl Read {
    /// Parses and classifies what the arguments describe.
    fn of(args: &ExplainArgs) -> Result<Read, UserError> {
        let policy = policy_named(&args.policy)?;
        let method = &args.method;
        let method =
            Method::from_bytes(method.as_bytes()).map_err(|_| UserError(format!("invalid --method {method:?}")))?;
        let elapsed = &args.elapsed;
        let elapsed = humantime::parse_duration(elapsed)
            .map_err(|e| UserError(format!("--elapsed {elapsed:?} is not a duration ({e}); e.g. 3s or 1500ms")))?;
        let mut map = HeaderMap::new();
        for h in &args.headers {
            let (n, v) = parse_header(h)?;
            map.append(n, v);
        }
        let received_at = match args.now.as_deref() {
            Some(t) => parse_instant(t, "--now")?,
            None => match map.get(http::header::DATE).and_then(|v| httpdate::parse_http_date(v.to_str().ok()?).ok()) {
                Some(d) => d,
                None => SystemTime::now(),
            },
        };
        let operation = Operation::of(&method, !args.no_key && matches!(method, Method::POST | Method::PATCH));
        // Any body is explained as sent: one that is not an error envelope (an
        // HTML 429 page, or not JSON at all) simply carries no code.
        let envelope = ErrorEnvelope::parse(args.body.as_bytes());
        let (class, advice, status, code) =
            classify(args.status, args.transport_error, &map, envelope.as_ref(), received_at)?;
        let sent_seconds =
            beyond_u64(&map).filter(|_| AdviceView::from(&advice).wait_ms == Some(Millis::of(longest())));
        Ok(Read { policy, operation, elapsed, envelope, class, advice, status, code, sent_seconds })
    }

    /// The core's decision on this answer as attempt `attempt`, the jitter
    /// drawn from `seed`.
    fn decide(&self, attempt: u32, seed: u64) -> Decision {
        let mut rng = seeded_rng(seed);
        let draws = Draws { backoff: rng.draw(), spread: rng.draw() };
        let attempted = Attempted {
            operation: self.operation,
            class: self.class,
            status: self.status,
            code: self.code.as_deref(),
            advice: &self.advice,
            attempts: attempt,
            unclear: if self.class == Class::Unclear { attempt } else { 0 },
            throttled: if self.class == Class::Throttled { attempt } else { 0 },
            elapsed: self.elapsed,
            previous_wait: None,
            cancelled: false,
        };
        decide(&self.policy, &attempted, draws, None, self.elapsed)
    }

    fn class_name(&self) -> String {
        format!("{:?}", self.class).to_lowercase()
    }

    /// `text` with the wait the core holds for a `Retry-After` above
    /// `u64::MAX` s replaced by the digits as sent (the core's messages
    /// show the `u64::MAX` s it holds).
    fn as_sent(&self, text: &str) -> String {
        match &self.sent_seconds {
            Some(digits) => {
                let held = secs(longest());
                text.replace(&held, &format!("{digits}s (more than the {held} it is held as)"))
            }
            None => text.to_owned(),
        }
    }

    /// `--format json`.
    fn json(&self, decision: &Decision) -> String {
        let view = AdviceView::from(&self.advice);
        let mut out = json!({
            "class": self.class_name(),
            "operation": self.operation,
            "policy": self.policy.name,
            "advice": {
                "source": view.source,
                "valid": view.header_valid,
                "wait_ms": view.wait_ms,
                "error": view.error,
                "server_date": view.server_date,
            },
        });
        match decision {
            Decision::Done => out["decision"] = json!("done"),
            Decision::Retry { wait, why } => {
                out["decision"] = json!("retry");
                out["wait_ms"] = json!(crate::trace::ms(*wait));
                out["why"] = json!(why);
            }
            Decision::GiveUp { reason } => {
                out["decision"] = json!("give_up");
                out["reason"] = json!(reason.kind());
                out["message"] = json!(reason.to_string());
                out["detail"] = json!(reason);
            }
        }
        if let Some(digits) = &self.sent_seconds {
            out["advice"]["sent_seconds"] = json!(digits);
            if let Some(message) = out["message"].as_str().map(|m| self.as_sent(m)) {
                out["message"] = json!(message);
            }
        }
        serde_json::to_string_pretty(&out).expect("JSON values serialise")
    }

    /// The text: the decision and why, then what it was read from.
    fn text(&self, decision: &Decision, body: &str) -> String {
        let mut lines = decision_lines(decision);
        for line in &mut lines {
            *line = self.as_sent(line);
        }
        let view = AdviceView::from(&self.advice);
        let code_text = self.code.as_ref().map(|c| format!(" {c}")).unwrap_or_default();
        let answer = self.status.map(|s| format!("{s}{code_text}")).unwrap_or_else(|| "no answer".into());
        let word = |v: serde_json::Result<serde_json::Value>| {
            v.ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
        };
        let op = word(serde_json::to_value(self.operation));
        lines.push(format!("class: {} ({answer}), operation: {op}", self.class_name()));
        let source = word(serde_json::to_value(view.source));
        match view.wait_ms {
            Some(w) if view.source.is_upper_bound() => {
                lines.push(format!("advice: {source} {} (an upper bound: the backoff, cut to it)", secs(w.duration())))
            }
            Some(w) => match &self.sent_seconds {
                Some(digits) => lines.push(format!(
                    "advice: {source} {digits}s as sent, held as {} (the longest wait the core holds)",
                    secs(w.duration())
                )),
                None => lines.push(format!("advice: {source} {}", secs(w.duration()))),
            },
            None => lines.push("advice: none".to_owned()),
        }
        if let Some(e) = &view.error {
            lines.push(format!("header invalid: {e}"));
        }
        if self.envelope.is_none() && !body.trim().is_empty() {
            lines.push("body: not a JSON error envelope (not JSON, or no \"error\" object), so no code".to_owned());
        }
        let p = &self.policy;
        lines.push(format!("policy: {} (deadline {}, max_retries {})", p.name, secs(p.deadline), p.max_retries));
        lines.join("\n")
    }
}

/// The longest wait the core holds: `u64::MAX` seconds, what a larger
/// `Retry-After` saturates at.
fn longest() -> Duration {
    Duration::from_secs(u64::MAX)
}

/// The digits of a `Retry-After` delta-seconds value above `u64::MAX`,
/// as sent (leading zeros dropped), if the headers carry one.
fn beyond_u64(map: &HeaderMap) -> Option<String> {
    let max = u64::MAX.to_string();
    map.get_all(http::header::RETRY_AFTER).iter().find_map(|v| {
        let v = v.to_str().ok()?.trim_matches([' ', '\t']);
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = v.trim_start_matches('0');
        let above = digits.len() > max.len() || (digits.len() == max.len() && digits > max.as_str());
        above.then(|| digits.to_owned())
    })
}

/// The class of the answer (`status`) or of the failure, with the advice,
/// the status and the code.
fn classify(
    status: Option<u16>,
    failure: Option<Failure>,
    map: &HeaderMap,
    envelope: Option<&ErrorEnvelope>,
    received_at: SystemTime,
) -> Result<(Class, Advice, Option<u16>, Option<String>), UserError> {
    let table = DefaultTable::default();
    match (status, failure) {
        (Some(s), _) => {
            let st = StatusCode::from_u16(s).map_err(|_| UserError(format!("invalid --status {s}")))?;
            // The class sees the headers and whether the advice is valid: a
            // 429 with no known code is throttling when it carries advice.
            let (class, code) = classify_answer(&table, st, map, envelope, received_at);
            let advice = if class == Class::Success { Advice::none() } else { read_advice(map, envelope, received_at) };
            Ok((class, advice, Some(s), code.map(str::to_owned)))
        }
        (None, Some(f)) => {
            let f = match f {
                Failure::NotSent => TransportFailure::NotSent,
                Failure::MaybeArrived => TransportFailure::MaybeArrived,
            };
            Ok((table.classify(AttemptOutcome::Transport(f)), Advice::none(), None, None))
        }
        (None, None) => Err(UserError("give --status or --transport-error".into())),
    }
}

/// The decision and why, as the text's first lines.
fn decision_lines(decision: &Decision) -> Vec<String> {
    match decision {
        Decision::Done => vec!["decision: done (success)".to_owned()],
        Decision::Retry { wait, why } => {
            let event = Event { at_ms: 0, kind: EventKind::Wait { ms: crate::trace::ms(*wait), why: *why } };
            let rendered = render_event("", &event);
            let why_text = rendered.split_once(" = ").map(|(_, w)| w.to_owned()).unwrap_or_default();
            vec![format!("decision: retry in {}", secs(*wait)), format!("why: {why_text}")]
        }
        Decision::GiveUp { reason } => {
            vec![format!("decision: give up ({})", reason.kind()), format!("why: {reason}")]
        }
    }
}
