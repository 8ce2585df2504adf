//! The network axis: under `--network deny` a confined command reaches nothing of the host's
//! network — not the host's loopback servers, not DNS, not UDP — except the hosts the
//! allowlist names, through the harness's proxy; under `--network ask` an unlisted host is
//! asked for once per call. Every listener here is the test's own, on the host's loopback.

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::cell::{Mode, Outcome, World};
use super::host::q;
use super::matrix::{Skip, over_matrix};

/// A host-side loopback HTTP server that answers every request with `body` and counts the
/// connections it accepted.
struct Server {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Server {
    fn start(body: &'static str) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local addr").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes());
            }
        });
        Server { port, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// `dsh-bash FLAGS --sandbox MODE call --json bash COMMAND`.
fn call_as(world: &World, mode: Mode, flags: &[&str], command: &str) -> Outcome {
    let mut args: Vec<String> = flags.iter().map(|s| (*s).to_owned()).collect();
    args.extend(world.call_args(mode, None, command));
    let output = world.dsh(&args).output().expect("spawn dsh-bash");
    Outcome::parse(&output)
}

/// `dsh-bash FLAGS --sandbox workspace-write call --json bash COMMAND`.
fn call(world: &World, flags: &[&str], command: &str) -> Outcome {
    let mut args: Vec<String> = flags.iter().map(|s| (*s).to_owned()).collect();
    args.extend(world.call_args(Mode::WorkspaceWrite, None, command));
    let output = world.dsh(&args).output().expect("spawn dsh-bash");
    Outcome::parse(&output)
}

fn require_tools(world: &World) -> Result<(), Skip> {
    for tool in ["curl", "python3", "getent"] {
        world.require(tool)?;
    }
    Ok(())
}

#[test]
fn network_deny_reaches_nothing_of_the_host() {
    over_matrix("network_deny_reaches_nothing_of_the_host", |world| {
        require_tools(world)?;
        let server = Server::start("host-server\n");
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        udp.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
        let (tcp, udp_port) = (server.port, udp.local_addr().expect("udp addr").port());
        // The control: unconfined, the same command reaches both listeners.
        let attempts = format!(
            r#"curl -sS -m 5 --noproxy '*' http://127.0.0.1:{tcp}/ && echo CURL-DIRECT
curl -fsS -m 5 http://127.0.0.1:{tcp}/ && echo CURL-PROXY
python3 -c 'import socket; socket.create_connection(("127.0.0.1", {tcp}), timeout=5); print("PY-TCP")'
(exec 3<>/dev/tcp/127.0.0.1/{tcp}) 2>/dev/null && echo DEV-TCP
python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"udp-leak", ("127.0.0.1", {udp_port})); print("UDP-SENT")'
getent hosts example.com && echo DNS
true"#
        );
        let control = call_as(world, Mode::DangerFullAccess, &[], &attempts);
        assert!(control.stdout.contains("CURL-DIRECT") && control.stdout.contains("PY-TCP"), "{control:#?}");
        let mut buf = [0u8; 64];
        assert!(udp.recv(&mut buf).is_ok(), "the control's UDP datagram arrives");
        let before = server.accepted();

        let out = call(world, &["--network", "deny"], &attempts);
        for reached in ["CURL-DIRECT", "CURL-PROXY", "PY-TCP", "DEV-TCP", "DNS"] {
            assert!(!out.stdout.contains(reached), "{reached} got through under --network deny: {out:#?}");
        }
        assert_eq!(server.accepted(), before, "the host's loopback server saw a connection: {out:#?}");
        assert!(udp.recv(&mut buf).is_err(), "a datagram reached the host's loopback: {out:#?}");
        assert!(
            out.text.contains(&format!("[network: access to 127.0.0.1:{tcp} denied]")),
            "the refusal is reported: {out:#?}"
        );
        Ok(())
    });
}

