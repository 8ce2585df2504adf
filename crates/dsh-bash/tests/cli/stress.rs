//! `dsh-bash mcp` under a concurrency stress: what one call or one session leaves behind
//! (memory that never comes back), the arrival order of a session's pipelined calls, and the
//! races of a job's end with a cancelled `job_output` wait and with `job_kill`.
//!
//! The races are repeated hundreds of times (spread over a few servers, so the trials run
//! side by side) and must come out right every time.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_test_support::http;
use serde_json::{Value, json};

use crate::harness::Sandbox;
use crate::mcp::{authority, start_server};

/// How long any one answer may take before the test gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// `dsh-bash mcp` on stdio with one initialized session, driven line by line.
struct McpStdio {
    child: Child,
    stdin: ChildStdin,
    incoming: mpsc::Receiver<Value>,
    /// Messages read but not asked for yet.
    held: VecDeque<Value>,
    next_id: i64,
}

impl McpStdio {
    fn start(sandbox: &Sandbox) -> Self {
        Self::start_with(sandbox, &[])
    }

    /// [`McpStdio::start`] with composition options.
    fn start_with(sandbox: &Sandbox, options: &[&str]) -> Self {
        let root = sandbox.path().canonicalize().expect("canonical");
        let mut args = options.to_vec();
        args.extend(["--workspace-root", root.to_str().expect("utf-8"), "mcp"]);
        let mut child = sandbox
            .command(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, incoming) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                let message =
                    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                if tx.send(message).is_err() {
                    return;
                }
            }
        });
        let mut server = Self { child, stdin, incoming, held: VecDeque::new(), next_id: 1 };
        let init = server.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "stress", "version": "0"}}),
        );
        server.response(init);
        server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").expect("write");
    }

    /// Sends a request without waiting; returns its id.
    fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn call(&mut self, tool: &str, arguments: Value) -> i64 {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    fn cancel(&mut self, id: i64) {
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "stress"}}));
    }

    /// Waits for the response to `id`, holding every other message for later.
    fn response(&mut self, id: i64) -> Value {
        if let Some(at) = self.held.iter().position(|m| m["id"] == json!(id)) {
            return self.held.remove(at).expect("held");
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message =
                self.incoming.recv_timeout(left).unwrap_or_else(|e| panic!("no response to {id}: {e}"));
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
            self.held.push_back(message);
        }
    }

    /// The text of a call's result.
    fn text(&mut self, id: i64) -> String {
        text_of(&self.response(id))
    }

    /// Everything that arrived within `quiet` of the last message, plus what was held.
    fn drain(&mut self, quiet: Duration) -> Vec<Value> {
        while let Ok(message) = self.incoming.recv_timeout(quiet) {
            self.held.push_back(message);
        }
        self.held.drain(..).collect()
    }

    /// The server's resident set size, in KiB.
    fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id())
    }
}

impl Drop for McpStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).expect("kB").parse().expect("number")
}

/// The text of a call's result (its first block: notices waiting in the session's inbox
/// follow it as blocks of their own).
fn text_of(response: &Value) -> String {
    let first = &response["result"]["content"][0]["text"];
    first.as_str().unwrap_or_else(|| panic!("{response}")).to_owned()
}

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "stress"})
}

fn background(command: &str) -> Value {
    json!({"command": command, "description": "stress", "run_in_background": true})
}

/// The job id of a `started background job <id>` result.
fn job_id(text: &str) -> String {
    text.strip_prefix("started background job ").unwrap_or_else(|| panic!("{text}")).to_owned()
}

/// Runs `calls` foreground `true` calls, `window` of them in flight at a time.
fn run_true_calls(server: &mut McpStdio, calls: usize, window: usize) {
    let mut sent = VecDeque::new();
    for _ in 0..calls {
        sent.push_back(server.call("bash", bash("true")));
        if sent.len() == window {
            let id = sent.pop_front().expect("sent");
            assert_eq!(server.text(id), "(no output)");
        }
    }
    for id in sent {
        assert_eq!(server.text(id), "(no output)");
    }
}

