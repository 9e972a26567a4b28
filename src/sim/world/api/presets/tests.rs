//! The presets through the whole API: routes, keys, bodies, envelopes, and
//! the ledger that keeps the model's own codes.

use super::super::testkit::*;
use super::super::*;

const CHAT: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"job 1"}]}"#;

fn openai(advice: AdviceForm) -> Api {
    let mut cfg = small();
    (cfg.preset, cfg.dialect, cfg.advice) = (Preset::OpenAi, Dialect::OpenAi, advice);
    Api::new(cfg)
}

fn chat(key: &str) -> http::Request<Bytes> {
    request("POST", "/v1/chat/completions", &[("authorization", &format!("Bearer {key}"))], CHAT)
}

#[test]
fn openai_answers_a_chat_completion_and_charges_it_as_a_job() {
    let mut api = openai(AdviceForm::HeaderSeconds);
    let r = api.handle(&chat("key-a"), ms(10));
    assert_eq!(r.status(), 200, "{}", text(&r));
    let body = json(&r);
    assert_eq!((body["id"].as_str(), body["object"].as_str()), (Some("chatcmpl-1"), Some("chat.completion")));
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["created"], 1_791_450_000);
    assert_eq!(api.ledger().arrivals[0].outcome, ArrivalOutcome::Charged);
    // It is stored: a read of it is the read budget's, and an unknown one a 404.
    let read = |path: &str| request("GET", path, &[("authorization", "Bearer key-a")], "");
    assert_eq!(api.handle(&read("/v1/chat/completions/chatcmpl-1"), ms(20)).status(), 200);
    let missing = api.handle(&read("/v1/chat/completions/chatcmpl-9"), ms(30));
    assert_eq!(missing.status(), 404);
    // The model's own route and key are not OpenAI's.
    assert_eq!(api.handle(&job(None, "compress"), ms(40)).status(), 404);
    let unknown = api.handle(&request("POST", "/v1/jobs", &[("authorization", "Bearer key-a")], "{}"), ms(50));
    assert_eq!(json(&unknown)["error"]["message"], "Invalid URL (POST /v1/jobs)");
}

#[test]
fn openai_refuses_in_its_envelope_with_both_advices_and_the_ledger_keeps_the_models_code() {
    let mut api = openai(AdviceForm::HeaderSeconds);
    for at in [400, 500, 600] {
        assert_eq!(api.handle(&chat("key-a"), ms(at)).status(), 200);
    }
    let r = api.handle(&chat("key-a"), ms(700));
    assert_eq!(r.status(), 429);
    let error = &json(&r)["error"];
    assert_eq!((error["type"].as_str(), error["code"].as_str()), (Some("requests"), Some("rate_limit_exceeded")));
    assert!(error["param"].is_null() && error["message"].as_str().unwrap().contains("try again in 1s"), "{error}");
    assert_eq!((header(&r, "retry-after"), header(&r, "retry-after-ms")), (Some("1"), Some("700")));
    let a = &api.ledger().arrivals[3];
    assert_eq!((a.code.as_deref(), a.retry_after), (Some("RATE_LIMITED"), Some(secs(1))));
    // The core reads the body: a rate limit, not a quota.
    let parsed = crate::core::body::ErrorEnvelope::parse(r.body()).unwrap();
    assert_eq!(parsed.code.as_deref(), Some("rate_limit_exceeded"));
}

#[test]
fn openai_says_insufficient_quota_for_a_spent_quota_and_invalid_api_key_for_a_bad_key() {
    let mut cfg = small();
    cfg.preset = Preset::OpenAi;
    cfg.accounts[0].monthly_quota = Some(1);
    let mut api = Api::new(cfg);
    assert_eq!(api.handle(&chat("key-a"), ms(10)).status(), 200);
    let r = api.handle(&chat("key-a"), ms(20));
    assert_eq!(r.status(), 429);
    let error = &json(&r)["error"];
    assert_eq!(
        (error["type"].as_str(), error["code"].as_str()),
        (Some("insufficient_quota"), Some("insufficient_quota"))
    );
    assert_eq!(api.ledger().arrivals[1].code.as_deref(), Some("QUOTA_EXCEEDED"));
    let r = api.handle(&chat("key-z"), ms(30));
    assert_eq!((r.status().as_u16(), json(&r)["error"]["code"].as_str()), (401, Some("invalid_api_key")));
    // The model's own header is not a credential here; a malformed body is a 400.
    let keyed = request("POST", "/v1/chat/completions", &[("x-api-key", "key-a")], CHAT);
    assert_eq!(api.handle(&keyed, ms(40)).status(), 401);
    let empty = r#"{"model":"gpt-4o-mini","messages":[]}"#;
    let bad = request("POST", "/v1/chat/completions", &[("authorization", "Bearer key-a")], empty);
    assert_eq!(api.handle(&bad, ms(50)).status(), 400);
}

