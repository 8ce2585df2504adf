//! Spill retention: a session's quota, the harness's total cap (ended sessions' files go
//! first, oldest first), and background jobs' spill files going with their session — through
//! the MCP HTTP server and `batch`.

use std::path::PathBuf;
use std::time::Duration;

use dsh_test_support::http::Conn;
use serde_json::{Value, json};

use crate::harness::Sandbox;
use crate::mcp::{authority, start_server};

const TOKEN: &str = "tok-5e1a9c03d7";

/// A command whose stdout (300,001 bytes) outgrows memory and spills.
const SPILLING: &str = "head -c 300000 /dev/zero | tr '\\0' s; echo";

/// The `bash` result of `command` in `session`: its text and its structured value.
fn bash(conn: &mut Conn, session: &str, id: u64, command: &str) -> (String, Value) {
    let reply =
        conn.call(session, id, "bash", json!({"command": command, "description": "d"})).expect("call");
    let response = reply.response(id).unwrap_or_else(|| panic!("{reply:?}"));
    let result = &response["result"];
    let text = result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{response}")).to_owned();
    (text, result["structuredContent"].clone())
}

/// The spill file a spilling call names.
fn spilled(conn: &mut Conn, session: &str, id: u64) -> PathBuf {
    let (text, value) = bash(conn, session, id, SPILLING);
    let path = value["stdout"]["spillPath"].as_str().unwrap_or_else(|| panic!("a spill path: {value}"));
    assert!(text.ends_with(&format!("[output truncated; full output: {path}]")), "{}", tail(&text));
    PathBuf::from(path)
}

/// A spilling call whose spill was not kept: the contract's `(unavailable)`, no path.
fn not_kept(conn: &mut Conn, session: &str, id: u64) {
    let (text, value) = bash(conn, session, id, SPILLING);
    assert!(text.ends_with("[output truncated; full output: (unavailable)]"), "{}", tail(&text));
    assert_eq!(value["stdout"]["truncated"], json!(true), "{value}");
    assert_eq!(value["stdout"]["spillPath"], Value::Null, "{value}");
}

fn tail(text: &str) -> &str {
    &text[text.len().saturating_sub(300)..]
}

/// A server with the composition `toml`, and two connections with a session each.
fn server_with(sandbox: &Sandbox, toml: &str) -> (crate::mcp::Server, [(Conn, String); 2]) {
    let config = sandbox.write("dsh.toml", toml);
    let (server, line) =
        start_server(sandbox, &["--http", "0", "--config", config.to_str().expect("utf-8")], Some(TOKEN));
    let authority = authority(&line);
    let sessions = ["first", "second"].map(|client| {
        let mut conn = Conn::open(&authority, TOKEN, Duration::from_secs(120)).expect("connect");
        let session = conn.open_session(client).expect("a session");
        (conn, session)
    });
    (server, sessions)
}

#[test]
fn a_session_past_its_spill_quota_is_told_unavailable_and_keeps_what_it_was_told() {
    let sandbox = Sandbox::new();
    let (server, [(mut first, a), (mut second, b)]) =
        server_with(&sandbox, "[subprocess]\nspillSessionQuota = \"400k\"\n");
    let kept = spilled(&mut first, &a, 1);
    // A second 300 kB spill would hold 600 kB for this session: not kept.
    not_kept(&mut first, &a, 2);
    assert!(kept.exists(), "a spill file the session was told of went: {kept:?}");
    // Another session has a quota of its own.
    let other = spilled(&mut second, &b, 1);
    assert!(other.exists(), "{other:?}");
    assert_eq!(first.delete(&a).expect("delete"), 204);
    assert!(!kept.exists(), "{kept:?}");
    assert!(other.exists(), "{other:?}");
    server.stop();
}

