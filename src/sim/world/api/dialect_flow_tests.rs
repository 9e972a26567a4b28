//! The dialects and the scripted headers through the whole API: what a
//! refusal carries, what the ledger records, and what the keys accept.

use super::testkit::*;
use super::*;

/// The small window with `dialect` and `advice`, its writes spent by three
/// uploads at 400, 500 and 600 ms; the refusal at 700 ms.
fn refused(dialect: Dialect, advice: AdviceForm) -> (Api, Response<Bytes>) {
    let mut cfg = small();
    (cfg.dialect, cfg.advice) = (dialect, advice);
    let mut api = Api::new(cfg);
    for at in [400, 500, 600] {
        assert_eq!(api.handle(&upload(None), ms(at)).status(), 201);
    }
    let r = api.handle(&upload(None), ms(700));
    assert_eq!(r.status(), 429);
    (api, r)
}

#[test]
fn a_dialect_alone_is_the_refusals_only_advice_and_the_ledger_keeps_it_apart() {
    // The window opened at 400 ms: 700 ms left, 1 s in whole seconds.
    let (api, r) = refused(Dialect::Ietf, AdviceForm::None);
    assert_eq!(header(&r, "retry-after"), None);
    assert_eq!(header(&r, "ratelimit"), Some("\"writes\";r=0;t=1"));
    assert_eq!(header(&r, "ratelimit-policy"), Some("\"writes\";q=3;w=1"));
    let a = &api.ledger().arrivals[3];
    assert_eq!((a.retry_after, a.dialect_wait, a.any_advice()), (None, Some(secs(1)), Some(secs(1))));
    // The successes speak no dialect.
    assert!(api.ledger().arrivals[..3].iter().all(|a| a.dialect_wait.is_none()));

    let (api, r) = refused(Dialect::OpenAi, AdviceForm::HeaderSeconds);
    assert_eq!((header(&r, "retry-after"), header(&r, "retry-after-ms")), (Some("1"), Some("700")));
    assert_eq!(header(&r, "x-ratelimit-reset-requests"), Some("700ms"));
    let a = &api.ledger().arrivals[3];
    assert_eq!((a.retry_after, a.dialect_wait, a.any_advice()), (Some(secs(1)), Some(ms(700)), Some(ms(700))));
}

#[test]
fn github_tells_the_reset_in_unix_seconds_beside_date() {
    let (api, r) = refused(Dialect::GitHub, AdviceForm::None);
    // The server's clock starts at 1_791_450_000 s: the refusal ends at ...001.100, said as ...002.
    assert_eq!(header(&r, "x-ratelimit-reset"), Some("1791450002"));
    assert_eq!(header(&r, "date"), Some("Thu, 08 Oct 2026 09:00:00 GMT"));
    assert_eq!(api.ledger().arrivals[3].dialect_wait, Some(ms(1_300)));
}

#[test]
fn no_dialect_leaves_every_answer_as_it_was() {
    let (api, r) = refused(Dialect::None, AdviceForm::Both);
    assert!(Dialect::every_field().all(|name| !r.headers().contains_key(name)), "{:?}", r.headers());
    assert_eq!(api.ledger().arrivals[3].dialect_wait, None);
    let json = serde_json::to_string(api.ledger()).unwrap();
    assert!(!json.contains("dialect_wait"), "{json}");
}

#[test]
fn every_advised_429_speaks_but_no_other_status() {
    let mut cfg = small();
    cfg.dialect = Dialect::ExpressDraft7;
    cfg.script = vec![
        ScriptStep::new(429, Some("queue_full"), Some(30)),
        ScriptStep::new(503, Some("unavailable"), Some(1)),
        ScriptStep::new(429, None, None),
    ];
    let mut api = Api::new(cfg);
    let r = api.handle(&upload(None), ms(0));
    assert_eq!(header(&r, "ratelimit"), Some("limit=3, remaining=0, reset=30"));
    for _ in 0..2 {
        let r = api.handle(&upload(None), ms(0));
        assert_eq!(header(&r, "ratelimit"), None, "{:?}", r.status());
    }
    let waits: Vec<_> = api.ledger().arrivals.iter().map(|a| a.dialect_wait).collect();
    assert_eq!(waits, [Some(secs(30)), None, None]);
}

