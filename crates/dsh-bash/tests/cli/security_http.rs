//! `dsh-bash mcp --http` against hostile neighbours: browser origins (DNS rebinding), slow
//! and numerous connections, and a confined command that tries to take the bearer token
//! (with which it could open its own MCP session and approve its own escalations).

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use dsh_test_support::http::{Reply, read_reply};
use serde_json::{Value, json};

use crate::harness::{Sandbox, confining_host};
use crate::mcp::{authority, start_server};

const TOKEN: &str = "tok-5d0c7e21a9";

fn post(authority: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
    let body = body.to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let mut stream = TcpStream::connect(authority).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(120))).expect("timeout");
    write!(stream, "{head}\r\n{body}").expect("write");
    read_reply(&mut BufReader::new(stream)).expect("the whole response")
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

#[test]
fn foreign_browser_origins_are_refused_and_loopback_ones_served() {
    let sandbox = Sandbox::new();
    let (server, line) =
        start_server(&sandbox, &["--http", "0", "--allow-origin", "https://app.example.com"], Some(TOKEN));
    let authority = authority(&line);
    let port = authority.rsplit(':').next().expect("port");
    let auth = bearer();
    let status = |origin: Option<&str>| {
        let mut headers = vec![("Authorization", auth.as_str())];
        headers.extend(origin.map(|o| ("Origin", o)));
        post(&authority, &headers, &initialize()).status
    };
    let refused =
        post(&authority, &[("Authorization", &auth), ("Origin", "http://evil.example")], &initialize());
    assert_eq!(refused.status, 403);
    assert_eq!(refused.body, "forbidden: requests from this Origin are not allowed");
    assert_eq!(status(Some(&format!("http://localhost:{port}"))), 200);
    assert_eq!(status(Some(&format!("http://127.0.0.1:{port}"))), 200);
    assert_eq!(status(Some("http://[::1]:8080")), 200);
    assert_eq!(status(None), 200);
    assert_eq!(status(Some("https://app.example.com")), 200, "allowed with --allow-origin");
    assert_eq!(status(Some("https://app.example.com:8443")), 403, "another port is another origin");
    assert_eq!(status(Some("null")), 403);
    assert_eq!(status(Some("http://localhost.evil.example")), 403);
    server.stop();
}

#[test]
fn bad_origin_options_are_usage_errors() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(&["mcp", "--http", "0", "--allow-origin", "https://app.example.com/x"], "");
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("expected an origin scheme://host[:port], got \"https://app.example.com/x\""),
        "{}",
        out.stderr
    );
    let out = sandbox.run(&["mcp", "--allow-origin", "https://app.example.com"], "");
    assert_eq!(out.code, Some(2), "--allow-origin needs --http: {out:?}");
    let out = sandbox.run(&["mcp", "--http", "0", "--header-timeout", "0"], "");
    assert_eq!(out.code, Some(2), "a header timeout is at least a second: {out:?}");
    let out = sandbox.run(&["mcp", "--http", "0", "--max-connections", "0"], "");
    assert_eq!(out.code, Some(2), "at least one connection: {out:?}");
}

/// Reads until the server closes the connection (EOF or reset); fails if it has not after
/// `within`, a bound far above the configured timeouts.
pub(crate) fn closed_by_server(stream: &mut TcpStream, within: Duration) -> Vec<u8> {
    stream.set_read_timeout(Some(within)).expect("timeout");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return seen,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return seen,
            Err(e) => panic!("the server kept the connection open ({e}); read so far: {seen:?}"),
        }
    }
}

#[test]
fn a_connection_that_stalls_in_the_request_head_is_closed() {
    let sandbox = Sandbox::new();
    let (server, line) = start_server(&sandbox, &["--http", "0", "--header-timeout", "1"], Some(TOKEN));
    let authority = authority(&line);
    let mut stream = TcpStream::connect(&authority).expect("connect");
    write!(stream, "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nAuthorization: ").expect("half a head");
    let answer = closed_by_server(&mut stream, Duration::from_secs(60));
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&answer));
    server.stop();
}

#[test]
fn connections_beyond_the_cap_are_closed_at_once() {
    let sandbox = Sandbox::new();
    let (server, line) = start_server(
        &sandbox,
        &["--http", "0", "--max-connections", "2", "--header-timeout", "600"],
        Some(TOKEN),
    );
    let authority = authority(&line);
    let mut first = TcpStream::connect(&authority).expect("connect 1");
    let second = TcpStream::connect(&authority).expect("connect 2");
    let mut third = TcpStream::connect(&authority).expect("connect 3");
    assert_eq!(closed_by_server(&mut third, Duration::from_secs(60)), b"", "the third connection is closed");
    // The first two are still served.
    write!(first, "GET /nope HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n").expect("write");
    let answer = closed_by_server(&mut first, Duration::from_secs(60));
    assert!(answer.starts_with(b"HTTP/1.1 401 "), "{}", String::from_utf8_lossy(&answer));
    // Closed connections give their slots back: a new one is served once the server has seen
    // them go (it learns of that asynchronously, so ask until it answers).
    drop(second);
    let served = (0..200).any(|_| {
        let mut next = TcpStream::connect(&authority).expect("connect");
        write!(next, "GET /nope HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n").expect("write");
        let served = closed_by_server(&mut next, Duration::from_secs(60)).starts_with(b"HTTP/1.1 401 ");
        if !served {
            std::thread::sleep(Duration::from_millis(50));
        }
        served
    });
    assert!(served, "a slot freed by a closed connection is never reused");
    server.stop();
}

