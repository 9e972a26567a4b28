//! Imports `retrysim::internals` (hidden, no semver promise) for the timeline
//! renderer behind `--svg` (`tools::timeline`) and the comparison presets.
//!
//! The timeline pictures (`--svg`): their marks are the report's figures,
//! the blinkimg-1s difference between retrying on advice and pacing shows in
//! them, the same run gives the same bytes, and big runs stay small.

use std::collections::BTreeMap;
use std::process::Command;

use crate::support::{self, retrysim_ok};
use retrysim::internals::run::runner::{Report, RunOptions, Traces};
use retrysim::internals::run::scenario::{self, Scenario};
use retrysim::internals::tools::compare;
use retrysim::internals::tools::timeline::{MAX_LANES, Mark, Timeline};

/// A run that keeps no job's trace: the picture reads the ledger and the records.
fn figures(s: &Scenario, seed: u64) -> Report {
    support::run_under(RunOptions::new().traces(Traces::None), s, seed)
}

fn row(name: &str) -> Scenario {
    compare::preset("blinkimg-1s").expect("preset").row(name).expect("row").scenario.clone()
}

/// The sum of `data-n` over the `<rect>`s of each class (the svg crate
/// writes attributes in name order: `class` then `data-n`).
fn marks(svg: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for piece in svg.split("<rect class=\"").skip(1) {
        let (class, rest) = piece.split_once('"').expect("a closed class");
        let Some(n) = rest.strip_prefix(" data-n=\"") else { continue };
        let n: u64 = n.split('"').next().expect("a closed data-n").parse().expect("a count");
        *out.entry(class.to_owned()).or_insert(0) += n;
    }
    out
}

/// Every mark of the picture is one the report counts: attempts are its
/// requests, 429s its `limited`, give-ups and deferrals its own figures.
fn assert_marks_are_the_figures(r: &Report, svg: &str) {
    let m = marks(svg);
    let get = |mark: Mark| m.get(mark.class()).copied().unwrap_or(0);
    let attempts: u64 = Mark::ALL.iter().filter(|&&k| k < Mark::GaveUp).map(|&k| get(k)).sum();
    assert_eq!(attempts, r.requests, "{}: attempt marks {m:?}", r.scenario);
    let answered_429: u64 = Mark::ALL.iter().filter(|k| k.is_429()).map(|&k| get(k)).sum();
    assert_eq!(answered_429, r.limited, "{}", r.scenario);
    assert_eq!(get(Mark::GaveUp), r.gave_up_total, "{}", r.scenario);
    assert_eq!(get(Mark::Deferred), r.deferred, "{}", r.scenario);
    let ok = r.ledger.arrivals.iter().filter(|a| (200..300).contains(&a.status) && !a.lost).count() as u64;
    assert_eq!(get(Mark::Ok), ok, "{}", r.scenario);
    // The limiter panel counts the budget's requests of the busiest account:
    // all of them when every request is a write of one account.
    let one_budget = r.ledger.arrivals.iter().all(|a| a.method == "POST" && a.account == r.ledger.arrivals[0].account);
    if one_budget {
        assert_eq!(m.get("bar-ok").copied().unwrap_or(0) + m.get("bar-429").copied().unwrap_or(0), r.requests);
    }
}

#[test]
fn retry_after_jitter_is_refused_at_each_window_start_and_pacing_never() {
    let jitter = figures(&row("retry-after-jitter"), 7);
    let pacing = figures(&row("pacing"), 7);
    for r in [&jitter, &pacing] {
        assert_marks_are_the_figures(r, &Timeline::of_report(r).to_svg());
    }
    // Under jitter the herd is refused as each window opens: every window but
    // the last refuses some requests, and they come in its first third.
    let t = Timeline::of_report(&jitter);
    let bars = &t.windows.bars;
    assert!(bars.len() >= 3, "{bars:?}");
    assert!(bars[..bars.len() - 1].iter().all(|b| b.refused > 0 && b.allowed == b.capacity), "{bars:?}");
    for a in jitter.ledger.arrivals.iter().filter(|a| a.status == 429) {
        let at = a.at.as_millis() as u64;
        let window = bars.iter().find(|b| b.start_ms <= at && at < b.end_ms).expect("in a window");
        let third = (window.end_ms - window.start_ms) / 3;
        assert!(at - window.start_ms < third, "a 429 at {at} ms, late in the window from {}", window.start_ms);
    }
    // Pacing holds the fleet at the gate: no window refuses anything, and none goes past its capacity.
    let t = Timeline::of_report(&pacing);
    assert!(t.windows.bars.iter().all(|b| b.refused == 0 && b.allowed <= b.capacity), "{:?}", t.windows.bars);
    assert_eq!(marks(&t.to_svg()).get("r429"), None);
}

#[test]
fn marks_are_the_figures_with_faults_deferrals_and_give_ups() {
    for name in [
        "berlin-40-processes-limiter-partition",
        "deferral-queue-full",
        "queue-full-30s",
        "lost-answers-with-key",
        "quota-exceeded",
        "insufficient-credits-402",
    ] {
        let r = figures(&scenario::named(name).expect("named"), 7);
        assert_marks_are_the_figures(&r, &Timeline::of_report(&r).to_svg());
    }
}

