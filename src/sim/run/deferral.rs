//! Brief 000's deferral: "On the thrown error, store the job request in your
//! own queue with its idempotency key, and return 202 Accepted to your user.
//! A worker can retry later with a longer budget. Because the key is fixed,
//! the retry is safe even if the first attempt reached the API."
//!
//! The fleet's workers are the interactive front end. When one gives up
//! because the advice is longer than its budget (`advice_too_long`,
//! `deadline_would_pass`), the job goes into a FIFO deferral queue with
//! its key, and the front end's answer is 202 (the job's record keeps the
//! front end's give-up; the report counts it as deferred). Background
//! workers take jobs from the queue, wait until the advice the front end
//! was given has passed, and run the job again under the background policy
//! with the same key. See
//! [`DeferralConfig`](crate::sim::run::scenario::DeferralConfig) for the knobs.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request};
use tokio::sync::Notify;

use crate::client::IDEMPOTENCY_KEY;
use crate::env::{Clock, seeded_rng};
use crate::locks::lock;
use crate::sim::run::job::{JobKind, JobOutcome, JobRecord, Run, request};
use crate::sim::run::scenario::Scenario;
use crate::sim::run::seed::derive;
use crate::sim::run::subject::Subject;
use crate::sim::world::timers::SimClock;
use crate::trace::{EventKind, Millis};

/// Give-ups that mean "the wait is longer than this caller can afford":
/// the work is fine, the budget is short.
pub(crate) fn deferrable(reason: &str) -> bool {
    matches!(reason, "advice_too_long" | "deadline_would_pass")
}

/// A job waiting for a background worker.
#[derive(Debug, Clone)]
struct Deferred {
    job: u32,
    /// The front-end worker that took the job (its requests' client label).
    worker: u32,
    kind: JobKind,
    key: Option<String>,
    /// Not before this (driver clock): the last answer's advice has passed.
    not_before: Duration,
    /// Background runs so far.
    passes: u32,
}

/// When a give-up's advice has passed: the give-up time plus the last
/// answer's advised wait (zero if it advised none). With `first` (the
/// `deferral-first-advice` defect), the first answer's instead.
fn advice_passes_at(record: &JobRecord, first: bool) -> Duration {
    let answer = |e: &crate::trace::Event| match &e.kind {
        EventKind::Answer { advice, .. } => Some(advice.wait_ms.map_or(Duration::ZERO, Millis::duration)),
        _ => None,
    };
    let events = &record.trace.events;
    let advised = if first { events.iter().find_map(answer) } else { events.iter().rev().find_map(answer) };
    Duration::from_millis(record.finished_ms).saturating_add(advised.unwrap_or_default())
}

#[derive(Debug, Default)]
struct State {
    items: VecDeque<Deferred>,
    /// Front-end workers still taking jobs.
    front_running: u32,
    /// Background workers running a job (they may put it back).
    busy: u32,
    records: Vec<JobRecord>,
    /// Jobs offered so far (for the `deferral-drops-jobs` defect).
    offered: u64,
}

/// The queue between the front end and the background workers.
#[derive(Debug)]
pub(crate) struct DeferralQueue {
    state: Mutex<State>,
    changed: Notify,
}

impl DeferralQueue {
    pub(crate) fn new(front_workers: u32) -> DeferralQueue {
        let state = State { front_running: front_workers, ..State::default() };
        DeferralQueue { state: Mutex::new(state), changed: Notify::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Queues a front-end give-up that waiting longer would fix. Only keyed
    /// and safe jobs: an unkeyed POST could run twice.
    pub(crate) fn offer(&self, record: &JobRecord, s: &Scenario) {
        let JobOutcome::GaveUp { reason } = &record.outcome else { return };
        if s.fleet.deferral.is_none() || !deferrable(reason) || record.kind == JobKind::Unsafe {
            return;
        }
        if record.kind == JobKind::Keyed && record.key.is_none() {
            return;
        }
        let item = Deferred {
            job: record.job,
            worker: record.worker,
            kind: record.kind,
            key: record.key.clone(),
            not_before: advice_passes_at(record, s.client.defects.deferral_first_advice),
            passes: 0,
        };
        let mut state = self.lock();
        state.offered += 1;
        // A deliberate defect (negative control): every other job offered,
        // the first included, is dropped.
        if s.client.defects.deferral_drops_jobs && state.offered % 2 == 1 {
            return;
        }
        state.items.push_back(item);
        drop(state);
        self.changed.notify_waiters();
    }

    /// A front-end worker ran out of jobs.
    pub(crate) fn front_worker_done(&self) {
        let mut s = self.lock();
        s.front_running = s.front_running.saturating_sub(1);
        drop(s);
        self.changed.notify_waiters();
    }

    /// The next deferred job; `None` once nothing more can arrive.
    async fn next(&self) -> Option<Deferred> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                if let Some(item) = s.items.pop_front() {
                    s.busy += 1;
                    return Some(item);
                }
                if s.front_running == 0 && s.busy == 0 {
                    return None;
                }
            }
            notified.await;
        }
    }

    fn finish(&self, record: JobRecord, again: Option<Deferred>) {
        let mut s = self.lock();
        s.busy -= 1;
        s.records.push(record);
        s.items.extend(again);
        drop(s);
        self.changed.notify_waiters();
    }

    /// Every background run, in the order they ended.
    pub(crate) fn take_records(&self) -> Vec<JobRecord> {
        std::mem::take(&mut self.lock().records)
    }
}

/// Background worker `i`: takes deferred jobs until the front end is done
/// and the queue is empty. Its records are numbered as worker
/// `fleet.workers + i` and labelled `bg<i> job-<n>`.
pub(crate) async fn background_worker(
    i: u32,
    client: &dyn Subject,
    clock: &SimClock,
    s: &Scenario,
    seed: u64,
    queue: &DeferralQueue,
) {
    let max_passes = s.fleet.deferral.as_ref().map_or(1, |d| d.max_passes);
    let mut rng = seeded_rng(derive(seed, "background", i as u64));
    while let Some(item) = queue.next().await {
        let now = clock.now();
        if item.not_before > now {
            clock.sleep(item.not_before - now).await;
        }
        let run = Run {
            subject: client,
            clock,
            request: keyed_request(s, &item),
            kind: item.kind,
            job: item.job,
            worker: item.worker,
            trace_label: format!("bg{i} job-{}", item.job),
            // Background runs are the harness's own: nobody cancels them.
            cancel: Default::default(),
        };
        let mut record = run.record(&mut rng).await;
        record.worker = s.fleet.workers + i;
        let again = match &record.outcome {
            JobOutcome::GaveUp { reason } if deferrable(reason) && item.passes + 1 < max_passes => {
                let first = s.client.defects.deferral_first_advice;
                Some(Deferred { not_before: advice_passes_at(&record, first), passes: item.passes + 1, ..item })
            }
            _ => None,
        };
        queue.finish(record, again);
    }
}

/// The front end's request again, under the key it was given.
fn keyed_request(s: &Scenario, item: &Deferred) -> Request<Bytes> {
    let mut req = request(s, item.kind, item.job, item.worker);
    if let Some(key) = &item.key {
        let value = HeaderValue::from_str(key).expect("generated keys are visible ASCII");
        req.headers_mut().insert(IDEMPOTENCY_KEY, value);
    }
    req
}

#[cfg(test)]
#[path = "deferral_tests.rs"]
mod tests;
