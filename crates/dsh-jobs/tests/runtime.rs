//! The local registry through its public surface: preflight, ids, admission, reads, kills,
//! waits, settlement, access and teardown.

use std::sync::Arc;

use dsh_core::plugins::AgentsPlugin;
use dsh_core::{AGENTS, AbortSignal, Agent, Agents, Context, Disposer};
use dsh_jobs::testing::FakeProducer;
use dsh_jobs::{
    JOBS, JobError, JobOutcome, JobRegistry, JobSnapshot, JobStartSpec, JobStatus, JobsConfig, JobsPlugin,
    KillOutcome, OutcomeStatus,
};
use parking_lot::Mutex;
use tokio::sync::mpsc;

struct Fixture {
    ctx: Context,
    jobs: Arc<dyn JobRegistry>,
    agents: Arc<Agents>,
    _controller: Disposer,
}

fn fixture_with(limit: f64) -> Fixture {
    let ctx = Context::new();
    ctx.load_default::<AgentsPlugin>().expect("agents");
    ctx.load::<JobsPlugin>(JobsConfig { max_concurrent_jobs_per_owner: limit, ..JobsConfig::default() })
        .expect("jobs");
    let jobs = ctx.get(JOBS).expect("jobs service");
    let agents = ctx.get(AGENTS).expect("agents service");
    let controller = jobs.attach_controller();
    Fixture { ctx, jobs, agents, _controller: controller }
}

fn fixture() -> Fixture {
    fixture_with(10.0)
}

impl Fixture {
    fn agent(&self, id: &str) -> Arc<Agent> {
        let agent = Agent::new(id, None);
        self.agents.register(Arc::clone(&agent)).expect("register");
        agent
    }

    /// Every settlement, in order, as the listeners see it.
    fn settlements(&self) -> (mpsc::UnboundedReceiver<JobSnapshot>, Disposer) {
        let (tx, rx) = mpsc::unbounded_channel();
        let disposer =
            self.jobs.on_settled(Arc::new(move |job: &JobSnapshot, _owner: Option<&Arc<Agent>>| {
                let _ = tx.send(job.clone());
            }));
        (rx, disposer)
    }
}

fn spec_failing_run(kind: &str) -> JobStartSpec {
    JobStartSpec {
        kind: kind.into(),
        label: "boom".into(),
        owner: None,
        output_limit_bytes: None,
        run: Box::new(|| Err("starter threw".to_owned())),
    }
}

fn killed(detail: &str) -> JobOutcome {
    JobOutcome::new(OutcomeStatus::Killed, detail)
}

#[tokio::test]
async fn jb_08_ids_per_kind_never_consumed_by_failures() {
    let f = fixture();
    let p = FakeProducer::new();
    assert_eq!(f.jobs.start(p.spec("bash", "a", None)), Ok("bash-1".into()));
    assert_eq!(f.jobs.start(spec_failing_run("bash")), Err(JobError::StartFailed("starter threw".into())));
    assert_eq!(f.jobs.start(p.spec("bash", "", None)), Err(JobError::EmptyLabel));
    assert_eq!(f.jobs.start(p.spec("bash", "b", None)), Ok("bash-2".into()));
    assert_eq!(f.jobs.start(p.spec("subagent", "c", None)), Ok("subagent-1".into()));
    assert_eq!(f.jobs.start(p.spec("workflow", "d", None)), Ok("workflow-1".into()));
    assert_eq!(
        f.jobs.start(spec_failing_run("workflow")),
        Err(JobError::StartFailed("starter threw".into()))
    );
    assert_eq!(f.jobs.start(p.spec("workflow", "e", None)), Ok("workflow-2".into()));
    let ids: Vec<String> = f.jobs.list(None).into_iter().map(|j| j.id).collect();
    assert_eq!(ids, ["bash-1", "bash-2", "subagent-1", "workflow-1", "workflow-2"]);
}

