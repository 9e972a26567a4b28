//! `retrysim hunt --work`: the work a hunt did, counted, after the verdict;
//! the verdict itself is the same with the flag and without it.

use crate::support::retrysim_ok;

/// The figures of one `work (...)` line: seeds, simulations, steps, host
/// polls, messages delivered, requests, timer wakes.
fn figures(line: &str) -> Vec<u64> {
    line.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().expect("a count")).collect()
}

#[test]
fn hunt_work_counts_after_an_unchanged_verdict() {
    let args = ["hunt", "--seeds", "6", "--start", "1", "--scenario-kind", "all", "--jobs", "2"];
    let plain = retrysim_ok(&args);
    assert!(!plain.contains("work ("), "the default output has no work line:\n{plain}");
    let counted = retrysim_ok(&[&args[..], &["--work"]].concat());
    let (verdict, work) = counted.split_at(counted.find("\nwork (").expect("work lines") + 1);
    assert_eq!(verdict.trim_end(), plain.trim_end(), "--work changed the verdict");
    let lines: Vec<&str> = work.lines().collect();
    assert!(lines[0].starts_with("work (all): 6 seeds over "), "{work}");
    assert!(lines[1..].iter().all(|l| l.starts_with("work (fleet)") || l.starts_with("work (single)")), "{work}");
    let all = figures(lines[0]);
    assert_eq!(all.len(), 7, "{}", lines[0]);
    // Every seed runs twice (determinism is checked on every seed).
    assert!(all[1] >= 12, "{}", lines[0]);
    assert!(all[2..].iter().all(|&n| n > 0), "{}", lines[0]);
    // A request reaches the API in a message the network delivered.
    assert!(all[4] >= all[5], "{}", lines[0]);
    // The kinds add up to the whole.
    let kinds: Vec<Vec<u64>> = lines[1..].iter().map(|l| figures(l)).collect();
    for i in 0..7 {
        assert_eq!(kinds.iter().map(|k| k[i]).sum::<u64>(), all[i], "figure {i}: {work}");
    }
    // Counts, not timings: the same on one thread.
    let one = retrysim_ok(&["hunt", "--seeds", "6", "--start", "1", "--scenario-kind", "all", "--jobs", "1", "--work"]);
    assert_eq!(one, counted);
}