#[test]
fn the_allowlist_opens_one_host_port_through_the_proxy() {
    over_matrix("the_allowlist_opens_one_host_port_through_the_proxy", |world| {
        require_tools(world)?;
        let allowed = Server::start("allowed-body\n");
        let other = Server::start("other-body\n");
        let entry = format!("127.0.0.1:{}", allowed.port);
        let command = format!(
            "curl -sS -m 10 http://127.0.0.1:{}/; curl -sS -m 10 http://127.0.0.1:{}/; true",
            allowed.port, other.port
        );
        let out = call(world, &["--network", "deny", "--allow-host", &entry], &command);
        assert!(out.stdout.contains("allowed-body"), "the listed host answers: {out:#?}");
        assert!(!out.stdout.contains("other-body"), "{out:#?}");
        assert!(
            out.stdout.contains(&format!(
                "dsh-bash network policy: access to 127.0.0.1:{} denied: not in the allowlist",
                other.port
            )),
            "the proxy's refusal is exact: {out:#?}"
        );
        assert_eq!(other.accepted(), 0, "the unlisted port saw a connection");
        assert_eq!(allowed.accepted(), 1);
        // A wildcard never reaches loopback: `*.localhost` would match `a.localhost`.
        let wildcard = call(
            world,
            &["--network", "deny", "--allow-host", "*.localhost"],
            &format!("curl -sS -m 10 http://a.localhost:{}/; true", allowed.port),
        );
        assert!(!wildcard.stdout.contains("allowed-body"), "{wildcard:#?}");
        assert_eq!(allowed.accepted(), 1, "a wildcard reached a loopback address");
        Ok(())
    });
}

#[test]
fn ask_grants_a_host_for_one_call_and_reports_a_rejection_exactly() {
    over_matrix("ask_grants_a_host_for_one_call_and_reports_a_rejection_exactly", |world| {
        require_tools(world)?;
        let server = Server::start("asked-body\n");
        let command = format!(
            "curl -sS -m 10 http://127.0.0.1:{p}/; curl -sS -m 10 http://127.0.0.1:{p}/; true",
            p = server.port
        );
        // Two calls of one session: each asks once (the grant lapses with its call), and both
        // connections of a call go through on one answer.
        let flags = ["--network", "ask", "--approve", "allowed-once"];
        for round in 0..2 {
            let out = call_in_session(world, &flags, "net-s1", &command);
            assert_eq!(out.stdout.matches("asked-body").count(), 2, "round {round}: {out:#?}");
        }
        let asked = world.host_sh(&format!(
            "grep -rhc 'network access to `127.0.0.1:{}`' {} || true",
            server.port,
            q(world.dsh_home().display().to_string())
        ));
        let count: usize = asked.lines().filter_map(|l| l.trim().parse::<usize>().ok()).sum();
        assert_eq!(count, 2, "one approval per call, recorded in the session log");
        let before = server.accepted();
        let rejected = call(world, &["--network", "ask", "--approve", "rejected"], &command);
        assert!(
            rejected.stdout.contains(&format!(
                "dsh-bash network policy: access to 127.0.0.1:{} denied: the user rejected it",
                server.port
            )),
            "{rejected:#?}"
        );
        assert!(
            rejected.stdout.contains(&format!(
                "dsh-bash network policy: access to 127.0.0.1:{} denied: refused earlier in this call",
                server.port
            )),
            "a rejection is not asked twice within the call: {rejected:#?}"
        );
        assert!(rejected.text.contains(&format!("[network: access to 127.0.0.1:{} denied]", server.port)));
        assert_eq!(server.accepted(), before, "a rejected host saw a connection");
        Ok(())
    });
}

fn call_in_session(world: &World, flags: &[&str], session: &str, command: &str) -> Outcome {
    let mut args: Vec<String> = flags.iter().map(|s| (*s).to_owned()).collect();
    args.extend(world.call_args(Mode::WorkspaceWrite, Some(session), command));
    let output = world.dsh(&args).output().expect("spawn dsh-bash");
    Outcome::parse(&output)
}

