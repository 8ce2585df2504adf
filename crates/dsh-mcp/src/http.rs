//! The streamable HTTP server: one MCP session per `Mcp-Session-Id`, each a session of the
//! composition; a bearer token on every request.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use dsh_core::Context;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::model::RequestId;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::options::McpOptions;
use crate::order::{CallBook, INVALID_REQUEST, IdClaim, OrderedSessions, id_in_use, with_session_permit};
use crate::origin::{Origin, origin_allowed};
use crate::server::{Home, McpServer};
use crate::session::Shared;
use crate::shutdown::shutdown_requested;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";
/// The most of an oversized body read (and dropped) before refusing it.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;
/// How long open connections get to finish once a shutdown starts.
const DRAIN: Duration = Duration::from_secs(2);
/// How long a request's answer is held back to send it as plain JSON: a request answered by
/// one message within it gets `application/json`; any other gets the SSE stream (whose
/// keep-alives then keep the client's read timeout at bay).
const JSON_WAIT: Duration = Duration::from_secs(1);
/// The first and the longest pause of the accept loop out of descriptors.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(100);
/// The reason a call is aborted with when its client drops the response stream.
const CLIENT_DISCONNECTED: &str = "the MCP client disconnected";
/// The JSON-RPC error code of the session-cap refusal (a server error).
const SESSION_CAP_CODE: i64 = -32000;

/// The JSON-RPC error message of an `initialize` refused because `max` sessions are open
/// (sent with HTTP 503).
pub fn session_cap_message(max: usize) -> String {
    format!(
        "Service Unavailable: the server already has its maximum of {max} MCP sessions \
         (--max-sessions {max}); end a session (HTTP DELETE) or retry later"
    )
}

type Body = BoxBody<Bytes, Infallible>;
type Sessions = OrderedSessions<LocalSessionManager>;
type McpService = StreamableHttpService<McpServer, Sessions>;

/// Serves the composition over streamable HTTP at `http://<addr>/mcp` until a shutdown is
/// requested; then ends every session and disposes the composition. Every request must carry
/// `Authorization: Bearer <token>` (else 401) and no `Origin` or an allowed one (else 403,
/// see [`McpOptions::http_allowed_origins`]). A connection that does not send a complete
/// request head within [`McpOptions::http_header_timeout`] is closed, and at most
/// [`McpOptions::http_max_connections`] are open at once, and at most
/// [`McpOptions::http_max_sessions`] sessions (an `initialize` beyond it gets 503 and a
/// JSON-RPC error, [`session_cap_message`]). Bind a loopback address unless the network in
/// between is trusted: the token is the only gate.
pub async fn serve_http(
    ctx: Context,
    options: McpOptions,
    addr: SocketAddr,
    token: String,
) -> anyhow::Result<()> {
    match TcpListener::bind(addr).await {
        Ok(listener) => serve_http_on(ctx, options, listener, token).await,
        Err(error) => {
            ctx.dispose().await;
            Err(anyhow::Error::from(error).context(format!("cannot listen on {addr}")))
        }
    }
}

