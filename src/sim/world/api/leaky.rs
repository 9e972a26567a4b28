//! nginx's `limit_req`: a leaky bucket kept in milliseconds, copied from
//! `src/http/modules/ngx_http_limit_req_module.c` (`ngx_http_limit_req_lookup`
//! and `ngx_http_limit_req_account`).
//!
//! nginx keeps, per key, the `excess` in thousandths of a request and the
//! millisecond `last` of the latest admitted request. The rate is kept as
//! thousandths of a request per second (`rate=10r/s` is 10,000; `r/m` is
//! divided by 60, truncated). A request at millisecond `now` computes
//!
//! ```text
//! excess = max(0, excess - rate * (now - last) / 1000 + 1000)
//! ```
//!
//! (integer arithmetic, `now - last` clamped at 0) and is refused when that
//! passes `burst * 1000`, leaving the state as it was: a refusal is free.
//! Otherwise the excess is stored, `last` moves to `now`, and the request is
//! delayed by `excess * 1000 / rate` ms: it is held that long before it runs
//! (`burst` queues), unless `nodelay` lets it run at once. The first request
//! of a key finds no state: excess 0, no delay. Without `burst` an admitted
//! request has excess 0, so nothing is ever delayed: requests closer than
//! one interval (1 / rate) after the last admitted one are refused.
//!
//! The model's `writes` per `window_ms` is the rate: `rate=10r/s` is 10 per
//! 1,000 ms, `rate=30r/m` 30 per 60,000 ms (so 500 thousandths per second,
//! as nginx truncates it). nginx reads its clock in whole milliseconds
//! (`ngx_current_msec`), and so does the model.

use std::time::Duration;

/// One key's bucket, in nginx's units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leaky {
    /// Thousandths of a request per second.
    rate: u64,
    /// `burst * 1000`.
    burst: u64,
    nodelay: bool,
    /// The wait told for a bucket that never drains (a zero rate).
    window: Duration,
    /// `None` until the first request; then (excess, last admitted ms).
    state: Option<(u64, u64)>,
}

/// What the bucket does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leak {
    /// Admitted; it runs after `delay` (zero: at once).
    Admitted { delay: Duration },
    /// Refused; a request would be admitted after `wait`.
    Refused { wait: Duration },
}

/// A duration's whole milliseconds (nginx's `ngx_current_msec`).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Leaky {
    /// `limit` requests per `window`, nginx's `burst` and `nodelay`.
    pub(crate) fn new(limit: u32, window: Duration, burst: u32, nodelay: bool) -> Leaky {
        let rate = u64::from(limit).saturating_mul(1_000_000) / millis(window).max(1);
        Leaky { rate, burst: u64::from(burst).saturating_mul(1_000), nodelay, window, state: None }
    }

    /// The excess a request at millisecond `now` would leave:
    /// `max(0, excess - rate * (now - last) / 1000 + 1000)`, 0 for the first.
    fn excess_at(&self, now: u64) -> u64 {
        let Some((excess, last)) = self.state else { return 0 };
        let drained = u128::from(self.rate) * u128::from(now.saturating_sub(last)) / 1_000;
        let left = (u128::from(excess) + 1_000).saturating_sub(drained);
        u64::try_from(left).unwrap_or(u64::MAX)
    }

    /// The first millisecond at which `rate * (t - last) / 1000` reaches `drained`.
    fn drained_by(&self, drained: u64) -> Option<Duration> {
        let (_, last) = self.state?;
        let elapsed = (u128::from(drained) * 1_000).div_ceil(u128::from(self.rate.max(1)));
        Some(Duration::from_millis(u64::try_from(u128::from(last) + elapsed).unwrap_or(u64::MAX)))
    }

    /// One request arrives at `now`.
    pub(crate) fn hit(&mut self, now: Duration) -> Leak {
        let ms = millis(now);
        let excess = self.excess_at(ms);
        if self.rate == 0 {
            return Leak::Refused { wait: self.window };
        }
        if excess > self.burst {
            // Admitted once the excess a request would leave is down to `burst`.
            let (stored, _) = self.state.expect("a first request leaves no excess");
            let at = self.drained_by(stored + 1_000 - self.burst).expect("the bucket has a state");
            return Leak::Refused { wait: at.saturating_sub(now) };
        }
        self.state = Some((excess, ms));
        let delay = if self.nodelay { 0 } else { excess.saturating_mul(1_000) / self.rate };
        Leak::Admitted { delay: Duration::from_millis(delay) }
    }

    /// Requests admitted now, back to back (at once or delayed), and until
    /// the bucket is empty again (a request would leave no excess).
    pub(crate) fn standing(&self, now: Duration) -> (u32, Duration) {
        if self.rate == 0 {
            return (0, self.window);
        }
        let excess = self.excess_at(millis(now));
        let room = if excess > self.burst { 0 } else { (self.burst - excess) / 1_000 + 1 };
        let empty = self.state.and_then(|(stored, _)| self.drained_by(stored + 1_000));
        (u32::try_from(room).unwrap_or(u32::MAX), empty.map_or(Duration::ZERO, |at| at.saturating_sub(now)))
    }
}