/// Opens an MCP session; returns its id.
fn open_session(authority: &str) -> String {
    let auth = bearer();
    let reply = post(authority, &[("Authorization", &auth)], &initialize());
    assert_eq!(reply.status, 200, "{}", reply.body);
    let session = reply.header("mcp-session-id").expect("a session id").to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let headers = [("Authorization", auth.as_str()), ("Mcp-Session-Id", &session)];
    assert_eq!(post(authority, &headers, &initialized).status, 202);
    session
}

/// Calls `bash` with `command` in `session`; returns the result's text.
fn call_bash(authority: &str, session: &str, command: &str) -> String {
    let auth = bearer();
    let headers = [("Authorization", auth.as_str()), ("Mcp-Session-Id", session)];
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": command, "description": "Look for the token"}}});
    let reply = post(authority, &headers, &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let message = reply.messages().into_iter().find(|m| m["id"] == json!(2)).expect("the call's response");
    message["result"]["content"]
        .as_array()
        .expect("content")
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect()
}

#[test]
fn a_confined_command_cannot_take_the_bearer_token() {
    if !confining_host() {
        return;
    }
    // Outside /tmp and the OS temp dir, which confined commands may see as fresh directories:
    // the token file must be somewhere they could read, were it not masked.
    let sandbox = Sandbox::outside_tmp();
    let token_file = sandbox.write("mcp-token", &format!("{TOKEN}\n"));
    let env_token = "env-token-b81f03";
    let (server, line) = start_server(
        &sandbox,
        &[
            "--http",
            "0",
            "--token-file",
            token_file.to_str().expect("utf-8"),
            "--sandbox",
            "workspace-write",
            "--workspace-root",
            sandbox.path().to_str().expect("utf-8"),
        ],
        Some(env_token),
    );
    let authority = authority(&line);
    let session = open_session(&authority);
    let pid = server.id();
    let file = token_file.to_str().expect("utf-8");
    let attempts = [
        ("the token file", format!("cat '{file}'; echo ran")),
        ("the server's environment block", format!("tr '\\0' '\\n' < /proc/{pid}/environ; echo ran")),
        ("the environment", "env; echo \"DSH_MCP_TOKEN=${DSH_MCP_TOKEN-unset}\"; echo ran".to_owned()),
    ];
    let mut leaks = Vec::new();
    for (what, command) in &attempts {
        let text = call_bash(&authority, &session, command);
        assert!(text.contains("ran\n"), "{what}: the command did not run: {text}");
        if text.contains(TOKEN) || text.contains(env_token) {
            leaks.push(format!("{what}: {text}"));
        }
    }
    server.stop();
    assert!(leaks.is_empty(), "a confined command read the token through {leaks:#?}");
}

#[test]
fn under_network_deny_a_command_cannot_reach_the_server_that_runs_it() {
    if !confining_host() {
        return;
    }
    let sandbox = Sandbox::outside_tmp();
    let args = ["--http", "0", "--sandbox", "workspace-write", "--network", "deny"];
    let (server, line) = start_server(&sandbox, &args, Some(TOKEN));
    let authority = authority(&line);
    let session = open_session(&authority);
    let (host, port) = authority.rsplit_once(':').expect("host:port");
    let direct = format!(
        "curl -sS -m 5 --noproxy '*' -o /dev/null -w 'HTTP %{{http_code}}\\n' http://{host}:{port}/mcp; \
         (exec 3<>/dev/tcp/{host}/{port}) 2>/dev/null && echo DEV-TCP-REACHED; echo ran"
    );
    let text = call_bash(&authority, &session, &direct);
    assert!(text.contains("ran\n"), "{text}");
    assert!(
        !text.contains("DEV-TCP-REACHED") && !text.contains("HTTP 4") && !text.contains("HTTP 2"),
        "{text}"
    );
    // Through the proxy: refused by the policy (loopback is never listed by default).
    let proxied =
        call_bash(&authority, &session, &format!("curl -sS -m 5 http://{host}:{port}/mcp; echo ran"));
    assert!(
        proxied.contains(&format!(
            "dsh-bash network policy: access to {host}:{port} denied: not in the allowlist"
        )),
        "{proxied}"
    );
    assert!(proxied.contains(&format!("[network: access to {host}:{port} denied]")), "{proxied}");
    server.stop();
}

#[test]
fn a_killed_http_server_takes_its_sessions_jobs_along() {
    use crate::killed_harness::{kill_and_check, marker, spreading, wait_for};
    let sandbox = Sandbox::outside_tmp();
    let (mut server, line) = start_server(&sandbox, &["--http", "0"], Some(TOKEN));
    let authority = authority(&line);
    let session = open_session(&authority);
    let marker = marker();
    let auth = bearer();
    let headers = [("Authorization", auth.as_str()), ("Mcp-Session-Id", session.as_str())];
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "bash", "arguments": {
        "command": spreading(&marker), "description": "d", "run_in_background": true}}});
    assert_eq!(post(&authority, &headers, &body).status, 200);
    wait_for(&marker, 5);
    let mut child = server.take();
    kill_and_check(&mut child, &marker, "mcp --http");
}
