//! The execute algorithm over a recording fake executor: value checks, request building,
//! workdir, managed env, foreground outcomes and rendering.

mod common;

use std::path::PathBuf;

use common::{FakeExecutor, Harness, result, text};
use dsh_core::{AbortSignal, ErrorInfo, ToolExec};
use dsh_sandbox::{SandboxEnforcement, SandboxMode, SandboxUnavailableError};
use dsh_shell::{CollectedOutput, ShellError, ShellSandboxInfo, ShellTimeout};
use serde_json::json;

#[tokio::test]
async fn bf_13_value_level_validation_runs_nothing() {
    let fake = FakeExecutor::local();
    let h = Harness::with(fake.clone());
    let cases = [
        (json!({"command": "  ", "description": "d"}), "Error: invalid command: expected a non-empty string"),
        (
            json!({"command": "x", "description": "   "}),
            "Error: invalid description: expected a non-empty string",
        ),
        (
            json!({"command": "x", "description": "d", "timeoutMs": -1}),
            "Error: invalid timeoutMs: expected a positive number, got -1",
        ),
        (
            json!({"command": "x", "description": "d", "timeoutMs": 0}),
            "Error: invalid timeoutMs: expected a positive number, got 0",
        ),
    ];
    for (args, expected) in cases {
        let r = h.call(args).await;
        assert!(r.is_error);
        assert_eq!(text(&r), expected);
        assert_eq!(r.error.as_ref().and_then(|e| e.info.clone()), None, "plain errors carry no info");
    }
    assert!(fake.resolves.lock().is_empty());
    assert_eq!(fake.executed(), 0);
}

#[tokio::test]
async fn tf_02_schema_stage_violations_run_nothing() {
    let fake = FakeExecutor::local();
    let h = Harness::with(fake.clone());
    let cases = [
        (
            json!({}),
            "Error: invalid arguments: missing required property \"command\"; missing required property \"description\"",
        ),
        (
            json!({"command": 42, "description": "d"}),
            "Error: invalid arguments: \"command\" must be a string",
        ),
        (json!({"command": "x"}), "Error: invalid arguments: missing required property \"description\""),
        (
            json!({"command": "x", "description": 7}),
            "Error: invalid arguments: \"description\" must be a string",
        ),
        (
            json!({"command": "x", "description": "d", "timeoutMs": "soon"}),
            "Error: invalid arguments: \"timeoutMs\" must be a number",
        ),
        (
            json!({"command": "x", "description": "d", "workdir": 7}),
            "Error: invalid arguments: \"workdir\" must be a string",
        ),
        (
            json!({"command": "x", "description": "d", "run_in_background": "yes"}),
            "Error: invalid arguments: \"run_in_background\" must be a boolean",
        ),
        (
            json!({"command": null, "description": "d"}),
            "Error: invalid arguments: \"command\" must be a string",
        ),
    ];
    for (args, expected) in cases {
        let r = h.call(args).await;
        assert_eq!(text(&r), expected);
        assert_eq!(r.error.and_then(|e| e.info), Some(ErrorInfo::new("ToolArgsError", "INVALID_ARGS")));
    }
    assert_eq!(fake.executed(), 0);
}

#[tokio::test]
async fn bf_16_request_is_built_from_named_fields_only() {
    let fake = FakeExecutor::local();
    let h = Harness::with(fake.clone());
    let r = h
        .call(json!({
            "command": "echo \"${SNEAKY_VAR-unset}\"; cat; echo end",
            "description": "d",
            "env": {"SNEAKY_VAR": "leak", "DSH_HOME": "/spoofed"},
            "stdin": "payload",
            "stdoutMaxBytes": 5,
            "dshEnv": {"DSH_SESSION_ID": "spoofed"},
            "signal": "x",
            "sandboxPolicy": {"mode": "danger-full-access"},
            "timeoutMs": 250,
        }))
        .await;
    assert!(!r.is_error, "{}", text(&r));
    let request = fake.last_request();
    assert_eq!(request.command, "echo \"${SNEAKY_VAR-unset}\"; cat; echo end");
    assert_eq!(request.env, None);
    assert_eq!(request.stdin, None);
    assert_eq!(request.stdout_max_bytes, None);
    assert_eq!(request.sandbox_policy, None, "non-sandboxing compositions carry no policy");
    assert_eq!(request.timeout_ms, Some(250.0));
    assert_eq!(request.workdir, None, "agent-less without a root: the executor's default");
    assert!(request.signal.is_some(), "foreground carries the call signal");
    let dsh_env = request.dsh_env.expect("managed env");
    assert_eq!(
        dsh_env.into_iter().collect::<Vec<_>>(),
        [("DSH_HOME".to_owned(), "/h/dsh".to_owned()), ("DSH_SHELL".to_owned(), "1".to_owned())]
    );
}

