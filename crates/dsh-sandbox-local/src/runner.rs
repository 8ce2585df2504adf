//! The runners this provider knows, what a probe says about them, and their profiles and
//! classification data.

use std::time::Duration;

use dsh_sandbox::{RunnerFailureRule, SandboxEnforcement, SandboxExecutionPolicy, SandboxMode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A confinement backend of the local provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunnerKind {
    /// In-process Landlock applied in the child before `exec`, with a private read-only mount
    /// namespace; no launcher is exec'd.
    Landlock,
    /// bubblewrap (`bwrap`) with a read-only bind of `/`.
    Bwrap,
}

impl RunnerKind {
    /// Every runner, in the default preference order.
    pub const ALL: [RunnerKind; 2] = [RunnerKind::Landlock, RunnerKind::Bwrap];

    /// The configuration and report spelling (`landlock`, `bwrap`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunnerKind::Landlock => "landlock",
            RunnerKind::Bwrap => "bwrap",
        }
    }
}

/// A usable runner and how completely it confines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerCapability {
    /// Whether the runner governs every effect of its mode (`full`) or not (`partial`).
    pub enforcement: SandboxEnforcement,
    /// Landlock only: the child also gets a private mount namespace with `/` read-only.
    pub mount_namespace: bool,
    /// Why the enforcement is partial, and other facts for a report.
    pub notes: Vec<String>,
}

impl RunnerCapability {
    /// Full enforcement with the private mount namespace, and no notes.
    pub fn full() -> Self {
        Self { enforcement: SandboxEnforcement::Full, mount_namespace: true, notes: Vec::new() }
    }
}

/// The verdict of one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The runner can confine, with this capability.
    Usable(RunnerCapability),
    /// Why the runner cannot confine on this host.
    Unusable(String),
}

/// Finds out what a runner can do on this host. Injected so selection is testable.
pub trait RunnerProber: Send + Sync {
    /// Functionally probes `runner` (runs a trivial confined command), bounded by `timeout`.
    fn probe(&self, runner: RunnerKind, timeout: Duration) -> ProbeOutcome;

    /// The capability assumed for a runner selected without probing (a one-runner chain);
    /// a refusal at run time still fails closed.
    fn unprobed(&self, runner: RunnerKind) -> RunnerCapability;

    /// A version fact for reports (`Landlock ABI 7`, `bubblewrap 0.8.0`), bounded by `timeout`.
    fn version(&self, runner: RunnerKind, timeout: Duration) -> Option<String>;
}

/// bubblewrap's denial signatures: `EROFS` from its read-only binds, `EACCES` from the mode
/// `000` covers of denied reads.
pub const BWRAP_DENIAL_SIGNATURES: [&str; 2] = ["read-only file system", "permission denied"];
/// bubblewrap's fatal prefix.
pub const BWRAP_FATAL_SIGNATURE: &str = "bwrap: ";
/// Denial signatures of a `runnerCommand` runner.
pub const RUNNER_COMMAND_DENIAL_SIGNATURES: [&str; 2] = ["read-only file system", "permission denied"];

/// The Landlock launcher's fatal prefix, kept by the in-process runner's failure lines.
pub const LANDLOCK_FATAL_SIGNATURE: &str = "landlock-run: ";
/// The Landlock launcher's older-ABI notice (informational, never a failure).
pub const LANDLOCK_PARTIAL_NOTICE: &str = "landlock-run: partial enforcement (older Landlock ABI)";
/// The launcher's failure exit code.
pub const LANDLOCK_FAILURE_EXIT_CODE: i32 = 125;

/// Denial signatures of the in-process runner. Landlock refuses with `EACCES`; the read-only
/// mount namespace with `EROFS`; a link or rename across the boundary of the writable roots
/// fails with `EXDEV` (from Landlock's refer check, or because the writable roots are their
/// own mounts), which no errno-based runner can turn into `EACCES`.
pub fn landlock_denial_signatures(mount_namespace: bool) -> Vec<String> {
    let mut signatures = vec!["permission denied".to_owned()];
    if mount_namespace {
        signatures.push("read-only file system".to_owned());
    }
    signatures.push("invalid cross-device link".to_owned());
    signatures
}

