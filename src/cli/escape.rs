//! Text a person reads on a terminal. Conversation ids are any UTF-8 text, control characters
//! included: printed raw, an ANSI escape sequence in one could rewrite the operator's screen.

use serde_json::Value;

/// Whether `c` could change how a terminal shows what follows it: C0 and C1 controls, DEL,
/// and the bidirectional formatting characters (which reorder the text around them).
fn is_hazard(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every hazardous character, and the backslash, written as a Rust escape (`\r`,
/// `\u{1b}`, `\\`), so that what is shown is unambiguous and inert.
pub(crate) fn for_terminal(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if is_hazard(c) || c == '\\' {
            shown.extend(c.escape_debug());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// A conversation id as a person reads it: its text (invalid UTF-8 replaced), escaped.
pub(crate) fn id(bytes: &[u8]) -> String {
    for_terminal(&String::from_utf8_lossy(bytes))
}

/// `value` as one line of JSON. serde_json escapes the C0 controls; DEL, the C1 controls (an
/// 8-bit CSI among them) and the bidirectional formatting characters are escaped here too,
/// as `\uXXXX`, which JSON reads back as the same text.
pub(crate) fn json_line(value: &Value) -> String {
    let text = value.to_string();
    let mut line = String::with_capacity(text.len());
    for c in text.chars() {
        if is_hazard(c) {
            // Outside strings JSON is plain ASCII without controls: every hazard is in one.
            line.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            line.push(c);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_everything_else_is_kept() {
        assert_eq!(
            for_terminal("a\u{1b}[2J\r\nb\\c\u{9b}d\u{202e}é"),
            "a\\u{1b}[2J\\r\\nb\\\\c\\u{9b}d\\u{202e}é"
        );
        let value = serde_json::json!({"id": "x\u{1b}\u{9b}\u{7f}\r"});
        let line = json_line(&value);
        assert!(!line.chars().any(is_hazard), "{line}");
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, value);
    }
}
