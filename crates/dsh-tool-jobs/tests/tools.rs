//! The job tools through `ToolRegistry::call`, composed like a host composes them, over fake
//! producers: schemas, presenters, admission, reads, kills, listing, completion notices and
//! wake budgets, wait bounds, config errors and output limits.

use std::sync::Arc;
use std::time::Duration;

use dsh_core::{
    AbortSignal, Agent, AgentMessage, AgentStatus, Context, Delivery, Disposer, SYSTEM_PROMPT, ToolExec,
};
use dsh_jobs::testing::FakeProducer;
use dsh_jobs::{
    JOBS, JobError, JobOutcome, JobRegistry, JobSnapshot, JobStatus, JobsConfig, JobsPlugin, OutcomeStatus,
};
use dsh_test_support::compose::{Composition, host};
use dsh_tool_jobs::{ToolJobsConfig, ToolJobsPlugin};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The host composition (calls, agents) plus the job registry.
struct Fx {
    host: Composition,
    jobs: Arc<dyn JobRegistry>,
}

impl std::ops::Deref for Fx {
    type Target = Composition;
    fn deref(&self) -> &Composition {
        &self.host
    }
}

type Deliveries = Arc<Mutex<Vec<(Delivery, AgentMessage)>>>;

fn compose_with(jobs: JobsConfig, tool_jobs: ToolJobsConfig) -> Fx {
    let ctx = host();
    ctx.load::<JobsPlugin>(jobs).expect("jobs");
    ctx.load::<ToolJobsPlugin>(tool_jobs).expect("tool-jobs");
    let host = Composition::of(ctx);
    Fx { jobs: host.ctx.get(JOBS).expect("jobs"), host }
}

fn compose() -> Fx {
    compose_with(JobsConfig::default(), ToolJobsConfig::default())
}

fn tool_config(f: impl FnOnce(&mut ToolJobsConfig)) -> ToolJobsConfig {
    let mut config = ToolJobsConfig::default();
    f(&mut config);
    config
}

impl Fx {
    /// Settlements as a listener registered after the job tools sees them (so the notice,
    /// if any, has been delivered by the time one arrives).
    fn settlements(&self) -> (mpsc::UnboundedReceiver<JobSnapshot>, Disposer) {
        let (tx, rx) = mpsc::unbounded_channel();
        let disposer = self.jobs.on_settled(Arc::new(move |job: &JobSnapshot, _: Option<&Arc<Agent>>| {
            let _ = tx.send(job.clone());
        }));
        (rx, disposer)
    }
}

fn deliveries(agent: &Arc<Agent>) -> Deliveries {
    let log: Deliveries = Arc::default();
    let sink = Arc::clone(&log);
    agent.on_delivery(move |_, lane, message| sink.lock().push((lane, message.clone())));
    log
}

fn lanes(log: &Deliveries) -> Vec<Delivery> {
    log.lock().iter().map(|(lane, _)| *lane).collect()
}

fn completed(detail: &str) -> JobOutcome {
    JobOutcome::new(OutcomeStatus::Completed, detail)
}

fn killed(detail: &str) -> JobOutcome {
    JobOutcome::new(OutcomeStatus::Killed, detail)
}

async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut).await.expect("finished within a generous bound")
}

