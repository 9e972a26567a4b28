use super::*;
use crate::sim::run::runner::run;
use crate::trace::AdviceView;

fn report(name: &str) -> Report {
    run(&crate::sim::run::scenario::named(name).unwrap(), 7).unwrap()
}

fn only(vs: &[Violation], inv: Invariant) -> bool {
    !vs.is_empty() && vs.iter().all(|x| x.invariant == inv)
}

#[test]
fn named_scenarios_pass_except_the_naive_one() {
    for name in crate::sim::run::scenario::NAMES {
        let r = report(name);
        let vs = check_run(&r);
        if name == "lost-answers-no-key" {
            // Its client replays unkeyed POSTs on purpose (brief 002's row 4).
            assert!(only(&vs, Invariant::NoUnsafeRetry), "{name}: {vs:#?}");
        } else {
            assert!(vs.is_empty(), "{name} seed 7: {vs:#?}\nreplay: retrysim trace --scenario {name} --seed 7");
        }
    }
}

#[test]
fn the_clock_step_is_the_only_slack_for_what_the_clock_observed() {
    let mut r = report("two-429-then-success");
    let s = clock_slack_ms(&r.scenario_config);
    assert_eq!(s, 2, "1 ms tick + 1 ms timer rounding");
    let j = &mut r.records[0];
    let end = j.started_ms + ms_of(r.scenario_config.policy.deadline);
    j.finished_ms = end + s;
    assert!(check_run(&r).is_empty());
    r.records[0].finished_ms = end + s + 1;
    assert!(only(&check_run(&r), Invariant::Deadline));
    r.scenario_config.net.tick = Duration::from_millis(10);
    assert!(check_run(&r).is_empty(), "a 10 ms step may observe the end 11 ms late");
}

#[test]
fn a_planned_wait_gets_no_clock_slack() {
    let mut r = report("two-429-then-success");
    let p = r.scenario_config.policy.clone();
    let j = &mut r.records[0];
    let i = j.trace.events.iter().position(|e| matches!(e.kind, EventKind::Wait { .. })).unwrap();
    let at = j.trace.events[i].at_ms;
    let last = j.started_ms + ms_of(p.deadline) - ms_of(p.min_attempt_time);
    if let EventKind::Wait { ms, .. } = &mut j.trace.events[i].kind {
        *ms = last + 1 - at;
    }
    assert!(check_run(&r).is_empty(), "1 ms of truncation");
    if let EventKind::Wait { ms, .. } = &mut r.records[0].trace.events[i].kind {
        *ms += 1;
    }
    let vs = check_run(&r);
    assert!(vs.iter().any(|x| x.invariant == Invariant::Deadline), "{vs:#?}");
}

fn set_advice(r: &mut Report, source: AdviceSource, server_date: bool, wait_ms: u64) {
    for e in &mut r.records[0].trace.events {
        if let EventKind::Answer { advice, .. } = &mut e.kind {
            *advice = AdviceView { source, server_date, wait_ms: Some(Millis(wait_ms.into())), ..advice.clone() };
        }
    }
}

#[test]
fn a_lagging_server_clock_is_allowed_only_for_dates_read_without_its_date_header() {
    // two-429-then-success advises 2 s twice; pull the second attempt and
    // its arrival 300 ms early.
    let mut r = early_retry(1_700);
    let vs = check_run(&r);
    assert!(only(&vs, Invariant::AdviceRespected), "{vs:#?}");
    r.scenario_config.api.clock_skew_ms = -300;
    assert!(only(&check_run(&r), Invariant::AdviceRespected), "header seconds do not depend on clocks");
    set_advice(&mut r, AdviceSource::HeaderDate, true, 2_000);
    assert!(only(&check_run(&r), Invariant::AdviceRespected), "the server's Date cancels the skew");
    // Read against the client's clock at receipt, the 2 s advice looked
    // like 1.7 s less the answer's trip.
    let answered = ms_of(r.ledger.arrivals[0].answered_at.unwrap());
    let received = r.records[0].trace.events.iter().find(|e| matches!(e.kind, EventKind::Answer { .. })).unwrap().at_ms;
    set_advice(&mut r, AdviceSource::HeaderDate, false, 1_700 - (received - answered));
    let vs = check_run(&r);
    assert!(vs.is_empty(), "without Date, 300 ms of lag moves the advised instant by 300 ms: {vs:#?}");
    r.scenario_config.api.clock_skew_ms = -299;
    assert!(only(&check_run(&r), Invariant::AdviceRespected), "but not by more");
}

/// two-429-then-success with its second request arriving `after_ms` after
/// the first answer, sent by an attempt that started then (or, if the
/// client received the answer later, at once), its wait shortened to match.
fn early_retry(after_ms: u64) -> Report {
    let mut r = report("two-429-then-success");
    let from = r.ledger.arrivals[0].answered_at.unwrap();
    let events = &mut r.records[0].trace.events;
    let answer = events.iter().position(|e| matches!(e.kind, EventKind::Answer { .. })).unwrap();
    let received = events[answer].at_ms;
    let start = (ms_of(from) + after_ms).max(received);
    if let EventKind::Wait { ms, .. } = &mut events[answer + 1].kind {
        *ms = start - received;
    }
    let attempt = events.iter().position(|e| matches!(e.kind, EventKind::Attempt { n: 2, .. })).unwrap();
    events[attempt].at_ms = start;
    r.ledger.arrivals[1].at = Duration::from_millis(start);
    r
}

