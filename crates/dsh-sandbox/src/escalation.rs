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
/// `[workspaceRoot, extraRoots…, /tmp, os temp dir]`; empty for any other mode. Canonical
/// means the real path when it exists, else the path as spelled.
pub fn writable_roots(policy: &SandboxExecutionPolicy) -> Vec<PathBuf> {
    if policy.mode != SandboxMode::WorkspaceWrite {
        return Vec::new();
    }
    let temp = std::env::temp_dir();
    let mut spellings = vec![policy.workspace_root.as_path()];
    spellings.extend(policy.extra_roots.iter().map(PathBuf::as_path));
    spellings.extend([Path::new("/tmp"), temp.as_path()]);
    let mut roots: Vec<PathBuf> = Vec::with_capacity(spellings.len());
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

/// A path a confined command was refused, as its stderr names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedPath {
    /// The absolute path, as the message spells it.
    pub path: PathBuf,
    /// The message was `Read-only file system` (`EROFS`: a refused write); else it was
    /// `Permission denied` (`EACCES`: a refused read or write).
    pub write: bool,
}

/// The first absolute path that stderr names in a `Read-only file system` / `EROFS` or
/// `Permission denied` / `EACCES` line, when one can be told: quoted (`mkdir: cannot create
/// directory '/x'`, Node's `EROFS: read-only file system, mkdir '/x'`, Python's
/// `[Errno 30] Read-only file system: '/x'`) or between colons (`bash: /x: Read-only file
/// system`). Relative paths are never named (the command's working directory is not known
/// here).
pub fn refused_path(stderr: &str) -> Option<RefusedPath> {
    stderr.lines().find_map(|line| {
        let lower = line.to_lowercase();
        let write = lower.contains("read-only file system") || lower.contains("erofs");
        if !write && !lower.contains("permission denied") && !lower.contains("eacces") {
            return None;
        }
        let path = quoted_path(line).or_else(|| colon_path(line))?;
        Some(RefusedPath { path, write })
    })
}

/// The line naming the refused path of a denied result under `mode`, shown right before the
/// denial marker; `None` when stderr names no path ([`refused_path`]). A refused write under
/// `workspace-write` names the directory `--add-dir` would open for it: below `home` (the
/// harness's `$HOME`) the directory right below it (below `.cache`, `.config`, `.local/share`
/// or `.local/state`, the one below that), so that one option fixes the whole tool; elsewhere
/// the path's parent; never `/` nor `home` itself (too broad to suggest):
/// `[sandbox: write to /x/y/z refused; start the harness with --add-dir /x/y to allow it]`.
/// A write into one of the user's own toolchain caches ([`crate::user_cache_of`]) names no
/// `--add-dir`: confined commands keep caches of their own, and opening the user's would let
/// them change what the user's unconfined builds use.
pub fn refused_path_line(mode: SandboxMode, stderr: &str, home: &Path) -> Option<String> {
    let refused = refused_path(stderr)?;
    let path = refused.path.display();
    if !refused.write {
        return Some(format!("[sandbox: access to {path} refused]"));
    }
    if mode == SandboxMode::WorkspaceWrite
        && let Some((dir, tool, variable)) = crate::caches::user_cache_of(&refused.path, home)
    {
        return Some(format!(
            "[sandbox: write to {path} refused; {} is the user's own {tool} cache, which no --add-dir should open: confined commands get a cache of their own through ${variable}]",
            dir.display()
        ));
    }
    let fix = match refused.path.strip_prefix(home) {
        Ok(below) if home != Path::new("/") => {
            let mut parts = below.components();
            let first = parts.next().map(|c| home.join(c));
            let shared = [".cache", ".config", ".local/share", ".local/state"]
                .iter()
                .map(|rel| home.join(rel))
                .find(|shared| refused.path.starts_with(shared) && refused.path != *shared);
            match shared {
                Some(shared) => {
                    let rest = refused.path.strip_prefix(&shared).ok().and_then(|r| r.components().next());
                    rest.map(|c| shared.join(c))
                }
                None => first,
            }
            .filter(|dir| *dir != refused.path)
        }
        _ => refused.path.parent().filter(|p| *p != Path::new("/") && *p != home).map(Path::to_path_buf),
    };
    Some(match fix {
        Some(dir) if mode == SandboxMode::WorkspaceWrite => format!(
            "[sandbox: write to {path} refused; start the harness with --add-dir {} to allow it]",
            dir.display()
        ),
        _ => format!("[sandbox: write to {path} refused]"),
    })
}

/// An absolute path in quotes (`'…'`, `"…"`, `‘…’`, `` `…' ``) on `line`.
fn quoted_path(line: &str) -> Option<PathBuf> {
    for (start, open) in line.char_indices() {
        let close: &[char] = match open {
            '\'' => &['\''],
            '`' => &['`', '\''],
            '"' => &['"'],
            '‘' => &['’'],
            _ => continue,
        };
        let rest = &line[start + open.len_utf8()..];
        if !rest.starts_with('/') {
            continue;
        }
        if let Some(end) = rest.find(close) {
            return plausible(&rest[..end]);
        }
    }
    None
}

/// An absolute path between `: ` separators (or starting the line) on `line`.
/// A `, ` ends the path (cargo's `failed to write cache, path: /x/y, error: …`).
fn colon_path(line: &str) -> Option<PathBuf> {
    line.split(": ")
        .map(str::trim)
        .find(|part| part.starts_with('/'))
        .map(|part| part.split_once(", ").map_or(part, |(path, _)| path))
        .and_then(plausible)
}

