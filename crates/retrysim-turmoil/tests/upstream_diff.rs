//! UPSTREAM.diff is the diff of the published turmoil 0.7.2 against this
//! directory: `regenerate-diff.sh` makes it afresh (cargo fetches the
//! published crate; the script holds the one list of files left out) into a
//! temporary file, and this test compares the two byte for byte. A change
//! to the fork's source, tests or README that UPSTREAM.diff does not show
//! fails it.

use std::path::Path;
use std::process::Command;

const REGENERATE: &str = "bash crates/retrysim-turmoil/regenerate-diff.sh";

#[test]
fn upstream_diff_is_the_diff_of_the_published_crate_against_this_copy() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fresh_path = std::env::temp_dir().join(format!(
        "retrysim-turmoil-upstream-{}.diff",
        std::process::id()
    ));
    let output = Command::new("bash")
        .arg(dir.join("regenerate-diff.sh"))
        .arg(&fresh_path)
        .output()
        .expect("runs bash");
    assert!(
        output.status.success(),
        "regenerate-diff.sh failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let fresh = std::fs::read_to_string(&fresh_path).expect("regenerate-diff.sh wrote its output");
    std::fs::remove_file(&fresh_path).expect("removes its temporary file");
    let recorded = std::fs::read_to_string(dir.join("UPSTREAM.diff")).expect("reads UPSTREAM.diff");

    if fresh != recorded {
        let (recorded_lines, fresh_lines): (Vec<_>, Vec<_>) =
            (recorded.lines().collect(), fresh.lines().collect());
        let at = recorded_lines
            .iter()
            .zip(&fresh_lines)
            .position(|(r, f)| r != f)
            .unwrap_or(recorded_lines.len().min(fresh_lines.len()));
        panic!(
            "UPSTREAM.diff no longer matches the fork against the published turmoil 0.7.2 \
             (first difference at line {}: UPSTREAM.diff has {:?}, now {:?}).\n\
             If the change is meant, regenerate it from the workspace root and say why in FORK.md:\n    {REGENERATE}",
            at + 1,
            recorded_lines.get(at).copied().unwrap_or("<end>"),
            fresh_lines.get(at).copied().unwrap_or("<end>"),
        );
    }
}
