//! A foreign client through the public testing API (`retrysim::testing`):
//! a hand-written loop that writes no trace. Done right, it passes the
//! black-box checks on a rate-limited fleet and under faults; each of its
//! deliberate slips (one knob each) is caught by the black-box check made
//! for it, in a real run: the negative controls of the black-box checks.
//! A client that panics or never returns is reported, not a crashed run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use retrysim::core::body::ErrorEnvelope;
use retrysim::core::classify::{Class, DefaultTable, TransportFailure, classify_answer};
use retrysim::core::retry_after::read_advice;
use retrysim::env::{Clock, Rng, Transport, TransportError};
use retrysim::testing::{
    BlackBoxCheck, BoxFuture, Fault, Harness, Invariant, Job, JobEnd, Kind, Promises, ScheduledFault, Subject, from_fn,
    trace_text,
};

/// How the loop chooses its idempotency key.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Keys {
    /// One key per job, drawn from the job's generator, on every attempt.
    PerJob,
    /// A new key on every attempt (the slip: a key built inside the retried closure).
    PerAttempt,
}

/// A hand-written retry loop with knobs for its slips. It reads answers
/// with retrysim's public parser and classifier (`read_advice`,
/// `DefaultTable`), as a user's own loop may.
#[derive(Debug, Clone)]
struct Loop {
    /// Attempts it makes at most.
    max_attempts: u32,
    /// What it promises (defaults: what it does).
    promised: Promises,
    /// Waits Retry-After (else a fixed 50 ms).
    honours_retry_after: bool,
    /// Stops on a 4xx other than 429 and on QUOTA_EXCEEDED.
    stops_on_terminal: bool,
    /// Resends an unkeyed POST after a network error.
    replays_unkeyed: bool,
    keys: Keys,
    /// Sends an idempotency key when the job may carry one.
    sends_keys: bool,
    /// Gives up after this long.
    deadline: Duration,
    /// Writes the request's headers into its give-up reason.
    leaks_headers: bool,
    /// Panics on this job.
    panics_on: Option<u32>,
    /// Never returns from this job.
    hangs_on: Option<u32>,
    /// Stops when its caller cancels the job (else sends and sleeps on).
    honours_cancel: bool,
}

impl Loop {
    fn good() -> Loop {
        Loop {
            max_attempts: 6,
            promised: Promises::nothing().max_attempts(6).deadline(Duration::from_secs(120)).honours_retry_after(true),
            honours_retry_after: true,
            stops_on_terminal: true,
            replays_unkeyed: false,
            keys: Keys::PerJob,
            sends_keys: true,
            deadline: Duration::from_secs(120),
            leaks_headers: false,
            panics_on: None,
            hangs_on: None,
            honours_cancel: true,
        }
    }

    fn named(self, label: &'static str) -> impl retrysim::testing::MakeSubject {
        from_fn(label, move |_| self.clone())
    }
}

fn key(rng: &mut dyn Rng) -> String {
    format!("loop-{:016x}", rng.draw())
}

impl Subject for Loop {
    fn promises(&self) -> Promises {
        self.promised.clone()
    }

    fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
        Box::pin(async move {
            if self.panics_on == Some(job.number) {
                panic!("my client broke on job {}", job.number);
            }
            if self.hangs_on == Some(job.number) {
                std::future::pending::<()>().await;
            }
            let start = job.clock.now();
            let transport = job.net.transport();
            let keyed = job.keyed && self.sends_keys;
            let mut job_key = keyed.then(|| key(job.rng));
            for attempt in 1..=self.max_attempts {
                let mut req = job.request_copy();
                if self.keys == Keys::PerAttempt && keyed {
                    job_key = Some(key(job.rng));
                }
                if let Some(k) = &job_key {
                    req.headers_mut().insert("idempotency-key", k.parse().expect("a valid header"));
                }
                // Its own timeout: an answer lost on the way never comes.
                let send = tokio::time::timeout(Duration::from_secs(10), transport.send(req));
                let sent = tokio::select! {
                    biased;
                    _ = job.cancel.cancelled(), if self.honours_cancel => {
                        return JobEnd::gave_up("cancelled").attempts(attempt);
                    }
                    sent = send => sent,
                };
                let timed_out =
                    |_| Err(TransportError { failure: TransportFailure::MaybeArrived, message: "timed out".into() });
                let wait = match sent.unwrap_or_else(timed_out) {
                    Err(_) if !keyed && !self.replays_unkeyed => {
                        return JobEnd::gave_up("network error").attempts(attempt);
                    }
                    Err(_) => Duration::from_millis(50),
                    Ok(res) if res.status().is_success() => {
                        return JobEnd::succeeded(res.status().as_u16()).attempts(attempt);
                    }
                    Ok(res) => {
                        let status = res.status().as_u16();
                        let envelope = ErrorEnvelope::parse(res.body());
                        // `classify_answer`, not the table on the body's last
                        // code: a body may repeat its code member, and a
                        // terminal one among them must stop the loop.
                        let table = DefaultTable::default();
                        let (class, _) =
                            classify_answer(&table, res.status(), res.headers(), envelope.as_ref(), job.clock.wall());
                        let terminal = class == Class::Terminal;
                        if terminal && self.stops_on_terminal {
                            let reason = if self.leaks_headers {
                                format!("{status} for {:?}", job.request.headers())
                            } else {
                                format!("status {status}")
                            };
                            return JobEnd::gave_up(reason).attempts(attempt);
                        }
                        // Retry-After in seconds or as a date (against the
                        // server's Date), else the body's hint: retrysim's parser.
                        let advice = read_advice(res.headers(), envelope.as_ref(), job.clock.wall());
                        match advice.wait {
                            Some(wait) if self.honours_retry_after => wait,
                            _ => Duration::from_millis(50),
                        }
                    }
                };
                if attempt == self.max_attempts || job.clock.now() - start + wait > self.deadline {
                    return JobEnd::gave_up("gave up").attempts(attempt);
                }
                tokio::select! {
                    biased;
                    _ = job.cancel.cancelled(), if self.honours_cancel => {
                        return JobEnd::gave_up("cancelled").attempts(attempt);
                    }
                    _ = job.clock.sleep(wait) => {}
                }
            }
            JobEnd::gave_up("attempts exhausted").attempts(self.max_attempts)
        })
    }
}

fn harness(scenario: &str, client: Loop, label: &'static str) -> Harness {
    Harness::named(scenario).unwrap().with_client(client.named(label))
}

/// The black-box checks a seed's run broke.
fn broken(h: &Harness, seed: u64) -> Vec<BlackBoxCheck> {
    let r = h.run(seed).unwrap_or_else(|e| panic!("{e}"));
    let mut found: Vec<BlackBoxCheck> = retrysim::testing::black_box(&r).iter().map(|v| v.check).collect();
    found.dedup();
    found
}

#[test]
fn a_careful_loop_passes_on_a_busy_fleet_and_under_faults() {
    for scenario in ["blinkimg-1s", "lost-answers-with-key", "network-error-unsafe-post", "quota-exceeded"] {
        let report = harness(scenario, Loop::good(), "careful-loop").assert_holds(3);
        assert!(!report.traced, "a foreign client writes no trace");
        assert_eq!(report.policy, "careful-loop");
    }
    let blinkimg = harness("blinkimg-1s", Loop::good(), "careful-loop").assert_holds(3);
    assert_eq!(blinkimg.succeeded, blinkimg.jobs, "{}", trace_text(&blinkimg));
    assert!(blinkimg.limited > 0, "the fleet meets the limit");
}

#[test]
fn a_careful_loop_survives_a_swarm_of_random_scenarios() {
    // Holds, partitions, lost answers, scripts, skewed clocks. The swarm's
    // time limit covers the policy's deadline it draws; the loop's own is 120 s.
    let promised = Promises::nothing().max_attempts(6).honours_retry_after(true);
    let client = Loop { promised, deadline: Duration::from_secs(20), ..Loop::good() };
    Harness::swarm(Kind::All).with_client(client.named("careful-loop")).determinism(false).hunt(1..40).assert_clean();
}

