//! The `retrysim` binary: outputs, determinism across processes, and clear
//! errors with exit code 2 for bad input.

use crate::support::{retrysim, retrysim_ok as ok};

/// Bad input: exit code 2, no panic, and a message containing `hint`.
fn refused(args: &[&str], hint: &str) {
    let (code, _, err) = retrysim(args);
    assert_eq!(code, 2, "retrysim {args:?}: {err}");
    assert!(!err.contains("panicked"), "retrysim {args:?} panicked: {err}");
    assert!(err.contains(hint), "retrysim {args:?}: expected {hint:?} in: {err}");
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(args)).unwrap()
}

#[test]
fn explain_the_issue_example() {
    let v = json(&[
        "explain",
        "--status",
        "429",
        "-H",
        "retry-after: 120",
        "-H",
        "date: Sun, 06 Nov 1994 08:49:37 GMT",
        "--body",
        r#"{"error":{"code":"RATE_LIMITED"}}"#,
        "--now",
        "1994-11-06T08:49:37Z",
        "--elapsed",
        "3s",
        "--attempt",
        "2",
        "--policy",
        "interactive",
        "--seed",
        "7",
        "--format",
        "json",
    ]);
    assert_eq!(v["decision"], "give_up");
    assert_eq!(v["reason"], "advice_too_long");
    assert_eq!(v["class"], "throttled");
    assert_eq!(v["advice"]["source"], "header_seconds");
    assert_eq!(v["advice"]["valid"], true);
    assert_eq!(v["advice"]["wait_ms"], 120_000);
}

#[test]
fn explain_a_retry_a_date_and_an_invalid_header() {
    let v = json(&[
        "explain",
        "--status",
        "429",
        "-H",
        "retry-after: Sun, 06 Nov 1994 08:49:40 GMT",
        "-H",
        "date: Sun, 06 Nov 1994 08:49:37 GMT",
        "--body",
        r#"{"error":{"code":"RATE_LIMITED"}}"#,
        "--now",
        "1994-11-06T09:49:37Z",
        "--format",
        "json",
    ]);
    // The client's clock is an hour ahead; the server's Date corrects it.
    assert_eq!(v["decision"], "retry");
    assert_eq!(v["advice"]["source"], "header_date");
    assert_eq!(v["advice"]["wait_ms"], 3000);
    assert_eq!(v["advice"]["server_date"], true);
    assert!(v["wait_ms"].as_u64().unwrap() >= 3000);

    let v = json(&[
        "explain",
        "--status",
        "429",
        "-H",
        "retry-after: +5",
        "--now",
        "2026-01-01T00:00:00Z",
        "--format",
        "json",
    ]);
    assert_eq!(v["advice"]["valid"], false);
    assert!(v["advice"]["error"].as_str().unwrap().contains("+5"));
    assert_eq!(v["advice"]["wait_ms"], serde_json::Value::Null);
    assert_eq!(v["class"], "unclear");

    let v = json(&["explain", "--status", "201", "--format", "json"]);
    assert_eq!(v["decision"], "done");
    let v = json(&["explain", "--transport-error", "maybe-arrived", "--no-key", "--format", "json"]);
    assert_eq!((v["decision"].as_str(), v["reason"].as_str()), (Some("give_up"), Some("not_replayable")));
}

