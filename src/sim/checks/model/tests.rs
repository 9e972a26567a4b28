use super::*;
use crate::sim::run::runner::run;
use crate::sim::run::scenario::named;
use crate::sim::world::net::{Fault, ScheduledFault, ServerClose};

#[test]
fn the_reference_window_opens_at_the_first_hit_and_counts_refusals() {
    let (mut w, s) = (Window::default(), Duration::from_secs(1));
    let ms = Duration::from_millis;
    let verdicts: Vec<bool> = [400, 500, 600, 1_399, 1_400].iter().map(|&t| w.hit(ms(t), 2, s)).collect();
    assert_eq!(verdicts, [true, true, false, false, true]);
}

#[test]
fn the_model_agrees_with_the_reference_and_a_slipped_window_does_not() {
    let mut s = named("blinkimg-1s").expect("a named scenario");
    assert_eq!(check_model(&run(&s, 7).expect("finishes")), []);
    s.api.window_admits_one_more = true;
    let found = check_model(&run(&s, 7).expect("finishes"));
    assert!(found.len() == 1 && found[0].message.contains("would refuse it"), "{found:?}");
}

#[test]
fn the_reference_bucket_and_logs_admit_as_their_designs_say() {
    let (s, ms) = (Duration::from_secs(1), Duration::from_millis);
    // Two tokens per second, full at the start, one back every 500 ms; a refusal takes none.
    let mut bucket = Reference::new(LimiterKind::TokenBucket);
    let waits: Vec<_> = [0, 0, 100, 200, 500, 500].iter().map(|&t| bucket.hit(ms(t), 2, s)).collect();
    assert_eq!(waits, [None, None, Some(ms(400)), Some(ms(300)), None, Some(ms(500))]);
    // Two per trailing second: the 100 ms hit leaves at 1100 ms, the 600 ms one at 1600 ms.
    let mut sliding = Reference::new(LimiterKind::SlidingWindow);
    let waits: Vec<_> = [100, 600, 900, 1_100, 1_200].iter().map(|&t| sliding.hit(ms(t), 2, s)).collect();
    assert_eq!(waits, [None, None, Some(ms(200)), None, Some(ms(400))]);
    // Exactly one window after a hit, the moving window still counts it; the sliding one does not.
    let (mut moving, mut sliding) =
        (Reference::new(LimiterKind::MovingWindow), Reference::new(LimiterKind::SlidingWindow));
    assert_eq!([moving.hit(ms(0), 1, s), moving.hit(ms(1_000), 1, s)], [None, Some(Duration::ZERO)]);
    assert_eq!([sliding.hit(ms(0), 1, s), sliding.hit(ms(1_000), 1, s)], [None, None]);
    assert_eq!(Reference::new(LimiterKind::TokenBucket).hit(ms(0), 0, s), Some(s), "a zero limit admits nothing");
}

#[test]
fn every_limiter_kind_is_replayed_and_a_ledger_judged_with_another_limit_is_not_clean() {
    for kind in [LimiterKind::TokenBucket, LimiterKind::SlidingWindow, LimiterKind::MovingWindow] {
        let mut s = named("blinkimg-1s").expect("a named scenario");
        s.api.limiter.kind = kind;
        let r = run(&s, 7).expect("finishes");
        assert!(r.ledger.arrivals.iter().any(refused_by_limiter), "{kind:?}: no refusal to judge");
        assert_eq!(check_model(&r), [], "{kind:?}");
        assert_eq!(check_model_advice(&r), [], "{kind:?}");
        for (change, should) in [(1, "would allow it"), (-1, "would refuse it")] {
            let mut judged = r.clone();
            let writes = &mut judged.scenario_config.api.limiter.writes;
            *writes = writes.saturating_add_signed(change);
            let found = check_model(&judged);
            assert!(found.len() == 1 && found[0].message.contains(should), "{kind:?} {change:+}: {found:?}");
        }
    }
}