#[test]
fn github_creates_and_reads_issues_and_refuses_in_its_own_envelope() {
    let mut cfg = small();
    (cfg.preset, cfg.dialect, cfg.advice) = (Preset::GitHub, Dialect::GitHub, AdviceForm::None);
    let mut api = Api::new(cfg);
    let issue = |auth: &str| request("POST", "/repos/acme/app/issues", &[("authorization", auth)], r#"{"title":"t"}"#);
    for (at, auth) in [(400, "Bearer key-a"), (500, "token key-a"), (600, "Bearer key-b")] {
        let r = api.handle(&issue(auth), ms(at));
        assert_eq!(r.status(), 201, "{}", text(&r));
    }
    assert_eq!(json(&api.handle(&get("x", "/"), ms(601)))["message"], "Not Found");
    let read = request("GET", "/repos/acme/app/issues/2", &[("authorization", "Bearer key-a")], "");
    let r = api.handle(&read, ms(650));
    assert_eq!((r.status().as_u16(), json(&r)["number"].as_u64()), (200, Some(2)));
    let r = api.handle(&issue("Bearer key-a"), ms(700));
    assert_eq!(r.status(), 429);
    let body = json(&r);
    assert_eq!(body["message"], "API rate limit exceeded for user ID 1.");
    assert!(body["documentation_url"].as_str().unwrap().starts_with("https://docs.github.com/"));
    assert_eq!((header(&r, "x-ratelimit-remaining"), header(&r, "retry-after")), (Some("0"), None));
    assert_eq!(api.handle(&issue("Basic a2V5LWE="), ms(800)).status(), 401);
    let untitled = request("POST", "/repos/acme/app/issues", &[("authorization", "Bearer key-a")], "{}");
    assert_eq!(json(&api.handle(&untitled, ms(2_000)))["message"], "Problems parsing JSON");
}

#[test]
fn routes_that_are_not_the_presets_are_404() {
    let m = |s: &str| http::Method::from_bytes(s.as_bytes()).unwrap();
    for (preset, method, path) in [
        (Preset::OpenAi, "GET", "/v1/chat/completions"),
        (Preset::OpenAi, "GET", "/v1/chat/completions/chatcmpl-"),
        (Preset::OpenAi, "GET", "/v1/chat/completions/chatcmpl-1x"),
        (Preset::OpenAi, "PUT", "/v1/chat/completions"),
        (Preset::GitHub, "POST", "/repos/acme/issues"),
        (Preset::GitHub, "POST", "/repos//app/issues"),
        (Preset::GitHub, "GET", "/repos/acme/app/issues/"),
        (Preset::GitHub, "GET", "/repos/acme/app/issues/1/comments"),
    ] {
        assert_eq!(preset.route(&m(method), path), None, "{preset:?} {method} {path}");
    }
    assert!(has_route(Preset::GitHub, "GET", "/repos/a/b/issues/7"));
    assert!(!has_route(Preset::None, "GET", "/repos/a/b/issues/7"));
}

#[test]
fn a_preset_is_read_from_toml_and_refuses_body_only_advice() {
    let c: ApiConfig = toml::from_str("preset = \"openai\"").unwrap();
    assert_eq!(c.preset, Preset::OpenAi);
    assert!(!toml::to_string(&ApiConfig::default()).unwrap().contains("preset"));
    let c = ApiConfig { preset: Preset::GitHub, advice: AdviceForm::BodyOnly, ..ApiConfig::default() };
    let e = c.validate().unwrap_err();
    assert!(e.starts_with("preset = \"github\" writes its own error bodies"), "{e}");
    assert!(toml::from_str::<ApiConfig>("preset = \"stripe\"").is_err());
}