/// The Landlock runner-failure rules: exit 125 with a `landlock-run: ` line is a runner
/// failure; the older-ABI partial-enforcement notice is informational.
pub fn landlock_rules() -> Vec<RunnerFailureRule> {
    vec![RunnerFailureRule {
        allowed_exit_codes: Some(vec![LANDLOCK_FAILURE_EXIT_CODE]),
        fatal_signatures: vec![LANDLOCK_FATAL_SIGNATURE.to_owned()],
        informational_lines: vec![LANDLOCK_PARTIAL_NOTICE.to_owned()],
    }]
}

/// bubblewrap's exact base profile for `policy`: read-only `/`, `/dev`, `/proc`, die with the
/// parent; `workspace-write` adds a tmpfs `/tmp` and a writable bind of the workspace root,
/// then of each existing further root (`extraRoots`).
pub fn bwrap_profile_args(policy: &SandboxExecutionPolicy) -> Result<Vec<String>, String> {
    let mut args: Vec<String> =
        ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--die-with-parent"]
            .into_iter()
            .map(str::to_owned)
            .collect();
    if policy.mode == SandboxMode::WorkspaceWrite {
        let root = policy.workspace_root.to_str().ok_or_else(|| {
            format!("bwrap: the workspace root {} is not valid UTF-8", policy.workspace_root.display())
        })?;
        args.extend(["--tmpfs", "/tmp", "--bind", root, root].into_iter().map(str::to_owned));
        for extra in policy.extra_roots.iter().filter(|r| r.exists()) {
            let extra = extra
                .to_str()
                .ok_or_else(|| format!("bwrap: the writable root {} is not valid UTF-8", extra.display()))?;
            args.extend(["--bind", extra, extra].into_iter().map(str::to_owned));
        }
    }
    Ok(args)
}

/// The kernel interfaces under `/proc` that both runners make read-only (as bubblewrap and
/// container runtimes do), where this kernel has them: the sysctls (the host's hostname,
/// `core_pattern`, …), the SysRq trigger, interrupt and bus settings.
pub(crate) const PROC_COVERS: [&str; 4] = ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"];

