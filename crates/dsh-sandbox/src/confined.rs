//! What a provider hands back: the confined launch and the data that classifies its outcome.

use std::fmt::Debug;
use std::sync::Arc;

use dsh_subprocess::PreExecHook;
use serde::{Deserialize, Serialize};

use crate::attribution::{SpawnFailure, SpawnStage, is_runner_spawn_failure};
use crate::mode::{SandboxEnforcement, SandboxExecutionPolicy, SandboxUnavailableError};
use crate::report::ProviderReport;

/// The service key name a sandbox provider registers under.
pub const SANDBOX_SERVICE: &str = "sandbox";

/// The typed service key of the mounted sandbox provider.
pub const SANDBOX: dsh_core::ServiceKey<Arc<dyn SandboxProvider>> =
    dsh_core::ServiceKey::new(SANDBOX_SERVICE);

/// How a runner that started but refused to run the command announces itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunnerFailureRule {
    /// When given, the rule only applies to these exit codes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_exit_codes: Option<Vec<i32>>,
    /// A stderr line containing one of these (case-insensitively) is the runner's fatal line.
    pub fatal_signatures: Vec<String>,
    /// Whole stderr lines that are notices, never failures (compared case-insensitively).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub informational_lines: Vec<String>,
}

impl RunnerFailureRule {
    /// A rule with fatal signatures only.
    pub fn fatal(signatures: &[&str]) -> Self {
        Self {
            allowed_exit_codes: None,
            fatal_signatures: signatures.iter().map(|s| (*s).to_owned()).collect(),
            informational_lines: Vec::new(),
        }
    }
}

/// Confinement applied by the child process itself, between `fork` and `exec`.
///
/// Returning `Err` from `apply_in_child` makes the spawn fail with that error, so the command
/// never runs unconfined; the child records why before returning, and the parent reads it
/// back with [`ChildConfinement::failure`].
///
/// # Safety
///
/// `apply_in_child` runs in the forked child of a possibly multi-threaded parent, so an
/// implementor promises it is async-signal-safe, as [`PreExecHook::new`] requires: raw
/// syscalls on data prepared in the parent, no allocation, no locks, no lazy initialisation,
/// no panic. The executors run it between `fork` and `exec` relying on that promise.
pub unsafe trait ChildConfinement: Send + Sync + Debug {
    /// Confines the calling (child) process.
    fn apply_in_child(&self) -> std::io::Result<()>;

    /// After a spawn failed: the confinement's own fatal line when it was the confinement that
    /// failed (in the `landlock-run: ` dialect), `None` when it ran fine or never ran.
    fn failure(&self) -> Option<String> {
        None
    }

    /// Whether `apply_in_child` also keeps [`PreExecHook::sharing_memory`]'s promise, so the
    /// child may share the harness's memory instead of being a forked copy of it (no copy of
    /// the address space per command). `false` unless an implementor says otherwise.
    fn shares_memory(&self) -> bool {
        false
    }
}

/// A confined launch: the argv to spawn, the in-child confinement to run before `exec`, and
/// the facts the executor needs to classify the outcome.
///
/// Build one per spawn: the in-child failure record is per value.
#[derive(Clone, Debug)]
pub struct ConfinedCommand {
    /// The argv to spawn (a runner and its profile in front of the original argv, or the
    /// original argv itself when the confinement happens in the child).
    pub argv: Vec<String>,
    /// Applied in the child right before `exec` when present.
    pub child_confinement: Option<Arc<dyn ChildConfinement>>,
    /// How completely this launch confines the command.
    pub enforcement: SandboxEnforcement,
    /// Lower-cased substrings of stderr that mark a denied file effect.
    pub denial_signatures: Vec<String>,
    /// The rules that tell a runner failure from the command's own failure.
    pub runner_failure_rules: Vec<RunnerFailureRule>,
    /// The program whose failed `exec` means "the runner is missing" (`None` when no runner
    /// program is exec'd).
    pub runner: Option<String>,
    /// The harness-side proxy listener of the command's own network namespace (network
    /// policy `deny` or `ask`), when the provider made one; the executor serves it.
    pub proxy: Option<Arc<ProxyListener>>,
}

/// A listening TCP socket inside a confined command's network namespace (on its loopback),
/// served by the harness: the command's only way out. Made by the provider; the socket keeps
/// its namespace alive as long as it is open.
#[derive(Debug)]
pub struct ProxyListener {
    fd: std::os::fd::OwnedFd,
    port: u16,
}

