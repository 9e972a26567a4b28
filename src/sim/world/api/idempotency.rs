//! The idempotency store: what makes a retried POST safe to send twice.
//!
//! Keyed by (account, `Idempotency-Key`). A request is remembered from the
//! moment it starts running; its answer is stored when it completes and then
//! replayed, without running or charging again, to every repeat of the same
//! method, path and body until the retention ends (24 h for jobs, 14 min for
//! uploads; brief 002). A repeat that differs is a client bug (409 REUSED); a
//! repeat while the first still runs must wait (409 IN_PROGRESS). Answers that
//! failed are never stored: a refusal happens before the store is consulted.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

/// What makes two requests "the same" for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) body: Bytes,
}

/// A stored success: replayed verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredAnswer {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
}

/// What the store says about an arriving keyed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Never seen (or forgotten): run it.
    Fresh,
    /// Seen, succeeded, same request: replay this.
    Replay(StoredAnswer),
    /// Seen with a different method, path or body.
    Reused,
    /// The first request with this key is still running.
    InProgress,
}

#[derive(Debug, Clone)]
struct Entry {
    fingerprint: Fingerprint,
    /// `None` while running; then the answer and when it is forgotten.
    stored: Option<(StoredAnswer, Duration)>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct IdempotencyStore {
    entries: BTreeMap<(String, String), Entry>,
}

fn slot(scope: &str, key: &str) -> (String, String) {
    (scope.to_owned(), key.to_owned())
}

impl IdempotencyStore {
    /// Looks a key up at `now`, forgetting it first if its retention ended.
    /// A different request wins over "in progress": the mismatch is the bug to report.
    pub(crate) fn lookup(&mut self, scope: &str, key: &str, request: &Fingerprint, now: Duration) -> Lookup {
        let slot = slot(scope, key);
        let Some(entry) = self.entries.get(&slot) else {
            return Lookup::Fresh;
        };
        if entry.stored.as_ref().is_some_and(|(_, expires)| now >= *expires) {
            self.entries.remove(&slot);
            return Lookup::Fresh;
        }
        if entry.fingerprint != *request {
            return Lookup::Reused;
        }
        match &entry.stored {
            Some((answer, _)) => Lookup::Replay(answer.clone()),
            None => Lookup::InProgress,
        }
    }

    /// The request is accepted and starts running.
    pub(crate) fn start(&mut self, scope: &str, key: &str, request: Fingerprint) {
        self.entries.insert(slot(scope, key), Entry { fingerprint: request, stored: None });
    }

    /// The request completed with `answer`; replay it until `expires`.
    pub(crate) fn finish(&mut self, scope: &str, key: &str, answer: StoredAnswer, expires: Duration) {
        if let Some(entry) = self.entries.get_mut(&slot(scope, key)) {
            entry.stored = Some((answer, expires));
        }
    }