#[test]
fn every_advertised_standing_is_the_references_and_a_slip_is_seen() {
    for kind in [LimiterKind::FixedWindow, LimiterKind::TokenBucket, LimiterKind::SlidingWindow] {
        for anonymous in [false, true] {
            let mut s = named("blinkimg-1s").expect("a named scenario");
            (s.api.limiter.kind, s.api.rate_limit_headers, s.api.processing_ms) = (kind, true, 40);
            if anonymous {
                (s.api.anonymous_cap, s.fleet.anonymous) = (Some(4), true);
            }
            let r = run(&s, 7).expect("finishes");
            assert_eq!(check_advertised(&r), [], "{kind:?}, anonymous {anonymous}");
            // Some answers are judged (told on arrival, alone in their millisecond), and each is seen when off by one.
            let told: Vec<usize> = (0..r.ledger.arrivals.len())
                .filter(|&i| {
                    let mut doctored = r.clone();
                    let a = &mut doctored.ledger.arrivals[i];
                    let Some(told) = a.advertised.as_mut() else { return false };
                    told.remaining += 1;
                    check_advertised(&doctored).first().is_some_and(|v| v.arrival == i)
                })
                .collect();
            assert!(told.len() >= 3, "{kind:?}, anonymous {anonymous}: {told:?}");
            // With a key, runs answered after they arrived are judged too.
            let later = told.iter().any(|&i| r.ledger.arrivals[i].answered_at > Some(r.ledger.arrivals[i].at));
            assert_eq!(later, !anonymous, "{kind:?}, anonymous {anonymous}: a run answered later judged");
            let by_cap = told.iter().all(|&i| r.ledger.arrivals[i].account.is_none());
            assert_eq!(by_cap, anonymous, "judged by the hourly cap exactly when anonymous");
            let mut judged = r.clone();
            judged.ledger.arrivals[told[0]].advertised.as_mut().expect("told").reset += Duration::from_millis(1);
            let found = check_advertised(&judged);
            assert!(found[0].message.contains("advertised limit"), "{found:?}");
        }
    }
}

/// nginx's leaky bucket (tests/conformance/limiters/sim/nginx-burst.toml's
/// limiter on blinkimg-1s's fleet): the model agrees with the GCRA
/// reference on every verdict and every delay; a bucket without its
/// burst, or a run not held as long as the reference holds it, is seen.
#[test]
fn nginxs_leaky_bucket_agrees_with_the_reference_and_a_slip_is_seen() {
    let mut s = named("blinkimg-1s").expect("a named scenario");
    s.api.limiter = LimiterConfig {
        kind: LimiterKind::LeakyBucket,
        writes: 10,
        reads: 100,
        window_ms: 1_000,
        burst: 5,
        nodelay: false,
    };
    (s.api.rate_limited_status, s.api.advice) = (503, AdviceForm::None);
    let r = run(&s, 7).expect("finishes");
    let refused = r.ledger.arrivals.iter().filter(|a| a.status == 503).count();
    let held = reference_limiter(&r).iter().filter(|j| !j.held.is_zero()).count();
    assert!(refused > 0 && held > 0, "{refused} refusals and {held} held runs to judge");
    assert_eq!((check_model(&r), check_run_times(&r), check_model_advice(&r)), (vec![], vec![], vec![]));
    // Judged as if it had no burst: admissions the reference would refuse.
    let mut judged = r.clone();
    judged.scenario_config.api.limiter.burst = 0;
    let found = check_model(&judged);
    assert!(found.len() == 1 && found[0].message.contains("nginx's leaky bucket"), "{found:?}");
    // Judged as if nodelay: the held runs took longer than the scenario says.
    judged = r.clone();
    judged.scenario_config.api.limiter.nodelay = true;
    let found = check_run_times(&judged);
    assert!(found.len() == 1 && found[0].message.contains("where the scenario's processing_ms"), "{found:?}");
}

