//! Shared fixtures: compositions, a recording fake executor, fake approval and processes.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::plugins::{AgentsPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_core::{
    AGENTS, APPROVAL, AbortSignal, Agent, ApprovalError, ApprovalOutcome, ApprovalRequest, ApprovalService,
    Context, SYSTEM_PROMPT, TOOLS, ToolExec, ToolRegistry, ToolResult,
};
use dsh_sandbox::{SANDBOX_POLICY, SandboxEnforcement, SandboxMode, SandboxPolicyService};
use dsh_sandbox_policy::{LocalSandboxPolicy, SandboxPolicyConfig};
use dsh_shell::{
    CollectedOutput, ProcessStatus, SHELL, ShellEnvConfig, ShellEnvPlugin, ShellError, ShellExecRequest,
    ShellExecSpec, ShellExecutor, ShellProcess, ShellProcessRead, ShellRunResult, ShellSandboxInfo,
    ShellTimeout,
};
use dsh_tool_bash::{Config, ToolBash};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::Value;

/// A composition under test.
pub struct Harness {
    pub ctx: Context,
    pub tools: Arc<ToolRegistry>,
}

impl Harness {
    /// Tools, system prompt, agents, shell-env (`dshHome: /h/dsh`) and nothing else.
    pub fn base() -> Context {
        let ctx = Context::new();
        ctx.load_default::<ToolsPlugin>().expect("tools");
        ctx.load_default::<SystemPromptPlugin>().expect("prompt");
        ctx.load_default::<AgentsPlugin>().expect("agents");
        ctx.load::<ShellEnvPlugin>(ShellEnvConfig { dsh_home: Some("/h/dsh".into()) }).expect("shell-env");
        ctx
    }

    /// The base composition with `executor` mounted and the bash tool loaded with `config`.
    pub fn new(executor: Arc<dyn ShellExecutor>, config: Config) -> Self {
        let ctx = Self::base();
        if executor.sandbox_mode().is_some() {
            let policy: Arc<dyn SandboxPolicyService> =
                Arc::new(LocalSandboxPolicy::new(&SandboxPolicyConfig::default()).expect("policy"));
            ctx.provide(SANDBOX_POLICY, policy).expect("policy");
        }
        ctx.provide(SHELL, executor).expect("shell");
        ctx.load::<ToolBash>(config).expect("tool-bash");
        let tools = ctx.get(TOOLS).expect("tools");
        Self { ctx, tools }
    }

    pub fn with(executor: Arc<dyn ShellExecutor>) -> Self {
        Self::new(executor, Config::default())
    }

    pub async fn call(&self, args: Value) -> ToolResult {
        self.tools.call("bash", args, ToolExec::new(None, "call-1")).await
    }

    pub async fn call_as(&self, agent: &Arc<Agent>, args: Value) -> ToolResult {
        self.tools.call("bash", args, ToolExec::new(Some(Arc::clone(agent)), "call-1")).await
    }

    pub async fn call_exec(&self, args: Value, exec: ToolExec) -> ToolResult {
        self.tools.call("bash", args, exec).await
    }

    /// A live registered agent with one open turn.
    pub fn agent(&self, id: &str, cwd: Option<&str>) -> Arc<Agent> {
        let agent = Agent::new(id, cwd.map(PathBuf::from));
        agent.session().begin_turn().expect("turn");
        self.ctx.get(AGENTS).expect("agents").register(Arc::clone(&agent)).expect("register");
        agent
    }

    pub fn approve_with(&self, approval: Arc<FakeApproval>) {
        let service: Arc<dyn ApprovalService> = approval;
        self.ctx.provide(APPROVAL, service).expect("approval");
    }

    pub fn schema(&self) -> dsh_core::ToolSchema {
        self.tools.schemas().into_iter().find(|s| s.name == "bash").expect("bash schema")
    }

    pub fn section_names(&self) -> Vec<String> {
        self.ctx.get(SYSTEM_PROMPT).expect("prompt").sections().into_iter().map(|s| s.name).collect()
    }
}

/// The text of a result (joined blocks).
pub fn text(result: &ToolResult) -> String {
    result.text()
}

