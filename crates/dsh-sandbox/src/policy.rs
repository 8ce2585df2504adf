//! The sandbox policy service seam (`sandboxPolicy`): the standing mode of each session.

use std::path::{Component, Path, PathBuf};
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

/// Resolves per-session sandbox policy from approvals, the session's recorded mode and the default.
pub trait SandboxPolicyService: Send + Sync {
    /// The deployment default mode (the sandboxing executor's `sandboxMode`).
    fn default_mode(&self) -> SandboxMode;
    /// The deployment's network mode (`allow` unless configured): with `deny` or `ask`, results
    /// may carry network facts.
    fn network_mode(&self) -> crate::NetworkMode {
        crate::NetworkMode::Allow
    }
    /// The secrets bound to hosts (see [`crate::Credentials`]): `None` without any.
    fn credentials(&self) -> Option<std::sync::Arc<crate::Credentials>> {
        None
    }
    /// `mode` = `approved` ?? the session's last `sandbox/mode` event ?? default; the root is the
    /// canonical session cwd, else the configured root; `sessionId` when a session is given.
    fn resolve(&self, session: Option<&Session>, approved: Option<SandboxMode>) -> StandingPolicy;
    /// Appends exactly one `sandbox/mode` event `{mode}`.
    fn set_sandbox_mode(&self, session: &Session, mode: SandboxMode) -> Result<(), String>;
}

/// Service key of the sandbox policy service.
pub const SANDBOX_POLICY: ServiceKey<Arc<dyn SandboxPolicyService>> = ServiceKey::new("sandboxPolicy");

/// The prefix of the root a moved or replaced workspace resolves to (see [`moved_root`]).
pub const MOVED_ROOT_PREFIX: &str = "/dev/null/workspace-moved-or-replaced";

/// The root a policy service returns in place of a session's pinned root once that root
/// moved or was replaced: a path that cannot exist (its parent is a device), naming the
/// pinned root, so nothing is granted under it and no command can start in it.
pub fn moved_root(pinned: &Path) -> PathBuf {
    let relative: PathBuf = pinned.components().filter(|c| matches!(c, Component::Normal(_))).collect();
    Path::new(MOVED_ROOT_PREFIX).join(relative)
}

/// The pinned root a [`moved_root`] names, or `None` for any other root.
pub fn pinned_root_of_moved(root: &Path) -> Option<PathBuf> {
    root.strip_prefix(MOVED_ROOT_PREFIX).ok().map(|rest| Path::new("/").join(rest))
}
