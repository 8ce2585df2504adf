//! One-time pages on loopback where the user types a secret a command asks for (askpass
//! through URL-mode elicitation): the secret goes from the user's browser straight to the
//! asking program, never through the MCP client or the model.
//!
//! A page is served at `http://127.0.0.1:<port>/askpass/<token>`, the token 244 random bits,
//! made for one question. It shows what asks (the tool, the command, the program's prompt,
//! all escaped) and a plain HTML form (no script at all) that posts back to the same URL. The
//! first post answers the question (the secret, or a refusal) and ends the page: a second post
//! or a reload finds nothing there (`410 Gone`). The page ends too when its question does
//! (the call ends, is cancelled or times out): [`SecretPage`] removes it when dropped.
//!
//! Every response carries `Cache-Control: no-store`, a Content-Security-Policy that allows no
//! script, style, image or frame and form posts to the page's own origin only
//! (`default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`),
//! `Referrer-Policy: same-origin` (with `no-referrer` a browser posts the form with
//! `Origin: null`), `X-Content-Type-Options: nosniff` and `X-Frame-Options: DENY`. A request whose `Host` is not the page's own address (a name
//! rebound to loopback) or a post with a foreign `Origin` is refused (`403`).
//!
//! The server is one per process, on its own thread and runtime, started by the first page.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use dsh_approval::escape_untrusted;
use dsh_core::Secret;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::sync::oneshot;

/// The path prefix of every page.
pub const PAGE_PATH: &str = "/askpass/";
/// The form field that carries the secret.
const SECRET_FIELD: &str = "secret";
/// The most bytes of a posted form read.
const MAX_FORM: usize = 64 * 1024;
/// The Content-Security-Policy of every response.
pub const CSP: &str = "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// What the user did on a page.
pub enum PageAnswer {
    /// Typed this secret and submitted it.
    Given(Secret),
    /// Refused on the page.
    Refused,
}

/// What a page shows: who asks, and with what words (all untrusted, escaped when shown).
struct Question {
    tool: String,
    command: Option<String>,
    prompt: String,
    answer: oneshot::Sender<PageAnswer>,
}

/// The pages waiting for an answer, by token.
type Pages = Arc<Mutex<HashMap<String, Question>>>;

/// The process's page server: its address and its pages.
struct PageServer {
    addr: SocketAddr,
    pages: Pages,
}

/// The one page server, started on first use (`Err`: it could not be, and why).
static SERVER: OnceLock<Result<PageServer, String>> = OnceLock::new();

/// One question's page: its URL and the id its elicitation carries. The page is served while
/// this lives; dropping it ends the page.
pub struct SecretPage {
    token: String,
    url: String,
    elicitation_id: String,
    pages: Pages,
    answer: Option<oneshot::Receiver<PageAnswer>>,
}

impl SecretPage {
    /// Opens a page for one question of `tool`'s command `command` (when known), whose
    /// program asked with `prompt`.
    pub fn open(tool: &str, command: Option<&str>, prompt: &str) -> Result<Self, String> {
        let server = SERVER.get_or_init(start).as_ref().map_err(Clone::clone)?;
        let token = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        let (tx, rx) = oneshot::channel();
        let question = Question {
            tool: tool.to_owned(),
            command: command.map(str::to_owned),
            prompt: prompt.to_owned(),
            answer: tx,
        };
        server.pages.lock().insert(token.clone(), question);
        Ok(Self {
            url: format!("http://{}{PAGE_PATH}{token}", server.addr),
            token,
            elicitation_id: uuid::Uuid::new_v4().to_string(),
            pages: Arc::clone(&server.pages),
            answer: Some(rx),
        })
    }

    /// The page's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `elicitationId` of the page's URL-mode elicitation (and its completion notice).
    pub fn elicitation_id(&self) -> &str {
        &self.elicitation_id
    }

    /// The page's answer, to wait for while the page lives; it is `None` if it can never
    /// come (the page ended, or this was asked before).
    pub fn answer(&mut self) -> impl std::future::Future<Output = Option<PageAnswer>> + Send + 'static {
        let answer = self.answer.take();
        async move { answer?.await.ok() }
    }
}

impl Drop for SecretPage {
    fn drop(&mut self) {
        self.pages.lock().remove(&self.token);
    }
}

/// Binds loopback and serves the pages on a thread of their own, so the server outlives any
/// one runtime that opened a page.
fn start() -> Result<PageServer, String> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| format!("cannot listen on loopback for the secret page: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("cannot read the secret page's address: {e}"))?;
    let pages: Pages = Arc::default();
    let served = Arc::clone(&pages);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the secret page's runtime: {e}"))?;
    std::thread::Builder::new()
        .name("dsh-secret-page".to_owned())
        .spawn(move || runtime.block_on(serve(listener, addr, served)))
        .map_err(|e| format!("cannot start the secret page's thread: {e}"))?;
    Ok(PageServer { addr, pages })
}

/// Accepts connections for ever.
async fn serve(listener: std::net::TcpListener, addr: SocketAddr, pages: Pages) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::warn!(%error, "the secret page cannot accept connections");
            return;
        }
    };
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "the secret page could not accept a connection");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let pages = Arc::clone(&pages);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let pages = Arc::clone(&pages);
                async move { Ok::<_, Infallible>(respond(request, addr, &pages).await) }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// One request: the form (`GET`), or its answer (`POST`).