#[tokio::test]
async fn ps_04_schemas_section_and_presenters() {
    let fx = compose();
    let schemas: Vec<Value> = fx.tools.schemas().iter().map(dsh_core::tools::schema_json).collect();
    assert_eq!(
        Value::Array(schemas),
        json!([
            {
                "name": "job_output",
                "description": "Read a background job. Stream jobs return only output since the previous read; final-output jobs return their result after settlement. Every response ends with `[status: ...]`. Reads are non-blocking unless `wait: true`, which waits up to the configured cap.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "job_id": { "type": "string", "description": "Job id returned by the tool that started the background work." },
                        "wait": { "type": "boolean", "description": "Block until the job reaches a terminal status or the timeout expires. A timed-out wait returns [status: running] and leaves the job alive." },
                        "timeout_ms": { "type": "number", "description": "Max wait in milliseconds (only meaningful with wait: true). Defaults to the configured wait timeout; capped by the configured maximum." }
                    },
                    "required": ["job_id"]
                }
            },
            {
                "name": "job_list",
                "description": "List your background jobs (running and finished) with their ids, kinds, and statuses.",
                "parameters": { "type": "object", "properties": {} }
            },
            {
                "name": "job_kill",
                "description": "Request cancellation of a running background job by job id. Returns immediately; the job settles as killed once its work actually stops.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "job_id": { "type": "string", "description": "Job id returned by the tool that started the background work." },
                        "reason": { "type": "string", "description": "Optional short reason, recorded in the log and forwarded to the job." }
                    },
                    "required": ["job_id"]
                }
            }
        ])
    );
    let prompt = fx.ctx.get(SYSTEM_PROMPT).expect("prompt");
    let section = prompt.sections().into_iter().find(|s| s.name == "tool:jobs").expect("section");
    assert_eq!(section.order, 106.0);
    assert_eq!(
        section.text,
        "Track every background job id you start. You are notified in-session when a job finishes \u{2014} do not busy-poll or sleep on one; keep working on independent steps and do not duplicate a running job's work. Before giving a final answer, collect every still-relevant job with job_output (set wait: true only when you are genuinely blocked on it), and job_kill jobs that stopped mattering."
    );

    let tool = |name: &str| fx.tools.get(name).expect("tool");
    assert_eq!(
        tool("job_output").present_call(&json!({"job_id": "bash-1"})),
        Some(
            json!({"card": "generic", "title": "Read output from background job bash-1", "kind": "read", "rawInput": "bash-1"})
        )
    );
    assert_eq!(
        tool("job_list").present_call(&json!({})),
        Some(json!({"card": "generic", "title": "List background jobs", "kind": "read"}))
    );
    assert_eq!(
        tool("job_kill").present_call(&json!({"job_id": "subagent-2"})),
        Some(
            json!({"card": "generic", "title": "Kill background job subagent-2", "kind": "execute", "rawInput": "subagent-2"})
        )
    );
    // Presenters soft-validate: invalid arguments give no card, never a panic.
    assert_eq!(tool("job_output").present_call(&json!({"job_id": 7})), None);
    assert_eq!(tool("job_kill").present_call(&json!({})), None);
    assert_eq!(tool("job_list").present_call(&json!([])), None);
    let result = fx.call("job_list", json!({}), None).await;
    assert_eq!(tool("job_list").present_result(&json!({}), &result), None);

    // Unloading removes tools and section; the plugin goes back to pending with the jobs service.
    fx.ctx.unload("tool-jobs").await.expect("unload");
    assert!(fx.tools.schemas().is_empty());
    assert!(!prompt.sections().iter().any(|s| s.name == "tool:jobs"));
}

#[tokio::test]
async fn jb_03_kill_then_wait_reports_the_signal() {
    let fx = compose();
    let alice = fx.agent("alice");
    let sleep = FakeProducer::new();
    sleep.settle_on_cancel(killed("signal: SIGTERM"));
    assert_eq!(fx.jobs.start(sleep.spec("bash", "sleep 60", Some(Arc::clone(&alice)))), Ok("bash-1".into()));

    let result = fx.call("job_kill", json!({"job_id": "bash-1"}), Some(&alice)).await;
    assert!(!result.is_error);
    assert_eq!(result.text(), "requested cancellation of job bash-1");
    let value = result.value.expect("value");
    assert_eq!(value["outcome"], "cancellation-requested");
    let job = value["job"].as_object().expect("job");
    let keys: Vec<&str> = job.keys().map(String::as_str).collect();
    assert_eq!(keys, ["id", "kind", "label", "status", "startedAt"], "no ownerSession, no reported");
    assert_eq!((job["id"].as_str(), job["kind"].as_str()), (Some("bash-1"), Some("bash")));
    assert_eq!((job["label"].as_str(), job["status"].as_str()), (Some("sleep 60"), Some("stopping")));
    assert!(job["startedAt"].is_u64());

    let result = within(fx.call("job_output", json!({"job_id": "bash-1", "wait": true}), Some(&alice))).await;
    assert_eq!(result.text(), "(no new output)\n[status: killed, signal: SIGTERM]");
    assert_eq!(sleep.cancels(), [None]);
}

