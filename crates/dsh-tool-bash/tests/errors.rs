//! Every message of the seed's error list the tool can produce, exactly as the model sees it,
//! plus the env-contributor and jobs-preflight errors that pass through unchanged.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{FakeApproval, FakeExecutor, Harness, result, text};
use dsh_core::{ApprovalOutcome, ToolExec};
use dsh_jobs::{JOBS, JobsConfig, JobsPlugin};
use dsh_shell::{SHELL, SHELL_ENV, ShellEnvContributor, ShellExecutor};
use dsh_tool_bash::{Config, ToolBash};
use serde_json::{Value, json};

fn args(extra: Value) -> Value {
    let mut v = json!({"command": "true", "description": "d"});
    for (k, val) in extra.as_object().expect("object") {
        v[k] = val.clone();
    }
    v
}

const WW: &str = "workspace-write";

#[tokio::test]
async fn seed_error_list_is_pinned() {
    let mut seen: Vec<String> = Vec::new();
    let mut expect = |got: String, want: &str| {
        assert_eq!(got, format!("Error: {want}"));
        seen.push(want.to_owned());
    };

    // Value checks and pairing (S-LOCAL).
    let local = FakeExecutor::local();
    let h = Harness::with(local.clone());
    expect(
        text(&h.call(json!({"command": " ", "description": "d"})).await),
        "invalid command: expected a non-empty string",
    );
    expect(
        text(&h.call(json!({"command": "x", "description": ""})).await),
        "invalid description: expected a non-empty string",
    );
    expect(
        text(&h.call(args(json!({"timeoutMs": -1.5}))).await),
        "invalid timeoutMs: expected a positive number, got -1.5",
    );
    expect(
        text(&h.call(args(json!({"sandbox_permissions": WW}))).await),
        "invalid escalation: sandbox_permissions requires a justification",
    );
    expect(
        text(&h.call(args(json!({"justification": "why"}))).await),
        "invalid escalation: justification is only valid together with sandbox_permissions",
    );
    expect(
        text(&h.call(args(json!({"sandbox_permissions": WW, "justification": "\t"}))).await),
        "invalid justification: expected a non-empty sentence",
    );
    expect(
        text(&h.call(args(json!({"sandbox_permissions": WW, "justification": "why"}))).await),
        "sandbox_permissions is not available in this composition (no sandboxing executor to escalate)",
    );
    expect(
        text(&h.call(args(json!({"run_in_background": true}))).await),
        "background jobs unavailable: load @deepseek-ai/dsh-jobs and @deepseek-ai/dsh-tool-jobs",
    );
    assert_eq!(local.executed(), 0);

    let off =
        Harness::new(FakeExecutor::local(), Config { enable_run_in_background: false, ..Config::default() });
    expect(
        text(&off.call(args(json!({"run_in_background": true}))).await),
        "background execution is disabled for this bash tool",
    );

    // Escalation (S-SBX).
    let sbx = FakeExecutor::sandboxing();
    let h = Harness::with(sbx.clone());
    let agent = h.agent("a", None);
    let escalate = |mode: &str| args(json!({"sandbox_permissions": mode, "justification": "why"}));
    expect(
        text(&h.call_as(&agent, escalate(WW)).await),
        "sandbox escalation to \"workspace-write\" requires approval, but no approval service is composed",
    );
    let approval = FakeApproval::answering(ApprovalOutcome::Unavailable);
    h.approve_with(approval.clone());
    expect(
        text(&h.call(escalate(WW)).await),
        "sandbox escalation to \"workspace-write\" requires approval, but the call has no agent to route it through",
    );
    expect(
        text(&h.call_as(&agent, escalate(WW)).await),
        "sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available",
    );
    *approval.outcome.lock() = Ok(ApprovalOutcome::Rejected);
    expect(
        text(&h.call_as(&agent, escalate(WW)).await),
        "the user rejected escalating this command to \"workspace-write\"",
    );
    *approval.outcome.lock() = Ok(ApprovalOutcome::Cancelled);
    expect(
        text(&h.call_as(&agent, escalate(WW)).await),
        "approval for escalating to \"workspace-write\" was cancelled",
    );
    agent.session().append("sandbox/mode", json!({"mode": "danger-full-access"})).expect("event");
    expect(
        text(&h.call_as(&agent, escalate(WW)).await),
        "sandbox escalation to \"workspace-write\" is not strictly wider than this call's current \"danger-full-access\" mode",
    );
    assert_eq!(sbx.executed(), 0);

    // Abort observed by the body.
    let aborting = FakeExecutor::local();
    let mut aborted = result("", "", None, Some("SIGTERM"));
    aborted.aborted = true;
    aborting.push_result(Ok(aborted));
    let h = Harness::with(aborting);
    expect(text(&h.call(args(json!({}))).await), "tool call aborted");

    assert_eq!(seen.len(), 16);
}

