//! Whole-request tests of [`Api`]: the order of checks, the limiter as a client
//! sees it, concurrency, headers, the script and the ledger.

use super::testkit::*;
use super::*;

#[test]
fn a_burst_past_the_fixed_window_is_refused_with_whole_seconds() {
    let mut api = Api::new(small());
    let statuses: Vec<_> = (0..5).map(|i| api.handle(&job(None, "compress"), ms(400 + i)).status()).collect();
    assert_eq!(statuses, [201, 201, 201, 429, 429]);
    // The window opened at 400 ms: at 1100 ms, 300 ms are left -> 1 s.
    let r = api.handle(&job(None, "compress"), ms(1_100));
    assert_eq!((header(&r, "retry-after"), code(&r).as_str()), (Some("1"), "RATE_LIMITED"));
    // Refused requests counted, so nothing frees up before 1400 ms.
    assert_eq!(api.handle(&job(None, "compress"), ms(1_399)).status(), 429);
    assert_eq!(api.handle(&job(None, "compress"), ms(1_400)).status(), 201);
    let l = api.ledger();
    assert_eq!((l.charged, l.count(ArrivalOutcome::Refused)), (4, 4));
}

#[test]
fn retry_after_rounds_the_time_left_up() {
    let mut cfg = small();
    cfg.limiter.window_ms = 2_000;
    let mut api = Api::new(cfg);
    for _ in 0..3 {
        api.handle(&job(None, "compress"), ms(0));
    }
    // 1.2 s left -> 2.
    let r = api.handle(&job(None, "compress"), ms(800));
    assert_eq!(header(&r, "retry-after"), Some("2"));
    assert_eq!(api.ledger().arrivals[3].retry_after, Some(secs(2)));
}

#[test]
fn reads_and_writes_have_separate_budgets() {
    let mut api = Api::new(small());
    for _ in 0..3 {
        api.handle(&job(None, "compress"), ms(0));
    }
    assert_eq!(api.handle(&job(None, "compress"), ms(1)).status(), 429);
    // Writes are exhausted; polling still works, five times.
    let polls: Vec<_> = (0..6).map(|_| api.handle(&get("key-a", "/v1/jobs/job_1"), ms(2)).status()).collect();
    assert_eq!(polls, [200, 200, 200, 200, 200, 429]);
}

#[test]
fn two_keys_of_one_account_share_a_budget() {
    let mut cfg = small();
    cfg.accounts.push(AccountConfig {
        name: "other".into(),
        keys: vec!["key-z".into()],
        credits: None,
        monthly_quota: None,
    });
    let mut api = Api::new(cfg);
    let with = |key: &str| request("POST", "/v1/uploads", &[("x-api-key", key)], "{}");
    for key in ["key-a", "key-b", "key-a"] {
        assert_eq!(api.handle(&with(key), ms(0)).status(), 201);
    }
    assert_eq!(api.handle(&with("key-b"), ms(1)).status(), 429);
    assert_eq!(api.handle(&with("key-z"), ms(1)).status(), 201, "another account has its own budget");
    assert_eq!(api.ledger().arrivals[4].account.as_deref(), Some("other"));
}

#[test]
fn token_bucket_and_sliding_window_through_the_api() {
    for (kind, expected) in [(LimiterKind::TokenBucket, "1"), (LimiterKind::SlidingWindow, "1")] {
        let mut cfg = small();
        cfg.limiter.kind = kind;
        let mut api = Api::new(cfg);
        for t in [0, 100, 200] {
            assert_eq!(api.handle(&upload(None), ms(t)).status(), 201, "{kind:?}");
        }
        let r = api.handle(&upload(None), ms(300));
        assert_eq!((r.status().as_u16(), header(&r, "retry-after")), (429, Some(expected)), "{kind:?}");
    }
    // The sliding window frees a slot when the 0 ms request is a second old.
    let mut cfg = small();
    cfg.limiter.kind = LimiterKind::SlidingWindow;
    let mut api = Api::new(cfg);
    for t in [0, 100, 200] {
        api.handle(&upload(None), ms(t));
    }
    assert_eq!(api.handle(&upload(None), ms(999)).status(), 429);
    assert_eq!(api.handle(&upload(None), ms(1_000)).status(), 201);
}