#[tokio::test]
async fn jb_09_admission_through_the_tools() {
    let fx = compose_with(
        JobsConfig { max_concurrent_jobs_per_owner: 1.0, ..JobsConfig::default() },
        ToolJobsConfig::default(),
    );
    let alice = fx.agent("alice");
    let trap = FakeProducer::new();
    assert_eq!(
        fx.jobs.start(trap.spec("bash", "trap '' TERM; sleep 60", Some(Arc::clone(&alice)))),
        Ok("bash-1".into())
    );
    let refused = JobError::LimitReached(1);
    let next = FakeProducer::new();
    assert_eq!(fx.jobs.start(next.spec("bash", "echo", Some(Arc::clone(&alice)))), Err(refused.clone()));
    let kill = fx.call("job_kill", json!({"job_id": "bash-1"}), Some(&alice)).await;
    assert_eq!(kill.text(), "requested cancellation of job bash-1");
    assert_eq!(fx.jobs.start(next.spec("bash", "echo", Some(Arc::clone(&alice)))), Err(refused));
    // The trapped TERM is followed by the escalation's SIGKILL.
    let mut waiting =
        Box::pin(fx.call("job_output", json!({"job_id": "bash-1", "wait": true}), Some(&alice)));
    assert!(futures::poll!(&mut waiting).is_pending());
    trap.settle(Ok(killed("signal: SIGKILL")));
    assert_eq!(within(waiting).await.text(), "(no new output)\n[status: killed, signal: SIGKILL]");
    assert_eq!(fx.jobs.start(next.spec("bash", "echo", Some(Arc::clone(&alice)))), Ok("bash-2".into()));
}

#[tokio::test]
async fn jb_10_stream_and_final_output_reads() {
    let fx = compose();
    let stream = FakeProducer::new();
    stream.push_read("line one\n").push_read("");
    fx.jobs.start(stream.spec("bash", "s", None)).expect("start");
    let first = fx.call("job_output", json!({"job_id": "bash-1"}), None).await;
    assert_eq!(first.text(), "line one\n[status: running]");
    let value = first.value.expect("value");
    assert_eq!(value["text"], "line one\n");
    assert_eq!(value["job"]["status"], "running");
    assert_eq!(value["job"]["id"], "bash-1");
    let second = fx.call("job_output", json!({"job_id": "bash-1"}), None).await;
    assert_eq!(second.text(), "(no new output)\n[status: running]");

    let fin = FakeProducer::new();
    fx.jobs.start(fin.spec_with("subagent", "f", None, false)).expect("start");
    let live = fx.call("job_output", json!({"job_id": "subagent-1"}), None).await;
    assert_eq!(live.text(), "(no new output)\n[status: running]");
    fin.settle(Ok(JobOutcome {
        status: OutcomeStatus::Completed,
        detail: Some("completed".into()),
        output: Some("the answer".into()),
    }));
    let waited = within(fx.call("job_output", json!({"job_id": "subagent-1", "wait": true}), None)).await;
    assert_eq!(waited.text(), "the answer\n[status: completed, completed]");
    let again = fx.call("job_output", json!({"job_id": "subagent-1"}), None).await;
    assert_eq!(again.text(), "the answer\n[status: completed, completed]");
}

#[tokio::test]
async fn jb_12_bad_ids() {
    let fx = compose();
    for tool in ["job_output", "job_kill"] {
        let result = fx.call(tool, json!({"job_id": ""}), None).await;
        assert!(result.is_error);
        assert_eq!(result.text(), "Error: invalid job_id: expected a non-empty string, got \"\"");
        assert_eq!(result.error.and_then(|e| e.info), None, "a plain error");
    }
    let result = fx.call("job_output", json!({"job_id": "bash-99"}), None).await;
    assert_eq!(result.text(), "Error: unknown job bash-99");
    let result = fx.call("job_kill", json!({"job_id": "bash-99"}), None).await;
    assert_eq!(result.text(), "Error: unknown job bash-99");
    let result = fx.call("job_output", json!({}), None).await;
    assert_eq!(result.text(), "Error: invalid arguments: missing required property \"job_id\"");
}

