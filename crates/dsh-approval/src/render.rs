//! How a question shows: text that came from the model or from a command is shown with its
//! control characters escaped, so it cannot move the cursor, clear the screen, reorder what
//! is shown or start a line that looks like the question's own.

use dsh_core::{ApprovalAsk, ApprovalSubject};

/// The line shown after a question whose texts had characters escaped.
pub const ESCAPES_NOTE: &str = "(control characters are shown as \\x.. and \\u{..} escapes)";

/// Whether `c` is shown as an escape: C0 controls and DEL, C1 controls, and the invisible
/// format characters that reorder or hide text (bidi marks, embeddings, overrides and
/// isolates, zero-width characters, line and paragraph separators, word joiners, the byte
/// order mark, interlinear annotations, tag characters), the characters that show as nothing
/// or as a blank (soft hyphen, combining grapheme joiner, Hangul and Khmer fillers, the
/// Mongolian vowel separator, variation selectors) and every space but the plain one.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(
            c,
            '\u{00ad}'
                | '\u{034f}'
                | '\u{061c}'
                | '\u{115f}'..='\u{1160}'
                | '\u{17b4}'..='\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e0fff}'
        )
}

/// `text` with every control or invisible format character shown as a visible escape: `\n`,
/// `\r`, `\t`, `\x1b` for the other ASCII controls, `\u{202e}` for the rest. Everything else
/// is shown as it is. The flag says whether anything was escaped.
fn escape(text: &str) -> (String, bool) {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len());
    let mut escaped = false;
    for c in text.chars() {
        if !needs_escape(c) {
            out.push(c);
            continue;
        }
        escaped = true;
        let _ = match c {
            '\n' => write!(out, "\\n"),
            '\r' => write!(out, "\\r"),
            '\t' => write!(out, "\\t"),
            c if c.is_ascii() => write!(out, "\\x{:02x}", c as u32),
            c => write!(out, "{}", c.escape_unicode()),
        };
    }
    (out, escaped)
}

/// `text` as an answerer shows text that came from the model or a command: on one line, with
/// every control or invisible format character escaped (see [`escape`]).
pub fn escape_untrusted(text: &str) -> String {
    escape(text).0
}

/// A command's consent question as lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuestionLines {
    /// The question itself, ending in `?`.
    pub headline: String,
    /// The facts, one line each (a multi-line command takes one line per line, each after
    /// `  | `): the command, its working directory, the mode or destination asked for, the
    /// justification, the notes, and [`ESCAPES_NOTE`] when anything was escaped.
    pub details: Vec<String>,
}

/// The lines every answerer shows for a command's consent question of tool `tool_name`. No
/// text in them can start a line of its own: newlines, carriage returns and every other
/// control character are escaped, and a command's own lines are shown each after a gutter.
pub fn subject_lines(tool_name: &str, subject: &ApprovalSubject) -> QuestionLines {
    let mut any = false;
    let mut esc = |text: &str| {
        let (shown, escaped) = escape(text);
        any |= escaped;
        shown
    };
    let tool = esc(tool_name);
    let headline = match &subject.asked {
        ApprovalAsk::Mode(mode) => {
            format!("Allow this {tool} command to run once with wider sandbox access ({})?", esc(mode))
        }
        ApprovalAsk::Host(host) => format!("Allow this {tool} command to connect to {}?", esc(host)),
    };
    let mut details = Vec::new();
    let lines: Vec<&str> = subject.command.split('\n').collect();
    if let [line] = lines.as_slice() {
        details.push(format!("Command: {}", esc(line)));
    } else {
        details.push(format!("Command ({} lines):", lines.len()));
        details.extend(lines.iter().map(|line| format!("  | {}", esc(line))));
    }
    details.push(format!("Working directory: {}", esc(&subject.cwd)));
    match &subject.asked {
        ApprovalAsk::Mode(mode) => details.push(format!("Requested mode: {}", esc(mode))),
        ApprovalAsk::Host(host) => {
            details.push(format!("Destination: {} (not in the network allowlist)", esc(host)))
        }
    }
    if let Some(justification) = &subject.justification {
        details.push(format!("Justification: {}", esc(justification)));
    }
    for note in &subject.notes {
        details.push(esc(note));
    }
    if any {
        details.push(ESCAPES_NOTE.to_owned());
    }
    QuestionLines { headline, details }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_and_blank_characters_are_escaped() {
        for c in
            ['\u{00ad}', '\u{034f}', '\u{115f}', '\u{3164}', '\u{00a0}', '\u{3000}', '\u{fe0f}', '\u{e0100}']
        {
            let (shown, escaped) = escape(&format!("ls{c}x"));
            assert!(
                escaped && shown.starts_with("ls\\u{") && shown.ends_with("}x"),
                "{c:?} shown as {shown:?}"
            );
        }
        assert_eq!(escape("ls -la é 日本"), ("ls -la é 日本".to_owned(), false));
    }

    #[test]
    fn controls_and_bidi_characters_are_escaped() {
        assert_eq!(
            escape_untrusted("a\u{1b}[2J\r\n\tb\u{7f}\u{9b}c\u{202e}d\u{2066}é"),
            "a\\x1b[2J\\r\\n\\tb\\x7f\\u{9b}c\\u{202e}d\\u{2066}é"
        );
        assert_eq!(escape("plain text, ünïcode"), ("plain text, ünïcode".to_owned(), false));
    }

    #[test]
    fn a_multi_line_command_shows_each_line_after_a_gutter() {
        let subject = ApprovalSubject {
            command: "echo one\necho two".into(),
            cwd: "/ws".into(),
            asked: ApprovalAsk::Host("pypi.org:443".into()),
            justification: None,
            notes: vec!["A note.".into()],
        };
        assert_eq!(
            subject_lines("bash", &subject),
            QuestionLines {
                headline: "Allow this bash command to connect to pypi.org:443?".into(),
                details: vec![
                    "Command (2 lines):".into(),
                    "  | echo one".into(),
                    "  | echo two".into(),
                    "Working directory: /ws".into(),
                    "Destination: pypi.org:443 (not in the network allowlist)".into(),
                    "A note.".into(),
                ],
            }
        );
    }
}
