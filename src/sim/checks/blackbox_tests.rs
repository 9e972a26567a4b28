//! Each check on small hand-built ledgers: one that passes and one
//! deliberately broken that fails (the negative controls). The reports
//! come from a real run of `once-429-then-200` (default network: 1–3 ms
//! latency, 1 ms tick, so a request's trip is at most 9 ms and the clock
//! slack 2 ms) with its ledger and records replaced, and no trace.

use super::*;
use crate::sim::run::runner::run;
use crate::sim::run::scenario::named;
use crate::sim::world::api::Ledger;
use crate::sim::world::net::ScheduledFault;

const S: u64 = 1_000;

fn at(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A keyed job POST that ran and was charged, answered on arrival.
fn post(job: u32, ms: u64) -> Arrival {
    Arrival {
        at: at(ms),
        client: format!("w0 job-{job}"),
        account: Some("acme".into()),
        method: "POST".into(),
        path: "/v1/jobs".into(),
        idempotency_key: Some(format!("key-of-job-{job}")),
        status: 201,
        code: None,
        outcome: ArrivalOutcome::Charged,
        retry_after: None,
        answered_at: Some(at(ms)),
        lost: false,
        body_digest: 0,
        advertised: None,
        dialect_wait: None,
    }
}

/// A refusal of job `job`'s POST with `status`, `code` and advice (ms).
fn refused(job: u32, ms: u64, status: u16, code: &str, wait: Option<u64>) -> Arrival {
    Arrival {
        status,
        code: Some(code.into()),
        outcome: ArrivalOutcome::Refused,
        retry_after: wait.map(at),
        ..post(job, ms)
    }
}

fn rate_limited(job: u32, ms: u64, wait: u64) -> Arrival {
    refused(job, ms, 429, "RATE_LIMITED", Some(wait))
}

fn unkeyed(a: Arrival) -> Arrival {
    Arrival { idempotency_key: None, ..a }
}

/// A report whose ledger is `arrivals` and whose jobs ran over `runs`
/// (job, started, finished; a job's second run is a background run).
fn report(arrivals: Vec<Arrival>, runs: &[(u32, u64, u64)]) -> Report {
    let mut r = run(&named("once-429-then-200").unwrap(), 1).unwrap();
    let mut template = r.records[0].clone();
    template.trace.events.clear();
    template.attempts = 0;
    template.outcome = JobOutcome::Succeeded { status: 201 };
    let mut ledger = Ledger::default();
    for a in &arrivals {
        if a.outcome == ArrivalOutcome::Charged {
            *ledger.charges.entry(a.idempotency_key.clone().unwrap_or(NO_KEY.into())).or_insert(0) += 1;
            ledger.charged += 1;
        }
    }
    ledger.arrivals = arrivals;
    r.ledger = ledger;
    r.records.clear();
    r.deferred_records.clear();
    for &(job, started_ms, finished_ms) in runs {
        let record = JobRecord { job, started_ms, finished_ms, ..template.clone() };
        if r.records.iter().any(|j| j.job == job) {
            r.deferred_records.push(record);
        } else {
            r.records.push(record);
        }
    }
    r
}

fn promises(max_attempts: u32, deadline_s: u64) -> Promises {
    Promises {
        max_attempts: Some(max_attempts),
        deadline: Some(Duration::from_secs(deadline_s)),
        honours_retry_after: true,
        jitter: None,
    }
}

fn checks(vs: &[BlackBoxViolation]) -> Vec<BlackBoxCheck> {
    vs.iter().map(|v| v.check).collect()
}

fn only(vs: &[BlackBoxViolation], check: BlackBoxCheck) -> &BlackBoxViolation {
    assert_eq!(checks(vs), [check], "{vs:#?}");
    &vs[0]
}

fn fault(s: &mut Report, from: u64, fault: Fault) {
    s.scenario_config.faults.schedule.push(ScheduledFault { at: at(from), fault });
}

#[test]
fn one_charge_per_key() {
    let replayed = Arrival { outcome: ArrivalOutcome::Replayed, status: 201, ..post(1, 500) };
    let r = report(vec![post(1, 10), replayed], &[(1, 0, 600)]);
    assert_eq!(check_black_box(&r, &promises(3, 10)), []);

    let r = report(vec![post(1, 10), post(1, 500)], &[(1, 0, 600)]);
    let v = only(&check_black_box(&r, &promises(3, 10)), BlackBoxCheck::OneChargePerKey).clone();
    assert_eq!((v.job, v.arrivals_ms), (Some(1), vec![10, 500]));
    assert!(v.detail.contains("charged 2 times"), "{}", v.detail);

    // A fresh key on every attempt: each key once, the job twice.
    let second = Arrival { idempotency_key: Some("another-key".into()), ..post(2, 500) };
    let r = report(vec![post(2, 10), second], &[(2, 0, 600)]);
    let vs = check_black_box(&r, &promises(3, 10));
    assert_eq!(checks(&vs), [BlackBoxCheck::OneChargePerKey, BlackBoxCheck::OneKeyPerJob], "{vs:#?}");
    assert!(vs[0].detail.contains("under 2 different keys"), "{}", vs[0].detail);
    assert!(vs[1].detail.contains("2 different keys"), "{}", vs[1].detail);

    // A fresh key on a retry after a 429: nothing charged twice, yet the
    // job's requests carried two keys.
    let fresh = Arrival { idempotency_key: Some("another-key".into()), ..post(3, 1_500) };
    let r = report(vec![rate_limited(3, 10, S), fresh], &[(3, 0, 1_600)]);
    let v = only(&check_black_box(&r, &promises(3, 10)), BlackBoxCheck::OneKeyPerJob).clone();
    assert_eq!((v.job, v.arrivals_ms), (Some(3), vec![10, 1_500]));
}

#[test]
fn attempts_per_run() {
    let arrivals = vec![rate_limited(1, 10, S), rate_limited(1, 1_020, S), post(1, 2_030)];
    let r = report(arrivals, &[(1, 0, 2_040)]);
    assert_eq!(check_black_box(&r, &promises(3, 10)), []);
    assert_eq!(check_black_box(&r, &Promises { max_attempts: None, ..promises(0, 10) }), []);
    let v = only(&check_black_box(&r, &promises(2, 10)), BlackBoxCheck::AttemptBound).clone();
    assert_eq!((v.job, v.arrivals_ms.len(), v.promised.as_str()), (Some(1), 3, "at most 2 attempts per run"));

    // A deferred job: three requests in the front end's run, three in a
    // background run 30 s later; each run is within three.
    let mut arrivals = vec![rate_limited(1, 10, S), rate_limited(1, 1_020, S)];
    arrivals.push(refused(1, 2_030, 429, "queue_full", Some(30 * S)));
    arrivals.extend([rate_limited(1, 32_040, S), rate_limited(1, 33_050, S), post(1, 34_060)]);
    let r = report(arrivals.clone(), &[(1, 0, 2_040), (1, 32_035, 34_070)]);
    assert_eq!(check_black_box(&r, &promises(3, 10)), []);
    arrivals.insert(5, rate_limited(1, 34_055, 0));
    let r = report(arrivals, &[(1, 0, 2_040), (1, 32_035, 34_070)]);
    let vs = check_black_box(&r, &promises(3, 10));
    assert!(only(&vs, BlackBoxCheck::AttemptBound).detail.contains("background run 1"), "{vs:#?}");

    // The front end's last request arrives in the very tick (1 ms here)
    // its run ends and the background run starts, answered at once (hunt
    // seeds 16991, 76980, 94448). A request takes at least a tick to
    // arrive, so it is the front end's: each run is within three.
    assert_eq!(r.scenario_config.net.tick, at(1));
    let mut arrivals = vec![rate_limited(1, 10, S), rate_limited(1, 1_020, S)];
    arrivals.push(refused(1, 2_040, 503, "UNAVAILABLE", None));
    arrivals.extend([rate_limited(1, 2_050, S), rate_limited(1, 3_060, S), post(1, 4_070)]);
    let runs = [(1, 0, 2_040), (1, 2_040, 4_080)];
    assert_eq!(check_black_box(&report(arrivals.clone(), &runs), &promises(3, 10)), []);
    // One more request in the background run is still one too many there.
    arrivals.insert(5, rate_limited(1, 4_065, 0));
    let vs = check_black_box(&report(arrivals, &runs), &promises(3, 10));
    let v = only(&vs, BlackBoxCheck::AttemptBound);
    assert!(v.detail.contains("background run 1"), "{vs:#?}");
    assert_eq!(v.arrivals_ms, [2_050, 3_060, 4_065, 4_070]);
}

#[test]
fn early_retry() {
    let r = |next: u64| report(vec![rate_limited(1, 1_000, 2 * S), post(1, next)], &[(1, 990, next + 5)]);
    assert_eq!(check_black_box(&r(3_000), &promises(3, 10)), []);
    let v = only(&check_black_box(&r(2_500), &promises(3, 10)), BlackBoxCheck::EarlyRetry).clone();
    assert_eq!((v.job, v.arrivals_ms), (Some(1), vec![1_000, 2_500]));
    assert!(v.detail.contains("advised 2000 ms (until 3000 ms)"), "{}", v.detail);
    // Not promised: not checked.
    let p = Promises { honours_retry_after: false, ..promises(3, 10) };
    assert_eq!(check_black_box(&r(2_500), &p), []);
    // A lost answer advised nothing.
    let mut lost = r(2_500);
    lost.ledger.arrivals[0].lost = true;
    assert_eq!(check_black_box(&lost, &promises(3, 10)), []);
    // A request that arrived within three minimum trips of the answer
    // left before the answer could have reached the client.
    assert_eq!(check_black_box(&r(1_002), &promises(3, 10)), []);
    assert_eq!(checks(&check_black_box(&r(1_003), &promises(3, 10))), [BlackBoxCheck::EarlyRetry]);
}

#[test]
fn a_shorter_dialect_wait_beside_a_body_hint_may_be_followed() {
    // Hunt seed 2660: a body hint of 1 s (rounded up) and OpenAI's
    // `retry-after-ms: 887`; the client followed the milliseconds and its
    // retry arrived 910 ms after the answer.
    let with_dialect = |next: u64, dialect: Option<u64>| {
        let refusal = Arrival { dialect_wait: dialect.map(at), ..rate_limited(1, 116, S) };
        report(vec![refusal, post(1, next)], &[(1, 0, next + 5)])
    };
    assert_eq!(check_black_box(&with_dialect(1_026, Some(887)), &promises(3, 10)), []);
    // Earlier than both is still early, judged against the shorter.
    let vs = check_black_box(&with_dialect(1_000, Some(887)), &promises(3, 10));
    assert!(only(&vs, BlackBoxCheck::EarlyRetry).detail.contains("advised 887 ms (until 1003 ms)"), "{vs:#?}");
    // Without the dialect the body's 1 s binds, as before.
    assert_eq!(checks(&check_black_box(&with_dialect(1_026, None), &promises(3, 10))), [BlackBoxCheck::EarlyRetry]);
    // A longer dialect wait does not raise the bar past the body's.
    assert_eq!(check_black_box(&with_dialect(1_120, Some(2_000)), &promises(3, 10)), []);
    // A dialect alone binds no promise the black box knows of.
    let alone = Arrival { retry_after: None, dialect_wait: Some(at(887)), ..rate_limited(1, 116, S) };
    assert_eq!(check_black_box(&report(vec![alone, post(1, 500)], &[(1, 0, 505)]), &promises(3, 10)), []);
}

#[test]
fn a_held_or_slowed_request_is_not_an_early_retry() {
    // The refused request arrived as a hold released it, or slowed by a
    // spike: the client may have given up on it long before, and never
    // read its advice.
    for (from, fault_) in
        [(500, Fault::Hold { until: at(1_000) }), (900, Fault::LatencySpike { latency: at(200), until: at(950) })]
    {
        let mut r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 1_500)], &[(1, 0, 1_600)]);
        fault(&mut r, from, fault_);
        assert_eq!(check_black_box(&r, &promises(3, 10)), []);
    }
    // The early request itself arrived slowed by a spike: it may be an
    // earlier attempt's, sent before the refusal.
    let mut r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 1_500)], &[(1, 0, 1_600)]);
    fault(&mut r, 1_200, Fault::LatencySpike { latency: at(200), until: at(1_300) });
    assert_eq!(check_black_box(&r, &promises(3, 10)), []);
    // The refusal's answer left while a partition began: it may never have arrived.
    let mut r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 1_500)], &[(1, 0, 1_600)]);
    fault(&mut r, 1_002, Fault::Partition { until: at(1_100) });
    assert_eq!(check_black_box(&r, &promises(3, 10)), []);
    // The same fault well after both: the retry is early.
    let mut r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 1_500)], &[(1, 0, 1_600)]);
    fault(&mut r, 1_600, Fault::Hold { until: at(1_700) });
    assert_eq!(checks(&check_black_box(&r, &promises(3, 10))), [BlackBoxCheck::EarlyRetry]);
}

