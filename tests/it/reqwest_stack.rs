//! A `reqwest_middleware` stack on the simulated network (`SimReqwest`,
//! `ReqwestStack`): reqwest-retry runs on virtual time from one seed, its
//! answers reach the middleware as reqwest responses, a refused connection
//! as reqwest's own connect error, and a scenario whose faults the path
//! cannot show (a lost answer) is not applicable, never a pass. Negative
//! controls: the same give-up behaviour on a path that sees lost answers
//! holds; a stack that retries its middleware errors is still caught.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use retrysim::env::{Clock as _, Transport};
use retrysim::testing::scenario;
use retrysim::testing::{
    BlackBoxCheck, BoxFuture, Fault, FaultClass, Harness, Invariant, Job, JobEnd, Promises, ReqwestStack,
    ScheduledFault, Subject, Verdict, black_box, from_fn, trace_text,
};

use crate::integrations::audit;
use crate::integrations::audit::reqwest_retry_sim::{self as reqwest_retry, Variant};

#[allow(dead_code)]
#[path = "../../examples/reqwest_builtin.rs"]
mod reqwest_builtin;

/// What a spy middleware saw come back from below it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Answer { status: u16, retry_after: Option<String> },
    ConnectError,
    OtherReqwestError,
    MiddlewareError,
}

/// Records every result from the middleware below it, then passes it up.
struct Spy(Arc<Mutex<Vec<Seen>>>);

#[async_trait::async_trait]
impl Middleware for Spy {
    async fn handle(
        &self,
        req: reqwest::Request,
        ext: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let res = next.run(req, ext).await;
        let seen = match &res {
            Ok(r) => Seen::Answer {
                status: r.status().as_u16(),
                retry_after: r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned),
            },
            Err(reqwest_middleware::Error::Reqwest(e)) if e.is_connect() => Seen::ConnectError,
            Err(reqwest_middleware::Error::Reqwest(_)) => Seen::OtherReqwestError,
            Err(reqwest_middleware::Error::Middleware(_)) => Seen::MiddlewareError,
        };
        self.0.lock().unwrap().push(seen);
        res
    }
}

/// A stack of one spy (no retries) over the simulated network.
fn spied(scenario: scenario::Scenario, seen: Arc<Mutex<Vec<Seen>>>) -> Harness {
    Harness::of(scenario).with_client(from_fn("spy", move |_host| {
        let seen = seen.clone();
        ReqwestStack::new(Promises::nothing(), move |terminal, _rng| {
            ClientBuilder::new(reqwest::Client::new()).with(Spy(seen.clone())).with(terminal).build()
        })
    }))
}

#[test]
fn answers_reach_the_middleware_as_reqwest_responses_with_their_headers() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let report = spied(scenario::named("once-429-then-200").unwrap(), seen.clone()).run(1).unwrap();
    let seen = seen.lock().unwrap().clone();
    // No retry in this stack: the scripted 429, with its advice, is the job's end.
    assert_eq!(seen, [Seen::Answer { status: 429, retry_after: Some("1".into()) }], "{}", trace_text(&report));
    assert_eq!(report.requests, 1);
}

#[test]
fn a_refused_connection_reaches_the_middleware_as_reqwests_own_connect_error() {
    let mut s = scenario::named("once-429-then-200").unwrap();
    s.faults
        .schedule
        .push(ScheduledFault { at: Duration::ZERO, fault: Fault::Partition { until: Duration::from_secs(5) } });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let report = spied(s, seen.clone()).run(1).unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, [Seen::ConnectError], "{}", trace_text(&report));
    assert_eq!(report.requests, 0, "nothing reached the API");
    // A partition can also cut an exchange under way (a lost answer) or hang
    // a pooled connection until the request's timeout (a late answer), which
    // the path cannot show: the run is not applicable for those classes only.
    let classes: Vec<FaultClass> = report.not_applicable().iter().map(|b| b.class).collect();
    assert_eq!(classes, [FaultClass::AnswerLost, FaultClass::AnswerLate]);
}

/// Sets every request's own timeout, as `RequestBuilder::timeout` does.
struct Timeout(Duration);

#[async_trait::async_trait]
impl Middleware for Timeout {
    async fn handle(
        &self,
        mut req: reqwest::Request,
        ext: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        *req.timeout_mut() = Some(self.0);
        next.run(req, ext).await
    }
}

