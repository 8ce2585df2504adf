//! `dsh-bash mcp` and the clients that go away: the idle timeout with a call in flight, a
//! `DELETE` or the end of stdin while a call runs (answered only once the session's processes
//! are gone), a client killed mid-call over stdio and over HTTP (its call's processes killed,
//! other sessions untouched), the session cap's refusal, and plain JSON answers on a
//! keep-alive connection.

use std::net::Shutdown;
use std::time::{Duration, Instant};

use dsh_test_support::http::{self, Reply};
use serde_json::{Value, json};

use crate::harness::Sandbox;
use crate::killed_harness::{alive_with, marker, wait_for};
use crate::mcp::{StdioServer, authority, start_server};

const TOKEN: &str = "tok-vanished-3b9e";
/// How long any one answer may take before the test gives up.
const PATIENCE: Duration = Duration::from_secs(60);
/// How long a vanished client's processes may outlive it.
const GONE_WITHIN: Duration = Duration::from_secs(1);

/// A keep-alive connection whose failures fail the test.
struct Conn(http::Conn);

impl Conn {
    fn open(authority: &str) -> Self {
        Self(http::Conn::open(authority, TOKEN, PATIENCE).expect("connect"))
    }

    fn send(&mut self, method: &str, session: Option<&str>, body: Option<&Value>) {
        self.0.send(method, session, body).expect("write");
    }

    fn receive(&mut self) -> Reply {
        self.0.receive().expect("a response")
    }

    fn exchange(&mut self, method: &str, session: Option<&str>, body: Option<&Value>) -> Reply {
        self.send(method, session, body);
        self.receive()
    }

    /// Opens an MCP session on this connection; returns its id.
    fn open_session(&mut self) -> String {
        self.0.open_session("vanished").expect("a session")
    }
}

fn initialize(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "vanished", "version": "0"}}})
}

fn call(id: i64, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "bash", "arguments": arguments}})
}

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "vanish"})
}

fn background(command: &str) -> Value {
    json!({"command": command, "description": "vanish", "run_in_background": true})
}

/// The first text block of a call's result.
fn text_of(response: &Value) -> String {
    response["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{response}")).to_owned()
}

