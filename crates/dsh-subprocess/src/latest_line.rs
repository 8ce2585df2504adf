//! The latest line of a stream, as a progress display shows it.
//!
//! Works on a bounded window of the stream's end (see [`OutputCollector::peek_tail`]):
//! trailing `\r` and `\n` are stripped, the last line is taken (a partial line counts), and
//! within it only the text after the last `\r`, so a progress bar that redraws itself with
//! carriage returns shows its latest state. The result is capped at [`LATEST_LINE_MAX_CHARS`]
//! characters; invalid UTF-8 is decoded lossily.
//!
//! [`OutputCollector::peek_tail`]: crate::OutputCollector::peek_tail

use crate::collector::OutputCollector;
use crate::utf8::{cut_head_len, incomplete_tail_len};

/// The latest line of a process's output: from whichever of its two streams was written
/// last (the other when that one shows no text).
pub fn latest_output_line(stdout: &OutputCollector, stderr: &OutputCollector) -> Option<String> {
    let streams = if stderr.written_at() > stdout.written_at() { [stderr, stdout] } else { [stdout, stderr] };
    streams.into_iter().find_map(|stream| {
        let peek = stream.peek_tail(LATEST_LINE_WINDOW);
        latest_line(&peek.bytes, peek.cut)
    })
}

/// How many trailing bytes of a stream a peek looks at.
pub const LATEST_LINE_WINDOW: usize = 4096;

/// The longest latest line reported, in characters.
pub const LATEST_LINE_MAX_CHARS: usize = 200;

/// The latest line of `window`, the end of a stream; `cut` says the window does not start at
/// the stream's start (its first bytes may be the rest of a character cut in half).
///
/// `None` when the window holds no visible text (empty, or only line breaks).
pub fn latest_line(window: &[u8], cut: bool) -> Option<String> {
    let end = window.iter().rposition(|b| *b != b'\n' && *b != b'\r')? + 1;
    let body = &window[..end];
    // The segment after the last line break or carriage return.
    let start = body.iter().rposition(|b| *b == b'\n' || *b == b'\r').map_or(0, |i| i + 1);
    let mut segment = &body[start..];
    if start == 0 && cut {
        segment = &segment[cut_head_len(segment)..];
    }
    // An incomplete character at the end (the writer is mid-character) is not shown.
    segment = &segment[..segment.len() - incomplete_tail_len(segment)];
    // Enough bytes for the cap even if every character were 4 bytes long; cut on a boundary
    // so the capped text does not end in a broken character.
    let max_bytes = LATEST_LINE_MAX_CHARS * 4;
    if segment.len() > max_bytes {
        segment = &segment[..max_bytes];
        segment = &segment[..segment.len() - incomplete_tail_len(segment)];
    }
    let text = String::from_utf8_lossy(segment);
    let text: String = text.chars().take(LATEST_LINE_MAX_CHARS).collect();
    if text.is_empty() { None } else { Some(text) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(bytes: &[u8]) -> Option<String> {
        latest_line(bytes, false)
    }

    #[test]
    fn last_complete_or_partial_line() {
        assert_eq!(line(b"step 1\nstep 2\n").as_deref(), Some("step 2"));
        assert_eq!(line(b"step 1\nstep 2\r\n\r\n").as_deref(), Some("step 2"));
        assert_eq!(line(b"step 1\nhalf a li").as_deref(), Some("half a li"), "a partial line counts");
        assert_eq!(line(b"only").as_deref(), Some("only"));
        assert_eq!(line(b""), None);
        assert_eq!(line(b"\n\r\n\n"), None);
    }

    #[test]
    fn carriage_returns_show_the_latest_state() {
        assert_eq!(line(b"building\n[#   ] 10%\r[##  ] 50%\r[### ] 75%").as_deref(), Some("[### ] 75%"));
        assert_eq!(line(b"[#   ] 10%\r[##  ] 50%\r").as_deref(), Some("[##  ] 50%"), "trailing \\r stripped");
        assert_eq!(line(b"a\rb\r\n").as_deref(), Some("b"));
    }

    #[test]
    fn capped_on_a_character_boundary() {
        let long = "é".repeat(LATEST_LINE_MAX_CHARS + 50);
        let capped = line(long.as_bytes()).expect("a line");
        assert_eq!(capped.chars().count(), LATEST_LINE_MAX_CHARS);
        assert!(capped.chars().all(|c| c == 'é'), "no broken character: {capped:?}");
        let crabs = "🦀".repeat(LATEST_LINE_MAX_CHARS * 2);
        let capped = line(crabs.as_bytes()).expect("a line");
        assert_eq!(capped, "🦀".repeat(LATEST_LINE_MAX_CHARS));
        let ascii = "x".repeat(1000);
        assert_eq!(line(ascii.as_bytes()).map(|l| l.len()), Some(LATEST_LINE_MAX_CHARS));
    }

    #[test]
    fn cut_windows_and_unfinished_characters() {
        let euro = "€uro".as_bytes(); // E2 82 AC 'u' 'r' 'o'
        assert_eq!(latest_line(&euro[1..], true).as_deref(), Some("uro"), "head of a cut character skipped");
        assert_eq!(
            latest_line(b"x\n\x82\xACok", true).as_deref(),
            Some("\u{FFFD}\u{FFFD}ok"),
            "only at the window start"
        );
        assert_eq!(line(&"ab€".as_bytes()[..4]).as_deref(), Some("ab"), "a character still being written");
    }

    #[test]
    fn invalid_utf8_is_lossy() {
        assert_eq!(line(b"bad \xFF\xFE byte\n").as_deref(), Some("bad \u{FFFD}\u{FFFD} byte"));
        assert_eq!(line(b"\xC3\x28").as_deref(), Some("\u{FFFD}("));
    }
}
