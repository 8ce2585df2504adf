//! The `bash` tool definition and its execute algorithm. The step order is fixed: argument
//! checks, standing policy, escalation, per-call policy, workdir, managed environment,
//! request, then background or foreground.

use std::sync::Arc;

use dsh_core::{
    ContentBlock, Schema, Tool, ToolError, ToolExec, ToolParams, ToolResult, ToolSpec, WeakContext,
};
use dsh_sandbox::{ESCALATION_TARGETS, SandboxPolicyService};
use dsh_shell::{ShellEnvRegistry, ShellExecRequest, ShellExecutor};
use serde_json::{Value, json};

use crate::Persist;
use crate::args::BashArgs;
use crate::render::render_result;
use crate::texts;
use crate::value::{ValueView, foreground_value, output_schema};
use crate::workdir::resolve_workdir;

/// What the tool was composed with.
pub(crate) struct BashTool {
    spec: ToolSpec,
    shell: Arc<dyn ShellExecutor>,
    env: Arc<ShellEnvRegistry>,
    /// Present exactly when the executor sandboxes (escalation targets are advertised).
    policy: Option<Arc<dyn SandboxPolicyService>>,
    /// For call-time lookups of the optional services (`jobs`, `approval`).
    ctx: WeakContext,
    background_enabled: bool,
    persist: Persist,
    /// `tty` is advertised and honoured (only with background execution).
    tty: bool,
}

/// The parameters for a configuration (declaration order is the schema's order; keep it).
fn parameters(background: bool, escalation: bool, persist: Persist, tty: bool) -> ToolParams {
    let mut params = ToolParams::new()
        .required("command", Schema::string().describe(texts::PARAM_COMMAND))
        .required("description", Schema::string().describe(texts::PARAM_DESCRIPTION))
        .optional("timeoutMs", Schema::number().describe(texts::PARAM_TIMEOUT_MS))
        .optional("workdir", Schema::string().describe(texts::PARAM_WORKDIR));
    if background {
        params =
            params.optional("run_in_background", Schema::boolean().describe(texts::PARAM_RUN_IN_BACKGROUND));
        if tty {
            params = params.optional("tty", Schema::boolean().describe(texts::PARAM_TTY));
        }
    }
    if escalation {
        let targets: Vec<Value> = ESCALATION_TARGETS.iter().map(|m| json!(m.as_str())).collect();
        params = params
            .optional(
                "sandbox_permissions",
                Schema::string().describe(texts::PARAM_SANDBOX_PERMISSIONS).enumerated(targets),
            )
            .optional("justification", Schema::string().describe(texts::PARAM_JUSTIFICATION));
    }
    if persist.is_on() {
        params = params.optional("reset", Schema::boolean().describe(texts::PARAM_RESET));
    }
    params
}

impl BashTool {
    /// Builds the definition once: description and schema depend only on the config and the
    /// executor's capability, never on per-session state, so they stay byte-identical (and
    /// prefix-cache stable) across calls and sandbox mode switches.
    pub(crate) fn new(
        shell: Arc<dyn ShellExecutor>,
        env: Arc<ShellEnvRegistry>,
        policy: Option<Arc<dyn SandboxPolicyService>>,
        ctx: WeakContext,
        background_enabled: bool,
        persist: Persist,
        tty: bool,
    ) -> Self {
        let tty = tty && background_enabled;
        let escalation = policy.is_some();
        let network = policy.as_ref().is_some_and(|p| p.network_mode().isolates());
        let credentials = network && policy.as_ref().is_some_and(|p| p.credentials().is_some());
        Self {
            spec: ToolSpec::new(
                "bash",
                texts::description(background_enabled, escalation, persist),
                parameters(background_enabled, escalation, persist, tty),
                output_schema(
                    network,
                    shell.reports_out_of_memory(),
                    escalation,
                    credentials,
                    shell.reports_usage(),
                ),
            ),
            shell,
            env,
            policy,
            ctx,
            background_enabled,
            persist,
            tty,
        }
    }