/// Waits until no process holds `marker`; panics after `within`.
fn gone_within(marker: &str, within: Duration, what: &str) {
    let since = Instant::now();
    while !alive_with(marker).is_empty() {
        assert!(
            since.elapsed() < within,
            "{what}: processes outlived it by {within:?}: {:?}",
            alive_with(marker)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_idle_timeout_never_ends_a_session_with_a_call_in_flight() {
    let sandbox = Sandbox::new();
    let (server, line) = start_server(&sandbox, &["--http", "0", "--idle-timeout", "1"], Some(TOKEN));
    let authority = authority(&line);
    let mut conn = Conn::open(&authority);
    let session = conn.open_session();
    // Three times the idle timeout with one call running and no other request.
    let slow = conn.exchange("POST", Some(&session), Some(&call(2, bash("sleep 3; echo done"))));
    assert_eq!(slow.status, 200, "{slow:?}");
    assert_eq!(text_of(&slow.response(2).expect("the slow call's answer")), "done\n");
    // The session lives on after the call; its idle time counts from the call's end.
    let next = conn.exchange("POST", Some(&session), Some(&call(3, bash("echo alive"))));
    assert_eq!(text_of(&next.response(3).expect("answered")), "alive\n");
    // Idle for longer than the timeout: the session is gone, cleanly (404, never 500).
    std::thread::sleep(Duration::from_millis(2500));
    let late = conn.exchange("POST", Some(&session), Some(&call(4, bash("true"))));
    assert_eq!(late.status, 404, "{late:?}");
    server.stop();
}

/// A `tools/call` on a connection of its own, in a thread; returns the reply (or `None` when
/// the server closed the connection without a complete one).
fn call_in_thread(
    authority: &str,
    session: &str,
    id: i64,
    arguments: Value,
) -> std::thread::JoinHandle<Option<Reply>> {
    let (authority, session) = (authority.to_owned(), session.to_owned());
    std::thread::spawn(move || {
        let mut conn = Conn::open(&authority);
        conn.send("POST", Some(&session), Some(&call(id, arguments)));
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| conn.receive())).ok()
    })
}

#[test]
fn a_delete_during_a_running_call_is_answered_once_its_processes_are_gone() {
    let sandbox = Sandbox::outside_tmp();
    let (server, line) = start_server(&sandbox, &["--http", "0"], Some(TOKEN));
    let authority = authority(&line);
    let mut conn = Conn::open(&authority);
    let session = conn.open_session();
    let (job, foreground) = (marker(), marker());
    let started = conn.exchange("POST", Some(&session), Some(&call(2, background(&format!("sleep {job}")))));
    assert!(text_of(&started.response(2).expect("started")).starts_with("started background job "));
    let pending = call_in_thread(&authority, &session, 3, bash(&format!("sleep {foreground}; echo never")));
    wait_for(&job, 1);
    wait_for(&foreground, 1);
    let deleted = conn.exchange("DELETE", Some(&session), None);
    assert_eq!(deleted.status, 204, "{deleted:?}");
    // Answered only now: nothing of the session is left.
    assert_eq!(alive_with(&job), Vec::<u32>::new(), "the session's job outlived its DELETE");
    assert_eq!(alive_with(&foreground), Vec::<u32>::new(), "the running call outlived its DELETE");
    // The pending call got its answer (aborted), or its stream ended without one.
    if let Some(reply) = pending.join().expect("the pending call") {
        assert_eq!(reply.status, 200, "{reply:?}");
        if let Some(response) = reply.response(3) {
            assert_eq!(response["result"]["isError"], json!(true), "{response}");
            assert!(!text_of(&response).contains("never"), "{response}");
        }
    }
    let gone = conn.exchange("POST", Some(&session), Some(&call(4, bash("true"))));
    assert_eq!(gone.status, 404, "{gone:?}");
    server.stop();
}

/// One server's share of the DELETE races: a session, a call sent, a DELETE after a varying
/// delay; when the DELETE is answered no process of the call may be left, and the call is
/// answered, refused, or its stream closed — never left hanging.
fn delete_races(authority: &str, first: usize, trials: usize) {
    for i in first..first + trials {
        let mut conn = Conn::open(authority);
        let session = conn.open_session();
        let marker = marker();
        let pending = call_in_thread(authority, &session, 2, bash(&format!("sleep {marker}")));
        std::thread::sleep(Duration::from_micros((i as u64 * 7919) % 40_000));
        let deleted = conn.exchange("DELETE", Some(&session), None);
        assert_eq!(deleted.status, 204, "trial {i}: {deleted:?}");
        assert_eq!(
            alive_with(&marker),
            Vec::<u32>::new(),
            "trial {i}: the call outlived its session's DELETE"
        );
        let reply = pending.join().expect("the pending call");
        if let Some(reply) = reply {
            assert!(matches!(reply.status, 200 | 404), "trial {i}: {reply:?}");
            // Aborted by the teardown (an error result), or refused as a call of a session
            // that has ended (when it came once the teardown had begun).
            if let Some(response) = reply.response(2) {
                let refused = response["error"]["message"] == json!("the MCP session has ended");
                assert!(response["result"]["isError"] == json!(true) || refused, "trial {i}: {response}");
            }
        }
    }
}

#[test]
fn a_delete_racing_a_call_never_leaves_its_processes_behind() {
    const SERVERS: usize = 3;
    const TRIALS: usize = 100;
    let sandbox = Sandbox::new();
    let servers: Vec<_> =
        (0..SERVERS).map(|_| start_server(&sandbox, &["--http", "0"], Some(TOKEN))).collect();
    let workers: Vec<_> = servers
        .iter()
        .enumerate()
        .map(|(s, (_, line))| {
            let authority = authority(line);
            std::thread::spawn(move || delete_races(&authority, s * TRIALS, TRIALS))
        })
        .collect();
    for worker in workers {
        worker.join().expect("trials");
    }
    for (server, _) in servers {
        server.stop();
    }
}

#[test]
fn the_end_of_stdin_during_a_running_call_exits_only_once_its_processes_are_gone() {
    let sandbox = Sandbox::outside_tmp();
    let mut server = StdioServer::start(&sandbox);
    let (job, foreground) = (marker(), marker());
    server.send(&call(2, background(&format!("sleep {job}"))));
    assert!(text_of(&server.response(2).expect("started")).starts_with("started background job "));
    server.send(&call(3, bash(&format!("sleep {foreground}; echo never"))));
    wait_for(&job, 1);
    wait_for(&foreground, 1);
    let closed = Instant::now();
    drop(server.stdin.take());
    let status = server.child.wait().expect("wait");
    let took = closed.elapsed();
    assert_eq!(status.code(), Some(0));
    assert_eq!(alive_with(&job), Vec::<u32>::new(), "a job outlived the server's exit");
    assert_eq!(alive_with(&foreground), Vec::<u32>::new(), "the running call outlived the server's exit");
    // The call was aborted at once (not after the SDK's 5 s drain), and answered as such.
    assert!(took < Duration::from_secs(4), "the exit took {took:?}");
    let answer = server.response(3).expect("the aborted call's answer");
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
}

#[test]
fn a_stdio_client_killed_mid_call_takes_only_its_own_processes_along() {
    let sandbox = Sandbox::outside_tmp();
    let mut other = StdioServer::start(&sandbox);
    let kept = marker();
    other.send(&call(2, background(&format!("sleep {kept}"))));
    let job = text_of(&other.response(2).expect("started"));
    let mut server = StdioServer::start(&sandbox);
    let (job_marker, foreground) = (marker(), marker());
    server.send(&call(2, background(&format!("sleep {job_marker}"))));
    server.response(2).expect("started");
    server.send(&call(3, bash(&format!("sleep {foreground}"))));
    wait_for(&foreground, 1);
    wait_for(&job_marker, 1);
    wait_for(&kept, 1);
    // The client dies: both ends of its pipes close at once.
    drop(server.stdin.take());
    drop(server.stdout.take());
    gone_within(&foreground, GONE_WITHIN, "the killed client's call");
    gone_within(&job_marker, GONE_WITHIN, "the killed client's job");
    assert_eq!(server.child.wait().expect("wait").code(), Some(0));
    // The other server's session is untouched.
    assert_eq!(alive_with(&kept).len(), 1, "another session's job was killed");
    let id = job.strip_prefix("started background job ").expect("job id");
    other.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "job_kill", "arguments": {"job_id": id}}}));
    other.response(3).expect("killed");
}

