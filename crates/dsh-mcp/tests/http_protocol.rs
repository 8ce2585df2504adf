//! The streamable HTTP server in-process, with a minimal HTTP client and stand-in tools:
//! the bearer token, one agent per MCP session, session end on DELETE, and shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dsh_core::plugins::{AgentsPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_core::{AGENTS, Agent, Context};
use dsh_mcp::{McpOptions, serve_http_on};
use dsh_test_support::eventually;
use dsh_test_support::fakes::register_fakes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

const TOKEN: &str = "test-token";

struct Reply {
    status: StatusCode,
    session: Option<String>,
    /// The JSON-RPC messages of the body (JSON or SSE `data:` lines).
    messages: Vec<Value>,
}

async fn send(
    addr: SocketAddr,
    method: Method,
    auth: Option<&str>,
    session: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let mut headers = Vec::new();
    if let Some(session) = session {
        headers.extend([("mcp-session-id", session), ("mcp-protocol-version", "2025-11-25")]);
    }
    send_with(addr, method, auth, &headers, body).await
}

/// [`send`] with `headers` added to the request.
async fn send_with(
    addr: SocketAddr,
    method: Method,
    auth: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Reply {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}/mcp"))
        .header("host", addr.to_string())
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(token) = auth {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let response =
        sender.send_request(request.body(Full::new(body)).expect("request")).await.expect("response");
    let status = response.status();
    let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let bytes = tokio::time::timeout(Duration::from_secs(20), response.into_body().collect())
        .await
        .expect("the body in time")
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    let messages = if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).into_iter().collect()
    } else {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    };
    Reply { status, session, messages }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "http-test", "version": "0"}}})
}

async fn open_session(addr: SocketAddr) -> String {
    let reply = send(addr, Method::POST, Some(TOKEN), None, Some(initialize())).await;
    assert_eq!(reply.status, StatusCode::OK);
    let session = reply.session.expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let ack = send(addr, Method::POST, Some(TOKEN), Some(&session), Some(initialized)).await;
    assert_eq!(ack.status, StatusCode::ACCEPTED);
    session
}

async fn call(addr: SocketAddr, session: &str, id: i64, name: &str, arguments: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    let reply = send(addr, Method::POST, Some(TOKEN), Some(session), Some(body)).await;
    assert_eq!(reply.status, StatusCode::OK);
    reply.messages.into_iter().find(|m| m["id"] == json!(id)).expect("the call's response")
}

struct Server {
    ctx: Context,
    addr: SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start() -> Server {
    let ctx = Context::new();
    ctx.load_default::<ToolsPlugin>().expect("tools");
    ctx.load_default::<SystemPromptPlugin>().expect("prompt");
    ctx.load_default::<AgentsPlugin>().expect("agents");
    register_fakes(&ctx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let options = McpOptions { handle_signals: false, ..McpOptions::default() };
    let stop = options.shutdown.clone();
    let handle = tokio::spawn(serve_http_on(ctx.clone(), options, listener, TOKEN.to_owned()));
    Server { ctx, addr, stop, handle }
}

fn agents(ctx: &Context) -> Vec<Arc<Agent>> {
    ctx.get(AGENTS).map(|a| a.all()).unwrap_or_default()
}

#[tokio::test]
async fn every_request_needs_the_bearer_token() {
    let server = start().await;
    let missing = send(server.addr, Method::POST, None, None, Some(initialize())).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert_eq!(missing.messages[0]["error"]["code"], json!(-32001));
    let wrong = send(server.addr, Method::POST, Some("other"), None, Some(initialize())).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let session = open_session(server.addr).await;
    let unauthorized_call = send(server.addr, Method::POST, None, Some(&session), Some(json!({}))).await;
    assert_eq!(unauthorized_call.status, StatusCode::UNAUTHORIZED);
    let ok = call(server.addr, &session, 2, "echo", json!({"text": "in"})).await;
    assert_eq!(ok["result"]["content"][0]["text"], json!("in"));
}

#[tokio::test]
async fn each_session_is_its_own_agent_until_it_is_deleted() {
    let server = start().await;
    let a = open_session(server.addr).await;
    let b = open_session(server.addr).await;
    assert_ne!(a, b);
    let who_a =
        call(server.addr, &a, 2, "whoami", json!({})).await["result"]["structuredContent"]["agent"].clone();
    let who_b =
        call(server.addr, &b, 2, "whoami", json!({})).await["result"]["structuredContent"]["agent"].clone();
    assert_ne!(who_a, who_b);
    assert_eq!(agents(&server.ctx).len(), 2);
    let agent_a = agents(&server.ctx).into_iter().find(|x| json!(x.id()) == who_a).expect("agent a");

    let deleted = send(server.addr, Method::DELETE, Some(TOKEN), Some(&a), None).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    eventually("session a's agent to be disposed", || agent_a.is_disposed()).await;
    let remaining: Vec<Value> = agents(&server.ctx).iter().map(|x| json!(x.id())).collect();
    assert_eq!(remaining, std::slice::from_ref(&who_b));
    let again = call(server.addr, &b, 3, "whoami", json!({})).await;
    assert_eq!(again["result"]["structuredContent"]["agent"], who_b);
}

#[tokio::test]
async fn shutdown_ends_every_session_and_disposes_the_composition() {
    let server = start().await;
    let session = open_session(server.addr).await;
    call(server.addr, &session, 2, "echo", json!({"text": "x"})).await;
    let agent = agents(&server.ctx).pop().expect("an agent");
    server.stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), server.handle)
        .await
        .expect("the server stops")
        .expect("join")
        .expect("ok");
    assert!(agent.is_disposed());
    assert!(server.ctx.get(AGENTS).is_none(), "the composition is disposed");
}

