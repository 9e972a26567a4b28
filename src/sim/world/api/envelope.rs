//! Error answers: the JSON envelope, and how a refusal's wait is advised.
//!
//! The retry core reads both envelopes of `core::body` and every advice form of
//! `core::retry_after`; this module writes them, so a scenario can flip one knob
//! (`envelope`, `advice`, `date_form`) and check the core copes. Each answer also
//! reports the *advised wait* it gave, measured from the answer's instant, so the
//! ledger can record the earliest moment a correct client may come back.

use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use super::config::{AdviceForm, DateForm, Envelope};
use super::wallclock::WallTime;

/// The refusals the model produces. The names are Blinkimg's (brief 002).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorCode {
    RateLimited,
    QueueFull,
    QuotaExceeded,
    SignupRequired,
    InsufficientCredits,
    IdempotencyKeyReused,
    IdempotencyInProgress,
    Unauthorized,
    NotFound,
    BadRequest,
}

impl ErrorCode {
    pub(crate) fn status(self) -> u16 {
        match self {
            ErrorCode::RateLimited | ErrorCode::QueueFull | ErrorCode::QuotaExceeded | ErrorCode::SignupRequired => 429,
            ErrorCode::InsufficientCredits => 402,
            ErrorCode::IdempotencyKeyReused | ErrorCode::IdempotencyInProgress => 409,
            ErrorCode::Unauthorized => 401,
            ErrorCode::NotFound => 404,
            ErrorCode::BadRequest => 400,
        }
    }

    /// The code as the envelope spells it. `queue_full` is Sume's own code and
    /// is written the same in both envelopes, so the core's table knows it.
    pub(crate) fn spelled(self, envelope: Envelope) -> &'static str {
        let blinkimg = match self {
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::QueueFull => return "queue_full",
            ErrorCode::QuotaExceeded => "QUOTA_EXCEEDED",
            ErrorCode::SignupRequired => "SIGNUP_REQUIRED",
            ErrorCode::InsufficientCredits => "INSUFFICIENT_CREDITS",
            ErrorCode::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            ErrorCode::IdempotencyInProgress => "IDEMPOTENCY_IN_PROGRESS",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::BadRequest => "BAD_REQUEST",
        };
        match (envelope, self) {
            (Envelope::Blinkimg, _) => blinkimg,
            (Envelope::Sume, ErrorCode::RateLimited) => "rate_limited",
            (Envelope::Sume, ErrorCode::QuotaExceeded) => "insufficient_quota",
            (Envelope::Sume, ErrorCode::SignupRequired) => "signup_required",
            (Envelope::Sume, ErrorCode::InsufficientCredits) => "insufficient_credits",
            (Envelope::Sume, ErrorCode::IdempotencyKeyReused) => "idempotency_key_reused",
            (Envelope::Sume, ErrorCode::IdempotencyInProgress) => "idempotency_in_progress",
            (Envelope::Sume, ErrorCode::Unauthorized) => "unauthorized",
            (Envelope::Sume, ErrorCode::NotFound) => "not_found",
            (Envelope::Sume, _) => "bad_request",
        }
    }

    /// A message that tells the caller what to do next.
    pub(crate) fn message(self) -> &'static str {
        match self {
            ErrorCode::RateLimited => "Rate limit exceeded",
            ErrorCode::QueueFull => "Too many requests in flight; retry later",
            ErrorCode::QuotaExceeded => "Monthly quota reached; it renews next month",
            ErrorCode::SignupRequired => "Anonymous limit reached; use an API key",
            ErrorCode::InsufficientCredits => "Insufficient credits; top up the account",
            ErrorCode::IdempotencyKeyReused => "Idempotency-Key was used with a different request",
            ErrorCode::IdempotencyInProgress => "A request with this Idempotency-Key is still running",
            ErrorCode::Unauthorized => "Missing or unknown API key",
            ErrorCode::NotFound => "Not found",
            ErrorCode::BadRequest => "Invalid request body",
        }
    }
}

/// An error answer before rendering: status, code, message, and the wait to
/// advise (`None` for refusals that waiting does not cure, e.g. 402).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) code: Option<String>,
    pub(crate) message: String,
    pub(crate) retry_after_s: Option<u64>,
    /// The code members the body writes in place of `code`, in order (see
    /// `ScriptStep::written_codes`); empty: `code` alone.
    pub(crate) written_codes: Vec<String>,
    /// The model's refusal it is (`None`: a script's), for a preset's envelope.
    pub(crate) kind: Option<ErrorCode>,
}