/// A fake executor that records every request and spec and answers from a script.
pub struct FakeExecutor {
    pub mode: Option<SandboxMode>,
    pub resolves: Mutex<Vec<ShellExecRequest>>,
    pub runs: Mutex<Vec<ShellExecSpec>>,
    pub starts: Mutex<Vec<ShellExecSpec>>,
    /// Results handed out by `run` in order; when empty, the default result.
    pub results: Mutex<VecDeque<Result<ShellRunResult, ShellError>>>,
    /// Errors handed out by `start` in order; when empty, an already completed process.
    pub start_errors: Mutex<VecDeque<ShellError>>,
}

impl FakeExecutor {
    pub fn new(mode: Option<SandboxMode>) -> Arc<Self> {
        Arc::new(Self {
            mode,
            resolves: Mutex::new(Vec::new()),
            runs: Mutex::new(Vec::new()),
            starts: Mutex::new(Vec::new()),
            results: Mutex::new(VecDeque::new()),
            start_errors: Mutex::new(VecDeque::new()),
        })
    }

    /// A non-sandboxing fake.
    pub fn local() -> Arc<Self> {
        Self::new(None)
    }

    /// A sandboxing fake confining under `read-only` by default.
    pub fn sandboxing() -> Arc<Self> {
        Self::new(Some(SandboxMode::ReadOnly))
    }

    pub fn push_result(&self, result: Result<ShellRunResult, ShellError>) {
        self.results.lock().push_back(result);
    }

    pub fn last_request(&self) -> ShellExecRequest {
        self.resolves.lock().last().cloned().expect("a request")
    }

    pub fn run_modes(&self) -> Vec<SandboxMode> {
        self.runs.lock().iter().filter_map(|s| s.sandbox_policy.as_ref().map(|p| p.mode)).collect()
    }

    pub fn executed(&self) -> usize {
        self.runs.lock().len() + self.starts.lock().len()
    }
}

/// `exit 0`, stdout `ok`; with sandbox facts from the spec's policy when present.
pub fn ok_result(spec: &ShellExecSpec) -> ShellRunResult {
    ShellRunResult {
        exit_code: Some(0),
        signal: None,
        timed_out: false,
        aborted: false,
        timeout: spec.timeout,
        stdout: CollectedOutput { text: "ok".into(), truncated: false, spill_path: None, spill_error: None },
        stderr: CollectedOutput::default(),
        sandbox: spec.sandbox_policy.as_ref().map(|p| ShellSandboxInfo {
            mode: p.mode,
            denied: false,
            enforcement: Some(SandboxEnforcement::Full),
            runner_failed: Some(false),
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        }),
        network: None,
        out_of_memory: false,
        usage: None,
    }
}

/// A result with the given facts (timeout 10000).
pub fn result(stdout: &str, stderr: &str, exit_code: Option<i32>, signal: Option<&str>) -> ShellRunResult {
    ShellRunResult {
        exit_code,
        signal: signal.map(str::to_owned),
        timed_out: false,
        aborted: false,
        timeout: ShellTimeout::from_millis(10000.0),
        stdout: CollectedOutput {
            text: stdout.into(),
            truncated: false,
            spill_path: None,
            spill_error: None,
        },
        stderr: CollectedOutput {
            text: stderr.into(),
            truncated: false,
            spill_path: None,
            spill_error: None,
        },
        sandbox: None,
        network: None,
        out_of_memory: false,
        usage: None,
    }
}

#[async_trait::async_trait]
impl ShellExecutor for FakeExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.mode
    }

    fn resolve(&self, request: ShellExecRequest) -> Result<ShellExecSpec, ShellError> {
        self.resolves.lock().push(request.clone());
        Ok(ShellExecSpec {
            command: request.command,
            workdir: request.workdir.unwrap_or_else(|| PathBuf::from("/fake-cwd")),
            timeout: ShellTimeout::from_millis(request.timeout_ms.unwrap_or(10000.0)),
            stdout_max_bytes: request.stdout_max_bytes.map_or(64000, |bytes| bytes as usize),
            signal: request.signal,
            stdin: request.stdin,
            env: request.env,
            dsh_env: request.dsh_env,
            sandbox_policy: request.sandbox_policy,
            output_probe: request.output_probe,
            network_approver: request.network_approver,
            shared_file: request.shared_file,
            keep_stdin: request.keep_stdin,
            tty: request.tty,
        })
    }

    async fn run(&self, spec: ShellExecSpec) -> Result<ShellRunResult, ShellError> {
        self.runs.lock().push(spec.clone());
        let scripted = self.results.lock().pop_front();
        scripted.unwrap_or_else(|| Ok(ok_result(&spec)))
    }

    fn start(&self, spec: ShellExecSpec) -> Result<Arc<dyn ShellProcess>, ShellError> {
        self.starts.lock().push(spec);
        if let Some(error) = self.start_errors.lock().pop_front() {
            return Err(error);
        }
        Ok(FakeProcess::settled(ProcessStatus::Completed, Some(0), None, "ok\n", None))
    }
}

