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