impl ProxyListener {
    /// Wraps a listening socket bound to `127.0.0.1:port` inside the namespace.
    pub fn new(fd: std::os::fd::OwnedFd, port: u16) -> Self {
        Self { fd, port }
    }

    /// The port the command reaches the proxy on (`127.0.0.1:port` in its namespace).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The proxy address as the command's proxy variables spell it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A second handle on the same listening socket, for the serving task.
    pub fn listener(&self) -> std::io::Result<std::net::TcpListener> {
        Ok(std::net::TcpListener::from(self.fd.try_clone()?))
    }
}

impl ConfinedCommand {
    /// The child confinement as the subprocess layer's pre-exec hook.
    pub fn pre_exec_hook(&self) -> Option<PreExecHook> {
        let confinement = self.child_confinement.clone()?;
        let shares_memory = confinement.shares_memory();
        // SAFETY: `ChildConfinement` is an `unsafe` trait whose implementors promise that
        // `apply_in_child` is async-signal-safe; the closure only calls it (the `Arc` is
        // cloned here, in the parent, and only borrowed in the child).
        let hook = unsafe { PreExecHook::new(move || confinement.apply_in_child()) };
        // SAFETY: the implementor promised (`ChildConfinement::shares_memory`, an item of the
        // `unsafe` trait) that `apply_in_child` keeps `sharing_memory`'s contract; the closure
        // adds nothing to it.
        Some(if shares_memory { unsafe { hook.sharing_memory() } } else { hook })
    }

    /// After a failed spawn: the child confinement's fatal line when the confinement failed.
    pub fn confinement_failure(&self) -> Option<String> {
        self.child_confinement.as_ref().and_then(|c| c.failure())
    }

    /// Classifies a failed spawn of this command: `Some(detail)` when the sandbox runner itself
    /// failed (the executor raises `SandboxUnavailableError(mode, detail)`), `None` when it is
    /// an ordinary command-start failure.
    ///
    /// `errno` is the failure's errno name (`ENOENT`), `program` the program whose exec was
    /// attempted, `chdir` whether the failure was entering the working directory, and
    /// `error_text` the spawn error as reported (`spawn bwrap ENOENT`).
    pub fn runner_spawn_failure(
        &self,
        errno: &str,
        program: Option<&str>,
        chdir: bool,
        workdir: &std::path::Path,
        error_text: &str,
    ) -> Option<String> {
        let confinement_line = if chdir { None } else { self.confinement_failure() };
        let stage = match (&confinement_line, chdir) {
            (_, true) => SpawnStage::Chdir,
            (Some(_), false) => SpawnStage::Confinement,
            (None, false) => SpawnStage::Exec,
        };
        let failure = SpawnFailure { errno, program, stage };
        if !is_runner_spawn_failure(&failure, self.runner.as_deref(), workdir) {
            return None;
        }
        Some(confinement_line.unwrap_or_else(|| error_text.to_owned()))
    }
}

/// The sandbox provider seam (`sandbox`): turns an argv into a confined launch.
pub trait SandboxProvider: Send + Sync {
    /// Wraps `argv` for `policy` (`read-only` or `workspace-write`). Never returns the original
    /// argv unconfined for a confining mode: when no backend can confine, it fails with
    /// [`SandboxUnavailableError`].
    fn confine(
        &self,
        argv: &[String],
        policy: &SandboxExecutionPolicy,
    ) -> Result<ConfinedCommand, SandboxUnavailableError>;

    /// What this provider can do on this host (for a `doctor` command).
    fn describe(&self) -> ProviderReport;

    /// Keeps `path` (a directory the harness writes for commands, such as its askpass
    /// directory, or a program it asks commands to run) readable at the same path to every
    /// later confined command, even where the command's world hides the host directory it
    /// lives in. Never makes it writable.
    /// Providers whose commands see the host's directories as they are need do nothing.
    fn share_read_only(&self, _path: &std::path::Path) {}

    /// [`SandboxProvider::share_read_only`] for the later confined commands of one session
    /// only (`None`: the calls without a session): a directory that holds that session's
    /// own files (its spill files), which no other session's commands may see.
    fn share_read_only_with_session(&self, _session: Option<&str>, _path: &std::path::Path) {}

