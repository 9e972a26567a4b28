use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::*;
use crate::sim::run::defects;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
fn every_check_has_one_entry_and_findings_name_each_once() {
    let all: Vec<Check> = Check::all().collect();
    assert_eq!(all.len(), Invariant::ALL.len() + BlackBoxCheck::ALL.len() + Property::ALL.len());
    assert_eq!(all.iter().collect::<BTreeSet<_>>().len(), all.len(), "a check listed twice");
    for c in &all {
        assert_eq!(c.entry().check, *c, "{c}'s entry is another check's");
        assert!(!c.entry().reads.is_empty() && !c.entry().statement.is_empty(), "{c}");
    }
    // A hunt groups findings by name: an invariant and a property must not share one.
    let mut by_name: BTreeMap<&str, Check> = BTreeMap::new();
    for c in all.iter().filter(|c| !matches!(c, Check::BlackBox(_))) {
        assert!(by_name.insert(c.name(), *c).is_none(), "two checks are named {}", c.name());
    }
    assert!(!by_name.contains_key("run-failed"), "run-failed names a run that failed, not a check");
    for b in BlackBoxCheck::ALL {
        assert_eq!(by_name.get(Check::BlackBox(b).finding()), Some(&Check::Invariant(b.invariant())), "{b}");
    }
}

#[test]
fn names_are_the_serialized_names() {
    for i in Invariant::ALL {
        assert_eq!(serde_json::to_value(i).ok().and_then(|v| v.as_str().map(str::to_owned)).as_deref(), Some(i.name()));
    }
    for b in BlackBoxCheck::ALL {
        assert_eq!(serde_json::to_value(b).ok().and_then(|v| v.as_str().map(str::to_owned)).as_deref(), Some(b.name()));
    }
}

#[test]
fn every_negative_control_exists() {
    for c in Check::all() {
        match c.entry().control {
            Control::Defect(d) => assert!(defects::NAMES.contains(&d), "{c}: no defect {d}"),
            Control::Test(path, name) => {
                let text = read(path);
                assert!(text.contains(&format!("fn {name}(")), "{c}: {path} has no test {name}");
                if let Check::BlackBox(b) = c {
                    assert!(text.contains(&format!("BlackBoxCheck::{b:?}")), "{c}: {path} never expects it");
                }
            }
        }
    }
}

/// The rows of docs/guide/hunting.md's sabotage table: each defect and the
/// findings that caught it.
fn sabotage_table() -> BTreeMap<String, Vec<String>> {
    let page = read("docs/guide/hunting.md");
    let mut rows = BTreeMap::new();
    for line in page.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(defect), Some(by)) = (cells.get(1), cells.get(5)) else { continue };
        let Some(defect) = defect.strip_prefix('`').and_then(|d| d.strip_suffix('`')) else { continue };
        if !defects::NAMES.contains(&defect) {
            continue;
        }
        let names = by.split(", ").filter_map(|x| x.rsplit_once(' ').map(|(name, _)| name.to_owned())).collect();
        rows.insert(defect.to_owned(), names);
    }
    rows
}

#[test]
fn the_sabotage_table_agrees_with_the_registry() {
    let rows = sabotage_table();
    assert_eq!(rows.len(), defects::NAMES.len(), "a defect is missing from docs/guide/hunting.md's table");
    let known: BTreeSet<&str> = Check::all().map(Check::finding).collect();
    for (defect, names) in &rows {
        for n in names {
            assert!(n == "run-failed" || known.contains(n.as_str()), "{defect} is caught by {n}, not in the registry");
        }
    }
    for c in Check::all() {
        if let Control::Defect(d) = c.entry().control {
            let caught = &rows[d];
            assert!(caught.iter().any(|n| n == c.finding()), "{c}'s control {d} is caught by {caught:?} only");
        }
    }
}

#[test]
fn the_design_documents_table_is_the_registry() {
    let doc = read("docs/DESIGN.md");
    let table = markdown_table();
    assert!(doc.contains(&table), "docs/DESIGN.md's table of every check is stale; the registry's:\n\n{table}");
}

#[test]
fn no_number_names_two_invariants() {
    let numbers: Vec<u8> = Invariant::ALL.iter().map(|i| i.number()).collect();
    let expected: Vec<u8> = (1..=Invariant::ALL.len() as u8).collect();
    assert_eq!(numbers, expected, "the invariants are numbered 1, 2, 3, … in Invariant::ALL's order, each once");
}