#[test]
fn unknown_routes_and_keys_are_rejected_before_the_limiter() {
    let mut api = Api::new(small());
    let r = api.handle(&request("POST", "/v1/nope", &[("x-api-key", "key-a")], ""), ms(0));
    assert_eq!((r.status().as_u16(), code(&r).as_str()), (404, "NOT_FOUND"));
    let r = api.handle(&request("POST", "/v1/jobs", &[("x-api-key", "stolen")], &job_body("compress")), ms(0));
    assert_eq!((r.status().as_u16(), code(&r).as_str()), (401, "UNAUTHORIZED"));
    let r = api.handle(&request("POST", "/v1/jobs", &[], &job_body("compress")), ms(0));
    assert_eq!(r.status(), 401, "anonymous access is off by default");
    let r = api.handle(&request("POST", "/v1/jobs", &[("x-api-key", "key-a")], "{}"), ms(0));
    assert_eq!((r.status().as_u16(), code(&r).as_str()), (400, "BAD_REQUEST"));
    assert_eq!(api.handle(&get("key-a", "/v1/jobs/job_9"), ms(0)).status(), 404);
    assert_eq!(api.ledger().count(ArrivalOutcome::Rejected), 5);
}

#[test]
fn queue_full_when_too_many_requests_run() {
    let mut cfg = small();
    cfg.concurrency = Some(ConcurrencyConfig { max_in_flight: 2, retry_after_s: 30 });
    cfg.processing_ms = 500;
    let mut api = Api::new(cfg);
    let Begin::Run(first) = api.begin(&upload(None), ms(0)) else { panic!("first runs") };
    assert_eq!(first.ready_at(), ms(500));
    let Begin::Run(second) = api.begin(&upload(None), ms(10)) else { panic!("second runs") };
    let Begin::Answer(r) = api.begin(&get("key-a", "/v1/jobs/x"), ms(20)) else { panic!("third is refused") };
    assert_eq!((r.status().as_u16(), code(&r).as_str()), (429, "queue_full"));
    // A ticket names its request's place in the ledger, as the answer's header does.
    assert_eq!((first.arrival(), second.arrival(), arrival_index(&r)), (0, 1, Some(2)));
    assert_eq!(header(&r, "retry-after"), Some("30"));
    api.complete(first, ms(500));
    assert_eq!(api.in_flight(), 1);
    assert!(matches!(api.begin(&upload(None), ms(501)), Begin::Run(_)));
}

#[test]
fn every_answer_is_json_and_names_its_arrival() {
    let mut api = Api::new(small());
    for (i, req) in [upload(None), get("key-a", "/nope"), job(None, "convert")].iter().enumerate() {
        let r = api.handle(req, ms(0));
        assert_eq!(header(&r, "content-type"), Some("application/json"));
        assert_eq!(arrival_index(&r), Some(i));
        assert_eq!(r.headers().get("ratelimit-limit"), None, "off by default");
    }
}

#[test]
fn date_header_is_the_skewed_server_clock() {
    let mut cfg = small();
    cfg.epoch_unix_s = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT
    cfg.clock_skew_ms = 90_000;
    let mut api = Api::new(cfg.clone());
    let r = api.handle(&upload(None), ms(1_999));
    assert_eq!(header(&r, "date"), Some("Sun, 06 Nov 1994 08:51:08 GMT"));
    cfg.send_date = false;
    let r = Api::new(cfg).handle(&upload(None), ms(0));
    assert_eq!(header(&r, "date"), None);
}