#[test]
fn the_reference_leaky_bucket_refuses_and_holds_as_nginx_does() {
    let (s, ms) = (Duration::from_secs(1), Duration::from_millis);
    let mut bucket =
        Reference::of(&LimiterConfig { kind: LimiterKind::LeakyBucket, burst: 2, ..LimiterConfig::default() });
    // 10 per second, burst 2: three at once, held 0, 100 and 200 ms; the fourth waits 100 ms.
    let mut held = Vec::new();
    for _ in 0..3 {
        assert_eq!(bucket.hit(ms(0), 10, s), None);
        held.push(bucket.held());
    }
    assert_eq!(held, [Duration::ZERO, ms(100), ms(200)]);
    assert_eq!(bucket.hit(ms(0), 10, s), Some(ms(100)));
    assert_eq!(bucket.hit(ms(100), 10, s), None);
    assert_eq!(bucket.held(), ms(200));
}
#[test]
fn every_run_takes_the_scenarios_processing_time_and_a_slip_is_seen() {
    let mut s = named("blinkimg-1s").expect("a named scenario");
    s.api.processing_ms = 120;
    let r = run(&s, 7).expect("finishes");
    let ran = r.ledger.arrivals.iter().filter(|a| a.outcome == ArrivalOutcome::Charged).count();
    assert!(ran > 0, "some jobs ran");
    assert_eq!(check_run_times(&r), []);
    let mut judged = r.clone();
    judged.scenario_config.api.processing_ms = 121;
    let found = check_run_times(&judged);
    assert!(
        found.len() == 1 && found[0].message.contains("ran 120 ms, where the scenario's processing_ms is 121"),
        "{found:?}"
    );
    // Immediate answers are not runs: a scenario whose every request is refused has nothing to judge.
    let refusal = r.ledger.arrivals.iter().position(|a| a.outcome == ArrivalOutcome::Refused).expect("a refusal");
    let mut doctored = r.clone();
    doctored.ledger.arrivals[refusal].answered_at =
        Some(doctored.ledger.arrivals[refusal].at + Duration::from_millis(3));
    assert_eq!(check_run_times(&doctored), []);
    doctored.ledger.arrivals[refusal].outcome = ArrivalOutcome::Accepted;
    assert_eq!(check_run_times(&doctored)[0].arrival, refusal);
}

#[test]
fn every_refusal_of_an_advising_form_records_its_advice() {
    let s = named("blinkimg-1s").expect("a named scenario");
    let r = run(&s, 7).expect("finishes");
    assert_eq!(check_model_advice(&r), []);
    let refused = r.ledger.arrivals.iter().position(refused_by_limiter).expect("a refusal by the window");
    let mut unadvised = r.clone();
    unadvised.ledger.arrivals[refused].retry_after = None;
    let found = check_model_advice(&unadvised);
    assert!(found[0].arrival == refused && found[0].message.contains("no advice recorded"), "{found:?}");
    // A form that advises nothing records nothing, and passes.
    unadvised.scenario_config.api.advice = AdviceForm::None;
    assert_eq!(check_model_advice(&unadvised), []);
}

#[test]
fn the_script_is_served_as_declared_and_a_slip_is_seen() {
    // Always 429 RATE_LIMITED, repeating: every arrival is scripted.
    let s = named("five-retries-six-attempts").expect("a named scenario");
    let r = run(&s, 7).expect("finishes");
    assert_eq!(r.ledger.arrivals.len(), 6);
    assert_eq!(check_script(&r), []);
    // A script that stopped after the first step.
    let mut stopped = r.clone();
    stopped.ledger.arrivals[1].outcome = ArrivalOutcome::Charged;
    assert_eq!(check_script(&stopped)[0].arrival, 1);
    // A step answered with another code.
    let mut other = r.clone();
    other.ledger.arrivals[3].code = Some("QUOTA_EXCEEDED".into());
    let found = check_script(&other);
    assert!(found[0].message.contains("where the script says 429 RATE_LIMITED"), "{found:?}");
    // A script that does not repeat serves its steps once.
    let mut once = r;
    once.scenario_config.api.script_repeat = false;
    assert_eq!(check_script(&once)[0].arrival, 1);
}

#[test]
fn credits_are_taken_at_the_published_prices() {
    let mut s = named("blinkimg-1s").expect("a named scenario");
    s.fleet.op = "convert".into();
    let r = run(&s, 7).expect("finishes");
    assert!(r.ledger.charged > 0);
    assert_eq!(check_credits(&r), []);
    // A conversion charged as a compression.
    let mut cheap = r;
    cheap.ledger.credits_spent = cheap.ledger.charged;
    let v = check_credits(&cheap);
    assert!(v[0].message.contains("where each convert costs 2"), "{v:?}");
}

