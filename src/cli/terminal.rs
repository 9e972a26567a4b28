//! What reaches the terminal. A scenario's name, a body's error code, a
//! shard's finding or a line of a TOML file are the user's text: printed
//! raw, an escape sequence in them would redraw or clear the terminal, and
//! one dense line would fill it. Every line the CLI prints goes through
//! [`printable`]; error messages through [`error_text`] too.

use std::borrow::Cow;

/// The widest source line an error message quotes (a TOML file's line under
/// its parse error): a longer one is cut to about this many characters
/// around what the error points at.
pub const MAX_QUOTED_LINE: usize = 200;

/// The widest other line of an error message (one that echoes a value the
/// user gave, say): a longer one keeps this many characters. Lists of
/// names fit.
pub const MAX_ERROR_LINE: usize = 4096;

/// `text` with every control character but the line feed and the tab
/// escaped as Rust writes it (`\u{1b}`, `\r`), so that it shows instead of
/// acting on the terminal. Text without one is returned as it is.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn is_unsafe(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// An error message as printed: [`printable`], and no line longer than
/// [`MAX_ERROR_LINE`] characters. A quoted source line with a caret line
/// under it (how the TOML parser shows where it stopped) keeps
/// [`MAX_QUOTED_LINE`] characters around the caret, the caret under it; any
/// other long line keeps its start. A cut is marked `...`.
pub fn error_text(message: &str) -> String {
    let safe = printable(message);
    let lines: Vec<&str> = safe.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let caret = lines.get(i + 1).and_then(|next| source_and_caret(lines[i], next));
        match caret {
            Some((source, caret)) => {
                out.extend(source_window(source, caret));
                i += 2;
            }
            None => {
                out.push(cut(lines[i], 0, MAX_ERROR_LINE));
                i += 1;
            }
        }
    }
    out.join("\n")
}

/// A quoted source line (`12 | text`) and the caret line under it
/// (`   |      ^`): the gutter, the text, the caret's column and length.
struct Quoted<'a> {
    gutter: &'a str,
    text: &'a str,
}

struct Caret<'a> {
    gutter: &'a str,
    column: usize,
    carets: usize,
}

fn source_and_caret<'a>(line: &'a str, next: &'a str) -> Option<(Quoted<'a>, Caret<'a>)> {
    let bar = line.find(" | ")?;
    let number = line[..bar].trim_start();
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (gutter, text) = line.split_at(bar + 3);
    if next.len() < gutter.len() || !next.is_char_boundary(gutter.len()) {
        return None;
    }
    let (next_gutter, marks) = next.split_at(gutter.len());
    if next_gutter.trim() != "|" {
        return None;
    }
    let column = marks.chars().take_while(|&c| c == ' ').count();
    let carets = marks.chars().skip(column).take_while(|&c| c == '^').count();
    if carets == 0 {
        return None;
    }
    Some((Quoted { gutter, text }, Caret { gutter: next_gutter, column, carets }))
}

/// The source line and its caret, the text cut to a window around the caret.
fn source_window(source: Quoted<'_>, caret: Caret<'_>) -> [String; 2] {
    let chars = source.text.chars().count();
    if chars + source.gutter.len() <= MAX_QUOTED_LINE {
        let marks = format!("{}{}", " ".repeat(caret.column), "^".repeat(caret.carets));
        return [format!("{}{}", source.gutter, source.text), format!("{}{marks}", caret.gutter)];
    }
    let width = MAX_QUOTED_LINE.saturating_sub(source.gutter.len() + 6).max(20);
    let start = caret.column.saturating_sub(width / 2).min(chars.saturating_sub(width));
    let shown = cut(source.text, start, width);
    let lead = if start > 0 { 3 } else { 0 };
    let carets = caret.carets.min(width);
    let marks = format!("{}{}", " ".repeat(caret.column - start + lead), "^".repeat(carets));
    [format!("{}{shown}", source.gutter), format!("{}{marks}", caret.gutter)]
}

/// At most `width` characters of `line` from character `start` on, with
/// `...` where it was cut.
fn cut(line: &str, start: usize, width: usize) -> String {
    let chars = line.chars().count();
    if start == 0 && chars <= width {
        return line.to_owned();
    }
    let mut out = String::new();
    if start > 0 {
        out.push_str("...");
    }
    out.extend(line.chars().skip(start).take(width));
    if start + width < chars {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_lines_kept() {
        assert_eq!(printable("plain\ttext\n"), Cow::Borrowed("plain\ttext\n"));
        assert_eq!(printable("a\u{1b}[2Jb\rc\u{7}"), "a\\u{1b}[2Jb\\rc\\u{7}");
        assert_eq!(printable("\u{9b}31m"), "\\u{9b}31m", "the one-byte CSI of C1 too");
    }

    #[test]
    fn a_dense_toml_line_is_cut_around_the_caret() {
        let dense = format!("foo = [{}, @]", "1,".repeat(5_000_000));
        let column = dense.find('@').unwrap();
        let message = format!(
            "TOML parse error at line 2, column {}\n  |\n2 | {dense}\n  | {}^\nstring values must be quoted",
            column + 1,
            " ".repeat(column)
        );
        let shown = error_text(&message);
        assert!(shown.lines().all(|l| l.chars().count() <= MAX_QUOTED_LINE + 6), "{shown}");
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines[0], format!("TOML parse error at line 2, column {}", column + 1));
        assert!(lines[2].starts_with("2 | ...1,1,") && lines[2].ends_with(", @]"), "{}", lines[2]);
        // The caret stays under what it points at.
        let caret = lines[3].find('^').unwrap();
        assert_eq!(lines[2].as_bytes()[caret], b'@', "{shown}");
        assert_eq!(lines[4], "string values must be quoted");
    }

    #[test]
    fn a_short_quote_is_left_as_it_is_and_other_long_lines_keep_their_start() {
        let message = "TOML parse error at line 1, column 5\n  |\n1 | a = @\n  |     ^\nexpected a value";
        assert_eq!(error_text(message), message);
        let long = "x".repeat(10_000);
        let shown = error_text(&long);
        assert_eq!(shown, format!("{}...", "x".repeat(MAX_ERROR_LINE)));
        // A caret near the start: the window starts at the line's start.
        let dense = format!("a = @{}", "1".repeat(1000));
        let shown = error_text(&format!("1 | {dense}\n  |     ^"));
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].starts_with("1 | a = @111") && lines[0].ends_with("..."), "{shown}");
        assert_eq!(lines[1], "  |     ^");
    }
}