#[tokio::test]
async fn load_guard_message() {
    let ctx = Harness::base();
    ctx.provide(SHELL, FakeExecutor::sandboxing() as Arc<dyn ShellExecutor>).expect("shell");
    assert_eq!(
        ctx.load_default::<ToolBash>().expect_err("guard").to_string(),
        "tool-bash: the mounted bash executor confines but ctx.sandboxPolicy is missing"
    );
}

#[tokio::test]
async fn env_contributor_errors_are_tool_errors_and_nothing_runs() {
    let fake = FakeExecutor::local();
    let h = Harness::with(fake.clone());
    let registry = h.ctx.get(SHELL_ENV).expect("shellEnv");
    let _sneaky = registry
        .register(ShellEnvContributor::new("sneaky", &[("DSH_DECLARED", "d")], |_| {
            Ok(BTreeMap::from([("DSH_OTHER".to_owned(), json!("x"))]))
        }))
        .expect("register");
    let r = h.call(args(json!({}))).await;
    assert_eq!(text(&r), "Error: bash env contributor \"sneaky\" returned undeclared key \"DSH_OTHER\"");
    assert_eq!(r.error.and_then(|e| e.info), None);
    let r = h.call(args(json!({"run_in_background": true}))).await;
    assert_eq!(
        text(&r),
        "Error: bash env contributor \"sneaky\" returned undeclared key \"DSH_OTHER\"",
        "env collection happens before background start"
    );
    assert_eq!(fake.executed(), 0);
}

#[tokio::test]
async fn jobs_preflight_errors_pass_through() {
    let fake = FakeExecutor::local();
    let h = Harness::with(fake.clone());
    h.ctx
        .load::<JobsPlugin>(JobsConfig { max_concurrent_jobs_per_owner: 1.0, ..JobsConfig::default() })
        .expect("jobs");
    let jobs = h.ctx.get(JOBS).expect("jobs");
    let agent = h.agent("a", None);
    let bg = args(json!({"command": "sleep 60", "run_in_background": true}));
    assert_eq!(
        text(&h.call_as(&agent, bg.clone()).await),
        "Error: background jobs unavailable: no job controller serves this agent (load @deepseek-ai/dsh-tool-jobs in its composition)"
    );
    let _controller = jobs.attach_controller();
    // A process that never settles keeps its admission slot.
    let hold = common::FakeProcess::settled(dsh_shell::ProcessStatus::Running, None, None, "", None);
    hold.settled.send_replace(false);
    let holder: Arc<dyn ShellExecutor> = Arc::new(Holding(hold));
    let h2 = Harness::with(holder);
    h2.ctx
        .load::<JobsPlugin>(JobsConfig { max_concurrent_jobs_per_owner: 1.0, ..JobsConfig::default() })
        .expect("jobs");
    let _c2 = h2.ctx.get(JOBS).expect("jobs").attach_controller();
    let owner = h2.agent("o", None);
    assert_eq!(text(&h2.call_as(&owner, bg.clone()).await), "started background job bash-1");
    assert_eq!(
        text(&h2.call_as(&owner, bg.clone()).await),
        "Error: background job limit reached for this owner (limit: 1); use job_kill to stop an unneeded job, wait for it to finish, then retry"
    );
    // An owner that is not the registered instance.
    let impostor = dsh_core::Agent::new("o", None);
    assert_eq!(
        text(&h2.call_exec(bg.clone(), ToolExec::new(Some(impostor), "c")).await),
        "Error: agent \"o\" is not the registered agent instance (background job owner must be live)"
    );
    assert_eq!(fake.executed(), 0);
}

/// An executor whose every start hands out the same never-settling process.
struct Holding(Arc<common::FakeProcess>);

#[async_trait::async_trait]
impl ShellExecutor for Holding {
    fn sandbox_mode(&self) -> Option<dsh_sandbox::SandboxMode> {
        None
    }
    fn resolve(
        &self,
        request: dsh_shell::ShellExecRequest,
    ) -> Result<dsh_shell::ShellExecSpec, dsh_shell::ShellError> {
        FakeExecutor::local().resolve(request)
    }
    async fn run(
        &self,
        spec: dsh_shell::ShellExecSpec,
    ) -> Result<dsh_shell::ShellRunResult, dsh_shell::ShellError> {
        Ok(common::ok_result(&spec))
    }
    fn start(
        &self,
        _spec: dsh_shell::ShellExecSpec,
    ) -> Result<Arc<dyn dsh_shell::ShellProcess>, dsh_shell::ShellError> {
        Ok(self.0.clone())
    }
}
