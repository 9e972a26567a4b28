//! The documentation, for the tests that keep its tables and examples in
//! step: README.md, the front door, every page of the guide under
//! `docs/guide/`, of the book under `docs/book/` and of the measurements
//! under `docs/measurements/`. A test names a section by its `## ` heading and finds it in
//! whichever page holds it, so a section can move between pages without its
//! test changing.

/// The README as committed.
pub const README: &str = include_str!("../../README.md");

/// Every page, as its path from the repository root and its text: the README
/// first, then the guide's pages in the order the README lists them, then
/// the book's own pages and the measurements.
pub const PAGES: [(&str, &str); 31] = [
    ("README.md", README),
    ("docs/guide/core.md", include_str!("../../docs/guide/core.md")),
    ("docs/guide/comparing-policies.md", include_str!("../../docs/guide/comparing-policies.md")),
    ("docs/guide/real-servers-habits.md", include_str!("../../docs/guide/real-servers-habits.md")),
    ("docs/guide/calibration.md", include_str!("../../docs/guide/calibration.md")),
    ("docs/guide/what-people-use.md", include_str!("../../docs/guide/what-people-use.md")),
    ("docs/guide/fleet-controls.md", include_str!("../../docs/guide/fleet-controls.md")),
    ("docs/guide/hunting.md", include_str!("../../docs/guide/hunting.md")),
    ("docs/guide/testing-your-client.md", include_str!("../../docs/guide/testing-your-client.md")),
    ("docs/guide/any-language.md", include_str!("../../docs/guide/any-language.md")),
    ("docs/guide/typed-clients.md", include_str!("../../docs/guide/typed-clients.md")),
    ("docs/guide/driver.md", include_str!("../../docs/guide/driver.md")),
    ("docs/guide/lean-build.md", include_str!("../../docs/guide/lean-build.md")),
    ("docs/guide/command-line.md", include_str!("../../docs/guide/command-line.md")),
    ("docs/guide/scenario-keys.md", include_str!("../../docs/guide/scenario-keys.md")),
    ("docs/guide/snapshots.md", include_str!("../../docs/guide/snapshots.md")),
    ("docs/guide/timelines.md", include_str!("../../docs/guide/timelines.md")),
    ("docs/guide/determinism.md", include_str!("../../docs/guide/determinism.md")),
    ("docs/guide/speed.md", include_str!("../../docs/guide/speed.md")),
    ("docs/book/SUMMARY.md", include_str!("../../docs/book/SUMMARY.md")),
    ("docs/book/reqwest-middleware.md", include_str!("../../docs/book/reqwest-middleware.md")),
    ("docs/book/troubleshooting.md", include_str!("../../docs/book/troubleshooting.md")),
    ("docs/book/checks.md", include_str!("../../docs/book/checks.md")),
    ("docs/book/faults.md", include_str!("../../docs/book/faults.md")),
    ("docs/book/examples.md", include_str!("../../docs/book/examples.md")),
    ("docs/measurements/README.md", include_str!("../../docs/measurements/README.md")),
    ("docs/measurements/mutants.md", include_str!("../../docs/measurements/mutants.md")),
    ("docs/measurements/deep-hunt.md", include_str!("../../docs/measurements/deep-hunt.md")),
    ("docs/measurements/mutants-issue54.md", include_str!("../../docs/measurements/mutants-issue54.md")),
    ("docs/measurements/calibration.md", include_str!("../../docs/measurements/calibration.md")),
    ("docs/measurements/speed-history.md", include_str!("../../docs/measurements/speed-history.md")),
];

/// The folders whose every `.md` file is a page.
const PAGE_DIRS: [&str; 3] = ["docs/guide", "docs/book", "docs/measurements"];

/// The README's length limit: a front door, the rest in the guide.
const README_MAX_LINES: usize = 300;

