//! Human output of names a host or a tree supplies. A Linux interface name may hold any byte
//! but '/', ':' and white space (dev_valid_name, net/core/dev.c), so ESC and other control
//! characters reach us from a live host, and a tree may hold anything, newlines included.
//! Printed raw, they would move the cursor, recolour the terminal or forge a line of doctor's
//! output. JSON escapes them already; human output escapes them here.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `s` with every control character (C0, DEL, C1) written as a visible escape: `\n`, `\t`,
/// `\r`, else `\xNN` / `\u{NNNN}`. For one field of a line.
pub fn line(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// A whole rendered text: its own line breaks kept, every other control character escaped
/// (the backstop for a field a renderer did not pass through [`line`]).
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// `s` for HTML text or a quoted attribute: `&`, `<`, `>` and `"` as entities. For the
/// self-contained reports (the lab's, tune search's), whose names come from hosts and trees.
pub fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn escape(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    let bad = |c: char| c.is_control() && !(keep_newlines && c == '\n');
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' if keep_newlines => out.push('\n'),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::line;

    #[test]
    fn control_characters_are_made_visible_and_the_rest_kept() {
        assert_eq!(line("eth0"), "eth0");
        assert_eq!(line("ünï-0"), "ünï-0");
        assert_eq!(
            line("e\x1b[31mvil\nCRITICAL forged\r\t\u{7f}\u{9b}"),
            "e\\x1b[31mvil\\nCRITICAL forged\\r\\t\\x7f\\x9b"
        );
        assert_eq!(super::text("a\x1b]0;t\x07\nb\n"), "a\\x1b]0;t\\x07\nb\n");
    }
}
