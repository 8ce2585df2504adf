//! The background path against the real jobs runtime with fake executors: JB-01, JB-06,
//! JB-07, SB-07, the background half of BF-16 and SB-20, hooks and outcome mapping.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{FakeApproval, FakeExecutor, FakeProcess, Harness, text};
use dsh_core::{AbortSignal, ApprovalOutcome, Disposer, ErrorInfo, ToolExec};
use dsh_jobs::{JOBS, JobError, JobRegistry, JobStatus, JobsPlugin, KillOutcome};
use dsh_sandbox::{SandboxEnforcement, SandboxMode, SandboxUnavailableError};
use dsh_shell::{
    ProcessStatus, ShellError, ShellExecRequest, ShellExecSpec, ShellExecutor, ShellProcess,
    ShellProcessRead, ShellRunResult, ShellSandboxInfo,
};
use dsh_tool_bash::Config;
use parking_lot::Mutex;
use serde_json::json;

fn jobs(h: &Harness) -> Arc<dyn JobRegistry> {
    h.ctx.get(JOBS).expect("jobs")
}

/// The harness plus the jobs runtime and an attached controller (as the job tools attach).
fn with_jobs(executor: Arc<dyn ShellExecutor>, config: Config) -> (Harness, Disposer) {
    let h = Harness::new(executor, config);
    h.ctx.load_default::<JobsPlugin>().expect("jobs");
    let controller = jobs(&h).attach_controller();
    (h, controller)
}

fn bg(command: &str) -> serde_json::Value {
    json!({"command": command, "description": "d", "run_in_background": true})
}

#[tokio::test]
async fn jb_01_start_ack() {
    let fake = FakeExecutor::local();
    let (h, _controller) = with_jobs(fake.clone(), Config::default());
    let r = h.call(bg("echo bg-ok")).await;
    assert!(!r.is_error, "{}", text(&r));
    assert_eq!(text(&r), "started background job bash-1");
    assert_eq!(r.value, Some(json!({"kind": "background", "jobId": "bash-1"})));
    let snapshot = jobs(&h).get("bash-1", None).expect("job");
    assert_eq!((snapshot.kind.as_str(), snapshot.label.as_str()), ("bash", "echo bg-ok"));
    let r = h.call(bg("echo two")).await;
    assert_eq!(text(&r), "started background job bash-2");
}

#[tokio::test]
async fn jb_06_runtime_or_controller_missing() {
    let fake = FakeExecutor::local();
    let h = Harness::with(fake.clone());
    let r = h.call(bg("sleep 1")).await;
    assert_eq!(
        text(&r),
        "Error: background jobs unavailable: load @deepseek-ai/dsh-jobs and @deepseek-ai/dsh-tool-jobs"
    );
    assert_eq!(r.error.and_then(|e| e.info), None);

    h.ctx.load_default::<JobsPlugin>().expect("jobs");
    let agent = h.agent("a", None);
    let r = h.call_as(&agent, bg("sleep 1")).await;
    assert_eq!(
        text(&r),
        "Error: background jobs unavailable: no job controller serves this agent (load @deepseek-ai/dsh-tool-jobs in its composition)"
    );
    assert_eq!(fake.starts.lock().len(), 0, "preflight refused before any start");
    let _controller = jobs(&h).attach_controller();
    let r = h.call_as(&agent, bg("sleep 1")).await;
    assert_eq!(text(&r), "started background job bash-1", "no id was consumed");
    assert_eq!(fake.starts.lock().len(), 1);
}

#[tokio::test]
async fn jb_07_forced_background_when_disabled() {
    let fake = FakeExecutor::local();
    let (h, _controller) =
        with_jobs(fake.clone(), Config { enable_run_in_background: false, ..Config::default() });
    let r = h.call(bg("sleep 1")).await;
    assert_eq!(text(&r), "Error: background execution is disabled for this bash tool");
    assert_eq!(fake.starts.lock().len(), 0);
    let r = h.call(json!({"command": "true", "description": "d"})).await;
    assert!(!r.is_error, "without the flag the call succeeds");
    assert_eq!(fake.runs.lock().len(), 1);
}

