//! S-JOBS end to end: the bash tool's background jobs read through the real job tools, as the
//! model sees them (JB-02, JB-03, JB-04, JB-20, JB-21b and the access fence).

mod common;

use std::sync::Arc;

use common::{Harness, text};
use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::{AbortSignal, ToolExec, ToolResult};
use dsh_jobs::JobsPlugin;
use dsh_subprocess::SubprocessService;
use dsh_tool_jobs::ToolJobsPlugin;
use serde_json::{Value, json};

fn s_jobs() -> Harness {
    let config = LocalBashConfig { grace_ms: 200.0, timeout_ms: 10_000.0, ..LocalBashConfig::default() };
    let executor = Arc::new(LocalBashExecutor::new(config, SubprocessService::new()).expect("executor"));
    let h = Harness::with(executor);
    h.ctx.load_default::<JobsPlugin>().expect("jobs");
    h.ctx.load_default::<ToolJobsPlugin>().expect("tool-jobs");
    h
}

async fn tool(h: &Harness, name: &str, args: Value) -> ToolResult {
    h.tools.call(name, args, ToolExec::new(None, "call-j")).await
}

fn bg(command: &str) -> Value {
    json!({"command": command, "description": "d", "run_in_background": true})
}

async fn wait_output(h: &Harness, id: &str) -> String {
    text(&tool(h, "job_output", json!({"job_id": id, "wait": true, "timeout_ms": 15000})).await)
}

#[tokio::test]
async fn jb_02_collect() {
    let h = s_jobs();
    assert_eq!(text(&h.call(bg("echo bg-ok")).await), "started background job bash-1");
    assert_eq!(wait_output(&h, "bash-1").await, "bg-ok\n[status: completed, exit code: 0]");
    assert_eq!(
        text(&tool(&h, "job_output", json!({"job_id": "bash-1"})).await),
        "(no new output)\n[status: completed, exit code: 0]"
    );
}

#[tokio::test]
async fn jb_03_and_jb_04_kill_and_outcomes() {
    let h = s_jobs();
    assert_eq!(text(&h.call(bg("sleep 60")).await), "started background job bash-1");
    assert_eq!(
        text(&tool(&h, "job_kill", json!({"job_id": "bash-1"})).await),
        "requested cancellation of job bash-1"
    );
    assert!(wait_output(&h, "bash-1").await.contains("[status: killed, signal: SIGTERM]"));

    assert_eq!(text(&h.call(bg("kill -TERM $$")).await), "started background job bash-2");
    assert!(wait_output(&h, "bash-2").await.contains("[status: killed, signal: SIGTERM]"));
    assert_eq!(text(&h.call(bg("echo x; exit 3")).await), "started background job bash-3");
    assert_eq!(wait_output(&h, "bash-3").await, "x\n[status: completed, exit code: 3]");
}

#[tokio::test]
async fn owned_jobs_are_fenced_to_their_session() {
    let h = s_jobs();
    let agent = h.agent("alice", None);
    let r = h.call_as(&agent, bg("echo owned")).await;
    assert_eq!(text(&r), "started background job bash-1");
    let r = h.tools.call("job_output", json!({"job_id": "bash-1"}), ToolExec::new(None, "c")).await;
    assert_eq!(text(&r), "Error: job bash-1 belongs to another session");
}

#[tokio::test]
async fn jb_20_background_spawn_failure_via_the_tool() {
    let h = s_jobs();
    let args = json!({"command": "true", "description": "d", "workdir": "/nonexistent-dsh", "run_in_background": true});
    assert_eq!(text(&h.call(args).await), "started background job bash-1");
    let out = wait_output(&h, "bash-1").await;
    assert!(out.starts_with("[stderr]\nspawn failed: ") && out.contains("ENOENT"), "{out}");
    assert!(out.ends_with("\n[status: killed, killed before exit]"), "{out}");
    assert_eq!(
        text(&tool(&h, "job_output", json!({"job_id": "bash-1"})).await),
        "(no new output)\n[status: killed, killed before exit]"
    );
}

#[tokio::test]
async fn jb_21_not_tied_to_the_originating_call_signal() {
    let h = s_jobs();
    let signal = AbortSignal::new();
    let r =
        h.call_exec(bg("sleep 1; echo later"), ToolExec::new(None, "c").with_signal(signal.clone())).await;
    assert_eq!(text(&r), "started background job bash-1");
    signal.abort_default();
    assert_eq!(wait_output(&h, "bash-1").await, "later\n[status: completed, exit code: 0]");
}
