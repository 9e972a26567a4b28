//! No function in `src/` is longer than a reader can hold: at most
//! [`MAX_LINES`] lines from its `fn` line to its closing brace, both
//! included (doc comments and attributes above it not counted). Measured on
//! the code alone (comments and strings blanked, so a brace in either does
//! not count), by matching each body's braces; a closure counts towards the
//! function it is written in.
//!
//! And no file in `src/` is longer than [`MAX_FILE_LINES`] lines, its unit
//! tests included (a module's large test tables go in a file of their own,
//! `mod tests;` in `x/tests.rs`).

use std::path::Path;

use crate::rust_source::{code_only, rust_files};

const MAX_LINES: usize = 100;

/// The longest a file of `src/` may be, in lines.
const MAX_FILE_LINES: usize = 1_000;

/// The files (path, text) longer than `max` lines, longest first, as
/// "path: N lines".
fn long_files(files: &[(String, String)], max: usize) -> Vec<String> {
    let mut long: Vec<(usize, &str)> =
        files.iter().map(|(file, text)| (text.lines().count(), file.as_str())).filter(|(n, _)| *n > max).collect();
    long.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    long.iter().map(|(n, file)| format!("{file}: {n} lines")).collect()
}

/// One function: its file, the line of its `fn`, its name and its length in lines.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Function {
    file: String,
    line: usize,
    name: String,
    lines: usize,
}

/// Every function with a body in `source`, with its length.
fn functions(file: &str, source: &str) -> Vec<Function> {
    let code: Vec<char> = code_only(source).chars().collect();
    let line_at = |i: usize| code[..i].iter().filter(|&&c| c == '\n').count() + 1;
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for i in 0..code.len().saturating_sub(2) {
        let keyword = code[i] == 'f' && code[i + 1] == 'n' && (i == 0 || !is_ident(code[i - 1]));
        if !keyword || !code[i + 2].is_whitespace() {
            continue;
        }
        let mut j = i + 2;
        while j < code.len() && code[j].is_whitespace() {
            j += 1;
        }
        let name: String = code[j..].iter().take_while(|&&c| is_ident(c)).collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` outside the signature's brackets;
        // a `;` first means a declaration without a body.
        let mut depth = 0i32;
        let open = code[j..].iter().enumerate().find_map(|(k, &c)| {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => return Some(None),
                '{' if depth == 0 => return Some(Some(j + k)),
                _ => {}
            }
            None
        });
        let Some(Some(open)) = open else { continue };
        let mut braces = 0;
        let close = code[open..].iter().enumerate().find_map(|(k, &c)| {
            match c {
                '{' => braces += 1,
                '}' => {
                    braces -= 1;
                    if braces == 0 {
                        return Some(open + k);
                    }
                }
                _ => {}
            }
            None
        });
        let close = close.unwrap_or_else(|| panic!("{file}:{}: fn {name} has no closing brace", line_at(i)));
        out.push(Function { file: file.to_owned(), line: line_at(i), name, lines: line_at(close) - line_at(i) + 1 });
    }
    out
}

/// The functions of these files (path, text) longer than `max` lines, longest first.
fn too_long(files: &[(String, String)], max: usize) -> Vec<Function> {
    let mut long: Vec<Function> =
        files.iter().flat_map(|(file, source)| functions(file, source)).filter(|f| f.lines > max).collect();
    long.sort_by(|a, b| b.lines.cmp(&a.lines).then_with(|| (&a.file, a.line).cmp(&(&b.file, b.line))));
    long
}

#[test]
fn no_function_in_src_is_longer_than_100_lines() {
    let files = rust_files(Path::new(env!("CARGO_MANIFEST_DIR")), "src");
    let all: Vec<Function> = files.iter().flat_map(|(file, source)| functions(file, source)).collect();
    assert!(all.len() > 1000, "found only {} functions in src/: the reader is broken", all.len());
    let long = too_long(&files, MAX_LINES);
    let shown: Vec<String> =
        long.iter().map(|f| format!("{}:{}: fn {} is {} lines", f.file, f.line, f.name, f.lines)).collect();
    assert!(long.is_empty(), "functions longer than {MAX_LINES} lines (split them):\n{}", shown.join("\n"));
}

#[test]
fn the_measure_counts_from_fn_to_the_closing_brace() {
    let body = |n: usize| (0..n).map(|i| format!("    let _x{i} = \"{{\"; // }}\n")).collect::<String>();
    // `short` is 100 lines (its `fn` line, 98 of body, its brace); `long`,
    // with a `where` clause and a `;` inside its signature's brackets, 101.
    let source = format!(
        "/// Doc.\n#[inline]\nfn short() {{\n{}}}\n\nfn long(a: [u8; 2]) -> u8\nwhere\n    u8: Copy,\n{{\n{}}}\ntrait T {{\n    fn declared(&self);\n}}\n",
        body(98),
        body(96)
    );
    let found = functions("src/x.rs", &source);
    let lengths: Vec<(&str, usize, usize)> = found.iter().map(|f| (f.name.as_str(), f.line, f.lines)).collect();
    assert_eq!(lengths, [("short", 3, 100), ("long", 104, 101)]);
    // The negative control: the 101-line function is reported, with its place.
    let long = too_long(&[("src/x.rs".to_owned(), source)], MAX_LINES);
    assert_eq!(long, [Function { file: "src/x.rs".into(), line: 104, name: "long".into(), lines: 101 }]);
}

#[test]
fn no_file_in_src_is_longer_than_1000_lines() {
    let files = rust_files(Path::new(env!("CARGO_MANIFEST_DIR")), "src");
    assert!(files.len() > 50, "found only {} files in src/: the walk is broken", files.len());
    let long = long_files(&files, MAX_FILE_LINES);
    assert!(long.is_empty(), "files longer than {MAX_FILE_LINES} lines (split them by domain):\n{}", long.join("\n"));
}

#[test]
fn the_file_measure_counts_every_line_and_reports_the_longest_first() {
    let lines = |n: usize| "// x\n".repeat(n);
    let files = [("src/a.rs", lines(1_000)), ("src/b.rs", lines(1_001)), ("src/c.rs", lines(1_200))]
        .map(|(f, t)| (f.to_owned(), t));
    // The negative control: 1,001 and 1,200 lines are reported; 1,000 is not.
    assert_eq!(long_files(&files, MAX_FILE_LINES), ["src/c.rs: 1200 lines", "src/b.rs: 1001 lines"]);
}