#[test]
fn the_network_switches_change_the_schema_and_prompt_only_when_they_isolate() {
    use crate::harness::run;
    let plain_schema = run(&["--sandbox", "workspace-write", "schema"]);
    let allow_schema = run(&["--sandbox", "workspace-write", "--network", "allow", "schema"]);
    assert_eq!(plain_schema.stdout, allow_schema.stdout, "network allow is the default");
    let plain_prompt = run(&["--sandbox", "workspace-write", "prompt"]);
    assert_eq!(
        plain_prompt.stdout,
        run(&["--sandbox", "workspace-write", "--network", "allow", "prompt"]).stdout
    );
    assert!(!plain_prompt.stdout.contains("DSH network policy"));

    // The `sandbox:network` context is a runtime context: rendered for an agent's session,
    // never in the static prompt (its text is pinned in dsh-sandbox-policy's tests).
    let deny_prompt =
        run(&["--sandbox", "workspace-write", "--network", "deny", "--allow-host", "pypi.org", "prompt"]);
    assert_eq!(deny_prompt.stdout, plain_prompt.stdout, "{deny_prompt:?}");
    // The tools' input schemas never change; the bash output schema (advertised over MCP) names
    // `network` only under an isolating policy (pinned in dsh-tool-bash's tests).
    let deny_schema = run(&["--sandbox", "workspace-write", "--network", "deny", "schema"]);
    assert_eq!(deny_schema.stdout, plain_schema.stdout);

    let doctor = run(&["--sandbox", "read-only", "--network", "deny", "--allow-host", "pypi.org", "doctor"]);
    assert!(
        doctor.stdout.lines().any(|l| l
            == "network: deny (confined commands get the session's own network namespace; the listed hosts are pypi.org, through the harness's proxy)"),
        "{doctor:?}"
    );
    let unconfined = run(&["--network", "deny", "prompt"]);
    assert_eq!(unconfined.code, Some(2), "{unconfined:?}");
    assert!(
        unconfined.stderr.contains(
            "--network and --allow-host confine commands' network access: they need a sandbox (add --sandbox workspace-write or --sandbox read-only)"
        ),
        "{unconfined:?}"
    );
    let bad = run(&["--sandbox", "read-only", "--network", "deny", "--allow-host", "a b", "prompt"]);
    assert!(
        bad.stderr.contains("allowHosts: network pattern \"a b\": not a host name or address"),
        "{bad:?}"
    );
}

#[test]
fn a_background_job_reports_its_refusals_when_read() {
    over_matrix("a_background_job_reports_its_refusals_when_read", |world| {
        require_tools(world)?;
        let server = Server::start("never\n");
        let target = format!("127.0.0.1:{}", server.port);
        let line = |id: u32, tool: &str, args: serde_json::Value| {
            serde_json::json!({"tool": tool, "args": args, "session": "bg", "cwd": world.ws, "id": id})
                .to_string()
        };
        let input = [
            line(
                1,
                "bash",
                serde_json::json!({"command": format!("curl -sS -m 5 http://{target}/; echo done"),
                    "description": "d", "run_in_background": true}),
            ),
            line(2, "job_output", serde_json::json!({"job_id": "bash-1", "wait": true})),
        ]
        .join("\n");
        let args: Vec<String> =
            ["--sandbox", "workspace-write", "--network", "deny", "batch"].map(str::to_owned).to_vec();
        let mut child = world.dsh(&args).stdin(std::process::Stdio::piped()).spawn().expect("spawn batch");
        child.stdin.take().expect("stdin").write_all(format!("{input}\n").as_bytes()).expect("write");
        let output = child.wait_with_output().expect("batch");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let read =
            stdout.lines().nth(1).map(|l| Outcome::from_value(&serde_json::from_str(l).expect("json")));
        let read = read.unwrap_or_else(|| panic!("no job_output answer: {stdout}"));
        assert!(
            read.text.contains(&format!(
                "[network: access to {target} denied]\n[status: completed, exit code: 0]"
            )),
            "{read:#?}"
        );
        assert_eq!(server.accepted(), 0);
        Ok(())
    });
}

/// A host-side loopback echo server that counts the connections it accepted and those that
/// ended (EOF or reset from the other side).
struct EchoServer {
    port: u16,
    accepted: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
}

impl EchoServer {
    fn start() -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local addr").port();
        let (accepted, ended) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (on_accept, on_end) = (Arc::clone(&accepted), Arc::clone(&ended));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                on_accept.fetch_add(1, Ordering::SeqCst);
                let on_end = Arc::clone(&on_end);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if stream.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    on_end.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        EchoServer { port, accepted, ended }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn ended(&self) -> usize {
        self.ended.load(Ordering::SeqCst)
    }
}

/// `dsh-bash ARGS mcp` on stdio as the cell's user, spoken to as a client that answers
/// elicitations; every line it writes is handed over through a channel (so a silent server
/// fails the test after a bound instead of hanging it). Killed on drop.
struct McpClient {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
}

/// How long a test waits for one answer of the server (a generous bound, never a measure).
const ANSWER_BOUND: Duration = Duration::from_secs(90);

