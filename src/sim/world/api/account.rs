//! What an account may spend: request-rate budgets, credits, a monthly quota;
//! and the hourly cap for callers without a key.
//!
//! Credits and quota are *reserved* when a job is accepted and charged when it
//! completes. Reserving closes the gap between the two phases: two jobs running
//! at once cannot both pass the check for the last credit.

use std::time::Duration;

use super::config::{AccountConfig, LimiterConfig};
use super::endpoint::BudgetKind;
use super::limiter::{Limiter, Standing, Verdict};
use super::wallclock::WallTime;

/// What a running job holds: its price, and the month whose quota it counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reservation {
    cost: u64,
    month: (i64, u32),
}

/// Why a job that passed the limiter may still not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denial {
    /// The monthly quota would be exceeded; it renews after `wait`.
    Quota { wait: Duration },
    /// The balance cannot pay; only a top-up helps.
    Credits,
}

#[derive(Debug, Clone)]
pub(crate) struct Account {
    pub(crate) name: String,
    writes: Limiter,
    reads: Limiter,
    credits: Option<u64>,
    /// Credits charged or reserved by running jobs.
    committed: u64,
    monthly_quota: Option<u64>,
    /// The calendar month `quota_used` counts, on the server's wall clock.
    quota_month: Option<(i64, u32)>,
    quota_used: u64,
}

impl Account {
    pub(crate) fn new(config: &AccountConfig, limits: &LimiterConfig, admit_one_more: bool) -> Account {
        let window = Duration::from_millis(limits.window_ms);
        Account {
            name: config.name.clone(),
            writes: Limiter::new(limits.kind, limits.writes, window)
                .bursting(limits.burst, limits.nodelay)
                .admitting_one_more(admit_one_more),
            reads: Limiter::new(limits.kind, limits.reads, window)
                .bursting(limits.burst, limits.nodelay)
                .admitting_one_more(admit_one_more),
            credits: config.credits,
            committed: 0,
            monthly_quota: config.monthly_quota,
            quota_month: None,
            quota_used: 0,
        }
    }

    pub(crate) fn hit(&mut self, budget: BudgetKind, now: Duration) -> Verdict {
        match budget {
            BudgetKind::Write => self.writes.hit(now),
            BudgetKind::Read => self.reads.hit(now),
        }
    }

    pub(crate) fn standing(&self, budget: BudgetKind, now: Duration) -> Standing {
        match budget {
            BudgetKind::Write => self.writes.standing(now),
            BudgetKind::Read => self.reads.standing(now),
        }
    }

    /// Checks the quota, then the credits, for a job costing `cost`, and
    /// reserves both if they allow it. A free request always passes.
    pub(crate) fn reserve(&mut self, cost: u64, wall: WallTime) -> Result<Reservation, Denial> {
        let month = wall.month();
        if cost == 0 {
            return Ok(Reservation { cost, month });
        }
        if self.quota_month != Some(month) {
            self.quota_month = Some(month);
            self.quota_used = 0;
        }
        if self.monthly_quota.is_some_and(|quota| self.quota_used + cost > quota) {
            return Err(Denial::Quota { wait: wall.next_month().since(wall) });
        }
        if self.credits.is_some_and(|credits| self.committed + cost > credits) {
            return Err(Denial::Credits);
        }
        self.quota_used += cost;
        self.committed += cost;
        Ok(Reservation { cost, month })
    }

    /// Gives back a reservation whose job never ran: its credits, and its
    /// quota if its month is still the one counted (a month that has ended
    /// gives nothing back to the next).
    pub(crate) fn release(&mut self, reservation: Reservation) {
        if self.quota_month == Some(reservation.month) {
            self.quota_used = self.quota_used.saturating_sub(reservation.cost);
        }
        self.committed = self.committed.saturating_sub(reservation.cost);
    }

    /// Credits not yet charged or reserved; `None` when unlimited (unit tests only).
    #[cfg(test)]
    pub(crate) fn credits_left(&self) -> Option<u64> {
        self.credits.map(|c| c.saturating_sub(self.committed))
    }
}

/// Requests per wall-clock hour without a key. Every request counts, like the
/// fixed window; the refusal lasts until the hour ends.
#[derive(Debug, Clone)]
pub(crate) struct HourlyCap {
    cap: u32,
    hour: Option<u64>,
    count: u32,
}

impl HourlyCap {
    pub(crate) fn new(cap: u32) -> HourlyCap {
        HourlyCap { cap, hour: None, count: 0 }
    }

