//! `--askpass` over MCP asks for a secret by URL (URL-mode elicitation), never in a form: the
//! client gets a one-time loopback page's URL, the user types the secret there and it goes to
//! the asking program; the client, the result, the session log, the spill file and the
//! server's stderr never hold it. The page answers once, refuses a reload and a second post,
//! and ends with its call. A client without URL mode is asked nothing, and the program says
//! why. Driven over stdio and streamable HTTP by a raw JSON-RPC client, and in headless
//! Chromium.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::Sandbox;

const SECRET: &str = "url-askpass-s3cret-9f4a";
const MARKER: &str = "[redacted:askpass]";
/// How long any one message may take before the test fails (instead of hanging).
const PATIENCE: Duration = Duration::from_secs(120);

/// The command every call runs: asks once, shows the answer's digest, echoes it on both
/// streams and prints enough to spill.
const ASKING: &str = r#"p=$("$SUDO_ASKPASS" "Password <for> \"db\": "); echo "rc=$? digest=$(printf %s "$p" | sha256sum | cut -c1-16)"
echo "echoed: $p"; echo "to stderr: $p" >&2
for i in $(seq 1 20000); do echo "line $i $p"; done"#;

/// A raw MCP client of `dsh-bash --askpass mcp`, over stdio or HTTP: every message the server
/// sends arrives on one channel.
struct Client {
    child: Child,
    messages: mpsc::Receiver<Value>,
    transport: Transport,
    stderr: Option<std::thread::JoinHandle<String>>,
}

enum Transport {
    Stdio(std::process::ChildStdin),
    Http { authority: String, token: String, session: String, sender: mpsc::Sender<Value> },
}

