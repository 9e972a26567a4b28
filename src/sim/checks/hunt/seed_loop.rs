//! The one seed loop: many independent runs (seeds, or a preset's rows on
//! seeds) on worker threads, their results gathered on the calling thread
//! by their place in the list, so the outcome does not depend on the number
//! of threads or on the order runs finish in. `retrysim hunt` (the hunt's
//! [`hunt`](super::hunt) and the CLI's), `retrysim compare` and
//! `testing::Harness::hunt` all run on it.
//!
//! A stop (a signal, a caller's `stop`) returns at once: the runs under way
//! go on in their threads until they end, start no other run, and are left
//! out. A loop that runs to its end joins its threads, and a worker's panic
//! goes on in the caller's thread, as a scoped thread's would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the gathering thread asks whether to stop while it waits.
const TICK: Duration = Duration::from_millis(50);

/// What a seed loop's caller sees: each result as it comes (`Some((place,
/// result))`), and `None` while it waits; true stops the loop.
pub(crate) type Watch<'a, R> = dyn FnMut(Option<(usize, &R)>) -> bool + 'a;

/// How a seed loop runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeedLoop {
    /// Worker threads to start: at least one, at most one per run.
    pub threads: usize,
    /// The name the worker threads carry.
    pub name: &'static str,
    /// When no worker thread can be started: run on the calling thread
    /// (`true`), or return nothing ([`Ran::refused`] says why).
    pub fall_back: bool,
}

/// What a seed loop came to.
#[derive(Debug)]
pub(crate) struct Ran<R> {
    /// Each finished run's place and result, in the order of the places
    /// (a run a stop left out is not there).
    pub results: Vec<(usize, R)>,
    /// Worker threads that started (0 when the runs went on the calling
    /// thread, or did not go at all).
    pub threads: usize,
    /// Why a worker thread could not start, if one could not.
    pub refused: Option<std::io::Error>,
}

impl SeedLoop {
    /// Runs `work(i)` for each `i` in `0..runs`. `watch` is called on the
    /// calling thread with each result as it comes (`Some((i, &result))`),
    /// before each worker thread starts and every 50 ms while waiting
    /// (`None`); when it returns true the loop stops.
    pub(crate) fn run<R, W>(&self, runs: usize, work: W, watch: &mut Watch<'_, R>) -> Ran<R>
    where
        R: Send + 'static,
        W: Fn(usize) -> R + Send + Sync + 'static,
    {
        let mut results: Vec<(usize, R)> = Vec::with_capacity(runs.min(1 << 20));
        let work = Arc::new(work);
        let next = Arc::new(AtomicUsize::new(0));
        let halt = Arc::new(AtomicBool::new(false));
        let (tx, rx) = channel::<(usize, R)>();
        let mut workers: Vec<JoinHandle<()>> = Vec::new();
        let mut refused = None;
        for _ in 0..self.threads.clamp(1, runs.max(1)) {
            if watch(None) {
                halt.store(true, Ordering::Relaxed);
                return Ran { results, threads: workers.len(), refused };
            }
            let (work, next, halt, tx) = (work.clone(), next.clone(), halt.clone(), tx.clone());
            let worker = std::thread::Builder::new().name(self.name.into()).spawn(move || {
                while !halt.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= runs || tx.send((i, work(i))).is_err() {
                        break;
                    }
                }
            });
            match worker {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        drop(tx);
        if workers.is_empty() {
            if self.fall_back {
                for i in 0..runs {
                    if watch(None) {
                        break;
                    }
                    let r = work(i);
                    let stop = watch(Some((i, &r)));
                    results.push((i, r));
                    if stop {
                        break;
                    }
                }
            }
            return Ran { results, threads: 0, refused };
        }
        loop {
            let stop = match rx.recv_timeout(TICK) {
                Ok((i, r)) => {
                    let stop = watch(Some((i, &r)));
                    results.push((i, r));
                    stop
                }
                Err(RecvTimeoutError::Timeout) => watch(None),
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if stop {
                // The runs under way finish in their threads, unread.
                halt.store(true, Ordering::Relaxed);
                results.sort_by_key(|(i, _)| *i);
                return Ran { results, threads: workers.len(), refused };
            }
        }
        results.sort_by_key(|(i, _)| *i);
        let threads = workers.len();
        for worker in workers {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Ran { results, threads, refused }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn square_all(threads: usize, runs: usize) -> Vec<(usize, usize)> {
        let seed_loop = SeedLoop { threads, name: "test-seeds", fall_back: true };
        seed_loop.run(runs, |i| i * i, &mut |_| false).results
    }

    #[test]
    fn results_are_in_place_whatever_the_threads() {
        let want: Vec<(usize, usize)> = (0..40).map(|i| (i, i * i)).collect();
        for threads in [1, 2, 7, 100] {
            assert_eq!(square_all(threads, 40), want, "{threads} threads");
        }
        assert!(square_all(3, 0).is_empty());
    }

    #[test]
    fn watch_sees_every_result_once_and_can_stop() {
        let seed_loop = SeedLoop { threads: 1, name: "test-seeds", fall_back: true };
        let mut seen = Vec::new();
        let ran = seed_loop.run(10, |i| i, &mut |r| {
            if let Some((i, &v)) = r {
                assert_eq!(i, v);
                seen.push(i);
            }
            false
        });
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(ran.threads, 1);
        // A stop before any thread starts runs nothing.
        let stopped = seed_loop.run(10, |i| i, &mut |_| true);
        assert!(stopped.results.is_empty(), "{:?}", stopped.results);
        // A stop after the third result leaves later runs out.
        let mut count = 0;
        let part = seed_loop.run(1_000, |i| i, &mut |r| {
            count += usize::from(r.is_some());
            count >= 3
        });
        let done = part.results.len();
        assert!((3..1_000).contains(&done), "{done} of 1000 ran after a stop at 3");
    }

    #[test]
    #[should_panic(expected = "run 5 broke")]
    fn a_workers_panic_reaches_the_caller() {
        let seed_loop = SeedLoop { threads: 2, name: "test-seeds", fall_back: true };
        seed_loop.run(
            10,
            |i| {
                assert!(i != 5, "run 5 broke");
                i
            },
            &mut |_| false,
        );
    }
}
