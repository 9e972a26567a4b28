//! The lean production build: with `default-features = false` a library
//! user compiles the retry core and the driver, never the harness's
//! turmoil, the scenario files' toml or the command line's clap and
//! allocator (mimalloc, a C library).

use std::process::Command;

const HARNESS_ONLY: [&str; 5] = ["retrysim-turmoil", "clap", "toml", "proptest", "mimalloc"];

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

/// The lines `cargo tree ARGS | sed 's/ (\*)$//' | sort -u | wc -l` counts:
/// every crate of the tree once, retrysim included.
fn crates_in_the_tree(args: &[&str]) -> usize {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(cargo)
        .args(["tree", "--offline", "--manifest-path", manifest])
        .args(args)
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: std::collections::BTreeSet<&str> = text.lines().map(|l| l.strip_suffix(" (*)").unwrap_or(l)).collect();
    lines.len()
}

#[test]
fn the_lean_build_table_counts_the_crates_the_commands_count() {
    // Each row of the table, the `cargo tree` arguments its page writes
    // beside it.
    const ROWS: [(&str, &[&str]); 2] = [
        ("`default-features = false`", &["--no-default-features", "-e", "normal", "--prefix", "none"]),
        ("default features", &["-e", "normal", "--prefix", "none"]),
    ];
    let (page, section) = crate::readme::page_and_section("A lean production build");
    let table: Vec<Vec<&str>> = section
        .lines()
        .skip_while(|l| !l.starts_with("| build | crates in the tree |"))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    assert_eq!(
        table.iter().map(|r| r[0]).collect::<Vec<_>>(),
        ROWS.map(|(build, _)| build),
        "{page}: the table's rows"
    );
    let mut stale = Vec::new();
    for ((build, args), row) in ROWS.iter().zip(&table) {
        let command = format!("cargo tree {} | sed 's/ (\\*)$//' | sort -u | wc -l", args.join(" "));
        assert!(section.contains(&command), "{page} must write `{command}` beside the table");
        let counted = crates_in_the_tree(args);
        if row[1] != counted.to_string() {
            stale.push(format!(
                "the row {build} says {} crates in the tree; `{command}` (at the repository root) prints {counted} now: \
                 write {counted} in that row's \"crates in the tree\" cell of {page}",
                row[1]
            ));
        }
    }
    assert!(stale.is_empty(), "{page}'s lean build table is stale:\n{}", stale.join("\n"));
}
