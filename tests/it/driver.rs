//! The async driver against a scripted transport, on paused tokio time.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, Response};
use retrysim::client::{IDEMPOTENCY_KEY, Replayable, RetryClient, Success};
use retrysim::core::classify::TransportFailure;
use retrysim::core::policy::{GiveUpReason, Policy};
use retrysim::env::{Clock, TokioClock, Transport, TransportError, seeded_rng};
use retrysim::trace::{EventKind, Trace};
use tokio_util::sync::CancellationToken;

type Answer = Result<Response<Bytes>, TransportError>;

/// Answers from a list, in order; records every request it was sent.
struct Script {
    answers: Mutex<VecDeque<Answer>>,
    seen: Mutex<Vec<Request<Bytes>>>,
    /// When set, an empty script never answers (to exercise timeouts).
    hang_when_empty: bool,
}

impl Script {
    fn new(answers: Vec<Answer>) -> Script {
        Script { answers: Mutex::new(answers.into()), seen: Mutex::new(Vec::new()), hang_when_empty: false }
    }

    fn keys(&self) -> Vec<Option<String>> {
        let seen = self.seen.lock().unwrap();
        seen.iter().map(|r| r.headers().get(IDEMPOTENCY_KEY).map(|v| v.to_str().unwrap().to_owned())).collect()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

impl Transport for Script {
    async fn send(&self, req: Request<Bytes>) -> Answer {
        self.seen.lock().unwrap().push(req);
        let next = self.answers.lock().unwrap().pop_front();
        match next {
            Some(a) => a,
            None if self.hang_when_empty => std::future::pending().await,
            None => panic!("the script ran out of answers"),
        }
    }
}

fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut b = Response::builder().status(status);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    Ok(b.body(Bytes::from(body.to_owned())).unwrap())
}

fn rate_limited(secs: u64) -> Answer {
    answer(429, &[("retry-after", &secs.to_string())], r#"{"error":{"code":"RATE_LIMITED"}}"#)
}

fn ok() -> Answer {
    answer(201, &[], r#"{"id":"job_1"}"#)
}

fn post() -> Request<Bytes> {
    Request::post("http://api.test/v1/jobs")
        .header("authorization", "Bearer sk-SECRET-123")
        .header("x-api-key", "SECRET-KEY-456")
        .body(Bytes::from_static(br#"{"uploadId":"u1"}"#))
        .unwrap()
}

fn epoch() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_791_450_000)
}

struct Run {
    result: Result<Response<Bytes>, retrysim::client::RetryError>,
    trace: Trace,
    elapsed: Duration,
}

async fn run(policy: Policy, script: &Script, req: Request<Bytes>) -> Run {
    let clock = TokioClock::from_epoch(epoch());
    let client = RetryClient::new(clock.clone(), script, policy);
    let mut trace = Trace::new("t");
    // A bound of virtual time: a driver that never ends fails the test.
    let result = tokio::time::timeout(
        Duration::from_secs(24 * 3_600),
        client.execute_traced(req, &mut seeded_rng(7), &CancellationToken::new(), &mut trace),
    )
    .await
    .expect("the driver ended within a day of virtual time")
    .map(Success::into_response);
    Run { result, trace, elapsed: clock.now() }
}

fn waits(t: &Trace) -> Vec<u64> {
    t.events.iter().filter_map(|e| if let EventKind::Wait { ms, .. } = e.kind { Some(ms) } else { None }).collect()
}

#[tokio::test(start_paused = true)]
async fn once_429_then_200_succeeds_after_one_wait() {
    let s = Script::new(vec![rate_limited(1), ok()]);
    let r = run(Policy::standard(), &s, post()).await;
    assert_eq!(r.result.unwrap().status(), 201);
    let w = waits(&r.trace);
    assert_eq!(w.len(), 1);
    // Advice 1 s plus a spread of at most 200 ms; never earlier than advised.
    assert!((1000..=1200).contains(&w[0]), "{w:?}");
    assert_eq!(r.elapsed, Duration::from_millis(w[0]));
}

/// Flask-Limiter's refusal: an HTML page, no error code, a valid
/// `Retry-After`. The advice makes it throttling: wait what it says and retry
/// as often as a `RATE_LIMITED` (standard allows 2 unclear retries, so four
/// refusals would give up if this were "unclear"). From the second refusal
/// on, the advice was waited out and refused again: a second more for each
/// such refusal (the backoff's windows, 0.5 s to 2 s here, stay
/// below that).
#[tokio::test(start_paused = true)]
async fn a_429_with_advice_and_no_code_waits_the_advice() {
    let html = |secs: &str| answer(429, &[("retry-after", secs)], "<!doctype html><h1>Too Many Requests</h1>");
    let s = Script::new(vec![html("1"), html("1"), html("1"), html("1"), ok()]);
    let r = run(Policy::standard(), &s, post()).await;
    assert_eq!(r.result.unwrap().status(), 201);
    let w = waits(&r.trace);
    assert!(w.len() == 4 && (1000..=1200).contains(&w[0]), "{w:?}");
    for (k, w) in w[1..].iter().enumerate() {
        let floor = 2000 + 1000 * k as u64;
        assert!((floor..=floor + 200).contains(w), "escalation {k}: {w} ms");
    }
    // Without advice the same answer is unclear: backoff, then give up
    // (after 2 here; the production presets allow as many as max_retries).
    let s = Script::new(vec![answer(429, &[], "<html>"), answer(429, &[], "<html>"), answer(429, &[], "<html>")]);
    let e = run(Policy::standard().to_builder().unclear_max_retries(2).build(), &s, post()).await.result.unwrap_err();
    assert_eq!(e.reason, GiveUpReason::UnclearExhausted { unclear: 3 });
}

#[tokio::test(start_paused = true)]
async fn two_429s_then_success_under_the_batch_preset() {
    let s = Script::new(vec![rate_limited(2), rate_limited(2), ok()]);
    let r = run(Policy::batch(), &s, post()).await;
    assert_eq!(r.result.unwrap().status(), 201);
    assert_eq!(s.count(), 3);
    assert!(waits(&r.trace).iter().all(|&w| w >= 2000), "{:?}", waits(&r.trace));
}

#[tokio::test(start_paused = true)]
async fn five_retries_means_six_attempts() {
    let s = Script::new((0..6).map(|_| rate_limited(1)).collect());
    // Brief 003's 5 retries (the batch preset allows 8 since issue 55).
    let r = run(Policy::batch().to_builder().max_retries(5).build(), &s, post()).await;
    let e = r.result.unwrap_err();
    assert_eq!(e.reason, GiveUpReason::AttemptsExhausted { attempts: 6 });
    assert_eq!((e.attempts, s.count()), (6, 6));
    assert_eq!(e.last.unwrap().status, 429);
}

#[tokio::test(start_paused = true)]
async fn thirty_second_advice_against_ten_second_budget_gives_up_at_once() {
    let s = Script::new(vec![answer(429, &[("retry-after", "30")], r#"{"error":{"type":"queue_full"}}"#)]);
    let r = run(Policy::interactive(), &s, post()).await;
    let e = r.result.unwrap_err();
    assert!(matches!(e.reason, GiveUpReason::AdviceTooLong { .. }), "{:?}", e.reason);
    assert_eq!((e.attempts, e.waited, r.elapsed), (1, Duration::ZERO, Duration::ZERO));
    // The original answer comes back, and the key to queue the work under.
    assert_eq!(e.last.as_ref().unwrap().code.as_deref(), Some("queue_full"));
    assert_eq!(e.idempotency_key, s.keys()[0]);
    assert!(waits(&r.trace).is_empty());
}

#[tokio::test(start_paused = true)]
async fn one_key_per_operation_reused_on_every_attempt() {
    let s = Script::new(vec![rate_limited(1), rate_limited(1), ok(), ok()]);
    let clock = TokioClock::from_epoch(epoch());
    let client = RetryClient::new(clock, &s, Policy::standard());
    let mut rng = seeded_rng(1);
    let cancel = CancellationToken::new();
    client.execute(post(), &mut rng, &cancel).await.unwrap();
    client.execute(post(), &mut rng, &cancel).await.unwrap();
    let keys = s.keys();
    assert!(keys.iter().all(Option::is_some));
    assert_eq!(keys[0], keys[1]);
    assert_eq!(keys[1], keys[2]);
    assert_ne!(keys[2], keys[3], "a new operation gets a new key");
}

#[tokio::test(start_paused = true)]
async fn a_callers_key_is_kept() {
    let s = Script::new(vec![rate_limited(1), ok()]);
    let mut req = post();
    req.headers_mut().insert(IDEMPOTENCY_KEY, "my-key-1".parse().unwrap());
    run(Policy::standard(), &s, req).await.result.unwrap();
    assert_eq!(s.keys(), [Some("my-key-1".into()), Some("my-key-1".into())]);
}

fn unkeyed() -> Policy {
    Policy::standard().to_builder().idempotency_keys(false).build()
}

fn reset() -> Answer {
    Err(TransportError { failure: TransportFailure::MaybeArrived, message: "connection reset".into() })
}

#[tokio::test(start_paused = true)]
async fn unsafe_post_is_retried_after_a_429_but_not_after_an_ambiguous_error() {
    let s = Script::new(vec![rate_limited(1), ok()]);
    assert!(run(unkeyed(), &s, post()).await.result.is_ok());
    assert_eq!(s.keys(), [None, None]);

    let s = Script::new(vec![reset()]);
    let e = run(unkeyed(), &s, post()).await.result.unwrap_err();
    assert_eq!((e.reason, e.attempts), (GiveUpReason::NotReplayable, 1));

    // The same failure on a keyed POST is replayed under the same key.
    let s = Script::new(vec![reset(), ok()]);
    assert!(run(Policy::standard(), &s, post()).await.result.is_ok());
    assert_eq!(s.keys()[0], s.keys()[1]);
}

/// A caller's vouch (`Replayable`) makes an unkeyed POST replayable: the
/// ambiguous failure that ends it above is retried, still without a key.
#[tokio::test(start_paused = true)]
async fn an_unkeyed_post_vouched_for_is_replayed_after_an_ambiguous_error() {
    let s = Script::new(vec![reset(), ok()]);
    let mut req = post();
    req.extensions_mut().insert(Replayable);
    let done = run(unkeyed(), &s, req).await.result.expect("replayed");
    assert_eq!(done.status(), 201);
    assert_eq!(s.keys(), [None, None]);
}

/// What the client hands back: the policy in force, and a success's answer
/// whole (status, headers and body as the server sent them).
#[tokio::test(start_paused = true)]
async fn the_client_shows_its_policy_and_hands_back_the_answer_whole() {
    let s = Script::new(vec![answer(202, &[("location", "/v1/jobs/job_9")], r#"{"id":"job_9"}"#)]);
    let client = RetryClient::new(TokioClock::from_epoch(epoch()), &s, Policy::batch());
    assert_eq!(client.policy(), &Policy::batch());
    let mut trace = Trace::new("t");
    let done = client.execute_traced(post(), &mut seeded_rng(7), &CancellationToken::new(), &mut trace).await;
    let res = done.expect("a success").into_response();
    assert_eq!(res.status(), 202);
    assert_eq!(res.headers()["location"], "/v1/jobs/job_9");
    assert_eq!(res.body(), r#"{"id":"job_9"}"#);
}

#[tokio::test(start_paused = true)]
async fn cancellation_stops_a_wait() {
    let s = Script::new(vec![rate_limited(5), ok()]);
    let clock = TokioClock::from_epoch(epoch());
    let client = RetryClient::new(clock.clone(), &s, Policy::standard());
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    let mut trace = Trace::new("c");
    let mut rng = seeded_rng(3);
    let (result, ()) = tokio::join!(client.execute_traced(post(), &mut rng, &cancel, &mut trace), async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        c2.cancel();
    });
    let e = result.unwrap_err();
    assert_eq!(e.reason, GiveUpReason::Cancelled);
    assert_eq!((e.attempts, e.waited, clock.now()), (1, Duration::from_secs(1), Duration::from_secs(1)));
    assert_eq!(s.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_is_bounded_by_its_timeout() {
    let mut s = Script::new(vec![]);
    s.hang_when_empty = true;
    let p = Policy::interactive().to_builder().max_retries(1).build();
    let r = run(p, &s, post()).await;
    let e = r.result.unwrap_err();
    assert_eq!(e.attempts, 2);
    assert_eq!(e.last_failure.unwrap().failure, TransportFailure::MaybeArrived);
    // Two 5 s attempt timeouts plus one backoff wait, all inside the 10 s deadline.
    assert!(r.elapsed <= Duration::from_secs(10), "{:?}", r.elapsed);
}

#[tokio::test(start_paused = true)]
async fn terminal_answers_stop_with_the_body() {
    let s = Script::new(vec![answer(
        429,
        &[("retry-after", "2592000")],
        r#"{"error":{"code":"QUOTA_EXCEEDED","message":"monthly cap"}}"#,
    )]);
    let e = run(Policy::batch(), &s, post()).await.result.unwrap_err();
    assert_eq!(e.reason, GiveUpReason::Terminal { status: 429, code: Some("QUOTA_EXCEEDED".into()) });
    assert!(String::from_utf8_lossy(&e.last.unwrap().body).contains("monthly cap"));
    assert!(e.reason.to_string().contains("raise the quota"));
}

#[tokio::test(start_paused = true)]
async fn secrets_never_reach_the_trace() {
    let s = Script::new(vec![rate_limited(1), ok()]);
    let mut req = post();
    req.headers_mut().insert("cookie", "session=SECRET-COOKIE-789".parse().unwrap());
    *req.uri_mut() = "http://api.test/v1/jobs?api_key=SECRET-QUERY".parse().unwrap();
    let r = run(Policy::standard(), &s, req).await;
    let text = r.trace.render() + &serde_json::to_string(&r.trace).unwrap();
    for secret in ["SECRET", "sk-", "uploadId"] {
        assert!(!text.contains(secret), "{secret} leaked into:\n{text}");
    }
    let key = s.keys()[0].clone().unwrap();
    assert!(!text.contains(&key), "the raw key leaked");
}

/// A gate that never lets anything through (a stuck fleet queue).
struct Stuck;

impl retrysim::gate::Gate for Stuck {
    fn admit(&self) -> retrysim::gate::Admission<'_> {
        Box::pin(std::future::pending())
    }
    fn done(&self, _: &retrysim::gate::Feedback<'_>) {}
}

#[tokio::test(start_paused = true)]
async fn waiting_in_a_fleet_queue_never_outlives_the_deadline() {
    // Found by `retrysim hunt` (seeds 373, 681, 749, 999 at the time): a job
    // queued behind an admission gate outlived its deadline.
    let s = Script::new(vec![]);
    let clock = TokioClock::from_epoch(epoch());
    let client = RetryClient::new(clock.clone(), &s, Policy::interactive()).with_gate(std::sync::Arc::new(Stuck));
    let mut trace = Trace::new("q");
    let (mut rng, cancel) = (seeded_rng(1), CancellationToken::new());
    let run = client.execute_traced(post(), &mut rng, &cancel, &mut trace);
    let e = tokio::time::timeout(Duration::from_secs(3600), run)
        .await
        .expect("the driver waited in the queue past its deadline")
        .unwrap_err();
    assert!(matches!(e.reason, GiveUpReason::DeadlineWouldPass { .. }), "{:?}", e.reason);
    // 10 s deadline, 500 ms reserved for an attempt: the queue gets 9.5 s.
    assert_eq!((clock.now(), e.attempts, s.count()), (Duration::from_millis(9_500), 0, 0));
}

/// A success says what it took, the same as the trace, without one: the
/// attempts, the time slept, the key, and whether the answer was a replay of
/// an earlier attempt's run.
#[tokio::test(start_paused = true)]
async fn a_success_reports_attempts_waits_and_replay_without_a_trace() {
    let replayed = answer(201, &[("idempotent-replayed", "true")], r#"{"id":"job_1"}"#);
    let s = Script::new(vec![rate_limited(1), rate_limited(2), replayed]);
    let clock = TokioClock::from_epoch(epoch());
    let client = RetryClient::new(clock.clone(), &s, Policy::standard());
    let done = client.execute(post(), &mut seeded_rng(7), &CancellationToken::new()).await.unwrap();
    assert_eq!((done.response.status().as_u16(), done.attempts, done.replayed), (201, 3, true));
    assert_eq!(done.waited, clock.now(), "the script answers at once, so all the time is waiting");
    assert!(done.waited >= Duration::from_secs(3), "{:?}", done.waited);
    assert_eq!(done.idempotency_key, s.keys()[2]);
    assert!(s.keys().iter().all(|k| k == &s.keys()[0]), "one key for the operation");
    // The same run, traced: the same figures, now in the trace as well.
    let s = Script::new(vec![rate_limited(1), rate_limited(2), ok()]);
    let r = run(Policy::standard(), &s, post()).await;
    assert_eq!(waits(&r.trace).iter().sum::<u64>(), r.elapsed.as_millis() as u64);
    let s = Script::new(vec![ok()]);
    let client = RetryClient::new(TokioClock::from_epoch(epoch()), &s, Policy::standard());
    let done = client.execute(post(), &mut seeded_rng(7), &CancellationToken::new()).await.unwrap();
    assert_eq!((done.attempts, done.waited, done.replayed), (1, Duration::ZERO, false));
}

/// A caller's key with bytes `HeaderValue::to_str`
/// rejects (obs-text, or UTF-8 beyond ASCII) is never swapped for a
/// generated one: the call fails before anything is sent, and says why.
#[tokio::test(start_paused = true)]
async fn a_callers_key_that_is_not_visible_ascii_is_refused_not_replaced() {
    for bytes in [&b"key-\xe9t\xe9"[..], "cl\u{e9}-1".as_bytes()] {
        let s = Script::new(vec![rate_limited(1), ok()]);
        let mut req = post();
        req.headers_mut().insert(IDEMPOTENCY_KEY, http::HeaderValue::from_bytes(bytes).unwrap());
        let r = run(Policy::standard(), &s, req).await;
        assert_eq!(s.count(), 0, "nothing is sent under a key the caller did not give");
        let e = r.result.unwrap_err();
        assert_eq!((e.reason.kind(), e.attempts, &e.idempotency_key), ("invalid_idempotency_key", 0, &None));
        assert!(e.to_string().contains("Idempotency-Key"), "{e}");
        assert!(!r.trace.events.iter().any(|e| matches!(e.kind, EventKind::Attempt { .. })), "{}", r.trace.render());
    }
}

/// A transport that counts calls to `send` itself, not polls of its future:
/// "never called" means `send` was not even invoked.
struct Counting {
    calls: std::sync::atomic::AtomicUsize,
}

impl Transport for Counting {
    fn send(&self, _req: Request<Bytes>) -> impl Future<Output = Answer> + Send {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { ok() }
    }
}

/// Cancelled before the first send, the error reports
/// no attempt and the trace shows none, and the transport is never called.
#[tokio::test(start_paused = true)]
async fn cancelled_before_the_first_send_reports_no_attempt() {
    let t = Counting { calls: Default::default() };
    let client = RetryClient::new(TokioClock::from_epoch(epoch()), &t, Policy::standard());
    let cancel = CancellationToken::new();
    cancel.cancel();
    let mut trace = Trace::new("c");
    let e = client.execute_traced(post(), &mut seeded_rng(3), &cancel, &mut trace).await.unwrap_err();
    assert_eq!((e.reason, e.attempts), (GiveUpReason::Cancelled, 0));
    assert_eq!(t.calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    let text = trace.render();
    assert!(!text.contains("attempt 1"), "{text}");
    assert!(text.contains("gave up after 0 attempts"), "{text}");
}
