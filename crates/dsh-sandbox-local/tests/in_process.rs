//! The in-process runner on the real host: probe verdict, failure attribution, clean fds.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dsh_sandbox::{
    ConfinedCommand, SandboxEnforcement, SandboxExecutionPolicy, SandboxMode, SandboxProvider,
    is_runner_spawn_failure,
};
use dsh_sandbox_local::{
    InProcessConfinement, LocalSandboxConfig, LocalSandboxProvider, ProbeOutcome, RunnerKind, RunnerProber,
    SystemProber, landlock_denial_signatures, landlock_rules,
};
use dsh_test_support::sandbox::require_runner;

/// The Landlock provider when the runner (with its mount namespace) is usable; otherwise
/// `None` after a printed skip, or a failure where landlock is required (see
/// [`dsh_test_support::sandbox`]).
fn landlock_provider() -> Option<LocalSandboxProvider> {
    let probe = match SystemProber.probe(RunnerKind::Landlock, Duration::from_secs(10)) {
        ProbeOutcome::Usable(c) if c.mount_namespace => Ok(()),
        other => Err(format!("landlock runner with mount namespace unusable: {other:?}")),
    };
    require_runner("landlock", probe)?;
    let config = LocalSandboxConfig { runners: vec![RunnerKind::Landlock], ..LocalSandboxConfig::default() };
    Some(LocalSandboxProvider::with_prober(config, Arc::new(SystemProber)).unwrap())
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("dsh-sbx-inproc-").tempdir_in("/var/tmp").unwrap()
}

fn policy(mode: SandboxMode, root: &Path) -> SandboxExecutionPolicy {
    SandboxExecutionPolicy::new(mode, root.to_path_buf(), None)
}

fn command(confined: &ConfinedCommand, cwd: &Path) -> Command {
    let mut cmd = Command::new(&confined.argv[0]);
    cmd.args(&confined.argv[1..]).current_dir(cwd).stdin(Stdio::null()).process_group(0);
    if let Some(hook) = confined.pre_exec_hook() {
        // SAFETY: a `PreExecHook` is async-signal-safe (its maker promised so).
        unsafe {
            cmd.pre_exec(move || hook.run());
        }
    }
    cmd
}

#[test]
fn the_host_probe_reports_landlock_full_with_its_abi() {
    let Some(provider) = landlock_provider() else { return };
    let report = provider.describe();
    assert_eq!(report.selected.as_deref(), Some("landlock"));
    let landlock = report.selected_runner().unwrap();
    assert!(landlock.usable);
    assert_eq!(landlock.enforcement, Some(SandboxEnforcement::Full));
    let version = landlock.version.clone().unwrap();
    assert!(version.starts_with("Landlock ABI "), "{version}");
    assert!(report.to_string().contains("selected runner: landlock (enforcement full)"));
}

/// A confinement that fails in the child makes the spawn fail; the executor tells it from an
/// ordinary start failure and gets the runner's own line for the unavailable error.
#[test]
fn a_failing_in_child_confinement_is_a_distinguishable_runner_failure() {
    if landlock_provider().is_none() {
        return;
    }
    let dir = scratch();
    let ws: PathBuf = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // Built without a pre-built namespace, so each child binds the root itself.
    let confinement = InProcessConfinement::prepare(std::slice::from_ref(&ws), true).unwrap();
    assert_eq!(confinement.prebuilt_namespace(), Ok(false));
    let confined = ConfinedCommand {
        argv: vec!["bash".into(), "-c".into(), "echo ran".into()],
        child_confinement: Some(Arc::new(confinement)),
        enforcement: SandboxEnforcement::Full,
        denial_signatures: landlock_denial_signatures(true),
        runner_failure_rules: landlock_rules(),
        runner: None,
        proxy: None,
    };
    // The writable root disappears between preparation and spawn: its bind fails in the child.
    std::fs::remove_dir(&ws).unwrap();
    let error = command(&confined, dir.path()).output().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    let expected = format!(
        "landlock-run: bind-mounting {} failed: No such file or directory (os error 2)",
        ws.display()
    );
    assert_eq!(confined.confinement_failure().as_deref(), Some(expected.as_str()));
    assert_eq!(
        confined.runner_spawn_failure("ENOENT", Some("bash"), false, dir.path(), "spawn bash ENOENT"),
        Some(expected)
    );
    // The same failure with a missing workdir stays the command's own start failure.
    assert_eq!(confined.runner_spawn_failure("ENOENT", Some("bash"), true, &ws, "spawn bash ENOENT"), None);
}

