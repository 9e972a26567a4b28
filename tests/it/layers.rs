//! The library's modules point one way (docs/DESIGN.md, "Layout"):
//!
//! `core` ← `env`, `tls`, `client`, `reqwest`, `gate`, `trace` ← `sim::world` ← `sim::run` ←
//! `sim::checks` ← `sim::tools`, `sim::serve` ← `testing`, `internals`
//!
//! A module may name its own layer and the ones before it, never one after
//! (so the production modules never name `sim`), and no two files of `src/`
//! name each other, directly or around a circle. The check reads every
//! `crate::`, `super::` and `self::` path of the library's code (comments
//! and strings left out, `use` groups expanded); the command line (`src/main.rs`,
//! `src/cli/`) sits on top of everything and is not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::rust_source::{code_only, rust_files};

/// The layers, lowest first; a path belongs to its longest prefix here.
const LAYERS: [(&str, u8); 16] = [
    ("core", 0),
    ("locks", 0),
    ("env", 1),
    ("tls", 1),
    ("client", 1),
    ("reqwest", 1),
    ("gate", 1),
    ("trace", 1),
    ("sim", 2),
    ("sim::world", 2),
    ("sim::run", 3),
    ("sim::checks", 4),
    ("sim::tools", 5),
    ("sim::serve", 5),
    ("testing", 6),
    ("internals", 6),
];

/// The layer of a module path (`sim::run::runner`), if it has one.
fn layer(path: &str) -> Option<(&'static str, u8)> {
    LAYERS
        .iter()
        .filter(|(prefix, _)| path == *prefix || path.starts_with(&format!("{prefix}::")))
        .max_by_key(|(prefix, _)| prefix.len())
        .copied()
}

/// The module a library file is: `src/sim/run/runner.rs` is
/// `sim::run::runner`, `src/sim/run/mod.rs` is `sim::run`, `src/lib.rs` is
/// the root (empty).
fn module_of(file: &str) -> Vec<String> {
    let rel = file.strip_prefix("src/").unwrap_or(file).trim_end_matches(".rs");
    let mut segments: Vec<String> = rel.split('/').map(str::to_owned).collect();
    if matches!(segments.last().map(String::as_str), Some("mod" | "lib")) {
        segments.pop();
    }
    segments
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Other,
}

/// The tokens of code (see [`code_only`]), each with its 1-based line.
fn tokens(code: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let (mut out, mut line, mut i) = (Vec::new(), 1, 0);
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Token::Ident(chars[start..i].iter().collect()), line));
            continue;
        }
        let token = match c {
            ':' if chars.get(i + 1) == Some(&':') => {
                i += 1;
                Token::PathSep
            }
            '{' => Token::Open,
            '}' => Token::Close,
            ',' => Token::Comma,
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            _ => Token::Other,
        };
        out.push((token, line));
        i += 1;
    }
    out
}

/// The paths of a use tree starting at `tokens[i]` (just after a `::`), each
/// appended to `prefix`: `a::b`, `a::{b, c::d}`, `a::*`.
fn use_tree(tokens: &[(Token, usize)], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        match tokens.get(i).map(|t| &t.0) {
            Some(Token::Ident(name)) => {
                path.push(name.clone());
                i += 1;
                if tokens.get(i).map(|t| &t.0) == Some(&Token::PathSep) {
                    i += 1;
                    continue;
                }
                out.push(path);
                return i;
            }
            Some(Token::Open) => {
                i += 1;
                loop {
                    match tokens.get(i).map(|t| &t.0) {
                        Some(Token::Close) | None => return i + 1,
                        Some(Token::Comma) => i += 1,
                        _ => i = use_tree(tokens, i, path.clone(), out),
                    }
                }
            }
            _ => {
                // `a::*` or `a::<T>`: the path so far.
                out.push(path);
                return i;
            }
        }
    }
}

/// One path a file names, made absolute (from the crate root).
#[derive(Debug, Clone)]
struct Named {
    line: usize,
    path: Vec<String>,
}

