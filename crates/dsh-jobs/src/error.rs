//! The runtime's errors; each `Display` is an exact message (pinned by tests).

/// Why a job operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// No job controller (the job tools) is attached, so nobody could read or kill the job.
    #[error(
        "background jobs unavailable: no job controller serves this agent (load @deepseek-ai/dsh-tool-jobs in its composition)"
    )]
    NoController,
    /// The start spec's kind is empty.
    #[error("invalid job kind: expected a non-empty string")]
    EmptyKind,
    /// The start spec's label is empty.
    #[error("invalid job label: expected a non-empty string")]
    EmptyLabel,
    /// Carries the offending value as JSON text.
    #[error("invalid outputLimitBytes: expected a positive safe integer, got {0}")]
    InvalidOutputLimit(String),
    /// The job names an owner but the composition has no agent registry to check it against.
    #[error("background job ownership requires the agent registry (load @deepseek-ai/dsh-agent)")]
    NoAgentRegistry,
    /// Carries the owner id.
    #[error("agent \"{0}\" is not the registered agent instance (background job owner must be live)")]
    OwnerNotLive(String),
    /// Carries the limit.
    #[error(
        "background job limit reached for this owner (limit: {0}); use job_kill to stop an unneeded job, wait for it to finish, then retry"
    )]
    LimitReached(u64),
    /// No job has this id (or its owner's records were removed); carries the id.
    #[error("unknown job {0}")]
    UnknownJob(String),
    /// The job is owned by another session than the caller's; carries the id.
    #[error("job {0} belongs to another session")]
    OtherSession(String),
    /// Carries the offending value as JSON text.
    #[error("invalid wait timeout: expected a positive number of milliseconds, got {0}")]
    InvalidWaitTimeout(String),
    /// The caller's signal aborted the wait (before or while waiting).
    #[error("wait aborted")]
    WaitAborted,
    /// The producer's `run` failed to start the work; carries the producer's message
    /// verbatim. Nothing was registered and no id was consumed.
    #[error("{0}")]
    StartFailed(String),
    /// The producer's cancel hook failed; carries the producer's message verbatim. The job's
    /// status and `reported` flag are unchanged.
    #[error("{0}")]
    CancelFailed(String),
}

/// Job errors reach the model as plain tool errors (no name or code).
impl From<JobError> for dsh_core::ToolError {
    fn from(error: JobError) -> Self {
        dsh_core::ToolError::plain(error.to_string())
    }
}

/// `JSON.stringify` of a number: `null` when not finite, integers without a fraction at any
/// magnitude JS prints positionally, shortest round-trip form otherwise.
pub(crate) fn json_number_text(n: f64) -> String {
    if !n.is_finite() {
        return "null".to_owned();
    }
    if n == 0.0 {
        return "0".to_owned();
    }
    if (1e-6..1e21).contains(&n.abs()) {
        // Rust's `Display` for f64 is the shortest round-trip form without an exponent.
        return format!("{n}");
    }
    dsh_core::json::js_json_text(&dsh_core::json::js_number(n))
}

#[cfg(test)]
mod tests {
    use super::{JobError, json_number_text};

    #[test]
    fn every_refusal_prints_its_exact_message() {
        let cases = [
            (
                JobError::NoController,
                "background jobs unavailable: no job controller serves this agent (load @deepseek-ai/dsh-tool-jobs in its composition)",
            ),
            (JobError::EmptyKind, "invalid job kind: expected a non-empty string"),
            (JobError::EmptyLabel, "invalid job label: expected a non-empty string"),
            (
                JobError::InvalidOutputLimit("1.5".into()),
                "invalid outputLimitBytes: expected a positive safe integer, got 1.5",
            ),
            (
                JobError::NoAgentRegistry,
                "background job ownership requires the agent registry (load @deepseek-ai/dsh-agent)",
            ),
            (
                JobError::OwnerNotLive("stray".into()),
                "agent \"stray\" is not the registered agent instance (background job owner must be live)",
            ),
            (
                JobError::LimitReached(10),
                "background job limit reached for this owner (limit: 10); use job_kill to stop an unneeded job, wait for it to finish, then retry",
            ),
            (JobError::UnknownJob("bash-9".into()), "unknown job bash-9"),
            (JobError::OtherSession("bash-1".into()), "job bash-1 belongs to another session"),
            (
                JobError::InvalidWaitTimeout("null".into()),
                "invalid wait timeout: expected a positive number of milliseconds, got null",
            ),
            (JobError::WaitAborted, "wait aborted"),
            (JobError::StartFailed("spawn bash ENOENT".into()), "spawn bash ENOENT"),
            (JobError::CancelFailed("cancel failed".into()), "cancel failed"),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text);
            let tool_error = dsh_core::ToolError::from(error);
            assert_eq!((tool_error.message.as_str(), tool_error.info), (text, None), "a plain tool error");
        }
    }

    #[test]
    fn numbers_print_like_json_stringify() {
        assert_eq!(json_number_text(f64::NAN), "null");
        assert_eq!(json_number_text(f64::NEG_INFINITY), "null");
        assert_eq!(json_number_text(-0.0), "0");
        assert_eq!(json_number_text(100.0), "100");
        assert_eq!(json_number_text(-0.5), "-0.5");
        assert_eq!(json_number_text(9007199254740992.0), "9007199254740992");
    }
}