/// A scripted background process.
pub struct FakeProcess {
    pub status: Mutex<ProcessStatus>,
    pub exit_code: Mutex<Option<i32>>,
    pub signal: Mutex<Option<String>>,
    pub reads: Mutex<VecDeque<ShellProcessRead>>,
    pub sandbox: Mutex<Option<ShellSandboxInfo>>,
    pub kills: Mutex<usize>,
    pub settled: tokio::sync::watch::Sender<bool>,
}

impl FakeProcess {
    pub fn settled(
        status: ProcessStatus,
        exit_code: Option<i32>,
        signal: Option<&str>,
        output: &str,
        sandbox: Option<ShellSandboxInfo>,
    ) -> Arc<Self> {
        let reads = VecDeque::from([ShellProcessRead { delta: output.into(), ..Default::default() }]);
        Arc::new(Self {
            status: Mutex::new(status),
            exit_code: Mutex::new(exit_code),
            signal: Mutex::new(signal.map(str::to_owned)),
            reads: Mutex::new(reads),
            sandbox: Mutex::new(sandbox),
            kills: Mutex::new(0),
            settled: tokio::sync::watch::channel(true).0,
        })
    }
}

impl ShellProcess for FakeProcess {
    fn status(&self) -> ProcessStatus {
        *self.status.lock()
    }
    fn exit_code(&self) -> Option<i32> {
        *self.exit_code.lock()
    }
    fn signal(&self) -> Option<String> {
        self.signal.lock().clone()
    }
    fn done(&self) -> BoxFuture<'static, ()> {
        let mut rx = self.settled.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|settled| *settled).await;
        })
    }
    fn sandbox(&self) -> Option<ShellSandboxInfo> {
        self.sandbox.lock().clone()
    }
    fn read_output(&self) -> ShellProcessRead {
        self.reads.lock().pop_front().unwrap_or_default()
    }
    fn kill(&self) -> bool {
        *self.kills.lock() += 1;
        let mut status = self.status.lock();
        if *status == ProcessStatus::Running {
            *status = ProcessStatus::Killed;
            true
        } else {
            false
        }
    }
}

/// An approval service answering from a script and recording every request.
pub struct FakeApproval {
    pub outcome: Mutex<Result<ApprovalOutcome, ApprovalError>>,
    pub requests: Mutex<Vec<ApprovalRequest>>,
    /// Fired while deciding (to abort a call "exactly when the decision is made").
    pub abort_on_decide: Mutex<Option<AbortSignal>>,
}

impl FakeApproval {
    pub fn answering(outcome: ApprovalOutcome) -> Arc<Self> {
        Arc::new(Self {
            outcome: Mutex::new(Ok(outcome)),
            requests: Mutex::new(Vec::new()),
            abort_on_decide: Mutex::new(None),
        })
    }

    pub fn failing(message: &str) -> Arc<Self> {
        let approval = Self::answering(ApprovalOutcome::Unavailable);
        *approval.outcome.lock() = Err(ApprovalError::Provider(message.to_owned()));
        approval
    }

    pub fn asked(&self) -> usize {
        self.requests.lock().len()
    }
}

#[async_trait::async_trait]
impl ApprovalService for FakeApproval {
    async fn request(&self, request: ApprovalRequest) -> Result<ApprovalOutcome, ApprovalError> {
        self.requests.lock().push(request);
        if let Some(signal) = self.abort_on_decide.lock().take() {
            signal.abort_default();
        }
        self.outcome.lock().clone()
    }
}
