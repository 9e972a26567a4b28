//! Imports `retrysim::internals` (hidden, no semver promise) for the comparison
//! behind `retrysim compare` (`tools::compare`).
//!
//! The comparison: brief 002's findings hold on the medians, the Pacing gate
//! beats the seed's best policy and comes within 10% of the ideal, and the
//! `compare` command line behaves.

use std::sync::OnceLock;

use crate::support::retrysim;
use retrysim::internals::run::scenario::GateConfig;
use retrysim::internals::tools::compare::{self, Comparison, Preset, replay};

const SEEDS: u32 = 5;

/// Each comparison runs once per test binary, on two threads.
fn comparison(name: &'static str) -> &'static Comparison {
    static ONE_S: OnceLock<Comparison> = OnceLock::new();
    static SIXTY_S: OnceLock<Comparison> = OnceLock::new();
    let (cell, rows): (_, &[&str]) = match name {
        "blinkimg-1s" => (&ONE_S, &[]),
        // The three rows the pacing claim needs keep the test fast.
        "blinkimg-60s" => (&SIXTY_S, &["retry-after-jitter", "ideal", "pacing"]),
        _ => panic!("no cached comparison for {name}"),
    };
    cell.get_or_init(|| {
        let mut p = compare::preset(name).unwrap();
        if !rows.is_empty() {
            p.rows.retain(|r| rows.contains(&r.name.as_str()));
        }
        compare::run(&p, SEEDS, 2).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// The per-seed figures of `rows` and how to replay each run.
fn evidence(c: &Comparison, rows: &[&str]) -> String {
    let mut out =
        format!("preset {} (whole table: retrysim compare --preset {} --seeds {SEEDS})\n", c.preset, c.preset);
    for name in rows {
        let r = c.row(name).unwrap_or_else(|| panic!("no row {name}"));
        out.push_str(&format!("row {name}:\n{}\n", r.runs_text()));
        for run in &r.runs {
            out.push_str(&format!("  replay seed {}: {}\n", run.seed, replay(&c.preset, name, run.seed)));
        }
    }
    out
}

fn median<'a>(c: &'a Comparison, row: &str) -> &'a compare::RowSummary {
    c.row(row).unwrap_or_else(|| panic!("no row {row} in {}", c.preset))
}

#[test]
fn retry_at_once_sends_many_times_more_and_gives_up_on_jobs() {
    let c = comparison("blinkimg-1s");
    let at_once = median(c, "retry-at-once");
    for other in ["exponential-no-jitter", "exponential-full-jitter", "retry-after-jitter"] {
        let o = median(c, other);
        assert!(
            at_once.requests.median >= 5.0 * o.requests.median,
            "retry-at-once sent {} requests, not 5x {other}'s {}\n{}",
            at_once.requests.median,
            o.requests.median,
            evidence(c, &["retry-at-once", other])
        );
    }
    assert!(
        at_once.gave_up.median > 0.0 && at_once.charged.median < 120.0,
        "retry-at-once should give up on jobs\n{}",
        evidence(c, &["retry-at-once"])
    );
}

#[test]
fn retry_after_plus_jitter_sends_the_fewest_and_finishes_first() {
    let c = comparison("blinkimg-1s");
    let best = median(c, "retry-after-jitter");
    assert_eq!(best.gave_up.median, 0.0, "{}", evidence(c, &["retry-after-jitter"]));
    // The retrying policies of brief 002's table (not the ideal, not pacing).
    let others =
        ["retry-at-once", "exponential-no-jitter", "exponential-full-jitter", "no-key-10pct-lost", "key-10pct-lost"];
    for other in others {
        let o = median(c, other);
        assert!(
            best.requests.median < o.requests.median,
            "retry-after-jitter sent {} requests, {other} {}\n{}",
            best.requests.median,
            o.requests.median,
            evidence(c, &["retry-after-jitter", other])
        );
        // Retrying at once "finishes" first only by giving up on half the
        // jobs: first among the policies that complete every job.
        if o.gave_up.median == 0.0 {
            assert!(
                best.virtual_s.median < o.virtual_s.median,
                "retry-after-jitter took {} s, {other} {} s\n{}",
                best.virtual_s.median,
                o.virtual_s.median,
                evidence(c, &["retry-after-jitter", other])
            );
        }
    }
}

#[test]
fn full_jitter_sends_fewer_requests_than_no_jitter() {
    let c = comparison("blinkimg-1s");
    let (full, none) = (median(c, "exponential-full-jitter"), median(c, "exponential-no-jitter"));
    assert!(
        full.requests.median < none.requests.median,
        "full jitter {} requests, no jitter {}\n{}",
        full.requests.median,
        none.requests.median,
        evidence(c, &["exponential-full-jitter", "exponential-no-jitter"])
    );
}

#[test]
fn with_lost_answers_only_the_key_keeps_charges_to_jobs() {
    let c = comparison("blinkimg-1s");
    let (no_key, key) = (median(c, "no-key-10pct-lost"), median(c, "key-10pct-lost"));
    assert!(
        no_key.charged.median > 120.0,
        "no key charged {}\n{}",
        no_key.charged.median,
        evidence(c, &["no-key-10pct-lost"])
    );
    assert!(
        key.charged.min == 120.0 && key.charged.max == 120.0,
        "a key must charge exactly 120 on every seed\n{}",
        evidence(c, &["key-10pct-lost"])
    );
}

#[test]
fn the_ideal_row_meets_no_429_and_sends_one_request_per_job() {
    let c = comparison("blinkimg-1s");
    let ideal = median(c, "ideal");
    assert!(
        ideal.limited.max == 0.0 && ideal.requests.max == 120.0 && ideal.succeeded.min == 120.0,
        "the oracle must never be refused\n{}",
        evidence(c, &["ideal"])
    );
    // Four windows of 30: three full windows, then one round trip.
    assert!((3.0..3.1).contains(&ideal.virtual_s.median), "{}", evidence(c, &["ideal"]));
    for r in &c.rows {
        assert!(
            r.virtual_s.median >= 3.0 || r.gave_up.median > 0.0,
            "{} beat the window\n{}",
            r.policy,
            evidence(c, &[&r.policy])
        );
    }
}

fn pacing_holds(c: &Comparison) {
    let (pacing, rajitter, ideal) = (median(c, "pacing"), median(c, "retry-after-jitter"), median(c, "ideal"));
    let rows = ["pacing", "retry-after-jitter", "ideal"];
    assert!(
        pacing.requests.median < rajitter.requests.median,
        "pacing sent {} requests, retry-after-jitter {}\n{}",
        pacing.requests.median,
        rajitter.requests.median,
        evidence(c, &rows)
    );
    assert!(
        pacing.virtual_s.median <= 1.10 * ideal.virtual_s.median,
        "pacing took {} s, more than 10% over the ideal's {} s\n{}",
        pacing.virtual_s.median,
        ideal.virtual_s.median,
        evidence(c, &rows)
    );
    assert_eq!(pacing.gave_up.max, 0.0, "{}", evidence(c, &rows));
}

#[test]
fn pacing_beats_retry_after_jitter_and_nears_the_ideal_on_1s_windows() {
    pacing_holds(comparison("blinkimg-1s"));
}

#[test]
fn pacing_beats_retry_after_jitter_and_nears_the_ideal_on_60s_windows() {
    pacing_holds(comparison("blinkimg-60s"));
}

#[test]
fn pacing_without_rate_limit_headers_still_beats_retry_after_jitter() {
    // Only Retry-After: the gate holds the fleet on a refusal and learns the
    // window's capacity, so each window costs one probe, not one per worker.
    let full = compare::preset("blinkimg-1s").unwrap();
    let mut p = Preset::new("blinkimg-1s-no-headers", "blinkimg-1s without RateLimit-* headers");
    for name in ["retry-after-jitter", "pacing"] {
        let mut s = full.row(name).unwrap().scenario.clone();
        s.api.rate_limit_headers = false;
        p.push(name, s);
    }
    let c = compare::run(&p, SEEDS, 2).unwrap_or_else(|e| panic!("{e}"));
    let (pacing, rajitter) = (median(&c, "pacing"), median(&c, "retry-after-jitter"));
    let why = || {
        format!(
            "{}\n(the rows are blinkimg-1s's with api.rate_limit_headers = false: edit the TOML of --show)",
            evidence(&c, &["pacing", "retry-after-jitter"])
        )
    };
    assert!(pacing.requests.median < rajitter.requests.median, "{}", why());
    assert!(pacing.limited.median < rajitter.limited.median, "{}", why());
    assert!(pacing.virtual_s.median <= rajitter.virtual_s.median, "{}", why());
}

#[test]
fn the_result_does_not_depend_on_threads() {
    let mut p = compare::preset("blinkimg-1s").unwrap();
    p.rows.retain(|r| ["exponential-full-jitter", "ideal", "pacing"].contains(&r.name.as_str()));
    let one = compare::run(&p, 3, 1).unwrap();
    let three = compare::run(&p, 3, 3).unwrap();
    assert_eq!(one, three, "replay: retrysim compare --rows exponential-full-jitter,pacing --seeds 3 --threads 1");
}

#[test]
fn every_preset_has_an_ideal_row_and_the_table_shows_ratios() {
    for name in compare::PRESETS {
        let p = compare::preset(name).unwrap();
        assert!(p.rows.iter().any(|r| r.scenario.fleet.gate == GateConfig::Ideal), "{name}");
    }
    let c = comparison("blinkimg-1s");
    assert_eq!(median(c, "ideal").time_vs_ideal, Some(1.0));
    let table = c.render_table();
    for row in compare::blinkimg_1s().row_names() {
        assert!(table.contains(row), "{row} missing from\n{table}");
    }
    assert!(table.contains("time x") && table.contains("req x"), "{table}");
}

#[test]
fn bad_input_exits_2_and_lists_the_valid_values() {
    let (code, _, err) = retrysim(&["compare", "--preset", "nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("blinkimg-1s, blinkimg-60s, berlin") && !err.contains("panicked"), "{err}");
    let (code, _, err) = retrysim(&["compare", "--seeds", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--seeds") && err.contains("1..=1000"), "{err}");
    let (code, _, err) = retrysim(&["compare", "--format", "xml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("table") && err.contains("json") && err.contains("csv"), "{err}");
    let (code, _, err) = retrysim(&["compare", "--rows", "retry-at-twice"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("retry-at-once") && err.contains("pacing"), "{err}");
    let (code, _, err) = retrysim(&["compare", "--show", "nope"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn json_and_csv_carry_every_figure() {
    let (code, out, err) = retrysim(&["compare", "--rows", "pacing", "--seeds", "2", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["preset"], "blinkimg-1s");
    assert_eq!(v["seeds"], serde_json::json!([1, 2]));
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["policy"].as_str().unwrap()).collect::<Vec<_>>(), ["ideal", "pacing"]);
    let figures = [
        "virtual_s",
        "requests",
        "limited",
        "charged",
        "jobs",
        "gave_up",
        "first_attempt_429_rate",
        "p50_latency_ms",
        "p99_latency_ms",
    ];
    for f in figures {
        for k in ["median", "min", "max"] {
            assert!(rows[1][f][k].is_number(), "{f}.{k} in {}", rows[1]);
        }
    }
    assert_eq!(rows[1]["requests"]["median"], 120);
    assert!(rows[1]["time_vs_ideal"].is_number());

    let (code, out, err) = retrysim(&["compare", "--rows", "pacing", "--seeds", "2", "--format", "csv"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let head: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(&head[..2], ["preset", "policy"]);
    assert!(head.contains(&"virtual_s_median") && head.contains(&"p99_latency_ms_max"), "{}", lines[0]);
    assert!(lines.iter().all(|l| l.split(',').count() == head.len()), "{out}");
    assert!(lines[2].starts_with("blinkimg-1s,pacing,"), "{out}");
}

#[test]
fn show_prints_a_row_that_run_replays() {
    let (code, toml, err) = retrysim(&["compare", "--preset", "blinkimg-60s", "--show", "pacing"]);
    assert_eq!(code, 0, "{err}");
    let s = retrysim::internals::run::scenario::Scenario::from_toml(&toml).unwrap();
    assert_eq!(s, compare::blinkimg_60s().row("pacing").unwrap().scenario);
}

/// The comparison table of `docs/guide/comparing-policies.md` is `retrysim compare --format markdown`
/// (preset `blinkimg-1s`, seeds 1..=5), byte for byte. On a mismatch the
/// message holds the table to paste.
#[test]
fn the_readme_comparison_table_is_the_commands_output() {
    let table = comparison("blinkimg-1s").to_markdown();
    let (page, section) = crate::readme::page_and_section("Comparing policies");
    assert!(
        section.contains("`cargo run --release -- compare --format markdown`"),
        "{page} must name the command beside the table"
    );
    assert!(section.contains(&table), "{page}'s comparison table is stale; measured now:\n\n{table}");
}
