//! The background path: adapts a started [`ShellProcess`] into the generic job
//! hooks. The job runtime owns ids, owners, reads, kills, waits and notices; this module only
//! maps bash exit and sandbox facts into job output and outcome detail.

use std::sync::{Arc, Weak};

use dsh_core::{Agent, ToolError, ToolExec, WeakContext};
use dsh_jobs::{JOBS, JobError, JobHooks, JobOutcome, JobProcess, JobStartSpec, OutcomeStatus, SpillWatch};
use dsh_shell::{ProcessStatus, ShellError, ShellExecRequest, ShellProcess};
use parking_lot::Mutex;
use serde_json::Value;

use crate::render::render_process_read;
use crate::tool::BashTool;
use crate::value::background_value;

const DISABLED: &str = "background execution is disabled for this bash tool";
const NO_JOBS: &str =
    "background jobs unavailable: load @deepseek-ai/dsh-jobs and @deepseek-ai/dsh-tool-jobs";

/// The job outcome of a settled process. A non-zero exit is `completed`,
/// never `failed`; no bash path produces `failed`.
pub(crate) fn process_outcome(process: &dyn ShellProcess) -> JobOutcome {
    let detail = match process.status() {
        ProcessStatus::Killed => match process.signal() {
            Some(signal) => (OutcomeStatus::Killed, format!("signal: {signal}")),
            None => (OutcomeStatus::Killed, "killed before exit".to_owned()),
        },
        ProcessStatus::Completed | ProcessStatus::Running => {
            (OutcomeStatus::Completed, format!("exit code: {}", process.exit_code().unwrap_or(0)))
        }
    };
    JobOutcome { status: detail.0, detail: Some(detail.1), output: None }
}

/// Whether a read of the job shows the escalation hint after a denial: the composition
/// advertises escalation targets and, at the time of the read, an approval answer is not known
/// to be out of reach for the job's owner (an unowned job, or one whose owner is gone, is
/// judged as a call without an agent).
struct HintDecision {
    escalation: bool,
    ctx: WeakContext,
    owner: Option<Weak<Agent>>,
}

impl HintDecision {
    fn offered(&self) -> bool {
        if !self.escalation {
            return false;
        }
        let owner = self.owner.as_ref().and_then(Weak::upgrade);
        crate::escalation::offered_to(&self.ctx, owner.as_deref())
    }
}

/// The hooks over one started process.
fn hooks(process: Arc<dyn ShellProcess>, hint: HintDecision) -> JobHooks {
    let cancel_process = Arc::clone(&process);
    let done_process = Arc::clone(&process);
    let journaled = process.identity().map(|identity| {
        let watched = Arc::clone(&process);
        let spills: SpillWatch = Box::new(move |observer| watched.watch_spills(Arc::from(observer)));
        JobProcess {
            pid: identity.pid,
            pgid: identity.pgid,
            start_time: identity.start_time,
            spills: Some(spills),
        }
    });
    JobHooks {
        // The reason is recorded by the runtime; bash has nothing to do with it.
        cancel: Box::new(move |_reason| {
            cancel_process.kill();
            Ok(())
        }),
        done: Box::pin(async move {
            done_process.done().await;
            Ok(process_outcome(done_process.as_ref()))
        }),
        read_output: Some(Box::new(move || {
            let read = process.read_output();
            let sandbox = process.sandbox();
            // Asked only when there is a denial to annotate.
            let offered = sandbox.as_ref().is_some_and(|s| s.denied) && hint.offered();
            render_process_read(read, sandbox.as_ref(), offered)
        })),
        process: journaled,
    }
}

/// The input side of a background process, for `job_input`.
struct ProcessInput(Arc<dyn ShellProcess>);

impl dsh_jobs::JobInput for ProcessInput {
    fn write(&self, bytes: &[u8]) -> Result<(), String> {
        self.0.write_input(bytes)
    }
    fn close(&self) -> bool {
        self.0.close_input()
    }
    fn interrupt(&self) -> bool {
        self.0.interrupt()
    }
    fn waiting(&self) -> bool {
        self.0.waiting_for_input()
    }
    fn latest_line(&self) -> Option<String> {
        self.0.latest_line()
    }
    fn terminal(&self) -> bool {
        self.0.terminal()
    }
}

/// Publishes the command as a background job and returns `{kind:'background', jobId}`.
pub(crate) fn start(
    tool: &BashTool,
    mut request: ShellExecRequest,
    command: &str,
    exec: &ToolExec,
) -> Result<Value, ToolError> {
    if !tool.background_enabled() {
        return Err(ToolError::plain(DISABLED));
    }
    let jobs = tool.ctx().get(JOBS).ok_or_else(|| ToolError::plain(NO_JOBS))?;
    if exec.signal.is_aborted() {
        return Err(ToolError::aborted());
    }
    // The runtime only carries `run`'s message (`JobError::StartFailed`); keep the executor's
    // typed error so a coded failure (SANDBOX_UNAVAILABLE) keeps its code on the tool result.
    let shell_error: Arc<Mutex<Option<ShellError>>> = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&shell_error);
    let shell = Arc::clone(tool.shell());
    let hint = HintDecision {
        escalation: tool.escalation(),
        ctx: tool.ctx().clone(),
        owner: exec.agent.as_ref().map(Arc::downgrade),
    };
    // With job input enabled, the job's stdin stays a pipe (or its terminal) its owner writes
    // (`job_input`).
    let inputs = tool.ctx().get(dsh_jobs::JOB_INPUTS);
    request.keep_stdin = inputs.is_some();
    let input_slot: Arc<Mutex<Option<Arc<dyn dsh_jobs::JobInput>>>> = Arc::new(Mutex::new(None));
    let started_input = Arc::clone(&input_slot);
    // No tool-call signal: once published, the job is controlled only through the runtime.
    let run = Box::new(move || {
        let started = shell.resolve(request).and_then(|spec| shell.start(spec));
        match started {
            Ok(process) => {
                if inputs.is_some() {
                    let input: Arc<dyn dsh_jobs::JobInput> = Arc::new(ProcessInput(Arc::clone(&process)));
                    *started_input.lock() = Some(input);
                }
                let mut hooks = hooks(process, hint);
                // The job's hooks keep its input alive as long as the job lives.
                if let Some(input) = started_input.lock().clone() {
                    let done = hooks.done;
                    hooks.done = Box::pin(async move {
                        let outcome = done.await;
                        drop(input);
                        outcome
                    });
                }
                Ok(hooks)
            }
            Err(error) => {
                let message = error.to_string();
                *slot.lock() = Some(error);
                Err(message)
            }
        }
    });
    let spec = JobStartSpec {
        kind: "bash".to_owned(),
        label: command.to_owned(),
        owner: exec.agent.clone(),
        output_limit_bytes: None,
        run,
    };
    match jobs.start(spec) {
        Ok(job_id) => {
            if let (Some(inputs), Some(input)) =
                (tool.ctx().get(dsh_jobs::JOB_INPUTS), input_slot.lock().take())
            {
                inputs.register(&job_id, &input, exec.agent.as_ref());
            }
            Ok(background_value(&job_id))
        }
        Err(JobError::StartFailed(message)) => Err(match shell_error.lock().take() {
            Some(error) => ToolError::from(error),
            None => ToolError::plain(message),
        }),
        Err(refused) => Err(refused.into()),
    }
}
