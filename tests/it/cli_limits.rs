//! Imports `retrysim::internals` (hidden, no semver promise) for the limits the
//! command line enforces (`shards::MAX_SUMMARY_BYTES`, `compare::PRESETS`) and
//! `blinkimg_1s`.
//!
//! Careless and hostile input to the command line (issue 51): every limit
//! refused with exit 2 and a message naming the flag or the file, shard
//! summaries checked before they are merged, SIGINT and SIGTERM stopping
//! every command within a bound, and the user's text reaching the terminal
//! with its control characters escaped.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use retrysim::internals::checks::shards::MAX_SUMMARY_BYTES;
use retrysim::internals::run::scenario;

use crate::support::retrysim;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_retrysim"))
}

/// Bad input: exit code 2, no panic, every one of `hints` in the message.
fn refused(args: &[&str], hints: &[&str]) -> String {
    let (code, out, err) = retrysim(args);
    assert_eq!(code, 2, "retrysim {args:?}: {out}{err}");
    assert!(!err.contains("panicked"), "retrysim {args:?} panicked: {err}");
    for hint in hints {
        assert!(err.contains(hint), "retrysim {args:?}: expected {hint:?} in: {err}");
    }
    err
}

/// A fresh folder of this test's own under the tests' target directory.
fn folder(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-limits").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a test folder");
    dir
}

