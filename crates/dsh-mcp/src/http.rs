//! The streamable HTTP server: one MCP session per `Mcp-Session-Id`, each a session of the
//! composition; a bearer token on every request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use dsh_core::Context;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::options::McpOptions;
use crate::order::OrderedSessions;
use crate::origin::{Origin, origin_allowed};
use crate::server::McpServer;
use crate::session::Shared;
use crate::shutdown::shutdown_requested;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";
/// The most of an oversized body read (and dropped) before refusing it.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;
/// How long open connections get to finish once a shutdown starts.
const DRAIN: Duration = Duration::from_secs(2);

type Body = BoxBody<Bytes, Infallible>;
type McpService = StreamableHttpService<McpServer, OrderedSessions<LocalSessionManager>>;

/// Serves the composition over streamable HTTP at `http://<addr>/mcp` until a shutdown is
/// requested; then ends every session and disposes the composition. Every request must carry
/// `Authorization: Bearer <token>` (else 401) and no `Origin` or an allowed one (else 403,
/// see [`McpOptions::http_allowed_origins`]). A connection that does not send a complete
/// request head within [`McpOptions::http_header_timeout`] is closed, and at most
/// [`McpOptions::http_max_connections`] are open at once. Bind a loopback address unless the
/// network in between is trusted: the token is the only gate.
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
    let service = mcp_service(Arc::clone(&shared), &options, local, stop.child_token());
    let gate = Arc::new(Gate {
        bearer: format!("Bearer {token}"),
        origins: options.http_allowed_origins.clone(),
        max_body: options.max_message_bytes,
    });
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(options.http_header_timeout);
    let slots = Arc::new(Semaphore::new(options.http_max_connections.clamp(1, Semaphore::MAX_PERMITS)));
    let mut full = false;
    let mut connections = JoinSet::new();
    let shutdown = shutdown_requested(&options);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
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
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = &mut shutdown => break,
        }
    }
    stop.cancel();
    shared.close_sessions().await;
    let _ = tokio::time::timeout(DRAIN, async { while connections.join_next().await.is_some() {} }).await;
    connections.abort_all();
    ctx.dispose().await;
    Ok(())
}

fn mcp_service(
    shared: Arc<Shared>,
    options: &McpOptions,
    local: SocketAddr,
    stop: CancellationToken,
) -> McpService {
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(options.http_idle_timeout);
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
    let sessions = OrderedSessions(sessions);
    StreamableHttpService::new(move || Ok(McpServer::new(Arc::clone(&shared))), Arc::new(sessions), config)
}

/// What every request is checked against before the SDK sees it.
struct Gate {
    /// The whole expected `Authorization` value.
    bearer: String,
    origins: Vec<Origin>,
    max_body: usize,
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
    let body = match read_body(body, gate.max_body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let delete = parts.method == Method::DELETE;
    let mut response = service.handle(Request::from_parts(parts, Full::new(body))).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        // The session is closed by the time the SDK answers; clients expect 200 or 204 for
        // a completed termination (202 reads as a failure to some of them).
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
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