/// Flask-Limiter's refusal: no error code, a valid `Retry-After`. The advice
/// makes it throttling (wait and retry), not an unclear 429.
#[test]
fn explain_a_429_with_advice_and_no_code() {
    let base = ["explain", "--status", "429", "--now", "2026-01-01T00:00:00Z", "--format", "json"];
    let v = json(&[&base[..], &["-H", "retry-after: 1"]].concat());
    assert_eq!(v["class"], "throttled");
    assert_eq!(v["decision"], "retry");
    assert!(v["wait_ms"].as_u64().unwrap() >= 1000);
    let v = json(&[&base[..], &["--body", r#"{"error":{"message":"slow down","retry_after_seconds":2}}"#]].concat());
    assert_eq!((v["class"].as_str(), v["advice"]["source"].as_str()), (Some("throttled"), Some("body_seconds")));
    // Neither advice nor a code: unclear.
    let v = json(&base);
    assert_eq!(v["class"], "unclear");
}

/// `explain` of a 429 with `header` and `body` at a fixed `--now`, under the
/// background policy, as JSON.
fn explain_429(header: &str, body: &str) -> serde_json::Value {
    let now = "2026-01-01T00:00:00Z";
    json(&[
        "explain",
        "--status",
        "429",
        "-H",
        header,
        "--body",
        body,
        "--now",
        now,
        "--format",
        "json",
        "--policy",
        "background",
    ])
}

/// A body the typed parser could not read once hid its terminal code.
/// Duplicate members are legal JSON (RFC 8259 §4), a byte-order mark is common,
/// and an out-of-range number spoils only its own hint.
#[test]
fn explain_a_terminal_code_in_a_body_with_duplicates_a_bom_or_a_huge_number() {
    for body in [
        r#"{"error":{"code":"QUOTA_EXCEEDED","message":"a","message":"b"}}"#,
        "\u{feff}{\"error\":{\"code\":\"QUOTA_EXCEEDED\"}}",
        r#"{"error":{"code":"QUOTA_EXCEEDED","retry_after_seconds":1e400}}"#,
        // A repeated code: the terminal one wins, wherever it stands.
        r#"{"error":{"code":"RATE_LIMITED","code":"QUOTA_EXCEEDED"}}"#,
    ] {
        let v = explain_429("retry-after: 5", body);
        assert_eq!(v["class"], "terminal", "{body}");
        assert_eq!((v["decision"].as_str(), v["reason"].as_str()), (Some("give_up"), Some("terminal")), "{body}");
    }
}

/// A real server's HTML 429 page is explained as sent: no code, the header's advice.
#[test]
fn explain_a_body_that_is_not_json() {
    let base = ["explain", "--status", "429", "--now", "2026-01-01T00:00:00Z"];
    let html = "<!doctype html><title>429 Too Many Requests</title>";
    let v = json(&[&base[..], &["-H", "retry-after: 1", "--body", html, "--format", "json"]].concat());
    assert_eq!((v["class"].as_str(), v["decision"].as_str()), (Some("throttled"), Some("retry")));
    let v = json(&[&base[..], &["--body", "{not json", "--format", "json"]].concat());
    assert_eq!(v["class"], "unclear");
    let text = ok(&[&base[..], &["--body", html]].concat());
    assert!(text.contains("class: unclear (429)"), "{text}");
    assert!(text.contains("body: not a JSON error envelope"), "{text}");
}

/// RFC 9110 §5.6.7 compares the date, not the year, with now + 50 years.
#[test]
fn explain_an_rfc850_date_by_the_50_year_rule() {
    let explain = |date: &str| explain_429(&format!("retry-after: {date}"), r#"{"error":{"code":"RATE_LIMITED"}}"#);
    // 1976-12-31 was a Friday: a past date, retry at once (with the spread).
    let v = explain("Friday, 31-Dec-76 23:59:59 GMT");
    assert_eq!((v["advice"]["valid"].as_bool(), v["advice"]["wait_ms"].as_u64()), (Some(true), Some(0)));
    assert_eq!(v["decision"], "retry");
    // Thursday is 2076's weekday, but the date is 1976's: invalid advice, not a 50-year wait.
    let v = explain("Thursday, 31-Dec-76 23:59:59 GMT");
    assert_eq!(v["advice"]["valid"], false);
    assert_eq!(v["decision"], "retry");
}

#[test]
fn bad_input_is_refused_with_exit_code_2() {
    refused(&["explain", "--status", "429", "-H", "retry-after 5"], "write it as 'name: value'");
    refused(&["explain", "--status", "429", "--now", "yesterday"], "RFC 3339");
    refused(&["explain", "--status", "429", "--elapsed", "three"], "--elapsed");
    refused(&["explain", "--status", "429", "--policy", "yolo"], "interactive, background, batch, standard");
    refused(&["explain", "--status", "99"], "99");
    refused(&["explain"], "--status");
    refused(&["run", "--scenario", "nope"], "blinkimg-1s");
    refused(&["run", "--scenario", "blinkimg-1s", "--policy", "nope"], "the presets are");
    refused(&["run", "--scenario", "blinkimg-1s", "--seed", "-1"], "unexpected argument '-1'");
    refused(&["run", "--config", "/nonexistent.toml"], "cannot read");
    refused(&["scenarios", "--show", "nope"], "the named scenarios are");
    refused(&["trace", "--scenario", "two-429-then-success", "--client", "3"], "workers 0..=0");
    refused(&["frobnicate"], "unrecognized subcommand");
}

#[test]
fn a_config_file_round_trips_and_bad_files_name_the_key() {
    let dir = std::env::temp_dir().join(format!("retrysim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(&good, ok(&["scenarios", "--show", "two-429-then-success"])).unwrap();
    let from_file = ok(&["run", "--config", good.to_str().unwrap(), "--format", "json"]);
    let named = ok(&["run", "--scenario", "two-429-then-success", "--format", "json"]);
    assert_eq!(from_file, named);

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[fleet]\nworkers = 5000\n").unwrap();
    refused(
        &["run", "--config", bad.to_str().unwrap()],
        "fleet.workers = 5000 is not allowed: write an integer in 1..=1024",
    );
    std::fs::write(&bad, "[api.limiter]\nwrites = \"many\"\n").unwrap();
    refused(&["run", "--config", bad.to_str().unwrap()], "writes");
    std::fs::write(&bad, "[policy]\nmax_retrys = 3\n").unwrap();
    refused(&["run", "--config", bad.to_str().unwrap()], "unknown field `max_retrys`");
    // Files that used to run silently: nothing set, a limiter
    // turned off by a zero window, a deadline that sends nothing.
    std::fs::write(&bad, "# nothing here\n").unwrap();
    refused(&["run", "--config", bad.to_str().unwrap()], "the scenario file sets nothing");
    let shown = ok(&["scenarios", "--show", "blinkimg-1s"]);
    std::fs::write(&bad, shown.replace("window_ms = 1000", "window_ms = 0")).unwrap();
    refused(
        &["run", "--config", bad.to_str().unwrap()],
        "api.limiter.window_ms = 0 is not allowed: write an integer in 1..=7776000000 (must be positive: 0 would turn the limiter off)",
    );
    let deadline = shown.lines().find(|l| l.starts_with("deadline = ")).expect("the policy has a deadline");
    std::fs::write(&bad, shown.replace(deadline, "deadline = \"0s\"")).unwrap();
    refused(
        &["run", "--config", bad.to_str().unwrap()],
        "policy.deadline = \"0s\" is not allowed: write a duration in 1ms..=90days (must be positive: a zero deadline sends nothing)",
    );
    // A run cut at its time_limit replays from the file it read, not by a name.
    let short = dir.join("short.toml");
    let shown = ok(&["scenarios", "--show", "deadline-wins"]);
    std::fs::write(&short, shown.replace("time_limit = \"1h\"", "time_limit = \"5s\"")).unwrap();
    let path = short.to_str().unwrap();
    refused(&["run", "--config", path, "--seed", "3"], &format!("replay: retrysim run --config {path} --seed 3"));
    refused(&["trace", "--config", path, "--seed", "3"], &format!("replay: retrysim trace --config {path} --seed 3"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_same_seed_is_byte_identical_across_processes() {
    for args in [
        ["run", "--scenario", "blinkimg-1s", "--format", "json"],
        ["trace", "--scenario", "lost-answers-with-key", "--seed", "3"],
    ] {
        assert_eq!(ok(&args), ok(&args), "retrysim {args:?}");
    }
    let v = json(&["run", "--scenario", "blinkimg-1s", "--seed", "7", "--format", "json"]);
    for key in [
        "scenario",
        "seed",
        "policy",
        "virtual_ms",
        "requests",
        "limited",
        "charged",
        "jobs",
        "succeeded",
        "gave_up",
        "retries",
        "slept_ms",
        "max_attempts_per_job",
    ] {
        assert!(v.get(key).is_some(), "run --format json lacks {key}");
    }
}

#[test]
fn scenarios_lists_every_name() {
    let out = ok(&["scenarios"]);
    for name in retrysim::testing::scenario::NAMES {
        assert!(out.lines().any(|l| l.starts_with(name)), "{name} missing from:\n{out}");
    }
}

/// A zero advice never means a 0 ms wait. Seed 529 drew
/// a spread under 1 ms, which was rounded down to "retry in 0.000s".
#[test]
fn explain_a_zero_advice_never_waits_zero() {
    let args = [
        "explain",
        "--status",
        "429",
        "-H",
        "retry-after: 0",
        "--body",
        r#"{"error":{"code":"RATE_LIMITED"}}"#,
        "--now",
        "2026-01-01T00:00:00Z",
        "--seed",
        "529",
    ];
    let text = ok(&args);
    assert!(text.starts_with("decision: retry in "), "{text}");
    assert!(!text.contains("retry in 0.000s"), "{text}");
    let v = json(&[&args[..], &["--format", "json"]].concat());
    assert_eq!(v["advice"]["wait_ms"], 0);
    assert!(v["wait_ms"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["why"]["jitter"].as_u64().unwrap() >= 1, "{v}");
}

/// A `Retry-After` of 2^64 - 1 seconds is 18446744073709551615000
/// ms, more than a u64 holds. JSON shows it exactly (as a string: above
/// 2^53 - 1 a JSON number is not read exactly by every parser), not
/// saturated 1000x too small; the text agrees.
#[test]
fn explain_a_huge_advice_exactly() {
    let args = [
        "explain",
        "--status",
        "429",
        "-H",
        "retry-after: 18446744073709551615",
        "--body",
        r#"{"error":{"code":"RATE_LIMITED"}}"#,
        "--now",
        "2026-01-01T00:00:00Z",
    ];
    let text = ok(&args);
    assert!(text.contains("advice: header_seconds 18446744073709551615.000s"), "{text}");
    let v = json(&[&args[..], &["--format", "json"]].concat());
    assert_eq!(v["reason"], "advice_too_long");
    assert_eq!(v["advice"]["wait_ms"], "18446744073709551615000");
    assert_eq!(v["detail"]["advised"], "18446744073709551615000");
    assert_eq!(v["detail"]["max_single_wait"], 60_000);
}