#[tokio::test]
async fn sb_07_abort_after_grant_spawns_nothing() {
    let fake = FakeExecutor::sandboxing();
    let (h, _controller) = with_jobs(fake.clone(), Config::default());
    let approval = FakeApproval::answering(ApprovalOutcome::AllowedOnce);
    h.approve_with(approval.clone());
    let agent = h.agent("a", None);
    let signal = AbortSignal::new();
    *approval.abort_on_decide.lock() = Some(signal.clone());
    let args = json!({
        "command": "sleep 60", "description": "d", "run_in_background": true,
        "sandbox_permissions": "workspace-write", "justification": "the command needs workspace writes"
    });
    let r = h.call_exec(args, ToolExec::new(Some(agent.clone()), "c").with_signal(signal)).await;
    assert_eq!(text(&r), "Error: tool call aborted");
    let error = r.error.expect("error");
    assert_eq!(
        (error.message.as_str(), error.info),
        ("tool call aborted", Some(ErrorInfo::new("AbortError", "ABORTED")))
    );
    assert_eq!(approval.asked(), 1);
    assert_eq!(fake.executed(), 0, "start never called");
    assert!(jobs(&h).list(Some(&agent)).is_empty(), "no job");
}

#[tokio::test]
async fn approval_precedes_the_disabled_check() {
    let fake = FakeExecutor::sandboxing();
    let (h, _controller) =
        with_jobs(fake.clone(), Config { enable_run_in_background: false, ..Config::default() });
    let approval = FakeApproval::answering(ApprovalOutcome::AllowedOnce);
    h.approve_with(approval.clone());
    let agent = h.agent("a", None);
    let r = h
        .call_as(
            &agent,
            json!({"command": "x", "description": "d", "run_in_background": true,
                   "sandbox_permissions": "danger-full-access", "justification": "why"}),
        )
        .await;
    assert_eq!(text(&r), "Error: background execution is disabled for this bash tool");
    assert_eq!(approval.asked(), 1, "the prompt happened first");
}

#[tokio::test]
async fn bf_16_background_request_from_named_fields_only() {
    let fake = FakeExecutor::local();
    let (h, _controller) = with_jobs(fake.clone(), Config::default());
    let agent = h.agent("owner", Some("/tmp"));
    let r = h
        .call_as(
            &agent,
            json!({"command": "cat", "description": "d", "run_in_background": true, "timeoutMs": 50,
                   "env": {"SNEAKY_VAR": "leak"}, "stdin": "payload", "stdoutMaxBytes": 5}),
        )
        .await;
    assert_eq!(text(&r), "started background job bash-1");
    let request: ShellExecRequest = fake.last_request();
    assert_eq!((request.env, request.stdin, request.stdout_max_bytes), (None, None, None));
    assert!(request.signal.is_none(), "the tool-call signal is not attached to a published job");
    assert_eq!(request.timeout_ms, Some(50.0));
    assert_eq!(request.workdir, Some(std::fs::canonicalize("/tmp").expect("tmp")));
    assert_eq!(request.dsh_env.expect("env")["DSH_SESSION_ID"], "owner");
    // The job is owned by the calling agent.
    assert_eq!(jobs(&h).get("bash-1", Some(&agent)).expect("job").owner_session.as_deref(), Some("owner"));
    assert_eq!(jobs(&h).get("bash-1", None).err(), Some(JobError::OtherSession("bash-1".into())));
}

#[tokio::test]
async fn sb_20_unavailable_at_start_registers_no_job() {
    let fake = FakeExecutor::sandboxing();
    fake.start_errors
        .lock()
        .push_back(ShellError::SandboxUnavailable(SandboxUnavailableError::new(SandboxMode::ReadOnly)));
    let (h, _controller) = with_jobs(fake.clone(), Config::default());
    let r = h.call(bg("true")).await;
    assert!(text(&r).starts_with(
        "Error: sandbox mode \"read-only\" is requested but no sandbox backend is usable on this host;"
    ));
    assert_eq!(
        r.error.and_then(|e| e.info),
        Some(ErrorInfo::new("SandboxUnavailableError", "SANDBOX_UNAVAILABLE"))
    );
    assert!(jobs(&h).list(None).is_empty());
    assert_eq!(text(&h.call(bg("true")).await), "started background job bash-1", "no id consumed");
}

/// An executor whose `start` hands out prepared processes.
struct ProcessExecutor {
    processes: Mutex<Vec<Arc<FakeProcess>>>,
    mode: Option<SandboxMode>,
}

#[async_trait::async_trait]
impl ShellExecutor for ProcessExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.mode
    }
    fn resolve(&self, request: ShellExecRequest) -> Result<ShellExecSpec, ShellError> {
        FakeExecutor::local().resolve(request)
    }
    async fn run(&self, _spec: ShellExecSpec) -> Result<ShellRunResult, ShellError> {
        Err(ShellError::Other("foreground not scripted".into()))
    }
    fn start(&self, _spec: ShellExecSpec) -> Result<Arc<dyn ShellProcess>, ShellError> {
        let process = self.processes.lock().remove(0);
        Ok(process)
    }
}

