//! `dsh-bash mcp` over stdio with a hand-written JSON-RPC client.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::harness::Sandbox;

/// `dsh-bash [global] mcp` on stdio with one initialized session, spoken to line by line;
/// killed on drop. Its stderr is read to the end in a thread (so it never blocks the server)
/// and handed over by [`StdioServer::finish`].
pub(crate) struct StdioServer {
    pub(crate) child: std::process::Child,
    pub(crate) stdin: Option<std::process::ChildStdin>,
    pub(crate) stdout: Option<BufReader<std::process::ChildStdout>>,
    stderr: Option<std::thread::JoinHandle<String>>,
    /// The response to `initialize`.
    pub(crate) init: Value,
}

impl StdioServer {
    /// `dsh-bash mcp` with the default composition and log filter.
    pub(crate) fn start(sandbox: &Sandbox) -> Self {
        Self::start_with(sandbox, &[], None)
    }

    /// `dsh-bash [global] mcp` with `RUST_LOG` as given (removed when `None`).
    pub(crate) fn start_with(sandbox: &Sandbox, global: &[&str], rust_log: Option<&str>) -> Self {
        let mut args = global.to_vec();
        args.push("mcp");
        let mut command = sandbox.command(&args);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        match rust_log {
            Some(directives) => command.env("RUST_LOG", directives),
            None => command.env_remove("RUST_LOG"),
        };
        let mut child = command.spawn().expect("spawn");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(BufReader::new);
        let mut stderr_pipe = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr_pipe, &mut text);
            text
        });
        let mut server = Self { child, stdin, stdout, stderr: Some(stderr), init: Value::Null };
        server.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}));
        server.init = server.response(1).expect("initialized");
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    pub(crate) fn send(&mut self, message: &Value) {
        writeln!(self.stdin.as_mut().expect("stdin open"), "{message}").expect("write");
    }

    /// Reads until the response to `id` (other messages are skipped); `None` at the end of
    /// stdout.
    pub(crate) fn response(&mut self, id: i64) -> Option<Value> {
        loop {
            let mut line = String::new();
            if self.stdout.as_mut().expect("stdout open").read_line(&mut line).expect("read") == 0 {
                return None;
            }
            let message: Value = serde_json::from_str(&line).expect("json");
            if message["id"] == json!(id) && message.get("method").is_none() {
                return Some(message);
            }
        }
    }

    /// Closes stdin; returns the exit code and everything the server wrote on stderr.
    pub(crate) fn finish(mut self) -> (Option<i32>, String) {
        drop(self.stdin.take());
        let code = self.child.wait().expect("wait").code();
        let stderr = self.stderr.take().expect("stderr").join().expect("stderr reader");
        (code, stderr)
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn mcp_serves_the_default_composition_on_stdio() {
    let sandbox = Sandbox::new();
    let root = sandbox.path().canonicalize().expect("canonical");
    // Per-target directives, as tracing-subscriber's EnvFilter reads them.
    let mut server = StdioServer::start_with(
        &sandbox,
        &["--workspace-root", root.to_str().expect("utf-8")],
        Some("warn,dsh_mcp=info"),
    );
    let init = server.init.clone();
    assert_eq!(init["result"]["serverInfo"]["name"], json!("dsh-bash"));
    let instructions = init["result"]["instructions"].as_str().expect("instructions");
    assert!(instructions.contains("[exit code: N]"), "{instructions}");
    assert!(!instructions.contains("DeepSeek Harness"), "no identity line by default: {instructions}");
    server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let tools = server.response(2).expect("answered");
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["job_output", "job_list", "job_kill", "bash"]);
    server.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": "echo hello; pwd -P", "description": "Say hello"}}}));
    let call = server.response(3).expect("answered");
    assert_eq!(
        call["result"]["content"],
        json!([{"type": "text", "text": format!("hello\n{}\n", root.display())}])
    );
    assert_eq!(call["result"]["isError"], json!(false));
    let (code, stderr) = server.finish();
    assert_eq!(code, Some(0));
    assert!(stderr.contains("MCP session agent"), "dsh_mcp=info lets the info line through: {stderr}");
}

