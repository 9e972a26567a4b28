//! The book (`docs/book/`), the measurements (`docs/measurements/`) and
//! the claims every page makes about the crate's own files: each Rust block
//! a page shows is code that compiles (the outside crates', an example's, a
//! test's), each feature a page names is one `Cargo.toml` declares, each
//! `cargo run --example` a page or an example gives turns on the features
//! that example requires, the stated Rust version is `rust-version`, the
//! crate root lists every feature, and every measurement is stamped with a
//! commit. Negative controls: each parser is shown a page that breaks it.

use std::collections::{BTreeMap, BTreeSet};

use retrysim::internals::checks::blackbox::BlackBoxCheck;
use retrysim::internals::checks::invariants::Invariant;

use crate::readme::PAGES;

fn root_file(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

fn manifest() -> toml::Table {
    root_file("Cargo.toml").parse().expect("Cargo.toml parses")
}

/// The fenced blocks of `text` whose info string starts with `lang`, each
/// as its lines.
fn blocks<'a>(text: &'a str, lang: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        let fence = line.trim_start();
        match current.as_mut() {
            Some(block) if fence.starts_with("```") => {
                out.push(std::mem::take(block));
                current = None;
            }
            Some(block) => block.push(line),
            None if fence.starts_with("```") => {
                // Another language's block is skipped: its closing fence,
                // read as an opening one without a language, opens nothing.
                current = fence.trim_start_matches('`').starts_with(lang).then(Vec::new);
            }
            None => {}
        }
    }
    out
}

/// Lines of code, trimmed, without blank lines.
fn code_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    lines.into_iter().map(str::trim).filter(|l| !l.is_empty()).collect()
}

/// Every file whose code a page may show: the outside crates', the
/// examples, and the tests that compile a page's example.
fn compiled_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in ["tests/external-user", "tests/external-reqwest", "tests/typed-client/src", "examples"] {
        let mut stack = vec![format!("{}/{dir}", env!("CARGO_MANIFEST_DIR"))];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{d}: {e}")).flatten() {
                let p = entry.path();
                if p.is_dir() {
                    stack.push(p.to_string_lossy().into_owned());
                } else if p.extension().is_some_and(|e| e == "rs") {
                    out.push((p.to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()));
                }
            }
        }
    }
    out.push(("tests/it/real_servers.rs".into(), root_file("tests/it/real_servers.rs")));
    out
}