impl Client {
    /// Starts the server (`http`: on a loopback port) and initializes with `capabilities`.
    fn start(sandbox: &Sandbox, http: bool, capabilities: Value) -> Self {
        let token = "askpass-url-test-token-0123456789";
        let mut args = vec!["--askpass", "mcp"];
        if http {
            args.extend(["--http", "0"]);
        }
        let mut command = sandbox.command(&args);
        command
            .env("DSH_MCP_TOKEN", token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn dsh-bash mcp");
        let (sender, messages) = mpsc::channel();
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut start_line = String::new();
        if http {
            stderr.read_line(&mut start_line).expect("the start line");
        }
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let transport = if http {
            let authority = dsh_test_support::http::start_line_authority(&start_line)
                .unwrap_or_else(|| panic!("a start line: {start_line}"));
            Transport::Http { authority, token: token.to_owned(), session: String::new(), sender }
        } else {
            let stdout = BufReader::new(child.stdout.take().expect("stdout"));
            std::thread::spawn(move || {
                for line in stdout.lines() {
                    let Ok(line) = line else { break };
                    let Ok(message) = serde_json::from_str(&line) else { continue };
                    if sender.send(message).is_err() {
                        break;
                    }
                }
            });
            Transport::Stdio(child.stdin.take().expect("stdin"))
        };
        let mut client = Self { child, messages, transport, stderr: Some(stderr) };
        client.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "askpass-url-test", "version": "0"}}}));
        client.until(|m| m["id"] == json!(0));
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client.listen();
        client
    }

    /// Over HTTP, opens the session's standalone SSE stream (`GET /mcp`), where the server
    /// may send its requests; its messages arrive on the channel too.
    fn listen(&mut self) {
        let Transport::Http { authority, token, session, sender } = &self.transport else { return };
        let mut stream = TcpStream::connect(authority.as_str()).expect("connect");
        let head = format!(
            "GET /mcp HTTP/1.1\r\nHost: {authority}\r\nAccept: text/event-stream\r\n\
             Authorization: Bearer {token}\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).expect("get");
        let mut reader = BufReader::new(stream);
        let (status, headers) = read_head(&mut reader);
        assert_eq!(status, 200, "the standalone stream: {headers:?}");
        let sender = sender.clone();
        std::thread::spawn(move || read_messages(reader, &headers, &sender));
    }

    /// Sends one message. Over HTTP each is one POST on its own connection, whose response
    /// (JSON or an SSE stream) is read in a thread onto the channel.
    fn send(&mut self, message: &Value) {
        match &mut self.transport {
            Transport::Stdio(stdin) => writeln!(stdin, "{message}").expect("write to the server"),
            Transport::Http { authority, token, session, sender } => {
                let body = message.to_string();
                let mut head = format!(
                    "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
                     Accept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\n\
                     Content-Length: {}\r\n",
                    body.len()
                );
                if !session.is_empty() {
                    head.push_str(&format!(
                        "Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-11-25\r\n"
                    ));
                }
                let mut stream = TcpStream::connect(authority.as_str()).expect("connect");
                stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
                stream.write_all(format!("{head}\r\n{body}").as_bytes()).expect("post");
                let mut reader = BufReader::new(stream);
                let (status, headers) = read_head(&mut reader);
                assert!(matches!(status, 200 | 202), "HTTP {status} for {message}");
                if let Some(id) = header(&headers, "mcp-session-id") {
                    *session = id.to_owned();
                }
                let sender = sender.clone();
                std::thread::spawn(move || read_messages(reader, &headers, &sender));
            }
        }
    }

    /// The next message the server sends.
    fn next(&mut self) -> Value {
        self.messages.recv_timeout(PATIENCE).expect("the server answers")
    }

    /// Reads messages until one matches `wanted`; returns it and the ones before it.
    fn until(&mut self, wanted: impl Fn(&Value) -> bool) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let message = self.next();
            if wanted(&message) {
                return (message, before);
            }
            before.push(message);
        }
    }

    /// Calls bash with `command` (request `id`).
    fn call(&mut self, id: u64, command: &str, timeout_ms: u64) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "bash",
            "arguments": {"command": command, "description": "Ask for a secret", "timeoutMs": timeout_ms}}}));
    }

    /// Ends the server; returns everything it wrote on stderr.
    fn finish(mut self) -> String {
        if let Transport::Stdio(stdin) =
            std::mem::replace(&mut self.transport, Transport::Stdio(dummy_stdin()))
        {
            drop(stdin);
        }
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        self.stderr.take().expect("stderr").join().expect("stderr reader")
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A stdin handle of a finished process, to stand in for a closed one.
fn dummy_stdin() -> std::process::ChildStdin {
    let mut child = Command::new("true").stdin(Stdio::piped()).spawn().expect("true");
    let stdin = child.stdin.take().expect("stdin");
    let _ = child.wait();
    stdin
}

/// An HTTP response's status and headers (lower-case names).
fn read_head(reader: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    let status =
        line.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("header");
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            return (status, headers);
        }
        let (k, v) = trimmed.split_once(':').expect("header line");
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Reads a response body (framed by length or chunks) as it arrives: one JSON document, or
/// the `data:` lines of an SSE stream, each sent on `sender` at once.
fn read_messages(
    mut reader: BufReader<TcpStream>,
    headers: &[(String, String)],
    sender: &mpsc::Sender<Value>,
) {
    let chunked = header(headers, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let mut pending = Vec::new();
    let emit = |bytes: &[u8], pending: &mut Vec<u8>| {
        pending.extend_from_slice(bytes);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim();
            let data = line.strip_prefix("data:").map(str::trim).unwrap_or(line);
            if let Ok(message) = serde_json::from_str::<Value>(data) {
                let _ = sender.send(message);
            }
        }
    };
    if chunked {
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let Ok(size) = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16) else {
                return;
            };
            let mut chunk = vec![0; size + 2];
            if reader.read_exact(&mut chunk).is_err() || size == 0 {
                return;
            }
            emit(&chunk[..size], &mut pending);
        }
    } else if let Some(length) = header(headers, "content-length").and_then(|l| l.parse::<usize>().ok()) {
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_ok() {
            body.push(b'\n');
            emit(&body, &mut pending);
        }
    }
}