    async fn run(&self, args: BashArgs, exec: ToolExec) -> Result<Value, ToolError> {
        // 2. Standing policy (sandboxing compositions only).
        let session = exec.agent.as_ref().map(|a| Arc::clone(a.session()));
        let standing = self.policy.as_ref().map(|p| p.resolve(session.as_deref(), None));
        // The workdir of step 5, resolved here only to be shown (a pure resolution).
        let policy_root = standing.as_ref().map(|s| s.policy.workspace_root.as_path());
        let session_cwd = session.as_ref().and_then(|s| s.header().cwd.clone());
        let workdir = resolve_workdir(args.workdir.as_deref(), policy_root, session_cwd.as_deref());
        // 3. Escalation: nothing has run yet. The user is shown the command, where it starts,
        //    and (with `persist = "env"`) that no state of earlier calls runs with it.
        let approved = match &args.escalation {
            None => None,
            Some(request) => {
                let approval = crate::escalation::approval_service(&self.ctx);
                let returns_to = match (self.persist.is_on(), session.as_ref(), args.workdir.is_none()) {
                    (true, Some(session), true) => {
                        crate::persist::stored_cwd(self.env.dsh_home(), session.id(), args.reset)
                    }
                    _ => None,
                };
                let mut notes = Vec::new();
                if self.persist == Persist::Env && session.is_some() {
                    notes.push(texts::ESCALATED_STATE_NOTE.to_owned());
                }
                let shown = crate::escalation::Shown {
                    command: args.command.clone(),
                    cwd: returns_to.unwrap_or_else(|| shown_dir(workdir.as_deref())),
                    notes,
                };
                Some(crate::escalation::approve(request, standing.as_ref(), approval, &exec, shown).await?)
            }
        };
        // 4. Per-call policy: the standing one with the granted mode, root and session kept.
        let sandbox_policy = standing.as_ref().map(|s| {
            let mut policy = s.policy.clone();
            if let Some(mode) = approved {
                policy.mode = mode;
            }
            policy
        });
        // 5. Workdir from the standing root, else the session cwd (resolved above).
        // 6. Managed environment, freshly collected for this call.
        let dsh_env = self.env.collect(&exec).map_err(|e| ToolError::plain(e.to_string()))?;
        // 7. The request, from named fields only; with persistent state, the command wrapped
        //    to start from the session's state and to hand its own back. An escalated call
        //    starts from the session's directory only: the variables and functions earlier
        //    (confined) calls left would run unconfined with it, unseen by the user.
        let persisted = match (self.persist.is_on(), session.as_ref(), dsh_env.get("DSH_HOME")) {
            (true, Some(session), Some(home)) => Some(
                crate::persist::Call::prepare(
                    self.persist,
                    std::path::Path::new(home),
                    session.id(),
                    args.reset,
                    args.workdir.is_none(),
                    approved.is_none(),
                    &args.command,
                )
                .map_err(|e| ToolError::plain(format!("cannot prepare the session's shell state: {e}")))?,
            ),
            _ => None,
        };
        let start_dir = persisted
            .as_ref()
            .and_then(|(call, _, _)| call.returns_to())
            .unwrap_or_else(|| shown_dir(workdir.as_deref()));
        let mut request = ShellExecRequest {
            command: args.command.clone(),
            workdir,
            timeout_ms: args.timeout_ms,
            dsh_env: Some(dsh_env),
            sandbox_policy,
            ..ShellExecRequest::default()
        };
        let call = persisted.map(|(call, command, shared)| {
            request.command = command;
            request.shared_file = Some(shared);
            call
        });
        // 8. Background or foreground. A background command starts from the session's state
        //    but hands nothing back (it runs alongside the session's later calls).
        if args.background {
            request.tty = self.tty && args.tty;
            return crate::background::start(self, request, &args.command, &exec);
        }
        let result = self.foreground(request, &exec, &args.command, &start_dir).await;
        if let Some(call) = call {
            call.finish();
        }
        result
    }

