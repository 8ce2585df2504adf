//! The inverse of the final exit marker, for replay and presentation.

/// The exit status a rendered result text ends with, and the body before that marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// The command exited (a text without a marker is a clean exit 0).
    Exited {
        /// The text before the marker.
        body: String,
        /// The exit code the marker reports.
        exit_code: i64,
    },
    /// A signal killed the command.
    Signaled {
        /// The text before the marker.
        body: String,
        /// The signal name the marker reports (`SIGTERM`, …).
        signal: String,
    },
}

/// Parses the trailing `\n[killed by signal: X]` or `\n[exit code: N]` marker; anything else
/// is a clean exit 0 with the whole text as the body. The leading newline is mandatory.
pub fn parse_exit_status(text: &str) -> ExitStatus {
    if let Some(stripped) = text.strip_suffix(']') {
        if let Some(idx) = stripped.rfind("\n[killed by signal: ") {
            let sig = &stripped[idx + "\n[killed by signal: ".len()..];
            if !sig.contains(']') && !sig.contains('\n') {
                return ExitStatus::Signaled { body: text[..idx].to_owned(), signal: sig.to_owned() };
            }
        }
        if let Some(idx) = stripped.rfind("\n[exit code: ") {
            let digits = &stripped[idx + "\n[exit code: ".len()..];
            if !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && let Ok(exit_code) = digits.parse::<i64>()
            {
                return ExitStatus::Exited { body: text[..idx].to_owned(), exit_code };
            }
        }
    }
    ExitStatus::Exited { body: text.to_owned(), exit_code: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(body: &str, exit_code: i64) -> ExitStatus {
        ExitStatus::Exited { body: body.into(), exit_code }
    }

    #[test]
    fn pr_01_parse_exit_status() {
        assert_eq!(parse_exit_status("hi\n\n"), exited("hi\n\n", 0));
        assert_eq!(parse_exit_status(""), exited("", 0));
        assert_eq!(parse_exit_status("oops\n[exit code: 3]"), exited("oops", 3));
        assert_eq!(parse_exit_status("[exit code: 5]"), exited("[exit code: 5]", 0));
        assert_eq!(
            parse_exit_status("gone\n[killed by signal: SIGKILL]"),
            ExitStatus::Signaled { body: "gone".into(), signal: "SIGKILL".into() }
        );
        assert_eq!(
            parse_exit_status("[killed by signal: SIGKILL]"),
            exited("[killed by signal: SIGKILL]", 0)
        );
        assert_eq!(
            parse_exit_status("slow\n[timed out after 100ms]\n[exit code: 143]"),
            exited("slow\n[timed out after 100ms]", 143)
        );
        assert_eq!(parse_exit_status("x\n[exit code: -1]"), exited("x\n[exit code: -1]", 0));
    }
}