/// A finished foreground call releases everything it used (its deadline's watcher, both abort
/// signals, its turn's events): 5,000 calls over one stdio session leave the server's memory
/// where it was. (Before: ≈1.4 KB per call that never came back.)
#[test]
fn foreground_calls_leave_no_memory_behind() {
    let sandbox = Sandbox::new();
    let mut server = McpStdio::start(&sandbox);
    // Warm up: pools, caches and the session's bounded event window fill first.
    run_true_calls(&mut server, 600, 8);
    let before = server.rss_kib();
    const CALLS: usize = 5_000;
    run_true_calls(&mut server, CALLS, 8);
    let after = server.rss_kib();
    let growth = after.saturating_sub(before);
    eprintln!(
        "RSS {before} KiB -> {after} KiB over {CALLS} calls: {:.1} bytes per call",
        growth as f64 * 1024.0 / CALLS as f64
    );
    assert!(growth < 1024, "RSS grew {growth} KiB over {CALLS} calls");
}

const TOKEN: &str = "tok-stress-71c3";

/// One session of one call on its own connection: opened, called, deleted.
fn one_call_session(authority: &str) {
    let mut conn = http::Conn::open(authority, TOKEN, PATIENCE).expect("connect");
    let session = conn.open_session("stress").expect("a session");
    let reply = conn.call(&session, 2, "bash", bash("true")).expect("the call's reply");
    assert_eq!(reply.status, 200);
    assert_eq!(text_of(&reply.response(2).expect("the call's response")), "(no output)");
    let deleted = conn.delete(&session).expect("DELETE");
    assert!(matches!(deleted, 200 | 204), "DELETE: {deleted}");
}