#[tokio::test]
async fn preflight_order_and_messages() {
    let ctx = Context::new();
    ctx.load_default::<JobsPlugin>().expect("jobs");
    let jobs = ctx.get(JOBS).expect("jobs");
    let p = FakeProducer::new();
    let ran = Arc::new(Mutex::new(0));
    let counting = |kind: &str, label: &str, owner: Option<Arc<Agent>>, limit: Option<f64>| {
        let ran = Arc::clone(&ran);
        let p = Arc::clone(&p);
        JobStartSpec {
            kind: kind.into(),
            label: label.into(),
            owner,
            output_limit_bytes: limit,
            run: Box::new(move || {
                *ran.lock() += 1;
                Ok(p.hooks(true))
            }),
        }
    };
    // 1. Controller first, even before an empty kind.
    assert_eq!(jobs.start(counting("", "", None, None)), Err(JobError::NoController));
    let controller = jobs.attach_controller();
    // 2–4.
    assert_eq!(jobs.start(counting("", "", None, None)), Err(JobError::EmptyKind));
    assert_eq!(jobs.start(counting("k", "", None, None)), Err(JobError::EmptyLabel));
    for (bad, shown) in
        [(0.0, "0"), (1.5, "1.5"), (-3.0, "-3"), (f64::NAN, "null"), (9007199254740992.0, "9007199254740992")]
    {
        assert_eq!(
            jobs.start(counting("k", "l", None, Some(bad))),
            Err(JobError::InvalidOutputLimit(shown.into()))
        );
    }
    // 5. Owner needs the agents registry, then a live registered instance.
    let stray = Agent::new("stray", None);
    assert_eq!(
        jobs.start(counting("k", "l", Some(Arc::clone(&stray)), None)),
        Err(JobError::NoAgentRegistry)
    );
    ctx.load_default::<AgentsPlugin>().expect("agents");
    let agents = ctx.get(AGENTS).expect("agents");
    assert_eq!(
        jobs.start(counting("k", "l", Some(Arc::clone(&stray)), None)),
        Err(JobError::OwnerNotLive("stray".into()))
    );
    let live = Agent::new("stray", None);
    agents.register(Arc::clone(&live)).expect("register");
    assert_eq!(
        jobs.start(counting("k", "l", Some(Arc::clone(&stray)), None)),
        Err(JobError::OwnerNotLive("stray".into()))
    );
    assert_eq!(*ran.lock(), 0, "run is never called before every preflight passed");
    assert_eq!(jobs.start(counting("k", "l", Some(live), Some(4096.0))), Ok("k-1".into()));
    assert_eq!(*ran.lock(), 1);
    // Detaching the last controller re-arms the refusal.
    controller.dispose().await;
    assert!(matches!(jobs.start(counting("k", "l", None, None)), Err(JobError::NoController)));
    assert_eq!(jobs.start(counting("k", "l", None, None)).ok(), None);
    let _again = jobs.attach_controller();
    assert_eq!(jobs.start(counting("k", "l", None, None)), Ok("k-2".into()));
}

#[tokio::test]
async fn jb_09_admission_per_exact_owner() {
    let f = fixture_with(1.0);
    let alice = f.agent("alice");
    let trap = FakeProducer::new();
    assert_eq!(
        f.jobs.start(trap.spec("bash", "trap '' TERM; sleep 60", Some(Arc::clone(&alice)))),
        Ok("bash-1".into())
    );
    let limit_1 = JobError::LimitReached(1);
    let next = FakeProducer::new();
    assert_eq!(f.jobs.start(next.spec("bash", "x", Some(Arc::clone(&alice)))), Err(limit_1.clone()));
    assert_eq!(f.jobs.kill("bash-1", Some(&alice), None), Ok(KillOutcome::Requested));
    assert_eq!(f.jobs.get("bash-1", Some(&alice)).map(|j| j.status), Ok(JobStatus::Stopping));
    assert_eq!(
        f.jobs.start(next.spec("bash", "x", Some(Arc::clone(&alice)))),
        Err(limit_1.clone()),
        "stopping occupies the slot"
    );
    // Another owner and the unowned bucket are separate.
    let bob = f.agent("bob");
    assert_eq!(f.jobs.start(next.spec("bash", "y", Some(Arc::clone(&bob)))), Ok("bash-2".into()));
    assert_eq!(f.jobs.start(next.spec("bash", "z", None)), Ok("bash-3".into()));
    assert_eq!(f.jobs.start(next.spec("bash", "z", None)), Err(limit_1.clone()));
    trap.settle(Ok(killed("signal: SIGKILL")));
    let job = f.jobs.wait("bash-1", 10_000.0, Some(&alice), None).await.expect("wait");
    assert_eq!((job.status, job.detail.as_deref()), (JobStatus::Killed, Some("signal: SIGKILL")));
    assert_eq!(f.jobs.start(next.spec("bash", "x", Some(Arc::clone(&alice)))), Ok("bash-4".into()));
}

