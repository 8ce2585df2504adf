//! Containment of background jobs over the real local executor: whatever a job starts
//! (`setsid`, `nohup`, double fork, `disown`, its own process group, a stdio-closing daemon)
//! is gone once the job ends, is killed with `job_kill`, or its session closes. Each test
//! scans `/proc` for its own markers only.

use std::sync::Arc;

use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::plugins::{AgentsPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_core::{AGENTS, Agent, Context, TOOLS, ToolExec, ToolRegistry, ToolResult};
use dsh_jobs::JobsPlugin;
use dsh_shell::{SHELL, ShellEnvConfig, ShellEnvPlugin, ShellExecutor};
use dsh_subprocess::SubprocessService;
use dsh_tool_bash::{Config, ToolBash};
use dsh_tool_jobs::ToolJobsPlugin;
use serde_json::{Value, json};

#[allow(dead_code)]
mod escape {
    include!("../../dsh-subprocess/tests/support/escape.rs");
}

struct Fx {
    ctx: Context,
    tools: Arc<ToolRegistry>,
}

fn compose() -> Fx {
    let ctx = Context::new();
    ctx.load_default::<ToolsPlugin>().expect("tools");
    ctx.load_default::<SystemPromptPlugin>().expect("prompt");
    ctx.load_default::<AgentsPlugin>().expect("agents");
    ctx.load::<ShellEnvPlugin>(ShellEnvConfig { dsh_home: Some("/h/dsh".into()) }).expect("shell-env");
    let config = LocalBashConfig { grace_ms: 200.0, timeout_ms: 60_000.0, ..LocalBashConfig::default() };
    let executor: Arc<dyn ShellExecutor> =
        Arc::new(LocalBashExecutor::new(config, SubprocessService::new()).expect("executor"));
    ctx.provide(SHELL, executor).expect("shell");
    ctx.load::<ToolBash>(Config::default()).expect("tool-bash");
    ctx.load_default::<JobsPlugin>().expect("jobs");
    ctx.load_default::<ToolJobsPlugin>().expect("tool-jobs");
    let tools = ctx.get(TOOLS).expect("tools");
    Fx { ctx, tools }
}

impl Fx {
    async fn call(&self, name: &str, args: Value, agent: Option<&Arc<Agent>>) -> ToolResult {
        self.tools.call(name, args, ToolExec::new(agent.cloned(), "call-c")).await
    }

    fn agent(&self, id: &str) -> Arc<Agent> {
        let agent = Agent::new(id, None);
        agent.session().begin_turn().expect("turn");
        self.ctx.get(AGENTS).expect("agents").register(Arc::clone(&agent)).expect("register");
        agent
    }
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
    let alice = fx.agent("alice");
    let marker = escape::marker();
    let command = escape::script(&marker, "echo armed; sleep 1000");
    assert_eq!(fx.call("bash", bg(&command), Some(&alice)).await.text(), "started background job bash-1");
    escape::armed(&marker).await;
    fx.ctx.get(AGENTS).expect("agents").unregister("alice").await.expect("registered");
    escape::assert_no_survivors(&marker).await;
}
