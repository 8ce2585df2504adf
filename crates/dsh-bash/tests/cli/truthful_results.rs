//! Results that tell the truth under faults the client or the host cause: a request id
//! reused while the first request is in flight, a job that ends by itself as it is killed,
//! a harness stopped past a command's deadline, and input the protocol calls malformed.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use dsh_test_support::http::Conn;
use serde_json::{Value, json};

use crate::harness::{Sandbox, shell_quote};
use crate::mcp::{StdioServer, authority, start_server};

const TOKEN: &str = "tok-3e91c04b7d";

/// Waits (a generous bound, never a timing assertion) until `path` exists.
fn wait_for_file(path: &Path) {
    for _ in 0..1200 {
        if path.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{} never appeared", path.display());
}

/// A command that says it started (creates `started`), waits for `go` (at most a minute,
/// so the old code's hang fails instead of hanging) and prints `first`.
fn held_command(dir: &Path) -> String {
    let started = shell_quote(dir.join("started").display());
    let go = shell_quote(dir.join("go").display());
    format!("touch {started}; for i in $(seq 600); do [ -e {go} ] && break; sleep 0.1; done; echo first")
}

/// The text blocks of a `tools/call` response, joined.
fn result_text(response: &Value) -> String {
    response["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("a tool result: {response}"))
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect()
}

fn bash_call(id: i64, command: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": command, "description": "d"}}})
}

fn assert_id_in_use(refusal: &Value, id: i64) {
    assert_eq!(refusal["id"], json!(id), "{refusal}");
    assert_eq!(refusal["error"]["code"], json!(-32600), "{refusal}");
    assert_eq!(
        refusal["error"]["message"],
        json!(format!("Invalid Request: request id {id} is already in use by a request in flight")),
        "{refusal}"
    );
}

#[test]
fn a_request_id_reused_over_stdio_while_in_flight_is_refused_and_the_first_answered() {
    let sandbox = Sandbox::new();
    let mut server = StdioServer::start(&sandbox);
    let second_ran = sandbox.path().join("second-ran");
    server.send(&bash_call(5, &held_command(sandbox.path())));
    wait_for_file(&sandbox.path().join("started"));
    server.send(&bash_call(5, &format!("touch {}; echo second", shell_quote(second_ran.display()))));
    // The refusal comes while the first still waits; only then may it go on.
    let refusal = server.response(5).expect("an answer to the duplicate");
    assert_id_in_use(&refusal, 5);
    sandbox.write("go", "");
    let first = server.response(5).expect("the first request's result");
    assert_eq!(result_text(&first), "first\n", "{first}");
    assert!(!second_ran.exists(), "the duplicate's command never runs");
    // Answered, the id is free again.
    server.send(&bash_call(5, "echo third"));
    assert_eq!(result_text(&server.response(5).expect("answered")), "third\n");
    let (code, _) = server.finish();
    assert_eq!(code, Some(0));
}

#[test]
fn a_request_id_reused_over_http_while_in_flight_is_refused_and_the_first_answered() {
    let sandbox = Sandbox::new();
    let (server, line) = start_server(&sandbox, &["--http", "0"], Some(TOKEN));
    let authority = authority(&line);
    let patience = Duration::from_secs(120);
    let mut first = Conn::open(&authority, TOKEN, patience).expect("connect");
    let session = first.open_session("reuse").expect("a session");
    let mut second = Conn::open(&authority, TOKEN, patience).expect("connect");
    // The second connection speaks the session's protocol version too.
    second.open_session("other").expect("a session");
    let second_ran = sandbox.path().join("second-ran");
    first.send("POST", Some(&session), Some(&bash_call(5, &held_command(sandbox.path())))).expect("send");
    wait_for_file(&sandbox.path().join("started"));
    let duplicate = bash_call(5, &format!("touch {}; echo second", shell_quote(second_ran.display())));
    let refused = second.exchange("POST", Some(&session), Some(&duplicate)).expect("an answer");
    assert_eq!(refused.status, 200, "{refused:?}");
    assert_eq!(refused.messages().len(), 1, "{refused:?}");
    assert_id_in_use(&refused.messages()[0], 5);
    sandbox.write("go", "");
    // The first request's stream carries its own result and ends (the reply is read whole).
    let answer = first.receive().expect("the first request's answer, its stream closed");
    let response = answer.response(5).unwrap_or_else(|| panic!("{answer:?}"));
    assert_eq!(result_text(&response), "first\n", "{response}");
    assert!(!second_ran.exists(), "the duplicate's command never runs");
    // Answered, the id is free again.
    let again = second.exchange("POST", Some(&session), Some(&bash_call(5, "echo third"))).expect("answer");
    assert_eq!(result_text(&again.response(5).unwrap_or_else(|| panic!("{again:?}"))), "third\n");
    server.stop();
}

/// One `tools/call` of `tool` with `arguments`.
fn tool_call(id: i64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

/// Jobs that ignore SIGTERM and end by themselves (exit 0, after printing their last line)
/// while `job_kill` waits for them, over `global` options: each is `completed` with exit
/// code 0, never `killed`.
fn killed_jobs_that_end_by_themselves_are_completed(global: &[&str]) {
    let sandbox = Sandbox::outside_tmp();
    let root = sandbox.path().to_str().expect("utf-8").to_owned();
    let mut args = global.to_vec();
    args.extend(["--workspace-root", &root]);
    let mut server = StdioServer::start_with(&sandbox, &args, None);
    let mut id = 10;
    let mut reported = Vec::new();
    for round in 0..20 {
        let started = sandbox.path().join(format!("started-{round}"));
        // `sleep` inherits the ignored SIGTERM; the job then ends by itself with exit code 0.
        let command =
            format!("trap '' TERM; touch {}; sleep 0.3; echo end-{round}", shell_quote(started.display()));
        id += 1;
        server.send(&tool_call(
            id,
            "bash",
            json!({"command": command, "description": "d", "run_in_background": true}),
        ));
        let start = result_text(&server.response(id).expect("started"));
        let job =
            start.strip_prefix("started background job ").unwrap_or_else(|| panic!("{start}")).to_owned();
        wait_for_file(&started);
        id += 1;
        server.send(&tool_call(id, "job_kill", json!({"job_id": job})));
        let kill = server.response(id).expect("job_kill answered");
        id += 1;
        server.send(&tool_call(id, "job_output", json!({"job_id": job, "wait": true})));
        let output = result_text(&server.response(id).expect("job_output answered"));
        let end = format!("end-{round}\n");
        if !output.contains(&end) || output.contains("killed") {
            reported.push(format!("{round}: kill {kill}; output {output:?}"));
        }
        if !output.contains("[status: completed, exit code: 0]")
            && !reported.iter().any(|r| r.starts_with(&format!("{round}:")))
        {
            reported.push(format!("{round}: output {output:?}"));
        }
    }
    drop(server);
    assert!(reported.is_empty(), "jobs that ended by themselves, reported otherwise: {reported:#?}");
}

#[test]
fn a_job_kill_racing_a_jobs_own_exit_reports_what_happened() {
    for global in crate::harness::modes() {
        killed_jobs_that_end_by_themselves_are_completed(&global);
    }
}

#[test]
fn a_command_that_ended_before_its_deadline_is_not_timed_out_after_the_harness_was_stopped() {
    let sandbox = Sandbox::new();
    let started = sandbox.path().join("started");
    let command = format!("touch {}; sleep 1", shell_quote(started.display()));
    let args = json!({"command": command, "description": "d", "timeoutMs": 3000}).to_string();
    let mut command = sandbox.command(&["call", "--json", "bash", &args]);
    command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let child = command.spawn().expect("spawn");
    let pid = child.id().to_string();
    wait_for_file(&started);
    // Stopped past the deadline: the command ends (after 1 s) while nothing watches it.
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill").args([name, &pid]).status().expect("kill");
        assert!(sent.success(), "kill {name}");
    };
    signal("-STOP");
    std::thread::sleep(Duration::from_secs(5));
    signal("-CONT");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"));
    assert_eq!(result["structured"]["timedOut"], json!(false), "{result}");
    assert_eq!(result["structured"]["exitCode"], json!(0), "{result}");
    assert_eq!(result["content"], json!([{"type": "text", "text": "(no output)"}]), "{result}");
}

/// Input the protocol calls malformed, each with the JSON-RPC error the stdio server gives.
const MALFORMED: [&str; 4] = [
    "{not json",
    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":7}}"#,
    r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"arguments":{}}}"#,
    r#"[{"jsonrpc":"2.0","id":9,"method":"tools/list"}]"#,
];