#[test]
fn the_answers_lost_are_the_ones_the_seed_and_the_schedule_lose() {
    // A steady loss rate and one scheduled loss, on a fleet with keys.
    let mut s = named("blinkimg-1s").expect("a named scenario");
    s.faults.lost_answers_per_mille = 100;
    s.faults.schedule.push(ScheduledFault { at: Duration::from_millis(1_500), fault: Fault::LoseAnswer });
    let r = run(&s, 7).expect("finishes");
    let decisions = &r.ledger.loss_decisions;
    let lost = decisions.iter().filter(|d| d.lost).count();
    assert!(lost > 1 && lost < decisions.len(), "the situation: some lost, most kept ({lost} of {})", decisions.len());
    assert_eq!(check_lost_answers(&r), []);
    // A server that kept an answer its draw lost: blamed on the model.
    let mut kept = r.clone();
    let k = kept.ledger.loss_decisions.iter().position(|d| d.lost).expect("a loss");
    kept.ledger.loss_decisions[k].lost = false;
    let found = check_lost_answers(&kept);
    assert!(found[0].message.starts_with("blames the model") && found[0].message.contains("was kept"), "{found:?}");
    // One that lost an answer nothing asked it to lose.
    let mut extra = r.clone();
    let k = extra.ledger.loss_decisions.iter().position(|d| !d.lost).expect("a kept answer");
    extra.ledger.loss_decisions[k].lost = true;
    assert!(check_lost_answers(&extra)[0].message.contains("was lost"));
    // An arrival marked lost with no decision behind it.
    let mut marked = r;
    let i = marked.ledger.arrivals.iter().position(|a| !a.lost).expect("a kept arrival");
    marked.ledger.arrivals[i].lost = true;
    assert!(check_lost_answers(&marked)[0].message.contains("no decision lost it"));
}

#[test]
fn connections_close_as_the_keep_alive_settings_say() {
    // A cap of 2 answers a connection and a 1 s idle timeout, shorter
    // than the client pool's 4 s: both close connections.
    let mut s = named("blinkimg-1s").expect("a named scenario");
    s.api.keep_alive.max_requests = 2;
    s.api.keep_alive.idle_timeout_ms = 1_000;
    let r = run(&s, 7).expect("finishes");
    let conns = &r.server_connections;
    assert!(conns.iter().any(|c| c.answers.len() == 2 && c.answers[1].closes), "the situation: a capped connection");
    assert_eq!(check_keep_alive(&r), []);
    // A server that closed a connection after its first answer.
    let mut early = r.clone();
    let (n, _) = early.server_connections.iter().enumerate().find(|(_, c)| c.answers.len() == 2).expect("capped");
    early.server_connections[n].answers[0].closes = true;
    let found = check_keep_alive(&early);
    assert!(found[0].message.starts_with("blames the model") && found[0].message.contains("was closed after answer 1"));
    // One that kept the capped connection open.
    let mut kept = r.clone();
    kept.server_connections[n].answers[1].closes = false;
    assert!(check_keep_alive(&kept)[0].message.contains("stayed open after answer 2"));
    // One that closed a connection with a request still running, or
    // before its idle timeout ran out.
    let (m, close) = (r.server_connections.iter().enumerate())
        .find_map(|(m, c)| c.closed.filter(|close| !close.asked).map(|close| (m, close)))
        .expect("the situation: a connection closed by its idle timeout");
    let mut busy = r.clone();
    busy.server_connections[m].closed = Some(ServerClose { requests: close.requests + 1, ..close });
    assert!(check_keep_alive(&busy)[0].message.contains("1 request(s) on it not yet answered"));
    let mut soon = r.clone();
    soon.server_connections[m].closed = Some(ServerClose { at: close.at - Duration::from_millis(500), ..close });
    assert!(check_keep_alive(&soon)[0].message.contains("as idle after"));
    // One that took a request on a connection idle past its timeout.
    let mut idle = r;
    let c = &mut idle.server_connections[n];
    c.requests[1] = c.answers[0].at + Duration::from_millis(1_000 + 20);
    assert!(check_keep_alive(&idle)[0].message.contains("past its idle timeout of 1000 ms"));
}

