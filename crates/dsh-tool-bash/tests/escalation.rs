//! Sandbox escalation at the tool level (SB-02, SB-03, SB-04, SB-06) with a recording
//! sandboxing fake, the real policy service, and a fake approval service.

mod common;

use std::sync::Arc;

use common::{FakeApproval, FakeExecutor, Harness, text};
use dsh_core::{ApprovalError, ApprovalOutcome};
use dsh_sandbox::SandboxMode;
use serde_json::{Value, json};

const WHY: &str = "the command needs workspace writes";

fn escalate(mode: &str) -> Value {
    json!({"command": "touch x", "description": "d", "sandbox_permissions": mode, "justification": WHY})
}

async fn error_text(h: &Harness, agent: Option<&Arc<dsh_core::Agent>>, args: Value) -> String {
    let r = match agent {
        Some(agent) => h.call_as(agent, args).await,
        None => h.call(args).await,
    };
    assert!(r.is_error, "expected an error, got {}", text(&r));
    assert_eq!(r.error.as_ref().and_then(|e| e.info.clone()), None, "escalation errors are plain");
    text(&r)
}

#[tokio::test]
async fn sb_02_pairing_and_availability() {
    let fake = FakeExecutor::sandboxing();
    let h = Harness::with(fake.clone());
    let base = || json!({"command": "true", "description": "d"});
    let with = |pairs: &[(&str, Value)]| {
        let mut v = base();
        for (k, val) in pairs {
            v[*k] = val.clone();
        }
        v
    };
    assert_eq!(
        error_text(&h, None, with(&[("sandbox_permissions", json!("workspace-write"))])).await,
        "Error: invalid escalation: sandbox_permissions requires a justification"
    );
    assert_eq!(
        error_text(&h, None, with(&[("justification", json!("why"))])).await,
        "Error: invalid escalation: justification is only valid together with sandbox_permissions"
    );
    assert_eq!(
        error_text(
            &h,
            None,
            with(&[("sandbox_permissions", json!("workspace-write")), ("justification", json!(" "))])
        )
        .await,
        "Error: invalid justification: expected a non-empty sentence"
    );
    let r = h.call(with(&[("sandbox_permissions", json!("root")), ("justification", json!("x"))])).await;
    assert_eq!(
        text(&r),
        "Error: invalid arguments: \"sandbox_permissions\" must be one of [\"workspace-write\",\"danger-full-access\"]"
    );
    assert_eq!(fake.executed(), 0);

    // S-LOCAL: the unadvertised fields still reach the body and are refused there.
    let local = FakeExecutor::local();
    let h = Harness::with(local.clone());
    assert_eq!(
        error_text(&h, None, escalate("workspace-write")).await,
        "Error: sandbox_permissions is not available in this composition (no sandboxing executor to escalate)"
    );
    assert_eq!(
        error_text(&h, None, with(&[("sandbox_permissions", json!("workspace-write"))])).await,
        "Error: invalid escalation: sandbox_permissions requires a justification"
    );
    assert_eq!(
        error_text(&h, None, with(&[("justification", json!("why"))])).await,
        "Error: invalid escalation: justification is only valid together with sandbox_permissions"
    );
    assert_eq!(local.executed(), 0);
}

#[tokio::test]
async fn sb_03_non_widening_never_prompts() {
    let fake = FakeExecutor::sandboxing();
    let h = Harness::with(fake.clone());
    let approval = FakeApproval::answering(ApprovalOutcome::AllowedOnce);
    h.approve_with(approval.clone());

    let ww = h.agent("ww", None);
    ww.session().append("sandbox/mode", json!({"mode": "workspace-write"})).expect("event");
    assert_eq!(
        error_text(&h, Some(&ww), escalate("workspace-write")).await,
        "Error: sandbox escalation to \"workspace-write\" is not strictly wider than this call's current \"workspace-write\" mode"
    );

    let odd = h.agent("odd", None);
    odd.session().append("sandbox/mode", json!({"mode": "unknown-mode"})).expect("event");
    assert_eq!(
        error_text(&h, Some(&odd), escalate("workspace-write")).await,
        "Error: sandbox escalation to \"workspace-write\" is not strictly wider than this call's current \"unknown-mode\" mode"
    );

    let dfa = h.agent("dfa", None);
    dfa.session().append("sandbox/mode", json!({"mode": "danger-full-access"})).expect("event");
    assert_eq!(
        error_text(&h, Some(&dfa), escalate("danger-full-access")).await,
        "Error: sandbox escalation to \"danger-full-access\" is not strictly wider than this call's current \"danger-full-access\" mode"
    );
    assert_eq!(approval.asked(), 0, "nobody is prompted");
    assert_eq!(fake.executed(), 0, "nothing executed");
}

