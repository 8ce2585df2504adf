//! The streamable HTTP server: one MCP session per `Mcp-Session-Id`, each a session of the
//! composition; a bearer token on every request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dsh_core::Context;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::options::McpOptions;
use crate::server::McpServer;
use crate::session::Shared;
use crate::shutdown::shutdown_requested;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";
/// How long open connections get to finish once a shutdown starts.
const DRAIN: Duration = Duration::from_secs(2);

type Body = BoxBody<Bytes, Infallible>;
type McpService = StreamableHttpService<McpServer, LocalSessionManager>;

/// Serves the composition over streamable HTTP at `http://<addr>/mcp` until a shutdown is
/// requested; then ends every session and disposes the composition. Every request must carry
/// `Authorization: Bearer <token>` (else 401). Bind a loopback address unless the network
/// in between is trusted: the token is the only gate.
pub async fn serve_http(
    ctx: Context,
    options: McpOptions,
    addr: SocketAddr,
    token: String,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve_http_on(ctx, options, listener, token).await
}

/// [`serve_http`] on an already bound listener (e.g. port 0 in tests).
pub async fn serve_http_on(
    ctx: Context,
    options: McpOptions,
    listener: TcpListener,
    token: String,
) -> anyhow::Result<()> {
    anyhow::ensure!(!token.trim().is_empty(), "the HTTP bearer token must not be empty");
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() {
        tracing::warn!(%local, "serving MCP on a non-loopback address; the bearer token is the only gate");
    }
    let shared = Arc::new(Shared::new(ctx.clone(), options.clone()));
    let stop = CancellationToken::new();
    let service = mcp_service(Arc::clone(&shared), &options, local, stop.child_token());
    let expected = Arc::new(format!("Bearer {token}"));
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
                let service = service.clone();
                let expected = Arc::clone(&expected);
                connections.spawn(async move {
                    let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let service = service.clone();
                        let expected = Arc::clone(&expected);
                        async move { Ok::<_, Infallible>(route(&service, &expected, request).await) }
                    });
                    if let Err(error) = http1::Builder::new().serve_connection(TokioIo::new(stream), handler).await {
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
    StreamableHttpService::new(move || Ok(McpServer::new(Arc::clone(&shared))), Arc::new(sessions), config)
}

async fn route(service: &McpService, expected: &str, request: Request<Incoming>) -> Response<Body> {
    if !authorized(request.headers(), expected) {
        return unauthorized();
    }
    if request.uri().path() != MCP_PATH {
        return plain(StatusCode::NOT_FOUND, "not found; the MCP endpoint is /mcp");
    }
    service.handle(request).await
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