/// Sessions of one call each, opened and deleted one after another, leave nothing behind
/// either. (Before: RSS grew linearly, 7.5 → 27.6 MB over 14,000 sessions.)
#[test]
fn one_call_http_sessions_leave_no_memory_behind() {
    let sandbox = Sandbox::new();
    let (server, line) = start_server(&sandbox, &["--http", "0"], Some(TOKEN));
    let authority = authority(&line);
    let pid = server.id();
    for _ in 0..300 {
        one_call_session(&authority);
    }
    // A closed session is disposed in the background: let the last ones go.
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(pid);
    const SESSIONS: usize = 2_000;
    for _ in 0..SESSIONS {
        one_call_session(&authority);
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = rss_kib(pid);
    let growth = after.saturating_sub(before);
    eprintln!(
        "RSS {before} KiB -> {after} KiB over {SESSIONS} sessions: {:.1} bytes per session",
        growth as f64 * 1024.0 / SESSIONS as f64
    );
    assert!(growth < 1024, "RSS grew {growth} KiB over {SESSIONS} sessions");
    server.stop();
}

/// Calls of one session run in the order they arrive, even when the client sends them all
/// at once: 30 pipelined appends land in order, and background jobs get their ids in that
/// order too. (Before: `0, 29, 1, 2, …` in every run.)
#[test]
fn pipelined_calls_of_one_session_run_in_arrival_order() {
    let sandbox = Sandbox::new();
    let mut server = McpStdio::start(&sandbox);
    const CALLS: usize = 30;
    for round in 0..6 {
        let file = sandbox.path().join(format!("order-{round}"));
        let quoted = crate::harness::shell_quote(file.display());
        let ids: Vec<i64> =
            (0..CALLS).map(|k| server.call("bash", bash(&format!("echo {k} >> {quoted}")))).collect();
        for id in ids {
            assert_eq!(server.text(id), "(no output)");
        }
        let landed = std::fs::read_to_string(&file).expect("appended");
        let expected: String = (0..CALLS).map(|k| format!("{k}\n")).collect();
        assert_eq!(landed, expected, "round {round}");
        // Fewer than the per-session job limit, so that every start is admitted.
        let ids: Vec<i64> = (0..8).map(|_| server.call("bash", background("true"))).collect();
        let jobs: Vec<u64> = ids
            .into_iter()
            .map(|id| job_id(&server.text(id)).strip_prefix("bash-").expect("bash-N").parse().expect("N"))
            .collect();
        assert!(jobs.windows(2).all(|w| w[1] == w[0] + 1), "round {round}: {jobs:?}");
        for job in jobs {
            let done = server.call("job_output", json!({"job_id": format!("bash-{job}"), "wait": true}));
            server.text(done);
        }
    }
}

/// One cancelled-wait trial: the job, the marker it prints, the wait's request id and what
/// the read after the job's end returned.
struct CancelTrial {
    job: String,
    marker: String,
    wait: i64,
    read: String,
}

/// One server's share of the cancelled-wait trials.
fn cancelled_wait_trials(first: usize, trials: usize) -> (McpStdio, Sandbox, Vec<CancelTrial>) {
    let sandbox = Sandbox::new();
    let mut server = McpStdio::start(&sandbox);
    let mut done = Vec::new();
    for i in first..first + trials {
        let marker = format!("out-{i}");
        let started = server.call("bash", background(&format!("sleep 0.02; echo {marker}")));
        let job = job_id(&server.text(started));
        let wait = server.call("job_output", json!({"job_id": job, "wait": true}));
        // Spread the cancellations over the job's end (its 20 ms sleep, plus bash's start).
        std::thread::sleep(Duration::from_micros((i as u64 * 7919) % 35_000));
        server.cancel(wait);
        // Wait for the end without reporting it (a listing reports nothing).
        loop {
            let list = server.call("job_list", json!({}));
            let listing = server.text(list);
            let line = listing.lines().find(|l| l.starts_with(&format!("{job} ["))).expect("listed");
            if !line.contains("] running") && !line.contains("] stopping") {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let read = server.call("job_output", json!({"job_id": job}));
        let read = server.text(read);
        done.push(CancelTrial { job, marker, wait, read });
    }
    (server, sandbox, done)
}

/// A `job_output wait: true` cancelled while its job ends either answers (the cancellation
/// came after it read: the output and the end are in its answer, and no notice follows) or
/// reads nothing (the output stays for the next read, and the completion notice goes out).
/// Never the output lost with the answer, never the notice suppressed by a wait that told
/// nobody. (Before: 6 of 250 trials lost one or the other.)
#[test]
fn a_cancelled_wait_racing_the_jobs_end_loses_neither_output_nor_notice() {
    const SERVERS: usize = 3;
    const TRIALS: usize = 110;
    let workers: Vec<_> =
        (0..SERVERS).map(|s| std::thread::spawn(move || cancelled_wait_trials(s * TRIALS, TRIALS))).collect();
    let (mut answered, mut cancelled, mut quiet) = (0, 0, 0);
    for worker in workers {
        let (mut server, _sandbox, trials) = worker.join().expect("trials");
        let rest = server.drain(Duration::from_millis(500));
        let notices: Vec<String> = rest
            .iter()
            .filter(|m| m["method"] == json!("notifications/message"))
            .filter_map(|m| m["params"]["data"].as_str().map(str::to_owned))
            .collect();
        for trial in trials {
            let ended = "[status: completed, exit code: 0]";
            let notified =
                notices.iter().filter(|n| n.starts_with(&format!("background job {} (", trial.job))).count();
            match rest.iter().find(|m| m["id"] == json!(trial.wait) && m.get("method").is_none()) {
                Some(response) => {
                    answered += 1;
                    assert_eq!(text_of(response), format!("{}\n{ended}", trial.marker), "{}", trial.job);
                    assert_eq!(trial.read, format!("(no new output)\n{ended}"), "{}", trial.job);
                    // No notice when the wait was pending at the end (it reported the end);
                    // one when the job had ended before the wait began.
                    assert!(notified <= 1, "{}: {notified} notices", trial.job);
                    quiet += usize::from(notified == 0);
                }
                None => {
                    cancelled += 1;
                    assert_eq!(trial.read, format!("{}\n{ended}", trial.marker), "{}", trial.job);
                    assert_eq!(notified, 1, "{}: nobody was told of the end but the notice", trial.job);
                }
            }
        }
    }
    eprintln!("{answered} waits answered ({quiet} of them reporting the end), {cancelled} cancelled");
    assert!(quiet > 0 && cancelled > 0, "the trials straddle the job's end");
}

/// Whether process `pid` has exited (a zombie, or gone).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
            matches!(state, Some('Z' | 'X'))
        }
        Err(_) => true,
    }
}