#[tokio::test]
async fn sb_04_routing_failures_and_refusals() {
    // No approval service composed.
    let fake = FakeExecutor::sandboxing();
    let h = Harness::with(fake.clone());
    let agent = h.agent("a", None);
    assert_eq!(
        error_text(&h, Some(&agent), escalate("workspace-write")).await,
        "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval service is composed"
    );

    // With approval: agent-less, then each refusal.
    let approval = FakeApproval::answering(ApprovalOutcome::Unavailable);
    h.approve_with(approval.clone());
    assert_eq!(
        error_text(&h, None, escalate("workspace-write")).await,
        "Error: sandbox escalation to \"workspace-write\" requires approval, but the call has no agent to route it through"
    );
    assert_eq!(approval.asked(), 0);
    let cases = [
        (
            ApprovalOutcome::Unavailable,
            "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available",
        ),
        (
            ApprovalOutcome::Rejected,
            "Error: the user rejected escalating this command to \"workspace-write\"",
        ),
        (ApprovalOutcome::Cancelled, "Error: approval for escalating to \"workspace-write\" was cancelled"),
    ];
    for (outcome, expected) in cases {
        *approval.outcome.lock() = Ok(outcome);
        assert_eq!(error_text(&h, Some(&agent), escalate("workspace-write")).await, expected);
    }
    // The request the approver saw.
    let last = approval.requests.lock().last().cloned().expect("asked");
    assert_eq!(last.tool_name, "bash");
    assert_eq!(last.call_id.as_deref(), Some("call-1"));
    assert_eq!(
        last.reason.as_deref(),
        Some("escalate sandbox to workspace-write: the command needs workspace writes")
    );
    assert!(Arc::ptr_eq(&last.agent, &agent));
    assert!(last.signal.is_some());
    // What the user is shown, as typed fields.
    let subject = last.subject.expect("an escalation names its command");
    assert_eq!(subject.command, "touch x");
    assert_eq!(subject.asked, dsh_core::ApprovalAsk::Mode("workspace-write".into()));
    assert_eq!(subject.justification.as_deref(), Some(WHY));
    assert!(!subject.cwd.is_empty());
    assert_eq!(subject.notes, Vec::<String>::new(), "no shell state carries without persist");

    // An approval service error (e.g. outside an open turn) is the tool error.
    *approval.outcome.lock() =
        Err(ApprovalError::Provider("approval.request() outside an open turn: …".into()));
    assert_eq!(
        error_text(&h, Some(&agent), escalate("workspace-write")).await,
        "Error: approval.request() outside an open turn: …"
    );
    assert_eq!(fake.executed(), 0, "the executor recorded no runs or starts");
}

#[tokio::test]
async fn sb_04_never_policy_with_the_real_approval_service() {
    use dsh_approval::{ApprovalConfig, ApprovalPlugin};
    let fake = FakeExecutor::sandboxing();
    let h = Harness::with(fake.clone());
    h.ctx
        .load::<ApprovalPlugin>(
            serde_json::from_value::<ApprovalConfig>(json!({"policy": "never"})).expect("config"),
        )
        .expect("approval");
    let agent = h.agent("a", None);
    assert_eq!(
        error_text(&h, Some(&agent), escalate("workspace-write")).await,
        "Error: the user rejected escalating this command to \"workspace-write\""
    );
    // Outside an open turn the approval seam refuses and nothing runs.
    agent.session().end_turn().expect("end");
    let message = error_text(&h, Some(&agent), escalate("workspace-write")).await;
    assert!(message.contains("outside an open turn"), "{message}");
    assert_eq!(fake.executed(), 0);
}

#[tokio::test]
async fn sb_06_session_override_baseline_and_one_shot_grant() {
    let fake = FakeExecutor::sandboxing();
    let h = Harness::with(fake.clone());
    let approval = FakeApproval::answering(ApprovalOutcome::AllowedOnce);
    h.approve_with(approval.clone());
    let agent = h.agent("s", None);
    agent.session().append("sandbox/mode", json!({"mode": "workspace-write"})).expect("event");

    let plain = json!({"command": "true", "description": "d"});
    assert!(!h.call_as(&agent, plain.clone()).await.is_error);
    let granted = h.call_as(&agent, escalate("danger-full-access")).await;
    assert!(!granted.is_error, "{}", text(&granted));
    assert_eq!(granted.value.expect("value")["sandbox"]["mode"], json!("danger-full-access"));
    // The grant applied to that call only.
    assert!(!h.call_as(&agent, plain).await.is_error);
    assert_eq!(
        fake.run_modes(),
        [SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess, SandboxMode::WorkspaceWrite]
    );
    assert_eq!(approval.asked(), 1);
    let policy = fake.runs.lock()[1].sandbox_policy.clone().expect("policy");
    assert_eq!(policy.session_id.as_deref(), Some("s"), "root and session retained");
    // Agent-less calls carry no session override: the executor default.
    assert!(!h.call(json!({"command": "true", "description": "d"})).await.is_error);
    assert_eq!(fake.run_modes().last(), Some(&SandboxMode::ReadOnly));
}