    pub(crate) fn hit(&mut self, wall: WallTime) -> Verdict {
        if self.hour != Some(wall.hour()) {
            self.hour = Some(wall.hour());
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        if self.count > self.cap {
            return Verdict::Refused { wait: wall.next_hour().since(wall) };
        }
        Verdict::Allowed
    }

    pub(crate) fn standing(&self, wall: WallTime) -> Standing {
        let used = if self.hour == Some(wall.hour()) { self.count } else { 0 };
        Standing { limit: self.cap, remaining: self.cap.saturating_sub(used), reset: wall.next_hour().since(wall) }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;

    /// 2026-11-01T00:00:00Z, the first instant of November.
    const NOVEMBER: u64 = 1_793_491_200;

    #[test]
    fn compress_costs_one_convert_two_and_an_empty_balance_is_402() {
        let mut cfg = small();
        cfg.accounts[0].credits = Some(3);
        let mut api = Api::new(cfg);
        assert_eq!(api.handle(&job(None, "compress"), ms(0)).status(), 201);
        assert_eq!(api.credits_left("acme"), Some(2));
        assert_eq!(api.handle(&job(None, "convert"), ms(1)).status(), 201);
        let r = api.handle(&job(None, "compress"), ms(2));
        assert_eq!((r.status().as_u16(), code(&r).as_str()), (402, "INSUFFICIENT_CREDITS"));
        assert_eq!(header(&r, "retry-after"), None, "waiting does not top up");
        assert_eq!((api.ledger().credits_spent, api.credits_left("acme")), (3, Some(0)));
    }

    #[test]
    fn refused_and_replayed_requests_cost_nothing() {
        let mut cfg = small();
        cfg.accounts[0].credits = Some(10);
        let mut api = Api::new(cfg);
        api.handle(&job(Some("k"), "convert"), ms(0));
        api.handle(&job(Some("k"), "convert"), ms(1));
        api.handle(&job(None, "convert"), ms(2));
        assert_eq!(api.handle(&job(None, "convert"), ms(3)).status(), 429);
        assert_eq!((api.ledger().credits_spent, api.credits_left("acme")), (4, Some(6)));
    }

    #[test]
    fn quota_at_month_end_advises_the_first_instant_of_next_month() {
        let mut cfg = small();
        cfg.epoch_unix_s = NOVEMBER - 2;
        cfg.clock_skew_ms = 500; // server wall clock: 2026-10-31T23:59:58.500Z
        cfg.accounts[0].monthly_quota = Some(1);
        let mut api = Api::new(cfg);
        assert_eq!(api.handle(&job(None, "compress"), ms(0)).status(), 201);
        let r = api.handle(&job(None, "compress"), ms(0));
        assert_eq!((r.status().as_u16(), code(&r).as_str()), (429, "QUOTA_EXCEEDED"));
        assert_eq!(header(&r, "retry-after"), Some("2"), "1.5 s to midnight, rounded up");
        // The body mirrors the header (now + 2 s), as the real error handler does.
        assert_eq!(json(&r)["error"]["resetAt"], "2026-11-01T00:00:00.500Z");
        assert_eq!(api.handle(&job(None, "compress"), ms(1_500)).status(), 201, "a new month");
    }

    #[test]
    fn a_run_that_dies_gives_back_its_quota_and_credits() {
        for (credits, quota) in [(Some(1), None), (None, Some(1))] {
            let mut cfg = small();
            (cfg.accounts[0].credits, cfg.accounts[0].monthly_quota) = (credits, quota);
            let mut api = Api::new(cfg);
            let Begin::Run(dies) = api.begin(&job(None, "compress"), ms(0)) else { panic!("the first job runs") };
            let held = if credits.is_some() { 402 } else { 429 };
            assert_eq!(api.handle(&job(None, "compress"), ms(1)).status(), held, "held by the running job");
            api.abort(dies, ms(2));
            assert_eq!(api.handle(&job(None, "compress"), ms(3)).status(), 201, "given back: {credits:?} {quota:?}");
        }
    }

    #[test]
    fn a_run_reserved_last_month_gives_back_nothing_of_this_months_quota() {
        let mut cfg = small();
        cfg.epoch_unix_s = NOVEMBER - 1; // server wall clock: 2026-10-31T23:59:59Z
        cfg.accounts[0].monthly_quota = Some(1);
        let mut api = Api::new(cfg);
        let Begin::Run(october) = api.begin(&job(None, "compress"), ms(0)) else { panic!("October's job runs") };
        assert_eq!(api.handle(&job(None, "compress"), secs(1)).status(), 201, "November's one job");
        // October's run dies in November: its quota was October's to give back.
        api.abort(october, secs(2));
        let r = api.handle(&job(None, "compress"), secs(3));
        assert_eq!((r.status().as_u16(), code(&r).as_str()), (429, "QUOTA_EXCEEDED"));
    }

    #[test]
    fn quota_mid_month_advises_days() {
        let mut cfg = small();
        cfg.accounts[0].monthly_quota = Some(0);
        cfg.advice = AdviceForm::HeaderDate;
        let mut api = Api::new(cfg);
        // 2026-10-08T09:00:00Z to 2026-11-01T00:00:00Z.
        let r = api.handle(&job(None, "compress"), ms(0));
        assert_eq!(header(&r, "retry-after"), Some("Sun, 01 Nov 2026 00:00:00 GMT"));
        assert_eq!(api.ledger().arrivals[0].retry_after, Some(secs(NOVEMBER - 1_791_450_000)));
        assert_eq!(api.handle(&upload(None), ms(1)).status(), 201, "a free request passes a spent quota");
    }

    #[test]
    fn anonymous_callers_hit_signup_required_until_the_hour_ends() {
        let mut cfg = small();
        cfg.anonymous_cap = Some(2);
        cfg.rate_limit_headers = true;
        let mut api = Api::new(cfg.clone());
        let anon = || request("POST", "/v1/uploads", &[], "{}");
        let at = secs(59 * 60); // 09:59:00 on the server's clock
        assert_eq!(api.handle(&anon(), at).status(), 201);
        assert_eq!(header(&api.handle(&anon(), at), "ratelimit-remaining"), Some("0"));
        let r = api.handle(&anon(), at);
        assert_eq!((r.status().as_u16(), code(&r).as_str()), (429, "SIGNUP_REQUIRED"));
        assert_eq!(header(&r, "retry-after"), Some("60"));
        assert_eq!(api.handle(&anon(), secs(3_600)).status(), 201, "a new hour");
        cfg.envelope = Envelope::Sume;
        let mut sume = Api::new(cfg);
        for _ in 0..2 {
            sume.handle(&anon(), at);
        }
        assert_eq!(code(&sume.handle(&anon(), at)), "signup_required");
    }
}