#[tokio::test]
async fn jb_13_job_list() {
    let fx = compose();
    let alice = fx.agent("alice");
    let bob = fx.agent("bob");
    let empty = fx.call("job_list", json!({}), Some(&alice)).await;
    assert_eq!((empty.text().as_str(), empty.value), ("(no background jobs)", Some(json!([]))));

    let tests = FakeProducer::new();
    let research = FakeProducer::new();
    let build = FakeProducer::new();
    fx.jobs.start(tests.spec("bash", "pnpm test", Some(Arc::clone(&alice)))).expect("start");
    fx.jobs.start(research.spec("subagent", "open research", None)).expect("start");
    fx.jobs.start(build.spec("bash", "build", Some(Arc::clone(&alice)))).expect("start");
    build.complete("exit code: 0");
    within(fx.jobs.wait("bash-2", 10_000.0, Some(&alice), None)).await.expect("wait");

    let list = fx.call("job_list", json!({}), Some(&alice)).await;
    assert_eq!(
        list.text(),
        "bash-1 [bash] running \u{2014} pnpm test\nsubagent-1 [subagent] running \u{2014} open research\nbash-2 [bash] completed \u{2014} build"
    );
    for entry in list.value.expect("value").as_array().expect("array") {
        assert!(entry.get("ownerSession").is_none() && entry.get("reported").is_none());
    }
    let list = fx.call("job_list", json!({}), Some(&bob)).await;
    assert_eq!(list.text(), "subagent-1 [subagent] running \u{2014} open research");
}

#[tokio::test]
async fn jb_14_kill_of_a_finished_job_is_non_consuming() {
    let fx = compose();
    let p = FakeProducer::new();
    p.push_read("unread tail");
    fx.jobs.start(p.spec("bash", "x", None)).expect("start");
    p.complete("exit code: 0");
    within(fx.jobs.wait("bash-1", 10_000.0, None, None)).await.expect("wait");
    let kill = fx.call("job_kill", json!({"job_id": "bash-1"}), None).await;
    assert_eq!(kill.text(), "job bash-1 had already finished [status: completed, exit code: 0]");
    assert_eq!(kill.value.expect("value")["outcome"], "already-finished");
    assert!(p.cancels().is_empty());
    let read = fx.call("job_output", json!({"job_id": "bash-1"}), None).await;
    assert_eq!(read.text(), "unread tail\n[status: completed, exit code: 0]");
}

#[tokio::test]
async fn jb_15_kill_reason_and_failing_cancel() {
    let fx = compose();
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", "x", None)).expect("start");
    let kill = fx.call("job_kill", json!({"job_id": "bash-1", "reason": "superseded"}), None).await;
    assert_eq!(kill.text(), "requested cancellation of job bash-1");
    assert_eq!(p.cancels(), [Some("superseded".to_owned())]);

    let throwing = FakeProducer::new();
    throwing.fail_cancel("cancel failed");
    fx.jobs.start(throwing.spec("bash", "y", None)).expect("start");
    let kill = fx.call("job_kill", json!({"job_id": "bash-2"}), None).await;
    assert!(kill.is_error);
    assert_eq!(kill.text(), "Error: cancel failed");
    let job = fx.jobs.get("bash-2", None).expect("get");
    assert_eq!((job.status, job.reported), (JobStatus::Running, false));
}