#[test]
fn the_trace_text_shows_what_the_server_saw() {
    let report = harness("once-429-then-200", Loop::good(), "careful-loop").assert_holds(7);
    let text = trace_text(&report);
    let expected = [
        "scenario=once-429-then-200 seed=7 client=careful-loop promises: deadline=120.000s max_attempts=6 honours_retry_after=true",
        "request 1  POST /v1/jobs  key=k:",
        "<- 429 RATE_LIMITED  advised 1.000s",
        "request 2  POST /v1/jobs  key=k:",
        "w0 job-1  ended: succeeded 201",
        // The loop does not count its waits: no made-up zero.
        "slept=unreported",
    ];
    for line in expected {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert_eq!(text, trace_text(&harness("once-429-then-200", Loop::good(), "careful-loop").assert_holds(7)));
}

#[test]
fn each_slip_is_caught_by_its_black_box_check() {
    let good = Loop::good();
    let cases: Vec<(&str, Loop, BlackBoxCheck)> = vec![
        ("once-429-then-200", Loop { honours_retry_after: false, ..good.clone() }, BlackBoxCheck::EarlyRetry),
        (
            "five-retries-six-attempts",
            Loop { promised: good.promised.clone().max_attempts(3), ..good.clone() },
            BlackBoxCheck::AttemptBound,
        ),
        (
            "quota-exceeded",
            Loop { stops_on_terminal: false, honours_retry_after: false, ..good.clone() },
            BlackBoxCheck::AfterTerminal,
        ),
        (
            "always-429-30s-budget-10s",
            Loop { promised: good.promised.clone().deadline(Duration::from_secs(10)), ..good.clone() },
            BlackBoxCheck::Deadline,
        ),
        (
            "network-error-unsafe-post",
            Loop { sends_keys: false, replays_unkeyed: true, ..good.clone() },
            BlackBoxCheck::UnkeyedReplay,
        ),
        ("two-429-then-success", Loop { keys: Keys::PerAttempt, ..good.clone() }, BlackBoxCheck::OneKeyPerJob),
        ("lost-answers-with-key", Loop { keys: Keys::PerAttempt, ..good.clone() }, BlackBoxCheck::OneChargePerKey),
        ("quota-exceeded", Loop { leaks_headers: true, ..good.clone() }, BlackBoxCheck::NoSecrets),
        ("once-429-then-200", Loop { panics_on: Some(1), ..good.clone() }, BlackBoxCheck::ClientPanicked),
    ];
    for (scenario, slip, check) in cases {
        let clean = broken(&harness(scenario, good.clone(), "careful-loop"), 7);
        assert_eq!(clean, [], "{scenario}: the careful loop already fails; replay: RETRYSIM_SEED=7 cargo test");
        let found = broken(&harness(scenario, slip, "slipping-loop"), 7);
        assert!(found.contains(&check), "{scenario} seed 7: {check} went unseen; found {found:?}");
    }
}

#[test]
fn a_loop_that_sleeps_on_after_a_cancel_breaks_invariant_13() {
    // Always 429 with 20 s advice; the caller cancels at 3 s, mid-wait.
    let mut s = retrysim::testing::scenario::named("deadline-wins").expect("named");
    s.faults.schedule.push(ScheduledFault { at: Duration::from_secs(3), fault: Fault::Cancel });
    let of = |client: Loop, label| Harness::of(s.clone()).with_client(client.named(label)).check(7);
    let careful = of(Loop::good(), "careful-loop");
    assert!(careful.violations.is_empty(), "{:?}", careful.violations);
    assert_eq!(careful.report.as_ref().map(|r| r.gave_up.get("cancelled").copied()), Some(Some(1)));
    let deaf = of(Loop { honours_cancel: false, ..Loop::good() }, "deaf-loop");
    let found: Vec<Invariant> = deaf.violations.iter().map(|v| v.invariant).collect();
    assert_eq!(found, [Invariant::CancelEndsJob], "{:?}", deaf.violations);
}

#[test]
fn a_panicking_client_is_a_violation_with_a_replay_line_not_a_crash() {
    let h = harness("blinkimg-1s", Loop { panics_on: Some(5), ..Loop::good() }, "panicky");
    let checked = h.check(1);
    assert!(checked.run_error.is_none(), "{checked}");
    let panics: Vec<_> = checked.violations.iter().filter(|v| v.invariant == Invariant::ClientReturns).collect();
    assert_eq!(panics.len(), 1, "{checked}");
    assert!(
        panics[0].message.contains("job 5: the client panicked")
            && panics[0].message.contains("my client broke on job 5")
    );
    let report = checked.report.as_ref().expect("the run finished");
    assert_eq!(report.succeeded, report.jobs - 1, "only job 5 is lost");
    let shown = checked.to_string();
    assert!(
        shown.contains("replay: RETRYSIM_SEED=1 cargo test foreign::a_panicking_client_is_a_violation_with_a_replay_line_not_a_crash -- --exact"),
        "{shown}"
    );
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.assert_holds(1))).expect_err("assert_holds panics");
    let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("the client panicked") && text.contains("replay: RETRYSIM_SEED=1"), "{text}");
}

