//! The tool pipeline with a fake tool: validation, policy, approval routing,
//! abort before and during dispatch, unknown tools, output validation, post-execute.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dsh_core::plugins::ToolsPlugin;
use dsh_core::{
    APPROVAL, AbortSignal, Agent, ApprovalOutcome, ApprovalRequest, ApprovalService, ContentBlock, Context,
    Decision, ErrorInfo, PostDecision, Schema, TOOLS, ToolExec, ToolParams, ToolRegistry,
};
use dsh_test_support::fakes::Echo;
use serde_json::json;

fn setup() -> (Context, Arc<ToolRegistry>, Arc<AtomicUsize>) {
    let ctx = Context::new();
    ctx.load_default::<ToolsPlugin>().expect("tools");
    let tools = ctx.get(TOOLS).expect("registry");
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = Echo::with_flags(Arc::clone(&runs));
    let _keep = tools.register(Arc::new(tool)).expect("register");
    (ctx, tools, runs)
}

fn exec() -> ToolExec {
    ToolExec::new(None, "call-1")
}

#[tokio::test]
async fn tf_01_validation_message_and_info() {
    let (_ctx, tools, runs) = setup();
    let r = tools.call("echo", json!({"text": 1, "extra": true}), exec()).await;
    assert!(r.is_error);
    assert_eq!(r.text(), "Error: invalid arguments: \"text\" must be a string");
    assert_eq!(r.error.and_then(|e| e.info), Some(ErrorInfo::new("ToolArgsError", "INVALID_ARGS")));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let ok = tools.call("echo", json!({"text": "hi", "extra": true}), exec()).await;
    assert!(!ok.is_error);
    assert_eq!(ok.text(), "hi");
    assert_eq!(ok.value.map(|v| v.to_string()), Some(r#"{"text":"hi","n":1}"#.to_owned()));
}

#[tokio::test]
async fn tf_03b_aborted_before_dispatch_runs_no_policy() {
    let (_ctx, tools, runs) = setup();
    let seen = Arc::new(AtomicUsize::new(0));
    let seen2 = Arc::clone(&seen);
    let _l = tools.on_pre_execute(
        Arc::new(move |_c| {
            seen2.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(None) })
        }),
        false,
    );
    let signal = AbortSignal::new();
    signal.abort_default();
    let r = tools.call("echo", json!({"text": "x"}), exec().with_signal(signal)).await;
    assert_eq!(r.text(), "Error: tool call aborted before dispatch");
    let e = r.error.expect("error");
    assert_eq!(e.info, Some(ErrorInfo::new("AbortError", "ABORTED_BEFORE_DISPATCH")));
    assert_eq!((seen.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (0, 0));
}

#[tokio::test]
async fn tf_04_unknown_tool_and_deny() {
    let (_ctx, tools, runs) = setup();
    let seen = Arc::new(AtomicUsize::new(0));
    let seen2 = Arc::clone(&seen);
    let _l = tools.on_pre_execute(
        Arc::new(move |call| {
            seen2.fetch_add(1, Ordering::SeqCst);
            let deny = call.name == "echo";
            Box::pin(async move { Ok(deny.then(|| Decision::Deny { reason: "blocked by policy".into() })) })
        }),
        false,
    );
    let post_seen = Arc::new(AtomicUsize::new(0));
    let post2 = Arc::clone(&post_seen);
    let _p = tools.on_post_execute(
        Arc::new(move |_c, r| {
            if r.is_error {
                post2.fetch_add(1, Ordering::SeqCst);
            }
            Ok(PostDecision::Accept { content: None, value: None })
        }),
        false,
    );
    let r = tools.call("nope", json!({}), exec()).await;
    assert_eq!(r.text(), "Error: unknown tool \"nope\"");
    assert_eq!(r.error.and_then(|e| e.info).map(|i| i.code), Some("UNKNOWN_TOOL".to_owned()));
    let r = tools.call("echo", json!({"text": "x"}), exec()).await;
    assert_eq!(r.text(), "Error: blocked by policy");
    assert_eq!(r.error.and_then(|e| e.info), None);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(seen.load(Ordering::SeqCst), 2, "listeners see unknown tools too");
    assert_eq!(post_seen.load(Ordering::SeqCst), 2, "denials flow through post-execute");
}

struct FixedApproval(ApprovalOutcome);

#[async_trait::async_trait]
impl ApprovalService for FixedApproval {
    async fn request(&self, _request: ApprovalRequest) -> Result<ApprovalOutcome, dsh_core::ApprovalError> {
        Ok(self.0)
    }
}

#[tokio::test]
async fn tf_05_ask_routing() {
    let ask = |reason: Option<&'static str>| -> dsh_core::tools::PreExecuteListener {
        Arc::new(move |_c| {
            Box::pin(async move { Ok(Some(Decision::Ask { reason: reason.map(str::to_owned) })) })
        })
    };
    let (_ctx, tools, _runs) = setup();
    let d = tools.on_pre_execute(ask(None), false);
    let r = tools.call("echo", json!({"text": "x"}), exec()).await;
    assert_eq!(r.text(), "Error: tool \"echo\" requires approval (not yet supported)");
    d.dispose().await;
    let d = tools.on_pre_execute(ask(Some("needs review")), false);
    assert_eq!(tools.call("echo", json!({"text": "x"}), exec()).await.text(), "Error: needs review");
    d.dispose().await;

    for (outcome, expected) in [
        (ApprovalOutcome::Rejected, "Error: the user rejected tool \"echo\""),
        (ApprovalOutcome::Cancelled, "Error: approval for tool \"echo\" was cancelled"),
        (
            ApprovalOutcome::Unavailable,
            "Error: tool \"echo\" requires approval, but no approval channel is available",
        ),
        (ApprovalOutcome::AllowedOnce, "x"),
    ] {
        let (ctx, tools, _runs) = setup();
        let service: Arc<dyn ApprovalService> = Arc::new(FixedApproval(outcome));
        ctx.provide(APPROVAL, service).expect("approval");
        let _d = tools.on_pre_execute(ask(None), false);
        let agentless = tools.call("echo", json!({"text": "x"}), exec()).await;
        assert_eq!(
            agentless.text(),
            "Error: tool \"echo\" requires approval, but the call has no agent to route it through"
        );
        let agent = Agent::new("a", None);
        let r = tools.call("echo", json!({"text": "x"}), ToolExec::new(Some(agent), "c")).await;
        assert_eq!(r.text(), expected);
    }
}

