//! A plain discrete-event model of `blinkimg-1s`: a heap of timed events, no
//! turmoil, no tokio, no hyper. It is the floor the harness is measured
//! against (`cargo bench --bench baseline`): what simulating the same
//! requests costs when nothing but the events themselves is computed.
//!
//! The model: `workers` workers take `jobs` jobs one after another; each
//! attempt reaches the API after a message latency drawn in
//! `[min_latency_ms, max_latency_ms]` and its answer comes back after
//! another. The API is a fixed window of `limit` requests that starts at the
//! first request after the previous one ended (the harness's limiter); a
//! refused request is answered 429 with `Retry-After` in whole seconds
//! rounded up (at least 1), and the worker waits that plus a spread drawn in
//! `[0, spread_ms]` (Retry-After + jitter) before it tries again. Timing is
//! not the harness's to the millisecond (its latencies come in turmoil
//! ticks), but the counts are the same, which the integration tests check.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg64;

/// What the model simulates.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    pub workers: u32,
    pub jobs: u32,
    /// Requests allowed per window.
    pub limit: u32,
    pub window_ms: u64,
    /// The largest spread added to a `Retry-After`.
    pub spread_ms: u64,
    pub min_latency_ms: u64,
    pub max_latency_ms: u64,
}

impl Model {
    /// `blinkimg-1s`: 8 workers, 120 jobs, 30 requests per 1 s window,
    /// Retry-After + 0..250 ms, 1..3 ms per message.
    pub fn blinkimg_1s() -> Model {
        Model {
            workers: 8,
            jobs: 120,
            limit: 30,
            window_ms: 1_000,
            spread_ms: 250,
            min_latency_ms: 1,
            max_latency_ms: 3,
        }
    }
}

/// What a run counted, as the harness's report names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Requests that reached the API.
    pub requests: u64,
    /// Answers with status 429.
    pub limited: u64,
    /// Requests the API allowed (and charged for).
    pub charged: u64,
    /// When the last job ended, ms.
    pub virtual_ms: u64,
}

/// What happens to a worker at an event's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// Its attempt reaches the API.
    Arrive,
    /// Its answer comes back: the job ended, or wait this long and retry.
    Answer { retry_in: Option<u64> },
    /// It sends its next attempt.
    Send,
}

/// Runs the model with `seed`; the same seed gives the same counts.
pub fn run(m: &Model, seed: u64) -> Counts {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut uniform = |lo: u64, hi: u64| lo + rng.next_u64() % (hi - lo + 1);
    // (time, order of scheduling, worker, step): ties in time go in the order scheduled.
    let mut heap: BinaryHeap<Reverse<(u64, u64, u32, Step)>> = BinaryHeap::new();
    let mut order = 0u64;
    let mut push = |heap: &mut BinaryHeap<_>, at: u64, worker: u32, step: Step| {
        order += 1;
        heap.push(Reverse((at, order, worker, step)));
    };
    let mut taken = 0u32;
    for w in 0..m.workers.min(m.jobs) {
        taken += 1;
        push(&mut heap, 0, w, Step::Send);
    }
    let mut counts = Counts { requests: 0, limited: 0, charged: 0, virtual_ms: 0 };
    let (mut window_start, mut in_window) = (None::<u64>, 0u32);
    while let Some(Reverse((now, _, w, step))) = heap.pop() {
        match step {
            Step::Send => push(&mut heap, now + uniform(m.min_latency_ms, m.max_latency_ms), w, Step::Arrive),
            Step::Arrive => {
                counts.requests += 1;
                let start = match window_start {
                    Some(s) if now < s + m.window_ms => s,
                    _ => {
                        in_window = 0;
                        now
                    }
                };
                window_start = Some(start);
                in_window += 1;
                let retry_in = if in_window > m.limit {
                    counts.limited += 1;
                    let retry_after_s = (start + m.window_ms - now).div_ceil(1_000).max(1);
                    Some(retry_after_s * 1_000 + uniform(0, m.spread_ms))
                } else {
                    counts.charged += 1;
                    None
                };
                push(&mut heap, now + uniform(m.min_latency_ms, m.max_latency_ms), w, Step::Answer { retry_in });
            }
            Step::Answer { retry_in: Some(wait) } => push(&mut heap, now + wait, w, Step::Send),
            Step::Answer { retry_in: None } => {
                counts.virtual_ms = counts.virtual_ms.max(now);
                if taken < m.jobs {
                    taken += 1;
                    push(&mut heap, now, w, Step::Send);
                }
            }
        }
    }
    counts
}