impl Refusal {
    pub(crate) fn new(code: ErrorCode, envelope: Envelope, retry_after_s: Option<u64>) -> Refusal {
        Refusal {
            status: code.status(),
            code: Some(code.spelled(envelope).to_owned()),
            message: code.message().to_owned(),
            retry_after_s,
            written_codes: Vec::new(),
            kind: Some(code),
        }
    }
}

/// How to write a refusal: the configured forms and the server's wall clock now.
pub(crate) struct Style {
    pub(crate) envelope: Envelope,
    pub(crate) advice: AdviceForm,
    pub(crate) date_form: DateForm,
    pub(crate) wall: WallTime,
}

/// The `Content-Type` of every JSON answer.
pub(crate) const JSON: &str = "application/json";

/// A rendered refusal: body, an optional `Retry-After` value, and the wait it advised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rendered {
    pub(crate) body: Bytes,
    pub(crate) content_type: &'static str,
    /// The `Retry-After` field lines, in order (none, one, or several).
    pub(crate) retry_after_header: Vec<String>,
    /// From the answer's instant to the earliest retry the advice allows.
    pub(crate) advised: Option<Duration>,
}

#[derive(Serialize)]
struct Outer<T> {
    error: T,
}

#[derive(Serialize)]
struct BlinkimgError<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'a str>,
    message: &'a str,
    #[serde(rename = "requestId")]
    request_id: String,
    #[serde(rename = "resetAt", skip_serializing_if = "Option::is_none")]
    reset_at: Option<String>,
}

#[derive(Serialize)]
struct SumeError<'a> {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'a str>,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_seconds: Option<u64>,
}

/// Writes `refusal` in `style`; `request` numbers Blinkimg's `requestId`.
pub(crate) fn render(refusal: &Refusal, style: &Style, request: usize) -> Rendered {
    let (retry_after_header, mut advised, wait) = advise(refusal, style);
    let written = &refusal.written_codes;
    let code = refusal.code.as_deref().filter(|_| written.is_empty());
    let body = match style.envelope {
        Envelope::Blinkimg => {
            let reset = wait.map(|w| style.wall.plus(w).ceil_to_milli());
            let hinted = reset.map(|r| r.since(style.wall));
            advised = min_some(advised, hinted);
            let error = BlinkimgError {
                code,
                message: &refusal.message,
                request_id: format!("req_{request}"),
                reset_at: reset.map(WallTime::rfc3339_millis),
            };
            serde_json::to_vec(&Outer { error })
        }
        Envelope::Sume => {
            advised = min_some(advised, wait);
            let error =
                SumeError { kind: code, message: &refusal.message, retry_after_seconds: wait.map(|w| w.as_secs()) };
            serde_json::to_vec(&Outer { error })
        }
    };
    let mut body = body.expect("an error envelope always serializes");
    if !written.is_empty() {
        // Serde writes a name once: the repeated members go in by hand,
        // first in the error object (a message always follows them).
        let name = if style.envelope == Envelope::Sume { "type" } else { "code" };
        let members: String = written.iter().map(|c| format!("\"{name}\":{},", serde_json::json!(c))).collect();
        let opening = br#"{"error":{"#.len();
        body.splice(opening..opening, members.into_bytes());
    }
    Rendered { body: Bytes::from(body), content_type: JSON, retry_after_header, advised }
}

/// Writes `refusal` in a named API's envelope (`presets`): the advice goes
/// only in the header, since the body has no place for a wait of its own.
pub(crate) fn render_preset(refusal: &Refusal, style: &Style, body: serde_json::Value) -> Rendered {
    let (retry_after_header, advised, _) = advise(refusal, style);
    Rendered { body: Bytes::from(body.to_string()), content_type: JSON, retry_after_header, advised }
}

/// Writes `refusal` as an HTML `page` (Flask-Limiter's default, see
/// `habits`): the advice goes only in the header, since the page has no
/// place for a wait; `body_only` advice is then no advice at all.
pub(crate) fn render_html(refusal: &Refusal, style: &Style, page: String) -> Rendered {
    let (retry_after_header, advised, _) = advise(refusal, style);
    Rendered { body: Bytes::from(page), content_type: super::habits::HTML, retry_after_header, advised }
}