#[tokio::test]
async fn jb_16_completion_notice() {
    let fx = compose();
    let (mut settled, _l) = fx.settlements();
    let owner = fx.agent("sess-1");
    owner.set_status(AgentStatus::Busy);
    let log = deliveries(&owner);
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", "pnpm test", Some(Arc::clone(&owner)))).expect("start");
    p.settle(Ok(completed("exit code: 0")));
    settled.recv().await.expect("settled");
    let delivered = log.lock().clone();
    assert_eq!(
        delivered,
        [(
            Delivery::Inject,
            AgentMessage {
                text: "background job bash-1 (bash: pnpm test) finished [status: completed, exit code: 0]. Read its output with job_output.".into(),
                source: json!({"kind": "plugin", "plugin": "tool-jobs", "form": "notice", "summary": "bash pnpm test [status: completed, exit code: 0]"}),
            }
        )]
    );

    let long_label = "l".repeat(1000);
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", &long_label, Some(Arc::clone(&owner)))).expect("start");
    p.settle(Ok(completed("exit code: 0")));
    settled.recv().await.expect("settled");
    let (_, message) = log.lock().last().cloned().expect("second notice");
    let summary = message.source["summary"].as_str().expect("summary").to_owned();
    let expected: String = format!("bash {long_label}").chars().take(119).collect();
    assert_eq!(summary, format!("{expected}\u{2026}"));
    assert!(message.text.starts_with("background job bash-2 (bash: llll"));
}

#[tokio::test]
async fn jb_18_idle_owner_wakes_once_by_default_and_quiet_injects() {
    let fx = compose();
    let (mut settled, _l) = fx.settlements();
    let owner = fx.agent("idle");
    let log = deliveries(&owner);
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", "x", Some(Arc::clone(&owner)))).expect("start");
    p.complete("exit code: 0");
    settled.recv().await.expect("settled");
    assert_eq!(lanes(&log), [Delivery::Followup]);

    let quiet = compose_with(JobsConfig::default(), tool_config(|c| c.completion_delivery = "quiet".into()));
    let (mut settled, _l) = quiet.settlements();
    let owner = quiet.agent("idle");
    let log = deliveries(&owner);
    let p = FakeProducer::new();
    quiet.jobs.start(p.spec("bash", "x", Some(Arc::clone(&owner)))).expect("start");
    p.complete("exit code: 0");
    settled.recv().await.expect("settled");
    assert_eq!(lanes(&log), [Delivery::Inject]);
}

async fn settle_one(fx: &Fx, owner: &Arc<Agent>, settled: &mut mpsc::UnboundedReceiver<JobSnapshot>) {
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", "x", Some(Arc::clone(owner)))).expect("start");
    p.complete("exit code: 0");
    settled.recv().await.expect("settled");
}

#[tokio::test]
async fn jb_18_wake_budget_and_its_reset() {
    let fx = compose_with(JobsConfig::default(), tool_config(|c| c.max_consecutive_wakes = 2.0));
    let (mut settled, _l) = fx.settlements();
    let owner = fx.agent("idle");
    let log = deliveries(&owner);
    for _ in 0..3 {
        settle_one(&fx, &owner, &mut settled).await;
    }
    assert_eq!(lanes(&log), [Delivery::Followup, Delivery::Followup, Delivery::Inject]);

    let fx = compose_with(JobsConfig::default(), tool_config(|c| c.max_consecutive_wakes = 1.0));
    let (mut settled, _l) = fx.settlements();
    let owner = fx.agent("idle");
    let log = deliveries(&owner);
    settle_one(&fx, &owner, &mut settled).await;
    settle_one(&fx, &owner, &mut settled).await;
    assert_eq!(lanes(&log), [Delivery::Followup, Delivery::Inject]);
    // Claiming a plugin notice does not reset the budget…
    let notice = log.lock()[0].1.clone();
    owner.claim(&notice);
    settle_one(&fx, &owner, &mut settled).await;
    assert_eq!(lanes(&log)[2], Delivery::Inject);
    // …claiming a user-authored message does.
    owner.claim(&AgentMessage::user("carry on"));
    settle_one(&fx, &owner, &mut settled).await;
    assert_eq!(lanes(&log)[3], Delivery::Followup);
    // The budget belongs to the exact instance: another agent has its own.
    let other = fx.agent("other");
    let other_log = deliveries(&other);
    settle_one(&fx, &other, &mut settled).await;
    assert_eq!(lanes(&other_log), [Delivery::Followup]);
}