    /// A foreground run: resolve and run on the shell; an aborted run is an abort error.
    /// `command` (as the model wrote it) and `start_dir` are what a network question shows.
    async fn foreground(
        &self,
        mut request: ShellExecRequest,
        exec: &ToolExec,
        command: &str,
        start_dir: &str,
    ) -> Result<Value, ToolError> {
        request.signal = Some(exec.signal.clone());
        // The host may watch the command's latest output line while it runs.
        request.output_probe = Some(exec.output_probe.clone());
        request.network_approver = crate::escalation::network_approver(self.ctx(), exec, command, start_dir);
        // Served until the run has ended.
        let _askpass = crate::askpass::open(self.ctx(), exec, &mut request)?;
        let spec = self.shell.resolve(request)?;
        let result = self.shell.run(spec).await?;
        if result.aborted {
            return Err(ToolError::aborted());
        }
        Ok(foreground_value(&result))
    }

    pub(crate) fn shell(&self) -> &Arc<dyn ShellExecutor> {
        &self.shell
    }

    pub(crate) fn ctx(&self) -> &WeakContext {
        &self.ctx
    }

    pub(crate) fn background_enabled(&self) -> bool {
        self.background_enabled
    }

    /// Whether escalation targets are advertised (the executor sandboxes).
    pub(crate) fn escalation(&self) -> bool {
        self.policy.is_some()
    }
}

/// The directory a call starts in, as shown to the user: the resolved workdir, else the
/// harness's own working directory (the executor's default).
fn shown_dir(workdir: Option<&std::path::Path>) -> String {
    workdir
        .map(std::path::Path::to_path_buf)
        .or_else(|| std::env::current_dir().ok())
        .map_or_else(|| "(the harness's working directory)".to_owned(), |dir| dir.display().to_string())
}

#[async_trait::async_trait]
impl Tool for BashTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn render(&self, _args: &Value, value: &Value) -> Vec<ContentBlock> {
        let text = match ValueView::parse(value) {
            Some(ValueView::Background { job_id }) => format!("started background job {job_id}"),
            Some(ValueView::Foreground(view)) => render_result(&view, self.escalation()),
            // Unreachable after output validation; shown raw rather than lost.
            None => value.to_string(),
        };
        vec![ContentBlock::text(text)]
    }

    async fn execute(&self, args: Value, exec: ToolExec) -> Result<Value, ToolError> {
        let args = BashArgs::parse(&args)?;
        if self.tty && args.tty && !args.background {
            return Err(ToolError::plain(texts::TTY_NEEDS_BACKGROUND));
        }
        self.run(args, exec).await
    }

    fn present_call(&self, args: &Value) -> Option<Value> {
        crate::present::present_call(args)
    }

    /// Drops the escalation hint from a denied foreground result when the calling agent cannot
    /// get an approval answer (see [`crate::escalation::offered_to`]). Only the tool's own
    /// rendering is replaced; content something else substituted is left as it is.
    fn finalize_content(&self, exec: &ToolExec, result: &ToolResult) -> Option<Vec<ContentBlock>> {
        if !self.escalation() || result.is_error {
            return None;
        }
        let Some(ValueView::Foreground(view)) = ValueView::parse(result.value.as_ref()?) else {
            return None;
        };
        if !view.sandbox.as_ref().is_some_and(|s| s.denied)
            || crate::escalation::offered_to(&self.ctx, exec.agent.as_deref())
        {
            return None;
        }
        if result.single_text() != Some(render_result(&view, true).as_str()) {
            return None;
        }
        Some(vec![ContentBlock::text(render_result(&view, false))])
    }

    fn present_result(&self, args: &Value, result: &ToolResult) -> Option<Value> {
        crate::present::present_result(args, result)
    }
}
