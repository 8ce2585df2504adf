//! Containment through the bash tool over the real local executor: whatever a command starts
//! (`setsid`, `nohup`, double fork, `disown`, its own process group, a stdio-closing daemon)
//! is gone once the call ends normally, times out or is aborted, or the service is disposed.
//! `DSH_DETACH=1` opts a `setsid` process out. Each test scans `/proc` for its own markers.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Harness, text};
use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::{AbortSignal, ToolExec};
use dsh_jobs::{JOBS, JobsPlugin};
use dsh_subprocess::SubprocessService;
use serde_json::json;

use dsh_test_support::escape;

fn local() -> (Harness, Arc<LocalBashExecutor>) {
    let config = LocalBashConfig { grace_ms: 200.0, timeout_ms: 60_000.0, ..LocalBashConfig::default() };
    let executor = Arc::new(LocalBashExecutor::new(config, SubprocessService::new()).expect("executor"));
    (Harness::with(executor.clone()), executor)
}

#[tokio::test]
async fn containment_normal_foreground_end_leaves_no_escapee() {
    let (h, _executor) = local();
    let marker = escape::marker();
    let r = h.call(json!({"command": escape::script(&marker, "echo armed"), "description": "d"})).await;
    assert_eq!(text(&r), "armed\n");
    assert_eq!(r.value.expect("value")["exitCode"], json!(0));
    escape::assert_no_survivors(&marker).await;
}

#[tokio::test]
async fn containment_foreground_timeout_leaves_no_escapee() {
    let (h, _executor) = local();
    let marker = escape::marker();
    let command = escape::script(&marker, "echo armed; sleep 1000");
    let r = h.call(json!({"command": command, "description": "d", "timeoutMs": 8000})).await;
    let value = r.value.clone().expect("value");
    assert_eq!(value["timedOut"], json!(true), "{}", text(&r));
    assert_eq!(value["stdout"]["text"], json!("armed\n"), "the escapes ran before the timeout");
    escape::assert_no_survivors(&marker).await;
}

#[tokio::test]
async fn containment_foreground_abort_leaves_no_escapee() {
    let (h, _executor) = local();
    let marker = escape::marker();
    let signal = AbortSignal::new();
    let command = escape::script(&marker, "echo armed; sleep 1000");
    let call = h.call_exec(
        json!({"command": command, "description": "d"}),
        ToolExec::new(None, "c").with_signal(signal.clone()),
    );
    let aborter = async {
        escape::armed(&marker).await;
        signal.abort_default();
    };
    let (r, ()) = tokio::join!(call, aborter);
    assert_eq!(text(&r), "Error: tool call aborted");
    escape::assert_no_survivors(&marker).await;
}

#[tokio::test]
async fn containment_service_disposal_leaves_no_escapee() {
    let (h, executor) = local();
    h.ctx.load_default::<JobsPlugin>().expect("jobs");
    let _controller = h.ctx.get(JOBS).expect("jobs").attach_controller();
    let marker = escape::marker();
    let command = escape::script(&marker, "echo armed; sleep 1000");
    let r = h.call(json!({"command": command, "description": "d", "run_in_background": true})).await;
    assert_eq!(text(&r), "started background job bash-1");
    escape::armed(&marker).await;
    executor.service().dispose().await;
    // Disposal resolves once the strays are reaped.
    assert_eq!(escape::names(&escape::survivors(&marker)), Vec::<String>::new());
}

#[tokio::test]
async fn containment_dsh_detach_opts_a_setsid_process_out() {
    let (h, _executor) = local();
    let marker = escape::marker();
    let command = format!(
        "DSH_DETACH=1 setsid bash -c 'exec -a {marker}-detached sleep 1000' >/dev/null 2>&1 &\n\
         until pgrep -f '^{marker}-' >/dev/null; do sleep 0.01; done; echo armed"
    );
    let r = h.call(json!({"command": command, "description": "d"})).await;
    assert_eq!(text(&r), "armed\n");
    // More trees end (each one wakes the reaper); the opted-out process is left alone.
    for _ in 0..3 {
        assert_eq!(text(&h.call(json!({"command": "echo x", "description": "d"})).await), "x\n");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let alive = escape::survivors(&marker);
    assert_eq!(escape::names(&alive), [format!("{marker}-detached")]);
    escape::kill_all(&alive);
}
