//! A read racing settlement: `job_output` never reports a terminal status over output it has
//! not delivered, so a reader that stops at the terminal status has seen every byte.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dsh_core::plugins::{AgentsPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_core::{Context, TOOLS, ToolExec};
use dsh_jobs::{JOBS, JobHooks, JobOutcome, JobRegistry, JobStartSpec, JobsPlugin, OutcomeStatus};
use dsh_tool_jobs::ToolJobsPlugin;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::oneshot;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_settling_during_a_read_reports_its_end_with_the_rest_on_the_next_read() {
    let ctx = Context::new();
    ctx.load_default::<ToolsPlugin>().expect("tools");
    ctx.load_default::<SystemPromptPlugin>().expect("prompt");
    ctx.load_default::<AgentsPlugin>().expect("agents");
    ctx.load_default::<JobsPlugin>().expect("jobs");
    ctx.load_default::<ToolJobsPlugin>().expect("tool-jobs");
    let tools = ctx.get(TOOLS).expect("tools");
    let jobs: Arc<dyn JobRegistry> = ctx.get(JOBS).expect("jobs");

    // The producer's first read takes what was written so far, and the process writes its
    // last line and exits before that read returns; the last line is for the next read.
    let (settle, done) = oneshot::channel::<JobOutcome>();
    let settle = Mutex::new(Some(settle));
    let registry: Arc<OnceLock<Arc<dyn JobRegistry>>> = Arc::new(OnceLock::new());
    let seen = Arc::clone(&registry);
    let reads = AtomicUsize::new(0);
    let read = move || match reads.fetch_add(1, Ordering::SeqCst) {
        0 => {
            if let Some(tx) = settle.lock().take() {
                let _ = tx.send(JobOutcome::new(OutcomeStatus::Completed, "exit code: 0"));
            }
            let jobs = seen.get().expect("registry");
            let deadline = Instant::now() + Duration::from_secs(30);
            while !jobs.get("bash-1", None).expect("job").status.is_terminal() {
                assert!(Instant::now() < deadline, "the job settles within a generous bound");
                std::thread::sleep(Duration::from_millis(1));
            }
            "first line\n".to_owned()
        }
        1 => "last line\n".to_owned(),
        _ => String::new(),
    };
    let spec = JobStartSpec {
        kind: "bash".into(),
        label: "echo last line".into(),
        owner: None,
        output_limit_bytes: None,
        run: Box::new(move || {
            Ok(JobHooks {
                cancel: Box::new(|_| Ok(())),
                done: Box::pin(async move { done.await.map_err(|e| e.to_string()) }),
                read_output: Some(Box::new(read)),
                process: None,
            })
        }),
    };
    let _ = registry.set(Arc::clone(&jobs));
    assert_eq!(jobs.start(spec), Ok("bash-1".to_owned()));

    // A reader that stops at the first terminal status still gets every line.
    let mut received = String::new();
    let mut texts = Vec::new();
    for _ in 0..10 {
        let r = tools.call("job_output", json!({"job_id": "bash-1"}), ToolExec::new(None, "read")).await;
        let value = r.value.clone().expect("value");
        received.push_str(value["text"].as_str().expect("text"));
        texts.push(r.text());
        if value["job"]["status"] == "completed" {
            break;
        }
    }
    assert_eq!(received, "first line\nlast line\n", "{texts:?}");
    assert_eq!(texts, ["first line\n[status: running]", "last line\n[status: completed, exit code: 0]"]);
    assert!(jobs.get("bash-1", None).expect("job").reported, "the terminal read marks the job reported");
    ctx.dispose().await;
}