#[tokio::test]
async fn jb_09_default_limit_is_ten_and_unowned_jobs_share_a_bucket() {
    let f = fixture();
    let p = FakeProducer::new();
    for n in 1..=10 {
        assert_eq!(f.jobs.start(p.spec("bash", "x", None)), Ok(format!("bash-{n}")));
    }
    assert_eq!(f.jobs.start(p.spec("other", "x", None)), Err(JobError::LimitReached(10)));
    let carol = f.agent("carol");
    assert_eq!(f.jobs.start(p.spec("bash", "x", Some(carol))), Ok("bash-11".into()));
}

#[tokio::test]
async fn access_fence_and_listing() {
    let f = fixture();
    let alice = f.agent("alice");
    let bob = f.agent("bob");
    let p = FakeProducer::new();
    f.jobs.start(p.spec("bash", "mine", Some(Arc::clone(&alice)))).expect("start");
    f.jobs.start(p.spec("subagent", "open", None)).expect("start");
    // Same session id, different instance: access compares session ids.
    let alice_again = Agent::new("alice", None);
    assert_eq!(f.jobs.get("bash-1", Some(&alice_again)).map(|j| j.owner_session), Ok(Some("alice".into())));
    assert_eq!(f.jobs.get("bash-1", Some(&bob)), Err(JobError::OtherSession("bash-1".into())));
    assert_eq!(f.jobs.read("bash-1", None).err(), Some(JobError::OtherSession("bash-1".into())));
    assert_eq!(f.jobs.kill("bash-1", None, None), Err(JobError::OtherSession("bash-1".into())));
    assert_eq!(
        f.jobs.wait("bash-1", 1.0, Some(&bob), None).await,
        Err(JobError::OtherSession("bash-1".into()))
    );
    assert_eq!(f.jobs.get("bash-9", Some(&alice)), Err(JobError::UnknownJob("bash-9".into())));
    assert_eq!(f.jobs.get("subagent-1", None).map(|j| j.owner_session), Ok(None));
    let ids = |caller: Option<&Arc<Agent>>| f.jobs.list(caller).into_iter().map(|j| j.id).collect::<Vec<_>>();
    assert_eq!(ids(Some(&alice)), ["bash-1", "subagent-1"]);
    assert_eq!(ids(Some(&bob)), ["subagent-1"]);
    assert_eq!(ids(None), ["subagent-1"]);
}

#[tokio::test]
async fn snapshots_and_public_projection() {
    let f = fixture();
    let alice = f.agent("alice");
    let p = FakeProducer::new();
    let mut spec = p.spec("bash", "echo hi", Some(Arc::clone(&alice)));
    spec.output_limit_bytes = Some(4096.0);
    f.jobs.start(spec).expect("start");
    let job = f.jobs.get("bash-1", Some(&alice)).expect("get");
    assert_eq!(job.output_limit_bytes, Some(4096.0));
    assert!(!job.reported);
    let public = job.public_json();
    let keys: Vec<&str> = public.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(keys, ["id", "kind", "label", "status", "startedAt"]);
    assert_eq!(public["status"], "running");
    p.complete("exit code: 0");
    let done = f.jobs.wait("bash-1", 10_000.0, Some(&alice), None).await.expect("wait");
    let public = done.public_json();
    let keys: Vec<&str> = public.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(keys, ["id", "kind", "label", "status", "detail", "startedAt", "finishedAt"]);
    assert!(done.finished_at.expect("finished") >= done.started_at);
}