#[test]
fn a_lagging_server_clock_is_allowed_only_for_a_date_read_without_date() {
    let mut r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 2_700)], &[(1, 0, 2_800)]);
    r.scenario_config.api.advice = AdviceForm::HeaderDate;
    r.scenario_config.api.clock_skew_ms = -300;
    assert_eq!(checks(&check_black_box(&r, &promises(3, 10))), [BlackBoxCheck::EarlyRetry], "Date was sent");
    r.scenario_config.api.send_date = false;
    assert_eq!(check_black_box(&r, &promises(3, 10)), [], "300 ms behind, read against the client's clock");
    r.ledger.arrivals[1].at = at(2_699);
    let vs = check_black_box(&r, &promises(3, 10));
    assert!(only(&vs, BlackBoxCheck::EarlyRetry).detail.contains("less 300 ms"), "{vs:#?}");
    r.scenario_config.api.advice = AdviceForm::HeaderSeconds;
    r.ledger.arrivals[1].at = at(2_700);
    assert_eq!(checks(&check_black_box(&r, &promises(3, 10))), [BlackBoxCheck::EarlyRetry], "seconds need no clock");
}

#[test]
fn each_run_is_held_to_its_own_promise_on_advice() {
    // The front end gave up on a 30 s advice; a background run that
    // promised nothing about advice came back after 10 s.
    let arrivals = vec![refused(1, 1_000, 429, "queue_full", Some(30 * S)), post(1, 11_000)];
    let r = report(arrivals, &[(1, 0, 1_010), (1, 10_990, 11_010)]);
    let ignores = Promises { honours_retry_after: false, ..promises(3, 60) };
    assert_eq!(check_black_box_with(&r, &promises(3, 60), &ignores), []);
    let vs = check_black_box_with(&r, &ignores, &promises(3, 60));
    assert_eq!(only(&vs, BlackBoxCheck::EarlyRetry).arrivals_ms, [1_000, 11_000]);
}

