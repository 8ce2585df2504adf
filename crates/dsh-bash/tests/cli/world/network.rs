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
