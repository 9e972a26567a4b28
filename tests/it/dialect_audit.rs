//! Issue 55: which retry crates honour each rate-limit dialect. The table in
//! docs/guide/what-people-use.md ("Which dialects each crate honours") is
//! what `cargo run --release --example audit_dialects` prints, byte for
//! byte; the example is included here, so this runs its code.

#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../../examples/audit_dialects.rs"]
mod audit_dialects;

use retrysim::testing::scenario::Dialect;

#[test]
fn the_dialect_audit_table_is_the_examples_output() {
    let cells = audit_dialects::run().unwrap_or_else(|e| panic!("{e}"));
    // retrysim's own client is never early in any dialect, and the measure
    // can fail: every foreign client (none reads a dialect's fields) is
    // early in every one, on a window longer than its first waits.
    let row = |name: &str| audit_dialects::ROWS.iter().position(|r| *r == name).unwrap();
    for (di, dialect) in Dialect::SPOKEN.iter().enumerate() {
        let ours = &cells[&(row("retrysim"), di)];
        assert_eq!((ours.early, ours.done.iter().all(|d| *d == ours.jobs)), (0, true), "{}", dialect.name());
        for foreign in ["tower-retry", "backon-default", "backon-retry-after", "reqwest-retry"] {
            assert!(cells[&(row(foreign), di)].early > 0, "{foreign} on {}", dialect.name());
        }
    }
    let table = audit_dialects::markdown(&cells);
    let page = include_str!("../../docs/guide/what-people-use.md");
    assert!(
        page.contains(&table),
        "docs/guide/what-people-use.md does not hold the dialect audit's table; \
         `cargo run --release --example audit_dialects` prints it:\n{table}"
    );
}
