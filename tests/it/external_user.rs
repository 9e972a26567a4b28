//! README "Testing your own client" (and `docs/guide/testing-your-client.md`)
//! is the code of `tests/external-user/`, a crate outside this package that
//! CI tests on its own (`.ci/run`): each documentation block between
//! `README:<name> begin/end` markers is, verbatim, the text between the same
//! markers in that crate's files. And the root package
//! never compiles that crate's files as its own tests.

use std::process::Command;

const EXTERNAL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/external-user");

/// The lines strictly between the line holding `README:<name> begin` and the
/// line holding `README:<name> end`.
fn between<'a>(text: &'a str, name: &str, file: &str) -> Vec<&'a str> {
    let (begin, end) = (format!("README:{name} begin"), format!("README:{name} end"));
    let lines: Vec<&str> = text.lines().collect();
    let find = |marker: &str| {
        let found: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].contains(marker)).collect();
        assert_eq!(found.len(), 1, "{file} must hold {marker:?} exactly once");
        found[0]
    };
    let (b, e) = (find(&begin), find(&end));
    assert!(b < e, "{file}: {begin:?} after {end:?}");
    lines[b + 1..e].to_vec()
}

/// The block `name` of the documentation (README.md and the guide's pages):
/// its fenced code, without the fences. Its `README:<name>` markers must be
/// in exactly one page.
fn readme_block(name: &str) -> Vec<&'static str> {
    let (begin, end) = (format!("README:{name} begin"), format!("README:{name} end"));
    let pages: Vec<_> =
        crate::readme::PAGES.iter().filter(|(_, text)| text.contains(&begin) || text.contains(&end)).collect();
    let [&(page, text)] = pages[..] else {
        let names: Vec<_> = pages.iter().map(|(n, _)| *n).collect();
        panic!("{begin:?} must be in exactly one page of the documentation, not in {names:?}");
    };
    let block = between(text, name, page);
    let (first, last) = (block.first().copied().unwrap_or(""), block.last().copied().unwrap_or(""));
    assert!(first.starts_with("```") && last == "```", "{page}: README:{name} must wrap one fenced block: {block:?}");
    block[1..block.len() - 1].to_vec()
}

fn file(path: &str) -> String {
    std::fs::read_to_string(format!("{EXTERNAL}/{path}")).unwrap_or_else(|e| panic!("{EXTERNAL}/{path}: {e}"))
}

#[test]
fn the_readme_blocks_are_the_external_crates_code() {
    for (name, path) in
        [("external-cargo", "Cargo.toml"), ("external-client", "src/lib.rs"), ("external-test", "tests/client.rs")]
    {
        let text = file(path);
        assert_eq!(readme_block(name), between(&text, name, path), "README:{name} and {path} differ");
    }
}

#[test]
fn the_readme_names_what_the_external_crate_has() {
    let test = file("tests/client.rs");
    let section = crate::readme::section("Testing your own client\n");
    // The replay line and the snapshot file it names belong to real tests.
    assert!(section.contains("RETRYSIM_SEED=17 cargo test my_client_hunt -- --exact"));
    assert!(test.contains("\nfn my_client_hunt() {\n"));
    assert!(section.contains("tests/snapshots/client__my_client_on_a_busy_fleet.snap.new"));
    assert!(
        std::path::Path::new(&format!("{EXTERNAL}/tests/snapshots/client__my_client_on_a_busy_fleet.snap")).exists()
    );
    assert!(file("tests/broken.rs").contains("harness().check(7)"));
    // As a user's crate outside the repository has it: retrysim by git URL,
    // twice (lean for the code, full for the tests), nothing by path, no
    // [patch], no lockfile of its own (.ci/external-user.sh builds it).
    let manifest = file("Cargo.toml");
    let git_lines: Vec<_> =
        manifest.lines().filter(|l| l.starts_with("retrysim = { git = \"https://github.com/")).collect();
    assert_eq!(git_lines.len(), 2, "two retrysim git lines in tests/external-user/Cargo.toml: {git_lines:?}");
    assert!(!manifest.contains("path ="), "tests/external-user must not reach retrysim by path");
    assert!(!manifest.lines().any(|l| l.starts_with("[patch")), "tests/external-user must need no [patch]");
    assert!(!std::path::Path::new(&format!("{EXTERNAL}/Cargo.lock")).exists(), "a lockfile in tests/external-user");
    let script = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/external-user.sh")).unwrap();
    assert!(script.contains(&format!("url_in_readme=\"{}\"", git_url(git_lines[0]))), "the script's URL");
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).unwrap();
    // At the lowest priority, beside the conformance runs (see .ci/run).
    assert!(ci.lines().any(|l| l == "nice -n 19 bash .ci/external-user.sh"), ".ci/run must run .ci/external-user.sh");
}

/// The URL of a `retrysim = { git = "URL", ... }` line.
fn git_url(line: &str) -> &str {
    line.split('"').nth(1).unwrap()
}

#[test]
fn the_root_package_does_not_compile_the_external_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(cargo)
        .args(["metadata", "--offline", "--no-deps", "--format-version", "1", "--manifest-path", manifest])
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let names: Vec<&str> = packages.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["retrysim", "retrysim-turmoil"], "the root workspace is retrysim and its turmoil fork");
    let sources: Vec<&str> = packages
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["src_path"].as_str().unwrap())
        .collect();
    assert!(sources.iter().any(|s| s.ends_with("/tests/it/main.rs")), "{sources:?}");
    let external: Vec<_> = sources.iter().filter(|s| s.contains("/tests/external-user/")).collect();
    assert!(external.is_empty(), "the root workspace compiles {external:?}: the external crate is not its own");
}
