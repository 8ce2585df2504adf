//! Presenters through the registry (PR-02, PR-03) and the structured-exit improvement.

mod common;

use common::{FakeExecutor, Harness, result};
use dsh_core::{ContentBlock, ToolError, ToolResult};
use dsh_shell::ShellTimeout;
use serde_json::{Value, json};

fn harness() -> Harness {
    Harness::with(FakeExecutor::local())
}

fn text_result(text: &str) -> ToolResult {
    ToolResult { is_error: false, value: None, content: vec![ContentBlock::text(text)], error: None }
}

#[test]
fn pr_02_present_call() {
    let h = harness();
    let call = |args: Value| h.tools.present_call("bash", &args);
    assert_eq!(
        call(json!({"command": "ls -la src", "description": "List files in src"})),
        Some(json!({"card": "terminal", "title": "ls -la src", "description": "List files in src"}))
    );
    assert_eq!(
        call(json!({"command": "pwd", "description": "Print dir", "workdir": "/tmp/x"})),
        Some(json!({"card": "terminal", "title": "pwd", "description": "Print dir", "cwd": "/tmp/x"}))
    );
    assert_eq!(
        call(json!({"command": "pwd", "description": "Print dir", "workdir": "sub"})),
        Some(json!({"card": "terminal", "title": "pwd", "description": "Print dir", "cwd": "sub"}))
    );
    assert_eq!(
        call(json!({"command": "sleep 100", "description": "wait", "run_in_background": true})),
        Some(json!({
            "card": "generic", "title": "sleep 100", "kind": "execute", "rawInput": "sleep 100",
            "content": [{"type": "text", "text": "wait"}]
        }))
    );
    assert_eq!(call(json!({"command": "ls"})), None);
    assert_eq!(call(json!({"command": 5, "description": "d"})), None);
}

#[test]
fn pr_03_present_result_from_text() {
    let h = harness();
    let args = json!({"command": "x", "description": "x"});
    let present = |r: &ToolResult| h.tools.present_result("bash", &args, r);
    assert_eq!(
        present(&text_result("hi\n\n")),
        Some(json!({"card": "terminal", "output": "hi\n\n", "exitCode": 0}))
    );
    assert_eq!(
        present(&text_result("oops\n[exit code: 3]")),
        Some(json!({"card": "terminal", "output": "oops", "exitCode": 3}))
    );
    assert_eq!(
        present(&text_result("gone\n[killed by signal: SIGKILL]")),
        Some(json!({"card": "terminal", "output": "gone", "signal": "SIGKILL"}))
    );
    assert_eq!(
        present(&text_result("slow\n[timed out after 100ms]\n[exit code: 143]")),
        Some(json!({"card": "terminal", "output": "slow\n[timed out after 100ms]", "exitCode": 143}))
    );
    assert_eq!(
        present(&text_result("[exit code: 5]")),
        Some(json!({"card": "terminal", "output": "[exit code: 5]", "exitCode": 0}))
    );
    let mut aborted = ToolResult::failure(ToolError::aborted());
    aborted.content = vec![ContentBlock::text("tool call aborted")];
    assert_eq!(
        present(&aborted),
        Some(
            json!({"card": "generic", "content": [{"type": "text", "text": "```console\ntool call aborted\n```"}]})
        )
    );
    // A pipeline failure's own content, trailing newlines removed.
    let mut failure = ToolResult::failure(ToolError::plain("spawn bash ENOENT"));
    failure.content = vec![ContentBlock::text("Error: spawn bash ENOENT\n\n")];
    assert_eq!(
        present(&failure),
        Some(
            json!({"card": "generic", "content": [{"type": "text", "text": "```console\nError: spawn bash ENOENT\n```"}]})
        )
    );
    let bg = json!({"command": "x", "description": "x", "run_in_background": true});
    assert_eq!(
        h.tools.present_result("bash", &bg, &text_result("started background job bash-1")),
        Some(
            json!({"card": "generic", "content": [{"type": "text", "text": "```console\nstarted background job bash-1\n```"}]})
        )
    );
    let mut empty = text_result("");
    empty.content.clear();
    assert_eq!(present(&empty), None);
    let mut two = text_result("a");
    two.content.push(ContentBlock::text("b"));
    assert_eq!(present(&two), None);
    // Invalid args: none, never a throw.
    assert_eq!(h.tools.present_result("bash", &json!({"command": "x"}), &text_result("hi")), None);
}

#[tokio::test]
async fn present_result_uses_the_structured_exit_status() {
    let fake = FakeExecutor::local();
    // A real exit 0 whose stdout's last line looks like a marker.
    fake.push_result(Ok(result("build log\n[exit code: 3]", "", Some(0), None)));
    fake.push_result(Ok(result("oops", "", Some(3), None)));
    fake.push_result(Ok(result("gone", "", None, Some("SIGKILL"))));
    let mut timed = result("slow", "", Some(143), None);
    timed.timed_out = true;
    timed.timeout = ShellTimeout::from_millis(100.0);
    fake.push_result(Ok(timed));
    let h = Harness::with(fake);
    let args = json!({"command": "x", "description": "x"});

    let r = h.call(args.clone()).await;
    assert_eq!(r.text(), "build log\n[exit code: 3]");
    assert_eq!(
        h.tools.present_result("bash", &args, &r),
        Some(json!({"card": "terminal", "output": "build log\n[exit code: 3]", "exitCode": 0})),
        "structured path: real exit 0, the line stays in the body"
    );
    // The same text replayed without its value keeps the reference's known residual.
    assert_eq!(
        h.tools.present_result("bash", &args, &text_result(&r.text())),
        Some(json!({"card": "terminal", "output": "build log", "exitCode": 3}))
    );

    let r = h.call(args.clone()).await;
    assert_eq!(
        h.tools.present_result("bash", &args, &r),
        Some(json!({"card": "terminal", "output": "oops", "exitCode": 3}))
    );
    let r = h.call(args.clone()).await;
    assert_eq!(
        h.tools.present_result("bash", &args, &r),
        Some(json!({"card": "terminal", "output": "gone", "signal": "SIGKILL"}))
    );
    let r = h.call(args.clone()).await;
    assert_eq!(
        h.tools.present_result("bash", &args, &r),
        Some(json!({"card": "terminal", "output": "slow\n[timed out after 100ms]", "exitCode": 143}))
    );
}

#[tokio::test]
async fn pr_01_round_trip_through_render_and_present() {
    for (res, expected) in [
        (result("out", "", Some(0), None), json!({"exitCode": 0})),
        (result("out", "", Some(7), None), json!({"exitCode": 7})),
        (result("out", "", None, Some("SIGTERM")), json!({"signal": "SIGTERM"})),
        (
            {
                let mut r = result("out", "", Some(0), None);
                r.timed_out = true;
                r
            },
            json!({"exitCode": 0}),
        ),
    ] {
        let fake = FakeExecutor::local();
        fake.push_result(Ok(res));
        let h = Harness::with(fake);
        let args = json!({"command": "x", "description": "x"});
        let r = h.call(args.clone()).await;
        // Both the structured and the text-only path agree on these.
        for replay in [r.clone(), text_result(&r.text())] {
            let card = h.tools.present_result("bash", &args, &replay).expect("card");
            let output = card["output"].as_str().expect("output");
            assert!(!output.contains("[exit code:") && !output.contains("[killed by signal: "), "{output}");
            for (k, v) in expected.as_object().expect("object") {
                assert_eq!(&card[k], v);
            }
        }
    }
}