/// nginx's own error page for `status` (`ngx_http_special_response.c`),
/// as limit_req's refusals carry it: its reason phrase for 503 and 429,
/// the standard one for any other status.
pub(crate) fn nginx_page(status: u16) -> String {
    let reason = match status {
        503 => "Service Temporarily Unavailable",
        other => http::StatusCode::from_u16(other).ok().and_then(|s| s.canonical_reason()).unwrap_or("Error"),
    };
    format!(
        "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n<center><h1>{status} {reason}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn at_once() -> Leak {
        Leak::Admitted { delay: Duration::ZERO }
    }

    #[test]
    fn without_burst_one_request_per_interval_and_refusals_are_free() {
        // rate=10r/s: one request per 100 ms.
        let mut l = Leaky::new(10, ms(1_000), 0, false);
        assert_eq!(l.hit(ms(0)), at_once());
        assert_eq!(l.hit(ms(50)), Leak::Refused { wait: ms(50) });
        assert_eq!(l.hit(ms(99)), Leak::Refused { wait: ms(1) }, "the refusal at 50 ms took nothing");
        assert_eq!(l.hit(ms(100)), at_once());
        assert_eq!(l.hit(ms(5_000)), at_once(), "a drained bucket admits at once");
    }

    #[test]
    fn burst_admits_and_delays_the_excess_nodelay_serves_it_at_once() {
        let mut delayed = Leaky::new(10, ms(1_000), 3, false);
        let mut nodelay = Leaky::new(10, ms(1_000), 3, true);
        let (d, n): (Vec<_>, Vec<_>) = (0..5).map(|_| (delayed.hit(ms(0)), nodelay.hit(ms(0)))).unzip();
        // The first has no excess; each next one excess 1, 2, 3 requests: 100, 200, 300 ms.
        let delays: Vec<_> = [0, 100, 200, 300].iter().map(|&m| Leak::Admitted { delay: ms(m) }).collect();
        assert_eq!(d[..4], delays[..]);
        assert_eq!(n[..4], [at_once(); 4]);
        // The fifth would leave an excess of 4 > burst 3: refused until 100 ms have drained one.
        assert_eq!(d[4], Leak::Refused { wait: ms(100) });
        assert_eq!(n[4], Leak::Refused { wait: ms(100) });
        assert_eq!(delayed.hit(ms(100)), Leak::Admitted { delay: ms(300) });
    }

    #[test]
    fn whole_milliseconds_and_a_per_minute_rate_truncate_as_nginx_does() {
        // rate=30r/m: 500 thousandths per second, one request per 2 s.
        let mut l = Leaky::new(30, ms(60_000), 0, false);
        assert_eq!(l.hit(Duration::from_micros(1_999_999)), at_once());
        // 1,999.999 ms is millisecond 1,999: the next is due at 3,999 ms.
        assert_eq!(l.hit(ms(3_998)), Leak::Refused { wait: ms(1) });
        assert_eq!(l.hit(Duration::from_micros(3_999_100)), at_once());
    }

    #[test]
    fn standing_counts_the_room_and_the_time_to_empty() {
        let mut l = Leaky::new(10, ms(1_000), 2, false);
        assert_eq!(l.standing(ms(0)), (3, Duration::ZERO));
        l.hit(ms(0));
        l.hit(ms(0));
        assert_eq!(l.standing(ms(0)), (1, ms(200)));
        assert_eq!(l.standing(ms(150)), (2, ms(50)));
        assert_eq!(l.standing(ms(300)), (3, Duration::ZERO));
    }

    #[test]
    fn the_error_page_is_nginxs() {
        assert!(nginx_page(503).contains("<title>503 Service Temporarily Unavailable</title>"));
        assert!(nginx_page(429).contains("<h1>429 Too Many Requests</h1>"));
    }

    #[test]
    fn a_zero_rate_refuses_everything() {
        let mut l = Leaky::new(0, ms(1_000), 5, false);
        assert_eq!(l.hit(ms(0)), Leak::Refused { wait: ms(1_000) });
        assert_eq!(l.standing(ms(0)), (0, ms(1_000)));
    }
}
