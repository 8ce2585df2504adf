//! The tool over the real sandboxing executor with a pass-through fake provider
//! (S-SBXEXEC+TOOLS): denial markers, runner failures, unavailability, policy roots and a
//! granted escalation reaching the provider.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{FakeApproval, Harness, text};
use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_bash_sandbox::SandboxBashExecutor;
use dsh_core::{ApprovalOutcome, ErrorInfo};
use dsh_jobs::{JOBS, JobRegistry, JobStatus, JobsPlugin};
use dsh_sandbox::{ESCALATION_HINT, SANDBOX_POLICY, SandboxMode, SandboxPolicyService, SandboxProvider};
use dsh_sandbox_policy::{LocalSandboxPolicy, SandboxPolicyConfig};
use dsh_shell::{SHELL, ShellExecutor};
use dsh_subprocess::SubprocessService;
use dsh_test_support::fake_provider::FakeProvider;
use dsh_tool_bash::ToolBash;
use serde_json::{Value, json};

struct Sbx {
    h: Harness,
    provider: Arc<FakeProvider>,
    _controller: dsh_core::Disposer,
}

impl Sbx {
    fn new(policy: SandboxPolicyConfig, local: LocalBashConfig, unavailable: bool) -> Self {
        let ctx = Harness::base();
        let policy: Arc<dyn SandboxPolicyService> =
            Arc::new(LocalSandboxPolicy::new(&policy).expect("policy"));
        ctx.provide(SANDBOX_POLICY, Arc::clone(&policy)).expect("policy");
        let provider = Arc::new(FakeProvider::unavailable(unavailable));
        let local = LocalBashExecutor::new(local, SubprocessService::new()).expect("local");
        let executor: Arc<dyn ShellExecutor> =
            Arc::new(SandboxBashExecutor::new(local, provider.clone() as Arc<dyn SandboxProvider>, policy));
        ctx.provide(SHELL, executor).expect("shell");
        ctx.load_default::<JobsPlugin>().expect("jobs");
        ctx.load_default::<ToolBash>().expect("tool-bash");
        let controller = ctx.get(JOBS).expect("jobs").attach_controller();
        let tools = ctx.get(dsh_core::TOOLS).expect("tools");
        Self { h: Harness { ctx, tools }, provider, _controller: controller }
    }

    fn default() -> Self {
        Self::new(
            SandboxPolicyConfig::default(),
            LocalBashConfig { grace_ms: 200.0, timeout_ms: 10_000.0, ..LocalBashConfig::default() },
            false,
        )
    }

    fn jobs(&self) -> Arc<dyn JobRegistry> {
        self.h.ctx.get(JOBS).expect("jobs")
    }

    async fn settle(&self, id: &str) -> dsh_jobs::JobSnapshot {
        tokio::time::timeout(Duration::from_secs(20), self.jobs().wait(id, 15_000.0, None, None))
            .await
            .expect("settles")
            .expect("wait")
    }
}

fn fg(command: &str) -> Value {
    json!({"command": command, "description": "d"})
}

fn bg(command: &str) -> Value {
    json!({"command": command, "description": "d", "run_in_background": true})
}

const DENIAL: &str = "[sandbox: file access denied under read-only mode]";

