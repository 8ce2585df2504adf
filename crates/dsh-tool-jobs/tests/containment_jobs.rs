//! Containment of background jobs over the real local executor: whatever a job starts
//! (`setsid`, `nohup`, double fork, `disown`, its own process group, a stdio-closing daemon)
//! is gone once the job ends, is killed with `job_kill`, or its session closes. Each test
//! scans `/proc` for its own markers only.

use std::sync::Arc;

use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::AGENTS;
use dsh_jobs::JobsPlugin;
use dsh_shell::{SHELL, ShellEnvConfig, ShellEnvPlugin, ShellExecutor};
use dsh_subprocess::SubprocessService;
use dsh_test_support::compose::{Composition, host};
use dsh_test_support::escape;
use dsh_tool_bash::{Config, ToolBash};
use dsh_tool_jobs::ToolJobsPlugin;
use serde_json::{Value, json};

fn compose() -> Composition {
    let ctx = host();
    ctx.load::<ShellEnvPlugin>(ShellEnvConfig { dsh_home: Some("/h/dsh".into()) }).expect("shell-env");
    let config = LocalBashConfig { grace_ms: 200.0, timeout_ms: 60_000.0, ..LocalBashConfig::default() };
    let executor: Arc<dyn ShellExecutor> =
        Arc::new(LocalBashExecutor::new(config, SubprocessService::new()).expect("executor"));
    ctx.provide(SHELL, executor).expect("shell");
    ctx.load::<ToolBash>(Config::default()).expect("tool-bash");
    ctx.load_default::<JobsPlugin>().expect("jobs");
    ctx.load_default::<ToolJobsPlugin>().expect("tool-jobs");
    Composition::of(ctx)
}

fn bg(command: &str) -> Value {
    json!({"command": command, "description": "d", "run_in_background": true})
}

#[tokio::test]
async fn containment_a_finished_job_leaves_no_escapee() {
    let fx = compose();
    let marker = escape::marker();
    assert_eq!(
        fx.call("bash", bg(&escape::script(&marker, "echo armed")), None).await.text(),
        "started background job bash-1"
    );
    let out =
        fx.call("job_output", json!({"job_id": "bash-1", "wait": true, "timeout_ms": 30000}), None).await;
    assert_eq!(out.text(), "armed\n[status: completed, exit code: 0]");
    escape::assert_no_survivors(&marker).await;
}

#[tokio::test]
async fn containment_job_kill_leaves_no_escapee() {
    let fx = compose();
    let marker = escape::marker();
    let command = escape::script(&marker, "echo armed; sleep 1000");
    assert_eq!(fx.call("bash", bg(&command), None).await.text(), "started background job bash-1");
    escape::armed(&marker).await;
    assert_eq!(
        fx.call("job_kill", json!({"job_id": "bash-1"}), None).await.text(),
        "requested cancellation of job bash-1"
    );
    escape::assert_no_survivors(&marker).await;
}

#[tokio::test]
async fn containment_session_close_leaves_no_escapee() {
    let fx = compose();
    let alice = fx.agent_in_turn("alice");
    let marker = escape::marker();
    let command = escape::script(&marker, "echo armed; sleep 1000");
    assert_eq!(fx.call("bash", bg(&command), Some(&alice)).await.text(), "started background job bash-1");
    escape::armed(&marker).await;
    fx.ctx.get(AGENTS).expect("agents").unregister("alice").await.expect("registered");
    escape::assert_no_survivors(&marker).await;
}