/// The provider's confinements join a namespace built once per policy.
#[test]
fn provider_confinements_reuse_a_prebuilt_namespace() {
    let Some(provider) = landlock_provider() else { return };
    let dir = scratch();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let argv = ["bash".to_owned(), "-c".to_owned(), "echo ok > made".to_owned()];
    for _ in 0..3 {
        let confined = provider.confine(&argv, &policy(SandboxMode::WorkspaceWrite, &ws)).unwrap();
        let out = command(&confined, &ws).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(std::fs::read_to_string(ws.join("made")).unwrap(), "ok\n");
    let probe = InProcessConfinement::prepare(std::slice::from_ref(&ws), true).unwrap();
    assert!(probe.uses_mount_namespace());
}

/// A missing program under the in-process runner is the command's own failure: no runner
/// program is exec'd, and the confinement itself succeeded.
#[test]
fn a_missing_program_under_the_in_process_runner_is_an_ordinary_start_failure() {
    let Some(provider) = landlock_provider() else { return };
    let dir = scratch();
    let confined = provider
        .confine(&["/nonexistent/program".into()], &policy(SandboxMode::ReadOnly, dir.path()))
        .unwrap();
    let error = command(&confined, dir.path()).output().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    assert_eq!(confined.confinement_failure(), None);
    assert_eq!(
        confined.runner_spawn_failure("ENOENT", Some("/nonexistent/program"), false, dir.path(), "x"),
        None
    );
    assert!(!is_runner_spawn_failure(
        &dsh_sandbox::SpawnFailure {
            errno: "ENOENT",
            program: Some("/nonexistent/program"),
            stage: dsh_sandbox::SpawnStage::Exec
        },
        confined.runner.as_deref(),
        dir.path()
    ));
}

#[test]
fn the_confined_command_inherits_no_extra_descriptors_and_runs_in_its_workdir() {
    let Some(provider) = landlock_provider() else { return };
    let dir = scratch();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let script = "ls /proc/self/fd | tr '\\n' ' '; pwd";
    let argv = ["bash".to_owned(), "-c".to_owned(), script.to_owned()];
    let confined = provider.confine(&argv, &policy(SandboxMode::WorkspaceWrite, &ws)).unwrap();
    let confined_out = command(&confined, &ws).output().unwrap();
    let plain_out =
        Command::new("bash").args(&argv[1..]).current_dir(&ws).stdin(Stdio::null()).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&confined_out.stdout), String::from_utf8_lossy(&plain_out.stdout));
    // Whatever the test harness itself leaks to children, the confinement adds nothing.
    let text = String::from_utf8_lossy(&confined_out.stdout).into_owned();
    assert!(text.ends_with(&format!(" {}\n", ws.display())), "{text}");
}

/// Many threads confining and spawning at once: every child is confined, none deadlocks.
#[test]
fn concurrent_spawns_from_many_threads_are_each_confined() {
    let Some(provider) = landlock_provider() else { return };
    let provider = Arc::new(provider);
    let dir = scratch();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let provider = Arc::clone(&provider);
            let root = root.clone();
            std::thread::spawn(move || {
                for j in 0..5 {
                    let target = root.join(format!("t{i}-{j}"));
                    let argv =
                        ["bash".to_owned(), "-c".to_owned(), format!("echo x > '{}'", target.display())];
                    let confined = provider.confine(&argv, &policy(SandboxMode::ReadOnly, &root)).unwrap();
                    let out = command(&confined, &root).output().unwrap();
                    assert_eq!(out.status.code(), Some(1));
                    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
                    assert!(!target.exists());
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}
