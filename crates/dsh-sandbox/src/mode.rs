//! Modes, enforcement levels, the execution policy and the unavailable error.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The closed vocabulary of file-effect sandbox modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// The command may read files but write none (`read-only`).
    ReadOnly,
    /// The command may write only under the workspace root (`workspace-write`).
    WorkspaceWrite,
    /// No confinement: the command runs unsandboxed (`danger-full-access`).
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
    /// Every effect the mode promises is governed.
    Full,
    /// Some effects the mode promises are not governed (a report says which).
    Partial,
}

impl SandboxEnforcement {
    /// The wire spelling (`full`, `partial`).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxEnforcement::Full => "full",
            SandboxEnforcement::Partial => "partial",
        }
    }
}

/// The complete per-call policy: mode, canonical workspace root, the session it serves, the
/// further writable roots and the network axis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxExecutionPolicy {
    /// The file-effect mode the call runs under.
    pub mode: SandboxMode,
    /// The canonical workspace root (what `workspace-write` may write under).
    pub workspace_root: PathBuf,
    /// The id of the session the call belongs to, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Further roots `workspace-write` may write under (canonical, pinned like the workspace
    /// root): tool caches, a second checkout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_roots: Vec<PathBuf>,
    /// The network axis (`allow` by default).
    #[serde(default)]
    pub network: crate::network::NetworkPolicy,
}

impl SandboxExecutionPolicy {
    /// A policy with no further roots and the default network axis (`allow`).
    pub fn new(mode: SandboxMode, workspace_root: PathBuf, session_id: Option<String>) -> Self {
        Self {
            mode,
            workspace_root,
            session_id,
            extra_roots: Vec::new(),
            network: crate::network::NetworkPolicy::default(),
        }
    }
}

/// No sandbox backend can confine the command; the command never runs unconfined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SandboxUnavailableError {
    /// The mode that could not be enforced.
    pub mode: SandboxMode,
    /// Appended as ` Runner failure: <detail>` when present.
    pub detail: Option<String>,
}

impl SandboxUnavailableError {
    /// The error name attached to the tool failure.
    pub const NAME: &'static str = "SandboxUnavailableError";
    /// The error code attached to the tool failure.
    pub const CODE: &'static str = "SANDBOX_UNAVAILABLE";

    /// The error for `mode`, without a runner-failure detail.
    pub fn new(mode: SandboxMode) -> Self {
        Self { mode, detail: None }
    }

    /// The error for `mode`, with the runner failure that made the sandbox unusable.
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