#[test]
fn close_races_strike_only_the_next_request_on_an_idle_reused_connection() {
    let r = run(&named("close-races-no-key").expect("a named scenario"), 1).expect("finishes");
    assert!(!r.close_races.is_empty(), "the situation: close races struck");
    assert_eq!(check_close_races(&r), []);
    let mut fresh = r.clone();
    fresh.close_races[0].on.answers = 0;
    let found = check_close_races(&fresh);
    assert!(found[0].message.starts_with("blames the model") && found[0].message.contains("a fresh connection"));
    let mut busy = r.clone();
    busy.close_races[0].on.requests += 1;
    assert!(check_close_races(&busy)[0].message.contains("1 request(s) on it not yet answered"));
    let mut gone = r.clone();
    gone.close_races[0].method.clear();
    assert!(check_close_races(&gone)[0].message.contains("struck no request"));
    // A connection closed as a `fin_before_write` race asked, at a time
    // no race was scheduled: model-keep-alive's to judge.
    assert_eq!(check_keep_alive(&r), []);
    let (m, close) = (r.server_connections.iter().enumerate())
        .find_map(|(m, c)| c.closed.filter(|close| close.asked).map(|close| (m, close)))
        .expect("the situation: a connection closed by a fin_before_write race");
    let mut unasked = r;
    unasked.server_connections[m].closed = Some(ServerClose { at: close.at + Duration::from_millis(700), ..close });
    let found = check_keep_alive(&unasked);
    assert!(found[0].message.contains("race asked, where none was scheduled"), "{found:?}");
}

#[test]
fn each_refusal_for_credits_or_quota_is_one_the_account_earned() {
    for (credits, quota) in [(Some(4), None), (None, Some(4))] {
        let mut s = named("blinkimg-1s").expect("a named scenario");
        s.fleet.op = "convert".into();
        (s.api.accounts[0].credits, s.api.accounts[0].monthly_quota) = (credits, quota);
        let r = run(&s, 7).expect("finishes");
        let l = &r.ledger;
        let refused = l.arrivals.iter().filter(|a| a.outcome == ArrivalOutcome::Refused && a.path == "/v1/jobs");
        let codes: Vec<_> = refused.map(|a| (a.status, a.code.clone().unwrap_or_default())).collect();
        let want = if credits.is_some() { (402, "INSUFFICIENT_CREDITS") } else { (429, "QUOTA_EXCEEDED") };
        assert!(codes.iter().any(|(st, c)| (*st, c.as_str()) == want), "{codes:?}");
        assert_eq!((l.charged, check_credits(&r)), (2, vec![]), "two conversions of 4 credits");
        // The same ledger judged with a larger or smaller allowance.
        let judged = |allowance| {
            let mut r = r.clone();
            let account = &mut r.scenario_config.api.accounts[0];
            let slot = if credits.is_some() { &mut account.credits } else { &mut account.monthly_quota };
            *slot = Some(allowance);
            check_credits(&r).into_iter().map(|v| v.message).collect::<Vec<_>>().join("")
        };
        let refusal = if credits.is_some() { "refused a job for credits (402)" } else { "for the monthly quota" };
        assert!(judged(6).contains(refusal), "{}", judged(6));
        assert!(judged(3).contains("admitted a job costing 2"), "{}", judged(3));
        assert_eq!(judged(5), "", "a balance that could not pay a third either");
    }
}