/// Whether `needle` is a run of consecutive lines of `hay`.
fn contains_run(hay: &[&str], needle: &[&str]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// The Rust blocks of `pages` that are not compiled code, or hide lines.
fn uncompiled_rust_blocks(pages: &[(&str, &str)], sources: &[(String, String)]) -> Vec<String> {
    let compiled: Vec<Vec<&str>> = sources.iter().map(|(_, text)| code_lines(text.lines())).collect();
    let mut problems = Vec::new();
    for (page, text) in pages {
        for block in blocks(text, "rust") {
            let shown = code_lines(block.iter().copied());
            if let Some(hidden) = shown.iter().find(|l| l.starts_with("# ") || **l == "#") {
                problems.push(format!("{page}: a rustdoc-hidden line shows on GitHub as text: {hidden:?}"));
            }
            if !compiled.iter().any(|file| contains_run(file, &shown)) {
                let first = shown.first().copied().unwrap_or("");
                problems.push(format!("{page}: the Rust block starting {first:?} is no compiled file's code"));
            }
        }
    }
    problems
}

#[test]
fn every_rust_block_of_the_documentation_is_compiled_code() {
    let sources = compiled_sources();
    let problems = uncompiled_rust_blocks(&PAGES, &sources);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let shown: usize = PAGES.iter().map(|(_, t)| blocks(t, "rust").len()).sum();
    assert!(shown >= 8, "only {shown} Rust blocks found: the parser is broken");
    // Negative controls: a made-up call, an ignored block, a hidden line.
    let made_up = [("made-up.md", "```rust,ignore\nlet x = my_retry_middleware(rng.draw());\n```\n")];
    assert_eq!(uncompiled_rust_blocks(&made_up, &sources).len(), 1);
    let hidden = [("hidden.md", "```rust\n# async fn f() {\nlet x = 1;\n# }\n```\n")];
    assert_eq!(uncompiled_rust_blocks(&hidden, &sources).len(), 2);
}

/// The features each page names: `features = ["a", "b"]`, `--features a,b`
/// and "feature `a`" / "features `a`".
fn named_features(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    // Only retrysim's own dependency lines: a page's Cargo.toml names the
    // features of other crates too (tokio's, a typed client's).
    for line in text.lines().filter(|l| l.trim_start().starts_with("retrysim")) {
        for part in line.split("features = [").skip(1) {
            let list = part.split(']').next().unwrap_or("");
            out.extend(list.split(',').map(|f| f.trim().trim_matches('"').to_owned()).filter(|f| !f.is_empty()));
        }
    }
    for part in text.split("--features ").skip(1) {
        let list = part.split([' ', '`', '\n', ')']).next().unwrap_or("");
        out.extend(list.split(',').map(|f| f.trim_matches('"').to_owned()).filter(|f| !f.is_empty()));
    }
    for marker in ["feature `", "features `"] {
        for part in text.split(marker).skip(1) {
            out.insert(part.split('`').next().unwrap_or("").to_owned());
        }
    }
    out
}

#[test]
fn every_feature_the_documentation_names_is_declared() {
    let features: BTreeSet<String> = manifest()["features"].as_table().unwrap().keys().cloned().collect();
    let mut problems = Vec::new();
    let mut named = 0;
    for (page, text) in PAGES {
        for f in named_features(text) {
            named += 1;
            if !features.contains(&f) {
                problems.push(format!("{page}: the feature {f:?} is not in Cargo.toml's [features]"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(named >= 6, "only {named} feature names found: the parser is broken");
    assert_eq!(named_features("feature `nope` and --features a,b;\nretrysim = { features = [\"c\"] }").len(), 4);
    assert!(named_features("tokio = { features = [\"macros\"] }").is_empty());
}

/// Every feature `feature` turns on, itself included (dependencies' own
/// features, `dep:` and `crate/feature` entries left out).
fn closure(features: &toml::Table, start: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo: Vec<String> = start.iter().map(|s| s.to_string()).collect();
    while let Some(f) = todo.pop() {
        if !features.contains_key(&f) || !out.insert(f.clone()) {
            continue;
        }
        for g in features[&f].as_array().unwrap() {
            todo.push(g.as_str().unwrap().to_owned());
        }
    }
    out
}

/// Each `cargo run ... --example NAME ...` command of `text` whose features
/// (the defaults, plus `--features`, less with `--no-default-features`)
/// leave out one the example requires: the command and what is missing.
fn commands_missing_features(
    text: &str,
    features: &toml::Table,
    dev_self: &[String],
    required: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for part in text.split("cargo run").skip(1) {
        let command: String = part.split(['`', '\n']).next().unwrap_or("").to_owned();
        let words: Vec<&str> = command.split_whitespace().take_while(|w| *w != "--").collect();
        let Some(i) = words.iter().position(|w| *w == "--example") else { continue };
        let Some(name) = words.get(i + 1) else { continue };
        // In this repository the dev-dependency on the crate itself turns on
        // its features too (cargo unifies them for examples).
        let mut on: Vec<&str> = if words.contains(&"--no-default-features") { vec![] } else { vec!["default"] };
        on.extend(dev_self.iter().map(String::as_str));
        if let Some(j) = words.iter().position(|w| *w == "--features") {
            on.extend(words.get(j + 1).map(|l| l.split(',').collect::<Vec<_>>()).unwrap_or_default());
        }
        let have = closure(features, &on);
        let missing: Vec<&String> = required.get(*name).into_iter().flatten().filter(|f| !have.contains(*f)).collect();
        if !missing.is_empty() {
            out.push(format!("`cargo run{command}` lacks --features {missing:?}"));
        }
    }
    out
}

#[test]
fn every_example_command_turns_on_the_features_the_example_requires() {
    let manifest = manifest();
    let features = manifest["features"].as_table().unwrap();
    let required: BTreeMap<String, Vec<String>> = manifest["example"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let names = e.get("required-features").and_then(|r| r.as_array()).cloned().unwrap_or_default();
            (e["name"].as_str().unwrap().to_owned(), names.iter().map(|n| n.as_str().unwrap().to_owned()).collect())
        })
        .collect();
    let dev_self: Vec<String> = manifest["dev-dependencies"]["retrysim"]["features"]
        .as_array()
        .map(|a| a.iter().map(|f| f.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default();
    // Every example under examples/ is declared, so cargo knows what it needs.
    for entry in std::fs::read_dir(format!("{}/examples", env!("CARGO_MANIFEST_DIR"))).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".rs") {
            assert!(required.contains_key(stem), "examples/{name} has no [[example]] with its required-features");
        }
    }
    let mut texts: Vec<(String, String)> = PAGES.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect();
    for name in required.keys() {
        texts.push((format!("examples/{name}.rs"), root_file(&format!("examples/{name}.rs"))));
    }
    let mut problems = Vec::new();
    for (file, text) in &texts {
        problems.extend(
            commands_missing_features(text, features, &dev_self, &required).into_iter().map(|p| format!("{file}: {p}")),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Negative control: outside this repository (no dev-dependency on
    // itself) the bare command lacks the feature, and --features gives it.
    let bad = "`cargo run --release --example reqwest_retry_sim`";
    assert_eq!(commands_missing_features(bad, features, &[], &required).len(), 1);
    let good = "`cargo run --release --features sim-reqwest --example reqwest_retry_sim -- --seed 1`";
    assert_eq!(commands_missing_features(good, features, &[], &required), Vec::<String>::new());
    let lean = "`cargo run --no-default-features --example hand_loop`";
    assert_eq!(commands_missing_features(lean, features, &dev_self, &required).len(), 0, "dev_self has sim");
}

#[test]
fn the_stated_rust_version_is_the_manifests() {
    let manifest = manifest();
    let version = manifest["package"]["rust-version"].as_str().unwrap();
    let readme = crate::readme::README;
    assert!(
        readme.contains(&format!("Rust toolchain ({version} or newer")),
        "README's \"Two commands\" must state rust-version {version}"
    );
    // The crate root (docs.rs's front page) and the CHANGELOG say the same.
    let lib = root_file("src/lib.rs");
    assert!(lib.contains(&format!("`rust-version` ({version})")), "src/lib.rs must state rust-version {version}");
    let changelog = root_file("CHANGELOG.md");
    assert!(
        changelog.contains(&format!("`rust-version` is {version}")),
        "CHANGELOG.md must state rust-version {version}"
    );
    // Cargo refuses a toolchain older than rust-version, and `.ci/run`
    // fails unless it builds with that version itself (or checks the crate
    // with it where stable has moved on): CI verifies the claim.
}

#[test]
fn the_crate_root_lists_every_feature_and_leads_to_the_book() {
    let lib = root_file("src/lib.rs");
    let docs: String = lib.lines().filter_map(|l| l.strip_prefix("//!")).collect::<Vec<_>>().join("\n");
    let section = docs.split("# Cargo features").nth(1).expect("a \"Cargo features\" section in src/lib.rs");
    let section = section.split("\n # ").next().unwrap_or(section);
    let manifest = manifest();
    for feature in manifest["features"].as_table().unwrap().keys().filter(|f| *f != "default") {
        assert!(section.contains(&format!("`{feature}`")), "src/lib.rs's \"Cargo features\" does not name `{feature}`");
    }
    assert!(docs.contains("docs/book/SUMMARY.md"), "src/lib.rs must lead to the book");
    let meta = manifest["package"]["metadata"]["docs"]["rs"]["features"].as_array().expect("docs.rs features");
    for needed in ["sim-reqwest", "reqwest-middleware", "webpki-roots"] {
        assert!(meta.iter().any(|f| f.as_str() == Some(needed)), "docs.rs would hide the items of `{needed}`");
    }
}

/// The page's table rows: each first cell, without its backticks.
fn first_cells(text: &str, marker: &str) -> Vec<String> {
    let after = text.split(marker).nth(1).unwrap_or_else(|| panic!("no {marker:?}"));
    after
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.trim_matches('|').split('|').next().unwrap_or("").trim().trim_matches('`').to_owned())
        .collect()
}

#[test]
fn the_checks_table_is_blackbox_all_then_the_run_checks() {
    let page = PAGES.iter().find(|(p, _)| *p == "docs/book/checks.md").unwrap().1;
    let mut expected: Vec<String> = BlackBoxCheck::ALL.iter().map(|c| c.to_string()).collect();
    expected.extend([Invariant::Determinism, Invariant::CancelEndsJob].iter().map(|i| i.to_string()));
    assert_eq!(first_cells(page, "<!-- checks-table -->"), expected, "docs/book/checks.md's table");
    // The three a promise turns on name the promise that does.
    for (check, promise) in [
        ("attempt-bound", "Promises::max_attempts"),
        ("early-retry", "Promises::honours_retry_after"),
        ("deadline", "Promises::deadline"),
    ] {
        let row = page.lines().find(|l| l.starts_with(&format!("| `{check}` |"))).unwrap();
        assert!(row.contains(promise), "{check}'s row must name {promise}: {row}");
    }
    let other_rows = page.lines().filter(|l| l.starts_with("| `") && l.contains("| always |")).count();
    assert_eq!(other_rows, expected.len() - 3, "every other check is owed by every client");
}

/// Whether `word` looks like a commit: 7 to 40 lowercase hex digits.
fn is_commit(word: &str) -> bool {
    (7..=40).contains(&word.len()) && word.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

fn names_a_commit(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_alphanumeric()).any(is_commit)
}

/// What is wrong with a measurement page: no command in its opening, no
/// commit, a table row with no commit that does not continue the row above.
fn unstamped(page: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let opening = text.split("\n## ").next().unwrap_or("");
    let commands = ["`cargo", "`/usr/bin/time", "`nice", "`bash", "`./target", "`retrysim"];
    if !commands.iter().any(|c| text.contains(c)) || !opening.contains('`') {
        problems.push(format!("{page}: no command that reproduces it"));
    }
    if !names_a_commit(text) {
        problems.push(format!("{page}: no commit named"));
    }
    let continuing = ["of which", "those", "the same", "its ", "4 of those"];
    let mut in_table = false;
    for line in text.lines() {
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let header_or_rule = !in_table || line.starts_with("|---");
        in_table = true;
        // A row with no commit of its own continues the row above: its
        // first cell says so, or its command is "the same".
        // (A cell may hold `||` in code, so cells are not split here.)
        let first = line.trim_start_matches('|').trim_start();
        let continues = continuing.iter().any(|c| first.starts_with(c)) || line.contains("| the same");
        if !header_or_rule && !names_a_commit(line) && !continues {
            problems.push(format!("{page}: a row without the commit it was measured at: {line}"));
        }
    }
    problems
}

#[test]
fn every_measurement_page_is_stamped_with_its_command_and_commit() {
    let pages: Vec<_> =
        PAGES.iter().filter(|(p, _)| p.starts_with("docs/measurements/") && !p.ends_with("README.md")).collect();
    let names: Vec<&str> = pages.iter().map(|(p, _)| *p).collect();
    assert!(pages.len() >= 2, "the measurement pages: {names:?}");
    let problems: Vec<String> = pages.iter().flat_map(|(p, t)| unstamped(p, t)).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Negative control: a row with no commit, a page with no command.
    let bad = "# M\n\nran `cargo mutants` at abc1234\n\n| a | b |\n|---|---|\n| x (abc1234) | 1 |\n| y | 2 |\n| z | the same |\n";
    assert_eq!(unstamped("bad.md", bad).len(), 1);
    assert_eq!(unstamped("bare.md", "# M\n\nnothing\n").len(), 2);
}

#[test]
fn the_examples_page_lists_every_example() {
    let manifest = manifest();
    let declared: Vec<&str> =
        manifest["example"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    let page = PAGES.iter().find(|(p, _)| *p == "docs/book/examples.md").unwrap().1;
    let listed: Vec<&str> =
        page.lines().filter(|l| l.starts_with("| `")).map(|l| l.split('`').nth(1).unwrap()).collect();
    assert_eq!(listed, declared, "docs/book/examples.md lists Cargo.toml's [[example]]s, in its order");
}

#[test]
fn the_hunting_page_counts_the_invariants_and_the_properties() {
    let words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"];
    let words: Vec<&str> = words.into_iter().chain(["twelve", "thirteen", "fourteen", "fifteen", "sixteen"]).collect();
    let page = PAGES.iter().find(|(p, _)| *p == "docs/guide/hunting.md").unwrap().1;
    let properties = root_file("tests/it/properties.rs");
    let numbers: BTreeSet<&str> = properties
        .split("fn p")
        .skip(1)
        .filter_map(|rest| rest.get(..3))
        .filter(|n| n.ends_with('_') && n[..2].chars().all(|c| c.is_ascii_digit()))
        .collect();
    let expected = format!(
        "the first {} of [docs/DESIGN.md](../DESIGN.md)'s {} numbered",
        words[numbers.len()],
        words[Invariant::ALL.len()]
    );
    assert!(page.contains(&expected), "docs/guide/hunting.md must say {expected:?}");
}

#[test]
fn the_fault_kinds_page_is_the_faults_and_their_classes() {
    use retrysim::testing::{CloseTiming, Fault, FaultClass};
    use std::time::Duration;
    let s = Duration::from_secs(1);
    let faults = [
        Fault::LoseAnswer,
        Fault::LatencySpike { latency: s, until: s },
        Fault::Partition { until: s },
        Fault::Hold { until: s },
        Fault::Bounce,
        Fault::CloseRace { timing: CloseTiming::FinAfterWrite },
        Fault::LimiterPartition { until: s },
        Fault::Cancel,
        Fault::RegionalOutage { until: s },
    ];
    let page = PAGES.iter().find(|(p, _)| *p == "docs/book/faults.md").unwrap().1;
    let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("| `")).collect();
    assert_eq!(rows.len(), faults.len(), "one row per fault kind");
    for (row, fault) in rows.iter().zip(&faults) {
        let kind = serde_json::to_value(fault).unwrap()["kind"].as_str().unwrap().to_owned();
        assert!(row.starts_with(&format!("| `{kind}` |")), "the row for {kind}: {row}");
        let classes: Vec<String> = FaultClass::of_fault(fault).iter().map(|c| c.to_string()).collect();
        let shown = if classes.is_empty() { "none".to_owned() } else { classes.join(", ") };
        assert!(row.ends_with(&format!("| {shown} |")), "{kind} shows {shown}: {row}");
    }
    // Every kind a scenario file accepts (the registry's own page) has its row.
    let keys = PAGES.iter().find(|(p, _)| *p == "docs/guide/scenario-keys.md").unwrap().1;
    let line = keys.lines().find(|l| l.starts_with("| `faults.schedule[].fault.kind`")).expect("the kind's row");
    let accepted: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
    let listed: Vec<&str> = rows.iter().map(|r| r.split('`').nth(1).unwrap()).collect();
    assert_eq!(listed, accepted, "docs/book/faults.md's kinds and scenario-keys.md's");
}

/// The entries of a SUMMARY-like list that link nowhere (a placeholder).
fn unlinked_entries(summary: &str) -> Vec<&str> {
    summary.lines().filter(|l| l.trim_start().starts_with("- ") && !l.contains("](")).collect()
}

#[test]
fn every_entry_of_the_books_summary_is_a_page() {
    let summary = PAGES.iter().find(|(p, _)| *p == "docs/book/SUMMARY.md").unwrap().1;
    let entries = summary.lines().filter(|l| l.trim_start().starts_with("- ")).count();
    assert!(entries >= 15, "only {entries} entries in docs/book/SUMMARY.md: the search is broken");
    assert_eq!(unlinked_entries(summary), Vec::<&str>::new(), "docs/book/SUMMARY.md: an entry with no page");
    // Negative control: the placeholder the typed-client entry once was.
    let placeholder = "- [Snapshots](snapshots.md)\n- A typed API client by base URL (the page comes later)\n";
    assert_eq!(unlinked_entries(placeholder).len(), 1);
}

/// The flags a page's `cargo run --release -- ...` line passes that the
/// client's argument parser (its `"--flag" =>` arms) does not accept.
fn unknown_run_flags(page: &str, main: &str) -> Vec<String> {
    let run = page.lines().find(|l| l.starts_with("cargo run --release --")).unwrap_or("");
    let flags: Vec<&str> = run.split_whitespace().skip(4).filter(|w| w.starts_with("--")).collect();
    let mut unknown: Vec<String> =
        flags.iter().filter(|f| !main.contains(&format!("\"{f}\" =>"))).map(|f| f.to_string()).collect();
    if flags.is_empty() {
        unknown.push(format!("no flags in {run:?}"));
    }
    unknown
}

#[test]
fn the_typed_client_page_is_the_crate_ci_builds() {
    let page = PAGES.iter().find(|(p, _)| *p == "docs/guide/typed-clients.md").unwrap().1;
    let crate_toml: toml::Table = root_file("tests/typed-client/Cargo.toml").parse().unwrap();
    let shown: Vec<toml::Table> = blocks(page, "toml")
        .iter()
        .filter(|b| b.first() == Some(&"[dependencies]"))
        .map(|b| b.join("\n").parse().expect("the page's [dependencies] parse"))
        .collect();
    assert_eq!(shown.len(), 1, "docs/guide/typed-clients.md shows one [dependencies] block");
    assert_eq!(
        shown[0]["dependencies"], crate_toml["dependencies"],
        "the page's and tests/typed-client's dependencies"
    );
    // Its two Rust blocks are the compiled client's lines (the check over
    // every page's Rust blocks holds them to compiled files); here, they
    // come from tests/typed-client/src/main.rs and the run line's flags are
    // the ones it parses.
    let main = root_file("tests/typed-client/src/main.rs");
    let main_lines = code_lines(main.lines());
    for block in blocks(page, "rust") {
        assert!(contains_run(&main_lines, &code_lines(block.iter().copied())), "a block not from main.rs: {block:?}");
    }
    assert_eq!(unknown_run_flags(page, &main), Vec::<String>::new(), "the page's cargo run line");
    // Negative control: the positional URL the page once passed.
    let old = "cargo run --release -- \"$(head -n 1 server.txt)\"\n";
    assert_eq!(unknown_run_flags(old, &main).len(), 1);
    assert_eq!(unknown_run_flags("cargo run --release -- --base URL\n", &main), ["--base"]);
}

/// The backticked names in the second cell of each dialect row.
fn core_sources(section: &str) -> BTreeSet<String> {
    section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| dialect"))
        .filter_map(|l| l.split('|').nth(2))
        .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(str::to_owned).collect::<Vec<_>>())
        .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect()
}

#[test]
fn the_dialects_table_is_the_models_dialects_and_the_cores_sources() {
    use retrysim::core::advice::AdviceSource as S;
    let page = PAGES.iter().find(|(p, _)| *p == "docs/guide/real-servers-habits.md").unwrap().1;
    let section = page.split("### Rate-limit dialects").nth(1).expect("the dialects section");
    // The model's dialects: those the registry's page accepts for `api.dialect`.
    let keys = PAGES.iter().find(|(p, _)| *p == "docs/guide/scenario-keys.md").unwrap().1;
    let row = keys.lines().find(|l| l.starts_with("| `api.dialect` |")).expect("api.dialect's row");
    let accepted: Vec<&str> = row.split('"').skip(1).step_by(2).collect();
    assert!(accepted.len() >= 7, "{row}");
    let tabled: BTreeSet<&str> = section
        .lines()
        .filter(|l| l.starts_with("| "))
        .flat_map(|l| l.split("`dialect = \"").skip(1).map(|r| r.split('"').next().unwrap()))
        .collect();
    let spoken: BTreeSet<&str> = accepted.iter().copied().filter(|d| *d != "none").collect();
    assert_eq!(tabled, spoken, "the dialects table's rows and scenario-keys.md's api.dialect");
    let comment = section.lines().find(|l| l.starts_with("dialect = ")).expect("the TOML example's dialect line");
    let listed: Vec<&str> = comment.split('#').nth(1).unwrap().split('"').skip(1).step_by(2).collect();
    assert_eq!(listed, accepted, "the TOML example's list of dialects");
    // The core column names AdviceSources, and every header source has a row.
    let header_sources = [
        S::HeaderSeconds,
        S::HeaderDate,
        S::RetryAfterMs,
        S::RateLimitField,
        S::RateLimitDictionary,
        S::RateLimitReset,
        S::XRateLimitReset,
        S::ResetUnixTime,
        S::OpenAiReset,
    ];
    // A new variant must be sorted here (no wildcard arm).
    let is_header = |s: &S| match s {
        S::HeaderSeconds
        | S::HeaderDate
        | S::RetryAfterMs
        | S::RateLimitField
        | S::RateLimitDictionary
        | S::RateLimitReset
        | S::XRateLimitReset
        | S::ResetUnixTime
        | S::OpenAiReset => true,
        S::BodySeconds | S::BodyReset | S::None => false,
    };
    assert!(header_sources.iter().all(is_header));
    let names: BTreeSet<String> =
        header_sources.iter().map(|s| serde_json::to_value(s).unwrap().as_str().unwrap().to_owned()).collect();
    assert_eq!(core_sources(section), names, "the core column and AdviceSource's header sources");
    // Negative control: a row naming a source the core does not have.
    let bad = "| X | `header_minutes` | - |\n";
    assert!(!core_sources(bad).is_subset(&names));
}

/// What is wrong with the `cargo install` lines of `text`: the binary's
/// required features not turned on (the defaults, plus `--features`, less
/// with `--no-default-features`), a feature that is not declared, or no
/// `--locked` (a seed replays only on the same lockfile).
fn install_problems(text: &str, features: &toml::Table, required: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    for line in text.lines().filter(|l| l.trim_start().starts_with("cargo install")) {
        let words: Vec<&str> = line.split_whitespace().take_while(|w| !w.starts_with('#')).collect();
        let named: Vec<&str> = words
            .iter()
            .zip(words.iter().skip(1))
            .filter(|(w, _)| **w == "--features")
            .flat_map(|(_, list)| list.split(','))
            .collect();
        let mut on: Vec<&str> = if words.contains(&"--no-default-features") { vec![] } else { vec!["default"] };
        on.extend(&named);
        let enabled = closure(features, &on);
        for f in named.iter().filter(|f| !features.contains_key(**f)) {
            problems.push(format!("{line}: no feature {f}"));
        }
        for f in required.iter().filter(|f| !enabled.contains(**f)) {
            problems.push(format!("{line}: leaves out {f}, which the binary requires"));
        }
        if !words.contains(&"--locked") {
            problems.push(format!("{line}: no --locked"));
        }
    }
    problems
}

#[test]
fn the_install_commands_build_the_binary() {
    let manifest = manifest();
    let features = manifest["features"].as_table().unwrap();
    let bin = manifest["bin"].as_array().unwrap().iter().find(|b| b["name"].as_str() == Some("retrysim")).unwrap();
    let required: Vec<&str> =
        bin["required-features"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    let pages: Vec<&(&str, &str)> =
        PAGES.iter().filter(|(p, _)| *p == "README.md" || *p == "docs/guide/command-line.md").collect();
    let lines: usize =
        pages.iter().map(|(_, t)| t.lines().filter(|l| l.trim_start().starts_with("cargo install")).count()).sum();
    assert!(lines >= 3, "only {lines} cargo install lines in the README and the command-line page");
    let problems: Vec<String> = pages.iter().flat_map(|(_, t)| install_problems(t, features, &required)).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Negative controls: the lean build has no binary; a made-up feature.
    assert_eq!(
        install_problems("cargo install --locked --no-default-features --path .\n", features, &required).len(),
        1
    );
    assert_eq!(install_problems("cargo install --locked --features clii --path .\n", features, &required).len(), 1);
    assert_eq!(install_problems("cargo install --path .\n", features, &required).len(), 1);
}