#[test]
fn a_job_without_a_record_is_still_judged_by_its_requests() {
    let r = report(vec![unkeyed(Arrival { lost: true, ..post(9, 10) }), unkeyed(post(9, 100))], &[]);
    assert_eq!(checks(&check_black_box(&r, &promises(3, 10))), [BlackBoxCheck::UnkeyedReplay]);
}

#[test]
fn the_last_answer_is_the_advice_that_binds() {
    // A 30 s advice, honoured, then an in-progress 409 without advice
    // and a quick retry after it: the 409 is the last answer.
    let conflict = refused(1, 31_000, 409, "IDEMPOTENCY_IN_PROGRESS", None);
    let r = report(vec![rate_limited(1, 1_000, 30 * S), conflict, post(1, 31_100)], &[(1, 0, 31_200)]);
    assert_eq!(check_black_box(&r, &promises(3, 40)), []);
}

#[test]
fn after_terminal() {
    let r =
        |status: u16, code: &str| report(vec![refused(1, 1_000, status, code, None), post(1, 1_500)], &[(1, 0, 1_600)]);
    for (status, code) in [(402, "INSUFFICIENT_CREDITS"), (429, "QUOTA_EXCEEDED"), (429, "insufficient_quota")]
        .into_iter()
        .chain([(429, "SIGNUP_REQUIRED"), (409, "IDEMPOTENCY_KEY_REUSED"), (404, "NOT_FOUND"), (400, "BAD")])
    {
        let vs = check_black_box(&r(status, code), &promises(3, 10));
        let v = only(&vs, BlackBoxCheck::AfterTerminal);
        assert_eq!(v.arrivals_ms, [1_000, 1_500], "{status} {code}");
        assert!(v.detail.contains(code), "{}", v.detail);
    }
    // A front-end run that ended (its attempt timed out) before the
    // terminal answer could reach it, then a background pass: unread.
    let gave_up_first =
        report(vec![refused(1, 1_000, 429, "QUOTA_EXCEEDED", None), post(1, 1_500)], &[(1, 0, 990), (1, 1_400, 1_600)]);
    assert_eq!(check_black_box(&gave_up_first, &promises(3, 10)), []);
    // The same pass after a front end that may have read it: a violation.
    let read_first = report(
        vec![refused(1, 1_000, 429, "QUOTA_EXCEEDED", None), post(1, 1_500)],
        &[(1, 0, 1_100), (1, 1_400, 1_600)],
    );
    only(&check_black_box(&read_first, &promises(3, 10)), BlackBoxCheck::AfterTerminal);
    let waits = [(429, "RATE_LIMITED"), (429, "queue_full"), (429, "SOMETHING_NEW"), (409, "IDEMPOTENCY_IN_PROGRESS")];
    for (status, code) in waits.into_iter().chain([(503, "unavailable"), (500, "internal")]) {
        assert_eq!(check_black_box(&r(status, code), &promises(3, 10)), [], "{status} {code}");
    }
    let mut lost = r(402, "INSUFFICIENT_CREDITS");
    lost.ledger.arrivals[0].lost = true;
    assert_eq!(check_black_box(&lost, &promises(3, 10)), [], "a lost terminal answer was never read");
}

