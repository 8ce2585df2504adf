//! S-SBXEXEC: the real sandboxing executor over a fake provider that returns the argv unchanged
//! (or a missing runner), recording every `confine`.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_bash_sandbox::SandboxBashExecutor;
use dsh_sandbox::{
    SandboxEnforcement, SandboxExecutionPolicy, SandboxMode, SandboxPolicyService, SandboxProvider,
};
use dsh_sandbox_policy::{LocalSandboxPolicy, SandboxPolicyConfig};
use dsh_shell::{ProcessStatus, ShellError, ShellExecRequest, ShellExecutor, ShellSandboxInfo};
use dsh_subprocess::SubprocessService;
use dsh_test_support::fake_provider::FakeProvider;

struct Setup {
    executor: SandboxBashExecutor,
    provider: Arc<FakeProvider>,
    service: Arc<SubprocessService>,
}

fn setup(runner: Option<&str>, mode: Option<&str>) -> Setup {
    let service = SubprocessService::new();
    let config = LocalBashConfig { grace_ms: 200.0, timeout_ms: 10_000.0, ..LocalBashConfig::default() };
    let local = LocalBashExecutor::new(config, Arc::clone(&service)).expect("config");
    let provider = Arc::new(FakeProvider::with_runner(runner));
    let policy: Arc<dyn SandboxPolicyService> = Arc::new(
        LocalSandboxPolicy::new(&SandboxPolicyConfig { mode: mode.map(str::to_owned), ..Default::default() })
            .expect("policy"),
    );
    let dyn_provider: Arc<dyn SandboxProvider> = provider.clone();
    Setup { executor: SandboxBashExecutor::new(local, dyn_provider, policy), provider, service }
}

fn request(command: &str) -> ShellExecRequest {
    ShellExecRequest { command: command.into(), ..ShellExecRequest::default() }
}

fn cwd() -> PathBuf {
    std::fs::canonicalize(std::env::current_dir().expect("cwd")).expect("canon")
}

#[tokio::test]
async fn sb_10_hand_off_and_dfa_bypass() {
    let s = setup(None, None);
    assert_eq!(s.executor.sandbox_mode(), Some(SandboxMode::ReadOnly));
    let command = "echo 'a b' \"c'd\"";
    let result = s.executor.run(s.executor.resolve(request(command)).expect("resolve")).await.expect("run");
    assert_eq!(result.stdout.text, "a b c'd\n");
    assert_eq!(
        result.sandbox,
        Some(ShellSandboxInfo {
            mode: SandboxMode::ReadOnly,
            denied: false,
            enforcement: Some(SandboxEnforcement::Full),
            runner_failed: None,
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        })
    );
    {
        let seen = s.provider.seen.lock();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, vec!["bash".to_owned(), "-c".to_owned(), command.to_owned()]);
        assert_eq!(seen[0].1, SandboxExecutionPolicy::new(SandboxMode::ReadOnly, cwd(), None));
    }
    let explicit =
        SandboxExecutionPolicy::new(SandboxMode::WorkspaceWrite, PathBuf::from("/session/project"), None);
    let spec = s
        .executor
        .resolve(ShellExecRequest {
            sandbox_policy: Some(explicit.clone()),
            workdir: Some("/".into()),
            ..request("true")
        })
        .expect("resolve");
    s.executor.run(spec.clone()).await.expect("run");
    let process = s.executor.start(spec).expect("start");
    process.done().await;
    {
        let seen = s.provider.seen.lock();
        assert_eq!(seen.len(), 3, "one confine per run and per start");
        assert_eq!(seen[1].1, explicit);
        assert_eq!(seen[2].1, explicit);
    }

    let dfa = SandboxExecutionPolicy::new(SandboxMode::DangerFullAccess, cwd(), None);
    let spec = s
        .executor
        .resolve(ShellExecRequest { sandbox_policy: Some(dfa), ..request("echo free") })
        .expect("resolve");
    let result = s.executor.run(spec.clone()).await.expect("run");
    assert_eq!(
        result.sandbox,
        Some(ShellSandboxInfo {
            mode: SandboxMode::DangerFullAccess,
            denied: false,
            enforcement: None,
            runner_failed: None,
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        })
    );
    let process = s.executor.start(spec).expect("start");
    process.done().await;
    assert_eq!(process.sandbox(), None);
    assert_eq!(process.read_output().delta, "free\n");
    assert_eq!(s.provider.seen.lock().len(), 3, "provider never called for danger-full-access");
}