#[test]
fn rate_limit_headers_describe_the_callers_budget() {
    let mut cfg = small();
    cfg.rate_limit_headers = true;
    let mut api = Api::new(cfg);
    let triple = |r: &Response<Bytes>| {
        ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"].map(|h| header(r, h).unwrap().to_owned())
    };
    assert_eq!(triple(&api.handle(&upload(None), ms(400))), ["3", "2", "1"]);
    api.handle(&upload(None), ms(500));
    api.handle(&upload(None), ms(600));
    assert_eq!(triple(&api.handle(&upload(None), ms(700))), ["3", "0", "1"]);
    assert_eq!(triple(&api.handle(&get("key-a", "/v1/jobs/x"), ms(700))), ["5", "4", "1"], "the read budget");
}

#[test]
fn script_answers_first_then_normal_handling_resumes() {
    let mut cfg = small();
    cfg.script = vec![ScriptStep::new(429, Some("RATE_LIMITED"), Some(2))];
    let mut api = Api::new(cfg);
    let r = api.handle(&job(Some("k"), "compress"), ms(0));
    assert_eq!((r.status().as_u16(), header(&r, "retry-after")), (429, Some("2")));
    assert_eq!(json(&r)["error"]["resetAt"], "2026-10-08T09:00:02.000Z");
    assert_eq!(api.handle(&job(Some("k"), "compress"), ms(2_000)).status(), 201);
    let l = api.ledger();
    assert_eq!(l.arrivals[0].outcome, ArrivalOutcome::Scripted);
    assert_eq!((l.charged, l.not_before["w1"]), (1, secs(2)));
}