#[test]
fn deadline() {
    // Default network: a request's trip is at most 2 × (3 + 1) + 1 = 9 ms; slack 2 ms.
    let end = 10 * S;
    let ended = |finished: u64| report(vec![post(1, 10)], &[(1, 0, finished)]);
    assert_eq!(check_black_box(&ended(end + 2), &promises(3, 10)), []);
    let vs = check_black_box(&ended(end + 3), &promises(3, 10));
    assert!(only(&vs, BlackBoxCheck::Deadline).detail.contains("3 ms past its deadline at 10000 ms"), "{vs:#?}");
    assert_eq!(check_black_box(&ended(end + 3), &Promises { deadline: None, ..promises(3, 10) }), []);

    let sent = |arrived: u64| report(vec![rate_limited(1, 10, 0), post(1, arrived)], &[(1, 0, end)]);
    assert_eq!(check_black_box(&sent(end + 2 + 9), &promises(3, 10)), [], "left by the deadline plus slack");
    let v = only(&check_black_box(&sent(end + 2 + 10), &promises(3, 10)), BlackBoxCheck::Deadline).clone();
    assert_eq!(v.arrivals_ms, [end + 12]);
    assert!(v.detail.contains("left no earlier than 10003 ms"), "{}", v.detail);
    // Held from before the deadline and released after it: not sent late.
    let mut held = sent(end + 500);
    fault(&mut held, end - 100, Fault::Hold { until: at(end + 500) });
    assert_eq!(check_black_box(&held, &promises(3, 10)), []);
    let mut slow = sent(end + 1_500);
    fault(&mut slow, end - 1_000, Fault::LatencySpike { latency: at(2 * S), until: at(end) });
    assert_eq!(check_black_box(&slow, &promises(3, 10)), []);
}