#[test]
fn malformed_input_gets_the_same_json_rpc_error_over_http_as_over_stdio() {
    let sandbox = Sandbox::new();
    let mut stdio = StdioServer::start(&sandbox);
    let (server, line) = start_server(&sandbox, &["--http", "0"], Some(TOKEN));
    let authority = authority(&line);
    let mut conn = Conn::open(&authority, TOKEN, Duration::from_secs(120)).expect("connect");
    let session = conn.open_session("malformed").expect("a session");
    let expected_codes = [-32700, -32602, -32602, -32600];
    for (raw, code) in MALFORMED.iter().zip(expected_codes) {
        writeln!(stdio.stdin.as_mut().expect("stdin"), "{raw}").expect("write");
        let mut answer = String::new();
        std::io::BufRead::read_line(stdio.stdout.as_mut().expect("stdout"), &mut answer).expect("read");
        let over_stdio: Value = serde_json::from_str(&answer).expect("json");
        assert_eq!(over_stdio["error"]["code"], json!(code), "{raw}: {over_stdio}");
        let reply = conn.exchange_raw(&session, raw).expect("an answer");
        assert_eq!(reply.header("content-type"), Some("application/json"), "{raw}: {reply:?}");
        let over_http: Value =
            serde_json::from_str(&reply.body).unwrap_or_else(|_| panic!("{raw}: {reply:?}"));
        assert_eq!(over_http, over_stdio, "{raw}");
        let status = if over_stdio["id"].is_null() { 400 } else { 200 };
        assert_eq!(reply.status, status, "{raw}: {reply:?}");
    }
    server.stop();
}
