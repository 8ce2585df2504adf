//! Escalation helpers and the model-facing sandbox markers and hint (byte-exact texts).

use std::path::{Path, PathBuf};

use crate::mode::{SandboxExecutionPolicy, SandboxMode};

/// The approval outcome an escalation maps (the approval seam's closed vocabulary).
pub use dsh_core::ApprovalOutcome as EscalationOutcome;

/// The modes an escalation may target when advertised (always the full closed set).
pub const ESCALATION_TARGETS: [SandboxMode; 2] = [SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess];

/// Appended after a denial marker when escalation is available.
pub const ESCALATION_HINT: &str = "[sandbox: escalation available — retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]";

/// The modes strictly wider than `current`. Takes the recorded spelling because a session log
/// may hold a malformed mode: anything but `read-only` and `workspace-write` has none.
pub fn wider_modes(current: &str) -> &'static [SandboxMode] {
    match SandboxMode::parse(current) {
        Some(SandboxMode::ReadOnly) => &ESCALATION_TARGETS,
        Some(SandboxMode::WorkspaceWrite) => &ESCALATION_TARGETS[1..],
        Some(SandboxMode::DangerFullAccess) | None => &[],
    }
}

/// `[sandbox: file access denied under <mode> mode]`
pub fn denial_marker(mode: SandboxMode) -> String {
    format!("[sandbox: file access denied under {mode} mode]")
}

/// The runner-failure marker of background reads.
pub fn runner_failed_marker(mode: SandboxMode) -> String {
    format!(
        "[sandbox: the sandbox runner itself failed under {mode} mode — the command did not run; this is a sandbox problem, not a command failure]"
    )
}

/// The approval request reason: `escalate sandbox to <M>: <J>`.
pub fn escalation_reason(requested: SandboxMode, justification: &str) -> String {
    format!("escalate sandbox to {requested}: {justification}")
}

/// The roots a `workspace-write` policy may write: canonical, de-duplicated
/// `[workspaceRoot, /tmp, os temp dir]`; empty for any other mode. Canonical means the real
/// path when it exists, else the path as spelled.
pub fn writable_roots(policy: &SandboxExecutionPolicy) -> Vec<PathBuf> {
    if policy.mode != SandboxMode::WorkspaceWrite {
        return Vec::new();
    }
    let temp = std::env::temp_dir();
    let spellings = [policy.workspace_root.as_path(), Path::new("/tmp"), temp.as_path()];
    let mut roots: Vec<PathBuf> = Vec::with_capacity(3);
    for (i, root) in spellings.iter().enumerate() {
        if spellings[..i].contains(root) {
            continue;
        }
        let canonical = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        if !roots.contains(&canonical) {
            roots.push(canonical);
        }
    }
    roots
}

