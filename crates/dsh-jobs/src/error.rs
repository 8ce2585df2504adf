//! The runtime's errors; each `Display` is the contract's exact message.

/// Why a job operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error(
        "background jobs unavailable: no job controller serves this agent (load @deepseek-ai/dsh-tool-jobs in its composition)"
    )]
    NoController,
    #[error("invalid job kind: expected a non-empty string")]
    EmptyKind,
    #[error("invalid job label: expected a non-empty string")]
    EmptyLabel,
    /// Carries the offending value as JSON text.
    #[error("invalid outputLimitBytes: expected a positive safe integer, got {0}")]
    InvalidOutputLimit(String),
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
    #[error("unknown job {0}")]
    UnknownJob(String),
    #[error("job {0} belongs to another session")]
    OtherSession(String),
    /// Carries the offending value as JSON text.
    #[error("invalid wait timeout: expected a positive number of milliseconds, got {0}")]
    InvalidWaitTimeout(String),
    #[error("wait aborted")]
    WaitAborted,
}

impl From<JobError> for String {
    fn from(error: JobError) -> Self {
        error.to_string()
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
    use super::json_number_text;

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