/// The page holding the section whose `## ` heading starts with `heading`,
/// and the section's body, up to the next `## ` heading or the page's end.
/// Exactly one page must hold it, once.
pub fn page_and_section(heading: &str) -> (&'static str, &'static str) {
    let marker = format!("\n## {heading}");
    let holding: Vec<(&str, usize)> =
        PAGES.iter().map(|(name, text)| (*name, text.matches(&marker).count())).filter(|(_, n)| *n > 0).collect();
    match holding[..] {
        [(name, 1)] => {
            let text = PAGES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).expect("a listed page");
            let body = text.split(&marker).nth(1).expect("the heading just counted");
            (name, body.split("\n## ").next().unwrap_or(body))
        }
        [] => panic!(
            "no page has a section '## {heading}': looked in {}",
            PAGES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        ),
        _ => panic!(
            "the section '## {heading}' must be in exactly one page, once; it is in {}",
            holding.iter().map(|(n, k)| format!("{n} ({k}x)")).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The body of the section whose `## ` heading starts with `heading`, up to
/// the next `## ` heading, in whichever page holds it (exactly one must).
pub fn section(heading: &str) -> &'static str {
    page_and_section(heading).1
}

/// The rows of the first table after `marker` in section `heading`, each as
/// its cells (header and rule left out).
pub fn table_after(heading: &str, marker: &str) -> Vec<Vec<String>> {
    let (page, section) = page_and_section(heading);
    let after = section.split(marker).nth(1).unwrap_or_else(|| panic!("no {marker:?} in {page}'s section {heading:?}"));
    after
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().to_owned()).collect())
        .collect()
}

#[test]
fn the_pages_are_the_readme_and_every_guide_file() {
    let mut on_disk: Vec<String> = Vec::new();
    for dir in PAGE_DIRS {
        let path = format!("{}/{dir}", env!("CARGO_MANIFEST_DIR"));
        on_disk.extend(
            std::fs::read_dir(&path)
                .unwrap_or_else(|e| panic!("{dir}: {e}"))
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".md"))
                .map(|n| format!("{dir}/{n}")),
        );
    }
    on_disk.sort();
    let mut listed: Vec<String> = PAGES.iter().skip(1).map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(PAGES[0].0, "README.md");
    assert_eq!(listed, on_disk, "tests/it/readme.rs's PAGES must list every .md of {PAGE_DIRS:?}, and only those");
    // Each page is the file it names (include_str! path and name agree).
    for (name, text) in PAGES {
        let path = format!("{}/{name}", env!("CARGO_MANIFEST_DIR"));
        let disk = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(disk, text, "PAGES holds another file's text under {name}");
    }
}

#[test]
fn the_readme_is_a_front_door() {
    let lines = README.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move a section to a page of docs/guide/"
    );
}

#[test]
fn every_guide_page_has_a_title_and_a_way_back() {
    for (name, text) in &PAGES[1..] {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let title = lines.next().unwrap_or("");
        assert!(title.starts_with("# "), "{name} must start with a '# ' title, not {title:?}");
        let back = lines.next().unwrap_or("");
        assert!(back.contains("](../../README.md"), "{name}: the line after the title must link back to the README");
    }
}

#[test]
fn the_readme_lists_every_guide_page() {
    let guide = section("The guide");
    for (name, _) in PAGES.iter().filter(|(n, _)| n.starts_with("docs/guide/")) {
        assert!(guide.contains(&format!("]({name})")), "README's \"The guide\" does not link {name}");
    }
    assert!(guide.contains("](docs/DESIGN.md)"), "README's \"The guide\" does not link docs/DESIGN.md");
    assert!(guide.contains("](docs/book/SUMMARY.md)"), "README's \"The guide\" does not link the book");
    assert!(guide.contains("](docs/measurements/README.md)"), "README's \"The guide\" does not link the measurements");
}

#[test]
fn the_books_summary_lists_every_book_page_and_the_measurements_index_every_measurement() {
    let page = |name: &str| PAGES.iter().find(|(n, _)| *n == name).expect("a listed page").1;
    for (index, dir) in [("docs/book/SUMMARY.md", "docs/book/"), ("docs/measurements/README.md", "docs/measurements/")]
    {
        let text = page(index);
        for (name, _) in PAGES.iter().filter(|(n, _)| n.starts_with(dir) && *n != index) {
            let file = &name[dir.len()..];
            assert!(text.contains(&format!("]({file})")), "{index} does not link {file}");
        }
    }
}

#[test]
fn a_section_is_found_in_whichever_page_holds_it() {
    assert_eq!(page_and_section("Two commands").0, "README.md");
    assert_eq!(page_and_section("Measured speed").0, "docs/guide/speed.md");
    assert!(section("Determinism").contains("master seed"));
    // A prefix of two headings is refused, naming both pages.
    let both = std::panic::catch_unwind(|| page_and_section("T")).expect_err("'## T' starts several headings");
    let message = both.downcast_ref::<String>().expect("a formatted message");
    assert!(message.contains("README.md") && message.contains("docs/guide/timelines.md"), "{message}");
}
