//! The statistics on known draws: the core's own draws pass, each broken
//! shape fails.

use std::time::Duration;

use super::*;
use crate::core::backoff::Backoff;
use crate::env::{Rng, seeded_rng};

const D: fn(u64) -> Duration = Duration::from_millis;

fn policy(jitter: Jitter) -> Policy {
    Policy { backoff: Backoff::new(D(100), D(30_000), jitter), ..Policy::standard() }
}

/// The cells of `n` waits the core draws under `p`'s backoff (retries 0..8
/// in turn, each after the last), from `draw`.
fn backoff_cells(p: &Policy, n: usize, mut draw: impl FnMut() -> u64) -> Vec<(Kind, Cell)> {
    let mut out = Vec::new();
    let mut previous = None;
    for i in 0..n {
        let retry = (i % 8) as u32;
        let wait = p.backoff.wait(retry, previous, draw());
        // The core rounds a backoff's base up to whole milliseconds.
        let ms = wait.as_nanos().div_ceil(MS);
        if let Some((kind, Some(c), _)) = backoff_cell(p, retry, previous.map(|d| d.as_nanos()), ms) {
            out.push((kind, c));
        }
        previous = Some(Duration::from_millis(ms as u64));
    }
    out
}

fn judge(cells: Vec<(Kind, Cell)>) -> Vec<FleetViolation> {
    let first = cells.iter().map(|(k, _)| (*k, "test".to_owned())).collect();
    verdict(&Draws { cells, first })
}

#[test]
fn the_cores_own_draws_pass_for_every_kind() {
    for jitter in [Jitter::Full, Jitter::Equal, Jitter::Decorrelated] {
        for seed in 0..20 {
            let mut rng = seeded_rng(seed);
            let cells = backoff_cells(&policy(jitter), 400, || rng.draw());
            assert!(cells.len() >= 100, "{jitter:?}: {} cells", cells.len());
            let found = judge(cells);
            assert!(found.is_empty(), "{jitter:?} seed {seed}: {found:?}");
        }
    }
}

#[test]
fn the_cores_spreads_pass() {
    let s = Spread::default();
    let mut rng = seeded_rng(3);
    let mut cells = Vec::new();
    for i in 0..400u64 {
        let advice = D(i % 5 * 1000);
        let spread = s.draw_whole_seconds(advice, rng.draw());
        let wait = advice.as_millis() + spread.as_millis();
        let (c, _) = spread_cell(&s, advice.as_millis(), AdviceSource::HeaderSeconds, wait).expect("judged");
        cells.push((Kind::Spread, c.expect("in range")));
    }
    assert!(judge(cells).is_empty());
}

#[test]
fn a_constant_fraction_fails_every_test() {
    let cells = backoff_cells(&policy(Jitter::Full), 40, || 1 << 63);
    let found = judge(cells.clone());
    assert_eq!(found.len(), 3, "{found:?}");
    let cells: Vec<Cell> = cells.iter().map(|(_, c)| *c).collect();
    assert_eq!(fewest_points(&cells), 1);
    assert!(ks_distance(&cells) >= 0.49);
}

#[test]
fn the_same_draw_in_every_worker_fails_the_few_values_test() {
    // Ten workers, each drawing the same four draws for its retries 0..4.
    let mut cells = Vec::new();
    for _ in 0..10 {
        let mut shared = seeded_rng(9);
        cells.extend(backoff_cells(&policy(Jitter::Full), 4, || shared.draw()));
    }
    let found = judge(cells);
    assert!(found.iter().any(|f| f.message.contains("fall on 4 values")), "{found:?}");
}

#[test]
fn four_possible_values_fail_the_few_values_test() {
    let mut rng = seeded_rng(5);
    let cells = backoff_cells(&policy(Jitter::Full), 24, || rng.draw() & (3 << 62));
    let found = judge(cells);
    assert!(found.iter().any(|f| f.message.contains("values")), "{found:?}");
}

#[test]
fn equal_jitter_declared_as_full_fails_the_ks_and_lowest_draw_tests() {
    let (declared, running) = (policy(Jitter::Full), policy(Jitter::Equal));
    let mut rng = seeded_rng(11);
    let mut cells = Vec::new();
    for i in 0..40 {
        let retry = i % 6;
        let ms = running.backoff.wait(retry, None, rng.draw()).as_nanos().div_ceil(MS);
        if let Some((kind, Some(c), _)) = backoff_cell(&declared, retry, None, ms) {
            cells.push((kind, c));
        }
    }
    let found = judge(cells);
    assert!(found.len() == 2, "{found:?}");
    assert!(found[0].message.contains("lowest") && found[1].message.contains("Kolmogorov"), "{found:?}");
}

/// The KS threshold holds its rate: at α = 1%, 1,000 honest samples of 50
/// reject about 1% of the time (the bound is loose: at most 2%, and not none).
#[test]
fn the_ks_bound_is_a_bound() {
    // A point cell: the draw itself.
    let mut rng = seeded_rng(1);
    let eps = ks_threshold(50, 0.01);
    let rejected = (0..1000)
        .filter(|_| {
            let cells: Vec<Cell> = (0..50)
                .map(|_| {
                    let v = (rng.draw() >> 11) as f64 / (1u64 << 53) as f64;
                    Cell { lo: v, hi: v }
                })
                .collect();
            ks_distance(&cells) > eps
        })
        .count();
    assert!(rejected <= 20, "{rejected} of 1000");
}

#[test]
fn cells_read_the_rounding() {
    // Full jitter on a 100 ms window: a 1 ms wait is any base in (0, 1 ms].
    let p = policy(Jitter::Full);
    let (_, c, longest) = backoff_cell(&p, 0, None, 1).unwrap();
    let c = c.unwrap();
    assert_eq!(longest, 100);
    let span = (100 * MS + 1) as f64;
    assert!((c.lo - 1.0 / span).abs() < 1e-15 && (c.hi - (MS + 1) as f64 / span).abs() < 1e-15, "{c:?}");
    // Outside the range: no cell.
    assert_eq!(backoff_cell(&p, 0, None, 101).unwrap().1, None);
    // No jitter: no draw; decorrelated past the cap: not judged.
    assert!(backoff_cell(&policy(Jitter::None), 0, None, 100).is_none());
    assert!(backoff_cell(&policy(Jitter::Decorrelated), 3, Some(20_000 * MS), 100).is_none());
    // A body's advice of 1000 ms may be up to 1000.999 ms: its base 1000 or 1001.
    let s = Spread::default();
    let (c, longest) = spread_cell(&s, 1000, AdviceSource::BodyReset, 1001).unwrap();
    assert_eq!(longest, 1001 + 200);
    let c = c.unwrap();
    assert!(c.lo == 0.0 && c.hi > 0.009 && c.hi < 0.0101, "{c:?}");
    // A body's zero is not pinned.
    assert!(spread_cell(&s, 0, AdviceSource::BodyReset, 5).is_none());
}