#[test]
fn the_same_run_gives_the_same_bytes() {
    let s = scenario::named("berlin-40-workers").expect("named");
    let a = Timeline::of_report(&figures(&s, 3)).to_svg();
    let b = Timeline::of_report(&figures(&s, 3)).to_svg();
    assert_eq!(a, b);
    let other = Timeline::of_report(&figures(&s, 4)).to_svg();
    assert_ne!(a, other, "another seed is another picture");
}

fn snapshot(name: &str, scenario: &str) {
    let r = figures(&scenario::named(scenario).expect("named"), 7);
    let svg = Timeline::of_report(&r).to_svg();
    insta::with_settings!({ snapshot_path => "../../snapshots", prepend_module_to_snapshot => false, omit_expression => true }, {
        insta::assert_snapshot!(name, svg);
    });
}

#[test]
fn snapshot_single_client() {
    snapshot("timeline-two-429-then-success", "two-429-then-success");
}

#[test]
fn snapshot_fleet() {
    snapshot("timeline-berlin-40-workers", "berlin-40-workers");
}

#[test]
fn snapshot_faults() {
    snapshot("timeline-berlin-40-processes-limiter-partition", "berlin-40-processes-limiter-partition");
}

/// `docs/guide/timelines.md`: the 12,000-job picture's size is what the command
/// writes, its lanes are grouped, and its marks are still the figures.
#[test]
fn a_12000_job_run_draws_a_small_picture() {
    let text = std::fs::read_to_string("docs/fleet-12000.toml").expect("docs/fleet-12000.toml");
    let s = Scenario::from_toml(&text).expect("the guide's config parses");
    assert_eq!(s.fleet.jobs, 12_000);
    let r = figures(&s, 7);
    let t = Timeline::of_report(&r);
    let svg = t.to_svg();
    assert!(t.lanes.len() <= MAX_LANES && t.lanes.len() < s.fleet.workers as usize, "{} lanes", t.lanes.len());
    assert!(svg.len() < 1_000_000, "{} bytes", svg.len());
    assert_marks_are_the_figures(&r, &svg);
    let dir = std::env::temp_dir().join(format!("retrysim-timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fleet-12000.svg");
    retrysim_ok(&["run", "--config", "docs/fleet-12000.toml", "--svg", path.to_str().unwrap()]);
    let written = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(written, svg, "run --svg writes the library's picture");
    let kb = format!("{} KB", svg.len().div_ceil(1000));
    let (page, section) = crate::readme::page_and_section("Timelines");
    assert!(section.contains(&kb), "{page}'s Timelines section must give the picture's size; measured now: {kb}");
    let (thousands, rest) = (r.requests / 1000, r.requests % 1000);
    let drawn = format!("draws {thousands},{rest:03} requests in {}\nlanes", t.lanes.len());
    assert!(section.contains(&drawn), "{page}'s Timelines section is stale; measured now: {drawn:?}");
}

/// The guide's picture (`docs/guide/timelines.md`) is what the command
/// beside it writes.
#[test]
fn the_readme_picture_is_the_command_s() {
    let (page, section) = crate::readme::page_and_section("Timelines");
    let command = "retrysim compare --preset blinkimg-1s --seeds 1 --svg docs/compare-blinkimg-1s.svg";
    assert!(section.contains(command), "{page} must show the command beside the picture");
    assert!(section.contains("(../compare-blinkimg-1s.svg)"), "{page} must show docs/compare-blinkimg-1s.svg");
    let dir = std::env::temp_dir().join(format!("retrysim-compare-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("compare.svg");
    retrysim_ok(&[
        "compare",
        "--preset",
        "blinkimg-1s",
        "--seeds",
        "1",
        "--threads",
        "2",
        "--svg",
        path.to_str().unwrap(),
    ]);
    let fresh = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let committed = std::fs::read_to_string("docs/compare-blinkimg-1s.svg").expect("the committed picture");
    assert!(fresh == committed, "docs/compare-blinkimg-1s.svg is stale: run `{command}`");
    // The ideal row comes first, and retrying at once is refused thousands of times.
    let rows: Vec<&str> =
        fresh.split("<text x=\"8\" y=\"").skip(1).filter_map(|t| Some(t.split('>').nth(1)?.trim_start())).collect();
    assert!(rows.first().is_some_and(|r| r.starts_with("ideal: ")), "{rows:?}");
    let marks = marks(&fresh);
    assert!(marks["bar-429"] > 1000, "{marks:?}");
}

/// `run` and `trace` keep different traces but draw the same picture; a
/// file that cannot be written is a clear error with exit code 2.
#[test]
fn run_and_trace_draw_the_same_picture_and_a_bad_path_is_an_error() {
    let dir = std::env::temp_dir().join(format!("retrysim-run-trace-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("run.svg"), dir.join("trace.svg"));
    retrysim_ok(&["run", "--scenario", "deferral-queue-full", "--svg", a.to_str().unwrap()]);
    retrysim_ok(&["trace", "--scenario", "deferral-queue-full", "--svg", b.to_str().unwrap()]);
    let (a, b) = (std::fs::read_to_string(a).unwrap(), std::fs::read_to_string(b).unwrap());
    assert!(a == b && a.starts_with("<svg "), "run --svg and trace --svg differ");
    let bad = dir.join("missing").join("x.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["run", "--scenario", "two-429-then-success", "--svg", bad.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write --svg") && !err.contains("panicked"), "{err}");
}