#[test]
fn unkeyed_replay() {
    let first = || unkeyed(post(1, 10));
    let again = || unkeyed(post(1, 100));
    let r = |a: Arrival| report(vec![a, again()], &[(1, 0, 200)]);
    let vs = check_black_box(&r(Arrival { lost: true, ..first() }), &promises(3, 10));
    let v = only(&vs, BlackBoxCheck::UnkeyedReplay);
    assert_eq!((v.job, v.arrivals_ms.clone()), (Some(1), vec![10, 100]));
    assert!(v.detail.contains("its answer was lost"), "{}", v.detail);
    let aborted = Arrival { status: 0, outcome: ArrivalOutcome::Aborted, answered_at: Some(at(50)), ..first() };
    assert!(
        only(&check_black_box(&r(aborted), &promises(3, 10)), BlackBoxCheck::UnkeyedReplay)
            .detail
            .contains("went down")
    );
    let running = Arrival { answered_at: Some(at(150)), ..first() };
    assert!(
        only(&check_black_box(&r(running), &promises(3, 10)), BlackBoxCheck::UnkeyedReplay)
            .detail
            .contains("not been answered")
    );
    // A definite refusal: nothing ran, so sending again is fine.
    assert_eq!(check_black_box(&r(unkeyed(rate_limited(1, 10, 0))), &promises(3, 10)), []);
    // With a key the server deduplicates: a resend after a loss is fine.
    let keyed = report(vec![Arrival { lost: true, ..post(1, 10) }, post(1, 100)], &[(1, 0, 200)]);
    let vs = check_black_box(&keyed, &promises(3, 10));
    assert_eq!(checks(&vs), [BlackBoxCheck::OneChargePerKey], "only the second charge: {vs:#?}");
}