/// [`serve_http`] on an already bound listener (e.g. port 0 in tests).
pub async fn serve_http_on(
    ctx: Context,
    options: McpOptions,
    listener: TcpListener,
    token: String,
) -> anyhow::Result<()> {
    let local = match listener.local_addr() {
        Ok(local) if !token.trim().is_empty() => local,
        local => {
            ctx.dispose().await;
            local?;
            anyhow::bail!("the HTTP bearer token must not be empty");
        }
    };
    if !local.ip().is_loopback() {
        tracing::warn!(%local, "serving MCP on a non-loopback address; the bearer token is the only gate");
    }
    let shared = Arc::new(Shared::new(ctx.clone(), options.clone()));
    let stop = CancellationToken::new();
    let (service, sessions) = mcp_service(Arc::clone(&shared), &options, local, stop.child_token());
    let max_sessions = options.http_max_sessions.clamp(1, Semaphore::MAX_PERMITS);
    let gate = Arc::new(Gate {
        bearer: format!("Bearer {token}"),
        origins: options.http_allowed_origins.clone(),
        max_body: options.max_message_bytes,
        body_timeout: options.http_header_timeout,
        sessions: sessions.clone(),
        session_slots: Arc::new(Semaphore::new(max_sessions)),
        max_sessions,
    });
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(options.http_header_timeout);
    let slots = Arc::new(Semaphore::new(options.http_max_connections.clamp(1, Semaphore::MAX_PERMITS)));
    let mut full = false;
    let mut connections = JoinSet::new();
    let shutdown = shutdown_requested(&options);
    tokio::pin!(shutdown);
    // Out of descriptors (or memory), `accept` fails at once for as long as it lasts: the
    // loop pauses instead of spinning, longer each time, and says so once per episode.
    let mut backoff = Duration::ZERO;
    let mut paused = false;
    let pause = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(pause);
    loop {
        tokio::select! {
            accepted = listener.accept(), if !paused => {
                let stream = match accepted {
                    Ok((stream, _)) => {
                        if !backoff.is_zero() {
                            tracing::warn!("accepting HTTP connections again");
                            backoff = Duration::ZERO;
                        }
                        stream
                    }
                    Err(error) if out_of_resources(&error) => {
                        if backoff.is_zero() {
                            tracing::warn!(
                                %error,
                                "cannot accept HTTP connections: the server is out of resources; \
                                 retrying until some are free"
                            );
                        }
                        backoff = (backoff * 2).clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
                        pause.as_mut().reset(tokio::time::Instant::now() + backoff);
                        paused = true;
                        continue;
                    }
                    Err(error) => {
                        // One connection's trouble (e.g. reset before it was accepted).
                        tracing::debug!(%error, "accept failed");
                        continue;
                    }
                };
                // Over the cap the connection is closed at once (dropping it), so a flood of
                // idle connections cannot exhaust the server's descriptors or memory.
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    if !full {
                        tracing::warn!(max = options.http_max_connections, "too many HTTP connections; closing new ones");
                    }
                    full = true;
                    drop(stream);
                    continue;
                };
                full = false;
                // Responses are written as soon as they are ready: a small response left to
                // Nagle's algorithm waits for the client's delayed ACK (40 ms).
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(%error, "could not set TCP_NODELAY");
                }
                let service = service.clone();
                let gate = Arc::clone(&gate);
                let http = http.clone();
                let closing = stop.clone();
                connections.spawn(async move {
                    let _slot = slot;
                    let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let service = service.clone();
                        let gate = Arc::clone(&gate);
                        async move { Ok::<_, Infallible>(route(&service, &gate, request).await) }
                    });
                    let connection = http.serve_connection(TokioIo::new(stream), handler);
                    tokio::pin!(connection);
                    let ended = tokio::select! {
                        ended = connection.as_mut() => ended,
                        _ = closing.cancelled() => {
                            // Finish the request in flight, then close instead of idling.
                            connection.as_mut().graceful_shutdown();
                            connection.await
                        }
                    };
                    if let Err(error) = ended {
                        tracing::debug!(%error, "HTTP connection ended with an error");
                    }
                });
            }
            () = &mut pause, if paused => paused = false,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = &mut shutdown => break,
        }
    }
    // Every session torn down (calls answered or aborted, processes gone) while the
    // connections still stand, then the SDK's sessions and the connections stop.
    sessions.close_all().await;
    stop.cancel();
    shared.close_sessions().await;
    let _ = tokio::time::timeout(DRAIN, async { while connections.join_next().await.is_some() {} }).await;
    connections.abort_all();
    ctx.dispose().await;
    Ok(())
}

/// Whether a failed `accept` is the server running out of descriptors or memory (which
/// lasts until some are freed), rather than one connection's trouble.
fn out_of_resources(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

fn mcp_service(
    shared: Arc<Shared>,
    options: &McpOptions,
    local: SocketAddr,
    stop: CancellationToken,
) -> (McpService, Sessions) {
    let mut sessions = LocalSessionManager::default();
    // The SDK's keep-alive counts only its own events, so it ends a session whose one call
    // runs long: `OrderedSessions` times sessions out instead, never with a call in flight.
    sessions.session_config.keep_alive = None;
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop)
        .with_max_request_body_bytes(options.max_message_bytes);
    if local.ip().is_unspecified() {
        // Bound to every interface on purpose: any Host may reach us; the token still gates.
        config = config.disable_allowed_hosts();
    } else if !local.ip().is_loopback() {
        let mut hosts = config.allowed_hosts.clone();
        hosts.push(local.ip().to_string());
        config = config.with_allowed_hosts(hosts);
    }
    let sessions = OrderedSessions::new(sessions, options.http_idle_timeout, options.http_on_no_sessions);
    let service = StreamableHttpService::new(
        move || Ok(McpServer::new(Arc::clone(&shared), Home::Principal)),
        Arc::new(sessions.clone()),
        config,
    );
    (service, sessions)
}

/// What every request is checked against before the SDK sees it.
struct Gate {
    /// The whole expected `Authorization` value.
    bearer: String,
    origins: Vec<Origin>,
    max_body: usize,
    /// How long a request's body may take to arrive, from the end of its head.
    body_timeout: Duration,
    sessions: Sessions,
    /// One permit per open session (see [`McpOptions::http_max_sessions`]).
    session_slots: Arc<Semaphore>,
    max_sessions: usize,
}