    /// Ends what is left of `session`'s confined commands (`None`: the calls without a
    /// session) once none of them runs: a descendant that left its call's process group
    /// (`setsid`, a double fork) does not outlive the last command of its session, so it
    /// cannot change the workspace while no confined command is known to run there. Called by
    /// the executor when the session's last confined call or job ends, before a new one
    /// starts. Providers whose commands each get a process world of their own, ended with
    /// the command, need do nothing. False when something could not be ended.
    fn end_strays(&self, _session: Option<&str>) -> bool {
        true
    }

    /// The toolchain caches of this provider's `workspace-write` commands: a root they may
    /// write, and the variables that point their tools there ([`crate::ToolchainCaches`]).
    /// `None` (the default): they get none, and their tools use the user's caches as the
    /// world shows them (read-only).
    fn toolchain_caches(&self) -> Option<crate::ToolchainCaches> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Refusing;

    // SAFETY: `apply_in_child` only builds an `io::Error` from an errno (no allocation).
    unsafe impl ChildConfinement for Refusing {
        fn apply_in_child(&self) -> std::io::Result<()> {
            Err(std::io::Error::from_raw_os_error(libc::EPERM))
        }
        fn failure(&self) -> Option<String> {
            Some("landlock-run: landlock_restrict_self failed: Operation not permitted".into())
        }
    }

    fn command(confinement: Option<Arc<dyn ChildConfinement>>, runner: Option<&str>) -> ConfinedCommand {
        ConfinedCommand {
            argv: vec!["bash".into(), "-c".into(), "true".into()],
            child_confinement: confinement,
            enforcement: SandboxEnforcement::Full,
            denial_signatures: vec!["permission denied".into()],
            runner_failure_rules: vec![],
            runner: runner.map(str::to_owned),
            proxy: None,
        }
    }

    #[test]
    fn spawn_failure_of_the_in_child_confinement_reports_its_own_line() {
        let dir = tempfile::tempdir().unwrap();
        let confined = command(Some(Arc::new(Refusing)), None);
        let hook = confined.pre_exec_hook().unwrap();
        assert_eq!(hook.run().unwrap_err().raw_os_error(), Some(libc::EPERM));
        assert_eq!(
            confined.runner_spawn_failure("EPERM", Some("bash"), false, dir.path(), "spawn bash EPERM"),
            Some("landlock-run: landlock_restrict_self failed: Operation not permitted".into())
        );
        // A chdir failure never ran the confinement and is the command's own failure.
        assert_eq!(
            confined.runner_spawn_failure("ENOENT", Some("bash"), true, dir.path(), "spawn bash ENOENT"),
            None
        );
    }

    #[test]
    fn spawn_failure_of_a_runner_program_reports_the_spawn_error() {
        let dir = tempfile::tempdir().unwrap();
        let confined = command(None, Some("bwrap"));
        assert!(confined.pre_exec_hook().is_none());
        assert_eq!(
            confined.runner_spawn_failure("ENOENT", Some("bwrap"), false, dir.path(), "spawn bwrap ENOENT"),
            Some("spawn bwrap ENOENT".into())
        );
        assert_eq!(
            confined.runner_spawn_failure("ENOEXEC", Some("bwrap"), false, dir.path(), "spawn bwrap ENOEXEC"),
            None
        );
        let missing = dir.path().join("missing");
        assert_eq!(
            confined.runner_spawn_failure("ENOENT", Some("bwrap"), false, &missing, "spawn bwrap ENOENT"),
            None
        );
    }

    #[test]
    fn rules_serialize_like_the_contract() {
        assert_eq!(
            serde_json::to_value(RunnerFailureRule::fatal(&["bwrap: "])).unwrap(),
            serde_json::json!({"fatalSignatures": ["bwrap: "]})
        );
        let landlock = RunnerFailureRule {
            allowed_exit_codes: Some(vec![125]),
            fatal_signatures: vec!["landlock-run: ".into()],
            informational_lines: vec!["landlock-run: partial enforcement (older Landlock ABI)".into()],
        };
        assert_eq!(
            serde_json::to_value(landlock).unwrap(),
            serde_json::json!({
                "allowedExitCodes": [125],
                "fatalSignatures": ["landlock-run: "],
                "informationalLines": ["landlock-run: partial enforcement (older Landlock ABI)"]
            })
        );
    }
}
