//! `dsh-bash mcp` over stdio with a hand-written JSON-RPC client.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::harness::Sandbox;

#[test]
fn mcp_serves_the_default_composition_on_stdio() {
    let sandbox = Sandbox::new();
    let root = sandbox.path().canonicalize().expect("canonical");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
        .args(["--workspace-root", root.to_str().expect("utf-8"), "mcp"])
        .env("DSH_HOME", sandbox.path().join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut send = |message: Value| writeln!(stdin, "{message}").expect("write");
    let mut response = |id: i64| -> Value {
        loop {
            let mut line = String::new();
            assert_ne!(stdout.read_line(&mut line).expect("read"), 0, "server closed stdout");
            let message: Value = serde_json::from_str(&line).expect("json");
            if message["id"] == json!(id) {
                return message;
            }
        }
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}));
    let init = response(1);
    assert_eq!(init["result"]["serverInfo"]["name"], json!("dsh-bash"));
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let tools = response(2);
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["job_output", "job_list", "job_kill", "bash"]);
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": "echo hello; pwd -P", "description": "Say hello"}}}));
    let call = response(3);
    assert_eq!(
        call["result"]["content"],
        json!([{"type": "text", "text": format!("hello\n{}\n", root.display())}])
    );
    assert_eq!(call["result"]["isError"], json!(false));
    drop(stdin);
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn mcp_over_http_needs_a_token() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(&["mcp", "--http", "127.0.0.1:0"], "");
    assert_eq!(out.assert_usage_error(), "dsh-bash: --http needs a bearer token in $DSH_MCP_TOKEN");
}
