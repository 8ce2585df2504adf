//! Secret-input questions (askpass) through the hub: the same waterfall, policy and audit
//! events as consent, with `kind: "secret"` and the command's prompt recorded and the answer
//! recorded nowhere.

use std::sync::Arc;

use dsh_approval::{Answer, ApprovalHub, ApprovalPolicy, fixed_answerer, secret_file_answerer};
use dsh_core::{Agent, ApprovalOutcome, ApprovalService, Secret, SecretReply, SecretRequest};
use serde_json::json;

const SECRET: &str = "s3cret-of-the-user";

fn agent_in_turn(id: &str) -> Arc<Agent> {
    let agent = Agent::new(id, None);
    agent.session().begin_turn().expect("turn");
    agent
}

fn secret_request(agent: &Arc<Agent>) -> SecretRequest {
    SecretRequest {
        agent: Arc::clone(agent),
        tool_name: "bash".into(),
        call_id: Some("call-1".into()),
        prompt: "Password: ".into(),
        signal: None,
    }
}

#[tokio::test]
async fn a_secret_is_given_and_only_the_question_is_audited() {
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let _consent = hub.register_answerer(None, fixed_answerer(ApprovalOutcome::AllowedOnce), false);
    let _secret = hub.register_answerer(
        None,
        Arc::new(|q: dsh_approval::ApprovalQuestion| {
            Box::pin(async move {
                assert_eq!(q.secret_prompt.as_deref(), Some("Password: "));
                Answer::Secret(Secret::new(SECRET.as_bytes()))
            })
        }),
        false,
    );
    let agent = agent_in_turn("a");
    let reply = hub.request_secret(secret_request(&agent)).await;
    assert_eq!(reply, Ok(SecretReply::Given(Secret::new(SECRET.as_bytes()))), "the consent answerer passed");
    let events = agent.session().events();
    let id = events[1].data["id"].as_str().expect("id").to_owned();
    assert_eq!(
        events[1].data,
        json!({"id": id, "toolName": "bash", "callId": "call-1", "kind": "secret", "prompt": "Password: "})
    );
    assert_eq!(events[2].data, json!({"id": id, "outcome": "allowed-once"}));
    assert!(!format!("{events:?}").contains(SECRET), "the answer is in no event");
    assert!(!format!("{reply:?}").contains(SECRET), "nor in a debug rendering");
}

#[tokio::test]
async fn consent_is_no_secret_and_a_secret_is_no_consent() {
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let _consent_only = hub.register_answerer(
        None,
        Arc::new(|_q| Box::pin(async { Answer::Outcome("allowed-once".into()) })),
        false,
    );
    let agent = agent_in_turn("a");
    assert_eq!(
        hub.request_secret(secret_request(&agent)).await,
        Ok(SecretReply::Refused(ApprovalOutcome::Unavailable))
    );
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    let _secret_only = hub.register_answerer(
        None,
        Arc::new(|_q| Box::pin(async { Answer::Secret(Secret::new(b"x".as_slice())) })),
        false,
    );
    let consent = dsh_core::ApprovalRequest {
        agent: Arc::clone(&agent),
        tool_name: "bash".into(),
        call_id: None,
        reason: None,
        signal: None,
        subject: None,
    };
    assert_eq!(hub.request(consent).await, Ok(ApprovalOutcome::Unavailable));
}

#[tokio::test]
async fn policy_never_and_refusals_give_no_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("answer");
    std::fs::write(&file, format!("{SECRET}\r\n")).expect("write");
    let never = ApprovalHub::new(ApprovalPolicy::Never);
    let _file = never.register_answerer(None, secret_file_answerer(file.clone()), false);
    let agent = agent_in_turn("a");
    assert_eq!(
        never.request_secret(secret_request(&agent)).await,
        Ok(SecretReply::Refused(ApprovalOutcome::Rejected))
    );
    let ask = ApprovalHub::new(ApprovalPolicy::Ask);
    let _file = ask.register_answerer(None, secret_file_answerer(file.clone()), false);
    assert_eq!(
        ask.request_secret(secret_request(&agent)).await,
        Ok(SecretReply::Given(Secret::new(SECRET.as_bytes()))),
        "the file's content without its line ending"
    );
    std::fs::remove_file(&file).expect("remove");
    // An unreadable file fails the answer, and the program is told why.
    match ask.request_secret(secret_request(&agent)).await {
        Ok(SecretReply::Unanswerable(why)) => {
            assert!(why.starts_with("cannot read the askpass answer file: "), "{why}")
        }
        other => panic!("an unreadable file fails the answer: {other:?}"),
    }
    let rejecting = ApprovalHub::new(ApprovalPolicy::Ask);
    let _no = rejecting.register_answerer(
        None,
        Arc::new(|_q| Box::pin(async { Answer::Outcome("rejected".into()) })),
        false,
    );
    assert_eq!(
        rejecting.request_secret(secret_request(&agent)).await,
        Ok(SecretReply::Refused(ApprovalOutcome::Rejected))
    );
}

#[tokio::test]
async fn a_secret_answerer_is_no_channel_for_consent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hub = ApprovalHub::new(ApprovalPolicy::Ask);
    hub.answerers_are_exhaustive();
    let agent = agent_in_turn("a");
    let _file = hub.register_secret_answerer(None, secret_file_answerer(dir.path().join("answer")), false);
    assert!(!hub.can_answer(Some(&agent)), "nobody can allow a call");
    let _consent = hub.register_answerer(None, fixed_answerer(ApprovalOutcome::Rejected), false);
    assert!(hub.can_answer(Some(&agent)));
}