#[tokio::test]
async fn jb_18_notices_go_to_the_exact_owner_instance() {
    let fx = compose();
    let (mut settled, _l) = fx.settlements();
    let first = fx.agent("shared");
    first.set_status(AgentStatus::Busy);
    let first_log = deliveries(&first);
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", "x", Some(Arc::clone(&first)))).expect("start");
    fx.agents.detach("shared");
    let second = fx.agent("shared");
    let second_log = deliveries(&second);
    p.complete("exit code: 0");
    settled.recv().await.expect("settled");
    assert_eq!(lanes(&first_log), [Delivery::Inject]);
    assert!(second_log.lock().is_empty());
}

#[tokio::test]
async fn notice_suppression_cases() {
    let fx = compose();
    let (mut settled, _l) = fx.settlements();
    let owner = fx.agent("alice");
    let log = deliveries(&owner);

    // Killed through job_kill before it settled.
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", "k", Some(Arc::clone(&owner)))).expect("start");
    fx.call("job_kill", json!({"job_id": "bash-1"}), Some(&owner)).await;
    p.settle(Ok(killed("signal: SIGTERM")));
    assert!(settled.recv().await.expect("settled").reported);

    // A job_output wait pending at settlement.
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", "w", Some(Arc::clone(&owner)))).expect("start");
    let mut waiting =
        Box::pin(fx.call("job_output", json!({"job_id": "bash-2", "wait": true}), Some(&owner)));
    assert!(futures::poll!(&mut waiting).is_pending());
    p.complete("exit code: 0");
    assert_eq!(within(waiting).await.text(), "(no new output)\n[status: completed, exit code: 0]");
    settled.recv().await.expect("settled");

    // Unowned jobs never notify anyone.
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", "u", None)).expect("start");
    p.complete("exit code: 0");
    settled.recv().await.expect("settled");
    assert!(log.lock().is_empty(), "no notice so far");

    // A plain read, a timed-out wait and an aborted wait do not suppress it.
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", "r", Some(Arc::clone(&owner)))).expect("start");
    fx.call("job_output", json!({"job_id": "bash-4"}), Some(&owner)).await;
    let timed_out = fx
        .call("job_output", json!({"job_id": "bash-4", "wait": true, "timeout_ms": 10}), Some(&owner))
        .await;
    assert_eq!(timed_out.text(), "(no new output)\n[status: running]");
    let signal = AbortSignal::new();
    let exec = ToolExec::new(Some(Arc::clone(&owner)), "call-2").with_signal(signal.clone());
    let mut aborted = Box::pin(fx.tools.call("job_output", json!({"job_id": "bash-4", "wait": true}), exec));
    assert!(futures::poll!(&mut aborted).is_pending());
    signal.abort_default();
    let aborted = within(aborted).await;
    assert!(aborted.is_error);
    assert_eq!(aborted.text(), "Error: wait aborted");
    p.complete("exit code: 0");
    assert!(!settled.recv().await.expect("settled").reported);
    assert_eq!(log.lock().len(), 1);
    assert!(log.lock()[0].1.text.starts_with("background job bash-4 (bash: r) finished"));

    // Owner teardown, including a force-failed cancel.
    let slow = FakeProducer::new();
    slow.settle_on_cancel(killed("signal: SIGTERM"));
    let stuck = FakeProducer::new();
    stuck.fail_cancel("EPERM");
    fx.jobs.start(slow.spec("bash", "t1", Some(Arc::clone(&owner)))).expect("start");
    fx.jobs.start(stuck.spec("bash", "t2", Some(Arc::clone(&owner)))).expect("start");
    within(fx.agents.unregister("alice")).await;
    let mut torn_down: Vec<(String, bool)> = Vec::new();
    for _ in 0..2 {
        let job = settled.recv().await.expect("settled");
        torn_down.push((job.id, job.reported));
    }
    torn_down.sort();
    assert_eq!(torn_down, [("bash-5".into(), true), ("bash-6".into(), true)]);
    assert_eq!(log.lock().len(), 1, "teardown delivers no notice");
    let replacement = fx.agent("alice");
    let gone = fx.call("job_output", json!({"job_id": "bash-5"}), Some(&replacement)).await;
    assert_eq!(gone.text(), "Error: unknown job bash-5");
}