#[tokio::test]
async fn foreground_denial_is_a_fact_with_markers() {
    let s = Sbx::default();
    let r = s.h.call(fg(r#"echo "x: Permission denied" >&2; exit 1"#)).await;
    assert!(!r.is_error);
    assert_eq!(
        text(&r),
        format!("[stderr]\nx: Permission denied\n{DENIAL}\n{ESCALATION_HINT}\n[exit code: 1]")
    );
    assert_eq!(
        r.value.expect("value")["sandbox"],
        json!({"mode": "read-only", "denied": true, "enforcement": "full"})
    );
}

#[tokio::test]
async fn sb_12_runner_failure_foreground_and_background() {
    let s = Sbx::default();
    let r = s.h.call(fg(r#"echo "fake-runner: ruleset rejected" >&2; exit 125"#)).await;
    assert!(r.is_error);
    assert!(
        text(&r).starts_with("Error: sandbox mode \"read-only\" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined."),
        "{}",
        text(&r)
    );
    assert!(text(&r).ends_with(" Runner failure: fake-runner: ruleset rejected"), "{}", text(&r));
    assert_eq!(
        r.error.and_then(|e| e.info),
        Some(ErrorInfo::new("SandboxUnavailableError", "SANDBOX_UNAVAILABLE"))
    );

    let r =
        s.h.call(bg(r#"echo "fake-runner: cannot open rule path: /x: Permission denied" >&2; exit 125"#))
            .await;
    assert_eq!(text(&r), "started background job bash-1");
    let snapshot = s.settle("bash-1").await;
    assert_eq!((snapshot.status, snapshot.detail.as_deref()), (JobStatus::Completed, Some("exit code: 125")));
    let (output, _) = s.jobs().read("bash-1", None).expect("read");
    assert!(
        output.ends_with("[sandbox: the sandbox runner itself failed under read-only mode — the command did not run; this is a sandbox problem, not a command failure]"),
        "{output}"
    );
    assert!(!output.contains(DENIAL), "runner failure outranks denial: {output}");
}

#[tokio::test]
async fn sb_13_background_denial_repeats_after_settlement() {
    let s = Sbx::default();
    let r = s.h.call(bg(r#"echo "x: Permission denied" >&2; exit 1"#)).await;
    assert_eq!(text(&r), "started background job bash-1");
    let snapshot = s.settle("bash-1").await;
    assert_eq!((snapshot.status, snapshot.detail.as_deref()), (JobStatus::Completed, Some("exit code: 1")));
    let jobs = s.jobs();
    assert_eq!(
        jobs.read("bash-1", None).expect("read").0,
        format!("[stderr]\nx: Permission denied\n{DENIAL}\n{ESCALATION_HINT}")
    );
    assert_eq!(jobs.read("bash-1", None).expect("read").0, format!("{DENIAL}\n{ESCALATION_HINT}"));
}

#[tokio::test]
async fn sb_20_workdir_from_policy_root_and_unavailable_through_the_tool() {
    let s = Sbx::new(
        SandboxPolicyConfig { workspace_root: Some("/tmp".into()), ..Default::default() },
        LocalBashConfig { cwd: Some("/".into()), grace_ms: 200.0, ..LocalBashConfig::default() },
        false,
    );
    let tmp = std::fs::canonicalize("/tmp").expect("tmp");
    assert_eq!(text(&s.h.call(fg("pwd")).await), format!("{}\n", tmp.display()));
    let agent = s.h.agent("a", Some("/usr"));
    let usr = std::fs::canonicalize("/usr").expect("usr");
    assert_eq!(text(&s.h.call_as(&agent, fg("pwd")).await), format!("{}\n", usr.display()));
    let seen = s.provider.policies();
    assert_eq!(seen.iter().map(|p| p.workspace_root.clone()).collect::<Vec<_>>(), [tmp, usr]);

    let u = Sbx::new(SandboxPolicyConfig::default(), LocalBashConfig::default(), true);
    let r = u.h.call(fg("true")).await;
    assert!(r.is_error);
    assert_eq!(
        r.error.clone().and_then(|e| e.info),
        Some(ErrorInfo::new("SandboxUnavailableError", "SANDBOX_UNAVAILABLE"))
    );
    let r2 = u.h.call(bg("true")).await;
    assert_eq!(text(&r2), text(&r), "same message, no job");
    assert_eq!(
        r2.error.and_then(|e| e.info),
        Some(ErrorInfo::new("SandboxUnavailableError", "SANDBOX_UNAVAILABLE"))
    );
    assert!(u.jobs().list(None).is_empty());
}

#[tokio::test]
async fn granted_escalation_reaches_the_provider_for_that_call_only() {
    let s = Sbx::default();
    s.h.approve_with(FakeApproval::answering(ApprovalOutcome::AllowedOnce));
    let agent = s.h.agent("s", Some("/tmp"));
    let r =
        s.h.call_as(
            &agent,
            json!({"command": "true", "description": "d", "sandbox_permissions": "workspace-write",
                   "justification": "the command needs workspace writes"}),
        )
        .await;
    assert!(!r.is_error, "{}", text(&r));
    assert_eq!(r.value.expect("value")["sandbox"]["mode"], json!("workspace-write"));
    s.h.call_as(&agent, fg("true")).await;
    let modes: Vec<SandboxMode> = s.provider.policies().iter().map(|p| p.mode).collect();
    assert_eq!(modes, [SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly]);
    let first = s.provider.policies()[0].clone();
    assert_eq!(first.session_id.as_deref(), Some("s"));
    assert_eq!(first.workspace_root, std::fs::canonicalize("/tmp").expect("tmp"));
}
