//! A minimal HTTP/1.1 client for `dsh-bash mcp --http`, for tests and benchmarks that need to
//! see the wire (status codes, headers, keep-alive, how a response is framed) rather than what
//! an MCP SDK makes of it.

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

/// One HTTP response; the body is decoded as UTF-8 (lossily).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages of the body: one JSON document, or the `data:` lines of an SSE
    /// stream.
    pub fn messages(&self) -> Vec<Value> {
        if self.body.trim_start().starts_with('{') {
            return serde_json::from_str(&self.body).into_iter().collect();
        }
        self.body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    }

    /// The response to request `id`, if the body holds it.
    pub fn response(&self, id: impl Into<Value>) -> Option<Value> {
        let id = id.into();
        self.messages().into_iter().find(|m| m["id"] == id && m.get("method").is_none())
    }
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Reads one whole response from `reader`: its head, then a body framed by `Content-Length` or
/// by chunked transfer encoding (with neither, the response has no body).
pub fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"));
    }
    if !line.starts_with("HTTP/1.1 ") {
        return Err(invalid(format!("not a status line: {line:?}")));
    }
    let status = line.get(9..12).and_then(|s| s.parse().ok()).ok_or_else(|| invalid("no status code"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let (k, v) = trimmed.split_once(':').ok_or_else(|| invalid(format!("header line {trimmed:?}")))?;
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let mut reply = Reply { status, headers, body: String::new() };
    let mut body = Vec::new();
    if reply.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or("");
            let size =
                usize::from_str_radix(size, 16).map_err(|_| invalid(format!("chunk size {line:?}")))?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = reply.header("content-length") {
        let length: usize = length.parse().map_err(|_| invalid(format!("content-length {length:?}")))?;
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
    }
    // Neither: a response without a body (`204`, `202`); the server frames every other
    // body, so reading on would wait for the next response on a keep-alive connection.
    reply.body = String::from_utf8_lossy(&body).into_owned();
    Ok(reply)
}

/// The `host:port` of `dsh-bash mcp --http`'s start line, if `line` is one.
pub fn start_line_authority(line: &str) -> Option<String> {
    let url = line.trim().strip_prefix("dsh-bash: serving MCP at http://")?;
    Some(url.split('/').next()?.to_owned())
}

/// A keep-alive HTTP/1.1 connection to the server's `/mcp` endpoint, with a bearer token;
/// each request is written in one piece, with `TCP_NODELAY`.
pub struct Conn {
    authority: String,
    token: String,
    /// The protocol version `initialize` agreed, sent on every later request.
    protocol_version: Option<String>,
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Conn {
    /// Connects to `authority`; a read that waits longer than `patience` fails.
    pub fn open(authority: &str, token: &str, patience: Duration) -> io::Result<Self> {
        let stream = TcpStream::connect(authority)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(patience))?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Self {
            authority: authority.to_owned(),
            token: token.to_owned(),
            protocol_version: None,
            writer: stream,
            reader,
        })
    }

    /// Sends one request on the connection (without waiting for its response).
    pub fn send(&mut self, method: &str, session: Option<&str>, body: Option<&Value>) -> io::Result<()> {
        let body = body.map(Value::to_string).unwrap_or_default();
        self.send_text(method, session, &body)
    }

    /// A POST of `body` as it is (JSON or not) in `session`; returns its response.
    pub fn exchange_raw(&mut self, session: &str, body: &str) -> io::Result<Reply> {
        self.send_text("POST", Some(session), body)?;
        self.receive()
    }

    fn send_text(&mut self, method: &str, session: Option<&str>, body: &str) -> io::Result<()> {
        let mut request = format!(
            "{method} /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nAuthorization: Bearer {}\r\n\
             Content-Length: {}\r\n",
            self.authority,
            self.token,
            body.len()
        );
        if let Some(session) = session {
            request.push_str(&format!("Mcp-Session-Id: {session}\r\n"));
            if let Some(version) = &self.protocol_version {
                request.push_str(&format!("Mcp-Protocol-Version: {version}\r\n"));
            }
        }
        request.push_str("\r\n");
        request.push_str(body);
        self.writer.write_all(request.as_bytes())
    }

    /// Reads the next response on the connection.
    pub fn receive(&mut self) -> io::Result<Reply> {
        read_reply(&mut self.reader)
    }

    /// Sends one request and reads its response.
    pub fn exchange(
        &mut self,
        method: &str,
        session: Option<&str>,
        body: Option<&Value>,
    ) -> io::Result<Reply> {
        self.send(method, session, body)?;
        self.receive()
    }

    /// `initialize` (as `client`) and `notifications/initialized`; returns the session id.
    pub fn open_session(&mut self, client: &str) -> io::Result<String> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": client, "version": "0"}}});
        let reply = self.exchange("POST", None, Some(&init))?;
        if reply.status != 200 {
            return Err(invalid(format!("initialize: HTTP {}: {}", reply.status, reply.body)));
        }
        let session = reply.header("mcp-session-id").ok_or_else(|| invalid("no session id"))?.to_owned();
        self.protocol_version =
            reply.response(0).and_then(|r| r["result"]["protocolVersion"].as_str().map(str::to_owned));
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let ack = self.exchange("POST", Some(&session), Some(&initialized))?;
        if ack.status != 202 {
            return Err(invalid(format!("notifications/initialized: HTTP {}", ack.status)));
        }
        Ok(session)
    }

    /// One `tools/call` of `tool`; returns the HTTP reply (which holds its response, or not).
    pub fn call(&mut self, session: &str, id: u64, tool: &str, arguments: Value) -> io::Result<Reply> {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        self.exchange("POST", Some(session), Some(&body))
    }

    /// Shuts the connection down (as a client that goes away would).
    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        self.writer.shutdown(how)
    }

    /// `DELETE` of the session; returns the status.
    pub fn delete(&mut self, session: &str) -> io::Result<u16> {
        Ok(self.exchange("DELETE", Some(session), None)?.status)
    }
}