fn running(reads: &[&str], sandbox: Option<ShellSandboxInfo>) -> Arc<FakeProcess> {
    let process = FakeProcess::settled(ProcessStatus::Running, None, None, "", sandbox);
    *process.reads.lock() =
        reads.iter().map(|d| ShellProcessRead { delta: (*d).into(), ..Default::default() }).collect();
    process.settled.send_replace(false);
    process
}

fn settle(process: &FakeProcess, status: ProcessStatus, exit_code: Option<i32>, signal: Option<&str>) {
    *process.status.lock() = status;
    *process.exit_code.lock() = exit_code;
    *process.signal.lock() = signal.map(str::to_owned);
    process.settled.send_replace(true);
}

async fn wait(jobs: &Arc<dyn JobRegistry>, id: &str) -> dsh_jobs::JobSnapshot {
    tokio::time::timeout(Duration::from_secs(10), jobs.wait(id, 10_000.0, None, None))
        .await
        .expect("settles")
        .expect("wait")
}

#[tokio::test]
async fn hooks_map_reads_kills_and_outcomes() {
    let denied = ShellSandboxInfo {
        mode: SandboxMode::ReadOnly,
        denied: true,
        enforcement: Some(SandboxEnforcement::Full),
        runner_failed: None,
        network_denied: Vec::new(),
        quarantined: Vec::new(),
    };
    let exited = running(&["x\n"], None);
    let nonzero = running(&[], None);
    let killed = running(&[], None);
    let never_ran = running(&["[stderr]\nspawn failed: spawn bash ENOENT\n"], None);
    let sandboxed = running(&["[stderr]\nx: Permission denied\n"], None);
    let executor = Arc::new(ProcessExecutor {
        processes: Mutex::new(vec![
            exited.clone(),
            nonzero.clone(),
            killed.clone(),
            never_ran.clone(),
            sandboxed.clone(),
        ]),
        mode: Some(SandboxMode::ReadOnly),
    });
    let (h, _controller) = with_jobs(executor, Config::default());
    let jobs = jobs(&h);
    for n in 1..=5 {
        assert_eq!(text(&h.call(bg("work")).await), format!("started background job bash-{n}"));
    }

    // Incremental read while running, then settlement with exit 0.
    assert_eq!(jobs.read("bash-1", None).expect("read").0, "x\n");
    settle(&exited, ProcessStatus::Completed, Some(0), None);
    let snap = wait(&jobs, "bash-1").await;
    assert_eq!((snap.status, snap.detail.as_deref()), (JobStatus::Completed, Some("exit code: 0")));

    // Non-zero exit is completed, never failed.
    settle(&nonzero, ProcessStatus::Completed, Some(3), None);
    let snap = wait(&jobs, "bash-2").await;
    assert_eq!((snap.status, snap.detail.as_deref()), (JobStatus::Completed, Some("exit code: 3")));

    // Kill → proc.kill(); settles killed with its signal.
    assert_eq!(jobs.kill("bash-3", None, Some("superseded".into())), Ok(KillOutcome::Requested));
    assert_eq!(*killed.kills.lock(), 1);
    settle(&killed, ProcessStatus::Killed, None, Some("SIGTERM"));
    let snap = wait(&jobs, "bash-3").await;
    assert_eq!((snap.status, snap.detail.as_deref()), (JobStatus::Killed, Some("signal: SIGTERM")));

    // Killed without a signal (e.g. spawn failure): killed before exit.
    settle(&never_ran, ProcessStatus::Killed, None, None);
    let snap = wait(&jobs, "bash-4").await;
    assert_eq!((snap.status, snap.detail.as_deref()), (JobStatus::Killed, Some("killed before exit")));
    assert_eq!(jobs.read("bash-4", None).expect("read").0, "[stderr]\nspawn failed: spawn bash ENOENT\n");
    assert_eq!(jobs.read("bash-4", None).expect("read").0, "");

    // Sandbox facts stamped at settlement; the notice repeats on every later read.
    *sandboxed.sandbox.lock() = Some(denied);
    settle(&sandboxed, ProcessStatus::Completed, Some(1), None);
    wait(&jobs, "bash-5").await;
    let hint = "[sandbox: escalation available — retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]";
    assert_eq!(
        jobs.read("bash-5", None).expect("read").0,
        format!("[stderr]\nx: Permission denied\n[sandbox: file access denied under read-only mode]\n{hint}")
    );
    assert_eq!(
        jobs.read("bash-5", None).expect("read").0,
        format!("[sandbox: file access denied under read-only mode]\n{hint}")
    );
}
