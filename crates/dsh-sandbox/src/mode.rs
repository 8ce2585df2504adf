//! Modes, enforcement levels, the execution policy and the unavailable error.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The closed vocabulary of file-effect sandbox modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
}

impl SandboxMode {
    /// Every mode, narrowest first.
    pub const ALL: [SandboxMode; 3] =
        [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess];

    /// The wire spelling (`read-only`, `workspace-write`, `danger-full-access`).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// Parses the wire spelling; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a backend governs every effect its mode promises (`full`) or not (`partial`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxEnforcement {
    Full,
    Partial,
}

impl SandboxEnforcement {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxEnforcement::Full => "full",
            SandboxEnforcement::Partial => "partial",
        }
    }
}

/// The complete per-call policy: mode, canonical workspace root, and the session it serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxExecutionPolicy {
    pub mode: SandboxMode,
    pub workspace_root: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// No sandbox backend can confine the command; the command never runs unconfined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SandboxUnavailableError {
    pub mode: SandboxMode,
    /// Appended as ` Runner failure: <detail>` when present.
    pub detail: Option<String>,
}

impl SandboxUnavailableError {
    pub const NAME: &'static str = "SandboxUnavailableError";
    pub const CODE: &'static str = "SANDBOX_UNAVAILABLE";

    pub fn new(mode: SandboxMode) -> Self {
        Self { mode, detail: None }
    }

    pub fn with_detail(mode: SandboxMode, detail: impl Into<String>) -> Self {
        Self { mode, detail: Some(detail.into()) }
    }

    /// The `{name, code}` the tool pipeline attaches to the failure.
    pub fn info(&self) -> dsh_core::ErrorInfo {
        dsh_core::ErrorInfo::new(Self::NAME, Self::CODE)
    }
}

impl fmt::Display for SandboxUnavailableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sandbox mode \"{}\" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing kernel (Linux), ensure sandbox-exec is usable (macOS), or ensure the ACL restricted-token runner can start (Windows) — otherwise switch the consumer to danger-full-access.",
            self.mode
        )?;
        if let Some(detail) = &self.detail {
            write!(f, " Runner failure: {detail}")?;
        }
        Ok(())
    }
}
