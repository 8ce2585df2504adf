//! Denied reads, against both runners, as root and as a command spawned under another uid:
//! a `denyRead` or `maskedPaths` path is covered by an unreadable cover (the read fails with
//! `Permission denied`, a denial signature, and shows nothing of the file), the rest stays
//! readable, and a denied path the command's uid cannot reach anyway (below a directory
//! closed to it) neither breaks the runner nor needs a cover.
//!
//! A runner unusable on this host is skipped with a printed reason, unless
//! `DSH_SANDBOX_REQUIRE_RUNNERS` names it (see `dsh_test_support::sandbox`).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use common::{NOBODY, is_root, scratch, spawn_confined};
use dsh_sandbox::{
    SandboxExecutionPolicy, SandboxMode, SandboxProvider, classify_runner_failure, matches_signature,
};
use dsh_sandbox_local::{
    LocalSandboxConfig, LocalSandboxProvider, ProbeOutcome, RunnerKind, RunnerProber, SystemProber,
};

const SECRET: &str = "deny-read-secret-41c7";

fn check(kind: RunnerKind, uid: Option<u32>) {
    if let ProbeOutcome::Unusable(reason) = SystemProber.probe(kind, Duration::from_secs(10)) {
        return dsh_test_support::sandbox::skip_runner(kind.as_str(), &reason);
    }
    let (_dir, base) = scratch("dsh-deny-read-");
    let ws = base.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(base.join("secret")).unwrap();
    std::fs::write(base.join("secret/key"), SECRET).unwrap();
    std::fs::write(base.join("token"), SECRET).unwrap();
    std::fs::write(base.join("open.txt"), "open\n").unwrap();
    // Closed to everyone but root: a command under another uid cannot reach what is inside.
    std::fs::create_dir(base.join("closed")).unwrap();
    std::fs::write(base.join("closed/inner"), SECRET).unwrap();
    std::fs::set_permissions(base.join("closed"), std::fs::Permissions::from_mode(0o700)).unwrap();
    if let Some(uid) = uid {
        for p in [&ws, &base.join("secret"), &base.join("secret/key"), &base.join("token")] {
            std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
        }
    }
    let config = LocalSandboxConfig {
        runners: vec![kind],
        deny_read: vec![base.join("secret"), base.join("closed/inner")],
        masked_paths: vec![base.join("token")],
        ..LocalSandboxConfig::default()
    };
    let provider =
        LocalSandboxProvider::with_prober(config, Arc::new(SystemProber) as Arc<dyn RunnerProber>).unwrap();
    let who = format!("{} uid={uid:?}", kind.as_str());
    for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        let policy = SandboxExecutionPolicy::new(mode, ws.clone(), None);
        let run = |command: String| {
            let confined = provider.confine(&["bash".into(), "-c".into(), command], &policy).unwrap();
            let common::Ended { exit, stdout, stderr } = spawn_confined(&confined, &ws, uid);
            let failure = classify_runner_failure(exit, &stderr, &confined.runner_failure_rules);
            assert_eq!(failure, None, "{who} {mode}: the runner failed: {stderr}");
            let denied = matches_signature(exit, &stderr, &confined.denial_signatures);
            (exit, stdout, stderr, denied)
        };
        for (program, target) in [("cat", "secret/key"), ("ls", "secret"), ("cat", "token")] {
            let path = base.join(target);
            let (exit, stdout, stderr, denied) = run(format!("{program} {}", path.display()));
            assert!(exit.is_some_and(|c| c != 0), "{who} {mode} {target}: the read succeeded: {stdout}");
            assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET), "{who} {mode} {target}: leaked");
            assert!(stderr.contains("Permission denied"), "{who} {mode} {target}: {stderr}");
            assert!(denied, "{who} {mode} {target}: not a denial: {stderr}");
        }
        let (exit, stdout, stderr, _) = run(format!("cat {}", base.join("open.txt").display()));
        assert_eq!((exit, stdout.as_str()), (Some(0), "open\n"), "{who} {mode}: {stderr}");
        if uid.is_none() {
            let (exit, stdout, _, _) = run(format!("cat {}", base.join("closed/inner").display()));
            assert!(exit != Some(0) && !stdout.contains(SECRET), "{who} {mode}: closed/inner leaked");
        }
    }
}

#[test]
fn denied_reads_are_refused_by_the_landlock_runner() {
    check(RunnerKind::Landlock, None);
}

#[test]
fn denied_reads_are_refused_by_bwrap() {
    check(RunnerKind::Bwrap, None);
}

#[test]
fn denied_reads_are_refused_to_a_command_under_another_uid() {
    if !is_root() {
        for runner in ["landlock", "bwrap"] {
            dsh_test_support::sandbox::skip_runner(runner, "switching to an unprivileged uid needs root");
        }
        return;
    }
    check(RunnerKind::Landlock, Some(NOBODY));
    check(RunnerKind::Bwrap, Some(NOBODY));
}
