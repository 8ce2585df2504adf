//! The argv-level entry points a sandboxing executor builds on.

use std::sync::Arc;

use dsh_bash_local::{ExecError, SettleFacts, bash_argv};
use dsh_sandbox::SandboxMode;
use dsh_shell::{ProcessStatus, ShellExecutor, ShellProcess, ShellSandboxInfo};
use dsh_subprocess::{Errno, SpawnStage};
use parking_lot::Mutex;

use crate::{executor_in, resolved};

#[tokio::test]
async fn run_argv_reports_a_missing_runner_with_its_facts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let spec = resolved(&executor, "true");
    let argv = vec!["/nonexistent/runner".to_owned(), "bash".to_owned(), "-c".to_owned(), "true".to_owned()];
    match executor.run_argv(&spec, argv, None).await {
        Err(ExecError::Spawn(e)) => {
            assert_eq!(
                (e.errno, e.stage, e.program.as_str()),
                (Errno::ENOENT, SpawnStage::Exec, "/nonexistent/runner")
            );
            assert_eq!(e.to_string(), "spawn /nonexistent/runner ENOENT");
        }
        other => panic!("expected a spawn error, got {other:?}"),
    }

    let mut spec = resolved(&executor, "true");
    spec.workdir = "/nonexistent-dsh".into();
    match executor.run_argv(&spec, bash_argv("true"), None).await {
        Err(ExecError::Spawn(e)) => assert_eq!((e.errno, e.stage), (Errno::ENOENT, SpawnStage::Cwd)),
        other => panic!("expected a spawn error, got {other:?}"),
    }
}

#[tokio::test]
async fn run_argv_applies_the_pre_exec_hook() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let spec = resolved(&executor, "umask");
    let umask = || {
        // SAFETY: umask has no memory-safety preconditions and only affects the forked child.
        unsafe { libc::umask(0o077) };
        Ok(())
    };
    // SAFETY: the hook only calls umask(2), which is async-signal-safe.
    let hook = unsafe { dsh_subprocess::PreExecHook::new(umask) };
    let result = executor.run_argv(&spec, bash_argv("umask"), Some(hook)).await.expect("run");
    assert_eq!(result.stdout.text, "0077\n");

    // SAFETY: the hook only builds an `io::Error` from an errno, which does not allocate.
    let failing =
        unsafe { dsh_subprocess::PreExecHook::new(|| Err(std::io::Error::from_raw_os_error(libc::EPERM))) };
    match executor.run_argv(&spec, bash_argv("true"), Some(failing)).await {
        Err(ExecError::Spawn(e)) => assert_eq!((e.errno, e.stage), (Errno::EPERM, SpawnStage::PreExec)),
        other => panic!("expected a spawn error, got {other:?}"),
    }
}

#[tokio::test]
async fn start_argv_runs_the_settle_hook_before_done_and_stamps_its_facts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let spec = resolved(&executor, "ignored");
    let seen: Arc<Mutex<Option<SettleFacts>>> = Arc::default();
    let record = Arc::clone(&seen);
    let process = executor
        .start_argv(
            &spec,
            bash_argv("echo fake-runner: refused >&2; exit 125"),
            None,
            Some(Box::new(move |facts: &SettleFacts| {
                *record.lock() = Some(facts.clone());
                Some(ShellSandboxInfo {
                    mode: SandboxMode::ReadOnly,
                    denied: false,
                    enforcement: None,
                    runner_failed: Some(true),
                    network_denied: Vec::new(),
                    quarantined: Vec::new(),
                })
            })),
        )
        .expect("start");
    process.done().await;
    let facts = seen.lock().clone().expect("hook ran before done resolved");
    assert_eq!(
        facts,
        SettleFacts {
            exit_code: Some(125),
            signal: None,
            stderr_tail: "fake-runner: refused\n".into(),
            spawn_failed: false,
            spawn_error: None,
        }
    );
    assert_eq!(process.sandbox().and_then(|s| s.runner_failed), Some(true));
    assert_eq!(process.status(), ProcessStatus::Completed);
}

#[tokio::test]
async fn start_argv_hands_a_runner_spawn_failure_to_the_settle_hook() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let spec = resolved(&executor, "true");
    let seen: Arc<Mutex<Option<SettleFacts>>> = Arc::default();
    let record = Arc::clone(&seen);
    let process = executor
        .start_argv(
            &spec,
            vec!["/nonexistent/runner".into()],
            None,
            Some(Box::new(move |facts: &SettleFacts| {
                *record.lock() = Some(facts.clone());
                None
            })),
        )
        .expect("start");
    process.done().await;
    let facts = seen.lock().clone().expect("hook ran");
    assert!(facts.spawn_failed);
    let error = facts.spawn_error.expect("spawn error");
    assert_eq!((error.errno, error.stage), (Errno::ENOENT, SpawnStage::Exec));
    assert_eq!(process.status(), ProcessStatus::Killed);
    assert_eq!(
        process.read_output().delta,
        "[stderr]\nspawn failed: Error: spawn /nonexistent/runner ENOENT"
    );
    assert_eq!(process.sandbox(), None);
    let _: &dyn ShellExecutor = &executor;
}