/// One plain HTTP/1.1 request to the page at `url`; returns the status, headers and body.
fn fetch(
    url: &str,
    method: &str,
    form: Option<&str>,
    origin: Option<&str>,
) -> (u16, Vec<(String, String)>, String) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (authority, path) = rest.split_at(rest.find('/').expect("a path"));
    let mut stream = TcpStream::connect(authority).expect("connect to the page");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let body = form.unwrap_or("");
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    if let Some(origin) = origin {
        request.push_str(&format!("Origin: {origin}\r\n"));
    }
    if form.is_some() {
        request.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    stream.write_all(format!("{request}\r\n{body}").as_bytes()).expect("request");
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let mut text = String::new();
    let _ = reader.read_to_string(&mut text);
    (status, headers, text)
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// The first 16 hex digits of the SHA-256 of `text`, by the host's `sha256sum`.
fn digest(text: &str) -> String {
    let out = Command::new("bash")
        .args(["-c", "printf %s \"$1\" | sha256sum | cut -c1-16", "-", text])
        .output()
        .expect("sha256sum");
    String::from_utf8(out.stdout).expect("utf-8").trim().to_owned()
}

/// Waits for the URL-mode elicitation of a call, checks it, and accepts it; returns its URL
/// and id. No form elicitation comes first.
fn accept_url_elicitation(client: &mut Client) -> (String, String) {
    let (ask, before) = client.until(|m| m["method"] == json!("elicitation/create"));
    assert!(before.iter().all(|m| m.get("method").is_none_or(|m| m != "elicitation/create")), "{before:?}");
    let params = &ask["params"];
    assert_eq!(params["mode"], json!("url"), "a secret is asked by URL only: {ask}");
    assert!(params.get("requestedSchema").is_none(), "no form: {ask}");
    let url = params["url"].as_str().expect("a url").to_owned();
    let id = params["elicitationId"].as_str().expect("an elicitationId").to_owned();
    assert!(url.starts_with("http://127.0.0.1:") && url.contains("/askpass/"), "{url}");
    let token = url.rsplit('/').next().expect("token");
    assert!(token.len() >= 64 && token.chars().all(|c| c.is_ascii_hexdigit()), "an unguessable path: {url}");
    let message = params["message"].as_str().expect("message");
    assert!(
        message.contains("Its prompt (the command's own words") && message.contains("Command: "),
        "{message}"
    );
    client.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept"}}));
    (url, id)
}

/// Asserts the headers every page response carries.
fn assert_page_headers(headers: &[(String, String)]) {
    assert_eq!(header(headers, "cache-control"), Some("no-store"), "{headers:?}");
    let csp = header(headers, "content-security-policy").expect("a CSP");
    assert!(csp.contains("default-src 'none'") && csp.contains("form-action 'self'"), "{csp}");
    assert_eq!(header(headers, "content-type"), Some("text/html; charset=utf-8"));
}

/// The URL route over one transport: the page takes the secret once, the command gets it,
/// and it is nowhere else; an unanswered page ends with its call.
fn url_route(http: bool) {
    let sandbox = Sandbox::new();
    let mut client = Client::start(&sandbox, http, json!({"elicitation": {"form": {}, "url": {}}}));
    client.call(1, ASKING, 120_000);
    let (url, elicitation_id) = accept_url_elicitation(&mut client);
    let (status, headers, page) = fetch(&url, "GET", None, None);
    assert_eq!(status, 200, "{page}");
    assert_page_headers(&headers);
    assert!(page.contains("Password &lt;for&gt; &quot;db&quot;: "), "the prompt, escaped: {page}");
    assert!(!page.contains("<script") && page.contains("<form method=\"post\">"), "{page}");
    // A post from another origin is refused and answers nothing.
    let foreign = fetch(&url, "POST", Some("secret=stolen&action=give"), Some("http://evil.example"));
    assert_eq!(foreign.0, 403, "{foreign:?}");
    let form = format!("secret={SECRET}&action=give");
    let posted = fetch(&url, "POST", Some(&form), Some(&url[..url.find("/askpass/").expect("path")]));
    assert_eq!(posted.0, 200, "{posted:?}");
    assert_page_headers(&posted.1);
    let again = fetch(&url, "POST", Some("secret=second&action=give"), None);
    assert_eq!(again.0, 410, "a second answer is refused: {again:?}");
    let reload = fetch(&url, "GET", None, None);
    assert_eq!(reload.0, 410, "a reload is refused: {reload:?}");
    assert!(!reload.2.contains(SECRET));
    let (result, before) = client.until(|m| m["id"] == json!(1));
    assert!(
        before.iter().any(|m| m["method"] == json!("notifications/elicitation/complete")
            && m["params"]["elicitationId"] == json!(elicitation_id)),
        "the completion notice: {before:?}"
    );
    assert!(!result.to_string().contains(SECRET), "the result holds no secret");
    let spill =
        result["result"]["structuredContent"]["stdout"]["spillPath"].as_str().expect("spilled").to_owned();
    let spilled = std::fs::read_to_string(&spill).expect("spill file");
    assert!(
        spilled.starts_with(&format!("rc=0 digest={}\n", digest(SECRET))),
        "{}",
        &spilled[..200.min(spilled.len())]
    );
    assert!(spilled.contains(&format!("echoed: {MARKER}\n")) && !spilled.contains(SECRET));
    // An unanswered page ends with its call (here: its timeout).
    client.call(2, r#""$SUDO_ASKPASS" "Later: "; echo "rc=$?""#, 3_000);
    let (late, _) = accept_url_elicitation(&mut client);
    assert_eq!(fetch(&late, "GET", None, None).0, 200);
    let (ended, _) = client.until(|m| m["id"] == json!(2));
    assert!(!ended.to_string().contains(SECRET));
    let mut expired = fetch(&late, "POST", Some("secret=too-late&action=give"), None).0;
    // The page is withdrawn as the call's askpass socket closes, at most a moment after the
    // result is sent.
    for _ in 0..600 {
        if expired == 410 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        expired = fetch(&late, "POST", Some("secret=too-late&action=give"), None).0;
    }
    assert_eq!(expired, 410, "an expired page is refused");
    let stderr = client.finish();
    assert!(!stderr.contains(SECRET), "the server's stderr holds no secret: {stderr}");
    assert_eq!(files_containing(&sandbox.path().join("home"), SECRET), Vec::<String>::new());
    let _ = std::fs::remove_file(spill);
}

#[test]
fn askpass_over_mcp_stdio_asks_by_url_and_the_page_answers_once() {
    url_route(false);
}

#[test]
fn askpass_over_mcp_http_asks_by_url_and_the_page_answers_once() {
    url_route(true);
}

#[test]
fn a_client_without_url_mode_is_asked_no_secret_and_the_result_says_why() {
    for http in [false, true] {
        for capabilities in [json!({"elicitation": {"form": {}}}), json!({"elicitation": {}}), json!({})] {
            let sandbox = Sandbox::new();
            let mut client = Client::start(&sandbox, http, capabilities.clone());
            client.call(1, r#"p=$("$SUDO_ASKPASS" "Password: "); echo "rc=$? got=[$p]""#, 60_000);
            let (result, before) = client.until(|m| m["id"] == json!(1));
            let why = format!("http={http} capabilities={capabilities}");
            assert!(
                before.iter().all(|m| m["method"] != json!("elicitation/create")),
                "{why}: asked: {before:?}"
            );
            let structured = &result["result"]["structuredContent"];
            assert_eq!(structured["stdout"]["text"], json!("rc=1 got=[]\n"), "{why}: {result}");
            assert_eq!(
                structured["stderr"]["text"],
                json!(
                    "dsh-askpass: no secret: the MCP client cannot be asked for a secret: that needs URL-mode \
                     elicitation (the user types it on a one-time page of this host), which the client did \
                     not declare; a secret is never asked in a form\n"
                ),
                "{why}: {result}"
            );
            client.finish();
        }
    }
}

/// The directory of the browser driver (its `package.json`; `npm ci` installs it).
fn browser_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

#[test]
fn the_askpass_page_takes_the_secret_in_headless_chromium() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let chromium = std::env::var("DSH_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    let driver = browser_dir().join("node_modules/puppeteer-core");
    if !Path::new(&chromium).exists() || !driver.exists() {
        assert!(
            !ci,
            "CI=true: chromium ({chromium}) and the browser driver (npm ci in {}) are needed",
            browser_dir().display()
        );
        eprintln!("skipped: no {chromium} or no {} (set CI=true to fail instead)", driver.display());
        return;
    }
    let sandbox = Sandbox::new();
    let mut client = Client::start(&sandbox, false, json!({"elicitation": {"url": {}}}));
    client.call(1, ASKING, 120_000);
    let (url, _) = accept_url_elicitation(&mut client);
    let profile = tempfile::tempdir().expect("a browser profile");
    let out = Command::new("node")
        .arg(browser_dir().join("askpass_page.mjs"))
        .args([&url, SECRET, &chromium])
        .env("DSH_TEST_PROFILE", profile.path())
        .current_dir(browser_dir())
        .output()
        .expect("node must be installed");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{report}\n{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(report.trim()).expect("the driver's report");
    assert_eq!(report["loaded"]["status"], json!(200), "{report}");
    assert!(
        report["loaded"]["text"].as_str().is_some_and(|t| t.contains("Password <for> \"db\": ")),
        "{report}"
    );
    assert_eq!(report["submitted"]["status"], json!(200), "{report}");
    assert!(
        report["submitted"]["text"].as_str().is_some_and(|t| t.contains("The secret went to the command"))
    );
    assert_eq!(report["reloaded"]["status"], json!(410), "a reload is refused: {report}");
    assert_eq!(report["resubmitted"]["status"], json!(410), "a second submit is refused: {report}");
    assert_eq!(report["foreign"], json!([]), "the page loads nothing from elsewhere: {report}");
    let (result, _) = client.until(|m| m["id"] == json!(1));
    assert!(!result.to_string().contains(SECRET));
    let spill =
        result["result"]["structuredContent"]["stdout"]["spillPath"].as_str().expect("spilled").to_owned();
    let spilled = std::fs::read_to_string(&spill).expect("spill file");
    assert!(
        spilled.starts_with(&format!("rc=0 digest={}\n", digest(SECRET))),
        "{}",
        &spilled[..200.min(spilled.len())]
    );
    assert!(!spilled.contains(SECRET));
    let stderr = client.finish();
    assert!(!stderr.contains(SECRET), "{stderr}");
    assert_eq!(files_containing(&sandbox.path().join("home"), SECRET), Vec::<String>::new());
    let _ = std::fs::remove_file(spill);
}
