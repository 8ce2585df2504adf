//! The escalation hint after a sandbox denial is withheld exactly when an explicit fact says
//! no approval answer can come for the call (the approval hub's `can_answer`, or the host's
//! `approvalUnreachable` declaration): foreground results, and background reads through
//! `job_output` (decided for the job's owner at read time). Without such a fact, even with no
//! approval service composed, the hint stays.

mod common;

use std::sync::Arc;

use common::{FakeProcess, Harness, result, text};
use dsh_approval::{APPROVAL_HUB, ApprovalConfig, ApprovalHub, ApprovalPlugin, fixed_answerer};
use dsh_core::approval::APPROVAL_UNREACHABLE;
use dsh_core::{Agent, ApprovalOutcome, Disposer, TOOLS, ToolExec};
use dsh_jobs::{JOBS, JobsPlugin};
use dsh_sandbox::{ESCALATION_HINT, SandboxEnforcement, SandboxMode};
use dsh_shell::{
    ProcessStatus, ShellError, ShellExecRequest, ShellExecSpec, ShellExecutor, ShellProcess, ShellRunResult,
    ShellSandboxInfo, ShellTimeout,
};
use dsh_tool_jobs::ToolJobsPlugin;
use serde_json::{Value, json};

const DENIAL: &str = "[sandbox: file access denied under read-only mode]";

fn denied_facts() -> ShellSandboxInfo {
    ShellSandboxInfo {
        mode: SandboxMode::ReadOnly,
        denied: true,
        enforcement: Some(SandboxEnforcement::Full),
        runner_failed: None,
        network_denied: Vec::new(),
        quarantined: Vec::new(),
    }
}

/// A sandboxing executor whose every command is denied a write.
struct DenyingExecutor;

#[async_trait::async_trait]
impl ShellExecutor for DenyingExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        Some(SandboxMode::ReadOnly)
    }

    fn resolve(&self, request: ShellExecRequest) -> Result<ShellExecSpec, ShellError> {
        Ok(ShellExecSpec {
            command: request.command,
            workdir: request.workdir.unwrap_or_else(|| "/fake-cwd".into()),
            timeout: ShellTimeout::from_millis(10000.0),
            stdout_max_bytes: 64000,
            signal: request.signal,
            stdin: None,
            env: None,
            dsh_env: request.dsh_env,
            sandbox_policy: request.sandbox_policy,
            output_probe: request.output_probe,
            network_approver: request.network_approver,
            shared_file: request.shared_file,
            keep_stdin: request.keep_stdin,
            tty: request.tty,
        })
    }

    async fn run(&self, _spec: ShellExecSpec) -> Result<ShellRunResult, ShellError> {
        let mut r = result("", "denied", Some(1), None);
        r.sandbox = Some(denied_facts());
        Ok(r)
    }

    fn start(&self, _spec: ShellExecSpec) -> Result<Arc<dyn ShellProcess>, ShellError> {
        Ok(FakeProcess::settled(
            ProcessStatus::Completed,
            Some(1),
            None,
            "[stderr]\nx: Permission denied\n",
            Some(denied_facts()),
        ))
    }
}

struct Setup {
    h: Harness,
    _controller: Disposer,
}

/// The denying executor, jobs and job tools; with the real approval hub when `approval`.
fn setup(approval: Option<&str>) -> Setup {
    let h = Harness::with(Arc::new(DenyingExecutor));
    h.ctx.load_default::<JobsPlugin>().expect("jobs");
    h.ctx.load_default::<ToolJobsPlugin>().expect("tool-jobs");
    if let Some(policy) = approval {
        let config = serde_json::from_value::<ApprovalConfig>(json!({ "policy": policy })).expect("config");
        h.ctx.load::<ApprovalPlugin>(config).expect("approval");
    }
    let controller = h.ctx.get(JOBS).expect("jobs").attach_controller();
    Setup { h, _controller: controller }
}

impl Setup {
    fn hub(&self) -> Arc<ApprovalHub> {
        self.h.ctx.get(APPROVAL_HUB).expect("hub")
    }

    fn foreground_expected(hint: bool) -> String {
        let hint = if hint { format!("{ESCALATION_HINT}\n") } else { String::new() };
        format!("[stderr]\ndenied\n{DENIAL}\n{hint}[exit code: 1]")
    }

    fn job_output_expected(hint: bool) -> String {
        let hint = if hint { format!("\n{ESCALATION_HINT}") } else { String::new() };
        format!("[stderr]\nx: Permission denied\n{DENIAL}{hint}\n[status: completed, exit code: 1]")
    }

    /// One foreground call's text, as `agent` (or agent-less).
    async fn foreground(&self, agent: Option<&Arc<Agent>>) -> String {
        let args = json!({"command": "touch x", "description": "d"});
        let r = self.h.tools.call("bash", args, ToolExec::new(agent.cloned(), "call-1")).await;
        assert!(!r.is_error, "{}", text(&r));
        text(&r)
    }

    /// Starts a background call as `agent` and returns its job id.
    async fn background(&self, agent: Option<&Arc<Agent>>) -> String {
        let args = json!({"command": "touch x", "description": "d", "run_in_background": true});
        let r = self.h.tools.call("bash", args, ToolExec::new(agent.cloned(), "call-2")).await;
        let value = r.value.clone().unwrap_or(Value::Null);
        value["jobId"].as_str().map(str::to_owned).unwrap_or_else(|| panic!("no job: {}", text(&r)))
    }