#[tokio::test]
async fn managed_env_carries_the_session_id() {
    let fake = FakeExecutor::local();
    let h = Harness::with(fake.clone());
    let agent = h.agent("sess-42", None);
    h.call_as(&agent, json!({"command": "true", "description": "d"})).await;
    let env = fake.last_request().dsh_env.expect("env");
    assert_eq!(env["DSH_SESSION_ID"], "sess-42");
    assert_eq!(env["DSH_SHELL"], "1");
    assert_eq!(env["DSH_HOME"], "/h/dsh");
}

#[tokio::test]
async fn we_02_session_cwd_routing() {
    let fake = FakeExecutor::local();
    let h = Harness::with(fake.clone());
    let canon = |p: &str| std::fs::canonicalize(p).expect("canonical");
    let workdir = |args| {
        let fake = fake.clone();
        let h = &h;
        async move {
            let (agent, args) = args;
            let r = match agent {
                Some(agent) => h.call_as(&agent, args).await,
                None => h.call(args).await,
            };
            assert!(!r.is_error, "{}", text(&r));
            fake.last_request().workdir
        }
    };
    let tmp = h.agent("c-tmp", Some("/tmp"));
    let root = h.agent("c-root", Some("/"));
    let usr = h.agent("c-usr", Some("/usr"));
    assert_eq!(
        workdir((Some(tmp.clone()), json!({"command": "pwd", "description": "d"}))).await,
        Some(canon("/tmp"))
    );
    assert_eq!(
        workdir((Some(root), json!({"command": "pwd", "description": "d", "workdir": "/tmp"}))).await,
        Some(PathBuf::from("/tmp"))
    );
    assert_eq!(
        workdir((Some(usr.clone()), json!({"command": "pwd", "description": "d", "workdir": "bin"}))).await,
        Some(canon("/usr").join("bin"))
    );
    // Two agents on one executor each get their own.
    assert_eq!(
        workdir((Some(usr), json!({"command": "pwd", "description": "d"}))).await,
        Some(canon("/usr"))
    );
    assert_eq!(
        workdir((Some(tmp), json!({"command": "pwd", "description": "d"}))).await,
        Some(canon("/tmp"))
    );
    // Agent-less with a relative workdir: passed through relative.
    assert_eq!(
        workdir((None, json!({"command": "pwd", "description": "d", "workdir": "rel"}))).await,
        Some(PathBuf::from("rel"))
    );
}

#[tokio::test]
async fn bf_01_value_and_text_through_the_tool() {
    let fake = FakeExecutor::local();
    fake.push_result(Ok(result("hello\n", "", Some(0), None)));
    let h = Harness::with(fake);
    let r = h.call(json!({"command": "echo hello", "description": "test command"})).await;
    assert!(!r.is_error);
    assert_eq!(text(&r), "hello\n");
    assert_eq!(r.content.len(), 1);
    assert_eq!(
        r.value.expect("value").to_string(),
        r#"{"kind":"foreground","exitCode":0,"signal":null,"timedOut":false,"aborted":false,"timeoutMs":10000,"stdout":{"text":"hello\n","truncated":false},"stderr":{"text":"","truncated":false}}"#
    );
}

#[tokio::test]
async fn nonzero_exit_timeout_and_signal_are_successes() {
    let fake = FakeExecutor::local();
    fake.push_result(Ok(result("", "", Some(9), None)));
    let mut timed = result("", "", None, Some("SIGTERM"));
    timed.timed_out = true;
    timed.timeout = ShellTimeout::from_millis(100.0);
    fake.push_result(Ok(timed));
    let h = Harness::with(fake);
    let r = h.call(json!({"command": "exit 9", "description": "d"})).await;
    assert!(!r.is_error);
    assert_eq!(text(&r), "(no output)\n[exit code: 9]");
    let r = h.call(json!({"command": "sleep 60", "description": "d", "timeoutMs": 100})).await;
    assert!(!r.is_error);
    assert_eq!(text(&r), "(no output)\n[timed out after 100ms]\n[killed by signal: SIGTERM]");
    let value = r.value.expect("value");
    assert_eq!((value["timedOut"].clone(), value["exitCode"].clone()), (json!(true), json!(null)));
}

#[tokio::test]
async fn aborted_run_is_an_abort_error() {
    let fake = FakeExecutor::local();
    let mut aborted = result("", "", None, Some("SIGTERM"));
    aborted.aborted = true;
    fake.push_result(Ok(aborted));
    let h = Harness::with(fake);
    let r = h.call(json!({"command": "sleep 60", "description": "d"})).await;
    assert!(r.is_error);
    assert_eq!(text(&r), "Error: tool call aborted");
    assert_eq!(r.error.and_then(|e| e.info), Some(ErrorInfo::new("AbortError", "ABORTED")));
}

#[tokio::test]
async fn infrastructure_failures_are_errors() {
    let fake = FakeExecutor::local();
    fake.push_result(Err(ShellError::Spawn {
        message: "spawn bash ENOENT".into(),
        code: Some("ENOENT".into()),
        program: "bash".into(),
    }));
    fake.push_result(Err(ShellError::SandboxUnavailable(SandboxUnavailableError::new(
        SandboxMode::ReadOnly,
    ))));
    let h = Harness::with(fake);
    let r = h.call(json!({"command": "true", "description": "d", "workdir": "/nonexistent-dsh"})).await;
    assert_eq!(text(&r), "Error: spawn bash ENOENT");
    assert_eq!(r.error.and_then(|e| e.info), None);
    let r = h.call(json!({"command": "true", "description": "d"})).await;
    assert!(text(&r).starts_with("Error: sandbox mode \"read-only\" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined."));
    assert_eq!(
        r.error.and_then(|e| e.info),
        Some(ErrorInfo::new("SandboxUnavailableError", "SANDBOX_UNAVAILABLE"))
    );
}

