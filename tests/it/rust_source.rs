//! Just enough of Rust's lexical rules to read `src/` as code: comments and
//! the insides of string and character literals become spaces (lines stay
//! where they were), so a `crate::` path or a brace in a doc comment or a
//! string is not taken for code. Used by `layers.rs` and `function_lengths.rs`.

use std::path::{Path, PathBuf};

/// `src` with every comment and the contents of every string, byte string,
/// raw string and character literal replaced by spaces; newlines are kept,
/// so line numbers are the file's.
pub fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, text: &[char]| {
        out.extend(text.iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
    };
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        let starts = |s: &str| s.chars().enumerate().all(|(k, c)| rest.get(k) == Some(&c));
        let after_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        let end = if starts("//") {
            rest.iter().position(|&c| c == '\n').map_or(chars.len(), |n| i + n)
        } else if starts("/*") {
            block_comment_end(&chars, i)
        } else if let Some(hashes) = raw_string_start(rest).filter(|_| !after_ident) {
            raw_string_end(&chars, i, hashes)
        } else if rest[0] == '"' || (starts("b\"") && !after_ident) {
            string_end(&chars, i + usize::from(rest[0] == 'b'))
        } else if rest[0] == '\'' || (starts("b'") && !after_ident) {
            match char_literal_end(&chars, i + usize::from(rest[0] == 'b')) {
                Some(end) => end,
                None => {
                    // A lifetime or a label: code.
                    out.push(rest[0]);
                    i += 1;
                    continue;
                }
            }
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &chars[i..end]);
        i = end;
    }
    out
}

/// The index just past the block comment starting at `i` (they nest).
fn block_comment_end(chars: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    chars.len()
}

/// `Some(number of #)` when a raw string (`r"`, `r#"`, `br#"`...) starts here.
fn raw_string_start(rest: &[char]) -> Option<usize> {
    let r = match rest {
        ['b', 'r', ..] => 2,
        ['r', ..] => 1,
        _ => return None,
    };
    let hashes = rest[r..].iter().take_while(|&&c| c == '#').count();
    (rest.get(r + hashes) == Some(&'"')).then_some(hashes)
}

fn raw_string_end(chars: &[char], i: usize, hashes: usize) -> usize {
    let open = chars[i..].iter().position(|&c| c == '"').expect("a raw string opens with a quote") + i + 1;
    let mut j = open;
    while j < chars.len() {
        if chars[j] == '"' && chars[j + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes {
            return j + 1 + hashes;
        }
        j += 1;
    }
    chars.len()
}

/// The index just past the string whose opening quote is at `i`.
fn string_end(chars: &[char], i: usize) -> usize {
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            _ => j += 1,
        }
    }
    chars.len()
}

/// The index just past the character literal whose quote is at `i`, or
/// `None` for a lifetime or a label (`'a`, `'static`).
fn char_literal_end(chars: &[char], i: usize) -> Option<usize> {
    match chars.get(i + 1)? {
        '\\' => {
            // The escaped character itself may be a quote (`'\''`).
            let close = chars.get(i + 3..)?.iter().position(|&c| c == '\'')?;
            Some(i + 3 + close + 1)
        }
        _ if chars.get(i + 2) == Some(&'\'') => Some(i + 3),
        _ => None,
    }
}

/// Every `.rs` file under `dir`, sorted, with its path relative to `root`
/// (forward slashes) and its text.
pub fn rust_files(root: &Path, dir: &str) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut stack = vec![root.join(dir)];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("cannot list {}: {e}", d.display())) {
            let path: PathBuf = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).expect("under the root").to_string_lossy().replace('\\', "/");
                let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"));
                files.push((rel, text));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn comments_strings_and_chars_are_blanked_and_lifetimes_kept() {
    let src = "let a = \"crate::x {\"; // crate::y {\n/* crate::z /* { */ } */ let b: &'a str = r#\"{\"#;\nlet c = '{'; let d = '\\'';";
    let code = code_only(src);
    assert_eq!(code.lines().count(), src.lines().count());
    assert!(!code.contains("crate::") && !code.contains('{'), "{code}");
    assert!(code.contains("&'a str"), "{code}");
    assert!(code.contains("let d =") && code.contains("let c ="), "{code}");
}