#[test]
fn scripted_headers_are_sent_after_the_models_own() {
    let cfg: ApiConfig = toml::from_str(
        r#"
        [[script]]
        status = 429
        code = "RATE_LIMITED"
        headers = [["retry-after-ms", "1500"], ["x-note", "a b"], ["x-note", "c"]]
        [[script]]
        status = 200
        headers = [["x-ratelimit-remaining", "9"]]
        "#,
    )
    .unwrap();
    assert_eq!(cfg.validate(), Ok(()));
    let mut api = Api::new(cfg);
    let r = api.handle(&upload(None), ms(0));
    assert_eq!(header(&r, "retry-after-ms"), Some("1500"));
    let notes: Vec<_> = r.headers().get_all("x-note").iter().map(|v| v.to_str().unwrap()).collect();
    assert_eq!(notes, ["a b", "c"]);
    assert_eq!(api.ledger().arrivals[0].any_advice(), None, "scripted headers are not advice the ledger judges");
    let r = api.handle(&upload(None), ms(0));
    assert_eq!((r.status().as_u16(), header(&r, "x-ratelimit-remaining")), (200, Some("9")));
}

#[test]
fn scripted_headers_round_trip_and_stay_out_of_the_toml_when_empty() {
    let mut step = ScriptStep::new(429, Some("RATE_LIMITED"), None);
    let plain = toml::to_string(&step).unwrap();
    assert!(!plain.contains("headers"), "{plain}");
    step.headers = vec![("retry-after-ms".into(), "1500".into())];
    let back: ScriptStep = toml::from_str(&toml::to_string(&step).unwrap()).unwrap();
    assert_eq!(back, step);
}

#[test]
fn a_bad_scripted_header_names_the_step_the_header_and_the_rule() {
    let long = "x".repeat(ScriptStep::MAX_HEADER_VALUE + 1);
    let many = vec![("x-a".to_owned(), "1".to_owned()); ScriptStep::MAX_HEADERS + 1];
    let cases: Vec<(Vec<(String, String)>, &str)> = vec![
        (vec![("bad name".into(), "1".into())], "header name \"bad name\" is not a legal field name"),
        (vec![("".into(), "1".into())], "header name \"\" is not a legal field name"),
        (vec![("x-a".into(), "caf\u{e9}".into())], "header \"x-a\": value \"caf\u{e9}\" is not legal"),
        (vec![("x-a".into(), "a\r\nb".into())], "is not legal: visible ASCII"),
        (vec![("x-a".into(), " padded".into())], "is not legal: visible ASCII, with spaces or tabs only inside"),
        (vec![("x-a".into(), long)], "header \"x-a\": value of 1025 bytes, at most 1024 allowed"),
        (many, "33 headers, at most 32 allowed"),
        (vec![("Content-Length".into(), "3".into())], "header \"Content-Length\" is set by the transport or the model"),
        (vec![(ARRIVAL_HEADER.into(), "3".into())], "x-retrysim-arrival"),
    ];
    for (headers, expected) in cases {
        let script = vec![ScriptStep::new(200, None, None), ScriptStep { headers, ..ScriptStep::new(429, None, None) }];
        let cfg = ApiConfig { script, ..ApiConfig::default() };
        let e = cfg.validate().unwrap_err();
        assert!(e.starts_with("script step 2 (status 429): ") && e.contains(expected), "{e}\nwanted {expected}");
    }
}

#[test]
fn the_dialect_key_reads_every_name_and_a_bad_one_lists_them() {
    for dialect in Dialect::SPOKEN {
        let cfg: ApiConfig = toml::from_str(&format!("dialect = {:?}", dialect.name())).unwrap();
        assert_eq!(cfg.dialect, dialect);
        assert_eq!(toml::from_str::<ApiConfig>(&toml::to_string(&cfg).unwrap()).unwrap(), cfg);
    }
    let e = toml::from_str::<ApiConfig>("dialect = \"draft-8\"").unwrap_err().to_string();
    for name in ["dialect", "draft-8", "`ietf`", "`express_draft8`", "`openai`", "`github`"] {
        assert!(e.contains(name), "{name} not in {e}");
    }
    let text = toml::to_string(&ApiConfig::default()).unwrap();
    assert!(!text.contains("dialect"), "{text}");
}

#[test]
fn a_dialect_that_shares_a_field_with_the_rate_limit_headers_is_refused_by_name() {
    let mut cfg = small();
    cfg.rate_limit_headers = true;
    cfg.dialect = Dialect::ExpressDraft6;
    let e = cfg.validate().unwrap_err();
    assert!(
        e.contains("dialect = \"express_draft6\"")
            && e.contains("rate_limit_fields = \"draft6\"")
            && e.contains("ratelimit-limit"),
        "{e}"
    );
    cfg.rate_limit_fields = RateLimitFields::Structured;
    let e = cfg.validate().unwrap_err();
    assert!(e.contains("ratelimit-policy") && e.contains("\"structured\""), "{e}");
    // Different names: both go.
    cfg.rate_limit_fields = RateLimitFields::XRateLimit;
    assert_eq!(cfg.validate(), Ok(()));
    cfg.dialect = Dialect::GitHub;
    assert!(cfg.validate().unwrap_err().contains("x-ratelimit-limit"));
    cfg.rate_limit_headers = false;
    assert_eq!(cfg.validate(), Ok(()));
}