impl McpClient {
    fn start(world: &World, args: &[&str]) -> McpClient {
        let mut args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        args.push("mcp".to_owned());
        let mut child =
            world.dsh(&args).stdin(std::process::Stdio::piped()).spawn().expect("spawn dsh-bash mcp");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        let mut client = McpClient { stdin: child.stdin.take(), child, lines };
        client.send(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "world", "version": "0"}}}));
        client.until(|m| m["id"] == serde_json::json!(1) && m.get("method").is_none());
        client.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: &serde_json::Value) {
        writeln!(self.stdin.as_mut().expect("stdin open"), "{message}").expect("write to the server");
    }

    fn until(&mut self, wanted: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        loop {
            match self.lines.recv_timeout(ANSWER_BOUND) {
                Ok(message) if wanted(&message) => return message,
                Ok(_) => {}
                Err(e) => panic!("the MCP server did not answer: {e}"),
            }
        }
    }

    /// Calls bash with `command`, answering each elicitation with `action`; returns the
    /// call's result and how many elicitations were answered.
    fn bash(&mut self, id: i64, command: &str, action: &str) -> (serde_json::Value, usize) {
        self.send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "bash", "arguments": {"command": command, "description": "d", "timeoutMs": 60000}}}));
        let mut asked = 0;
        loop {
            let message = self.until(|m| {
                m["method"] == serde_json::json!("elicitation/create")
                    || (m["id"] == serde_json::json!(id) && m.get("method").is_none())
            });
            if message.get("method").is_none() {
                return (message, asked);
            }
            asked += 1;
            self.send(
                &serde_json::json!({"jsonrpc": "2.0", "id": message["id"], "result": {"action": action}}),
            );
        }
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of an MCP tool result.
fn result_text(result: &serde_json::Value) -> String {
    result["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// Holds a connection through the proxy open from a detached process and keeps using it:
/// `connect` opens a CONNECT tunnel, `forward` a plain-HTTP request whose connection the
/// proxy keeps (the destination echoes, so the connection stays busy). Notes `UP <mode>`
/// once it carries bytes, `CLOSED <mode>` when it ends, `REFUSED <mode>` when it never opened.
const HOLDER: &str = r#"import os, socket, sys, time
mode, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def note(text):
    with open(log, "a") as f:
        f.write(text + "\n")
proxy = os.environ["HTTPS_PROXY"].split("//", 1)[1].rstrip("/")
host, pport = proxy.rsplit(":", 1)
s = socket.create_connection((host, int(pport)), timeout=30)
if mode == "connect":
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    want = b"HTTP/1.1 200"
else:
    s.sendall(f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    want = b"GET / HTTP/1.1"
head = b""
while b"\r\n\r\n" not in head:
    c = s.recv(1)
    if not c:
        break
    head += c
if not head.startswith(want):
    note(f"REFUSED {mode}")
    sys.exit()
note(f"UP {mode}")
s.settimeout(5)
deadline = time.time() + 120
while time.time() < deadline:
    try:
        s.sendall(b"ping\n")
        if not s.recv(64):
            note(f"CLOSED {mode}")
            sys.exit()
    except OSError:
        note(f"CLOSED {mode}")
        sys.exit()
    time.sleep(0.2)
note(f"STILL-OPEN {mode}")
"#;

/// Whether a process of the host runs with `arg` among its arguments.
fn running(arg: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
    })
}

/// Polls `done` every 100 ms for up to `bound`.
fn eventually(bound: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + bound;
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

#[test]
fn a_one_time_grant_s_connections_end_with_its_call() {
    over_matrix("a_one_time_grant_s_connections_end_with_its_call", |world| {
        require_tools(world)?;
        world.require("setsid")?;
        let server = EchoServer::start();
        let port = server.port;
        let holder_path = world.write("hold.py", HOLDER);
        let log = world.ws.join("tunnel.log");
        let (holder, log_q) = (q(holder_path.display().to_string()), q(log.display().to_string()));
        let mut mcp = McpClient::start(world, &["--sandbox", "workspace-write", "--network", "ask"]);
        // Call 1, allowed once: a detached process opens a tunnel and a kept-alive plain-HTTP
        // connection to the host, keeps using both, and outlives the call.
        let open = format!(
            "for mode in connect forward; do setsid nohup python3 {holder} $mode {port} {log_q} </dev/null >/dev/null 2>&1 & done
for i in $(seq 300); do [ \"$(grep -c '^UP ' {log_q} 2>/dev/null)\" = 2 ] && break; sleep 0.1; done; cat {log_q}"
        );
        let (first, asked) = mcp.bash(2, &open, "accept");
        let text = result_text(&first);
        assert_eq!(asked, 1, "one question for the host: {first:#}");
        assert!(text.contains("UP connect") && text.contains("UP forward"), "{first:#}");
        assert_eq!(server.accepted(), 2, "{first:#}");
        // The call ended: both connections its grant admitted end with it, at both ends.
        let closed = eventually(Duration::from_secs(30), || server.ended() == 2);
        let notes = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            closed,
            "a connection the grant admitted outlived its call ({} of 2 ended): {notes}",
            server.ended()
        );
        // The command's end is closed too: the detached process sees it (under bubblewrap the
        // call's processes end with the call, and the process is gone).
        let script = holder_path.display().to_string();
        assert!(
            eventually(Duration::from_secs(30), || {
                let notes = std::fs::read_to_string(&log).unwrap_or_default();
                (notes.contains("CLOSED connect") && notes.contains("CLOSED forward")) || !running(&script)
            }),
            "the detached process still holds its connections: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        // Call 2, declined: nothing reaches the host, neither a new connection nor bytes.
        let again = format!(
            "python3 {holder} connect {port} {log_q}; curl -sS -m 10 http://127.0.0.1:{port}/; tail -n 1 {log_q}"
        );
        let (second, asked) = mcp.bash(3, &again, "decline");
        let text = result_text(&second);
        assert_eq!(asked, 1, "{second:#}");
        assert!(text.contains("REFUSED connect"), "{second:#}");
        assert!(
            text.contains(&format!(
                "dsh-bash network policy: access to 127.0.0.1:{port} denied: the user rejected it"
            )) || text.contains(&format!(
                "dsh-bash network policy: access to 127.0.0.1:{port} denied: refused earlier in this call"
            )),
            "{second:#}"
        );
        assert!(text.contains(&format!("[network: access to 127.0.0.1:{port} denied]")), "{second:#}");
        assert_eq!(server.accepted(), 2, "a declined call reached the host: {second:#}");
        Ok(())
    });
}

#[test]
fn a_refused_destination_is_redacted_in_the_text_and_the_structured_value() {
    over_matrix("a_refused_destination_is_redacted_in_the_text_and_the_structured_value", |world| {
        require_tools(world)?;
        // Mixed case: the proxy reports names lower-cased, the command's output keeps its case.
        let secret = format!("SeCrEt{}Xy", super::host::unique_number());
        world.write("name.txt", &secret);
        let command = "n=$(cat name.txt); curl -sS -m 10 https://$n.example.invalid/; curl -sS -m 10 http://$n.example.invalid/; true";
        let mut args: Vec<String> =
            ["--redact-env", "SECRET_X", "--network", "deny"].map(str::to_owned).to_vec();
        args.extend(world.call_args(Mode::WorkspaceWrite, None, command));
        let output = world.dsh(&args).env("SECRET_X", &secret).output().expect("spawn dsh-bash");
        let raw = String::from_utf8_lossy(&output.stdout).into_owned();
        let out = Outcome::parse(&output);
        for spelled in [secret.clone(), secret.to_ascii_lowercase()] {
            assert!(!raw.contains(&spelled), "the secret {spelled:?} escaped redaction: {raw}");
        }
        assert!(
            out.text.contains("[network: access to [redacted:SECRET_X].example.invalid:443 denied]")
                && out.text.contains("[network: access to [redacted:SECRET_X].example.invalid:80 denied]"),
            "{out:#?}"
        );
        assert!(
            out.stdout
                .contains("dsh-bash network policy: access to [redacted:SECRET_X].example.invalid:80 denied"),
            "{out:#?}"
        );
        let value: serde_json::Value = serde_json::from_str(raw.trim_end()).expect("json");
        assert_eq!(
            value["structured"]["network"]["denied"],
            serde_json::json!([
                "[redacted:SECRET_X].example.invalid:443",
                "[redacted:SECRET_X].example.invalid:80"
            ]),
            "{value:#}"
        );
        Ok(())
    });
}