#[tokio::test]
async fn reads_stream_consuming_and_final_output_idempotent() {
    let f = fixture();
    let stream = FakeProducer::new();
    stream.push_read("one\n").push_read("two\n");
    f.jobs.start(stream.spec("bash", "s", None)).expect("start");
    assert_eq!(f.jobs.read("bash-1", None).map(|r| r.0), Ok("one\n".into()));
    assert_eq!(f.jobs.read("bash-1", None).map(|r| r.0), Ok("two\n".into()));
    assert_eq!(f.jobs.read("bash-1", None).map(|r| r.0), Ok(String::new()));

    let fin = FakeProducer::new();
    f.jobs.start(fin.spec_with("subagent", "f", None, false)).expect("start");
    let (text, job) = f.jobs.read("subagent-1", None).expect("read");
    assert_eq!((text.as_str(), job.reported), ("", false), "a live read never marks reported");
    fin.settle(Ok(JobOutcome {
        status: OutcomeStatus::Completed,
        detail: Some("completed".into()),
        output: Some("the answer".into()),
    }));
    f.jobs.wait("subagent-1", 10_000.0, None, None).await.expect("wait");
    for _ in 0..2 {
        let (text, job) = f.jobs.read("subagent-1", None).expect("read");
        assert_eq!((text.as_str(), job.status, job.reported), ("the answer", JobStatus::Completed, true));
    }
}

#[tokio::test]
async fn kill_rules() {
    let f = fixture();
    let p = FakeProducer::new();
    f.jobs.start(p.spec("bash", "x", None)).expect("start");
    assert_eq!(f.jobs.kill("bash-1", None, Some("superseded".into())), Ok(KillOutcome::Requested));
    assert_eq!(
        f.jobs.kill("bash-1", None, None),
        Ok(KillOutcome::Requested),
        "a stopping job is cancelled again"
    );
    assert_eq!(p.cancels(), [Some("superseded".to_owned()), None]);
    let job = f.jobs.get("bash-1", None).expect("get");
    assert_eq!((job.status, job.reported), (JobStatus::Stopping, true));
    p.settle(Ok(killed("signal: SIGTERM")));
    f.jobs.wait("bash-1", 10_000.0, None, None).await.expect("wait");
    assert_eq!(f.jobs.kill("bash-1", None, None), Ok(KillOutcome::AlreadyFinished));
    assert_eq!(p.cancels().len(), 2, "a finished job is not cancelled");

    let throwing = FakeProducer::new();
    throwing.fail_cancel("cancel failed");
    f.jobs.start(throwing.spec("bash", "y", None)).expect("start");
    assert_eq!(f.jobs.kill("bash-2", None, None), Err(JobError::CancelFailed("cancel failed".into())));
    let job = f.jobs.get("bash-2", None).expect("get");
    assert_eq!((job.status, job.reported), (JobStatus::Running, false));
}

#[tokio::test]
async fn settlement_is_first_wins_and_a_failing_done_is_failed() {
    let f = fixture();
    let (mut settled, _listener) = f.settlements();
    let p = FakeProducer::new();
    f.jobs.start(p.spec("bash", "x", None)).expect("start");
    p.settle(Err("producer exploded".into()));
    let job = settled.recv().await.expect("settled");
    assert_eq!((job.status, job.detail.as_deref()), (JobStatus::Failed, Some("producer exploded")));
    assert!(!job.reported);
    p.complete("exit code: 0");
    assert_eq!(f.jobs.get("bash-1", None).map(|j| j.status), Ok(JobStatus::Failed));
}

#[tokio::test]
async fn wait_validates_timeout_even_for_terminal_jobs() {
    let f = fixture();
    let p = FakeProducer::new();
    f.jobs.start(p.spec("bash", "x", None)).expect("start");
    p.complete("exit code: 0");
    f.jobs.wait("bash-1", 10_000.0, None, None).await.expect("wait");
    for (bad, shown) in
        [(0.0, "0"), (-5.0, "-5"), (-0.5, "-0.5"), (f64::NAN, "null"), (f64::INFINITY, "null")]
    {
        assert_eq!(
            f.jobs.wait("bash-1", bad, None, None).await,
            Err(JobError::InvalidWaitTimeout(shown.into()))
        );
    }
    assert_eq!(
        f.jobs.wait("bash-9", 0.0, None, None).await,
        Err(JobError::UnknownJob("bash-9".into())),
        "access first"
    );
}

#[tokio::test]
async fn wait_timeout_returns_the_live_job_untouched() {
    let f = fixture();
    let (mut settled, _listener) = f.settlements();
    let p = FakeProducer::new();
    f.jobs.start(p.spec("bash", "x", None)).expect("start");
    let job = f.jobs.wait("bash-1", 20.0, None, None).await.expect("timed out");
    assert_eq!((job.status, job.reported), (JobStatus::Running, false));
    p.complete("exit code: 0");
    assert!(
        !settled.recv().await.expect("settled").reported,
        "a timed-out wait does not suppress the notice"
    );
}