/// Every `crate::`, `super::` and `self::` path of a library file's code,
/// made absolute: `super` is taken from the module it is written in, an
/// inline `mod tests { .. }` included.
fn named_paths(file: &str, source: &str) -> Vec<Named> {
    let tokens = tokens(&code_only(source));
    let module = module_of(file);
    let (mut depth, mut inline): (usize, Vec<(String, usize)>) = (0, Vec::new());
    let mut out = Vec::new();
    for i in 0..tokens.len() {
        let (token, line) = &tokens[i];
        match token {
            Token::Open => depth += 1,
            Token::Close => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
            }
            Token::Ident(kw) if kw == "mod" => {
                if let (Some((Token::Ident(name), _)), Some((Token::Open, _))) = (tokens.get(i + 1), tokens.get(i + 2))
                {
                    inline.push((name.clone(), depth));
                }
            }
            Token::Ident(root) if matches!(root.as_str(), "crate" | "super" | "self") => {
                let after_sep = i > 0 && tokens[i - 1].0 == Token::PathSep;
                if after_sep || tokens.get(i + 1).map(|t| &t.0) != Some(&Token::PathSep) {
                    continue;
                }
                let mut current: Vec<String> = module.clone();
                current.extend(inline.iter().map(|(name, _)| name.clone()));
                // `super::super::x`: climb once per `super`.
                let mut j = i;
                let mut base = if root == "crate" { Vec::new() } else { current };
                while let Some((Token::Ident(seg), _)) = tokens.get(j) {
                    match seg.as_str() {
                        "super" => {
                            base.pop();
                        }
                        "crate" | "self" => {}
                        _ => break,
                    }
                    if tokens.get(j + 1).map(|t| &t.0) != Some(&Token::PathSep) {
                        break;
                    }
                    j += 2;
                }
                let mut leaves = Vec::new();
                use_tree(&tokens, j, base, &mut leaves);
                out.extend(leaves.into_iter().map(|path| Named { line: *line, path }));
            }
            _ => {}
        }
    }
    out
}

/// What is wrong with the layering of these library files (path, text):
/// each path that points to a later layer, and each circle between files.
fn check_layers(files: &[(String, String)]) -> Vec<String> {
    let modules: BTreeMap<String, String> =
        files.iter().map(|(file, _)| (module_of(file).join("::"), file.clone())).collect();
    let mut problems = Vec::new();
    // file -> (file it names, first line that names it)
    let mut edges: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for (file, source) in files {
        let own = module_of(file).join("::");
        let own_layer = layer(&own);
        for named in named_paths(file, source) {
            let target = named.path.join("::");
            if let (Some((mine, m)), Some((theirs, t))) = (own_layer, layer(&target))
                && t > m
            {
                problems.push(format!(
                    "{file}:{}: `{own}` (layer {mine}) names `crate::{target}` of the later layer {theirs}",
                    named.line
                ));
            }
            // The file the path lands in: its longest prefix that is a file.
            let landed = (1..=named.path.len()).rev().find_map(|n| modules.get(&named.path[..n].join("::")));
            if let Some(to) = landed.filter(|to| *to != file) {
                edges.entry(file.clone()).or_default().entry(to.clone()).or_insert(named.line);
            }
        }
    }
    for circle in circles(&edges) {
        let shown: Vec<String> =
            circle.iter().map(|(from, to)| format!("{from}:{} names {to}", edges[from][to])).collect();
        problems.push(format!("files name each other around a circle: {}", shown.join("; ")));
    }
    problems
}