#[tokio::test]
async fn job_output_wait_bounds() {
    let fx = compose_with(
        JobsConfig::default(),
        tool_config(|c| {
            c.wait_timeout_ms = 20.0;
            c.max_wait_timeout_ms = 30.0;
        }),
    );
    let p = FakeProducer::new();
    p.push_read("partial\n");
    fx.jobs.start(p.spec("bash", "x", None)).expect("start");
    // The default wait and an explicit one above the cap both time out without error.
    let result = within(fx.call("job_output", json!({"job_id": "bash-1", "wait": true}), None)).await;
    assert_eq!(result.text(), "partial\n[status: running]");
    let result = within(fx.call(
        "job_output",
        json!({"job_id": "bash-1", "wait": true, "timeout_ms": 3_600_000}),
        None,
    ))
    .await;
    assert_eq!(result.text(), "(no new output)\n[status: running]");
    let result =
        fx.call("job_output", json!({"job_id": "bash-1", "wait": true, "timeout_ms": -5}), None).await;
    assert_eq!(
        result.text(),
        "Error: invalid wait timeout: expected a positive number of milliseconds, got -5"
    );
    // timeout_ms without wait is ignored.
    let result = fx.call("job_output", json!({"job_id": "bash-1", "timeout_ms": -5}), None).await;
    assert_eq!(result.text(), "(no new output)\n[status: running]");
    let result = fx.call("job_output", json!({"job_id": "bash-1", "wait": "yes"}), None).await;
    assert_eq!(result.text(), "Error: invalid arguments: \"wait\" must be a boolean");
}

#[tokio::test]
async fn jb_21c_config_errors() {
    let load = |config: ToolJobsConfig| {
        let ctx = Context::new();
        ctx.load::<ToolJobsPlugin>(config).map_err(|e| e.to_string())
    };
    assert_eq!(
        load(tool_config(|c| {
            c.wait_timeout_ms = 100.0;
            c.max_wait_timeout_ms = 50.0;
        })),
        Err("tool-jobs: waitTimeoutMs (100) exceeds maxWaitTimeoutMs (50)".into())
    );
    assert_eq!(
        load(tool_config(|c| c.max_consecutive_wakes = 2.5)),
        Err("tool-jobs: maxConsecutiveWakes (2.5) must be a whole number of turns".into())
    );
    assert_eq!(
        load(tool_config(|c| c.max_consecutive_wakes = f64::INFINITY)),
        Err("tool-jobs: maxConsecutiveWakes (Infinity) must be a whole number of turns".into())
    );
    assert_eq!(
        load(tool_config(|c| c.max_consecutive_wakes = 0.0)),
        Err("tool-jobs: maxConsecutiveWakes must be at least 1 (got 0)".into())
    );
    assert_eq!(
        load(tool_config(|c| c.completion_delivery = "loud".into())),
        Err("tool-jobs: completionDelivery must be \"wakeup\" or \"quiet\" (got \"loud\")".into())
    );
    assert_eq!(
        load(tool_config(|c| c.wait_timeout_ms = 0.0)),
        Err("tool-jobs: waitTimeoutMs must be at least 1 (got 0)".into())
    );
    assert_eq!(load(ToolJobsConfig::default()), Ok(()));
    // The same rules through the erased (TOML/JSON) path.
    let factory = dsh_core::Factory::<ToolJobsPlugin>::new();
    use dsh_core::PluginFactory;
    let err = factory.parse_config(json!({"completionDelivery": "loud"})).err().map(|e| e.to_string());
    assert_eq!(
        err,
        Some("tool-jobs: completionDelivery must be \"wakeup\" or \"quiet\" (got \"loud\")".into())
    );
    let err = factory.parse_config(json!({"maxConsecutiveWakes": 2.5})).err().map(|e| e.to_string());
    assert_eq!(err, Some("tool-jobs: maxConsecutiveWakes (2.5) must be a whole number of turns".into()));
    assert!(factory.parse_config(json!({"waitTimeoutMs": 1000, "maxWaitTimeoutMs": 2000})).is_ok());
}