#[tokio::test]
async fn wait_abort_rules() {
    let f = fixture();
    let (mut settled, _listener) = f.settlements();
    let p = FakeProducer::new();
    f.jobs.start(p.spec("bash", "x", None)).expect("start");
    let pre = AbortSignal::new();
    pre.abort_default();
    assert_eq!(f.jobs.wait("bash-1", 10_000.0, None, Some(pre)).await, Err(JobError::WaitAborted));

    let signal = AbortSignal::new();
    let mut waiting = f.jobs.wait("bash-1", 600_000.0, None, Some(signal.clone()));
    assert!(futures::poll!(&mut waiting).is_pending());
    signal.abort_default();
    assert_eq!(waiting.await, Err(JobError::WaitAborted));
    p.complete("exit code: 0");
    let job = settled.recv().await.expect("settled");
    assert!(!job.reported, "an aborted wait is unregistered and does not suppress the notice");
}

/// A wait cancelled after the job settled but before it reported (the race of a client's
/// cancellation with the job's end) reports nothing: the call's read never runs, and the
/// completion notice the pending wait held back goes out when the wait ends.
#[tokio::test]
async fn a_wait_cancelled_after_the_settlement_neither_reports_nor_suppresses_the_notice() {
    for sealable in [true, false] {
        let f = fixture();
        let (mut settled, _listener) = f.settlements();
        let p = FakeProducer::new();
        f.jobs.start(p.spec("bash", "x", None)).expect("start");
        let signal = if sealable { AbortSignal::sealable() } else { AbortSignal::new() };
        let mut waiting = f.jobs.wait("bash-1", 600_000.0, None, Some(signal.clone()));
        assert!(futures::poll!(&mut waiting).is_pending());
        p.complete("exit code: 0");
        while !f.jobs.get("bash-1", None).expect("get").status.is_terminal() {
            tokio::task::yield_now().await;
        }
        assert!(settled.try_recv().is_err(), "the pending wait defers the listeners");
        signal.abort_default();
        assert_eq!(waiting.await, Err(JobError::WaitAborted));
        let job = settled.recv().await.expect("settled");
        assert!(!job.reported, "the notice goes out");
        assert!(!f.jobs.get("bash-1", None).expect("get").reported);
    }
}

/// A wait that reported its job's end seals its call's signal: the call's result stands
/// against a later cancellation.
#[tokio::test]
async fn a_wait_that_reports_seals_a_sealable_signal() {
    let f = fixture();
    let (mut settled, _listener) = f.settlements();
    let p = FakeProducer::new();
    f.jobs.start(p.spec("bash", "x", None)).expect("start");
    let signal = AbortSignal::sealable();
    let mut waiting = f.jobs.wait("bash-1", 600_000.0, None, Some(signal.clone()));
    assert!(futures::poll!(&mut waiting).is_pending());
    p.complete("exit code: 0");
    assert!(waiting.await.expect("settled").reported);
    assert!(settled.recv().await.expect("settled").reported, "no notice");
    assert!(!signal.abort_default(), "sealed");
}

#[tokio::test]
async fn a_pending_wait_marks_the_settlement_reported() {
    let f = fixture();
    let (mut settled, _listener) = f.settlements();
    let p = FakeProducer::new();
    f.jobs.start(p.spec("bash", "x", None)).expect("start");
    let mut waiting = f.jobs.wait("bash-1", 600_000.0, None, None);
    assert!(futures::poll!(&mut waiting).is_pending());
    p.complete("exit code: 3");
    let job = waiting.await.expect("settled");
    assert_eq!(
        (job.status, job.detail.as_deref(), job.reported),
        (JobStatus::Completed, Some("exit code: 3"), true)
    );
    assert!(settled.recv().await.expect("settled").reported, "listeners see it reported");
}

#[tokio::test]
async fn reads_of_terminal_jobs_mark_reported_but_never_suppress_the_notice() {
    let f = fixture();
    let (mut settled, _listener) = f.settlements();
    let p = FakeProducer::new();
    f.jobs.start(p.spec("bash", "x", None)).expect("start");
    assert!(!f.jobs.read("bash-1", None).expect("read").1.reported);
    p.complete("exit code: 0");
    assert!(!settled.recv().await.expect("settled").reported);
    assert!(f.jobs.read("bash-1", None).expect("read").1.reported);
}

