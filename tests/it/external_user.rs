//! README "Testing your own client" (and `docs/guide/testing-your-client.md`)
//! is the code of `tests/external-user/`, and the book's "Testing a
//! reqwest-middleware stack" (`docs/book/reqwest-middleware.md`) the code of
//! `tests/external-reqwest/`: crates outside this package that CI tests on
//! their own (`.ci/external-user.sh`). Each documentation block between
//! `README:<name>` (or `BOOK:<name>`) `begin`/`end` markers is, verbatim,
//! the text between the same markers in that crate's files. And the root
//! package never compiles those crates' files as its own tests.

use std::process::Command;

const EXTERNAL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/external-user");

/// The book's reqwest-middleware crate.
const EXTERNAL_REQWEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/external-reqwest");

/// The lines strictly between the line holding `<tag> begin` and the line
/// holding `<tag> end`, for a tag such as `README:external-cargo`.
fn between<'a>(text: &'a str, tag: &str, file: &str) -> Vec<&'a str> {
    let (begin, end) = (format!("{tag} begin"), format!("{tag} end"));
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

/// The block `tag` of the documentation (README.md, the guide's and the
/// book's pages): its fenced code, without the fences. Its markers must be
/// in exactly one page.
fn readme_block(tag: &str) -> Vec<&'static str> {
    let (begin, end) = (format!("{tag} begin"), format!("{tag} end"));
    let pages: Vec<_> =
        crate::readme::PAGES.iter().filter(|(_, text)| text.contains(&begin) || text.contains(&end)).collect();
    let [&(page, text)] = pages[..] else {
        let names: Vec<_> = pages.iter().map(|(n, _)| *n).collect();
        panic!("{begin:?} must be in exactly one page of the documentation, not in {names:?}");
    };
    let block = between(text, tag, page);
    let (first, last) = (block.first().copied().unwrap_or(""), block.last().copied().unwrap_or(""));
    assert!(first.starts_with("```") && last == "```", "{page}: {tag} must wrap one fenced block: {block:?}");
    block[1..block.len() - 1].to_vec()
}

fn file(path: &str) -> String {
    file_in(EXTERNAL, path)
}

fn file_in(dir: &str, path: &str) -> String {
    std::fs::read_to_string(format!("{dir}/{path}")).unwrap_or_else(|e| panic!("{dir}/{path}: {e}"))
}

#[test]
fn the_readme_blocks_are_the_external_crates_code() {
    for (name, path) in
        [("external-cargo", "Cargo.toml"), ("external-client", "src/lib.rs"), ("external-test", "tests/client.rs")]
    {
        let (text, tag) = (file(path), format!("README:{name}"));
        assert_eq!(readme_block(&tag), between(&text, &tag, path), "{tag} and {path} differ");
    }
}

#[test]
fn the_books_reqwest_blocks_are_the_outside_crates_code() {
    for (name, path) in
        [("reqwest-cargo", "Cargo.toml"), ("reqwest-lib", "src/lib.rs"), ("reqwest-test", "tests/stack.rs")]
    {
        let (text, tag) = (file_in(EXTERNAL_REQWEST, path), format!("BOOK:{name}"));
        let (page, file) = (readme_block(&tag), between(&text, &tag, path));
        assert_eq!(page, file, "{tag} in docs/book/reqwest-middleware.md and tests/external-reqwest/{path} differ");
        // The whole file, but for its marker lines (and the manifest's
        // [package] header): nothing the reader does not see is compiled.
        let rest: Vec<&str> = text
            .lines()
            .filter(|l| !l.contains(&tag))
            .skip_while(|l| path == "Cargo.toml" && !l.starts_with("[dependencies]"))
            .collect();
        assert_eq!(rest, file, "tests/external-reqwest/{path} holds lines outside its {tag} block");
    }
    let manifest = file_in(EXTERNAL_REQWEST, "Cargo.toml");
    // The versions the page names are the ones the crate builds, and match
    // retrysim's own: reqwest 0.13, reqwest-middleware 0.5, reqwest-retry 0.9.
    let ours = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    for (krate, major) in [("reqwest", "0.13"), ("reqwest-middleware", "0.5"), ("reqwest-retry", "0.9")] {
        let theirs =
            manifest.lines().find(|l| l.starts_with(&format!("{krate} = "))).unwrap_or_else(|| panic!("{krate}"));
        assert!(theirs.contains(&format!("\"{major}\"")), "{theirs} is not {krate} {major}");
        let line = ours
            .lines()
            .find(|l| l.starts_with(&format!("{krate} = {{ version")))
            .unwrap_or_else(|| panic!("{krate} in ours"));
        assert!(line.contains(&format!("\"{major}.")), "retrysim's {line} is not {krate} {major}");
        let page = crate::readme::PAGES.iter().find(|(n, _)| *n == "docs/book/reqwest-middleware.md").unwrap().1;
        assert!(page.contains(&format!("**{krate} {major}**")), "the page does not name {krate} {major}");
    }
    let git: Vec<_> = manifest.lines().filter(|l| l.starts_with("retrysim = { git = \"https://github.com/")).collect();
    assert_eq!(git.len(), 1, "one retrysim git line in tests/external-reqwest/Cargo.toml: {git:?}");
    assert!(git[0].contains("features = [\"sim-reqwest\"]"), "{}", git[0]);
    assert!(!manifest.contains("path ="), "tests/external-reqwest must not reach retrysim by path");
    assert!(
        !std::path::Path::new(&format!("{EXTERNAL_REQWEST}/Cargo.lock")).exists(),
        "a lockfile in tests/external-reqwest"
    );
    let script = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/external-user.sh")).unwrap();
    assert!(
        script.lines().any(|l| l == "outside external-reqwest 1"),
        ".ci/external-user.sh must build tests/external-reqwest"
    );
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
    let external: Vec<_> = sources
        .iter()
        .filter(|s| s.contains("/tests/external-user/") || s.contains("/tests/external-reqwest/"))
        .collect();
    assert!(external.is_empty(), "the root workspace compiles {external:?}: the external crate is not its own");
}