async fn respond(request: Request<Incoming>, addr: SocketAddr, pages: &Pages) -> Response<Full<Bytes>> {
    let own = addr.to_string();
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok());
    if host != Some(own.as_str()) {
        return page(StatusCode::FORBIDDEN, "Refused", "This page answers at its own address only.");
    }
    let Some(token) = request.uri().path().strip_prefix(PAGE_PATH).map(str::to_owned) else {
        return page(StatusCode::NOT_FOUND, "Not found", "There is no page here.");
    };
    match *request.method() {
        Method::GET => {
            let pages = pages.lock();
            match pages.get(&token) {
                Some(question) => form(question),
                None => gone(),
            }
        }
        Method::POST => {
            let origin = request.headers().get(header::ORIGIN).and_then(|o| o.to_str().ok());
            if origin.is_some_and(|o| o != format!("http://{own}")) {
                return page(StatusCode::FORBIDDEN, "Refused", "This page takes answers from itself only.");
            }
            if !pages.lock().contains_key(&token) {
                return gone();
            }
            let body = match Limited::new(request.into_body(), MAX_FORM).collect().await {
                Ok(body) => body.to_bytes(),
                Err(_) => return page(StatusCode::PAYLOAD_TOO_LARGE, "Refused", "The answer is too long."),
            };
            let mut fields = parse_form(&body);
            let refused = fields.iter().any(|(k, v)| k == b"action" && v == b"refuse");
            let secret = fields.iter().position(|(k, _)| k == SECRET_FIELD.as_bytes());
            // Taken out: a second post finds nothing.
            let Some(question) = pages.lock().remove(&token) else { return gone() };
            let answer = match (refused, secret) {
                (false, Some(at)) => PageAnswer::Given(Secret::new(std::mem::take(&mut fields[at].1))),
                _ => PageAnswer::Refused,
            };
            for (_, value) in &mut fields {
                value.fill(0);
            }
            let given = matches!(answer, PageAnswer::Given(_));
            if question.answer.send(answer).is_err() {
                return gone();
            }
            if given {
                page(StatusCode::OK, "Sent", "The secret went to the command. You can close this page.")
            } else {
                page(StatusCode::OK, "Refused", "The command gets no secret. You can close this page.")
            }
        }
        _ => page(StatusCode::METHOD_NOT_ALLOWED, "Refused", "This page takes GET and POST only."),
    }
}

/// The answer for a page that is not (or no longer) there.
fn gone() -> Response<Full<Bytes>> {
    page(
        StatusCode::GONE,
        "Gone",
        "This page is gone: its question was answered, or the command that asked has ended.",
    )
}

/// The form for `question`.
fn form(question: &Question) -> Response<Full<Bytes>> {
    let mut body = format!(
        "<p>A command run by tool <b>{}</b> asks you for a secret (a password or passphrase).</p>\n",
        html(&question.tool)
    );
    if let Some(command) = &question.command {
        body.push_str(&format!("<p>Command:</p>\n<pre>{}</pre>\n", html(command)));
    }
    body.push_str(&format!(
        "<p>Its prompt (the command's own words, not the harness's):</p>\n<pre>{}</pre>\n",
        html(&question.prompt)
    ));
    body.push_str(
        "<form method=\"post\">\n\
         <p><label for=\"secret\">Secret, for this command only (never shown to the model or the MCP client):</label><br>\n\
         <input type=\"password\" id=\"secret\" name=\"secret\" autocomplete=\"off\" autofocus></p>\n\
         <p><button type=\"submit\" name=\"action\" value=\"give\">Give it to the command</button>\n\
         <button type=\"submit\" name=\"action\" value=\"refuse\">Refuse</button></p>\n\
         </form>\n<p>This page answers once.</p>\n",
    );
    page(StatusCode::OK, "A command asks for a secret", &body)
}

/// A whole page: `body` is HTML, or a plain sentence.
fn page(status: StatusCode, title: &str, body: &str) -> Response<Full<Bytes>> {
    let body = if body.starts_with('<') { body.to_owned() } else { format!("<p>{}</p>\n", html(body)) };
    let text = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"referrer\" content=\"same-origin\">\n<title>dsh-bash: {title}</title>\n</head>\n\
         <body>\n<h1>{title}</h1>\n{body}</body>\n</html>\n",
        title = html(title)
    );
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `text` for HTML: control characters escaped as text first, then markup characters.
fn html(text: &str) -> String {
    escape_untrusted(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// The fields of an `application/x-www-form-urlencoded` body, decoded.
fn parse_form(body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    body.split(|b| *b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = match pair.iter().position(|b| *b == b'=') {
                Some(at) => (&pair[..at], &pair[at + 1..]),
                None => (pair, &[][..]),
            };
            (decode(key), decode(value))
        })
        .collect()
}

/// Percent-decoding, with `+` as a space.
fn decode(text: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'+' => out.push(b' '),
            b'%' => match (text.get(i + 1).copied().and_then(hex), text.get(i + 2).copied().and_then(hex)) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            byte => out.push(byte),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_percent_escapes_and_plus() {
        assert_eq!(
            parse_form(b"secret=a+b%26c%3D%25%zz%4&action=give"),
            vec![(b"secret".to_vec(), b"a b&c=%%zz%4".to_vec()), (b"action".to_vec(), b"give".to_vec())]
        );
    }

    #[test]
    fn what_a_page_shows_is_escaped() {
        assert_eq!(
            html("<b>\"x\" & 'y'\u{1b}[2J</b>"),
            "&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;\\x1b[2J&lt;/b&gt;"
        );
    }
}