#[test]
fn a_client_that_never_returns_is_cut_at_the_time_limit_and_reported() {
    let mut s = retrysim::testing::scenario::named("two-429-then-success").unwrap();
    s.time_limit = Duration::from_secs(30);
    let h = Harness::of(s).with_client(Loop { hangs_on: Some(1), ..Loop::good() }.named("hangs"));
    let checked = h.check(1);
    let error = checked.run_error.as_deref().unwrap_or_else(|| panic!("the hang went unreported: {checked}"));
    assert!(error.contains("job(s) never ended: 1") && error.contains("time_limit = 30s"), "{error}");
    assert!(checked.to_string().contains("replay: RETRYSIM_SEED=1"), "{checked}");
}

#[test]
fn a_client_that_reads_state_outside_the_seed_breaks_determinism() {
    // Its jitter comes from a counter that lives across runs, not from the
    // job's generator: the second run of the same seed differs.
    static CALLS: AtomicU64 = AtomicU64::new(0);
    struct Drifting;
    impl Subject for Drifting {
        fn promises(&self) -> Promises {
            Promises::nothing()
        }
        fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
            Box::pin(async move {
                let jitter = CALLS.fetch_add(1, Ordering::Relaxed) % 7;
                job.clock.sleep(Duration::from_millis(jitter)).await;
                match job.net.transport().send(job.request_copy()).await {
                    Ok(res) => JobEnd::succeeded(res.status().as_u16()),
                    Err(_) => JobEnd::gave_up("network error"),
                }
            })
        }
    }
    let h = Harness::named("blinkimg-1s").unwrap().with_client(from_fn("drifting", |_| Drifting));
    let checked = h.check(1);
    assert!(checked.violations.iter().any(|v| v.invariant == Invariant::Determinism), "{checked}");
    // The seeded twin passes: the job's generator is part of the seed.
    struct Seeded;
    impl Subject for Seeded {
        fn promises(&self) -> Promises {
            Promises::nothing()
        }
        fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
            Box::pin(async move {
                job.clock.sleep(Duration::from_millis(job.rng.draw() % 7)).await;
                match job.net.transport().send(job.request_copy()).await {
                    Ok(res) => JobEnd::succeeded(res.status().as_u16()),
                    Err(_) => JobEnd::gave_up("network error"),
                }
            })
        }
    }
    let seeded = Harness::named("blinkimg-1s").unwrap().with_client(from_fn("seeded", |_| Seeded)).check(1);
    assert!(!seeded.violations.iter().any(|v| v.invariant == Invariant::Determinism), "{seeded}");
}

#[test]
fn bad_scenarios_get_clear_errors() {
    let e = Harness::named("no-such-scenario").unwrap_err().to_string();
    assert!(e.contains("no scenario named \"no-such-scenario\"") && e.contains("blinkimg-1s"), "{e}");
    let e = Harness::from_toml("name = ").unwrap_err().to_string();
    assert!(e.contains("the scenario TOML is invalid"), "{e}");
    let e = Harness::from_file("/nonexistent/scenario.toml").unwrap_err().to_string();
    assert!(e.contains("cannot read the scenario /nonexistent/scenario.toml"), "{e}");
}

/// A client that counts its waits gets them summed in the review text.
#[test]
fn reported_waits_are_summed_in_the_trace_text() {
    struct OneShot;
    impl Subject for OneShot {
        fn promises(&self) -> Promises {
            Promises::nothing().max_attempts(1).honours_retry_after(true)
        }
        fn run<'a>(&'a self, job: Job<'a>) -> BoxFuture<'a, JobEnd> {
            Box::pin(async move {
                let status = match job.net.transport().send(job.request_copy()).await {
                    Ok(res) => res.status().as_u16(),
                    Err(_) => return JobEnd::gave_up("network error").attempts(1),
                };
                let end =
                    if status < 300 { JobEnd::succeeded(status) } else { JobEnd::gave_up(format!("status {status}")) };
                end.attempts(1).waited(Duration::from_millis(5))
            })
        }
    }
    let report =
        Harness::named("once-429-then-200").unwrap().with_client(from_fn("one-shot", |_| OneShot)).run(7).unwrap();
    let text = trace_text(&report);
    let slept = format!("slept={:.3}s", report.jobs as f64 * 0.005);
    assert!(text.contains(&slept), "missing {slept:?} in\n{text}");
}
