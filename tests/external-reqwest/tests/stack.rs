// BOOK:reqwest-test begin
use my_service::{MAX_RETRIES, with_retries};
use reqwest_middleware::ClientBuilder;
use reqwest_retry::Jitter;
use retrysim::testing::{Harness, Invariant, Promises, ReqwestStack, from_fn};

/// The named scenario with the stack in it: the harness sends each job's
/// request (its own `POST /v1/jobs`) through the stack, whose last
/// middleware is the simulated network instead of reqwest.
fn harness(scenario: &str, jitter: Jitter) -> Harness {
    let stack = from_fn("my-stack", move |_host| {
        // What the stack promises; reqwest-retry reads no Retry-After.
        let promises = Promises::nothing().max_attempts(MAX_RETRIES + 1);
        ReqwestStack::new(promises, move |terminal, _rng| {
            with_retries(ClientBuilder::new(reqwest::Client::new()), jitter).with(terminal).build()
        })
    });
    Harness::named(scenario).unwrap().with_client(stack)
}

#[test]
fn my_stack_on_a_busy_fleet() {
    // 8 workers, 120 jobs, 30 writes per 1 s window.
    let report = harness("blinkimg-1s", Jitter::None).assert_holds(7);
    assert_eq!(report.jobs, 120);
    assert!(report.requests <= report.jobs * u64::from(MAX_RETRIES + 1));
}

#[test]
fn my_stack_hunt() {
    harness("blinkimg-1s", Jitter::None).hunt(0..10).assert_clean();
}

#[test]
fn jitter_from_the_os_does_not_replay() {
    // Jitter::Full draws from `rand::rng()`, which no seed controls: the
    // harness runs each seed twice, and the two runs differ.
    let checked = harness("blinkimg-1s", Jitter::Full).check(7);
    assert!(checked.violations.iter().any(|v| v.invariant == Invariant::Determinism), "{checked}");
}
// BOOK:reqwest-test end