/// bubblewrap's arguments for the confined command's own world (the same world the
/// in-process runner builds), appended to the base profile ([`bwrap_profile_args`],
/// whose mounts they override in order): a new session, a PID, UTS and IPC namespace,
/// [`PROC_COVERS`] read-only, the session's
/// private `/tmp` and `/dev/shm`, `/run` hidden, masks, the writable roots again (above the
/// new `/tmp`) with their protected paths read-only, read-only shares, no capabilities, and
/// the seccomp program read from `seccomp_fd`. The covers of denied reads are read from
/// `masks_fd` (`--args`, see [`bwrap_mask_args`]), else given inline. A configured
/// `runnerCommand` receives the base profile alone.
pub(crate) fn bwrap_world_args(
    writable: &[std::path::PathBuf],
    world: &crate::inprocess::WorldSpec,
    seccomp_fd: Option<i32>,
    masks_fd: Option<i32>,
) -> Result<Vec<String>, String> {
    let text = |p: &std::path::Path| {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("bwrap: the path {} is not valid UTF-8", p.display()))
    };
    let bind = if world.writable { "--bind" } else { "--ro-bind" };
    let mut args: Vec<String> = ["--new-session", "--unshare-pid", "--unshare-uts", "--unshare-ipc"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    // bubblewrap covers these of its `/proc` only where `access(W_OK)` says they are
    // writable, which root is told of `/proc/sys` (mode 0555) although root may write the
    // files in it: bound read-only here whatever the harness runs as (the sysctls a process
    // sees are its own namespaces', whichever `/proc` mount it reads them through).
    for path in PROC_COVERS {
        args.extend(["--ro-bind-try".to_owned(), path.to_owned(), path.to_owned()]);
    }
    args.extend([bind.to_owned(), text(&world.shm)?, "/dev/shm".to_owned()]);
    args.extend([bind.to_owned(), text(&world.tmp)?, "/tmp".to_owned()]);
    for dir in &world.hidden {
        let dir = text(dir)?;
        args.extend(["--tmpfs".to_owned(), dir.clone(), "--remount-ro".to_owned(), dir]);
    }
    for root in writable.iter().filter(|r| r.exists()) {
        let root = text(root)?;
        args.extend(["--bind".to_owned(), root.clone(), root]);
    }
    for dir in &world.pinned {
        let dir = text(dir)?;
        args.extend(["--bind".to_owned(), dir.clone(), dir]);
    }
    for path in &world.protected {
        let path = text(path)?;
        args.extend(["--ro-bind".to_owned(), path.clone(), path]);
    }
    match masks_fd {
        Some(fd) => args.extend(["--args".to_owned(), fd.to_string()]),
        None => {
            for (path, dir) in &world.masks {
                let source = if *dir { &world.empty_dir } else { &world.empty_file };
                args.extend(["--ro-bind".to_owned(), text(source)?, text(path)?]);
            }
        }
    }
    // The writable roots below `/tmp` are bound again above; the shares there come back here.
    for (share, _) in world.below_tmp(writable).filter(|(_, read_only)| *read_only) {
        let share = text(share)?;
        args.extend(["--ro-bind".to_owned(), share.clone(), share]);
    }
    args.extend(["--cap-drop".to_owned(), "ALL".to_owned()]);
    if let Some(fd) = seccomp_fd {
        args.extend(["--seccomp".to_owned(), fd.to_string()]);
    }
    Ok(args)
}

/// Each cover of `world` for bubblewrap's `--args`: the covered path, and its
/// `--ro-bind COVER PATH` arguments, each NUL-terminated.
pub(crate) fn bwrap_mask_args(
    world: &crate::inprocess::WorldSpec,
) -> Result<Vec<(std::ffi::CString, Vec<u8>)>, String> {
    use std::os::unix::ffi::OsStrExt;
    world
        .masks
        .iter()
        .map(|(path, dir)| {
            let source = if *dir { &world.empty_dir } else { &world.empty_file };
            let mut bytes = b"--ro-bind\0".to_vec();
            for part in [source.as_os_str(), path.as_os_str()] {
                if part.as_bytes().contains(&0) {
                    return Err(format!("bwrap: the path {} contains a NUL byte", part.display()));
                }
                bytes.extend_from_slice(part.as_bytes());
                bytes.push(0);
            }
            let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
                .map_err(|_| format!("bwrap: the path {} contains a NUL byte", path.display()))?;
            Ok((c_path, bytes))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn policy(mode: SandboxMode, root: &str) -> SandboxExecutionPolicy {
        SandboxExecutionPolicy::new(mode, PathBuf::from(root), None)
    }

    #[test]
    fn bwrap_profiles_are_exact() {
        assert_eq!(
            bwrap_profile_args(&policy(SandboxMode::ReadOnly, "/ws")).unwrap(),
            ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--die-with-parent"]
        );
        assert_eq!(
            bwrap_profile_args(&policy(SandboxMode::WorkspaceWrite, "/ws")).unwrap(),
            [
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--die-with-parent",
                "--tmpfs",
                "/tmp",
                "--bind",
                "/ws",
                "/ws"
            ]
        );
        let mut extra = policy(SandboxMode::WorkspaceWrite, "/ws");
        extra.extra_roots = vec![PathBuf::from("/"), PathBuf::from("/no/such/root")];
        assert_eq!(
            bwrap_profile_args(&extra).unwrap()[8..],
            ["--tmpfs", "/tmp", "--bind", "/ws", "/ws", "--bind", "/", "/"]
        );
        extra.mode = SandboxMode::ReadOnly;
        assert_eq!(bwrap_profile_args(&extra).unwrap().len(), 8);
    }
}