/// Hosts built on libuv (Node.js) give their children socket pairs, not pipes, for stdio:
/// `mcp` and `batch` answer over them, and end when the client closes its end.
#[test]
fn mcp_and_batch_serve_a_socket_pair_as_stdio() {
    use std::os::unix::net::UnixStream;
    let sandbox = Sandbox::new();
    for (host, request, answer_id) in [
        (
            "mcp",
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "bash", "arguments": {"command": "echo over-a-socket", "description": "t"}}}),
            json!(2),
        ),
        (
            "batch",
            json!({"tool": "bash", "args": {"command": "echo over-a-socket", "description": "t"}, "id": 2}),
            json!(2),
        ),
    ] {
        let (mut client, server_end) = UnixStream::pair().expect("socketpair");
        let input = server_end.try_clone().expect("clone");
        let mut child = sandbox
            .command(&[host])
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(input)))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(server_end)))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let mut lines = BufReader::new(client.try_clone().expect("clone"));
        let mut send = |message: &Value| {
            client.write_all(format!("{message}\n").as_bytes()).expect("write");
        };
        if host == "mcp" {
            send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}));
            send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        }
        send(&request);
        let answer = loop {
            let mut line = String::new();
            assert_ne!(lines.read_line(&mut line).expect("read"), 0, "{host}: the server closed its end");
            let message: Value = serde_json::from_str(&line).expect("JSON");
            if message.get("id") == Some(&answer_id) && message.get("method").is_none() {
                break message;
            }
        };
        let text = answer.pointer("/result/content/0/text").or_else(|| answer.pointer("/content/0/text"));
        assert!(
            text.and_then(Value::as_str).is_some_and(|t| t.contains("over-a-socket")),
            "{host}: {answer}"
        );
        client.shutdown(std::net::Shutdown::Both).expect("shutdown");
        let status = child.wait().expect("wait");
        assert!(status.success(), "{host}: {status}");
    }
}

/// Without `RUST_LOG` the server logs warnings only: no line per request or result (each one
/// formatted whole, with the command and its output) reaches stderr.
#[test]
fn by_default_the_server_logs_no_request_or_result() {
    let sandbox = Sandbox::new();
    let mut server = StdioServer::start_with(&sandbox, &[], None);
    let marker = "logged-output-5f2c";
    server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": format!("echo {marker}"), "description": "d"}}}));
    assert_eq!(
        server.response(2).expect("answered")["result"]["content"][0]["text"],
        json!(format!("{marker}\n"))
    );
    let (code, stderr) = server.finish();
    assert_eq!(code, Some(0));
    assert_eq!(stderr, "", "nothing is logged by default");
}

/// The status code of one `initialize` POST to `url`, with `token` as the bearer if given.
pub(crate) fn post_initialize(url: &str, token: Option<&str>) -> u16 {
    let rest = url.strip_prefix("http://").expect("http url");
    let (authority, path) = rest.split_at(rest.find('/').expect("path"));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
    .to_string();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let mut stream = std::net::TcpStream::connect(authority).expect("connect");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    dsh_test_support::http::read_reply(&mut BufReader::new(stream)).expect("a response").status
}

/// The `host:port` of the server's start line.
pub(crate) fn authority(start_line: &str) -> String {
    dsh_test_support::http::start_line_authority(start_line).unwrap_or_else(|| panic!("{start_line}"))
}

/// Starts `dsh-bash mcp --http ...` and returns the child with its stderr start line.
pub(crate) fn start_http(
    sandbox: &Sandbox,
    args: &[&str],
    token_env: Option<&str>,
) -> (std::process::Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-bash"));
    command
        .arg("mcp")
        .args(args)
        .env("DSH_HOME", sandbox.path().join("home"))
        .env_remove(TOKEN_VAR)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(token) = token_env {
        command.env(TOKEN_VAR, token);
    }
    let mut child = command.spawn().expect("spawn");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("start line");
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (child, line.trim_end().to_owned())
}

pub(crate) const TOKEN_VAR: &str = "DSH_MCP_TOKEN";

/// [`start_http`], with the server killed if the test ends (fails) before [`Server::stop`].
pub(crate) fn start_server(sandbox: &Sandbox, args: &[&str], token_env: Option<&str>) -> (Server, String) {
    let (child, line) = start_http(sandbox, args, token_env);
    (Server(Some(child)), line)
}

/// A running server; see [`start_server`].
pub(crate) struct Server(Option<std::process::Child>);