/// One circle (as its edges) through each group of files that reach each
/// other (Tarjan's strongly connected components, then a walk within one).
fn circles(edges: &BTreeMap<String, BTreeMap<String, usize>>) -> Vec<Vec<(String, String)>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, usize>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        groups: Vec<Vec<&'a str>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flat_map(|m| m.keys()) {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w.as_str()]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w.as_str()) {
                    let low = self.low[v].min(self.index[w.as_str()]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    group.push(w);
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    self.groups.push(group);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.groups
        .iter()
        .map(|group| {
            // Walk inside the group from its first file until a file repeats.
            let inside: BTreeSet<&str> = group.iter().copied().collect();
            let mut path = vec![*inside.first().expect("a group has files")];
            loop {
                let here = *path.last().expect("the walk has a start");
                let next =
                    edges[here].keys().find(|w| inside.contains(w.as_str())).expect("a group is strongly connected");
                if let Some(at) = path.iter().position(|p| *p == next.as_str()) {
                    let circle = &path[at..];
                    return circle
                        .iter()
                        .zip(circle.iter().skip(1).chain(std::iter::once(&circle[0])))
                        .map(|(a, b)| (a.to_string(), b.to_string()))
                        .collect();
                }
                path.push(next);
            }
        })
        .collect()
}

fn library_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    rust_files(root, "src")
        .into_iter()
        .filter(|(file, _)| file != "src/main.rs" && !file.starts_with("src/cli/"))
        .collect()
}

#[test]
fn every_module_names_only_its_own_layer_and_earlier_ones_without_a_circle() {
    let files = library_files();
    assert!(files.len() > 50, "found only {} files under src/", files.len());
    let named: usize = files.iter().map(|(file, source)| named_paths(file, source).len()).sum();
    assert!(named > 300, "read only {named} crate paths in src/: the reader is broken");
    let problems = check_layers(&files);
    assert!(
        problems.is_empty(),
        "the layering of src/ is broken (docs/DESIGN.md, \"Layout\"):\n{}",
        problems.join("\n")
    );
}

fn synthetic(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files.iter().map(|(f, s)| (f.to_string(), s.to_string())).collect()
}

#[test]
fn the_check_reports_an_upward_path_with_its_file_and_line() {
    // Negative controls: each text breaks the rule once and must be reported.
    let problems = check_layers(&synthetic(&[(
        "src/sim/world/net.rs",
        "//! The network.\nuse crate::sim::world::api::Api;\nuse crate::sim::run::runner::Report;\n",
    )]));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("src/sim/world/net.rs:3: `sim::world::net`"), "{problems:?}");
    assert!(problems[0].contains("crate::sim::run::runner::Report"), "{problems:?}");
    // Production naming the simulator, in a group, in an expression, and
    // through `super` from an inline module.
    let problems = check_layers(&synthetic(&[
        ("src/env.rs", "use crate::{core::policy::Policy, sim::world::timers};\n"),
        ("src/gate/pacing.rs", "fn f() {\n    crate::sim::world::timers::sleep(d);\n}\n"),
        ("src/sim/run/job.rs", "mod tests {\n    use super::super::super::checks::hunt;\n}\n"),
    ]));
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].starts_with("src/env.rs:1:") && problems[0].contains("sim::world::timers"), "{problems:?}");
    assert!(problems[1].starts_with("src/gate/pacing.rs:2:"), "{problems:?}");
    assert!(
        problems[2].starts_with("src/sim/run/job.rs:2:") && problems[2].contains("sim::checks::hunt"),
        "{problems:?}"
    );
    // Comments, doc links and strings are not imports; earlier layers are fine.
    let fine = check_layers(&synthetic(&[(
        "src/sim/world/net.rs",
        "/// See [`x`](crate::sim::run::runner).\nconst S: &str = \"crate::sim::checks\";\nuse crate::env::Clock;\n",
    )]));
    assert!(fine.is_empty(), "{fine:?}");
}

#[test]
fn the_check_reports_a_circle_between_files() {
    let problems = check_layers(&synthetic(&[
        ("src/sim/run/runner.rs", "use crate::sim::run::fleet::Shared;\n"),
        ("src/sim/run/fleet.rs", "\nuse crate::sim::run::runner::FLEET_HOST;\n"),
        ("src/sim/run/seed.rs", "use crate::sim::run::fleet::Shared;\n"),
    ]));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("src/sim/run/fleet.rs:2 names src/sim/run/runner.rs"), "{problems:?}");
    assert!(problems[0].contains("src/sim/run/runner.rs:1 names src/sim/run/fleet.rs"), "{problems:?}");
}