/// The `Retry-After` lines `style` gives a refusal, the wait they advise
/// (the largest valid one, as RFC 9110 leaves a client to pick and
/// retrysim's parser does), and the wait for the body's hint (`None`: no hint).
fn advise(refusal: &Refusal, style: &Style) -> (Vec<String>, Option<Duration>, Option<Duration>) {
    let wait = refusal.retry_after_s.map(Duration::from_secs);
    let (header, body_hint) = match (wait, style.advice) {
        (None, _) | (Some(_), AdviceForm::None) => (vec![], false),
        (Some(_), AdviceForm::Malformed) => (vec![Advised::Malformed], false),
        (Some(w), AdviceForm::HeaderSeconds) => (vec![Advised::Seconds(w)], false),
        (Some(w), AdviceForm::HeaderDate) => (vec![Advised::Date(w)], false),
        (Some(_), AdviceForm::BodyOnly) => (vec![], true),
        (Some(w), AdviceForm::Both) => (vec![Advised::Seconds(w)], true),
        // A shorter delta first, a junk line, a date for the shorter wait,
        // then the real wait: only the largest valid line is safe to obey.
        (Some(w), AdviceForm::SeveralLines) => {
            let half = Duration::from_secs(w.as_secs() / 2);
            (vec![Advised::Seconds(half), Advised::Malformed, Advised::Date(half), Advised::Seconds(w)], false)
        }
    };
    let mut advised: Option<Duration> = None;
    let mut obey = |w: Duration| advised = Some(advised.map_or(w, |a| a.max(w)));
    let retry_after_header = header
        .into_iter()
        .map(|h| match h {
            Advised::Malformed => "soon".to_owned(),
            Advised::Seconds(w) => {
                obey(w);
                w.as_secs().to_string()
            }
            Advised::Date(w) => {
                let target = style.wall.plus(w).ceil_to_second();
                obey(target.since(style.wall));
                match style.date_form {
                    DateForm::ImfFixdate => target.imf_fixdate(),
                    DateForm::Rfc850 => target.rfc850(),
                    DateForm::Asctime => target.asctime(),
                }
            }
        })
        .collect();
    (retry_after_header, advised, wait.filter(|_| body_hint))
}

enum Advised {
    Seconds(Duration),
    Date(Duration),
    Malformed,
}

