//! The HTTP server when its own resources run short: connections whose request body never
//! arrives, and a process out of file descriptors.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::Sandbox;
use crate::mcp::{TOKEN_VAR, authority, start_server, stop};
use crate::security_http::closed_by_server;

const TOKEN: &str = "tok-8c2f55e013";

/// Whether a fresh connection is answered (a request without a token gets its 401), asked
/// until it is (the server learns of freed slots and descriptors asynchronously).
fn served_again(authority: &str) -> bool {
    (0..400).any(|_| {
        let Ok(mut next) = TcpStream::connect(authority) else {
            std::thread::sleep(Duration::from_millis(50));
            return false;
        };
        let asked = write!(next, "GET /nope HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        next.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
        let mut answer = Vec::new();
        let _ = next.read_to_end(&mut answer);
        let served = asked.is_ok() && answer.starts_with(b"HTTP/1.1 401 ");
        if !served {
            std::thread::sleep(Duration::from_millis(50));
        }
        served
    })
}

#[test]
fn connections_whose_body_never_arrives_do_not_lock_other_clients_out() {
    let sandbox = Sandbox::new();
    // The connection cap is what stalled bodies used to exhaust: four are as good as 256.
    let (server, line) = start_server(
        &sandbox,
        &["--http", "0", "--max-connections", "4", "--header-timeout", "1"],
        Some(TOKEN),
    );
    let authority = authority(&line);
    let mut stalled: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut stream = TcpStream::connect(&authority).expect("connect");
            write!(
                stream,
                "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
                 Content-Length: 100\r\n\r\n{{\"jsonrpc\":"
            )
            .expect("a head and the start of a body");
            stream
        })
        .collect();
    assert!(served_again(&authority), "stalled bodies lock every other client out");
    for stream in &mut stalled {
        let answer = closed_by_server(stream, Duration::from_secs(60));
        assert!(
            answer.is_empty() || answer.starts_with(b"HTTP/1.1 408 "),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    server.stop();
}

#[test]
fn an_http_server_out_of_descriptors_backs_off_logs_once_and_serves_again() {
    let sandbox = Sandbox::new();
    // `ulimit -n` in a shell that then becomes the server: 64 descriptors, of which the idle
    // server uses about fifteen.
    let mut child = Command::new("sh")
        .args(["-c", "ulimit -n 64 && exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_dsh-bash")])
        // Connections the server accepted stay (a long header timeout): no descriptor frees
        // itself while the test holds them.
        .args(["mcp", "--http", "0", "--header-timeout", "600"])
        .env("DSH_HOME", sandbox.path().join("home"))
        .env(TOKEN_VAR, TOKEN)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("start line");
    let authority = authority(line.trim_end());
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        // Drained to the end, kept only in part (the old loop wrote hundreds of megabytes).
        let mut text = String::new();
        for (n, line) in stderr.lines().enumerate() {
            let Ok(line) = line else { break };
            if n < 1000 {
                let _ = tx.send(line.clone());
            }
            if text.len() < 64 * 1024 {
                text.push_str(&line);
                text.push('\n');
            }
        }
        text
    });
    // More connections than descriptors: the server accepts what it can, then runs out.
    let held: Vec<TcpStream> = (0..120).filter_map(|_| TcpStream::connect(&authority).ok()).collect();
    assert!(held.len() > 64, "only {} connections were made", held.len());
    let first = lines.recv_timeout(Duration::from_secs(120)).expect("a warning that descriptors ran out");
    assert!(first.contains("accept"), "{first}");
    // The old loop logged every failed accept, a million lines a second at most; this one
    // logs once per episode however long it lasts.
    std::thread::sleep(Duration::from_secs(2));
    let more: Vec<String> = lines.try_iter().collect();
    assert!(more.len() <= 2, "{} more lines: {:?}", more.len(), &more[..more.len().min(5)]);
    drop(held);
    assert!(served_again(&authority), "the server never served again once descriptors were free");
    stop(child);
    let text = reader.join().expect("stderr reader");
    assert!(text.len() < 4096, "{} bytes of log: {}", text.len(), &text[..text.len().min(2000)]);
}

/// The spill file a `bash` call of `session` names (its output outgrows memory).
fn spilling_call(conn: &mut dsh_test_support::http::Conn, session: &str, id: u64) -> std::path::PathBuf {
    let command = "head -c 300000 /dev/zero | tr '\\0' s; echo";
    let reply = conn
        .call(session, id, "bash", serde_json::json!({"command": command, "description": "d"}))
        .expect("call");
    let response = reply.response(id).unwrap_or_else(|| panic!("{reply:?}"));
    let spill =
        response["result"]["structuredContent"]["stdout"]["spillPath"].as_str().unwrap_or_else(|| {
            panic!("a spill path: {}", &response.to_string()[..500.min(response.to_string().len())])
        });
    std::path::PathBuf::from(spill)
}

#[test]
fn an_http_sessions_spill_files_go_with_its_delete_and_no_other_sessions() {
    use dsh_test_support::http::Conn;
    let sandbox = Sandbox::new();
    let (server, line) = start_server(&sandbox, &["--http", "0"], Some(TOKEN));
    let authority = authority(&line);
    let mut first = Conn::open(&authority, TOKEN, Duration::from_secs(120)).expect("connect");
    let mut second = Conn::open(&authority, TOKEN, Duration::from_secs(120)).expect("connect");
    let ended = first.open_session("ended").expect("a session");
    let open = second.open_session("open").expect("a session");
    let gone = spilling_call(&mut first, &ended, 1);
    let kept = spilling_call(&mut second, &open, 1);
    assert!(gone.exists() && kept.exists(), "{gone:?} {kept:?}");
    assert_eq!(first.delete(&ended).expect("delete"), 204);
    assert!(!gone.exists(), "the ended session's spill file is still there: {gone:?}");
    assert!(kept.exists(), "another session's spill file went too: {kept:?}");
    server.stop();
}