#[tokio::test]
async fn jb_21a_owner_disposal_cancels_awaits_and_removes() {
    let f = fixture();
    let (mut settled, _listener) = f.settlements();
    let alice = f.agent("alice");
    let slow = FakeProducer::new();
    let throwing = FakeProducer::new();
    throwing.fail_cancel("no such process");
    let finished = FakeProducer::new();
    f.jobs.start(slow.spec("bash", "slow", Some(Arc::clone(&alice)))).expect("start");
    f.jobs.start(throwing.spec("bash", "stuck", Some(Arc::clone(&alice)))).expect("start");
    f.jobs.start(finished.spec("bash", "done", Some(Arc::clone(&alice)))).expect("start");
    let open = FakeProducer::new();
    f.jobs.start(open.spec("bash", "unowned", None)).expect("start");
    finished.complete("exit code: 0");
    assert_eq!(settled.recv().await.expect("settled").id, "bash-3");

    let agents = Arc::clone(&f.agents);
    let teardown = tokio::spawn(async move { agents.unregister("alice").await });
    // The throwing cancel is force-failed at once; the slow one keeps teardown waiting.
    let forced = settled.recv().await.expect("forced");
    assert_eq!(forced.id, "bash-2");
    assert_eq!(forced.status, JobStatus::Failed);
    assert_eq!(
        forced.detail.as_deref(),
        Some("cancel threw during teardown; work may be orphaned: no such process")
    );
    assert!(forced.reported);
    assert_eq!(slow.cancels(), [Some("owner disposed".to_owned())]);
    assert_eq!(
        f.jobs.get("bash-1", Some(&alice)).map(|j| (j.status, j.reported)),
        Ok((JobStatus::Stopping, true))
    );
    assert!(!teardown.is_finished());

    slow.settle(Ok(killed("signal: SIGTERM")));
    assert!(settled.recv().await.expect("settled").reported, "teardown suppresses the notice");
    teardown.await.expect("join").expect("was registered");
    for id in ["bash-1", "bash-2", "bash-3"] {
        assert_eq!(f.jobs.get(id, Some(&alice)), Err(JobError::UnknownJob(id.into())));
    }
    assert_eq!(
        f.jobs.get("bash-4", None).map(|j| j.status),
        Ok(JobStatus::Running),
        "other owners untouched"
    );
    assert!(open.cancels().is_empty());
}

#[tokio::test]
async fn jb_21a_service_disposal_closes_listeners_then_cancels_everything() {
    let f = fixture();
    let (mut settled, _listener) = f.settlements();
    let alice = f.agent("alice");
    let owned = FakeProducer::new();
    owned.settle_on_cancel(killed("signal: SIGTERM"));
    let open = FakeProducer::new();
    open.settle_on_cancel(killed("signal: SIGTERM"));
    f.jobs.start(owned.spec("bash", "a", Some(Arc::clone(&alice)))).expect("start");
    f.jobs.start(open.spec("bash", "b", None)).expect("start");
    f.ctx.unload("jobs").await.expect("unload");
    assert_eq!(owned.cancels(), [Some("jobs service disposed".to_owned())]);
    assert_eq!(open.cancels(), [Some("jobs service disposed".to_owned())]);
    assert!(f.jobs.list(None).is_empty());
    assert!(f.jobs.list(Some(&alice)).is_empty());
    assert!(settled.try_recv().is_err(), "no listener runs after service disposal");
    assert!(f.ctx.get(JOBS).is_none());
    // The owner's lifecycle no longer carries the registry's hook.
    f.agents.unregister("alice").await;
    assert!(owned.cancels().len() == 1);
}

#[tokio::test]
async fn config_rejects_non_positive_or_fractional_limits() {
    let ctx = Context::new();
    for (bad, shown) in [(0.0, "0"), (2.5, "2.5"), (-1.0, "-1"), (f64::INFINITY, "Infinity")] {
        assert_eq!(
            ctx.load::<JobsPlugin>(JobsConfig {
                max_concurrent_jobs_per_owner: bad,
                ..JobsConfig::default()
            })
            .map_err(|e| e.to_string()),
            Err(format!("jobs: maxConcurrentJobsPerOwner must be a positive safe integer (got {shown})"))
        );
    }
    ctx.load_default::<JobsPlugin>().expect("default loads");
}
