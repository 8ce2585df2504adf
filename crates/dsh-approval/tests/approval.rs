//! Conformance AP-01..AP-06 against the real hub.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dsh_approval::{Answer, AnswerFn, ApprovalHub, ApprovalPolicy, PolicyError, fixed_answerer};
use dsh_core::{AbortSignal, Agent, ApprovalError, ApprovalOutcome, ApprovalRequest, ApprovalService};
use serde_json::json;

fn agent_in_turn(id: &str) -> Arc<Agent> {
    let agent = Agent::new(id, None);
    agent.session().begin_turn().expect("turn");
    agent
}

fn request(agent: &Arc<Agent>, signal: Option<AbortSignal>) -> ApprovalRequest {
    ApprovalRequest {
        agent: Arc::clone(agent),
        tool_name: "echo".into(),
        call_id: Some("call-1".into()),
        reason: Some("hook says ask".into()),
        signal,
        subject: None,
    }
}

fn counting(outcome: &'static str, counter: Arc<AtomicUsize>) -> AnswerFn {
    Arc::new(move |_q| {
        counter.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Answer::Outcome(outcome.to_owned()) })
    })
}

#[tokio::test]
async fn ap_01_turn_precondition() {
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let no_turn = Agent::new("a", None);
    let err = hub.request(request(&no_turn, None)).await.expect_err("outside turn");
    assert_eq!(err, ApprovalError::OutsideTurn);
    assert!(err.to_string().starts_with("approval.request() outside an open turn: "), "{err}");
    assert!(no_turn.session().events().is_empty());
    let closed = agent_in_turn("b");
    closed.session().end_turn().expect("end");
    let err = hub.request(request(&closed, None)).await.expect_err("closed turn");
    assert!(matches!(err, ApprovalError::OutsideTurn), "{err}");
    assert_eq!(closed.session().events().len(), 2, "nothing appended");
}

#[tokio::test]
async fn ap_02_fail_closed_with_audit() {
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let agent = agent_in_turn("a");
    assert_eq!(hub.request(request(&agent, None)).await, Ok(ApprovalOutcome::Unavailable));
    let events = agent.session().events();
    assert_eq!(events[1].kind, "approval/asked");
    let id = events[1].data["id"].as_str().expect("id").to_owned();
    assert_eq!(
        events[1].data,
        json!({"id": id, "toolName": "echo", "callId": "call-1", "reason": "hook says ask"})
    );
    assert_eq!(events[2].kind, "approval/decided");
    assert_eq!(events[2].data, json!({"id": id, "outcome": "unavailable"}));

    let bare = ApprovalRequest { call_id: None, reason: None, ..request(&agent, None) };
    hub.request(bare).await.expect("ok");
    let events = agent.session().events();
    let asked = &events[3].data;
    assert_ne!(asked["id"], json!(id), "fresh id per request");
    assert_eq!(asked.as_object().map(|m| m.len()), Some(2), "optional keys absent: {asked}");
}

#[tokio::test]
async fn ap_03_cancellation() {
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let calls = Arc::new(AtomicUsize::new(0));
    let _d = hub.register_answerer(None, counting("allowed-once", Arc::clone(&calls)), false);
    let agent = agent_in_turn("a");
    let pre = AbortSignal::new();
    pre.abort_default();
    assert_eq!(hub.request(request(&agent, Some(pre))).await, Ok(ApprovalOutcome::Cancelled));
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let _slow = hub.register_answerer(
        None,
        Arc::new(|_q| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Answer::Outcome("allowed-once".into())
            })
        }),
        false,
    );
    let signal = AbortSignal::new();
    let trigger = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.abort_default();
    });
    let agent = agent_in_turn("b");
    assert_eq!(hub.request(request(&agent, Some(signal))).await, Ok(ApprovalOutcome::Cancelled));
    let decided = agent.session().events().iter().filter(|e| e.kind == "approval/decided").count();
    assert_eq!(decided, 1);
}

#[tokio::test]
async fn ap_05_never_policy() {
    let hub = ApprovalHub::new(ApprovalPolicy::Never);
    let calls = Arc::new(AtomicUsize::new(0));
    let _d = hub.register_answerer(None, counting("allowed-once", Arc::clone(&calls)), true);
    let agent = agent_in_turn("a");
    assert_eq!(hub.request(request(&agent, None)).await, Ok(ApprovalOutcome::Rejected));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // Session events outrank config both ways.
    hub.set_approval_policy(&agent, "ask").expect("switch");
    assert_eq!(hub.request(request(&agent, None)).await, Ok(ApprovalOutcome::AllowedOnce));
    let ask_hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let _d2 = ask_hub.register_answerer(None, counting("allowed-once", Arc::clone(&calls)), false);
    let other = agent_in_turn("b");
    ask_hub.set_approval_policy(&other, "never").expect("switch");
    assert_eq!(ask_hub.request(request(&other, None)).await, Ok(ApprovalOutcome::Rejected));
    let before = other.session().events().len();
    let refused = ask_hub.set_approval_policy(&other, "sometimes");
    assert_eq!(refused, Err(PolicyError::Unknown));
    assert_eq!(
        refused.map_err(|e| e.to_string()),
        Err("approval policy must be one of \"ask\" or \"never\"".to_owned())
    );
    assert_eq!(other.session().events().len(), before);
    let inbox = other.take_inbox();
    assert_eq!(inbox.len(), 1);
    assert_eq!(
        inbox[0].1.text,
        "The approval policy changed from \"ask\" to \"never\" (changed by the user)."
    );
}

