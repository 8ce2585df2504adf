//! The sandbox policy service seam (`sandboxPolicy`): the standing mode of each session.

use std::sync::Arc;

use dsh_core::{ServiceKey, Session};

use crate::mode::{SandboxExecutionPolicy, SandboxMode};

/// The standing policy of one call before any escalation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandingPolicy {
    /// The mode as recorded (the last `sandbox/mode` event is taken as-is, even malformed);
    /// escalation messages quote this spelling.
    pub mode_label: String,
    /// The executable policy. A malformed recorded mode executes as `read-only` (fail safe).
    pub policy: SandboxExecutionPolicy,
}

/// Resolves per-session sandbox policy (contract §7.6).
pub trait SandboxPolicyService: Send + Sync {
    /// The deployment default mode (the sandboxing executor's `sandboxMode`).
    fn default_mode(&self) -> SandboxMode;
    /// `mode` = `approved` ?? the session's last `sandbox/mode` event ?? default; the root is the
    /// canonical session cwd, else the configured root; `sessionId` when a session is given.
    fn resolve(&self, session: Option<&Session>, approved: Option<SandboxMode>) -> StandingPolicy;
    /// Appends exactly one `sandbox/mode` event `{mode}`.
    fn set_sandbox_mode(&self, session: &Session, mode: SandboxMode) -> Result<(), String>;
}

/// Service key of the sandbox policy service.
pub const SANDBOX_POLICY: ServiceKey<Arc<dyn SandboxPolicyService>> = ServiceKey::new("sandboxPolicy");