#[tokio::test]
async fn pre_aborted_call_never_reaches_the_body() {
    let fake = FakeExecutor::local();
    let h = Harness::with(fake.clone());
    let signal = AbortSignal::new();
    signal.abort_default();
    let r = h
        .call_exec(
            json!({"command": "true", "description": "d"}),
            ToolExec::new(None, "c").with_signal(signal),
        )
        .await;
    assert_eq!(text(&r), "Error: tool call aborted before dispatch");
    assert!(fake.resolves.lock().is_empty());
}

#[tokio::test]
async fn bf_08_truncation_notice_and_value_through_the_tool() {
    let fake = FakeExecutor::local();
    let mut r = result("tail\n", "", Some(0), None);
    r.stdout = CollectedOutput {
        text: "tail\n".into(),
        truncated: true,
        spill_path: Some("/s/out.log".into()),
        spill_error: None,
    };
    r.stderr = CollectedOutput { text: "e".into(), truncated: true, spill_path: None, spill_error: None };
    fake.push_result(Ok(r));
    let h = Harness::with(fake);
    let r = h.call(json!({"command": "x", "description": "d"})).await;
    assert_eq!(
        text(&r),
        "tail\n\n[output truncated; full output: /s/out.log]\n[stderr]\ne\n[output truncated; full output: (unavailable)]"
    );
    let value = r.value.expect("value");
    assert_eq!(value["stdout"], json!({"text": "tail\n", "truncated": true, "spillPath": "/s/out.log"}));
    assert_eq!(value["stderr"], json!({"text": "e", "truncated": true}));
}

#[tokio::test]
async fn bf_15_denial_markers_through_the_tool() {
    let denied = |mode| {
        let mut r = result("", "denied", Some(1), None);
        r.sandbox = Some(ShellSandboxInfo {
            mode,
            denied: true,
            enforcement: Some(SandboxEnforcement::Full),
            runner_failed: None,
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        });
        r
    };
    let local = FakeExecutor::local();
    local.push_result(Ok(denied(SandboxMode::ReadOnly)));
    let h = Harness::with(local);
    assert_eq!(
        text(&h.call(json!({"command": "x", "description": "d"})).await),
        "[stderr]\ndenied\n[sandbox: file access denied under read-only mode]\n[exit code: 1]"
    );
    let sbx = FakeExecutor::sandboxing();
    sbx.push_result(Ok(denied(SandboxMode::ReadOnly)));
    let h = Harness::with(sbx);
    assert_eq!(
        text(&h.call(json!({"command": "x", "description": "d"})).await),
        "[stderr]\ndenied\n[sandbox: file access denied under read-only mode]\n[sandbox: escalation available — retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]\n[exit code: 1]"
    );
}

#[tokio::test]
async fn sb_08_optional_facts_omitted() {
    let fake = FakeExecutor::sandboxing();
    let mut r = result("ok", "", Some(0), None);
    r.sandbox = Some(ShellSandboxInfo {
        mode: SandboxMode::ReadOnly,
        denied: false,
        enforcement: None,
        runner_failed: None,
        network_denied: Vec::new(),
        quarantined: Vec::new(),
    });
    fake.push_result(Ok(r));
    let h = Harness::with(fake);
    let r = h.call(json!({"command": "true", "description": "d"})).await;
    assert_eq!(r.value.expect("value")["sandbox"], json!({"mode": "read-only", "denied": false}));
}

#[tokio::test]
async fn sb_20_workdir_from_the_policy_root() {
    let fake = FakeExecutor::sandboxing();
    let h = Harness::with(fake.clone());
    let cwd = dsh_sandbox_policy::canonical_root(&std::env::current_dir().expect("cwd"));
    h.call(json!({"command": "pwd", "description": "d"})).await;
    let request = fake.last_request();
    assert_eq!(request.workdir, Some(cwd.clone()), "agent-less: the policy's configured root");
    let policy = request.sandbox_policy.expect("policy");
    assert_eq!((policy.mode, policy.workspace_root, policy.session_id), (SandboxMode::ReadOnly, cwd, None));

    let agent = h.agent("s", Some("/usr"));
    h.call_as(&agent, json!({"command": "pwd", "description": "d", "workdir": "bin"})).await;
    let request = fake.last_request();
    let usr = std::fs::canonicalize("/usr").expect("usr");
    assert_eq!(request.workdir, Some(usr.join("bin")));
    let policy = request.sandbox_policy.expect("policy");
    assert_eq!((policy.workspace_root, policy.session_id.as_deref()), (usr, Some("s")));
}
