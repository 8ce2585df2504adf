//! The bash tool end to end through `dsh-bash call`: the default composition, exact texts,
//! exit codes, sessions and switches.

use serde_json::json;

use crate::harness::{Sandbox, run};

const HELLO: &str = r#"{"command":"echo hello","description":"Say hello"}"#;

#[test]
fn readme_first_command_prints_hello() {
    let out = run(&["call", "bash", HELLO]);
    assert_eq!(out.stdout, "hello\n");
    assert_eq!(out.stderr, "");
    assert_eq!(out.code, Some(0));
}

#[test]
fn text_is_printed_exactly_without_an_added_newline() {
    let out = run(&["call", "bash", r#"{"command":"printf out; printf err >&2","description":"d"}"#]);
    assert_eq!(out.stdout, "out\n[stderr]\nerr");
    assert_eq!(out.code, Some(0));
}

#[test]
fn tf_01_missing_required() {
    let out = run(&["call", "bash", "{}"]);
    assert_eq!(
        out.stdout,
        "Error: invalid arguments: missing required property \"command\"; missing required property \"description\""
    );
    assert_eq!(out.code, Some(1));
}

#[test]
fn tf_02_type_violations() {
    let cases = [
        (r#"{"command":42,"description":"d"}"#, r#"Error: invalid arguments: "command" must be a string"#),
        (r#"{"command":"x"}"#, r#"Error: invalid arguments: missing required property "description""#),
        (r#"{"command":"x","description":7}"#, r#"Error: invalid arguments: "description" must be a string"#),
        (
            r#"{"command":"x","description":"d","timeoutMs":"soon"}"#,
            r#"Error: invalid arguments: "timeoutMs" must be a number"#,
        ),
        (
            r#"{"command":"x","description":"d","workdir":7}"#,
            r#"Error: invalid arguments: "workdir" must be a string"#,
        ),
        (
            r#"{"command":"x","description":"d","run_in_background":"yes"}"#,
            r#"Error: invalid arguments: "run_in_background" must be a boolean"#,
        ),
        (r#"{"command":null,"description":"d"}"#, r#"Error: invalid arguments: "command" must be a string"#),
    ];
    for (args, expected) in cases {
        let out = run(&["call", "bash", args]);
        assert_eq!(out.stdout, expected, "{args}");
        assert_eq!(out.code, Some(1), "{args}");
    }
}

#[test]
fn tf_06_command_failure_is_a_result() {
    let out = run(&["call", "--json", "bash", r#"{"command":"exit 9","description":"d"}"#]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let line = &out.json_lines()[0];
    assert_eq!(
        line,
        &json!({
            "content": [{"type": "text", "text": "(no output)\n[exit code: 9]"}],
            "isError": false,
            "structured": {
                "kind": "foreground", "exitCode": 9, "signal": null, "timedOut": false, "aborted": false,
                "timeoutMs": 120000,
                "stdout": {"text": "", "truncated": false}, "stderr": {"text": "", "truncated": false}
            },
            "presentCall": {"card": "terminal", "title": "exit 9", "description": "d"},
            "presentResult": {"card": "terminal", "output": "(no output)", "exitCode": 9}
        })
    );
    assert!(out.stdout.contains(r#""timeoutMs":120000,"#), "{}", out.stdout);
}

#[test]
fn tf_06_infrastructure_failure_is_an_error() {
    let out = run(&["call", "bash", r#"{"command":"true","description":"d","workdir":"/nonexistent-dsh"}"#]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stdout.starts_with("Error: ") && out.stdout.contains("ENOENT"), "{}", out.stdout);
}

#[test]
fn session_call_runs_in_the_session_cwd_with_its_identity() {
    let sandbox = Sandbox::new();
    let dir = sandbox.path().join("work");
    std::fs::create_dir(&dir).expect("mkdir");
    let args = json!({
        "command": "pwd -P; echo \"$DSH_SESSION_ID\"; echo \"$DSH_SESSION_JSONL\"; echo \"$DSH_SHELL\"",
        "description": "Show session facts",
    })
    .to_string();
    let out =
        sandbox.run(&["call", "--session", "s-1", "--cwd", dir.to_str().expect("utf-8"), "bash", &args], "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let jsonl = sandbox.path().join("home/sessions/s-1.jsonl");
    assert_eq!(
        out.stdout,
        format!("{}\ns-1\n{}\n1\n", dir.canonicalize().expect("canonical").display(), jsonl.display())
    );
    let log = std::fs::read_to_string(&jsonl).expect("session log");
    assert_eq!(log.lines().count(), 3, "the header, then one turn: {log}");
}

#[test]
fn agent_less_calls_have_no_session_identity() {
    let out = run(&["call", "bash", r#"{"command":"echo \"[${DSH_SESSION_ID-unset}]\"","description":"d"}"#]);
    assert_eq!(out.stdout, "[unset]\n");
}

#[test]
fn workspace_root_is_the_default_workdir() {
    let sandbox = Sandbox::new();
    let root = sandbox.path().join("root");
    std::fs::create_dir(&root).expect("mkdir");
    let out = sandbox.run(
        &[
            "--workspace-root",
            root.to_str().expect("utf-8"),
            "call",
            "bash",
            r#"{"command":"pwd -P","description":"d"}"#,
        ],
        "",
    );
    assert_eq!(out.stdout, format!("{}\n", root.canonicalize().expect("canonical").display()));
}

#[test]
fn no_background_removes_the_parameter_and_refuses_forced_calls() {
    let out = run(&["--no-background", "schema"]);
    let schemas: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let bash = schemas.as_array().expect("array").iter().find(|s| s["name"] == "bash").expect("bash");
    let keys: Vec<&str> =
        bash["inputSchema"]["properties"].as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(keys, ["command", "description", "timeoutMs", "workdir"]);
    let out = run(&[
        "call",
        "--no-background",
        "bash",
        r#"{"command":"sleep 60","description":"d","run_in_background":true}"#,
    ]);
    assert_eq!(out.stdout, "Error: background execution is disabled for this bash tool");
    assert_eq!(out.code, Some(1));
}

#[test]
fn config_reaches_the_executor() {
    let sandbox = Sandbox::new();
    let config = sandbox.write("dsh.toml", "[bash-local]\ntimeoutMs = 300\ngraceMs = 200\n");
    let out = sandbox.run(
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "call",
            "bash",
            r#"{"command":"sleep 30","description":"d"}"#,
        ],
        "",
    );
    assert_eq!(out.stdout, "(no output)\n[timed out after 300ms]\n[killed by signal: SIGTERM]");
    assert_eq!(out.code, Some(0));
}

#[test]
fn interrupt_aborts_the_call_and_kills_the_command() {
    let sandbox = Sandbox::new();
    let pid_file = sandbox.path().join("cmd.pid");
    let args =
        json!({"command": format!("echo $$ > {}; sleep 60", pid_file.display()), "description": "Wait"})
            .to_string();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
        .args(["call", "bash", &args])
        .env("DSH_HOME", sandbox.path().join("home"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let command_pid = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file)
            && text.ends_with('\n')
        {
            break text.trim().to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let status =
        std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill");
    assert!(status.success());
    let output = child.wait_with_output().expect("wait");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Error: tool call aborted");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        !std::path::Path::new(&format!("/proc/{command_pid}")).exists(),
        "command {command_pid} survived"
    );
}
