//! The README, for the tests that keep its tables and examples in step.

/// The README as committed.
pub const README: &str = include_str!("../../README.md");

/// The body of the section whose `## ` heading starts with `heading`, up to
/// the next `## ` heading.
pub fn section(heading: &str) -> &'static str {
    let body = README
        .split(&format!("\n## {heading}"))
        .nth(1)
        .unwrap_or_else(|| panic!("README has no section '## {heading}'"));
    body.split("\n## ").next().unwrap_or(body)
}

/// The rows of the first table after `marker` in section `heading`, each as
/// its cells (header and rule left out).
pub fn table_after(heading: &str, marker: &str) -> Vec<Vec<String>> {
    let after =
        section(heading).split(marker).nth(1).unwrap_or_else(|| panic!("no {marker:?} in README section {heading:?}"));
    after
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().to_owned()).collect())
        .collect()
}
