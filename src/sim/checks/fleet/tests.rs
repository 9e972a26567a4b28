use super::*;
use crate::gate::aimd::{AimdConfig, Controller, Readiness, Signal};

const MS: fn(u64) -> Duration = Duration::from_millis;

#[test]
fn limit_steps_and_their_maximum() {
    let facts = vec![
        GateFact { at: MS(10), event: GateEvent::Changed { limit: 5, rate_milli: None, throttled: false } },
        GateFact { at: MS(20), event: GateEvent::Changed { limit: 3, rate_milli: None, throttled: true } },
    ];
    let steps = limit_steps(4, &facts);
    assert_eq!(steps, [(MS(0), 4), (MS(10), 5), (MS(20), 3)]);
    assert_eq!(max_limit_between(&steps, MS(0), MS(9)), 4);
    assert_eq!(max_limit_between(&steps, MS(15), MS(30)), 5);
    assert_eq!(max_limit_between(&steps, MS(21), MS(30)), 3);
}

/// The facts an AIMD gate records, from its real controller: ten
/// admissions 1 ms apart whenever the window and the pace allow, each
/// answered 5 ms later, the third with a throttle.
fn paced_facts(c: AimdConfig) -> Vec<GateFact> {
    let mut ctl = Controller::new(c);
    let (mut facts, mut due) = (Vec::new(), Vec::new());
    let (mut t, mut sent) = (Duration::ZERO, 0u64);
    while sent < 10 {
        due.sort();
        while due.first().is_some_and(|&(at, _)| at <= t) {
            let (at, n) = due.remove(0);
            let signal = if n == 2 { Signal::Throttled } else { Signal::Success };
            let changed = ctl.answer(at, signal);
            facts.push(GateFact { at, event: GateEvent::Answered { in_flight: ctl.in_flight(), signal } });
            if changed {
                let event = GateEvent::Changed { limit: ctl.limit(), rate_milli: ctl.rate_milli(), throttled: n == 2 };
                facts.push(GateFact { at, event });
            }
        }
        if ctl.readiness(t) == Readiness::Now {
            let (limit, rate_milli) = (ctl.limit(), ctl.rate_milli());
            ctl.admit(t);
            let event = GateEvent::Admitted { ticket: sent, in_flight: ctl.in_flight(), limit, rate_milli };
            facts.push(GateFact { at: t, event });
            due.push((t + MS(5), sent));
            sent += 1;
        }
        t += Duration::from_micros(100);
    }
    facts
}

#[test]
fn a_gate_that_holds_its_first_ticket_is_caught() {
    let queued = |at, ticket| GateFact { at: MS(at), event: GateEvent::Queued { ticket, depth: 1 } };
    let admitted = |at, ticket| GateFact {
        at: MS(at),
        event: GateEvent::Admitted { ticket, in_flight: 1, limit: 4, rate_milli: None },
    };
    assert_eq!(first_ticket_held(&[]), None, "a gate nobody used");
    assert_eq!(first_ticket_held(&[queued(7, 0), admitted(7, 0), queued(8, 1), admitted(90, 1)]), None);
    let late = first_ticket_held(&[queued(7, 0), admitted(8, 0)]);
    assert_eq!(late.as_deref(), Some("0, queued at 7 ms with nothing in flight: admitted at 8 ms"));
    let never = first_ticket_held(&[queued(7, 0), GateFact { at: MS(900), event: GateEvent::Left { ticket: 0 } }]);
    assert!(never.is_some_and(|m| m.ends_with("never admitted")));
}

#[test]
fn aimd_pace_passes_the_controller_and_catches_each_rule_broken() {
    let c = AimdConfig { initial_limit: 2, rate_increase_milli: 50_000, ..AimdConfig::default() };
    let facts = paced_facts(c);
    assert_eq!(aimd_paces_one(c, "g", &facts), None);
    // The throttle switched pacing on (β × the floor of 0.5/s, kept at the floor).
    let changed = facts.iter().position(|f| matches!(f.event, GateEvent::Changed { throttled: true, .. }));
    let i = changed.expect("a throttle changed the gate");
    assert!(matches!(facts[i].event, GateEvent::Changed { rate_milli: Some(500), .. }), "{:?}", facts[i]);
    let paced = facts.iter().filter(|f| matches!(f.event, GateEvent::Admitted { rate_milli: Some(_), .. }));
    assert!(paced.count() >= 2, "{facts:?}");
    let broken = |edit: &dyn Fn(&mut Vec<GateFact>)| {
        let mut f = facts.clone();
        edit(&mut f);
        aimd_paces_one(c, "g", &f).map(|v| v.message).unwrap_or_default()
    };
    // Two paced admissions a microsecond closer than the interval of 2 s.
    let too_close = broken(&|f| {
        let paced: Vec<usize> =
            (0..f.len()).filter(|&j| matches!(f[j].event, GateEvent::Admitted { rate_milli: Some(_), .. })).collect();
        f[paced[1]].at = f[paced[0]].at + MS(2_000) - Duration::from_micros(1);
    });
    assert!(too_close.contains("at least 2000000 µs apart"), "{too_close}");
    let still_off = broken(&|f| f[i].event = GateEvent::Changed { limit: 1, rate_milli: None, throttled: true });
    assert!(still_off.contains("pacing was off"), "{still_off}");
    let too_fast = broken(&|f| f[i].event = GateEvent::Changed { limit: 1, rate_milli: Some(2_000), throttled: true });
    assert!(too_fast.contains("a throttle moved the rate from None to 2000"), "{too_fast}");
    // The admission after it still states the rate the gate had.
    let restated = broken(&|f| {
        let j = (i..f.len()).find(|&j| matches!(f[j].event, GateEvent::Admitted { .. })).expect("an admission after");
        if let GateEvent::Admitted { rate_milli, .. } = &mut f[j].event {
            *rate_milli = Some(600);
        }
    });
    assert!(restated.contains("admitted under a rate of Some(600)"), "{restated}");
    let off = AimdConfig { rate: crate::gate::aimd::RateControl::Off, ..c };
    let on_anyway = aimd_paces_one(off, "g", &facts).map(|v| v.message).unwrap_or_default();
    assert!(on_anyway.contains("though the config's rate is off"), "{on_anyway}");
    // Paced from the start at 4/s, the throttle must leave at most 2.8/s.
    let fast = AimdConfig { initial_rate_milli: 4_000, ..c };
    let facts = paced_facts(fast);
    assert_eq!(aimd_paces_one(fast, "g", &facts), None);
    let cut_short = aimd_paces_one(AimdConfig { backoff_per_mille: 500, ..fast }, "g", &facts);
    assert!(cut_short.is_some_and(|v| v.message.contains("a throttle moved the rate from Some(4000) to 2800")));
    // Each success raises an aimd rate by 50/rate per second, capped at
    // twice the measured send rate: none is measured in the first 2 s,
    // so the first success to change the gate (its limit) left the
    // throttle's 2.8/s.
    let raised = aimd_paces_one(fast, "g", &{
        let mut f = facts.clone();
        let j = f.iter().position(|f| matches!(f.event, GateEvent::Changed { throttled: false, .. }));
        let j = j.expect("a success changed the limit");
        if let GateEvent::Changed { rate_milli, .. } = &mut f[j].event {
            *rate_milli = Some(4_001);
        }
        f
    });
    let raised = raised.map(|v| v.message).unwrap_or_default();
    assert!(raised.contains("a success moved the rate from Some(2800) to 4001"), "{raised}");
}