#[test]
fn a_stale_arrival_is_not_a_retry() {
    // The same early arrival, but the client's second attempt started on
    // time: the early request is not one the client sent after the answer.
    let mut r = report("two-429-then-success");
    let from = r.ledger.arrivals[0].answered_at.unwrap();
    r.ledger.arrivals[1].at = from + Duration::from_millis(1_700);
    assert!(check_run(&r).is_empty());
    // And a retry in the very millisecond of the answer is the client-side check's.
    let r = early_retry(0);
    let answer = r.records[0].trace.events.iter().find(|e| matches!(e.kind, EventKind::Answer { .. })).unwrap();
    assert_eq!(r.ledger.arrivals[1].at, Duration::from_millis(answer.at_ms));
    let vs = check_run(&r);
    assert!(only(&vs, Invariant::AdviceRespected), "{vs:#?}");
    assert!(vs.iter().all(|v| v.message.contains("planned to wait only")), "{vs:#?}");
}

#[test]
fn an_answer_the_client_never_received_advises_nothing() {
    let mut r = report("two-429-then-success");
    let from = r.ledger.arrivals[0].answered_at.unwrap();
    r.ledger.arrivals[1].at = from + Duration::from_millis(1_700);
    // Move the client's receipt of the first answer after the early arrival.
    let j = &mut r.records[0];
    let i = j.trace.events.iter().position(|e| matches!(e.kind, EventKind::Answer { .. })).unwrap();
    j.trace.events[i].at_ms = ms_of(from) + 1_800;
    assert!(check_run(&r).is_empty());
    r.ledger.arrivals[0].lost = true;
    r.records[0].trace.events[i].at_ms = ms_of(from) + 5;
    assert!(check_run(&r).is_empty(), "a lost answer advises nothing");
}

#[test]
fn a_job_that_never_attempted_has_no_key_to_check() {
    let mut r = report("two-429-then-success");
    r.records[0].attempt_keys.clear();
    assert!(check_run(&r).is_empty());
    r.records[0].attempt_keys = vec![Some("0123456789abcdef".into()), Some("fedcba9876543210".into())];
    assert!(only(&check_run(&r), Invariant::OneKeyPerOperation));
}

#[test]
fn determinism_compares_traces_report_and_ledger() {
    let a = report("blinkimg-1s");
    let mut b = a.clone();
    assert_eq!(check_determinism(&a, &b), None);
    b.ledger.arrivals[3].at += Duration::from_millis(1);
    let d = check_determinism(&a, &b).unwrap();
    assert!(d.message.contains("ledger"), "{d:?}");
    let mut b = a.clone();
    b.records[2].trace.events[0].at_ms += 1;
    assert!(check_determinism(&a, &b).unwrap().message.contains("trace line"));
}

#[test]
fn liveness_conditions_name_what_is_missing() {
    let mut s = crate::sim::run::scenario::blinkimg_1s();
    assert!(liveness_expected(&s).unwrap_err().contains("retries"), "49 retries may not outlast 120 jobs");
    s.policy.max_retries = liveness_needs(&s).1;
    assert_eq!(liveness_expected(&s), Ok(()));
    s.fleet.mix.safe = 1;
    assert!(liveness_expected(&s).unwrap_err().contains("keyed"));
    s.fleet.mix.safe = 0;
    s.faults.lost_answers_per_mille = 100;
    assert!(liveness_expected(&s).unwrap_err().contains("steadily"));
    let s = crate::sim::run::scenario::named("deadline-wins").unwrap();
    assert!(liveness_expected(&s).is_err());
}

#[test]
fn terminal_is_the_specification_not_the_clients_table() {
    for (status, code) in [(429, "QUOTA_EXCEEDED"), (429, "insufficient_quota"), (429, "SIGNUP_REQUIRED")] {
        assert!(terminal(status, Some(code)), "{status} {code}");
    }
    assert!(terminal(402, Some("INSUFFICIENT_CREDITS")) && terminal(409, Some("IDEMPOTENCY_KEY_REUSED")));
    assert!(terminal(404, None) && terminal(500, None));
    for (status, code) in [(429, Some("RATE_LIMITED")), (429, None), (409, Some("IDEMPOTENCY_IN_PROGRESS"))] {
        assert!(!terminal(status, code), "{status} {code:?}");
    }
    assert!(!terminal(503, None) && !terminal(200, None));
    // A client whose table calls a quota a full window does not change
    // what the checker calls terminal.
    let defect = crate::sim::run::defects::Defects { quota_as_throttled: true, ..Default::default() };
    let none = http::HeaderMap::new();
    let quota = crate::core::classify::Outcome::Answer {
        status: http::StatusCode::TOO_MANY_REQUESTS,
        code: Some("QUOTA_EXCEEDED"),
        headers: &none,
        advised: true,
    };
    assert_eq!(defect.classifier().classify(quota), crate::core::classify::Class::Throttled);
    assert!(terminal(429, Some("QUOTA_EXCEEDED")));
}

#[test]
fn display_names_the_number() {
    let x = v(Invariant::OneChargePerKey, "k".into());
    assert_eq!(x.to_string(), "invariant 3 (one-charge-per-key): k");
    assert_eq!(Invariant::ALL.map(Invariant::number), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
}