/// The method and id of a JSON-RPC request body (`None` for anything else).
struct RpcRequest {
    method: String,
    id: Value,
}

impl RpcRequest {
    fn peek(body: &[u8]) -> Option<Self> {
        let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(body) else { return None };
        let id = message.remove("id").filter(|id| !id.is_null())?;
        let Some(Value::String(method)) = message.remove("method") else { return None };
        Some(Self { method, id })
    }
}

async fn route(service: &McpService, gate: &Gate, request: Request<Incoming>) -> Response<Body> {
    let origin = request.headers().get(header::ORIGIN).map(HeaderValue::as_bytes);
    if !origin_allowed(origin, &gate.origins) {
        return closing(plain(StatusCode::FORBIDDEN, "forbidden: requests from this Origin are not allowed"));
    }
    if !authorized(request.headers(), &gate.bearer) {
        return closing(unauthorized());
    }
    if request.uri().path() != MCP_PATH {
        return closing(plain(StatusCode::NOT_FOUND, "not found; the MCP endpoint is /mcp"));
    }
    // Read the whole body (bounded) before the SDK sees the request: an answer given without
    // reading it would make the connection unusable for the client's next request.
    let (parts, body) = request.into_parts();
    // Bounded in time as the head is: a body that never arrives must not hold its
    // connection (and its place under the connection cap) forever.
    let body = match tokio::time::timeout(gate.body_timeout, read_body(body, gate.max_body)).await {
        Ok(Ok(body)) => body,
        Ok(Err(response)) => return response,
        Err(_) => {
            return closing(plain(StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time"));
        }
    };
    let session = parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok());
    let book = session.and_then(|session| gate.sessions.book(session));
    // A body that is no usable message gets the JSON-RPC error the stdio server gives the
    // same line (parse error, invalid request, invalid params), not the SDK's own answers;
    // one for a session that does not exist is the SDK's to refuse (404).
    if parts.method == Method::POST
        && (session.is_none() || book.is_some())
        && let Some(error) = crate::stdio::refusal(&body)
    {
        // In a session, a request's error is its answer (200); without one, or without a
        // request to answer, the input is not accepted (400), as the transport asks.
        let status =
            if book.is_some() && !error["id"].is_null() { StatusCode::OK } else { StatusCode::BAD_REQUEST };
        return json_rpc_error(error, status);
    }
    let delete = parts.method == Method::DELETE;
    let rpc = if parts.method == Method::POST { RpcRequest::peek(&body) } else { None };
    let mut permit = None;
    if let Some(rpc) = &rpc
        && session.is_none()
        && rpc.method == "initialize"
    {
        match Arc::clone(&gate.session_slots).try_acquire_owned() {
            Ok(slot) => permit = Some(slot),
            Err(_) => return session_cap_reached(gate.max_sessions, rpc.id.clone()),
        }
    }
    let request_id = rpc.as_ref().and_then(|rpc| serde_json::from_value::<RequestId>(rpc.id.clone()).ok());
    // The request's id is held from here until its answer is complete: a second request
    // with it meanwhile is refused before the SDK sees it.
    let claim = match (&book, &request_id) {
        (Some(book), Some(id)) => match book.claim(id) {
            Some(claim) => Some(claim),
            None => return id_in_use_refusal(id),
        },
        _ => None,
    };
    // A call whose client goes away before its result is aborted (this guard goes with the
    // response; dropped before the end, it fires).
    let guard = match (&rpc, book, request_id) {
        (Some(rpc), Some(book), Some(id)) if rpc.method == "tools/call" => {
            Some(AbortOnDrop { book, id, armed: true })
        }
        _ => None,
    };
    let request = Request::from_parts(parts, Full::new(body));
    let mut response = with_session_permit(permit, service.handle(request)).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        // The session is torn down by the time the SDK answers; clients expect 200 or 204 for
        // a completed termination (202 reads as a failure to some of them).
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    let event_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    if rpc.is_some() && response.status() == StatusCode::OK && event_stream {
        return answer(response, guard, claim).await;
    }
    response
}

/// The answer to a request whose id is in use by a request in flight in its session: a
/// JSON-RPC error; the first request goes on untouched.
fn id_in_use_refusal(id: &RequestId) -> Response<Body> {
    let error = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": INVALID_REQUEST, "message": id_in_use(id) }
    });
    json_rpc_error(error, StatusCode::OK)
}

