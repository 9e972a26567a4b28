//! The model's self-check: every invariant judges the client, so a slip in
//! the simulated API itself (a limiter that stops counting something) would
//! pass unseen and weaken every check that rests on it. This replays the
//! ledger's arrivals through a small reference limiter, written apart from
//! `sim::world::api::limiter`, and compares each verdict the API gave.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::sim::run::runner::Report;
use crate::sim::world::api::LimiterKind;

/// One verdict of the API's limiter the reference disagrees with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelViolation {
    /// The arrival's number in the ledger.
    pub arrival: usize,
    /// What differed.
    pub message: String,
}

/// @fastify/rate-limit's fixed window, as its documentation states it: the
/// window opens at the first hit after the previous one closed, and every
/// hit in it counts, refused or not.
#[derive(Debug, Default)]
struct Window {
    start: Option<Duration>,
    hits: u64,
}

impl Window {
    /// Whether a hit at `at` is allowed under `limit` per `window`.
    fn hit(&mut self, at: Duration, limit: u64, window: Duration) -> bool {
        if self.start.is_none_or(|s| at >= s + window) {
            self.start = Some(at);
            self.hits = 0;
        }
        self.hits += 1;
        self.hits <= limit
    }
}

/// Replays the ledger through the reference fixed window, per account and
/// budget (writes: `POST`; reads: `GET`). Applies to a fixed-window limiter;
/// an arrival counts when it reached the limiter (the ledger names its
/// account: past the script, the route and the key), and the API refused it
/// there when it answered 429 with the rate-limit code (or none, an HTML page).
pub fn check_model(r: &Report) -> Vec<ModelViolation> {
    let api = &r.scenario_config.api;
    if api.limiter.kind != LimiterKind::FixedWindow {
        return Vec::new();
    }
    let window = Duration::from_millis(api.limiter.window_ms.max(1));
    let mut windows: BTreeMap<(&str, bool), Window> = BTreeMap::new();
    for (i, a) in r.ledger.arrivals.iter().enumerate() {
        let Some(account) = a.account.as_deref() else { continue };
        let write = a.method != "GET";
        let limit = u64::from(if write { api.limiter.writes } else { api.limiter.reads });
        let allowed = windows.entry((account, write)).or_default().hit(a.at, limit, window);
        let refused = a.status == 429 && a.code.as_deref().is_none_or(|c| c.eq_ignore_ascii_case("rate_limited"));
        if allowed == refused {
            let said = if refused { "refused" } else { "allowed" };
            let should = if allowed { "allow" } else { "refuse" };
            return vec![ModelViolation {
                arrival: i,
                message: format!(
                    "arrival {i} at {} ms ({} {}): the API {said} it, a fixed window of {limit} per {} ms would {should} it",
                    a.at.as_millis(),
                    a.method,
                    a.path,
                    window.as_millis()
                ),
            }];
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::run::runner::run;
    use crate::sim::run::scenario::named;

    #[test]
    fn the_reference_window_opens_at_the_first_hit_and_counts_refusals() {
        let (mut w, s) = (Window::default(), Duration::from_secs(1));
        let ms = Duration::from_millis;
        let verdicts: Vec<bool> = [400, 500, 600, 1_399, 1_400].iter().map(|&t| w.hit(ms(t), 2, s)).collect();
        assert_eq!(verdicts, [true, true, false, false, true]);
    }

    #[test]
    fn the_model_agrees_with_the_reference_and_a_slipped_window_does_not() {
        let mut s = named("blinkimg-1s").expect("a named scenario");
        assert_eq!(check_model(&run(&s, 7).expect("finishes")), []);
        s.api.window_admits_one_more = true;
        let found = check_model(&run(&s, 7).expect("finishes"));
        assert!(found.len() == 1 && found[0].message.contains("would refuse it"), "{found:?}");
    }
}
