//! Imports `retrysim::internals` (hidden, no semver promise) for the registries
//! the docs cite: `Invariant::ALL`, the defects' and built-in clients' names,
//! the comparison's presets and habits.
//!
//! `docs/DESIGN.md` cannot drift silently from the code it describes:
//! every repository path it cites in backticks exists, every kebab-case name
//! it cites is one the code registers (a named scenario above all), its
//! invariants table is the checkers' `Invariant::ALL`, and every section the
//! code cites as `DESIGN.md "..."` is one of its headings.
//!
//! The README and the guide's pages (`docs/guide/*.md`, listed in
//! `tests/it/readme.rs`) are held to the same paths and names, and every
//! relative Markdown link between them and to `docs/DESIGN.md` resolves,
//! anchor included.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use retrysim::internals::checks::blackbox::BlackBoxCheck;
use retrysim::internals::checks::invariants::Invariant;
use retrysim::internals::checks::registry::Check;
use retrysim::internals::run::scenario::Builtin;
use retrysim::internals::run::{defects, scenario};
use retrysim::internals::tools::compare;
use retrysim::internals::world::net::FaultClass;

const DOC: &str = "docs/DESIGN.md";

/// Where a cited repository path starts.
const PATH_PREFIXES: [&str; 9] =
    ["src/", "tests/", "examples/", "benches/", "snapshots/", "proptest-regressions/", "docs/", ".ci/", "crates/"];

/// Top-level files cited by bare name.
const TOP_FILES: [&str; 3] = ["Cargo.toml", "Cargo.lock", "README.md"];

/// Kebab-case words the document cites that are not registered names (a
/// header, a Cargo key, crates and features by their published names). A
/// new one goes here only if it is not a name of the harness's.
const NOT_NAMES: [&str; 17] = [
    "x-retrysim-client",
    "retry-after-ms",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "draft-6",
    "draft-7",
    "draft-8",
    "default-features",
    "retrysim-turmoil",
    "turmoil-net",
    "sim-reqwest",
    "rustls-native-certs",
    "webpki-roots",
    "reqwest-middleware",
    "reqwest-retry",
];

const UNREGISTERED: &str = "is neither a named scenario (`retrysim scenarios`) nor a compare preset or row, a built-in client, a defect, an invariant or a fault class";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every inline code span outside fenced blocks, as its words, with
/// surrounding quotes and trailing punctuation removed.
fn code_spans(text: &str) -> Vec<Vec<String>> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|span| {
            span.split_whitespace()
                .map(|w| w.trim_start_matches(['(', '\'', '"']).trim_end_matches([',', '.', ';', ':', ')', '\'', '"']))
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

fn is_path(word: &str) -> bool {
    PATH_PREFIXES.iter().any(|p| word.starts_with(p)) || TOP_FILES.contains(&word)
}

/// Whether a cited path exists; `dir/*.ext` needs a matching file in `dir`.
fn path_exists(word: &str) -> bool {
    match word.rsplit_once('/') {
        Some((dir, pattern)) if pattern.contains('*') => {
            let (before, after) = pattern.split_once('*').unwrap_or((pattern, ""));
            std::fs::read_dir(root().join(dir)).is_ok_and(|entries| {
                entries.flatten().any(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.starts_with(before) && name.ends_with(after)
                })
            })
        }
        _ => root().join(word).exists(),
    }
}

fn is_kebab(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_lowercase())
        && word.contains('-')
        && !word.ends_with('-')
        && !word.contains("--")
        && word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Every kebab-case name the code registers: scenarios, comparison presets
/// and their rows, built-in clients, defects, invariants.
fn registered_names() -> BTreeSet<String> {
    let mut names: BTreeSet<String> = scenario::NAMES.iter().map(|n| n.to_string()).collect();
    for p in compare::PRESETS {
        names.insert(p.to_owned());
        let preset = compare::preset(p).unwrap_or_else(|| panic!("the preset {p} resolves"));
        names.extend(preset.row_names().into_iter().map(str::to_owned));
    }
    for b in Builtin::ALL {
        names.insert(serde_json::to_value(b).ok().and_then(|v| v.as_str().map(str::to_owned)).expect("a name"));
    }
    names.extend(defects::NAMES.iter().map(|n| n.to_string()));
    names.extend(Check::all().map(|c| c.name().to_owned()));
    names.extend(FaultClass::ALL.iter().map(|c| c.to_string()));
    names
}

