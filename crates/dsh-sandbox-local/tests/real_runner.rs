//! SB-21, the provider's part: the default provider on the real host, spawned the way the
//! sandboxing executor spawns it, classified with the seam's helpers.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use dsh_sandbox::{
    SandboxExecutionPolicy, SandboxMode, SandboxProvider, classify_runner_failure, denial_marker,
    matches_signature,
};
use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider};
use dsh_test_support::sandbox::skip_sandbox;

struct Run {
    exit: Option<i32>,
    denied: bool,
    runner_failure: Option<String>,
}

fn run(provider: &LocalSandboxProvider, mode: SandboxMode, root: &Path, command: &str) -> Run {
    let policy = SandboxExecutionPolicy::new(mode, root.to_path_buf(), None);
    let confined = provider.confine(&["bash".into(), "-c".into(), command.into()], &policy).unwrap();
    let mut cmd = Command::new(&confined.argv[0]);
    cmd.args(&confined.argv[1..]).current_dir(root).stdin(Stdio::null()).process_group(0);
    if let Some(hook) = confined.pre_exec_hook() {
        // SAFETY: a `PreExecHook` is async-signal-safe (its maker promised so).
        unsafe {
            cmd.pre_exec(move || hook.run());
        }
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let exit = out.status.code();
    Run {
        exit,
        runner_failure: classify_runner_failure(exit, &stderr, &confined.runner_failure_rules),
        denied: matches_signature(exit, &stderr, &confined.denial_signatures),
    }
}

#[test]
fn sb_21_real_runner_denies_outside_and_allows_the_workspace() {
    let provider = LocalSandboxProvider::new(LocalSandboxConfig::default()).unwrap();
    let report = provider.describe();
    if report.selected.is_none() {
        skip_sandbox(&format!("no sandbox runner is usable on this host:\n{report}"));
        return;
    }
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap();
    let base = tempfile::Builder::new().prefix("dsh-sbx-sb21-").tempdir_in(&home).unwrap();
    let base_path = std::fs::canonicalize(base.path()).unwrap();
    let (w, o) = (base_path.join("W"), base_path.join("O"));
    std::fs::create_dir(&w).unwrap();
    std::fs::create_dir(&o).unwrap();

    let denied =
        run(&provider, SandboxMode::ReadOnly, &w, &format!("echo hi > '{}'", w.join("denied.txt").display()));
    assert_ne!(denied.exit, Some(0));
    assert!(denied.denied && denied.runner_failure.is_none());
    assert!(!w.join("denied.txt").exists());
    assert_eq!(denial_marker(SandboxMode::ReadOnly), "[sandbox: file access denied under read-only mode]");

    let allowed = run(&provider, SandboxMode::WorkspaceWrite, &w, "printf ok > allowed.txt");
    assert_eq!((allowed.exit, allowed.denied), (Some(0), false));
    assert_eq!(std::fs::read_to_string(w.join("allowed.txt")).unwrap(), "ok");

    let outside = run(
        &provider,
        SandboxMode::WorkspaceWrite,
        &w,
        &format!("echo hi > '{}'", o.join("denied.txt").display()),
    );
    assert_ne!(outside.exit, Some(0));
    assert!(outside.denied && outside.runner_failure.is_none());
    assert!(!o.join("denied.txt").exists());

    // A read-only denial, then the same command retried with the workspace writable.
    let command = format!("echo retry > '{}'", w.join("retry.txt").display());
    assert!(run(&provider, SandboxMode::ReadOnly, &w, &command).denied);
    let retried = run(&provider, SandboxMode::WorkspaceWrite, &w, &command);
    assert_eq!((retried.exit, retried.denied), (Some(0), false));
    assert_eq!(std::fs::read_to_string(w.join("retry.txt")).unwrap(), "retry\n");
}
