//! Deferral to a queue: a deferred job charged exactly once under its one
//! key (`deferred-once`), and the interactive path within its budget
//! (`interactive-budget`).

use super::*;

/// With deferral: every deferred job was run again in the background under
/// the one key its first attempt carried, every job that ended in success
/// was charged exactly once, and no job waited on the interactive path
/// longer than the interactive deadline (when the client is retrysim's own,
/// running the scenario's policy).
pub fn deferred_charged_once(r: &Report) -> Vec<FleetViolation> {
    if r.scenario_config.fleet.deferral.is_none() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let budget = r.scenario_config.policy.deadline.as_millis() as u64;
    let mut background: BTreeMap<u32, Vec<&JobRecord>> = BTreeMap::new();
    for d in &r.deferred_records {
        background.entry(d.job).or_default().push(d);
    }
    for j in &r.records {
        let waited = j.finished_ms - j.started_ms;
        // The budget is the scenario's policy, which retrysim's own client (a
        // traced run) runs under; a client of your own is held to the
        // deadline it promises by the black-box deadline check.
        if r.traced && waited > budget + crate::sim::checks::invariants::clock_slack_ms(&r.scenario_config) {
            out.push(v(
                Property::InteractiveBudget,
                format!("job {} waited {waited} ms on the interactive path, budget {budget} ms", j.job),
            ));
        }
        // Deferred as the front end defers (brief 000): a give-up that waiting
        // fixes, of a safe job or a keyed one that carried its key.
        let deferred = matches!(&j.outcome, JobOutcome::GaveUp { reason } if deferrable(reason))
            && j.kind != crate::sim::run::job::JobKind::Unsafe
            && !(j.kind == crate::sim::run::job::JobKind::Keyed && j.key.is_none());
        let runs = background.get(&j.job).map_or(&[][..], Vec::as_slice);
        if deferred && runs.is_empty() {
            out.push(v(Property::DeferredOnce, format!("job {} was deferred but never run again", j.job)));
        }
        let keys: BTreeSet<_> = j.attempt_keys.iter().chain(runs.iter().flat_map(|d| d.attempt_keys.iter())).collect();
        if keys.len() > 1 {
            out.push(v(
                Property::DeferredOnce,
                format!("job {}'s attempts carried {} different keys", j.job, keys.len()),
            ));
        }
        let last = runs.last().map_or(&j.outcome, |d| &d.outcome);
        if let (JobOutcome::Succeeded { .. }, Some(Some(key))) = (last, j.attempt_keys.first()) {
            let charges = r.ledger.charges.get(key).copied().unwrap_or(0);
            if charges != 1 {
                out.push(v(Property::DeferredOnce, format!("job {} succeeded and was charged {charges} times", j.job)));
            }
        }
    }
    for (key, &n) in &r.ledger.charges {
        if key != crate::sim::world::api::NO_KEY && n > 1 {
            out.push(v(Property::DeferredOnce, format!("key {} was charged {n} times", crate::trace::short_key(key))));
        }
    }
    // Per job, whatever keys it carried: each job creates at most one
    // charge, so more charges than jobs means a job was charged twice
    // (e.g. under a second key after a lost answer).
    if r.ledger.charged > r.jobs {
        out.push(v(
            Property::DeferredOnce,
            format!("{} charges for {} jobs: some job was charged twice", r.ledger.charged, r.jobs),
        ));
    }
    out
}