#[test]
fn under_the_total_cap_ended_sessions_files_go_oldest_first_and_open_sessions_files_stay() {
    let sandbox = Sandbox::new();
    let toml =
        "[subprocess]\nspillTotalCap = \"700k\"\nspillSessionQuota = \"none\"\nspillKeepEnded = true\n";
    let (server, [(mut first, a), (mut second, b)]) = server_with(&sandbox, toml);
    let oldest = spilled(&mut first, &a, 1);
    let older = spilled(&mut first, &a, 2);
    assert_eq!(first.delete(&a).expect("delete"), 204);
    // Kept after the session ended: the cap does not need their room yet.
    assert!(oldest.exists() && older.exists(), "{oldest:?} {older:?}");
    let newer = spilled(&mut second, &b, 1);
    assert!(!oldest.exists(), "the oldest ended file was not removed for room: {oldest:?}");
    assert!(older.exists(), "more than the room needed went: {older:?}");
    let newest = spilled(&mut second, &b, 2);
    assert!(!older.exists(), "{older:?}");
    // Only the open session's own files are left: nothing more is removed for room.
    not_kept(&mut second, &b, 3);
    assert!(newer.exists() && newest.exists(), "{newer:?} {newest:?}");
    server.stop();
}

/// The spill paths a background read's notice names.
fn noticed_paths(text: &str) -> Vec<PathBuf> {
    let marker = "[some output was dropped from memory; full output: ";
    let at = text.find(marker).unwrap_or_else(|| panic!("no dropped-output notice: {}", tail(text)));
    let rest = &text[at + marker.len()..];
    let list = &rest[..rest.find(']').expect("notice end")];
    list.split(", ").map(PathBuf::from).collect()
}

/// Starts a spilling background job in `session` and waits for it: its spill files.
fn spilling_job(conn: &mut Conn, session: &str) -> Vec<PathBuf> {
    let args = json!({"command": SPILLING, "description": "d", "run_in_background": true});
    let reply = conn.call(session, 1, "bash", args).expect("call");
    let started = reply.response(1).unwrap_or_else(|| panic!("{reply:?}"));
    let job = started["result"]["structuredContent"]["jobId"].as_str().unwrap_or_else(|| panic!("{started}"));
    let reply = conn.call(session, 2, "job_output", json!({"job_id": job, "wait": true})).expect("call");
    let read = reply.response(2).unwrap_or_else(|| panic!("{reply:?}"));
    let paths = noticed_paths(read["result"]["content"][0]["text"].as_str().expect("text"));
    assert!(paths.iter().all(|p| p.exists()), "{paths:?}");
    paths
}

#[test]
fn a_background_jobs_spill_files_go_when_its_session_ends_and_no_other_sessions() {
    let sandbox = Sandbox::new();
    let (server, [(mut first, a), (mut second, b)]) = server_with(&sandbox, "");
    let gone = spilling_job(&mut first, &a);
    let kept = spilling_job(&mut second, &b);
    assert_eq!(first.delete(&a).expect("delete"), 204);
    assert!(gone.iter().all(|p| !p.exists()), "an ended session's job spill files stay: {gone:?}");
    assert!(kept.iter().all(|p| p.exists()), "another session's job spill files went: {kept:?}");
    server.stop();
}

#[test]
fn batch_sessions_have_a_spill_quota_each() {
    let sandbox = Sandbox::new();
    let config = sandbox.write("dsh.toml", "[subprocess]\nspillSessionQuota = \"400k\"\n");
    let cwd = sandbox.path();
    let line = |session: &str, id: u64| {
        format!(
            "{}\n",
            json!({"tool": "bash", "session": session, "cwd": cwd, "id": id,
                "args": {"command": SPILLING, "description": "d"}})
        )
    };
    let input = [line("s1", 1), line("s1", 2), line("s2", 3)].concat();
    let out = sandbox.run(&["--config", config.to_str().expect("utf-8"), "batch"], &input);
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = out.json_lines();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    let text = |n: usize| lines[n]["content"][0]["text"].as_str().expect("text").to_owned();
    let path = |n: usize| lines[n]["structured"]["stdout"]["spillPath"].as_str().map(str::to_owned);
    let first = path(0).unwrap_or_else(|| panic!("a spill path: {}", lines[0]["structured"]));
    assert!(text(0).ends_with(&format!("[output truncated; full output: {first}]")), "{}", tail(&text(0)));
    assert!(text(1).ends_with("[output truncated; full output: (unavailable)]"), "{}", tail(&text(1)));
    assert_eq!(path(1), None);
    assert!(path(2).is_some(), "another session's spill was refused: {}", lines[2]);
}