#[test]
fn hunt_jobs_and_compare_threads_share_one_documented_maximum() {
    for jobs in ["0", "257", "2000", "4294967295"] {
        refused(&["hunt", "--jobs", jobs, "--seeds", "3"], &["--jobs", jobs, "1..=256"]);
        refused(&["compare", "--threads", jobs, "--seeds", "1"], &["--threads", jobs, "1..=256"]);
    }
    // The negative control: the maximum itself runs (with no more threads
    // than seeds, so it is quick).
    let (code, out, err) = retrysim(&["hunt", "--jobs", "256", "--seeds", "2", "--determinism-every", "0"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains(" wall on 2 threads: "), "threads past the seeds only wait: {err}");
}

/// A well-formed shard of seeds `start..start + n` with no violations.
fn shard(start: &str, n: &str) -> String {
    format!(
        r#"{{"start":{start},"seeds_run":{n},"scenario_kind":"all","sabotage":[],"by_invariant":{{}},"violations":[]}}"#
    )
}

#[test]
fn hunt_merge_refuses_what_is_not_a_range_of_whole_shards_naming_the_file() {
    let dir = folder("merge");
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("a shard file");
        path.display().to_string()
    };
    let merge = |files: &[&str], hints: &[&str]| {
        let args: Vec<&str> = ["hunt", "--merge"].into_iter().chain(files.iter().copied()).collect();
        refused(&args, hints)
    };
    let a = file("a.json", &shard("1", "10"));
    merge(&[&file("garbage.json", "{\"start\": 1,")], &["garbage.json: not a hunt summary"]);
    merge(&[&file("empty.json", "")], &["empty.json: not a hunt summary"]);
    let past = file("past.json", &shard("18446744073709551615", "5"));
    merge(&[&past], &["past.json: start 18446744073709551615 with seeds_run 5 runs past the last seed"]);
    merge(&[&file("zero.json", &shard("1", "0"))], &["zero.json: seeds_run is 0"]);
    merge(&[&file("float.json", &shard("1", "2.5"))], &["float.json: seeds_run is 2.5, not a whole number"]);
    let bad = shard("1", "3").replace("\"violations\":[]", r#""violations":[1,"x",null]"#);
    merge(&[&file("bad.json", &bad)], &["bad.json: not a hunt summary", "expected a finding"]);
    let outside = shard("1", "3").replace(
        "\"violations\":[]",
        r#""violations":[{"seed":7,"kind":"fleet","invariant":"i","count":1,"message":"m","replay":"r"}]"#,
    );
    let outside = outside.replace("\"by_invariant\":{}", r#""by_invariant":{"i":1}"#);
    merge(
        &[&file("outside.json", &outside)],
        &["outside.json: violations[0] is for seed 7, outside the shard's seeds 1..=3"],
    );
    let counted = shard("1", "3").replace("\"by_invariant\":{}", r#""by_invariant":{"i":2}"#);
    merge(
        &[&file("counted.json", &counted)],
        &["counted.json: by_invariant counts 2 failing seeds for \"i\" but violations lists 0"],
    );
    merge(
        &[&a, &file("overlap.json", &shard("5", "10"))],
        &["a.json covers seeds 1..=10", "overlap.json covers 5..=14: the shards overlap"],
    );
    merge(&[&a, &file("gap.json", &shard("12", "10"))], &["gap.json covers 12..=21: the shards leave a gap"]);
    merge(&[&a, &a], &["the shards overlap"]);
    // Two shards whose counts sum to 2^64 seeds.
    let half = (1u64 << 63).to_string();
    let low = file("low.json", &shard("0", &half));
    merge(&[&low, &file("high.json", &shard(&half, &half))], &["more than 18446744073709551615 seeds in all"]);
    merge(&[&dir.join("missing.json").display().to_string()], &["cannot read ", "missing.json"]);
    // The negative control: whole shards that follow each other merge.
    let (code, out, err) = retrysim(&["hunt", "--merge", &file("b.json", &shard("11", "5")), &a]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("hunt (merged 2 shards): seeds 1..=15, 0 failing"), "{out}");
    let (code, out, err) =
        retrysim(&["hunt", "--merge", &low, &file("high1.json", &shard(&half, &(u64::MAX >> 1).to_string()))]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("hunt (merged 2 shards): seeds 0..=18446744073709551614, 0 failing"), "{out}");
}

#[test]
fn hunt_merge_refuses_a_file_over_its_size_before_reading_it() {
    let dir = folder("merge-size");
    let big = dir.join("big.json");
    // Sparse: it takes no disk, and is refused by its size alone.
    std::fs::File::create(&big).and_then(|f| f.set_len(MAX_SUMMARY_BYTES + 1)).expect("a sparse file");
    let began = Instant::now();
    refused(
        &["hunt", "--merge", big.to_str().unwrap()],
        &["big.json: over the 64 MiB (67108864 bytes) a shard summary may have (67108865 bytes)"],
    );
    // A file that never ends is cut off one byte past the bound.
    if std::path::Path::new("/dev/zero").exists() {
        refused(&["hunt", "--merge", "/dev/zero"], &["/dev/zero: over the 64 MiB"]);
    }
    assert!(began.elapsed() < Duration::from_secs(20), "{:?}", began.elapsed());
    // The negative control: one byte less is read (and refused for what it holds, not its size).
    let fits = dir.join("fits.json");
    std::fs::File::create(&fits).and_then(|f| f.set_len(MAX_SUMMARY_BYTES)).expect("a sparse file");
    let err = refused(&["hunt", "--merge", fits.to_str().unwrap()], &["fits.json: not a hunt summary"]);
    assert!(!err.contains("over the 64 MiB"), "{err}");
}

/// A run that goes on for hours (no writes admitted, unbounded retries,
/// an 80-day deadline): it warns first, on standard error.
fn endless(dir: &std::path::Path) -> String {
    let mut s = scenario::blinkimg_1s();
    s.api.limiter.writes = 0;
    s.policy.max_retries = u32::MAX;
    s.policy.deadline = Duration::from_secs(80 * 86_400);
    s.time_limit = Duration::from_secs(81 * 86_400);
    let path = dir.join("endless.toml");
    std::fs::write(&path, s.to_toml()).expect("a scenario file");
    path.display().to_string()
}

/// Starts `child`, waits (at most 30 s) for a line of `stream` for which
/// `ready` holds, sends `signal` and returns the exit code (None: the
/// signal killed it), how long it took to exit after the signal, and
/// everything it wrote to standard output and standard error.
fn stop_with(
    mut child: Child,
    from_stdout: bool,
    ready: &dyn Fn(&str) -> bool,
    signal: &str,
) -> (Option<i32>, Duration, String) {
    let (tx, rx) = channel();
    let pipe = |tx: std::sync::mpsc::Sender<String>, r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        })
    };
    let (out, err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let (tx_out, rx_out) = channel();
    let readers = [pipe(tx_out, Box::new(out)), pipe(tx, Box::new(err))];
    let watched = if from_stdout { &rx_out } else { &rx };
    // How soon the awaited line comes is not what is judged (the stop after
    // the signal is): a hunt of 256 threads on a loaded two-core machine at
    // nice 19 took more than 30 s to print its first line.
    let deadline = Instant::now() + AWAITED_WITHIN;
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| ready(l)) {
        match watched.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) => seen.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("no awaited line within {AWAITED_WITHIN:?}: {seen:?}");
            }
        }
    }
    let sent = Instant::now();
    let killed = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status();
    assert!(killed.is_ok_and(|s| s.success()), "kill -{signal}");
    let id = child.id();
    let (tx_done, rx_done) = channel();
    std::thread::spawn(move || tx_done.send(child.wait()));
    let status = match rx_done.recv_timeout(Duration::from_secs(30)) {
        Ok(status) => status.expect("an exit status"),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &id.to_string()]).status();
            panic!("no exit within 30 s of SIG{signal}");
        }
    };
    let took = sent.elapsed();
    for r in readers {
        let _ = r.join();
    }
    seen.extend(rx.try_iter());
    seen.extend(rx_out.try_iter());
    (status.code(), took, seen.join("\n"))
}

