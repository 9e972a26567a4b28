//! `.github/workflows/hunt.yml` shards a deep hunt by seed range and merges
//! the shards' summaries. This runs the workflow's own `run:` blocks locally
//! (every shard of its matrix, then the merge) on a small range, and checks
//! the merged verdict against one unsharded hunt of the same range.

use std::path::{Path, PathBuf};
use std::process::Command;

const WORKFLOW: &str = include_str!("../../.github/workflows/hunt.yml");

/// The `run: |` block of the step named `name`, unindented.
fn run_block(name: &str) -> String {
    let lines: Vec<&str> = WORKFLOW.lines().collect();
    let step =
        lines.iter().position(|l| l.trim() == format!("- name: {name}")).unwrap_or_else(|| panic!("no step {name}"));
    let run = (step..lines.len()).find(|&i| lines[i].trim() == "run: |").expect("a run block");
    let indent = lines[run + 1].len() - lines[run + 1].trim_start().len();
    let mut block = String::new();
    for l in &lines[run + 1..] {
        if !l.trim().is_empty() && l.len() - l.trim_start().len() < indent {
            break;
        }
        block.push_str(l.get(indent..).unwrap_or(""));
        block.push('\n');
    }
    block
}

/// The matrix's shard numbers and the `SHARDS` it declares.
fn matrix() -> (Vec<u64>, u64) {
    let list = WORKFLOW.lines().find_map(|l| l.trim().strip_prefix("shard: [")).expect("a shard matrix");
    let shards: Vec<u64> =
        list.trim_end_matches(']').split(',').map(|n| n.trim().parse().expect("a shard number")).collect();
    let declared =
        WORKFLOW.lines().find_map(|l| l.trim().strip_prefix("SHARDS: ")).expect("SHARDS").parse().expect("n");
    (shards, declared)
}

fn bash(script: &str, dir: &Path, env: &[(&str, String)]) -> (i32, String, String) {
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("RETRYSIM", env!("CARGO_BIN_EXE_retrysim"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("bash runs");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

/// Runs every shard and the merge in a fresh directory; returns the merge's
/// exit code, its text verdict and the merged JSON.
fn shard_and_merge(dir: &str, seeds: u64, sabotage: &str) -> (i32, String, serde_json::Value) {
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let (shards, declared) = matrix();
    assert_eq!(shards, (0..declared).collect::<Vec<_>>(), "the matrix runs shards 0..SHARDS");
    let env = |shard: u64| {
        vec![
            ("SHARD", shard.to_string()),
            ("SHARDS", declared.to_string()),
            ("SEEDS", seeds.to_string()),
            ("SABOTAGE", sabotage.to_owned()),
        ]
    };
    let shard_block = run_block("Hunt a shard");
    for &shard in &shards {
        let (code, out, err) = bash(&shard_block, &dir, &env(shard));
        assert_eq!(code, 0, "shard {shard}:\n{out}\n{err}");
    }
    let (code, out, err) = bash(&run_block("Merge the shards"), &dir, &env(0));
    let merged = std::fs::read_to_string(dir.join("merged.json")).expect("merged.json");
    (code, format!("{out}{err}"), serde_json::from_str(&merged).expect("merged JSON"))
}

fn hunt(args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_retrysim")).args(args).output().expect("retrysim runs");
    (out.status.code().unwrap_or(-1), serde_json::from_slice(&out.stdout).expect("JSON"))
}

#[test]
fn the_workflows_shards_merge_into_the_unsharded_verdict() {
    // 47 seeds over 10 shards: shards of 5 and a short last one.
    let (code, text, merged) = shard_and_merge("hunt-workflow-sabotage", 47, "extra-attempt");
    assert_eq!(code, 1, "a failing shard fails the merge:\n{text}");
    let (single_code, single) = hunt(&["hunt", "--seeds", "47", "--sabotage", "extra-attempt", "--format", "json"]);
    assert_eq!(single_code, 1);
    assert_eq!(merged["seeds_run"], 47);
    assert_eq!(merged["start"], 1);
    assert_eq!(merged["violations"], single["violations"], "sharded and unsharded hunts agree");
    assert_eq!(merged["by_invariant"], single["by_invariant"]);
    let violations = single["violations"].as_array().expect("a list");
    assert!(!violations.is_empty(), "extra-attempt shows within 47 seeds");
    for v in violations {
        let replay = v["replay"].as_str().expect("a replay line");
        assert!(text.contains(&format!("replay: {replay}")), "{replay} missing from:\n{text}");
    }
    assert!(text.starts_with("hunt (merged 10 shards): seeds 1..=47,"), "{text}");
}

#[test]
fn a_clean_sharded_hunt_passes_and_a_gap_is_an_error() {
    let (code, text, merged) = shard_and_merge("hunt-workflow-clean", 23, "");
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("seeds 1..=23, 0 failing") && text.contains("no violations"), "{text}");
    assert_eq!(merged["violations"], serde_json::json!([]));
    // A missing shard leaves a gap: the merge refuses with a clear error.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hunt-workflow-clean/shards");
    let files: Vec<String> =
        ["shard-0.json", "shard-2.json"].iter().map(|f| dir.join(f).display().to_string()).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["hunt", "--merge", &files[0], &files[1]])
        .output()
        .expect("retrysim runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("shard-0.json covers seeds 1..=") && err.contains("the shards leave a gap"), "{err}");
    // A shard stopped by a signal covers no whole range: refused, not merged.
    let mut cut: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).expect("shard 0")).expect("JSON");
    cut["interrupted"] = "hunt: interrupted by SIGINT after 2 of 3 seeds".into();
    let cut_file = dir.join("shard-0-interrupted.json");
    std::fs::write(&cut_file, cut.to_string()).expect("written");
    let shard_1 = dir.join("shard-1.json").display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["hunt", "--merge", &cut_file.display().to_string(), &shard_1])
        .output()
        .expect("retrysim runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("an interrupted shard") && err.contains("run that shard again"), "{err}");
}
