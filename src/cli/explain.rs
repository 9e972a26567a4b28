//! `retrysim explain`: one response in, the core's decision and why out.

use std::time::SystemTime;

use clap::{Args, ValueEnum};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use retrysim::core::body::ErrorEnvelope;
use retrysim::core::classify::{
    Class, Classifier, DefaultTable, Operation, Outcome as AttemptOutcome, TransportFailure, classify_answer,
};
use retrysim::core::policy::{Attempted, Decision, Draws, decide, secs};
use retrysim::core::retry_after::{Advice, read_advice};
use retrysim::env::{Rng, seeded_rng};
use retrysim::trace::{AdviceView, Event, EventKind, render_event};
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
    humantime::parse_rfc3339_weak(text)
        .map_err(|e| UserError(format!("{flag} {text:?} is not an RFC 3339 time ({e}); e.g. 1994-11-06T08:49:37Z")))
}

/// Explains one decision.
pub fn run(args: ExplainArgs) -> Outcome {
    let text = explain(&args)?;
    Ok((text, std::process::ExitCode::SUCCESS))
}

fn explain(args: &ExplainArgs) -> Result<String, UserError> {
    let ExplainArgs {
        status,
        transport_error,
        headers,
        body,
        now,
        elapsed,
        attempt,
        policy,
        seed,
        method,
        no_key,
        format,
    } = args;
    let (status, transport_error, attempt, seed, no_key, format) =
        (*status, *transport_error, *attempt, *seed, *no_key, *format);
    let now = now.as_deref();

    let policy = policy_named(policy)?;
    let method =
        Method::from_bytes(method.as_bytes()).map_err(|_| UserError(format!("invalid --method {method:?}")))?;
    let elapsed = humantime::parse_duration(elapsed)
        .map_err(|e| UserError(format!("--elapsed {elapsed:?} is not a duration ({e}); e.g. 3s or 1500ms")))?;
    let mut map = HeaderMap::new();
    for h in headers {
        let (n, v) = parse_header(h)?;
        map.append(n, v);
    }
    let received_at = match now {
        Some(t) => parse_instant(t, "--now")?,
        None => match map.get(http::header::DATE).and_then(|v| httpdate::parse_http_date(v.to_str().ok()?).ok()) {
            Some(d) => d,
            None => SystemTime::now(),
        },
    };
    let operation = Operation::of(&method, !no_key && matches!(method, Method::POST | Method::PATCH));
    // Any body is explained as sent: one that is not an error envelope (an
    // HTML 429 page, or not JSON at all) simply carries no code.
    let envelope = ErrorEnvelope::parse(body.as_bytes());
    let table = DefaultTable::default();
    let (class, advice, status, code) = match (status, transport_error) {
        (Some(s), _) => {
            let st = StatusCode::from_u16(s).map_err(|_| UserError(format!("invalid --status {s}")))?;
            // The class sees the headers and whether the advice is valid: a
            // 429 with no known code is throttling when it carries advice.
            let (class, code) = classify_answer(&table, st, &map, envelope.as_ref(), received_at);
            let advice = if class == Class::Success {
                Advice::none()
            } else {
                read_advice(&map, envelope.as_ref(), received_at)
            };
            (class, advice, Some(s), code.map(str::to_owned))
        }
        (None, Some(f)) => {
            let f = match f {
                Failure::NotSent => TransportFailure::NotSent,
                Failure::MaybeArrived => TransportFailure::MaybeArrived,
            };
            (table.classify(AttemptOutcome::Transport(f)), Advice::none(), None, None)
        }
        (None, None) => return Err(UserError("give --status or --transport-error".into())),
    };
    let mut rng = seeded_rng(seed);
    let draws = Draws { backoff: rng.draw(), spread: rng.draw() };
    let attempted = Attempted {
        operation,
        class,
        status,
        code: code.as_deref(),
        advice: &advice,
        attempts: attempt,
        unclear: if class == Class::Unclear { attempt } else { 0 },
        throttled: if class == Class::Throttled { attempt } else { 0 },
        elapsed,
        previous_wait: None,
        cancelled: false,
    };
    let decision = decide(&policy, &attempted, draws, None, elapsed);
    let view = AdviceView::from(&advice);
    let class_name = format!("{class:?}").to_lowercase();
    if format == Format::Json {
        let mut out = json!({
            "class": class_name,
            "operation": operation,
            "policy": policy.name,
            "advice": {
                "source": view.source,
                "valid": view.header_valid,
                "wait_ms": view.wait_ms,
                "error": view.error,
                "server_date": view.server_date,
            },
        });
        match &decision {
            Decision::Done => out["decision"] = json!("done"),
            Decision::Retry { wait, why } => {
                out["decision"] = json!("retry");
                out["wait_ms"] = json!(retrysim::trace::ms(*wait));
                out["why"] = json!(why);
            }
            Decision::GiveUp { reason } => {
                out["decision"] = json!("give_up");
                out["reason"] = json!(reason.kind());
                out["message"] = json!(reason.to_string());
                out["detail"] = json!(reason);
            }
        }
        return Ok(serde_json::to_string_pretty(&out).expect("JSON values serialise"));
    }
    let mut lines = Vec::new();
    match &decision {
        Decision::Done => lines.push("decision: done (success)".to_owned()),
        Decision::Retry { wait, why } => {
            lines.push(format!("decision: retry in {}", secs(*wait)));
            let rendered = render_event(
                "",
                &Event { at_ms: 0, kind: EventKind::Wait { ms: retrysim::trace::ms(*wait), why: *why } },
            );
            let why_text = rendered.split_once(" = ").map(|(_, w)| w.to_owned()).unwrap_or_default();
            lines.push(format!("why: {why_text}"));
        }
        Decision::GiveUp { reason } => {
            lines.push(format!("decision: give up ({})", reason.kind()));
            lines.push(format!("why: {reason}"));
        }
    }
    let code_text = code.map(|c| format!(" {c}")).unwrap_or_default();
    let answer = status.map(|s| format!("{s}{code_text}")).unwrap_or_else(|| "no answer".into());
    let op = serde_json::to_value(operation).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    lines.push(format!("class: {class_name} ({answer}), operation: {op}"));
    let source = serde_json::to_value(view.source).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    match view.wait_ms {
        Some(w) => lines.push(format!("advice: {source} {}", secs(w.duration()))),
        None => lines.push("advice: none".to_owned()),
    }
    if let Some(e) = &view.error {
        lines.push(format!("header invalid: {e}"));
    }
    if envelope.is_none() && !body.trim().is_empty() {
        lines.push("body: not a JSON error envelope (not JSON, or no \"error\" object), so no code".to_owned());
    }
    lines.push(format!(
        "policy: {} (deadline {}, max_retries {})",
        policy.name,
        secs(policy.deadline),
        policy.max_retries
    ));
    Ok(lines.join("\n"))
}