fn spawn(args: &[&str]) -> Child {
    bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("retrysim starts")
}

/// How long the child may take to print the line the signal waits for.
const AWAITED_WITHIN: Duration = Duration::from_secs(120);

/// The bound the issue asks for is a second; a loaded machine gets five.
const STOPPED_WITHIN: Duration = Duration::from_secs(5);

#[test]
fn a_signal_stops_run_and_trace_at_once() {
    let dir = folder("signals");
    let config = endless(&dir);
    for (command, signal, code) in [("run", "TERM", 143), ("trace", "TERM", 143), ("run", "INT", 130)] {
        let child = spawn(&[command, "--config", &config, "--max-wall", "0"]);
        let (status, took, text) = stop_with(child, false, &|l| l.starts_with("warning: time_limit"), signal);
        assert_eq!(status, Some(code), "{command} on SIG{signal}: {text}");
        assert!(took < STOPPED_WITHIN, "{command} took {took:?} to stop: {text}");
        assert!(text.contains(&format!("{command}: interrupted by SIG{signal}; the run did not finish")), "{text}");
    }
}

#[test]
fn a_signal_stops_a_hunt_on_the_most_threads() {
    // Every thread busy, and the signal after the first progress line. On
    // two cores 256 busy threads may starve the summary past the second
    // the hunt has: then the watchdog says so and ends it.
    let child = spawn(&["hunt", "--seeds", "100000000", "--jobs", "256"]);
    let (status, took, text) = stop_with(child, false, &|l| l.starts_with("hunt: "), "TERM");
    assert_eq!(status, Some(143), "{text}");
    assert!(took < STOPPED_WITHIN, "took {took:?}: {text}");
    let summary = text.contains("hunt: interrupted by SIGTERM after ");
    let cut = text.contains("hunt: interrupted by SIGTERM; the summary was not ready within a second");
    assert!(summary || cut, "{text}");
}

#[test]
fn a_signal_stops_a_compare_without_waiting_for_the_runs_under_way() {
    // The retry-at-once row's runs take about half a second each; 16 of them
    // are under way when the signal comes.
    let child = spawn(&["compare", "--preset", "blinkimg-60s", "--seeds", "1000", "--threads", "16"]);
    let (status, took, text) = stop_with(child, false, &|l| l.starts_with("compare: "), "TERM");
    assert_eq!(status, Some(143), "{text}");
    assert!(took < STOPPED_WITHIN, "took {took:?}: {text}");
    assert!(text.contains("compare: interrupted by SIGTERM after "), "the rows that finished: {text}");
}

#[test]
fn a_signal_right_after_serve_prints_its_address_gets_the_report() {
    let child = spawn(&["serve", "--scenario", "blinkimg-1s"]);
    let (status, took, text) = stop_with(child, true, &|l| l.starts_with("http://127.0.0.1:"), "TERM");
    assert_eq!(status, Some(0), "{text}");
    assert!(took < STOPPED_WITHIN, "took {took:?}: {text}");
    assert!(text.contains("\nscenario           blinkimg-1s"), "the report: {text}");
}

#[test]
fn unclear_inputs_get_messages_that_say_what_to_write() {
    refused(
        &["run", "--scenario", "blinkimg-1s", "--max-wall", "1ns"],
        &["--max-wall", "1ns is below the smallest bound, 1ms"],
    );
    refused(&["run", "--scenario", "blinkimg-1s", "--max-wall", "999us"], &["999us is below the smallest bound, 1ms"]);
    let before = ["explain", "--status", "429", "--now", "1969-12-31T23:59:59Z"];
    refused(&before, &["--now \"1969-12-31T23:59:59Z\": dates before 1970 are not accepted"]);
    let (code, _, err) = retrysim(&["explain", "--status", "429", "--now", "1970-01-01T00:00:00Z"]);
    assert_eq!(code, 0, "the epoch itself is accepted: {err}");
    refused(
        &["scenarios", "blinkimg-1s"],
        &["to print that scenario as TOML, write: retrysim scenarios --show blinkimg-1s"],
    );
    refused(&["scenarios", "no-such"], &["unknown scenario \"no-such\"", "--show NAME"]);
}