#[test]
fn an_http_client_gone_mid_call_takes_only_that_calls_processes_along() {
    let sandbox = Sandbox::outside_tmp();
    let (server, line) = start_server(&sandbox, &["--http", "0"], Some(TOKEN));
    let authority = authority(&line);
    let mut other = Conn::open(&authority);
    let other_session = other.open_session();
    let kept = marker();
    let started =
        other.exchange("POST", Some(&other_session), Some(&call(2, background(&format!("sleep {kept}")))));
    assert!(text_of(&started.response(2).expect("started")).starts_with("started background job "));
    for how in [Shutdown::Both, Shutdown::Write] {
        let mut conn = Conn::open(&authority);
        let session = conn.open_session();
        let foreground = marker();
        conn.send("POST", Some(&session), Some(&call(2, bash(&format!("sleep {foreground}")))));
        wait_for(&foreground, 1);
        // The client goes away (a killed process closes its socket).
        conn.0.shutdown(how).expect("shutdown");
        drop(conn);
        gone_within(&foreground, GONE_WITHIN, &format!("the dropped connection's call ({how:?})"));
        // Its session goes on.
        let mut again = Conn::open(&authority);
        let reply = again.exchange("POST", Some(&session), Some(&call(3, bash("echo still here"))));
        assert_eq!(text_of(&reply.response(3).expect("answered")), "still here\n");
    }
    assert_eq!(alive_with(&kept).len(), 1, "another session's job was killed");
    let listed = other.exchange(
        "POST",
        Some(&other_session),
        Some(&json!({"jsonrpc": "2.0", "id": 3,
        "method": "tools/call", "params": {"name": "job_list", "arguments": {}}})),
    );
    assert!(text_of(&listed.response(3).expect("listed")).contains("] running"), "{listed:?}");
    server.stop();
}

