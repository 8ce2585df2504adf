//! Status lines, the public job schema, and byte-bounded text fitting.

use dsh_core::Schema;
use serde_json::{Value, json};

/// `[status: <status>]` or `[status: <status>, <detail>]`.
pub fn status_line(status: &str, detail: Option<&str>) -> String {
    match detail {
        Some(detail) => format!("[status: {status}, {detail}]"),
        None => format!("[status: {status}]"),
    }
}

/// The status a running job shows while it is blocked reading the input its owner writes.
pub const WAITING_FOR_INPUT: &str = "waiting for input";

/// The status line of a public job value (`{status, detail?}`).
pub(crate) fn job_status_line(job: &Value) -> String {
    status_line(job["status"].as_str().unwrap_or_default(), job.get("detail").and_then(Value::as_str))
}

/// Schema of a public job snapshot: `{id, kind, label, status, detail?, startedAt, finishedAt?}`.
/// `lost` is a status only when the registry keeps a journal (`journaled`): without one the
/// schema is the contract's.
pub fn public_job_schema(journaled: bool) -> Schema {
    public_job_schema_with(journaled, false)
}

/// [`public_job_schema`], with `waiting for input` a status when job input is enabled.
pub(crate) fn public_job_schema_with(journaled: bool, input: bool) -> Schema {
    let mut statuses = ["running", "stopping", "completed", "killed", "failed"].map(|s| json!(s)).to_vec();
    if journaled {
        statuses.push(json!("lost"));
    }
    if input {
        statuses.push(json!(WAITING_FOR_INPUT));
    }
    Schema::object(
        vec![
            ("id", Schema::string(), true),
            ("kind", Schema::string(), true),
            ("label", Schema::string(), true),
            ("status", Schema::string().enumerated(statuses), true),
            ("detail", Schema::string(), false),
            ("startedAt", Schema::integer(), true),
            ("finishedAt", Schema::integer(), false),
        ],
        false,
    )
}

/// The last at most `max_bytes` bytes of `text`, cut forward to a character boundary.
pub(crate) fn retain_tail(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The first at most `max_bytes` bytes of `text`, cut back to a character boundary.
pub(crate) fn retain_head(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `content + suffix` within `max_bytes`: keeps the suffix and the tail of the content, marking
/// the cut with `omitted` (once: not repeated when the content already ends with it).
pub(crate) fn fit_with_suffix(content: &str, suffix: &str, max_bytes: usize, omitted: &str) -> String {
    if content.len() + suffix.len() <= max_bytes {
        return format!("{content}{suffix}");
    }
    let marker = if content.ends_with(omitted.trim_start()) { "" } else { omitted };
    let fixed = format!("{marker}{suffix}");
    if fixed.len() >= max_bytes {
        return retain_tail(&fixed, max_bytes).to_owned();
    }
    format!("{}{fixed}", retain_tail(content, max_bytes - fixed.len()))
}

/// Usable byte budget from a producer's `outputLimitBytes`.
pub(crate) fn byte_budget(limit: f64) -> usize {
    if limit >= usize::MAX as f64 { usize::MAX } else { limit as usize }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_respect_utf8() {
        assert_eq!(retain_tail("aé€", 4), "€");
        assert_eq!(retain_tail("aé€", 5), "é€");
        assert_eq!(retain_head("aé€", 2), "a");
        assert_eq!(retain_head("aé€", 3), "aé");
    }

    #[test]
    fn fitting_keeps_suffix_and_marks_once() {
        assert_eq!(fit_with_suffix("abc", "\n[s]", 100, "\n[output truncated]"), "abc\n[s]");
        assert_eq!(
            fit_with_suffix("abcdefghijklmnopqrstuvwxyz", "\n[s]", 24, "\n[output truncated]"),
            "z\n[output truncated]\n[s]"
        );
        assert_eq!(
            fit_with_suffix("x\n[output truncated]", "\n[s]", 20, "\n[output truncated]"),
            "utput truncated]\n[s]"
        );
        assert_eq!(fit_with_suffix("0123456789", "\n[s]", 3, "\n[x]"), "[s]");
    }
}
