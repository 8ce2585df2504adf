//! The error shape that crosses every seam into a tool result.

use serde::{Deserialize, Serialize};

/// `{ name, code }` of a harness error; present on a failed result only for coded errors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// The error name (e.g. `SandboxUnavailableError`).
    pub name: String,
    /// The machine code (e.g. `SANDBOX_UNAVAILABLE`).
    pub code: String,
}

impl ErrorInfo {
    /// An info with this name and code.
    pub fn new(name: &str, code: &str) -> Self {
        Self { name: name.to_owned(), code: code.to_owned() }
    }
}

/// A failure as the tool pipeline reports it: the message the model sees after `Error: `,
/// plus the optional `{name, code}`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// The message the model sees after `Error: `.
    pub message: String,
    /// The `{name, code}` of a coded error; `None` for a plain one.
    pub info: Option<ErrorInfo>,
}

impl ToolError {
    /// A plain error (no name/code), like every bash validation error.
    pub fn plain(message: impl Into<String>) -> Self {
        Self { message: message.into(), info: None }
    }

    /// A coded harness error.
    pub fn coded(message: impl Into<String>, name: &str, code: &str) -> Self {
        Self { message: message.into(), info: Some(ErrorInfo::new(name, code)) }
    }

    /// `tool call aborted` (`AbortError` / `ABORTED`).
    pub fn aborted() -> Self {
        Self::coded("tool call aborted", "AbortError", "ABORTED")
    }

    /// `tool call aborted before dispatch` (`AbortError` / `ABORTED_BEFORE_DISPATCH`).
    pub fn aborted_before_dispatch() -> Self {
        Self::coded("tool call aborted before dispatch", "AbortError", "ABORTED_BEFORE_DISPATCH")
    }
}