#[tokio::test]
async fn answerer_waterfall_scoping_and_rogue_values() {
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let _scoped =
        hub.register_answerer(Some("other".into()), fixed_answerer(ApprovalOutcome::Rejected), false);
    let _pass = hub.register_answerer(None, Arc::new(|_q| Box::pin(async { Answer::Pass })), false);
    let _yes = hub.register_answerer(None, fixed_answerer(ApprovalOutcome::AllowedOnce), false);
    let agent = agent_in_turn("a");
    assert_eq!(hub.request(request(&agent, None)).await, Ok(ApprovalOutcome::AllowedOnce));
    let rogue = ApprovalHub::new(ApprovalPolicy::Ask);
    let _r = rogue.register_answerer(
        None,
        Arc::new(|_q| Box::pin(async { Answer::Outcome("rogue".into()) })),
        false,
    );
    assert_eq!(rogue.request(request(&agent, None)).await, Ok(ApprovalOutcome::Unavailable));
    let failing = ApprovalHub::new(ApprovalPolicy::Ask);
    let _f = failing.register_answerer(
        None,
        Arc::new(|_q| Box::pin(async { Answer::Failed("boom".into()) })),
        false,
    );
    assert_eq!(failing.request(request(&agent, None)).await, Ok(ApprovalOutcome::Unavailable));
}

#[tokio::test]
async fn ap_06_policy_contexts() {
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let agent = agent_in_turn("a");
    assert_eq!(
        hub.context_text(agent.session()),
        "Approval policy: ask. Operations that require approval may ask through the configured answerers; without an available answerer, the request fails closed."
    );
    hub.set_approval_policy(&agent, "never").expect("switch");
    assert_eq!(
        hub.context_text(agent.session()),
        "Approval prompts are disabled in this session: actions that require approval are rejected automatically — do not request sandbox escalation (do not set `sandbox_permissions`)."
    );
}

#[tokio::test]
async fn can_answer_reports_when_no_answer_can_come() {
    let a = Agent::new("a", None);
    let b = Agent::new("b", None);
    // Not declared exhaustive: an answerer may still arrive.
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    assert!(hub.can_answer(Some(&a)) && hub.can_answer(None));
    // Declared exhaustive: only calls some registered answerer serves.
    hub.answerers_are_exhaustive();
    assert!(!hub.can_answer(Some(&a)) && !hub.can_answer(None));
    let scoped = hub.register_answerer(Some("a".into()), fixed_answerer(ApprovalOutcome::AllowedOnce), true);
    assert!(hub.can_answer(Some(&a)));
    assert!(!hub.can_answer(Some(&b)), "an answerer scoped to another agent does not serve b");
    assert!(!hub.can_answer(None), "nor a call without an agent");
    scoped.dispose().await;
    assert!(!hub.can_answer(Some(&a)), "a withdrawn answerer no longer counts");
    let _unscoped = hub.register_answerer(None, fixed_answerer(ApprovalOutcome::AllowedOnce), false);
    assert!(hub.can_answer(Some(&a)) && hub.can_answer(Some(&b)) && hub.can_answer(None));
    // The session's `never` policy outranks every answerer.
    b.session().append("approval/policy", json!({"policy": "never"})).expect("event");
    assert!(!hub.can_answer(Some(&b)));
    assert!(hub.can_answer(Some(&a)));
    // A configured `never` policy, with or without answerers.
    let never = ApprovalHub::new(ApprovalPolicy::Never);
    let _any = never.register_answerer(None, fixed_answerer(ApprovalOutcome::AllowedOnce), false);
    assert!(!never.can_answer(Some(&a)) && !never.can_answer(None));
    // The session switching back to `ask` makes it answerable again.
    a.session().append("approval/policy", json!({"policy": "ask"})).expect("event");
    assert!(never.can_answer(Some(&a)));
}

#[tokio::test]
async fn a_panicking_answerer_is_a_failed_answer_and_the_decision_is_recorded() {
    let panics_when_asked: AnswerFn = Arc::new(|_q| panic!("answerer bug"));
    let panics_when_polled: AnswerFn = Arc::new(|_q| Box::pin(async { panic!("answerer bug") }));
    for answerer in [panics_when_asked, panics_when_polled] {
        let hub = ApprovalHub::new(ApprovalPolicy::Ask);
        let _first = hub.register_answerer(None, answerer, false);
        let later = Arc::new(AtomicUsize::new(0));
        let _second = hub.register_answerer(None, counting("allowed-once", Arc::clone(&later)), false);
        let agent = agent_in_turn("a");
        assert_eq!(hub.request(request(&agent, None)).await, Ok(ApprovalOutcome::Unavailable));
        assert_eq!(later.load(Ordering::SeqCst), 0, "a failure ends the waterfall, like Answer::Failed");
        let kinds: Vec<String> = agent.session().events().iter().map(|e| e.kind.clone()).collect();
        assert_eq!(kinds, ["turn/start", "approval/asked", "approval/decided"]);
        assert_eq!(agent.session().events()[2].data["outcome"], json!("unavailable"));
    }
}

#[tokio::test]
async fn a_failing_audit_append_is_an_audit_error() {
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let agent = agent_in_turn("a");
    agent.session().add_sink(Arc::new(|_header, event| {
        if event.kind == "approval/asked" {
            return Err(dsh_core::SessionError::log_io("/logs/a.jsonl", std::io::Error::other("disk full")));
        }
        Ok(())
    }));
    let err = hub.request(request(&agent, None)).await.expect_err("audit refused");
    assert!(
        matches!(&err, ApprovalError::Audit(dsh_core::SessionError::LogIo { path, .. }) if path.as_os_str() == "/logs/a.jsonl"),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "session log /logs/a.jsonl: disk full");
    let kinds: Vec<String> = agent.session().events().iter().map(|e| e.kind.clone()).collect();
    assert_eq!(kinds, ["turn/start"], "nothing recorded");
}