impl Server {
    pub(crate) fn id(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    /// The server's process, to end some other way.
    pub(crate) fn take(&mut self) -> std::process::Child {
        self.0.take().expect("running")
    }

    /// Ends the server with SIGTERM and asserts a clean exit.
    pub(crate) fn stop(mut self) {
        stop(self.0.take().expect("running"));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub(crate) fn stop(mut child: std::process::Child) {
    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(killed.success());
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "SIGTERM ends the server cleanly");
}

#[test]
fn mcp_over_http_generates_a_token_into_a_private_file() {
    let sandbox = Sandbox::new();
    let (child, line) = start_http(&sandbox, &["--http", "0"], None);
    let rest =
        line.strip_prefix("dsh-bash: serving MCP at http://127.0.0.1:").unwrap_or_else(|| panic!("{line}"));
    let (port, rest) = rest.split_once("/mcp (bearer token in ").unwrap_or_else(|| panic!("{line}"));
    let file = rest.strip_suffix(')').unwrap_or_else(|| panic!("{line}"));
    assert_eq!(
        std::path::Path::new(file),
        sandbox.path().join("home").join("mcp").join(format!("http-127.0.0.1-{port}.token"))
    );
    let token = std::fs::read_to_string(file).expect("the token file");
    let token = token.strip_suffix('\n').expect("one line");
    assert_eq!(token.len(), 64, "256 bits in hex: {token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    let url = format!("http://127.0.0.1:{port}/mcp");
    assert_eq!(post_initialize(&url, None), 401);
    assert_eq!(post_initialize(&url, Some("0".repeat(64).as_str())), 401);
    assert_eq!(post_initialize(&url, Some(token)), 200);
    stop(child);
    assert!(!std::path::Path::new(file).exists(), "the file goes with its server");
    // A second server gets a different token.
    let (child, again) = start_http(&sandbox, &["--http", "127.0.0.1:0"], None);
    let other = again.split("bearer token in ").nth(1).and_then(|r| r.strip_suffix(')')).expect("a file");
    assert_ne!(std::fs::read_to_string(other).expect("the second token file").trim(), token);
    stop(child);
}

#[test]
fn mcp_over_http_takes_the_token_from_a_file_or_the_environment() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("token", "  file-token-123\n");
    let (child, line) = start_http(
        &sandbox,
        &["--http", "0", "--token-file", file.to_str().expect("utf-8")],
        Some("env-token"),
    );
    let url = line.strip_prefix("dsh-bash: serving MCP at ").unwrap_or_else(|| panic!("{line}"));
    assert!(!line.contains("token"), "a given token is never printed: {line}");
    assert_eq!(post_initialize(url, Some("env-token")), 401, "the file wins over the environment");
    assert_eq!(post_initialize(url, Some("file-token-123")), 200);
    stop(child);

    let (child, line) = start_http(&sandbox, &["--http", "0"], Some("env-token"));
    let url = line.strip_prefix("dsh-bash: serving MCP at ").unwrap_or_else(|| panic!("{line}"));
    assert_eq!(post_initialize(url, Some("env-token")), 200);
    stop(child);
}

#[test]
fn mcp_over_http_refuses_bad_tokens_and_remote_addresses() {
    let sandbox = Sandbox::new();
    let empty = sandbox.write("empty", " \n");
    let out = sandbox.run(&["mcp", "--http", "0", "--token-file", empty.to_str().expect("utf-8")], "");
    assert_eq!(out.assert_usage_error(), format!("dsh-bash: the token file {} is empty", empty.display()));
    let missing = sandbox.path().join("missing");
    let out = sandbox.run(&["mcp", "--http", "0", "--token-file", missing.to_str().expect("utf-8")], "");
    assert!(
        out.assert_usage_error()
            .starts_with(&format!("dsh-bash: cannot read the token file {}", missing.display())),
        "{}",
        out.assert_usage_error()
    );
    let out = sandbox.run(&["mcp", "--http", "0.0.0.0:0"], "");
    assert_eq!(
        out.assert_usage_error(),
        "dsh-bash: --http 0.0.0.0:0 is not a loopback address; add --allow-remote to serve it"
    );
    let out = sandbox.run(&["mcp", "--token-file", "x"], "");
    assert_eq!(out.code, Some(2), "--token-file needs --http");
    let out = sandbox.run(&["mcp", "--http", "0", "--idle-timeout", "0"], "");
    assert_eq!(out.code, Some(2), "an idle timeout is at least a second: {out:?}");
    let out = sandbox.run(&["mcp", "--idle-timeout", "60"], "");
    assert_eq!(out.code, Some(2), "--idle-timeout needs --http");
}

/// `prompts/list`, `resources/list` and `resources/templates/list`, which clients such as
/// the Python SDK send whatever the capabilities say, are answered with empty lists, and
/// nothing is logged for them.
#[test]
fn prompt_and_resource_lists_are_empty_answers_not_logged_errors() {
    let sandbox = Sandbox::new();
    let mut server = StdioServer::start_with(&sandbox, &[], None);
    let lists = [
        ("prompts/list", "prompts"),
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
    ];
    for (id, (method, key)) in (2..).zip(lists) {
        server.send(&json!({"jsonrpc": "2.0", "id": id, "method": method}));
        let answer = server.response(id).expect("answered");
        assert_eq!(answer["result"][key], json!([]), "{method}: {answer}");
    }
    let (code, stderr) = server.finish();
    assert_eq!(code, Some(0));
    assert_eq!(stderr, "", "nothing is logged for the lists");
}