    /// `job_output {wait: true}` for `id`, as `agent`.
    async fn job_output(&self, agent: Option<&Arc<Agent>>, id: &str) -> String {
        let tools = self.h.ctx.get(TOOLS).expect("tools");
        let args = json!({"job_id": id, "wait": true});
        let r = tools.call("job_output", args, ToolExec::new(agent.cloned(), "call-3")).await;
        assert!(!r.is_error, "{}", text(&r));
        text(&r)
    }
}

#[tokio::test]
async fn without_an_approval_service_the_hint_stays() {
    let s = setup(None);
    let agent = s.h.agent("a", None);
    assert_eq!(s.foreground(Some(&agent)).await, Setup::foreground_expected(true));
    assert_eq!(s.foreground(None).await, Setup::foreground_expected(true));
    let id = s.background(Some(&agent)).await;
    assert_eq!(s.job_output(Some(&agent), &id).await, Setup::job_output_expected(true));
}

#[tokio::test]
async fn a_hub_whose_answerers_may_still_arrive_keeps_the_hint() {
    let s = setup(Some("ask"));
    let agent = s.h.agent("a", None);
    assert_eq!(s.foreground(Some(&agent)).await, Setup::foreground_expected(true));
    let id = s.background(Some(&agent)).await;
    assert_eq!(s.job_output(Some(&agent), &id).await, Setup::job_output_expected(true));
}

#[tokio::test]
async fn no_answerer_in_an_exhaustive_hub_drops_the_hint() {
    let s = setup(Some("ask"));
    s.hub().answerers_are_exhaustive();
    let agent = s.h.agent("a", None);
    assert_eq!(s.foreground(Some(&agent)).await, Setup::foreground_expected(false));
    let id = s.background(Some(&agent)).await;
    assert_eq!(s.job_output(Some(&agent), &id).await, Setup::job_output_expected(false));
    // Repeated after settlement, still without the hint.
    assert_eq!(s.job_output(Some(&agent), &id).await, format!("{DENIAL}\n[status: completed, exit code: 1]"));
    // Nor can a call without an agent.
    assert_eq!(s.foreground(None).await, Setup::foreground_expected(false));
    let unowned = s.background(None).await;
    assert_eq!(s.job_output(None, &unowned).await, Setup::job_output_expected(false));
    // An unscoped answerer serves both.
    let _answerer = s.hub().register_answerer(None, fixed_answerer(ApprovalOutcome::AllowedOnce), false);
    assert_eq!(s.foreground(Some(&agent)).await, Setup::foreground_expected(true));
    assert_eq!(s.foreground(None).await, Setup::foreground_expected(true));
    assert_eq!(
        s.job_output(None, &unowned).await,
        format!("{DENIAL}\n{ESCALATION_HINT}\n[status: completed, exit code: 1]")
    );
}

#[tokio::test]
async fn a_host_declaring_approvals_unreachable_drops_the_hint() {
    let s = setup(None);
    let agent = s.h.agent("a", None);
    let id = s.background(Some(&agent)).await;
    s.h.ctx.provide(APPROVAL_UNREACHABLE, true).expect("fact");
    assert_eq!(s.foreground(Some(&agent)).await, Setup::foreground_expected(false));
    assert_eq!(s.foreground(None).await, Setup::foreground_expected(false));
    assert_eq!(s.job_output(Some(&agent), &id).await, Setup::job_output_expected(false));
}

#[tokio::test]
async fn the_answerer_in_scope_decides_per_agent_and_at_read_time() {
    let s = setup(Some("ask"));
    let hub = s.hub();
    hub.answerers_are_exhaustive();
    let served = s.h.agent("served", None);
    let other = s.h.agent("other", None);
    let scoped =
        hub.register_answerer(Some("served".into()), fixed_answerer(ApprovalOutcome::AllowedOnce), false);
    assert_eq!(s.foreground(Some(&served)).await, Setup::foreground_expected(true));
    assert_eq!(s.foreground(Some(&other)).await, Setup::foreground_expected(false));
    // A background job's reads follow its owner's answerability when read.
    let id = s.background(Some(&served)).await;
    scoped.dispose().await;
    assert_eq!(s.job_output(Some(&served), &id).await, Setup::job_output_expected(false));
    let _unscoped = hub.register_answerer(None, fixed_answerer(ApprovalOutcome::AllowedOnce), false);
    assert_eq!(s.foreground(Some(&other)).await, Setup::foreground_expected(true));
}

#[tokio::test]
async fn the_never_policy_drops_the_hint() {
    // Configured `never`, with an answerer that would allow.
    let s = setup(Some("never"));
    let _answerer = s.hub().register_answerer(None, fixed_answerer(ApprovalOutcome::AllowedOnce), false);
    let agent = s.h.agent("a", None);
    assert_eq!(s.foreground(Some(&agent)).await, Setup::foreground_expected(false));
    let id = s.background(Some(&agent)).await;
    assert_eq!(s.job_output(Some(&agent), &id).await, Setup::job_output_expected(false));

    // A session switched to `never` by the user.
    let s = setup(Some("ask"));
    let _answerer = s.hub().register_answerer(None, fixed_answerer(ApprovalOutcome::AllowedOnce), false);
    let agent = s.h.agent("b", None);
    assert_eq!(s.foreground(Some(&agent)).await, Setup::foreground_expected(true));
    s.hub().set_approval_policy(&agent, "never").expect("policy");
    assert_eq!(s.foreground(Some(&agent)).await, Setup::foreground_expected(false));
}
