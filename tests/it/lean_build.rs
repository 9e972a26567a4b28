//! The lean production build: with `default-features = false` a library
//! user compiles the retry core and the driver, never the harness's
//! turmoil, the scenario files' toml or the command line's clap and
//! allocator (mimalloc, a C library).

use std::process::Command;

const HARNESS_ONLY: [&str; 5] = ["turmoil", "clap", "toml", "proptest", "mimalloc"];

/// The crates `cargo tree` lists as normal dependencies, deduplicated.
fn normal_dependencies(features: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(cargo)
        .args(["tree", "--offline", "--manifest-path", manifest, "-e", "normal", "--prefix", "none"])
        .args(features)
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn without_default_features_no_harness_crate_is_compiled() {
    let lean = normal_dependencies(&["--no-default-features"]);
    let found: Vec<_> = HARNESS_ONLY.iter().filter(|c| lean.iter().any(|n| n == *c)).collect();
    assert!(found.is_empty(), "the lean build pulls in {found:?}: gate them behind the `sim` or `cli` feature");
    // What the driver needs is there.
    for needed in ["hyper", "hyper-util", "tokio", "getrandom"] {
        assert!(lean.iter().any(|n| n == needed), "{needed} missing from {lean:?}");
    }
    // Negative control: the default build has them all, so the check can fail.
    let full = normal_dependencies(&[]);
    for c in HARNESS_ONLY {
        assert!(full.iter().any(|n| n == c), "{c} not in the default build: {full:?}");
    }
}