#[test]
fn a_held_answer_meets_the_requests_own_timeout_on_virtual_time_and_is_a_blind_spot() {
    let mut s = scenario::named("once-429-then-200").unwrap();
    s.faults.schedule.push(ScheduledFault { at: Duration::ZERO, fault: Fault::Hold { until: Duration::from_secs(5) } });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let spy = seen.clone();
    let h = Harness::of(s).with_client(from_fn("timeout", move |_host| {
        let spy = spy.clone();
        ReqwestStack::new(Promises::nothing(), move |terminal, _rng| {
            let stack = ClientBuilder::new(reqwest::Client::new()).with(Spy(spy.clone()));
            stack.with(Timeout(Duration::from_secs(1))).with(terminal).build()
        })
    }));
    let checked = h.determinism(false).check(1);
    let report = checked.report.as_ref().unwrap();
    assert_eq!(*seen.lock().unwrap(), [Seen::MiddlewareError], "{}", trace_text(report));
    // The job ended at the timeout, on virtual time, long before the hold healed.
    let ended = report.records[0].finished_ms;
    assert!((1_000..2_000).contains(&ended), "ended at {ended} ms");
    assert_eq!(checked.verdict(), Verdict::NotApplicable, "{checked}");
    assert_eq!(checked.not_applicable.iter().map(|b| b.class).collect::<Vec<_>>(), [FaultClass::AnswerLate]);
}

#[test]
fn reqwest_retry_runs_on_virtual_time_replays_and_comes_back_before_retry_after() {
    let h = reqwest_retry::harness("blinkimg-1s", Variant::Seeded);
    // What it promises (4 attempts, nothing about Retry-After) holds, and
    // the seeded policy replays (the determinism check runs the seed twice).
    let report = h.assert_holds(1);
    assert_eq!(report.policy, "reqwest-retry");
    assert!(report.limited > 0 && report.max_attempts_per_job <= reqwest_retry::MAX_RETRIES + 1);
    // Held to the server's advice, as the audit holds every row, it fails.
    let mut audited = report.clone();
    audited.promises = audit::contract(&audited);
    let broken: Vec<BlackBoxCheck> = black_box(&audited).iter().map(|v| v.check).collect();
    assert!(broken.contains(&BlackBoxCheck::EarlyRetry), "{broken:?}");
}

#[test]
fn reqwest_retrys_own_policy_draws_from_the_os_and_fails_the_determinism_check() {
    let checked = reqwest_retry::harness("blinkimg-1s", Variant::Default).check(1);
    assert_eq!(checked.verdict(), Verdict::Broken);
    assert!(checked.violations.iter().any(|v| v.invariant == Invariant::Determinism), "{checked}");
    assert!(checked.to_string().contains("replay: "), "{checked}");
}

#[test]
fn reqwest_retry_on_lost_answers_is_not_applicable_not_a_pass() {
    let h = reqwest_retry::harness("lost-answers-no-key", Variant::Seeded);
    let checked = h.check(1);
    let report = checked.report.as_ref().unwrap();
    // The run met lost answers, and no black-box check broke: without the
    // blind spot this would read "every invariant holds".
    assert!(report.ledger.arrivals.iter().any(|a| a.lost), "the scenario lost answers");
    assert_eq!(black_box(report), [], "{}", trace_text(report));
    assert_eq!(checked.verdict(), Verdict::NotApplicable, "{checked}");
    assert!(!checked.passed());
    assert_eq!(checked.not_applicable.iter().map(|b| b.class).collect::<Vec<_>>(), [FaultClass::AnswerLost]);
    let text = checked.to_string();
    assert!(text.contains("not applicable") && text.contains("answer-lost"), "{text}");
    assert!(text.contains("reqwest_middleware::Error::Middleware"), "the reason is given: {text}");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.assert_holds(1))).unwrap_err();
    let message = panicked.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("not applicable"), "assert_holds does not pass it: {message}");
    // A hunt of such seeds judged nothing: that is no clean hunt either.
    let hunt = h.determinism(false).hunt(1..3);
    assert_eq!((hunt.failures().len(), hunt.not_applicable().len()), (0, 2));
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hunt.assert_clean())).is_err());
}

/// The negative control for the verdict: a client that gives up on every
/// transport error, as reqwest-retry does on a middleware error, but on a
/// path that sees lost answers (retrysim's transport) and so declares no
/// blind spot.
struct GiveUpOnError;