/// The earlier of two advised waits: a client may act on either hint.
fn min_some(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-10-17T09:12:30.250Z
    fn wall() -> WallTime {
        WallTime::from_unix_ms(1_792_228_350_250)
    }

    fn style(envelope: Envelope, advice: AdviceForm, date_form: DateForm) -> Style {
        Style { envelope, advice, date_form, wall: wall() }
    }

    fn limited(envelope: Envelope) -> Refusal {
        Refusal::new(ErrorCode::RateLimited, envelope, Some(2))
    }

    fn text(r: &Rendered) -> &str {
        std::str::from_utf8(&r.body).unwrap()
    }

    #[test]
    fn blinkimg_envelope_shape() {
        let r =
            render(&limited(Envelope::Blinkimg), &style(Envelope::Blinkimg, AdviceForm::Both, DateForm::ImfFixdate), 7);
        assert_eq!(
            text(&r),
            r#"{"error":{"code":"RATE_LIMITED","message":"Rate limit exceeded","requestId":"req_7","resetAt":"2026-10-17T09:12:32.250Z"}}"#
        );
        assert_eq!(r.retry_after_header.first().map(String::as_str), Some("2"));
        assert_eq!(r.advised, Some(Duration::from_secs(2)));
    }

    #[test]
    fn sume_envelope_shape() {
        let r = render(&limited(Envelope::Sume), &style(Envelope::Sume, AdviceForm::Both, DateForm::ImfFixdate), 7);
        assert_eq!(
            text(&r),
            r#"{"error":{"type":"rate_limited","message":"Rate limit exceeded","retry_after_seconds":2}}"#
        );
    }

    #[test]
    fn a_body_can_repeat_its_code_member_in_either_envelope() {
        let repeated = |envelope| Refusal {
            written_codes: vec!["QUOTA_EXCEEDED".into(), "RATE_LIMITED".into()],
            ..Refusal::new(ErrorCode::QuotaExceeded, envelope, None)
        };
        let r = render(
            &repeated(Envelope::Blinkimg),
            &style(Envelope::Blinkimg, AdviceForm::Both, DateForm::ImfFixdate),
            7,
        );
        assert_eq!(
            text(&r),
            r#"{"error":{"code":"QUOTA_EXCEEDED","code":"RATE_LIMITED","message":"Monthly quota reached; it renews next month","requestId":"req_7"}}"#
        );
        let r = render(&repeated(Envelope::Sume), &style(Envelope::Sume, AdviceForm::Both, DateForm::ImfFixdate), 7);
        assert!(
            text(&r).starts_with(r#"{"error":{"type":"QUOTA_EXCEEDED","type":"RATE_LIMITED","message":"#),
            "{}",
            text(&r)
        );
        // The core reads every member, in order; a last-wins reader sees the second.
        let parsed = crate::core::body::ErrorEnvelope::parse(&r.body).expect("legal JSON");
        assert_eq!((parsed.codes.len(), parsed.code.as_deref()), (2, Some("RATE_LIMITED")));
    }

    #[test]
    fn sume_codes_are_lower_case_and_queue_full_is_shared() {
        let sume = |c: ErrorCode| c.spelled(Envelope::Sume);
        assert_eq!(sume(ErrorCode::QuotaExceeded), "insufficient_quota");
        assert_eq!(sume(ErrorCode::SignupRequired), "signup_required");
        assert_eq!(sume(ErrorCode::InsufficientCredits), "insufficient_credits");
        assert_eq!(sume(ErrorCode::IdempotencyInProgress), "idempotency_in_progress");
        assert_eq!(sume(ErrorCode::QueueFull), "queue_full");
        assert_eq!(ErrorCode::QueueFull.spelled(Envelope::Blinkimg), "queue_full");
    }

    #[test]
    fn header_only_forms_leave_the_body_without_a_hint() {
        let r = render(
            &limited(Envelope::Blinkimg),
            &style(Envelope::Blinkimg, AdviceForm::HeaderSeconds, DateForm::ImfFixdate),
            1,
        );
        assert_eq!(r.retry_after_header.first().map(String::as_str), Some("2"));
        assert!(!text(&r).contains("resetAt"));
        let r =
            render(&limited(Envelope::Sume), &style(Envelope::Sume, AdviceForm::HeaderDate, DateForm::ImfFixdate), 1);
        assert!(!text(&r).contains("retry_after_seconds"));
    }

    #[test]
    fn header_date_rounds_the_target_up_to_a_whole_second() {
        // 09:12:30.250 + 2 s = 09:12:32.250, said as 09:12:33: 2.75 s from now.
        let cases = [
            (DateForm::ImfFixdate, "Sat, 17 Oct 2026 09:12:33 GMT"),
            (DateForm::Rfc850, "Saturday, 17-Oct-26 09:12:33 GMT"),
            (DateForm::Asctime, "Sat Oct 17 09:12:33 2026"),
        ];
        for (form, expected) in cases {
            let r = render(&limited(Envelope::Blinkimg), &style(Envelope::Blinkimg, AdviceForm::HeaderDate, form), 1);
            assert_eq!(r.retry_after_header.first().map(String::as_str), Some(expected));
            assert_eq!(r.advised, Some(Duration::from_millis(2_750)));
        }
    }

    #[test]
    fn body_only_puts_the_wait_in_the_body() {
        let b = render(
            &limited(Envelope::Blinkimg),
            &style(Envelope::Blinkimg, AdviceForm::BodyOnly, DateForm::ImfFixdate),
            1,
        );
        assert!(b.retry_after_header.is_empty());
        assert!(text(&b).contains(r#""resetAt":"2026-10-17T09:12:32.250Z""#));
        assert_eq!(b.advised, Some(Duration::from_secs(2)));
        let s = render(&limited(Envelope::Sume), &style(Envelope::Sume, AdviceForm::BodyOnly, DateForm::ImfFixdate), 1);
        assert_eq!((s.retry_after_header.first().map(String::as_str), s.advised), (None, Some(Duration::from_secs(2))));
        assert!(text(&s).contains(r#""retry_after_seconds":2"#));
    }

    #[test]
    fn none_and_malformed_advise_nothing() {
        for (form, header) in [(AdviceForm::None, None), (AdviceForm::Malformed, Some("soon"))] {
            for envelope in [Envelope::Blinkimg, Envelope::Sume] {
                let r = render(&limited(envelope), &style(envelope, form, DateForm::ImfFixdate), 1);
                assert_eq!(r.retry_after_header.first().map(String::as_str), header);
                assert_eq!(r.advised, None);
                assert!(!text(&r).contains("resetAt") && !text(&r).contains("retry_after_seconds"));
            }
        }
    }

    #[test]
    fn refusals_without_a_wait_carry_no_advice_in_any_form() {
        let r = Refusal::new(ErrorCode::InsufficientCredits, Envelope::Sume, None);
        let out = render(&r, &style(Envelope::Sume, AdviceForm::Malformed, DateForm::ImfFixdate), 3);
        assert_eq!(
            text(&out),
            r#"{"error":{"type":"insufficient_credits","message":"Insufficient credits; top up the account"}}"#
        );
        assert_eq!((out.retry_after_header.first().map(String::as_str), out.advised), (None, None));
    }

    #[test]
    fn resetat_rounds_up_to_the_millisecond() {
        let s = Style {
            wall: wall().plus(Duration::from_nanos(1)),
            ..style(Envelope::Blinkimg, AdviceForm::BodyOnly, DateForm::ImfFixdate)
        };
        let r = render(&limited(Envelope::Blinkimg), &s, 1);
        assert!(text(&r).contains("09:12:32.251Z"));
        assert_eq!(r.advised, Some(Duration::from_nanos(2_000_999_999)));
    }
}