/// One server's share of the kill trials: `(job, leader exited before the kill, the kill's
/// text, the final status line)`.
fn kill_trials(first: usize, trials: usize) -> Vec<(String, bool, String, String)> {
    let sandbox = Sandbox::new();
    let mut server = McpStdio::start(&sandbox);
    let mut done = Vec::new();
    for i in first..first + trials {
        // Every other job leaves a detached child holding its pipes (killed by containment
        // once the leader exits); the others end plainly.
        let command = if i % 2 == 0 { "echo $$; (sleep 5 &); exit 0" } else { "echo $$; exit 0" };
        let started = server.call("bash", background(command));
        let job = job_id(&server.text(started));
        let pid: u32 = loop {
            let read = server.call("job_output", json!({"job_id": job}));
            let text = server.text(read);
            if let Some(pid) = text.lines().next().and_then(|l| l.parse().ok()) {
                break pid;
            }
        };
        std::thread::sleep(Duration::from_micros((i as u64 * 3571) % 4_000));
        let before = exited(pid);
        let kill = server.call("job_kill", json!({"job_id": job}));
        let kill = server.text(kill);
        let end = server.call("job_output", json!({"job_id": job, "wait": true}));
        let end = server.text(end);
        let status = end.lines().last().expect("a status line").to_owned();
        done.push((job, before, kill, status));
    }
    done
}

/// `job_kill` racing a natural exit reports what happened: a leader that had exited (with
/// its pipes still draining, or a detached child holding them) completed with its exit
/// code; one that had not is killed by a signal. (Before: `killed, killed before exit` in 13
/// of 300 trials, and every time a detached child held the pipes.)
#[test]
fn a_kill_racing_the_natural_exit_reports_what_happened() {
    const SERVERS: usize = 3;
    const TRIALS: usize = 110;
    let workers: Vec<_> =
        (0..SERVERS).map(|s| std::thread::spawn(move || kill_trials(s * TRIALS, TRIALS))).collect();
    let completed = "[status: completed, exit code: 0]";
    let (mut after_exit, mut while_draining) = (0, 0);
    for worker in workers {
        for (job, exited_before, kill, status) in worker.join().expect("trials") {
            if exited_before {
                after_exit += 1;
                if kill == format!("requested cancellation of job {job}") {
                    while_draining += 1;
                }
                assert_eq!(status, completed, "{job}: killed after its leader exited ({kill})");
            } else {
                let signalled = ["[status: killed, signal: SIGTERM]", "[status: killed, signal: SIGKILL]"];
                // A leader alive when the test looked may still exit before the kill
                // reaches it: then it completed, or (if it exited between the server's look
                // and its signal) the kill came first.
                assert!(
                    status == completed
                        || signalled.contains(&status.as_str())
                        || status == "[status: killed, killed before exit]",
                    "{job}: {status}"
                );
            }
        }
    }
    eprintln!(
        "{after_exit} kills after the leader's exit, {while_draining} of them while the job was still running"
    );
    assert!(after_exit > 0, "some kills come after the leader's exit");
}

/// Finished jobs read to the end keep no output in memory: 20 jobs of 4 MB each, every one
/// read to its end, leave the server's memory about where it was. (Before: +81 MB, held
/// until the session ended.)
#[test]
fn jobs_read_to_the_end_release_their_output() {
    let sandbox = Sandbox::new();
    // Room for each job's whole output in memory (the default keeps a 64 kB tail).
    let config = sandbox.write("big.toml", "[bash-local]\nmaxOutputBytes = 8000000\n");
    let mut server = McpStdio::start_with(&sandbox, &["--config", config.to_str().expect("utf-8")]);
    const JOBS: usize = 20;
    const BYTES: usize = 4_000_000;
    let command = format!("head -c {BYTES} /dev/zero | tr '\\0' x");
    let read_all = |server: &mut McpStdio| {
        let started = server.call("bash", background(&command));
        let job = job_id(&server.text(started));
        let end = server.call("job_output", json!({"job_id": job, "wait": true}));
        let text = server.text(end);
        assert!(
            text.ends_with("[status: completed, exit code: 0]"),
            "{}",
            &text[text.len().saturating_sub(200)..]
        );
        // The model-facing text is bounded; the read consumed the whole output.
        let again = server.call("job_output", json!({"job_id": job}));
        assert_eq!(server.text(again), "(no new output)\n[status: completed, exit code: 0]");
    };
    read_all(&mut server);
    read_all(&mut server);
    let before = server.rss_kib();
    for _ in 0..JOBS {
        read_all(&mut server);
    }
    let after = server.rss_kib();
    let growth = after.saturating_sub(before);
    eprintln!("RSS {before} KiB -> {after} KiB over {JOBS} jobs of {BYTES} bytes read to the end");
    assert!(growth < 16 * 1024, "RSS grew {growth} KiB over {JOBS} finished jobs read to the end");
}