impl Subject for GiveUpOnError {
    fn promises(&self) -> Promises {
        Promises::nothing().max_attempts(4)
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            for attempt in 1..=4 {
                match job.net.transport().send(job.request_copy()).await {
                    Ok(res) if res.status().is_success() => return JobEnd::succeeded(res.status().as_u16()),
                    Ok(res) if res.status() == 429 && attempt < 4 => job.clock.sleep(Duration::from_secs(1)).await,
                    Ok(res) => return JobEnd::gave_up(format!("status {}", res.status().as_u16())),
                    Err(_) => return JobEnd::gave_up("network error"),
                }
            }
            JobEnd::gave_up("out of attempts")
        })
    }
}

#[test]
fn the_same_give_up_on_a_path_that_sees_lost_answers_holds() {
    let checked =
        Harness::named("lost-answers-no-key").unwrap().with_client(from_fn("give-up", |_| GiveUpOnError)).check(1);
    assert_eq!(checked.verdict(), Verdict::Holds, "{checked}");
    assert!(checked.not_applicable.is_empty());
}

/// A team's middleware that retries any error, once, at once: on a lost
/// answer it replays the unkeyed POST. Not applicable is no cover for it.
struct RetryAnyErrorOnce;

#[async_trait::async_trait]
impl Middleware for RetryAnyErrorOnce {
    async fn handle(
        &self,
        req: reqwest::Request,
        ext: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let again = req.try_clone();
        match next.clone().run(req, ext).await {
            Err(_) if again.is_some() => next.run(again.unwrap(), ext).await,
            res => res,
        }
    }
}

#[test]
fn a_stack_that_replays_after_a_middleware_error_is_broken_not_not_applicable() {
    let h = Harness::named("lost-answers-no-key").unwrap().with_client(from_fn("retry-any-error", |_| {
        ReqwestStack::new(Promises::nothing(), |terminal, _rng| {
            ClientBuilder::new(reqwest::Client::new()).with(RetryAnyErrorOnce).with(terminal).build()
        })
    }));
    let checked = h.check(1);
    assert_eq!(checked.verdict(), Verdict::Broken, "{checked}");
    assert!(checked.violations.iter().any(|v| v.invariant == Invariant::NoUnsafeRetry), "{checked}");
    assert!(checked.to_string().contains("not applicable: the scenario injects answer-lost"), "{checked}");
}

/// The guide's table of reqwest's built-in retry on a real socket
/// (`docs/guide/what-people-use.md`), run again: every verdict the table's,
/// every figure within a quarter of it (real time moves them a little).
#[tokio::test]
async fn reqwest_builtin_retry_on_a_real_socket_gives_the_guides_verdicts() {
    let section = crate::readme::section("reqwest's built-in retry, on a real socket");
    let documented: Vec<&str> = section.lines().filter(|l| l.starts_with("| reqwest-builtin |")).collect();
    assert_eq!(documented.len(), reqwest_builtin::SCENARIOS.len(), "one row per scenario:\n{section}");
    assert!(section.contains(reqwest_builtin::HEAD), "the table's head:\n{section}");
    let cells =
        |row: &str| row.split('|').map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect::<Vec<_>>();
    let number = |cell: &str| cell.split(' ').next().unwrap().parse::<u64>().unwrap();
    for (name, doc_row) in reqwest_builtin::SCENARIOS.iter().zip(&documented) {
        let s = scenario::named(name).unwrap();
        let (done, r) = reqwest_builtin::run(&s, 1).await.unwrap();
        let measured = reqwest_builtin::row(name, s.fleet.jobs, done, &r);
        let (doc, now) = (cells(doc_row), cells(&measured));
        assert_eq!((&doc[1], &doc[7]), (&now[1], &now[7]), "scenario and verdict; measured now:\n{measured}");
        for i in 2..7 {
            let (d, n) = (number(&doc[i]), number(&now[i]));
            assert!(
                n.abs_diff(d) * 4 <= d.max(4),
                "column {i} of {name}: the guide says {d}, measured {n}:\n{measured}"
            );
        }
        let broken = reqwest_builtin::broken(&r);
        assert!(broken.contains(&BlackBoxCheck::EarlyRetry), "{}", r.render_text());
        if *name == "lost-answers-no-key" {
            assert!(broken.contains(&BlackBoxCheck::UnkeyedReplay), "{}", r.render_text());
        }
    }
}