#[tokio::test]
async fn tf_07_abort_mid_run_and_success_after_abort() {
    let (_ctx, tools, _runs) = setup();
    let signal = AbortSignal::new();
    let trigger = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.abort_default();
    });
    let r = tools.call("echo", json!({"text": "x", "sleep": true}), exec().with_signal(signal)).await;
    assert_eq!(r.text(), "Error: tool call aborted");
    assert_eq!(r.error.and_then(|e| e.info), Some(ErrorInfo::new("AbortError", "ABORTED")));

    let signal = AbortSignal::new();
    let trigger = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        trigger.abort_default();
    });
    let r = tools.call("echo", json!({"text": "x", "succeed_late": true}), exec().with_signal(signal)).await;
    assert_eq!(r.text(), "Error: tool call aborted", "a success after abort is replaced");
}

#[tokio::test]
async fn invalid_output_and_post_execute_block() {
    let (_ctx, tools, _runs) = setup();
    let r = tools.call("echo", json!({"text": "x", "bad": true}), exec()).await;
    assert_eq!(r.text(), "Error: tool \"echo\" returned invalid output: \"output.text\" must be a string");
    assert_eq!(r.error.and_then(|e| e.info).map(|i| i.code), Some("INVALID_TOOL_OUTPUT".to_owned()));
    let _p = tools.on_post_execute(
        Arc::new(|_c, _r| {
            Ok(PostDecision::Block { feedback: vec![ContentBlock::text("no"), ContentBlock::text("way")] })
        }),
        false,
    );
    let r = tools.call("echo", json!({"text": "x"}), exec()).await;
    assert!(r.is_error);
    assert_eq!(r.content, vec![ContentBlock::text("no"), ContentBlock::text("way")]);
    assert_eq!(r.error.map(|e| e.message), Some("no\nway".to_owned()));
}

#[tokio::test]
async fn schemas_and_registration_rules() {
    let (_ctx, tools, _runs) = setup();
    let schemas = tools.schemas();
    assert_eq!(schemas.len(), 1);
    assert_eq!(schemas[0].parameters["required"], json!(["text"]));
    assert!(schemas[0].parameters.get("additionalProperties").is_none());
    let dup = Echo::with_schemas(ToolParams::new(), Schema::any());
    assert_eq!(
        tools.register(Arc::new(dup)).err().map(|e| e.to_string()),
        Some("tool \"echo\" is already registered".into())
    );
}