#[tokio::test]
async fn sb_12_runner_failure_outranks_denial() {
    let s = setup(None, None);
    for command in [
        "echo \"fake-runner: ruleset rejected\" >&2; exit 125",
        "echo \"fake-runner: cannot open rule path: /x: Permission denied\" >&2; exit 125",
    ] {
        let err =
            s.executor.run(s.executor.resolve(request(command)).expect("resolve")).await.expect_err("runner");
        assert_eq!(err.info().map(|i| i.code), Some("SANDBOX_UNAVAILABLE".to_owned()));
        let line = command.split('"').nth(1).expect("line");
        assert!(err.to_string().ends_with(&format!(" Runner failure: {line}")), "{err}");
    }
    let process = s
        .executor
        .start(
            s.executor
                .resolve(request(
                    "echo \"fake-runner: cannot open rule path: /x: Permission denied\" >&2; exit 125",
                ))
                .expect("resolve"),
        )
        .expect("start");
    process.done().await;
    assert_eq!(process.status(), ProcessStatus::Completed);
    assert_eq!(
        process.sandbox(),
        Some(ShellSandboxInfo {
            mode: SandboxMode::ReadOnly,
            denied: false,
            enforcement: Some(SandboxEnforcement::Full),
            runner_failed: Some(true),
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        })
    );
}

#[tokio::test]
async fn sb_14_per_process_facts() {
    let s = setup(None, None);
    let ww = SandboxExecutionPolicy::new(SandboxMode::WorkspaceWrite, cwd(), None);
    let escalated = s
        .executor
        .start(
            s.executor
                .resolve(ShellExecRequest {
                    sandbox_policy: Some(ww),
                    ..request("sleep 0.3; echo \"x: Permission denied\" >&2; exit 1")
                })
                .expect("resolve"),
        )
        .expect("start");
    let plain = s.executor.start(s.executor.resolve(request("true")).expect("resolve")).expect("start");
    plain.done().await;
    escalated.done().await;
    assert_eq!(
        escalated.sandbox(),
        Some(ShellSandboxInfo {
            mode: SandboxMode::WorkspaceWrite,
            denied: true,
            enforcement: Some(SandboxEnforcement::Full),
            runner_failed: None,
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        })
    );
    assert_eq!(plain.sandbox().map(|f| (f.mode, f.denied)), Some((SandboxMode::ReadOnly, false)));

    let killed = s
        .executor
        .start(s.executor.resolve(request("echo \"x: Permission denied\" >&2; sleep 60")).expect("resolve"))
        .expect("start");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(killed.kill());
    killed.done().await;
    assert_eq!(killed.sandbox().map(|f| f.denied), Some(false), "signal deaths are never denials");
}

#[tokio::test]
async fn sb_15_missing_workdir_is_not_the_runner() {
    let s = setup(None, None);
    let spec = s
        .executor
        .resolve(ShellExecRequest { workdir: Some("/nonexistent-dsh".into()), ..request("true") })
        .expect("resolve");
    let err = s.executor.run(spec.clone()).await.expect_err("spawn");
    assert!(matches!(err, ShellError::Spawn { .. }), "{err:?}");
    assert!(err.to_string().contains("ENOENT"));
    let process = s.executor.start(spec).expect("start");
    process.done().await;
    assert_eq!(process.status(), ProcessStatus::Killed);
    assert!(process.read_output().delta.contains("spawn failed:"));
    assert_eq!(
        process.sandbox(),
        Some(ShellSandboxInfo {
            mode: SandboxMode::ReadOnly,
            denied: false,
            enforcement: Some(SandboxEnforcement::Full),
            runner_failed: None,
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        })
    );
}

#[tokio::test]
async fn sb_15_missing_runner_is_sandbox_unavailable() {
    let runner = "/nonexistent-dsh-runner/fake-runner";
    let s = setup(Some(runner), None);
    let err =
        s.executor.run(s.executor.resolve(request("true")).expect("resolve")).await.expect_err("runner");
    assert_eq!(err.info().map(|i| i.code), Some("SANDBOX_UNAVAILABLE".to_owned()));
    assert!(err.to_string().contains(runner), "{err}");
    let process = s.executor.start(s.executor.resolve(request("true")).expect("resolve")).expect("start");
    process.done().await;
    assert_eq!(process.status(), ProcessStatus::Killed);
    assert!(process.read_output().delta.contains(&format!("spawn failed: Error: spawn {runner} ENOENT")));
    assert_eq!(process.sandbox().map(|f| (f.denied, f.runner_failed)), Some((false, Some(true))));
}

#[tokio::test]
async fn ex_14_disposal_kills_wrapped_jobs() {
    let s = setup(None, None);
    let done = s.executor.start(s.executor.resolve(request("echo done")).expect("resolve")).expect("start");
    let trapping = s
        .executor
        .start(s.executor.resolve(request("trap '' TERM; echo armed; sleep 60")).expect("resolve"))
        .expect("start");
    done.done().await;
    let mut seen = String::new();
    for _ in 0..200 {
        seen.push_str(&trapping.read_output().delta);
        if seen.contains("armed") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(seen.contains("armed"));
    s.service.dispose().await;
    trapping.done().await;
    assert_eq!(done.status(), ProcessStatus::Completed);
    assert_eq!((trapping.status(), trapping.signal().as_deref()), (ProcessStatus::Killed, Some("SIGKILL")));
}