    /// The run was abandoned without an answer: forget the key so a retry can run.
    pub(crate) fn abandon(&mut self, scope: &str, key: &str) {
        self.entries.remove(&slot(scope, key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(body: &'static str) -> Fingerprint {
        Fingerprint { method: "POST".into(), path: "/v1/jobs".into(), body: Bytes::from_static(body.as_bytes()) }
    }

    fn ok() -> StoredAnswer {
        StoredAnswer { status: 201, body: Bytes::from_static(b"{}") }
    }

    const T0: Duration = Duration::ZERO;

    #[test]
    fn lifecycle_fresh_running_stored_forgotten() {
        let mut s = IdempotencyStore::default();
        assert_eq!(s.lookup("acme", "k", &fp("a"), T0), Lookup::Fresh);
        s.start("acme", "k", fp("a"));
        assert_eq!(s.lookup("acme", "k", &fp("a"), T0), Lookup::InProgress);
        s.finish("acme", "k", ok(), Duration::from_secs(10));
        assert_eq!(s.lookup("acme", "k", &fp("a"), Duration::from_secs(9)), Lookup::Replay(ok()));
        assert_eq!(s.lookup("acme", "k", &fp("a"), Duration::from_secs(10)), Lookup::Fresh);
    }

    #[test]
    fn a_different_request_is_reuse_even_while_running() {
        let mut s = IdempotencyStore::default();
        s.start("acme", "k", fp("a"));
        assert_eq!(s.lookup("acme", "k", &fp("b"), T0), Lookup::Reused);
        let mut other_path = fp("a");
        other_path.path = "/v1/uploads".into();
        assert_eq!(s.lookup("acme", "k", &other_path, T0), Lookup::Reused);
    }

    #[test]
    fn keys_are_scoped_per_account_and_abandon_forgets() {
        let mut s = IdempotencyStore::default();
        s.start("acme", "k", fp("a"));
        assert_eq!(s.lookup("other", "k", &fp("a"), T0), Lookup::Fresh);
        s.abandon("acme", "k");
        assert_eq!(s.lookup("acme", "k", &fp("a"), T0), Lookup::Fresh);
    }

    mod through_the_api {
        use super::super::super::testkit::*;
        use super::super::super::*;

        #[test]
        fn a_repeat_after_success_replays_without_charging() {
            let mut api = Api::new(small());
            let first = api.handle(&job(Some("k1"), "convert"), ms(0));
            let again = api.handle(&job(Some("k1"), "convert"), ms(5_000));
            assert_eq!((again.status(), again.body()), (first.status(), first.body()));
            assert_eq!(header(&again, "idempotent-replayed"), Some("true"));
            assert_eq!(header(&first, "idempotent-replayed"), None);
            let l = api.ledger();
            assert_eq!((l.charges["k1"], l.charged, l.credits_spent), (1, 1, 2));
            assert_eq!(l.arrivals[1].outcome, ArrivalOutcome::Replayed);
        }

        #[test]
        fn the_same_key_with_another_body_is_refused() {
            let mut api = Api::new(small());
            api.handle(&job(Some("k1"), "compress"), ms(0));
            let r = api.handle(&job(Some("k1"), "convert"), ms(1));
            assert_eq!((r.status().as_u16(), code(&r).as_str()), (409, "IDEMPOTENCY_KEY_REUSED"));
            assert_eq!(api.ledger().arrivals[1].outcome, ArrivalOutcome::KeyReused);
        }

        #[test]
        fn the_same_key_while_running_is_in_progress() {
            let mut cfg = small();
            cfg.processing_ms = 2_000;
            let mut api = Api::new(cfg);
            let Begin::Run(first) = api.begin(&job(Some("k1"), "compress"), ms(0)) else { panic!("runs") };
            let Begin::Answer(r) = api.begin(&job(Some("k1"), "compress"), ms(300)) else { panic!("answered") };
            assert_eq!((r.status().as_u16(), code(&r).as_str()), (409, "IDEMPOTENCY_IN_PROGRESS"));
            assert_eq!(api.ledger().arrivals[0].status, 0, "still running");
            assert_eq!(api.complete(first, ms(2_000)).status(), 201);
            assert_eq!(api.ledger().arrivals[0].outcome, ArrivalOutcome::Charged);
            let later = api.handle(&job(Some("k1"), "compress"), ms(2_500));
            assert_eq!(header(&later, "idempotent-replayed"), Some("true"));
            assert_eq!(api.ledger().arrivals[1].outcome, ArrivalOutcome::InProgressConflict);
        }

        #[test]
        fn jobs_are_kept_a_day_and_uploads_fourteen_minutes() {
            let mut api = Api::new(small());
            api.handle(&job(Some("j"), "compress"), ms(0));
            api.handle(&upload(Some("u")), ms(0));
            let replayed = |r: &Response<Bytes>| header(r, "idempotent-replayed").is_some();
            assert!(replayed(&api.handle(&upload(Some("u")), secs(14 * 60 - 1))));
            assert!(!replayed(&api.handle(&upload(Some("u")), secs(14 * 60))), "upload forgotten");
            assert!(replayed(&api.handle(&job(Some("j"), "compress"), secs(86_400 - 1))));
            assert!(!replayed(&api.handle(&job(Some("j"), "compress"), secs(86_400))), "job forgotten");
            assert_eq!(api.ledger().charges["j"], 2, "a forgotten key runs (and charges) again");
        }

        #[test]
        fn a_rate_limited_repeat_gets_429_not_a_replay() {
            let mut api = Api::new(small());
            api.handle(&job(Some("k1"), "compress"), ms(0));
            api.handle(&upload(None), ms(0));
            api.handle(&upload(None), ms(0));
            let r = api.handle(&job(Some("k1"), "compress"), ms(10));
            assert_eq!((r.status().as_u16(), code(&r).as_str()), (429, "RATE_LIMITED"));
            assert_eq!(header(&r, "idempotent-replayed"), None);
        }

        #[test]
        fn a_replay_skips_the_quota_and_credit_checks() {
            let mut cfg = small();
            cfg.accounts[0].credits = Some(2);
            cfg.accounts[0].monthly_quota = Some(2);
            let mut api = Api::new(cfg);
            assert_eq!(api.handle(&job(Some("k1"), "convert"), ms(0)).status(), 201);
            assert_eq!(api.handle(&job(Some("k2"), "compress"), ms(1)).status(), 429, "quota spent");
            let again = api.handle(&job(Some("k1"), "convert"), ms(2));
            assert_eq!((again.status().as_u16(), header(&again, "idempotent-replayed")), (201, Some("true")));
        }

        #[test]
        fn failed_requests_are_not_stored() {
            let mut cfg = small();
            cfg.accounts[0].credits = Some(0);
            let mut api = Api::new(cfg);
            assert_eq!(api.handle(&job(Some("k1"), "compress"), ms(0)).status(), 402);
            let r = api.handle(&job(Some("k1"), "convert"), ms(1));
            assert_eq!(r.status(), 402, "not KEY_REUSED: the 402 left nothing behind");
        }
    }
}
