//! Nothing outlives a killed harness: `dsh-bash call`, `batch` and `mcp` (stdio) killed with
//! `SIGKILL` while their commands run — in the foreground and as background jobs, unconfined
//! and confined, with children in the command's group, in a new session and in the
//! background — leave no process of theirs alive moments later. (`mcp --http`: see
//! `security_http`.)

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{Sandbox, modes};

/// A `sleep` duration no other process on the host uses: the marker the process table is
/// scanned for.
pub(crate) fn marker() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("900.{}{:03}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst))
}

/// Live (not zombie) processes whose command line holds `marker`.
pub(crate) fn alive_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next()).unwrap_or(None);
        if state.is_some_and(|s| s != 'Z') {
            found.push(pid);
        }
    }
    found
}

/// A command that leaves `sleep <marker>` in its group, in a new session, and in a child
/// shell, then sleeps itself.
pub(crate) fn spreading(marker: &str) -> String {
    format!(
        "sleep {marker} & setsid sleep {marker} & bash -c 'sleep {marker}; true' & (sleep {marker} &); sleep {marker}"
    )
}

/// Waits until `count` marked processes run; panics after 20 s.
pub(crate) fn wait_for(marker: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive_with(marker).len() < count {
        assert!(Instant::now() < deadline, "the marked processes never started ({:?})", alive_with(marker));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long the marked processes may outlive the harness here: the guardian takes well under
/// a second on an idle machine; a loaded test runner (2 cores, tests in parallel) gets twice that.
const OUTLIVE_BOUND: Duration = Duration::from_secs(2);

/// SIGKILLs `harness` and asserts every marked process is gone within [`OUTLIVE_BOUND`].
pub(crate) fn kill_and_check(harness: &mut Child, marker: &str, what: &str) {
    // SAFETY: kill with a pid this test spawned and has not reaped.
    unsafe { libc::kill(harness.id() as i32, libc::SIGKILL) };
    let _ = harness.wait();
    let killed_at = Instant::now();
    while !alive_with(marker).is_empty() && killed_at.elapsed() < OUTLIVE_BOUND {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = alive_with(marker);
    let described: Vec<String> = left
        .iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            format!("{} [{}]", stat.trim_end(), String::from_utf8_lossy(&cmdline).replace('\0', " "))
        })
        .collect();
    for pid in &left {
        // SAFETY: cleaning up what the harness should have taken with it.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "{what}: {} process(es) outlived the killed harness by {OUTLIVE_BOUND:?}: {described:#?}",
        left.len()
    );
}

fn spawn(sandbox: &Sandbox, args: &[&str]) -> Child {
    sandbox
        .command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dsh-bash")
}

#[test]
fn a_killed_call_takes_its_command_tree_along() {
    // Not beside a fork bomb of the world suite, which would starve the processes that end the tree.
    let _quiet = crate::world::beside_host_load();
    for mode in modes() {
        let sandbox = Sandbox::outside_tmp();
        let marker = marker();
        let args = json!({"command": spreading(&marker), "description": "d"}).to_string();
        let mut all = mode.clone();
        all.extend(["call", "bash", &args]);
        let mut harness = spawn(&sandbox, &all);
        wait_for(&marker, 5);
        kill_and_check(&mut harness, &marker, &format!("call {mode:?}"));
    }
}

#[test]
fn a_killed_batch_takes_its_jobs_along() {
    // Not beside a fork bomb of the world suite, which would starve the processes that end the tree.
    let _quiet = crate::world::beside_host_load();
    for mode in modes() {
        let sandbox = Sandbox::outside_tmp();
        let (job, foreground) = (marker(), marker());
        let cwd = sandbox.path().to_str().expect("utf-8").to_owned();
        let line = |id: u32, command: String, background: bool| {
            let mut args = json!({"command": command, "description": "d"});
            if background {
                args["run_in_background"] = json!(true);
            }
            json!({"tool": "bash", "args": args, "session": "k", "cwd": cwd, "id": id}).to_string() + "\n"
        };
        let mut all = mode.clone();
        all.push("batch");
        let mut harness = spawn(&sandbox, &all);
        let mut stdin = harness.stdin.take().expect("stdin");
        stdin.write_all(line(1, spreading(&job), true).as_bytes()).expect("write");
        stdin.write_all(line(2, spreading(&foreground), false).as_bytes()).expect("write");
        stdin.flush().expect("flush");
        wait_for(&job, 5);
        wait_for(&foreground, 5);
        kill_and_check(&mut harness, &job, &format!("batch job {mode:?}"));
        kill_and_check(&mut harness, &foreground, &format!("batch foreground {mode:?}"));
        drop(stdin);
    }
}

#[test]
fn a_killed_stdio_server_takes_its_jobs_along() {
    // Not beside a fork bomb of the world suite, which would starve the processes that end the tree.
    let _quiet = crate::world::beside_host_load();
    for mode in modes() {
        let sandbox = Sandbox::outside_tmp();
        let marker = marker();
        let mut all = mode.clone();
        all.push("mcp");
        let mut harness = spawn(&sandbox, &all);
        let mut stdin = harness.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(harness.stdout.take().expect("stdout"));
        let mut send = |message: serde_json::Value| {
            stdin.write_all(format!("{message}\n").as_bytes()).expect("write");
            stdin.flush().expect("flush");
        };
        send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "killed-harness-test", "version": "1"}}}));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("initialize answer");
        send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash", "arguments": {
            "command": spreading(&marker), "description": "d", "run_in_background": true}}}),
        );
        wait_for(&marker, 5);
        kill_and_check(&mut harness, &marker, &format!("mcp stdio {mode:?}"));
    }
}