#[test]
fn initialize_beyond_the_session_cap_is_refused_with_503_naming_the_cap() {
    let sandbox = Sandbox::new();
    let (server, line) = start_server(&sandbox, &["--http", "0", "--max-sessions", "2"], Some(TOKEN));
    let authority = authority(&line);
    let mut conn = Conn::open(&authority);
    let first = conn.open_session();
    let _second = conn.open_session();
    let refused = conn.exchange("POST", None, Some(&initialize(7)));
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.header("content-type"), Some("application/json"));
    assert_eq!(
        refused.messages(),
        [json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message":
            "Service Unavailable: the server already has its maximum of 2 MCP sessions (--max-sessions 2); \
             end a session (HTTP DELETE) or retry later"}})]
    );
    // A session that ends gives its place back.
    assert_eq!(conn.exchange("DELETE", Some(&first), None).status, 204);
    let _third = conn.open_session();
    assert_eq!(conn.exchange("POST", None, Some(&initialize(8))).status, 503);
    server.stop();

    let out = sandbox.run(&["mcp", "--http", "0", "--max-sessions", "0"], "");
    assert_eq!(out.code, Some(2), "at least one session: {out:?}");
    let out = sandbox.run(&["mcp", "--max-sessions", "3"], "");
    assert_eq!(out.code, Some(2), "--max-sessions needs --http: {out:?}");
}

#[test]
fn a_keep_alive_client_gets_plain_json_answers_and_streams_when_needed() {
    let sandbox = Sandbox::new();
    let (server, line) = start_server(&sandbox, &["--http", "0"], Some(TOKEN));
    let authority = authority(&line);
    let mut conn = Conn::open(&authority);
    let init = conn.exchange("POST", None, Some(&initialize(1)));
    assert_eq!(init.status, 200);
    assert_eq!(init.header("content-type"), Some("application/json"), "{init:?}");
    let session = init.header("mcp-session-id").expect("session").to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(conn.exchange("POST", Some(&session), Some(&initialized)).status, 202);
    // Every call on the one connection, each answered by one JSON document.
    for id in 2..40 {
        let reply = conn.exchange("POST", Some(&session), Some(&call(id, bash("true"))));
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.header("content-type"), Some("application/json"), "{reply:?}");
        assert!(reply.header("content-length").is_some(), "{reply:?}");
        assert_eq!(text_of(&reply.response(id).expect("answered")), "(no output)");
    }
    // A call that reports progress first still streams, on the same connection.
    let mut slow = call(50, bash("sleep 1.6; echo late"));
    slow["params"]["_meta"] = json!({"progressToken": "p-50"});
    let streamed = conn.exchange("POST", Some(&session), Some(&slow));
    assert_eq!(streamed.header("content-type"), Some("text/event-stream"), "{streamed:?}");
    let messages = streamed.messages();
    assert!(messages.iter().any(|m| m["method"] == json!("notifications/progress")), "{messages:?}");
    assert_eq!(text_of(&streamed.response(50).expect("answered")), "late\n");
    let after = conn.exchange("POST", Some(&session), Some(&call(51, bash("echo again"))));
    assert_eq!(text_of(&after.response(51).expect("answered")), "again\n");
    server.stop();
}
