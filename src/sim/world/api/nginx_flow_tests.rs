//! Whole-request tests of [`Api`] behind nginx's `limit_req` (the
//! `leaky_bucket` limiter, `rate_limited_status`, `rate_limited_body =
//! "nginx"`): what a client sees, and the delay of a burst.

use super::testkit::*;
use super::*;

/// nginx's `rate=10r/s` with `burst` and `nodelay`, refusing with `status`.
fn nginx(burst: u32, nodelay: bool, status: u16) -> ApiConfig {
    ApiConfig {
        limiter: LimiterConfig {
            kind: LimiterKind::LeakyBucket,
            writes: 10,
            reads: 100,
            window_ms: 1_000,
            burst,
            nodelay,
        },
        advice: AdviceForm::None,
        rate_limited_status: status,
        rate_limited_body: RateLimitedBody::Nginx,
        ..ApiConfig::default()
    }
}

#[test]
fn without_burst_nginx_refuses_with_503_its_page_and_no_advice() {
    let mut api = Api::new(nginx(0, false, 503));
    assert_eq!(api.handle(&job(None, "compress"), ms(0)).status(), 201);
    let r = api.handle(&job(None, "compress"), ms(50));
    assert_eq!(r.status(), 503);
    assert_eq!(header(&r, "retry-after"), None);
    assert_eq!(header(&r, "content-type"), Some("text/html; charset=utf-8"));
    assert!(text(&r).contains("<title>503 Service Temporarily Unavailable</title>"), "{}", text(&r));
    assert_eq!(api.handle(&job(None, "compress"), ms(100)).status(), 201, "the refusal took nothing");
    let a = &api.ledger().arrivals[1];
    assert_eq!((a.status, a.code.as_deref(), a.outcome), (503, None, ArrivalOutcome::Refused));
    // limit_req_status 429: the same, with nginx's page for 429.
    let mut api = Api::new(nginx(0, false, 429));
    api.handle(&job(None, "compress"), ms(0));
    let r = api.handle(&job(None, "compress"), ms(50));
    assert_eq!((r.status().as_u16(), header(&r, "retry-after")), (429, None));
    assert!(text(&r).contains("<h1>429 Too Many Requests</h1>"));
}

#[test]
fn a_burst_is_held_before_it_runs_unless_nodelay() {
    let mut api = Api::new(nginx(2, false, 429));
    let ready: Vec<_> = (0..3)
        .map(|_| match api.begin(&job(None, "compress"), ms(0)) {
            Begin::Run(ticket) => ticket.ready_at(),
            Begin::Answer(r) => panic!("answered {} at once", r.status()),
        })
        .collect();
    // One interval (100 ms) per request already in the bucket.
    assert_eq!(ready, [ms(0), ms(100), ms(200)]);
    assert!(matches!(api.begin(&job(None, "compress"), ms(0)), Begin::Answer(r) if r.status() == 429));
    let mut api = Api::new(nginx(2, true, 429));
    let at_once =
        (0..3).all(|_| matches!(api.begin(&job(None, "compress"), ms(0)), Begin::Run(t) if t.ready_at() == ms(0)));
    assert!(at_once, "nodelay serves the burst at once");
}

#[test]
fn burst_and_status_are_checked() {
    let mut c = ApiConfig::default();
    c.limiter.burst = 5;
    assert!(c.validate().unwrap_err().contains("leaky_bucket"), "{:?}", c.validate());
    let mut c = nginx(5, true, 503);
    assert_eq!(c.validate(), Ok(()));
    c.rate_limited_status = 302;
    assert!(c.validate().unwrap_err().contains("rate_limited_status = 302"));
    // Left at their defaults, the new knobs stay out of the TOML.
    let text = toml::to_string(&ApiConfig::default()).unwrap();
    for key in ["burst", "nodelay", "rate_limited_status"] {
        assert!(!text.contains(key), "{key} in\n{text}");
    }
    let back: ApiConfig = toml::from_str(&toml::to_string(&nginx(10, true, 503)).unwrap()).unwrap();
    assert_eq!(back, nginx(10, true, 503));
}
