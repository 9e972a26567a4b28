//! The public API, written down: `tests/public-api.txt` lists every public
//! item of the library with all its features (what docs.rs would show):
//! modules, types, functions, constants, each public field, enum variant,
//! method of an inherent impl and trait implemented, one per line, sorted.
//! This test builds rustdoc's JSON of the library with the nightly toolchain
//! (the JSON output is unstable), walks it from the crate root, and compares
//! the listing with the file; a change to the public API is then a change to
//! that file, visible in review. `#[doc(hidden)]` items (the
//! `internals` door, `cli_main`) are not in rustdoc's JSON, so not listed.
//!
//! After a deliberate change, rewrite the file with
//! `RETRYSIM_PUBLIC_API=write cargo test --release --test it -- public_api` and
//! review `git diff tests/public-api.txt`. `RETRYSIM_PUBLIC_API_JSON=FILE`
//! walks rustdoc JSON built elsewhere (another revision) instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const LISTING: &str = "tests/public-api.txt";

/// The command that installs what the check needs.
const INSTALL: &str = "rustup toolchain install nightly --profile minimal";

/// Builds rustdoc's JSON of the library (every feature) in a target
/// directory of its own (`target/public-api`), with the nightly toolchain.
fn rustdoc_json(root: &Path) -> Value {
    let target = root.join("target/public-api");
    let nightly = Command::new("rustup").args(["run", "nightly", "rustc", "--version"]).output();
    match nightly {
        Ok(out) if out.status.success() => {}
        _ => panic!("the public API check needs the nightly toolchain (rustdoc's JSON output is unstable): {INSTALL}"),
    }
    let mut cargo = Command::new("rustup");
    cargo
        .args(["run", "nightly", "cargo", "rustdoc", "--lib", "--all-features", "--locked", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .args(["--", "-Z", "unstable-options", "--output-format", "json"]);
    // The outer `cargo test`'s toolchain and settings are not this build's.
    for var in ["RUSTUP_TOOLCHAIN", "CARGO", "RUSTC", "RUSTDOC", "RUSTC_WRAPPER", "RUSTDOCFLAGS", "RUSTFLAGS"] {
        cargo.env_remove(var);
    }
    cargo.env_remove("CARGO_TARGET_DIR").env_remove("CARGO_BUILD_TARGET_DIR").env_remove("CARGO_ENCODED_RUSTFLAGS");
    let out = cargo.output().expect("rustup runs");
    assert!(
        out.status.success(),
        "rustdoc's JSON of the library failed (is the nightly toolchain installed? {INSTALL}):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = target.join("doc/retrysim.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    serde_json::from_str(&text).expect("rustdoc writes JSON")
}

/// The sorted listing of the public API in rustdoc's JSON `doc`.
pub fn listing(doc: &Value) -> Vec<String> {
    let walk = Walk { index: &doc["index"], paths: &doc["paths"] };
    let root = doc["root"].to_string();
    let mut lines = BTreeSet::new();
    walk.module(&root, "retrysim", &mut Vec::new(), &mut lines);
    lines.into_iter().collect()
}

struct Walk<'a> {
    index: &'a Value,
    paths: &'a Value,
}

/// The kind of an item: the single key of its `inner`.
fn kind(item: &Value) -> &str {
    item["inner"].as_object().and_then(|o| o.keys().next()).map_or("?", String::as_str)
}

impl Walk<'_> {
    fn item(&self, id: &Value) -> Option<&Value> {
        let key = match id {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        self.index.get(&key)
    }

    /// A path outside this crate (or not in the index), for a re-export or
    /// a trait: `serde::Serialize`.
    fn foreign_path(&self, id: &Value) -> Option<String> {
        let key = match id {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let path = self.paths.get(&key)?["path"].as_array()?;
        Some(path.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("::"))
    }

    fn module(&self, id: &str, path: &str, open: &mut Vec<String>, out: &mut BTreeSet<String>) {
        let Some(module) = self.index.get(id) else { return };
        if open.iter().any(|o| o == id) {
            return;
        }
        open.push(id.to_owned());
        for child in module["inner"]["module"]["items"].as_array().into_iter().flatten() {
            let Some(item) = self.item(child) else { continue };
            self.entry(item, path, open, out);
        }
        open.pop();
    }

    /// One item of a module at `parent`, and what it holds.
    fn entry(&self, item: &Value, parent: &str, open: &mut Vec<String>, out: &mut BTreeSet<String>) {
        let k = kind(item);
        if k == "use" {
            let u = &item["inner"]["use"];
            let name = u["name"].as_str().unwrap_or("?");
            let glob = u["is_glob"].as_bool().unwrap_or(false);
            match u["id"].as_str().map(str::to_owned).or_else(|| u["id"].as_u64().map(|n| n.to_string())) {
                Some(target) if self.index.get(&target).is_some() && !glob => {
                    let target = &self.index[&target];
                    // Re-exported under its own or a new name.
                    let mut renamed = target.clone();
                    renamed["name"] = Value::String(name.to_owned());
                    self.entry(&renamed, parent, open, out);
                }
                _ => {
                    let source = u["source"].as_str().unwrap_or("?");
                    let star = if glob { "::*" } else { "" };
                    out.insert(format!("pub use {parent}::{name}{star} = {source}"));
                }
            }
            return;
        }
        let Some(name) = item["name"].as_str() else { return };
        let path = format!("{parent}::{name}");
        let inner = &item["inner"][k];
        match k {
            "module" => {
                out.insert(format!("mod {path}"));
                let id = item["id"].as_str().map(str::to_owned).unwrap_or_else(|| item["id"].to_string());
                self.module(&id, &path, open, out);
            }
            "struct" => {
                out.insert(format!("struct {path}"));
                let fields = &inner["kind"];
                for f in fields["plain"]["fields"].as_array().into_iter().flatten() {
                    if let Some(field) = self.item(f).and_then(|f| f["name"].as_str()) {
                        out.insert(format!("field {path}.{field}"));
                    }
                }
                if fields["plain"]["has_stripped_fields"].as_bool() == Some(true) {
                    out.insert(format!("field {path}.(private fields)"));
                }
                self.impls(inner, &path, out);
            }
            "enum" => {
                out.insert(format!("enum {path}"));
                for v in inner["variants"].as_array().into_iter().flatten() {
                    if let Some(variant) = self.item(v) {
                        let vname = variant["name"].as_str().unwrap_or("?");
                        out.insert(format!("variant {path}::{vname}"));
                        let vkind = &variant["inner"]["variant"]["kind"];
                        for f in vkind["struct"]["fields"].as_array().into_iter().flatten() {
                            if let Some(field) = self.item(f).and_then(|f| f["name"].as_str()) {
                                out.insert(format!("field {path}::{vname}.{field}"));
                            }
                        }
                    }
                }
                self.impls(inner, &path, out);
            }
            "union" => {
                out.insert(format!("union {path}"));
                self.impls(inner, &path, out);
            }
            "trait" => {
                out.insert(format!("trait {path}"));
                for i in inner["items"].as_array().into_iter().flatten() {
                    if let Some(member) = self.item(i) {
                        out.insert(format!("{} {path}::{}", kind(member), member["name"].as_str().unwrap_or("?")));
                    }
                }
            }
            other => {
                out.insert(format!("{other} {path}"));
            }
        }
    }

    /// A type's inherent methods and constants, and the traits it
    /// implements (not the auto traits rustdoc works out, nor blanket impls).
    fn impls(&self, inner: &Value, path: &str, out: &mut BTreeSet<String>) {
        for i in inner["impls"].as_array().into_iter().flatten() {
            let Some(imp) = self.item(i) else { continue };
            let imp = &imp["inner"]["impl"];
            if imp["is_synthetic"].as_bool() == Some(true) || !imp["blanket_impl"].is_null() {
                continue;
            }
            if imp["trait"].is_null() {
                for m in imp["items"].as_array().into_iter().flatten() {
                    let Some(member) = self.item(m) else { continue };
                    if member["visibility"].as_str() != Some("public") {
                        continue;
                    }
                    out.insert(format!("{} {path}::{}", kind(member), member["name"].as_str().unwrap_or("?")));
                }
            } else {
                let t = &imp["trait"];
                let name = self.foreign_path(&t["id"]).unwrap_or_else(|| t["path"].as_str().unwrap_or("?").to_owned());
                out.insert(format!("impl {name} for {path}"));
            }
        }
    }
}

/// How many lines of each kind a listing has, for the size line.
pub fn sizes(lines: &[String]) -> BTreeMap<String, usize> {
    let mut by_kind = BTreeMap::new();
    for l in lines {
        *by_kind.entry(l.split(' ').next().unwrap_or("?").to_owned()).or_insert(0) += 1;
    }
    by_kind
}

#[test]
fn the_public_api_is_the_one_written_down() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Another revision's JSON (`RETRYSIM_PUBLIC_API_JSON=FILE`), to measure it.
    let doc = match std::env::var("RETRYSIM_PUBLIC_API_JSON") {
        Ok(json) => serde_json::from_str(&std::fs::read_to_string(json).expect("the JSON file reads")).expect("JSON"),
        Err(_) => rustdoc_json(root),
    };
    let now = listing(&doc);
    assert!(now.len() > 100, "the walk found only {} lines: it is broken", now.len());
    let file = root.join(LISTING);
    if std::env::var("RETRYSIM_PUBLIC_API").as_deref() == Ok("write") {
        std::fs::write(&file, now.join("\n") + "\n").expect("the listing is written");
        return;
    }
    let written = std::fs::read_to_string(&file).unwrap_or_default();
    let written: Vec<&str> = written.lines().collect();
    let gone: Vec<&str> = written.iter().copied().filter(|l| !now.iter().any(|n| n == l)).collect();
    let new: Vec<&str> = now.iter().map(String::as_str).filter(|l| !written.contains(l)).collect();
    assert!(
        gone.is_empty() && new.is_empty(),
        "the public API is not the one written down in {LISTING} ({} lines now, {} written: {:?}):\n{}{}\n\
         if the change is meant, rewrite the listing with\n  \
         RETRYSIM_PUBLIC_API=write cargo test --release --test it -- public_api\n\
         and review `git diff {LISTING}`",
        now.len(),
        written.len(),
        sizes(&now),
        gone.iter().map(|l| format!("- {l}\n")).collect::<String>(),
        new.iter().map(|l| format!("+ {l}\n")).collect::<String>(),
    );
}

#[test]
fn the_walk_lists_fields_variants_methods_and_reexports() {
    // A small document in rustdoc's JSON shape: a root module holding a
    // struct with a public field and an inherent method, an enum, and a
    // re-export of a foreign crate.
    let doc = serde_json::json!({
        "root": 0,
        "index": {
            "0": {"id": 0, "name": "retrysim", "inner": {"module": {"items": [1, 4, 6]}}},
            "1": {"id": 1, "name": "Report", "inner": {"struct": {
                "kind": {"plain": {"fields": [2], "has_stripped_fields": true}}, "impls": [3]}}},
            "2": {"id": 2, "name": "seed", "visibility": "public", "inner": {"struct_field": {}}},
            "3": {"id": 3, "inner": {"impl": {"trait": null, "blanket_impl": null, "is_synthetic": false,
                "items": [7]}}},
            "7": {"id": 7, "name": "render", "visibility": "public", "inner": {"function": {}}},
            "4": {"id": 4, "name": "Verdict", "inner": {"enum": {"variants": [5], "impls": []}}},
            "5": {"id": 5, "name": "Holds", "inner": {"variant": {"kind": "plain"}}},
            "6": {"id": 6, "inner": {"use": {"source": "bytes", "name": "bytes", "id": 99, "is_glob": false}}}
        },
        "paths": {}
    });
    assert_eq!(
        listing(&doc),
        [
            "enum retrysim::Verdict",
            "field retrysim::Report.(private fields)",
            "field retrysim::Report.seed",
            "function retrysim::Report::render",
            "pub use retrysim::bytes = bytes",
            "struct retrysim::Report",
            "variant retrysim::Verdict::Holds",
        ]
    );
}