#[test]
fn a_scripted_success_is_answered_as_is_and_an_error_in_the_envelope() {
    let mut cfg = small();
    cfg.script = vec![ScriptStep::new(200, None, None), ScriptStep::new(400, Some("BAD_REQUEST"), None)];
    let mut api = Api::new(cfg);
    let ok = api.handle(&job(None, "compress"), ms(0));
    assert_eq!((ok.status().as_u16(), text(&ok)), (200, r#"{"scripted":true}"#));
    let bad = api.handle(&job(None, "compress"), ms(1));
    assert_eq!((bad.status().as_u16(), code(&bad).as_str()), (400, "BAD_REQUEST"));
    assert_eq!(json(&bad)["error"]["message"], "Scripted answer");
    let l = api.ledger();
    assert_eq!([l.arrivals[0].outcome, l.arrivals[1].outcome], [ArrivalOutcome::Scripted; 2]);
    assert_eq!((l.arrivals[0].code.as_deref(), l.charged), (None, 0));
}

#[test]
fn a_repeating_script_always_refuses_and_never_charges() {
    let mut cfg = small();
    cfg.envelope = Envelope::Sume;
    cfg.advice = AdviceForm::HeaderSeconds;
    cfg.script_repeat = true;
    cfg.script = vec![ScriptStep::new(429, Some("rate_limited"), Some(30))];
    let mut api = Api::new(cfg);
    for t in 0..4 {
        let r = api.handle(&job(Some("k"), "compress"), secs(30 * t));
        assert_eq!(text(&r), r#"{"error":{"type":"rate_limited","message":"Scripted answer"}}"#);
        assert_eq!(header(&r, "retry-after"), Some("30"));
    }
    assert_eq!(api.ledger().charged, 0);
    assert_eq!(api.ledger().not_before["w1"], secs(120));
}

#[test]
fn a_lost_answer_is_marked_after_the_charge() {
    let mut api = Api::new(small());
    let r = api.handle(&job(Some("k1"), "convert"), ms(0));
    api.answer_lost(arrival_index(&r).unwrap());
    let a = &api.ledger().arrivals[0];
    assert!(a.lost);
    assert_eq!((a.outcome, api.ledger().credits_spent), (ArrivalOutcome::Charged, 2));
}

#[test]
fn an_aborted_run_charges_nothing_and_frees_its_key() {
    let mut cfg = small();
    cfg.accounts[0].credits = Some(1);
    cfg.processing_ms = 100;
    let mut api = Api::new(cfg);
    let Begin::Run(t) = api.begin(&job(Some("k"), "compress"), ms(0)) else { panic!() };
    assert_eq!(api.credits_left("acme"), Some(0), "reserved while running");
    api.abort(t, ms(50));
    assert_eq!((api.credits_left("acme"), api.in_flight()), (Some(1), 0));
    assert_eq!(api.handle(&job(Some("k"), "compress"), ms(60)).status(), 201);
    let l = api.ledger();
    assert_eq!((l.arrivals[0].outcome, l.charges["k"]), (ArrivalOutcome::Aborted, 1));
}

#[test]
fn the_ledger_counts_charges_per_key_and_unkeyed_together() {
    let mut cfg = small();
    cfg.limiter.writes = 100;
    let mut api = Api::new(cfg);
    api.handle(&job(Some("k1"), "compress"), ms(0));
    api.handle(&job(Some("k1"), "compress"), ms(1));
    api.handle(&job(None, "compress"), ms(2));
    api.handle(&job(None, "convert"), ms(3));
    let l = api.ledger();
    assert_eq!((l.charges["k1"], l.charges[NO_KEY], l.charged, l.credits_spent), (1, 2, 3, 4));
    let polled = api.handle(&get("key-a", "/v1/jobs/job_3"), ms(4));
    assert_eq!(json(&polled), serde_json::json!({ "id": "job_3", "status": "completed" }));
}

#[test]
fn a_date_advice_is_measured_from_the_skewed_server_clock() {
    let mut cfg = small();
    cfg.advice = AdviceForm::HeaderDate;
    cfg.date_form = DateForm::Asctime;
    cfg.clock_skew_ms = 3_250;
    let mut api = Api::new(cfg);
    for _ in 0..3 {
        api.handle(&upload(None), ms(0));
    }
    // Server wall clock 09:00:03.250 + 1 s -> said as 09:00:05, 1.75 s away.
    let r = api.handle(&upload(None), ms(0));
    assert_eq!(header(&r, "retry-after"), Some("Thu Oct  8 09:00:05 2026"));
    assert_eq!(header(&r, "date"), Some("Thu, 08 Oct 2026 09:00:03 GMT"));
    assert!(!text(&r).contains("resetAt"));
    assert_eq!(api.ledger().not_before["w1"], ms(1_750));
}

#[test]
fn each_advice_form_through_the_api() {
    let cases = [
        (AdviceForm::HeaderSeconds, Some("1"), false, Some(1_000)),
        (AdviceForm::BodyOnly, None, true, Some(1_000)),
        (AdviceForm::Both, Some("1"), true, Some(1_000)),
        (AdviceForm::None, None, false, None),
        (AdviceForm::Malformed, Some("soon"), false, None),
        (AdviceForm::SeveralLines, Some("0"), false, Some(1_000)),
    ];
    for (form, header_value, body_hint, advised) in cases {
        let mut cfg = small();
        cfg.advice = form;
        let mut api = Api::new(cfg);
        for _ in 0..3 {
            api.handle(&upload(None), ms(0));
        }
        let r = api.handle(&upload(None), ms(0));
        assert_eq!(header(&r, "retry-after"), header_value, "{form:?}");
        assert_eq!(json(&r)["error"].get("resetAt").is_some(), body_hint, "{form:?}");
        assert_eq!(api.ledger().arrivals[3].retry_after, advised.map(ms), "{form:?}");
        assert_eq!(api.ledger().not_before.get("w1").copied(), advised.map(ms), "{form:?}");
        if form == AdviceForm::SeveralLines {
            let lines: Vec<&str> = r.headers().get_all("retry-after").iter().map(|v| v.to_str().unwrap()).collect();
            assert_eq!(lines.len(), 4, "{lines:?}");
            assert_eq!((lines[1], lines[3]), ("soon", "1"), "the last line is the real wait: {lines:?}");
        }
    }
}

#[test]
fn a_server_crash_aborts_every_run_but_keeps_windows_and_stored_answers() {
    let mut cfg = small();
    cfg.processing_ms = 100;
    cfg.concurrency = Some(ConcurrencyConfig { max_in_flight: 2, retry_after_s: 30 });
    let mut api = Api::new(cfg);
    let Begin::Run(done) = api.begin(&job(Some("k0"), "compress"), ms(0)) else { panic!() };
    api.complete(done, ms(100));
    let Begin::Run(_) = api.begin(&job(Some("k1"), "compress"), ms(100)) else { panic!() };
    let Begin::Run(_) = api.begin(&upload(Some("u1")), ms(100)) else { panic!() };
    assert_eq!(api.abort_running(ms(150)), 2);
    assert_eq!(api.in_flight(), 0, "the concurrency slots are free again");
    assert_eq!(api.ledger().count(ArrivalOutcome::Aborted), 2);
    // The window survived (3 writes used), so the next write waits for it.
    assert_eq!(api.handle(&job(Some("k1"), "compress"), ms(200)).status(), 429);
    let r = api.handle(&job(Some("k0"), "compress"), ms(1_000));
    assert_eq!(header(&r, "idempotent-replayed"), Some("true"), "a stored answer survived");
    assert!(matches!(api.begin(&job(Some("k1"), "compress"), ms(1_001)), Begin::Run(_)), "k1 runs again");
}

/// Flask-Limiter's habits (see `habits`), with the server clock half a
/// second into a wall-clock second at virtual time zero.
fn flask(cfg: ApiConfig) -> ApiConfig {
    ApiConfig {
        clock_skew_ms: 500,
        rate_limit_headers: true,
        rate_limit_fields: RateLimitFields::XRateLimit,
        rate_limit_reset: ResetForm::UnixSeconds,
        retry_after_rounding: RetryAfterRounding::Down,
        rate_limited_body: RateLimitedBody::Html,
        advice: AdviceForm::HeaderSeconds,
        ..cfg
    }
}

#[test]
fn flask_limiters_429_is_an_html_page_with_whole_second_headers() {
    let mut api = Api::new(flask(small()));
    // The window opens at wall x.500 and resets at x+1.500.
    for t in [0, 1, 2] {
        assert_eq!(api.handle(&job(None, "compress"), ms(t)).status(), 201);
    }
    // Refused at x.600: the reset's second is x+1, so Retry-After: 1 (0.9 s is true).
    let r = api.handle(&job(None, "compress"), ms(100));
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "content-type"), Some("text/html; charset=utf-8"));
    assert!(text(&r).contains("<title>429 Too Many Requests</title>") && text(&r).contains("<p>3 per 1 second</p>"));
    assert_eq!(header(&r, "retry-after"), Some("1"));
    // int(reset + 1) = x + 2, against a Date of x: two seconds for a 0.9 s wait.
    assert_eq!(header(&r, "x-ratelimit-reset"), Some("1791450002"));
    assert_eq!(header(&r, "date"), Some("Thu, 08 Oct 2026 09:00:00 GMT"));
    assert_eq!((header(&r, "x-ratelimit-limit"), header(&r, "x-ratelimit-remaining")), (Some("3"), Some("0")));
    assert_eq!(header(&r, "ratelimit-limit"), None);
    // Refused at x+1.100, in the reset's own second: Retry-After: 0.
    let r = api.handle(&job(None, "compress"), ms(600));
    assert_eq!(header(&r, "retry-after"), Some("0"));
    let l = api.ledger();
    assert_eq!((l.arrivals[3].code.as_deref(), l.arrivals[4].retry_after), (None, Some(Duration::ZERO)));
    // Other refusals keep the JSON envelope (they are the app's, not Flask-Limiter's).
    let r = api.handle(&get("key-a", "/nope"), ms(700));
    assert_eq!((r.status().as_u16(), header(&r, "content-type")), (404, Some("application/json")));
    // A refused read's page names the read budget (5), not the writes'.
    for _ in 0..5 {
        assert_eq!(api.handle(&get("key-a", "/v1/jobs/x"), ms(800)).status(), 404, "counted, then not found");
    }
    let r = api.handle(&get("key-a", "/v1/jobs/x"), ms(800));
    assert!(r.status() == 429 && text(&r).contains("<p>5 per 1 second</p>"), "{}", text(&r));
}

#[test]
fn the_html_page_carries_no_body_advice() {
    let mut cfg = flask(small());
    cfg.advice = AdviceForm::BodyOnly;
    let mut api = Api::new(cfg);
    for t in 0..4 {
        api.handle(&job(None, "compress"), ms(t));
    }
    let r = &api.ledger().arrivals[3];
    assert_eq!((r.status, r.retry_after), (429, None), "the page has no place for a wait");
}

#[test]
fn structured_fields_beside_or_instead_of_draft_6() {
    let mut cfg = small();
    cfg.rate_limit_headers = true;
    cfg.rate_limit_fields = RateLimitFields::Structured;
    let r = Api::new(cfg.clone()).handle(&upload(None), ms(400));
    assert_eq!(header(&r, "ratelimit-policy"), Some("\"writes\";q=3;w=1"));
    assert_eq!(header(&r, "ratelimit"), Some("\"writes\";r=2;t=1"));
    assert_eq!(header(&r, "ratelimit-limit"), None);
    cfg.rate_limit_fields = RateLimitFields::Draft6AndStructured;
    let r = Api::new(cfg).handle(&get("key-a", "/v1/jobs/x"), ms(0));
    assert_eq!(header(&r, "ratelimit"), Some("\"reads\";r=4;t=1"));
    assert_eq!((header(&r, "ratelimit-limit"), header(&r, "ratelimit-reset")), (Some("5"), Some("1")));
}

#[test]
fn the_moving_window_through_the_api_frees_one_slot_at_a_time() {
    let mut cfg = small();
    cfg.limiter.kind = LimiterKind::MovingWindow;
    let mut api = Api::new(cfg);
    for t in [0, 300, 600] {
        assert_eq!(api.handle(&job(None, "compress"), ms(t)).status(), 201);
    }
    // Refused, and not counted: the 0 ms hit frees its slot after 1 s.
    assert_eq!(header(&api.handle(&job(None, "compress"), ms(700)), "retry-after"), Some("1"));
    assert_eq!(api.handle(&job(None, "compress"), ms(1_000)).status(), 429, "still on the edge");
    assert_eq!(api.handle(&job(None, "compress"), ms(1_001)).status(), 201);
    assert_eq!(api.handle(&job(None, "compress"), ms(1_002)).status(), 429, "the 300 ms hit holds the next slot");
    assert_eq!(api.handle(&job(None, "compress"), ms(1_301)).status(), 201);
}

#[test]
fn a_put_upload_is_idempotent_by_its_method_and_counts_as_a_write() {
    let mut api = Api::new(small());
    let put = || request("PUT", "/v1/uploads/u7", &[("x-api-key", "key-a")], r#"{"name":"u7.png"}"#);
    // Sent again, it stores the same again: no key, no store, no charge.
    let statuses: Vec<_> = (0..4).map(|i| api.handle(&put(), ms(i)).status()).collect();
    assert_eq!(statuses, [200, 200, 200, 429], "three writes per second");
    let l = api.ledger();
    assert_eq!((l.charged, l.count(ArrivalOutcome::Accepted), l.count(ArrivalOutcome::Replayed)), (0, 3, 0));
    assert_eq!(json(&api.handle(&put(), secs(2)))["id"], "u7");
}