#[test]
fn the_anonymous_cap_is_replayed_per_hour_and_a_slip_is_seen() {
    let mut s = named("blinkimg-1s").expect("a named scenario");
    (s.api.anonymous_cap, s.fleet.anonymous) = (Some(2), true);
    let r = run(&s, 7).expect("finishes");
    let signups = r.ledger.arrivals.iter().filter(|a| a.code.as_deref() == Some("SIGNUP_REQUIRED")).count();
    assert!(signups > 0, "the cap refused some: {signups}");
    assert_eq!(check_model(&r), []);
    let judged = |cap| {
        let mut r = r.clone();
        r.scenario_config.api.anonymous_cap = Some(cap);
        check_model(&r).into_iter().map(|v| v.message).collect::<String>()
    };
    assert!(judged(3).contains("the API refused the hour's anonymous request 3, under a cap of 3"), "{}", judged(3));
    assert!(judged(1).contains("the API allowed the hour's anonymous request 2, under a cap of 1"), "{}", judged(1));
}

#[test]
fn job_ids_are_the_apis_own_spelling() {
    assert_eq!([job_number("job_1"), job_number("job_12")], [Some(1), Some(12)]);
    for id in ["job_0", "job_01", "job_+1", "job_", "jobs_1", "1"] {
        assert_eq!(job_number(id), None, "{id}");
    }
}

#[test]
fn polls_find_the_jobs_created_and_a_lost_or_invented_job_is_seen() {
    let mut s = named("blinkimg-1s").expect("a named scenario");
    s.fleet.mix = crate::sim::run::scenario::OpMix { safe: 1, ..Default::default() };
    // Every poll asks for the first job: 404 before it is created, 200 after.
    s.fleet.polled_job = Some(1);
    s.api.processing_ms = 50;
    let r = run(&s, 7).expect("finishes");
    let polls = |want: ArrivalOutcome| {
        r.ledger.arrivals.iter().position(|a| a.method == "GET" && a.outcome == want).expect("such a poll")
    };
    let (found, missing) = (polls(ArrivalOutcome::Accepted), polls(ArrivalOutcome::Rejected));
    assert_eq!(check_polls(&r), []);
    // A poll of a job created before it, answered 404.
    let mut lost = r.clone();
    let a = &mut lost.ledger.arrivals[found];
    (a.status, a.code, a.outcome) = (404, Some("NOT_FOUND".into()), ArrivalOutcome::Rejected);
    let v = check_polls(&lost);
    assert!(v[0].arrival == found && v[0].message.contains("answered 404, but job"), "{v:?}");
    // A poll of a job not yet created, run.
    let mut invented = r.clone();
    let a = &mut invented.ledger.arrivals[missing];
    (a.status, a.code, a.outcome) = (200, None, ArrivalOutcome::Accepted);
    let v = check_polls(&invented);
    assert!(v[0].arrival == missing && v[0].message.contains("ran, but only"), "{v:?}");
    // A PUT of an upload answered 404 (a route the API serves).
    let mut put = r;
    let a = &mut put.ledger.arrivals[found];
    (a.method, a.path) = ("PUT".into(), "/v1/uploads/u3".into());
    (a.status, a.code, a.outcome) = (404, Some("NOT_FOUND".into()), ArrivalOutcome::Rejected);
    let v = check_polls(&put);
    assert!(v[0].arrival == found && v[0].message.contains("a PUT of upload u3 answered 404"), "{v:?}");
}

#[test]
fn the_concurrency_cap_is_kept_and_a_refusal_under_it_is_seen() {
    // Four workers, requests that run 200 ms, one allowed at a time.
    let mut s = named("berlin-4-workers").expect("a named scenario");
    s.api.processing_ms = 200;
    s.api.concurrency = Some(crate::sim::world::api::ConcurrencyConfig { max_in_flight: 1, retry_after_s: 1 });
    let r = run(&s, 7).expect("finishes");
    let refused = |a: &Arrival| a.outcome == ArrivalOutcome::Refused && a.code.as_deref() == Some("queue_full");
    let i = r.ledger.arrivals.iter().position(refused).expect("a queue_full refusal");
    assert_eq!(check_concurrency(&r), []);
    // Every run before it ended at once: the refusal came under the cap.
    let mut early = r;
    for a in &mut early.ledger.arrivals[..i] {
        a.answered_at = Some(Duration::ZERO);
    }
    let found = check_concurrency(&early);
    assert_eq!(found[0].arrival, i, "{found:?}");
    assert!(found[0].message.contains("refused queue_full with at most 0"), "{found:?}");
}