/// The rows `| number | `name` | ...` of the document's "Invariants" section.
fn invariants_table(doc: &str) -> Vec<(u8, String)> {
    let section = doc.split("\n## ").find(|s| s.starts_with("Invariants")).expect("an \"Invariants\" section");
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let number = cells.get(1)?.parse().ok()?;
            let name = cells.get(2)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((number, name.to_owned()))
        })
        .collect()
}

/// Every `.rs` file under `dir`, recursively, in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).expect("a directory").flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    out
}

/// The quoted section names in `DESIGN.md "Section"` or `DESIGN "Section"`.
fn cited_sections(text: &str) -> Vec<String> {
    ["DESIGN.md \"", "DESIGN \""]
        .iter()
        .flat_map(|marker| text.split(marker).skip(1))
        .filter_map(|rest| rest.split_once('"').map(|(name, _)| name.to_owned()))
        .collect()
}

#[test]
fn the_design_document_cites_only_what_exists() {
    let doc = read(&root().join(DOC));
    let known = registered_names();
    let mut problems = Vec::new();
    let (mut paths, mut names) = (0, 0);
    for span in code_spans(&doc) {
        // `retrysim run --scenario NAME`: NAME must be a scenario, not any registered name.
        for pair in span.windows(2) {
            if pair[0] == "--scenario" && !scenario::NAMES.contains(&pair[1].as_str()) {
                problems.push(format!("`--scenario {}`: {} is not a named scenario", pair[1], pair[1]));
            }
        }
        for word in &span {
            if is_path(word) {
                paths += 1;
                if !path_exists(word) {
                    problems.push(format!("`{word}` is not a path in the repository"));
                }
            } else if is_kebab(word) && !NOT_NAMES.contains(&word.as_str()) {
                names += 1;
                if !known.contains(word) {
                    problems.push(format!("`{word}` {UNREGISTERED}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{DOC} cites what does not exist:\n{}", problems.join("\n"));
    // The check must have something to check: a parse that finds nothing is a bug here.
    assert!(paths >= 30 && names >= 10, "only {paths} paths and {names} names found in {DOC}");
}

#[test]
fn the_design_documents_invariants_are_the_checkers() {
    let doc = read(&root().join(DOC));
    let expected: Vec<(u8, String)> = Invariant::ALL.iter().map(|i| (i.number(), i.to_string())).collect();
    assert_eq!(invariants_table(&doc), expected, "the \"Invariants\" table of {DOC} is not Invariant::ALL");
}

#[test]
fn every_design_section_the_code_cites_is_a_heading() {
    let doc = read(&root().join(DOC));
    let headings: Vec<&str> =
        doc.lines().filter(|l| l.starts_with('#')).map(|l| l.trim_start_matches('#').trim()).collect();
    let mut sources = rust_files(&root().join("src"));
    sources.push(root().join("Cargo.toml"));
    let mut cited = 0;
    let mut missing = Vec::new();
    for file in sources {
        for section in cited_sections(&read(&file)) {
            cited += 1;
            if !headings.iter().any(|h| h.starts_with(section.as_str())) {
                missing.push(format!("{} cites \"{section}\"", file.strip_prefix(root()).unwrap_or(&file).display()));
            }
        }
    }
    assert!(missing.is_empty(), "{DOC} has no heading for:\n{}", missing.join("\n"));
    assert!(cited >= 3, "only {cited} cited sections found: the search is broken");
}

/// Kebab-case words the README and the guide cite that are not names of the
/// harness's: headers, an API key, an SVG attribute, a Cargo key, the
/// book's example crate. A new one goes here only if it is not a name the
/// code registers.
const GUIDE_NOT_NAMES: [&str; 6] = ["x-api-key", "key-a", "retry-after", "data-n", "rust-version", "my-service"];

/// Whether a path the README or the guide cites exists: in the repository,
/// or, for the files of "Testing your own client"'s crate (`tests/client.rs`,
/// `src/lib.rs`, its snapshots), in `tests/external-user/`, a `.snap.new`
/// as the `.snap` it becomes.
fn guide_path_exists(word: &str) -> bool {
    let external = format!("tests/external-user/{}", word.strip_suffix(".new").unwrap_or(word));
    path_exists(word) || path_exists(&external)
}

#[test]
fn the_readme_and_the_guide_cite_only_what_exists() {
    let mut known = registered_names();
    known.extend(compare::HABITS.iter().map(|(h, _)| h.to_string()));
    known.extend(BlackBoxCheck::ALL.iter().map(|c| c.to_string()));
    known.extend(crate::integrations::audit::ROWS.iter().map(|r| r.to_string()));
    let mut problems = Vec::new();
    let (mut paths, mut names) = (0, 0);
    for (page, text) in crate::readme::PAGES {
        for span in code_spans(text) {
            for pair in span.windows(2) {
                if pair[0] == "--scenario" && pair[1] != "NAME" && !scenario::NAMES.contains(&pair[1].as_str()) {
                    problems.push(format!("{page}: `--scenario {}`: {} is not a named scenario", pair[1], pair[1]));
                }
            }
            for word in &span {
                if is_path(word) {
                    paths += 1;
                    if !guide_path_exists(word) {
                        problems.push(format!("{page}: `{word}` is not a path in the repository"));
                    }
                } else if is_kebab(word)
                    && !NOT_NAMES.contains(&word.as_str())
                    && !GUIDE_NOT_NAMES.contains(&word.as_str())
                {
                    names += 1;
                    if !known.contains(word) {
                        problems.push(format!(
                            "{page}: `{word}` {UNREGISTERED}, a habit, a black-box check or an audit row"
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "the README and the guide cite what does not exist:\n{}", problems.join("\n"));
    assert!(paths >= 60 && names >= 60, "only {paths} paths and {names} names found in the README and the guide");
}

/// The anchor GitHub gives a heading: lower case, spaces to hyphens, other
/// punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (`#` lines outside fenced blocks).
fn headings(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every Markdown link target `](...)` outside fenced blocks and code spans.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        for rest in prose.split("](").skip(1) {
            if let Some((target, _)) = rest.split_once(')') {
                out.push(target.to_owned());
            }
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_documentation_resolves() {
    let mut pages: Vec<(String, String)> =
        crate::readme::PAGES.iter().map(|(name, text)| (name.to_string(), text.to_string())).collect();
    pages.push((DOC.to_owned(), read(&root().join(DOC))));
    let mut problems = Vec::new();
    let mut links = 0;
    for (page, text) in &pages {
        let dir = Path::new(page).parent().unwrap_or(Path::new(""));
        for target in link_targets(text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
            // Resolve `..` by hand: the path need not exist for a clear message.
            let mut resolved = PathBuf::new();
            let joined = if file.is_empty() { PathBuf::from(page) } else { dir.join(file) };
            for part in joined.components() {
                match part {
                    std::path::Component::ParentDir => {
                        resolved.pop();
                    }
                    std::path::Component::CurDir => {}
                    other => resolved.push(other),
                }
            }
            if !root().join(&resolved).exists() {
                problems.push(format!("{page}: ({target}) leads to {}, which does not exist", resolved.display()));
                continue;
            }
            if !fragment.is_empty() {
                let anchors = headings(&read(&root().join(&resolved)));
                if !anchors.iter().any(|a| a == fragment) {
                    problems.push(format!("{page}: ({target}): {} has no heading #{fragment}", resolved.display()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
    assert!(links >= 60, "only {links} relative links found: the search is broken");
}