/// A JSON-RPC error as the whole answer, with `status`.
fn json_rpc_error(error: Value, status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(error.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The answer to one JSON-RPC request: plain JSON when the SDK's stream starts with the
/// response (within [`JSON_WAIT`]), which the transport allows for a client that accepts
/// `application/json` (every client does: the SDK requires it); otherwise the stream, with
/// what was read of it first.
async fn answer(
    response: Response<Body>,
    mut guard: Option<AbortOnDrop>,
    claim: Option<IdClaim>,
) -> Response<Body> {
    let (mut parts, mut body) = response.into_parts();
    let mut seen = VecDeque::new();
    let mut ended = false;
    let wait = tokio::time::sleep(JSON_WAIT);
    tokio::pin!(wait);
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            () = &mut wait => break,
        };
        let Some(Ok(frame)) = frame else {
            ended = true;
            break;
        };
        let Ok(data) = frame.into_data() else { continue };
        match sse_event(&data) {
            SseEvent::Quiet => seen.push_back(data),
            SseEvent::Other => {
                seen.push_back(data);
                break;
            }
            SseEvent::Answer(json) => {
                if let Some(guard) = guard.as_mut() {
                    guard.armed = false;
                }
                parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                parts.headers.remove(header::CACHE_CONTROL);
                parts.headers.remove("x-accel-buffering");
                // The SDK is done with the request: its id is free once this is dropped.
                drop(claim);
                return Response::from_parts(parts, Full::new(json).boxed());
            }
        }
    }
    let rest = (!ended).then_some(body);
    Response::from_parts(parts, Replay { seen, rest, guard, _claim: claim }.boxed())
}

/// One event of the SDK's SSE stream, as [`answer`] sees it.
enum SseEvent {
    /// A priming event (no data) or a keep-alive comment.
    Quiet,
    /// The final answer: a JSON-RPC response or error (its JSON text).
    Answer(Bytes),
    /// A notification or a server request: the stream is needed.
    Other,
}

fn sse_event(event: &Bytes) -> SseEvent {
    for line in event.split(|&b| b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else { continue };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if data.is_empty() {
            return SseEvent::Quiet;
        }
        return match serde_json::from_slice::<Value>(data) {
            Ok(Value::Object(message)) if !message.contains_key("method") => {
                SseEvent::Answer(event.slice_ref(data))
            }
            _ => SseEvent::Other,
        };
    }
    SseEvent::Quiet
}

/// Aborts call `id` of a session when dropped armed: its client went away before the result.
struct AbortOnDrop {
    book: CallBook,
    id: RequestId,
    armed: bool,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.book.abort_call(&self.id, CLIENT_DISCONNECTED);
        }
    }
}

/// The SDK's SSE stream, with the events [`answer`] already read in front; holds the call's
/// [`AbortOnDrop`] until the stream ends, and the request's id until the stream goes.
struct Replay {
    seen: VecDeque<Bytes>,
    rest: Option<Body>,
    guard: Option<AbortOnDrop>,
    _claim: Option<IdClaim>,
}

impl hyper::body::Body for Replay {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if let Some(data) = this.seen.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        let polled = match this.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        };
        if let Poll::Ready(None) = polled {
            this.rest = None;
            if let Some(guard) = this.guard.as_mut() {
                guard.armed = false;
            }
        }
        polled
    }
}

/// 503 for an `initialize` beyond the session cap, as a JSON-RPC error naming the cap.
fn session_cap_reached(max: usize, id: Value) -> Response<Body> {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": SESSION_CAP_CODE, "message": session_cap_message(max) }
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The body, at most `max` bytes. A larger one is drained (up to [`DRAIN_LIMIT`], so the
/// client finishes sending and can read the answer) and refused with 413.
async fn read_body(mut body: Incoming, max: usize) -> Result<Bytes, Response<Body>> {
    let mut kept = BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err(closing(plain(StatusCode::BAD_REQUEST, "the request body could not be read")));
        };
        let Ok(data) = frame.into_data() else { continue };
        seen = seen.saturating_add(data.len());
        if seen <= max {
            kept.extend_from_slice(&data);
        } else if seen > DRAIN_LIMIT {
            break;
        }
    }
    if seen > max {
        return Err(closing(plain(StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large")));
    }
    Ok(kept.freeze())
}

/// Asks the client not to reuse the connection (its request body may be unread).
fn closing(mut response: Response<Body>) -> Response<Body> {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Constant-time comparison of the whole `Authorization` value.
fn authorized(headers: &HeaderMap, expected: &str) -> bool {
    let Some(given) = headers.get(header::AUTHORIZATION) else { return false };
    let given = given.as_bytes();
    let expected = expected.as_bytes();
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

fn unauthorized() -> Response<Body> {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32001, "message": "Unauthorized: send Authorization: Bearer <token>" }
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_must_match_exactly() {
        let mut headers = HeaderMap::new();
        assert!(!authorized(&headers, "Bearer s3cret"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s3cret"));
        assert!(authorized(&headers, "Bearer s3cret"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s3cre"));
        assert!(!authorized(&headers, "Bearer s3cret"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s3creT"));
        assert!(!authorized(&headers, "Bearer s3cret"));
    }
}