#[test]
fn no_secrets() {
    let mut r = report(vec![post(1, 10)], &[(1, 0, 20)]);
    r.records[0].outcome = JobOutcome::GaveUp { reason: "server_error".into() };
    assert_eq!(check_black_box(&r, &Promises::nothing()), []);
    r.records[0].outcome = JobOutcome::GaveUp { reason: format!("401 with Bearer {}", PLANTED_SECRETS[0]) };
    let vs = check_black_box(&r, &Promises::nothing());
    assert!(!vs.is_empty() && vs.iter().all(|v| v.check == BlackBoxCheck::NoSecrets), "{vs:#?}");
    assert!(vs.iter().any(|v| v.job == Some(1) && v.detail.contains("give-up reason")), "{vs:#?}");
    assert!(vs.iter().all(|v| !v.to_string().contains(PLANTED_SECRETS[0])), "the report does not repeat it");
}

#[test]
fn a_violation_names_the_job_the_arrivals_and_the_promise() {
    let r = report(vec![rate_limited(1, 1_000, 2 * S), post(1, 1_500)], &[(1, 0, 1_600)]);
    let v = check_black_box(&r, &promises(3, 10)).remove(0);
    assert_eq!(
        v.to_string(),
        "black-box early-retry (invariant 4): job 1: a request arrived at 1500 ms, 500 ms after the 429 answered \
         at 1000 ms that advised 2000 ms (until 3000 ms) [arrivals at 1000, 1500 ms] (promised: honours Retry-After)"
    );
    let general: Violation = v.into();
    assert_eq!(general.invariant, Invariant::AdviceRespected);
    assert!(general.message.starts_with("black-box early-retry"));
}

#[test]
fn labels_name_jobs() {
    assert_eq!(job_of_label("w3 job-17"), Some(17));
    assert_eq!(job_of_label("bg0 job-4"), Some(4));
    assert_eq!(job_of_label("(unknown)"), None);
    assert_eq!(job_of_label("w1 job-x"), None);
}

#[test]
fn promises_of_a_policy() {
    let p = crate::core::policy::Policy::standard();
    let promised = Promises::of_policy(&p);
    assert_eq!(promised.max_attempts, Some(p.max_retries + 1));
    assert_eq!((promised.deadline, promised.honours_retry_after), (Some(p.deadline), p.use_advice));
}
