//! The speed measurements' yardstick (issue 16): the plain discrete-event
//! model of `blinkimg-1s` that `cargo bench --bench baseline` runs against
//! the harness counts what the harness counts, so the ratio it prints
//! compares the same work.

use retrysim::sim::run::runner::{self, Traces};
use retrysim::sim::run::scenario;

#[path = "../../benches/baseline/des.rs"]
mod des;

#[test]
fn the_discrete_event_baseline_counts_what_the_harness_counts() {
    let s = scenario::blinkimg_1s();
    let m = des::Model::blinkimg_1s();
    assert_eq!((m.workers, m.jobs), (s.fleet.workers, s.fleet.jobs));
    assert_eq!((m.limit, m.window_ms), (s.api.limiter.writes, s.api.limiter.window_ms));
    assert_eq!(m.spread_ms, s.policy.spread.max.as_millis() as u64);
    for seed in [1, 7] {
        let r = runner::run_keeping(&s, seed, Traces::None).expect("finishes");
        let c = des::run(&m, seed);
        assert_eq!((c.requests, c.limited, c.charged), (r.requests, r.limited, r.charged), "seed {seed}");
    }
}

#[test]
fn the_discrete_event_baseline_is_deterministic_and_limits_like_the_api() {
    let m = des::Model::blinkimg_1s();
    assert_eq!(des::run(&m, 3), des::run(&m, 3));
    // A window that holds every job: no 429.
    let roomy = des::run(&des::Model { limit: 120, ..m }, 1);
    assert_eq!((roomy.requests, roomy.limited, roomy.charged), (120, 0, 120));
    // A limit of 1 a window: every job after the first meets its window full.
    let tight = des::run(&des::Model { limit: 1, jobs: 3, workers: 3, ..m }, 1);
    assert_eq!((tight.charged, tight.limited), (3, 3), "{tight:?}");
}

#[test]
fn the_readme_baseline_table_is_the_bench_runs_counts() {
    let rows = crate::readme::table_after("Measured speed", "`cargo bench --bench baseline`");
    let r = runner::run_keeping(&scenario::blinkimg_1s(), 1, Traces::None).expect("finishes");
    let c = des::run(&des::Model::blinkimg_1s(), 1);
    let expected = [
        [r.requests, r.limited, r.charged, r.virtual_ms].map(|n| n.to_string()),
        [c.requests, c.limited, c.charged, c.virtual_ms].map(|n| n.to_string()),
    ];
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
    for (row, figures) in rows.iter().zip(expected) {
        assert_eq!(row[1..5], figures, "README row {row:?}: run `cargo bench --bench baseline` and copy its table");
    }
}