#[tokio::test]
async fn an_empty_token_is_refused_and_the_composition_disposed() {
    let ctx = Context::new();
    ctx.load_default::<AgentsPlugin>().expect("agents");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let options = McpOptions { handle_signals: false, ..McpOptions::default() };
    let error = serve_http_on(ctx.clone(), options, listener, "  ".to_owned()).await.expect_err("refused");
    assert_eq!(error.to_string(), "the HTTP bearer token must not be empty");
    assert!(ctx.get(AGENTS).is_none());
}

/// The `_meta` a 2026-07-28 request carries in place of `initialize`.
fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "http-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

#[tokio::test]
async fn modern_requests_need_routing_headers_that_match_their_body() {
    let server = start().await;
    let addr = server.addr;
    let version = ("mcp-protocol-version", "2026-07-28");
    let discover =
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta()}});
    let found = send_with(
        addr,
        Method::POST,
        Some(TOKEN),
        &[version, ("mcp-method", "server/discover")],
        Some(discover),
    )
    .await;
    assert_eq!(found.status, StatusCode::OK);
    assert_eq!(found.session, None, "no Mcp-Session-Id under 2026-07-28");
    let versions = &found.messages[0]["result"]["supportedVersions"];
    assert!(versions.as_array().is_some_and(|v| v.contains(&json!("2026-07-28"))), "{versions}");

    let call = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": "routed"}, "_meta": modern_meta()}})
    };
    let routed = [version, ("mcp-method", "tools/call"), ("mcp-name", "echo")];
    let ok = send_with(addr, Method::POST, Some(TOKEN), &routed, Some(call(2))).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.session, None);
    let answer = ok.messages.iter().find(|m| m["id"] == json!(2)).expect("the call's answer");
    assert_eq!(answer["result"]["content"][0]["text"], json!("routed"), "{answer}");
    assert_eq!(agents(&server.ctx).len(), 1, "the principal's session");

    // A header that names another method or tool than the body, or none, is refused before
    // the call runs: 400 and the spec's header-mismatch error.
    for headers in [
        vec![version, ("mcp-method", "tools/call"), ("mcp-name", "job_kill")],
        vec![version, ("mcp-method", "tools/list"), ("mcp-name", "echo")],
        vec![version, ("mcp-name", "echo")],
        vec![version, ("mcp-method", "tools/call")],
    ] {
        let refused = send_with(addr, Method::POST, Some(TOKEN), &headers, Some(call(3))).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{headers:?}");
        assert_eq!(
            refused.messages[0]["error"]["code"],
            json!(-32020),
            "{headers:?}: {:?}",
            refused.messages
        );
    }

    // Later requests of the principal share its session.
    let again = send_with(addr, Method::POST, Some(TOKEN), &routed, Some(call(4))).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(agents(&server.ctx).len(), 1, "still the principal's one session");
    server.stop.cancel();
    server.handle.await.expect("join").expect("served");
}
