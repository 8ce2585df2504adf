//! `dsh-bash schema` and `dsh-bash prompt`.

use serde_json::json;

use crate::harness::run;

const PROMPT: &str = "You are an AI agent powered by DeepSeek Harness.\n\nCheck the [exit code: N] marker on every bash result; investigate failures before moving on.\n\nTrack every background job id you start. You are notified in-session when a job finishes — do not busy-poll or sleep on one; keep working on independent steps and do not duplicate a running job's work. Before giving a final answer, collect every still-relevant job with job_output (set wait: true only when you are genuinely blocked on it), and job_kill jobs that stopped mattering.";

#[test]
fn prompt_is_the_rendered_sections_and_nothing_else() {
    let out = run(&["prompt"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, PROMPT);
    assert_eq!(out.stderr, "");
}

#[test]
fn schema_formats() {
    let mcp: serde_json::Value = serde_json::from_str(&run(&["schema"]).stdout).expect("json");
    let names: Vec<&str> =
        mcp.as_array().expect("array").iter().map(|s| s["name"].as_str().expect("name")).collect();
    assert_eq!(names, ["job_output", "job_list", "job_kill", "bash"]);
    let bash = &mcp[3];
    assert_eq!(
        bash.as_object().expect("object").keys().collect::<Vec<_>>(),
        ["name", "description", "inputSchema"]
    );
    assert_eq!(bash["inputSchema"]["required"], json!(["command", "description"]));
    assert_eq!(mcp[1]["inputSchema"], json!({"type": "object", "properties": {}}));

    let out = run(&["schema", "--format", "openai"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("[\n  {\n"), "pretty JSON: {}", out.stdout);
    let openai: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(
        openai[3],
        json!({"type": "function", "function": {
            "name": "bash", "description": bash["description"], "parameters": bash["inputSchema"]}})
    );

    let anthropic: serde_json::Value =
        serde_json::from_str(&run(&["schema", "--format", "anthropic"]).stdout).expect("json");
    assert_eq!(
        anthropic[3],
        json!({"name": "bash", "description": bash["description"], "input_schema": bash["inputSchema"]})
    );
}