/// Why an escalation did not grant a wider mode (each is a tool error with this exact message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EscalationError {
    /// No sandboxing executor is composed, so there is nothing to escalate.
    #[error("sandbox_permissions is not available in this composition (no sandboxing executor to escalate)")]
    NotAvailable,
    /// The requested mode is not strictly wider than the call's current one.
    #[error(
        "sandbox escalation to \"{requested}\" is not strictly wider than this call's current \"{current}\" mode"
    )]
    NotWider {
        /// The mode asked for, as spelled by the caller.
        requested: String,
        /// The call's current mode, as recorded.
        current: String,
    },
    /// The escalation needs approval and no approval service is composed.
    #[error("sandbox escalation to \"{requested}\" requires approval, but no approval service is composed")]
    NoApprovalService {
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// The escalation needs approval and the call has no agent to ask through.
    #[error(
        "sandbox escalation to \"{requested}\" requires approval, but the call has no agent to route it through"
    )]
    NoAgent {
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// The user rejected the escalation.
    #[error("the user rejected escalating this {subject} to \"{requested}\"")]
    Rejected {
        /// The word the message names the call by (`command` for bash).
        subject: String,
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// The approval request was cancelled before an answer.
    #[error("approval for escalating to \"{requested}\" was cancelled")]
    Cancelled {
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// No approval channel could answer the request.
    #[error("sandbox escalation to \"{requested}\" requires approval, but no approval channel is available")]
    Unavailable {
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// An approver answered outside the closed outcome vocabulary (the answer given).
    #[error("unreachable variant in EscalationOutcome: {0:?}")]
    UnreachableOutcome(String),
}

/// The widening check, made before any prompt: `requested` must be strictly wider than
/// `current` (the recorded spelling).
/// Nobody is prompted on failure.
pub fn check_widening(requested: &str, current: &str) -> Result<SandboxMode, EscalationError> {
    wider_modes(current).iter().copied().find(|m| m.as_str() == requested).ok_or_else(|| {
        EscalationError::NotWider { requested: requested.to_owned(), current: current.to_owned() }
    })
}

/// Maps the approval outcome for `requested`; `subject` is the word the rejection
/// names (`command` for bash). `allowed-once` grants `requested` for this call only.
pub fn map_escalation_outcome(
    outcome: EscalationOutcome,
    requested: SandboxMode,
    subject: &str,
) -> Result<SandboxMode, EscalationError> {
    match outcome {
        EscalationOutcome::AllowedOnce => Ok(requested),
        EscalationOutcome::Rejected => {
            Err(EscalationError::Rejected { subject: subject.to_owned(), requested })
        }
        EscalationOutcome::Cancelled => Err(EscalationError::Cancelled { requested }),
        EscalationOutcome::Unavailable => Err(EscalationError::Unavailable { requested }),
    }
}

/// Parses an approver's answer; anything outside the closed vocabulary is the exhaustiveness
/// error (`unreachable variant in EscalationOutcome`).
pub fn parse_escalation_outcome(answer: &str) -> Result<EscalationOutcome, EscalationError> {
    EscalationOutcome::parse(answer).ok_or_else(|| EscalationError::UnreachableOutcome(answer.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use SandboxMode::*;

    #[test]
    fn wider_modes_are_strict_and_malformed_modes_have_none() {
        assert_eq!(wider_modes("read-only"), &[WorkspaceWrite, DangerFullAccess]);
        assert_eq!(wider_modes("workspace-write"), &[DangerFullAccess]);
        assert_eq!(wider_modes("danger-full-access"), &[] as &[SandboxMode]);
        assert_eq!(wider_modes("unknown-mode"), &[] as &[SandboxMode]);
        assert_eq!(wider_modes("Read-Only"), &[] as &[SandboxMode]);
        assert_eq!(ESCALATION_TARGETS, [WorkspaceWrite, DangerFullAccess]);
    }

    #[test]
    fn markers_are_exact() {
        assert_eq!(denial_marker(ReadOnly), "[sandbox: file access denied under read-only mode]");
        assert_eq!(
            runner_failed_marker(WorkspaceWrite),
            "[sandbox: the sandbox runner itself failed under workspace-write mode — the command did not run; this is a sandbox problem, not a command failure]"
        );
        assert_eq!(
            ESCALATION_HINT,
            "[sandbox: escalation available — retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]"
        );
        assert_eq!(
            escalation_reason(WorkspaceWrite, "the command needs workspace writes"),
            "escalate sandbox to workspace-write: the command needs workspace writes"
        );
    }

    #[test]
    fn escalation_errors_are_exact() {
        assert_eq!(
            check_widening("workspace-write", "workspace-write").unwrap_err().to_string(),
            "sandbox escalation to \"workspace-write\" is not strictly wider than this call's current \"workspace-write\" mode"
        );
        assert_eq!(
            check_widening("workspace-write", "unknown-mode").unwrap_err().to_string(),
            "sandbox escalation to \"workspace-write\" is not strictly wider than this call's current \"unknown-mode\" mode"
        );
        assert!(check_widening("danger-full-access", "danger-full-access").is_err());
        assert_eq!(check_widening("danger-full-access", "read-only"), Ok(DangerFullAccess));
        assert_eq!(
            EscalationError::NotAvailable.to_string(),
            "sandbox_permissions is not available in this composition (no sandboxing executor to escalate)"
        );
        assert_eq!(
            EscalationError::NoApprovalService { requested: WorkspaceWrite }.to_string(),
            "sandbox escalation to \"workspace-write\" requires approval, but no approval service is composed"
        );
        assert_eq!(
            EscalationError::NoAgent { requested: WorkspaceWrite }.to_string(),
            "sandbox escalation to \"workspace-write\" requires approval, but the call has no agent to route it through"
        );
        let map = |o| map_escalation_outcome(o, WorkspaceWrite, "command");
        assert_eq!(map(EscalationOutcome::AllowedOnce), Ok(WorkspaceWrite));
        assert_eq!(
            map(EscalationOutcome::Rejected).unwrap_err().to_string(),
            "the user rejected escalating this command to \"workspace-write\""
        );
        assert_eq!(
            map(EscalationOutcome::Cancelled).unwrap_err().to_string(),
            "approval for escalating to \"workspace-write\" was cancelled"
        );
        assert_eq!(
            map(EscalationOutcome::Unavailable).unwrap_err().to_string(),
            "sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available"
        );
        let rogue = parse_escalation_outcome("rogue").unwrap_err().to_string();
        assert!(rogue.contains("unreachable variant in EscalationOutcome"), "{rogue}");
        assert_eq!(parse_escalation_outcome("allowed-once"), Ok(EscalationOutcome::AllowedOnce));
    }

    #[test]
    fn writable_roots_are_canonical_and_deduplicated() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let policy = |mode, root: &Path| SandboxExecutionPolicy {
            mode,
            workspace_root: root.to_path_buf(),
            session_id: None,
        };
        assert!(writable_roots(&policy(ReadOnly, &link)).is_empty());
        assert!(writable_roots(&policy(DangerFullAccess, &link)).is_empty());

        let roots = writable_roots(&policy(WorkspaceWrite, &link));
        let tmp = std::fs::canonicalize("/tmp").unwrap();
        let os_tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        let mut expected = vec![std::fs::canonicalize(&real).unwrap(), tmp.clone()];
        if os_tmp != tmp {
            expected.push(os_tmp);
        }
        assert_eq!(roots, expected);

        let missing = dir.path().join("missing/../x");
        assert_eq!(writable_roots(&policy(WorkspaceWrite, &missing))[0], missing);
        assert_eq!(writable_roots(&policy(WorkspaceWrite, Path::new("/tmp"))).len(), expected.len() - 1);
    }
}
