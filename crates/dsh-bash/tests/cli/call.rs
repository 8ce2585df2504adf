//! `dsh-bash call`.

use serde_json::json;

use crate::harness::{Sandbox, run};

#[test]
fn an_unknown_tool_is_a_usage_error_naming_the_tools() {
    for args in [&["call", "nope", "{}"][..], &["call", "--json", "nope", "{}"]] {
        let out = run(args);
        assert_eq!(
            out.assert_usage_error(),
            "dsh-bash: unknown tool \"nope\" (this composition has: job_output, job_list, job_kill, bash)"
        );
    }
}

#[test]
fn unparseable_args_json_is_a_usage_error() {
    let out = run(&["call", "bash", "{\"command\":"]);
    let line = out.assert_usage_error();
    assert!(line.starts_with("dsh-bash: ARGS_JSON is not valid JSON: "), "{line}");
}

#[test]
fn session_call_runs_inside_a_persisted_turn() {
    let sandbox = Sandbox::new();
    let cwd = sandbox.path().to_str().expect("utf-8").to_owned();
    let out = sandbox.run(&["call", "--session", "s1", "--cwd", &cwd, "job_list", "{}"], "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let log = std::fs::read_to_string(sandbox.path().join("home/sessions/s1.jsonl")).expect("session log");
    let events: Vec<serde_json::Value> =
        log.lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().expect("type")).collect();
    assert_eq!(kinds, ["session/header", "turn/start", "turn/end"]);
    assert_eq!(events[0]["data"], json!({"id": "s1", "cwd": cwd}));
    assert!(events.iter().all(|e| e["session"] == json!("s1")));
}

#[test]
fn cwd_requires_a_session() {
    let out = run(&["call", "--cwd", "/tmp", "nope", "{}"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert_eq!(out.stdout, "");
}