#[test]
fn compare_lists_its_presets_from_one_place_and_checks_svg_before_running() {
    let (_, help, _) = retrysim(&["compare", "--help"]);
    let err = refused(&["compare", "--preset", "nope"], &["nope"]);
    let list = retrysim::internals::tools::compare::PRESETS.join(", ");
    assert!(help.contains(&format!("[possible values: {list}]")), "{help}");
    assert!(err.contains(&format!("[possible values: {list}]")), "{err}");
    // A comparison of minutes, refused at once for its picture's folder.
    let began = Instant::now();
    let svg = folder("svg").join("no-such-folder").join("x.svg");
    let args = ["compare", "--preset", "blinkimg-60s", "--seeds", "1000", "--svg", svg.to_str().unwrap()];
    refused(&args, &["cannot write --svg", "no-such-folder does not exist"]);
    assert!(began.elapsed() < Duration::from_secs(10), "refused only after {:?}", began.elapsed());
    // The negative control: a picture whose folder exists is written.
    let svg = folder("svg-ok").join("x.svg");
    let (code, _, err) = retrysim(&["run", "--scenario", "blinkimg-1s", "--svg", svg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read_to_string(&svg).expect("the picture").starts_with("<svg"));
}

#[test]
fn control_characters_of_the_users_text_never_reach_the_terminal_raw() {
    let body = r#"{"error":{"code":"SLOW\u001b[2J\u0007DOWN"}}"#;
    let (code, out, err) = retrysim(&["explain", "--status", "429", "--body", body, "--now", "2026-01-01T00:00:00Z"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(out.contains("SLOW\\u{1b}[2J\\u{7}DOWN"), "shown escaped: {out}");
    // A scenario's name, whether the scenario is then run or refused.
    let dir = folder("control");
    let mut s = scenario::named("once-429-then-200").expect("a named scenario");
    s.name = "name\u{1b}]0;owned\u{7}\r".into();
    let path = dir.join("named.toml");
    std::fs::write(&path, s.to_toml()).expect("a scenario file");
    for command in ["run", "trace"] {
        let (code, out, err) = retrysim(&[command, "--config", path.to_str().unwrap()]);
        assert!(!format!("{out}{err}").contains(['\u{1b}', '\u{7}', '\r']), "{command}: {out:?} {err:?}");
        // Such a name may well be refused; if it runs, its output shows it escaped.
        if code == 0 {
            assert!(out.contains("name\\u{1b}]0;owned\\u{7}\\r"), "{command}: {out}");
        }
    }
}

#[test]
fn a_retry_after_past_u64_seconds_is_shown_as_sent() {
    let explain = |value: &str, format: &str| {
        let header = format!("retry-after: {value}");
        let args = ["explain", "--status", "429", "-H", &header, "--now", "2026-01-01T00:00:00Z", "--format", format];
        let (code, out, err) = retrysim(&args);
        assert_eq!(code, 0, "{err}");
        out
    };
    let text = explain("99999999999999999999999", "text");
    assert!(
        text.contains("advice: header_seconds 99999999999999999999999s as sent, held as 18446744073709551615.000s"),
        "{text}"
    );
    assert!(text.contains("asks for 99999999999999999999999s (more than the 18446744073709551615.000s"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&explain("099999999999999999999999", "json")).unwrap();
    assert_eq!(json["advice"]["sent_seconds"], "99999999999999999999999");
    // The negative control: the largest value held exactly is shown as it is.
    let text = explain("18446744073709551615", "text");
    assert!(text.contains("advice: header_seconds 18446744073709551615.000s\n"), "{text}");
    assert!(!text.contains("as sent"), "{text}");
}

#[test]
fn a_toml_error_on_a_dense_line_quotes_a_window_around_the_caret() {
    let dir = folder("toml");
    let path = dir.join("dense.toml");
    let dense = format!("name = \"x\"\nfoo = [{}1, @]\n", "1,".repeat(500_000));
    std::fs::write(&path, dense).expect("a scenario file");
    let err = refused(&["run", "--config", path.to_str().unwrap()], &["dense.toml: TOML parse error at line 2", "^"]);
    assert!(err.len() < 2_000, "{} bytes of error", err.len());
    let lines: Vec<&str> = err.lines().collect();
    let at = lines.iter().position(|l| l.starts_with("2 | ...")).unwrap_or_else(|| panic!("the quoted line: {err}"));
    let caret = lines[at + 1].find('^').expect("the caret line");
    assert_eq!(lines[at].as_bytes()[caret], b'@', "the caret under what it points at: {err}");
}