fn plausible(text: &str) -> Option<PathBuf> {
    if text.len() > 4096 || text.chars().any(char::is_control) {
        return None;
    }
    // Components drop a trailing `/` and repeated separators.
    Some(Path::new(text).components().collect())
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
    fn refused_paths_are_named_only_when_stderr_spells_an_absolute_one() {
        let line = |mode, stderr: &str| refused_path_line(mode, stderr, Path::new("/home/u"));
        assert_eq!(
            line(WorkspaceWrite, "npm error rofs EROFS: read-only file system, mkdir '/root/.npm/_cacache'\n"),
            Some("[sandbox: write to /root/.npm/_cacache refused; start the harness with --add-dir /root/.npm to allow it]".into())
        );
        assert_eq!(
            line(WorkspaceWrite, "bash: /x/y: Read-only file system"),
            Some("[sandbox: write to /x/y refused; start the harness with --add-dir /x to allow it]".into())
        );
        assert_eq!(
            line(ReadOnly, "mkdir: cannot create directory '/w/d/': Read-only file system"),
            Some("[sandbox: write to /w/d refused]".into())
        );
        assert_eq!(
            line(WorkspaceWrite, "touch: cannot touch '/top': Read-only file system"),
            Some("[sandbox: write to /top refused]".into()),
            "no --add-dir /"
        );
        assert_eq!(
            line(WorkspaceWrite, "touch: cannot touch '/home/u/outside': Read-only file system"),
            Some("[sandbox: write to /home/u/outside refused]".into()),
            "no --add-dir $HOME"
        );
        assert_eq!(
            line(WorkspaceWrite, "npm error rofs EROFS: read-only file system, mkdir '/home/u/.npm/_cacache/tmp'\n"),
            Some("[sandbox: write to /home/u/.npm/_cacache/tmp refused; /home/u/.npm is the user's own npm cache, which no --add-dir should open: confined commands get a cache of their own through $NPM_CONFIG_CACHE]".into())
        );
        assert_eq!(
            line(
                WorkspaceWrite,
                "warning: failed to write cache, path: /home/u/.cargo/registry/index/x/st/at/static_assertions, error: Read-only file system (os error 30)"
            ),
            Some("[sandbox: write to /home/u/.cargo/registry/index/x/st/at/static_assertions refused; /home/u/.cargo is the user's own cargo cache, which no --add-dir should open: confined commands get a cache of their own through $CARGO_HOME]".into()),
            "cargo's `, error` is not part of the path"
        );
        assert_eq!(
            refused_path(
                "error: failed to open `/r/.cargo/registry/cache/i/s-1.1.0.crate`\n  Read-only file system (os error 30)\nerror: failed to open `/r/x`: Read-only file system"
            ),
            Some(RefusedPath { path: PathBuf::from("/r/x"), write: true }),
            "backticks close with a backtick"
        );
        assert_eq!(
            line(WorkspaceWrite, "touch: cannot touch '/home/u/.local/share/tool/db/x': Read-only file system"),
            Some("[sandbox: write to /home/u/.local/share/tool/db/x refused; start the harness with --add-dir /home/u/.local/share/tool to allow it]".into()),
            "the whole tool's directory, not the file's parent"
        );
        assert_eq!(
            line(WorkspaceWrite, "touch: cannot touch '/home/u/proj/a/b/c': Read-only file system"),
            Some("[sandbox: write to /home/u/proj/a/b/c refused; start the harness with --add-dir /home/u/proj to allow it]".into())
        );
        assert_eq!(
            line(WorkspaceWrite, "cat: /h/.ssh/id_ed25519: Permission denied\n"),
            Some("[sandbox: access to /h/.ssh/id_ed25519 refused]".into())
        );
        assert_eq!(
            line(ReadOnly, "PermissionError: [Errno 13] Permission denied: '/h/.ssh/id'"),
            Some("[sandbox: access to /h/.ssh/id refused]".into())
        );
        assert_eq!(
            line(ReadOnly, "tar: /h/.ssh: Cannot open: Permission denied"),
            Some("[sandbox: access to /h/.ssh refused]".into())
        );
        assert_eq!(
            refused_path("x\nOSError: [Errno 30] Read-only file system: \"/a b/c\"\n"),
            Some(RefusedPath { path: PathBuf::from("/a b/c"), write: true })
        );
        assert_eq!(
            refused_path("touch: cannot touch ‘/q/r’: Read-only file system"),
            Some(RefusedPath { path: PathBuf::from("/q/r"), write: true })
        );
        for none in [
            "",
            "denied",
            "touch: cannot touch 'made-here': Read-only file system",
            "bash: line 1: x: Read-only file system",
            "cp: cannot stat '/a': No such file or directory",
        ] {
            assert_eq!(line(WorkspaceWrite, none), None, "{none:?}");
        }
    }

    #[test]
    fn writable_roots_are_canonical_and_deduplicated() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let policy = |mode, root: &Path| SandboxExecutionPolicy::new(mode, root.to_path_buf(), None);
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

        let extra = dir.path().join("extra");
        std::fs::create_dir(&extra).unwrap();
        let mut with_extra = policy(WorkspaceWrite, &link);
        with_extra.extra_roots = vec![extra.clone(), real.clone()];
        let mut expected_extra = vec![expected[0].clone(), std::fs::canonicalize(&extra).unwrap()];
        expected_extra.extend(expected[1..].iter().cloned());
        assert_eq!(writable_roots(&with_extra), expected_extra);
        with_extra.mode = ReadOnly;
        assert!(writable_roots(&with_extra).is_empty());

        let missing = dir.path().join("missing/../x");
        assert_eq!(writable_roots(&policy(WorkspaceWrite, &missing))[0], missing);
        assert_eq!(writable_roots(&policy(WorkspaceWrite, Path::new("/tmp"))).len(), expected.len() - 1);
    }
}