#[tokio::test]
async fn controller_follows_the_tools_plugin_and_jobs_outlive_it() {
    let fx = compose();
    let owner = fx.agent("alice");
    let p = FakeProducer::new();
    fx.jobs.start(p.spec("bash", "x", Some(Arc::clone(&owner)))).expect("start");
    fx.ctx.unload("tool-jobs").await.expect("unload");
    assert_eq!(fx.jobs.start(p.spec("bash", "y", Some(Arc::clone(&owner)))), Err(JobError::NoController));
    assert_eq!(fx.jobs.get("bash-1", Some(&owner)).map(|j| j.status), Ok(JobStatus::Running));
    assert!(p.cancels().is_empty(), "unloading the tools stops no job");
    fx.ctx.load_default::<ToolJobsPlugin>().expect("reload");
    let second = FakeProducer::new();
    assert_eq!(fx.jobs.start(second.spec("bash", "y", Some(Arc::clone(&owner)))), Ok("bash-2".into()));
}

#[tokio::test]
async fn output_limits_bound_texts_about_limited_jobs() {
    let fx = compose();
    let (mut settled, _l) = fx.settlements();
    let owner = fx.agent("alice");
    owner.set_status(AgentStatus::Busy);
    let log = deliveries(&owner);
    let p = FakeProducer::new();
    p.push_read(&format!("{}\n", "x".repeat(200)));
    let mut spec = p.spec("workflow", "limited", Some(Arc::clone(&owner)));
    spec.output_limit_bytes = Some(64.0);
    fx.jobs.start(spec).expect("start");

    let read = fx.call("job_output", json!({"job_id": "workflow-1"}), Some(&owner)).await;
    let text = read.text();
    assert_eq!(text, format!("{}\n[output truncated]\n[status: running]", "x".repeat(27)));
    assert_eq!(text.len(), 64);
    assert_eq!(read.value.expect("value")["text"].as_str().map(str::len), Some(201), "the value stays whole");
    let small = fx.call("job_output", json!({"job_id": "workflow-1"}), Some(&owner)).await;
    assert_eq!(small.text(), "(no new output)\n[status: running]");

    p.complete("a rather long completion detail that will not fit");
    settled.recv().await.expect("settled");
    let (_, notice) = log.lock()[0].clone();
    assert_eq!(notice.text, "background job workflow-1 (\n[notice truncated]\nDone; job_output.");
    assert_eq!(notice.text.len(), 64);
    let kill = fx.call("job_kill", json!({"job_id": "workflow-1"}), Some(&owner)).await;
    assert_eq!(kill.text().len(), 64);
    assert!(kill.text().ends_with("will not fit]\n[result truncated]"));
}

#[tokio::test]
async fn tail_lines_is_opt_in_and_keeps_the_last_lines() {
    let fx = compose_with(JobsConfig::default(), tool_config(|c| c.tail_lines = true));
    let params = &fx.tools.schemas()[0].parameters;
    assert_eq!(params["properties"]["tail_lines"]["type"], "integer");
    let p = FakeProducer::new();
    p.push_read("one\ntwo\nthree\nfour\n").push_read("five\n");
    fx.jobs.start(p.spec("bash", "x", None)).expect("start");
    let read = fx.call("job_output", json!({"job_id": "bash-1", "tail_lines": 2}), None).await;
    assert_eq!(read.text(), "[\u{2026} 2 earlier lines not shown]\nthree\nfour\n[status: running]");
    let read = fx.call("job_output", json!({"job_id": "bash-1", "tail_lines": 2}), None).await;
    assert_eq!(read.text(), "five\n[status: running]", "earlier lines were consumed");
    let bad = fx.call("job_output", json!({"job_id": "bash-1", "tail_lines": 0}), None).await;
    assert_eq!(bad.text(), "Error: invalid tail_lines: expected a positive integer, got 0");
    // Without the option the parameter is neither advertised nor honoured.
    let plain = compose();
    assert!(plain.tools.schemas()[0].parameters["properties"].get("tail_lines").is_none());
    let p = FakeProducer::new();
    p.push_read("a\nb\n");
    plain.jobs.start(p.spec("bash", "x", None)).expect("start");
    let read = plain.call("job_output", json!({"job_id": "bash-1", "tail_lines": 1}), None).await;
    assert_eq!(read.text(), "a\nb\n[status: running]");
}
