//! Credentials added at the proxy: a session's placeholders, its certificate authority, and
//! the HTTP/1.1 relay that puts a secret's value into the requests to the hosts it is bound to.
//!
//! A confined command holds a placeholder (`dsh-cred-<name>-<random hex>`) in place of each
//! bound secret. A `CONNECT` to a bound host is not tunnelled: the proxy answers the command's
//! TLS with a certificate for that host signed by the session's authority (which only the
//! confined commands of the session trust), reads each request, replaces the placeholder with
//! the value in `Authorization` (bearer tokens and `Basic` user:password pairs alike) and in
//! the headers the binding names, and sends the request on over TLS to the real host, whose
//! certificate it verifies against the host's trust store (or the file the user named). Only
//! HTTP/1.1 is offered to the command. A request to any other host leaves the proxy as the
//! command sent it: a placeholder there is worth nothing outside this session's proxy.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use dsh_sandbox::{CredentialBinding, Credentials};
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::head::MAX_HEADERS;
use crate::{MAX_HEAD, NetworkGate};

/// Why a session's credential vault could not be made, or a bound host's certificate.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The file of upstream certificate authorities could not be read.
    #[error("cannot read the upstream certificate authorities {}: {source}", file.display())]
    UpstreamCa {
        /// The file named by the user.
        file: PathBuf,
        /// Why it could not be read.
        source: rustls::pki_types::pem::Error,
    },
    /// The file of upstream certificate authorities has no certificate in it.
    #[error("{} holds no PEM certificate", .0.display())]
    NoPemCertificate(PathBuf),
    /// No upstream file was named and the host's trust store is empty.
    #[error("the host's trust store holds no certificate authority")]
    EmptyTrustStore,
    /// None of the upstream authorities could be used by TLS.
    #[error("no usable certificate authority to verify bound hosts against")]
    NoUsableAuthority,
    /// TLS could not be configured.
    #[error("cannot configure TLS: {0}")]
    Tls(#[source] rustls::Error),
    /// The session's certificate authority could not be made.
    #[error("cannot make the session's certificate authority: {0}")]
    Authority(#[source] rcgen::Error),
    /// A certificate for a bound host could not be made.
    #[error("cannot make a certificate for {host}: {source}")]
    Leaf {
        /// The bound host.
        host: String,
        /// What rcgen said.
        source: rcgen::Error,
    },
}

/// One bound secret and the placeholder confined commands hold for it.
struct Bound {
    binding: CredentialBinding,
    placeholder: String,
}

/// A session's credentials: placeholders, certificate authority and upstream trust. The
/// authority's key never leaves this value (it is not written anywhere).
pub struct CredentialVault {
    bound: Vec<Bound>,
    ca_key: rcgen::KeyPair,
    ca_cert: rcgen::Certificate,
    /// The PEM bundle confined commands trust: the host's trust store, the user's upstream
    /// authorities (when named), then the session's authority.
    trust_bundle: String,
    /// The leaf certificate of each bound host seen so far, as a server configuration.
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    upstream: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for CredentialVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.bound.iter().map(|b| b.binding.name.as_str()).collect();
        f.debug_struct("CredentialVault").field("names", &names).finish_non_exhaustive()
    }
}

/// The TLS implementation of both legs: *ring* (pure Rust and assembly, no C toolchain
/// beyond the compiler's). It offers no post-quantum key exchange, hence the deprecation this
/// allows; the command's leg never leaves the machine.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A fresh placeholder for `name`: `dsh-cred-<name>-<32 hex digits>`.
fn placeholder(name: &str) -> String {
    let bytes: [u8; 16] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tag: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    format!("dsh-cred-{tag}-{hex}")
}

/// `der` as one PEM certificate block.
fn pem_certificate(der: &[u8]) -> String {
    let text = BASE64.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in text.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The certificates upstream servers are verified against: the user's file, else the host's
/// trust store.
fn upstream_roots(credentials: &Credentials) -> Result<Vec<CertificateDer<'static>>, CredentialError> {
    if let Some(file) = &credentials.upstream_ca {
        let certs = CertificateDer::pem_file_iter(file)
            .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
            .map_err(|source| CredentialError::UpstreamCa { file: file.clone(), source })?;
        if certs.is_empty() {
            return Err(CredentialError::NoPemCertificate(file.clone()));
        }
        return Ok(certs);
    }
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::debug!(error = %error, "a certificate of the host's trust store was not loaded");
    }
    if found.certs.is_empty() {
        return Err(CredentialError::EmptyTrustStore);
    }
    Ok(found.certs)
}

impl CredentialVault {
    /// A session's vault for `credentials`: fresh placeholders and a fresh authority.
    pub fn new(credentials: &Credentials) -> Result<Self, CredentialError> {
        let roots = upstream_roots(credentials)?;
        let mut store = rustls::RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(roots.iter().cloned());
        if added == 0 {
            return Err(CredentialError::NoUsableAuthority);
        }
        let mut upstream = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(CredentialError::Tls)?
            .with_root_certificates(store)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![b"http/1.1".to_vec()];

        let ca_key = rcgen::KeyPair::generate().map_err(CredentialError::Authority)?;
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(CredentialError::Authority)?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.distinguished_name.push(rcgen::DnType::CommonName, "dsh-bash session credential proxy");
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let ca_cert = params.self_signed(&ca_key).map_err(CredentialError::Authority)?;

        // The commands' bundle: the host's trust store (so unbound hosts verify as before),
        // the user's file of upstream authorities when named, and the session's authority.
        let mut trust_bundle = String::new();
        if credentials.upstream_ca.is_some() {
            for cert in rustls_native_certs::load_native_certs().certs {
                trust_bundle.push_str(&pem_certificate(&cert));
            }
        }
        for cert in &roots {
            trust_bundle.push_str(&pem_certificate(cert));
        }
        trust_bundle.push_str(&ca_cert.pem());
        let bound = credentials
            .bindings
            .iter()
            .map(|b| Bound { placeholder: placeholder(&b.name), binding: b.clone() })
            .collect();
        Ok(Self {
            bound,
            ca_key,
            ca_cert,
            trust_bundle,
            leaves: Mutex::new(HashMap::new()),
            upstream: Arc::new(upstream),
        })
    }

    /// Each secret's name and its placeholder, in binding order.
    pub fn placeholders(&self) -> impl Iterator<Item = (&str, &str)> {
        self.bound.iter().map(|b| (b.binding.name.as_str(), b.placeholder.as_str()))
    }

    /// Each binding (for the harness's output redaction).
    pub fn bindings(&self) -> impl Iterator<Item = &CredentialBinding> {
        self.bound.iter().map(|b| &b.binding)
    }

    /// The PEM bundle a confined command trusts: the host's trust store, the user's upstream
    /// authorities (when named) and the session's authority (so hosts that are not bound still
    /// verify).
    pub fn trust_bundle(&self) -> &str {
        &self.trust_bundle
    }

    /// The session authority's certificate alone (PEM).
    pub fn ca_certificate(&self) -> String {
        self.ca_cert.pem()
    }

    /// Whether any secret is bound to `host:port`.
    pub fn binds(&self, host: &str, port: u16) -> bool {
        self.bound.iter().any(|b| b.binding.binds(host, port))
    }

    /// The TLS configuration the proxy answers a command's handshake for `host` with.
    fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, CredentialError> {
        let host = dsh_sandbox::normalize_host(host);
        if let Some(config) = self.leaves.lock().get(&host) {
            return Ok(Arc::clone(config));
        }
        let leaf_error = |source| CredentialError::Leaf { host: host.clone(), source };
        let key = rcgen::KeyPair::generate().map_err(leaf_error)?;
        let mut params = rcgen::CertificateParams::new(vec![host.clone()]).map_err(leaf_error)?;
        params.distinguished_name.push(rcgen::DnType::CommonName, host.clone());
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        let leaf = params.signed_by(&key, &self.ca_cert, &self.ca_key).map_err(leaf_error)?;
        let chain = vec![leaf.der().clone(), self.ca_cert.der().clone()];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(CredentialError::Tls)?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(CredentialError::Tls)?;
        // HTTP/2 would need a relay of its own: the command is offered HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        self.leaves.lock().insert(host, Arc::clone(&config));
        Ok(config)
    }

    /// Replaces the placeholders of the secrets bound to `host:port` in one request head;
    /// returns the new head and the names of the secrets it now carries.
    pub(crate) fn rewrite_request(&self, head: &[u8], host: &str, port: u16) -> (Vec<u8>, Vec<String>) {
        let bound: Vec<&Bound> = self.bound.iter().filter(|b| b.binding.binds(host, port)).collect();
        let mut injected = Vec::new();
        if bound.is_empty() {
            return (head.to_vec(), injected);
        }
        let mut out = Vec::with_capacity(head.len() + 64);
        let mut lines = head.split_inclusive(|b| *b == b'\n');
        if let Some(request_line) = lines.next() {
            out.extend_from_slice(request_line);
        }
        for line in lines {
            let Some(colon) = line.iter().position(|b| *b == b':') else {
                out.extend_from_slice(line);
                continue;
            };
            let name = String::from_utf8_lossy(&line[..colon]).trim().to_ascii_lowercase();
            let value_end = line.len() - line.iter().rev().take_while(|b| matches!(b, b'\r' | b'\n')).count();
            let value = &line[colon + 1..value_end];
            let mut new_value = None;
            for b in &bound {
                let named = name == "authorization"
                    || b.binding.headers.iter().any(|h| h.eq_ignore_ascii_case(&name));
                if !named {
                    continue;
                }
                let current = new_value.as_deref().unwrap_or(value);
                let replaced = if name == "authorization" {
                    replace_in_authorization(current, b.placeholder.as_bytes(), b.binding.expose())
                } else {
                    replace_bytes(current, b.placeholder.as_bytes(), b.binding.expose())
                };
                if let Some(replaced) = replaced {
                    new_value = Some(replaced);
                    if !injected.contains(&b.binding.name) {
                        injected.push(b.binding.name.clone());
                    }
                }
            }
            match new_value {
                Some(value) => {
                    out.extend_from_slice(&line[..=colon]);
                    out.extend_from_slice(&value);
                    out.extend_from_slice(&line[value_end..]);
                }
                None => out.extend_from_slice(line),
            }
        }
        (out, injected)
    }

    /// An `Authorization: Basic` value for URL userinfo that carries a bound placeholder
    /// (`user:placeholder@host`), with the value in its place.
    pub(crate) fn userinfo_authorization(
        &self,
        userinfo: &str,
        host: &str,
        port: u16,
    ) -> Option<(String, Vec<String>)> {
        let mut text = userinfo.as_bytes().to_vec();
        let mut injected = Vec::new();
        for b in self.bound.iter().filter(|b| b.binding.binds(host, port)) {
            if let Some(replaced) = replace_bytes(&text, b.placeholder.as_bytes(), b.binding.expose()) {
                text = replaced;
                injected.push(b.binding.name.clone());
            }
        }
        (!injected.is_empty()).then(|| (format!("Basic {}", BASE64.encode(percent_decode(&text))), injected))
    }
}

/// `text` with `%XX` escapes decoded (URL userinfo).
fn percent_decode(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'%'
            && let Some(byte) = text
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(text[i]);
        i += 1;
    }
    out
}

/// `hay` with every `needle` replaced by `with`; `None` when there is none.
fn replace_bytes(hay: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    let mut out = Vec::with_capacity(hay.len() + with.len());
    let mut i = 0;
    let mut found = false;
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
            found = true;
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    found.then_some(out)
}

/// An `Authorization` value with the placeholder replaced: inside the base64 user:password
/// pair of `Basic`, else wherever it appears (`Bearer`, `token`, ...).
fn replace_in_authorization(value: &[u8], placeholder: &[u8], secret: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(value);
    let trimmed = text.trim();
    if let Some((scheme, encoded)) = trimmed.split_once(' ')
        && scheme.eq_ignore_ascii_case("basic")
        && let Ok(pair) = BASE64.decode(encoded.trim())
    {
        let replaced = replace_bytes(&pair, placeholder, secret)?;
        return Some(format!(" {scheme} {}", BASE64.encode(replaced)).into_bytes());
    }
    replace_bytes(value, placeholder, secret)
}

/// A stream and the bytes read from it that are not consumed yet.
struct Peer<S> {
    io: S,
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Peer<S> {
    fn new(io: S, buf: Vec<u8>) -> Self {
        Self { io, buf }
    }

    /// Reads more; `false` at the end of the stream.
    async fn fill(&mut self) -> std::io::Result<bool> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.io.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }

    /// The next message head (through its blank line); `None` at a clean end of stream.
    async fn head(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let rest = self.buf.split_off(end + 4);
                return Ok(Some(std::mem::replace(&mut self.buf, rest)));
            }
            if self.buf.len() > MAX_HEAD {
                return Err(std::io::Error::other("a message head is too large"));
            }
            if !self.fill().await? {
                return match self.buf.is_empty() {
                    true => Ok(None),
                    false => Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "a message head was cut off",
                    )),
                };
            }
        }
    }

    /// The next line, through its LF.
    async fn line(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                let rest = self.buf.split_off(end + 1);
                return Ok(std::mem::replace(&mut self.buf, rest));
            }
            if self.buf.len() > MAX_HEAD {
                return Err(std::io::Error::other("a chunk line is too long"));
            }
            if !self.fill().await? {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "a chunked body was cut off",
                ));
            }
        }
    }

    /// Copies exactly `n` bytes to `to`.
    async fn copy_exact<W: AsyncWrite + Unpin>(&mut self, mut n: u64, to: &mut W) -> std::io::Result<()> {
        while n > 0 {
            if self.buf.is_empty() && !self.fill().await? {
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "a body was cut off"));
            }
            let take = usize::try_from(n).unwrap_or(usize::MAX).min(self.buf.len());
            to.write_all(&self.buf[..take]).await?;
            self.buf.drain(..take);
            n -= take as u64;
        }
        Ok(())
    }

    /// Copies a chunked body, as it is, to `to`.
    async fn copy_chunked<W: AsyncWrite + Unpin>(&mut self, to: &mut W) -> std::io::Result<()> {
        loop {
            let line = self.line().await?;
            to.write_all(&line).await?;
            let text = String::from_utf8_lossy(&line);
            let size = text.split(';').next().unwrap_or_default().trim();
            let size = u64::from_str_radix(size, 16)
                .map_err(|_| std::io::Error::other(format!("bad chunk size {size:?}")))?;
            if size == 0 {
                // Trailers, through the blank line.
                loop {
                    let line = self.line().await?;
                    to.write_all(&line).await?;
                    if line == b"\r\n" || line == b"\n" {
                        return Ok(());
                    }
                }
            }
            self.copy_exact(size + 2, to).await?;
        }
    }

    /// Copies everything up to the end of the stream to `to`.
    async fn copy_to_end<W: AsyncWrite + Unpin>(&mut self, to: &mut W) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            to.write_all(&self.buf).await?;
            self.buf.clear();
        }
        tokio::io::copy(&mut self.io, to).await.map(|_| ())
    }

    /// Copies a body framed as `framing`.
    async fn copy_body<W: AsyncWrite + Unpin>(
        &mut self,
        framing: Framing,
        to: &mut W,
    ) -> std::io::Result<()> {
        match framing {
            Framing::None => Ok(()),
            Framing::Length(n) => self.copy_exact(n, to).await,
            Framing::Chunked => self.copy_chunked(to).await,
            Framing::UntilClose => self.copy_to_end(to).await,
        }
    }
}

/// How a message's body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// What the relay needs of a message head.
#[derive(Debug)]
struct Head {
    method: String,
    status: u16,
    framing: Framing,
    close: bool,
    expect_continue: bool,
}

fn header_facts(headers: &[httparse::Header<'_>], version: u8) -> (Option<Framing>, bool, bool) {
    let mut framing = None;
    let mut close = version == 0;
    let mut expect_continue = false;
    for h in headers {
        let value = String::from_utf8_lossy(h.value).to_ascii_lowercase();
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            framing = Some(if value.trim_end().ends_with("chunked") {
                Framing::Chunked
            } else {
                Framing::UntilClose
            });
        } else if h.name.eq_ignore_ascii_case("content-length") && framing.is_none() {
            framing = value.trim().parse::<u64>().ok().map(Framing::Length);
        } else if h.name.eq_ignore_ascii_case("connection") {
            if value.split(',').any(|t| t.trim() == "close") {
                close = true;
            } else if value.split(',').any(|t| t.trim() == "keep-alive") {
                close = false;
            }
        } else if h.name.eq_ignore_ascii_case("expect") && value.trim() == "100-continue" {
            expect_continue = true;
        }
    }
    (framing, close, expect_continue)
}

fn parse_request(head: &[u8]) -> Result<Head, RelayError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(RelayError::Incomplete("request")),
        Err(e) => return Err(RelayError::Malformed("request", e)),
    }
    let (framing, close, expect_continue) = header_facts(request.headers, request.version.unwrap_or(1));
    let framing = match framing {
        Some(Framing::UntilClose) => {
            return Err(RelayError::TransferCoding);
        }
        Some(f) => f,
        None => Framing::None,
    };
    Ok(Head {
        method: request.method.unwrap_or_default().to_owned(),
        status: 0,
        framing,
        close,
        expect_continue,
    })
}

fn parse_response(head: &[u8], method: &str) -> Result<Head, RelayError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(RelayError::Incomplete("response")),
        Err(e) => return Err(RelayError::Malformed("response", e)),
    }
    let status = response.code.unwrap_or_default();
    let (framing, close, _) = header_facts(response.headers, response.version.unwrap_or(1));
    let framing = if method.eq_ignore_ascii_case("HEAD")
        || (100..200).contains(&status)
        || status == 204
        || status == 304
    {
        Framing::None
    } else {
        framing.unwrap_or(Framing::UntilClose)
    };
    let close = close || framing == Framing::UntilClose;
    Ok(Head { method: method.to_owned(), status, framing, close, expect_continue: false })
}

/// Why one request or response of an intercepted connection could not be relayed.
#[derive(Debug, thiserror::Error)]
enum RelayError {
    /// The head ended before its empty line (`request` or `response`).
    #[error("an incomplete {0} head")]
    Incomplete(&'static str),
    /// The head is not HTTP/1.x (`request` or `response`).
    #[error("a malformed {0} head: {1}")]
    Malformed(&'static str, #[source] httparse::Error),
    /// A request body framed neither by length nor by chunks.
    #[error("a request body in a transfer coding other than chunked")]
    TransferCoding,
    /// The bound host could not be connected to.
    #[error("cannot connect: {0}")]
    Connect(#[source] std::io::Error),
    /// The bound host's name cannot be a TLS server name.
    #[error("{name} is not a TLS server name: {source}")]
    ServerName {
        /// The host.
        name: String,
        /// What rustls said.
        source: rustls::pki_types::InvalidDnsNameError,
    },
    /// The TLS handshake with the bound host failed (its certificate included).
    #[error("TLS with {name} failed: {source}")]
    Handshake {
        /// The host.
        name: String,
        /// What the handshake said.
        source: std::io::Error,
    },
}

/// `head` without its `Expect: 100-continue` line (the proxy answers it itself).
fn without_expect(head: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len());
    for line in head.split_inclusive(|b| *b == b'\n') {
        let lower = String::from_utf8_lossy(line).to_ascii_lowercase();
        if lower.starts_with("expect:") && lower.contains("100-continue") {
            continue;
        }
        out.extend_from_slice(line);
    }
    out
}

/// A response the proxy makes up for the command (`status`, one line of text).
fn made_up(status: &str, message: &str) -> Vec<u8> {
    let body = format!("dsh-bash network proxy: {message}\n");
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The upstream end of an intercepted connection: TLS to the real host, verified.
type Upstream = Peer<tokio_rustls::client::TlsStream<TcpStream>>;

async fn connect_upstream(
    vault: &CredentialVault,
    host: &str,
    addrs: &[SocketAddr],
) -> Result<Upstream, RelayError> {
    let tcp = crate::connect(addrs).await.map_err(RelayError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let name = dsh_sandbox::normalize_host(host);
    let server_name = ServerName::try_from(name.clone())
        .map_err(|source| RelayError::ServerName { name: name.clone(), source })?;
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(&vault.upstream));
    let tls = connector
        .connect(server_name, tcp)
        .await
        .map_err(|source| RelayError::Handshake { name: name.clone(), source })?;
    Ok(Peer::new(tls, Vec::new()))
}

/// Serves an intercepted `CONNECT` to a bound host: the command's TLS ends here, each
/// request is relayed with the secrets put in, over TLS to the real host.
pub(crate) async fn intercept(
    client: TcpStream,
    rest: Vec<u8>,
    host: &str,
    port: u16,
    addrs: &[SocketAddr],
    vault: &CredentialVault,
    gate: &NetworkGate,
) -> std::io::Result<()> {
    if !rest.is_empty() {
        return Err(std::io::Error::other("the command sent data before the tunnel was established"));
    }
    let config = vault.server_config(host).map_err(std::io::Error::other)?;
    let tls = tokio_rustls::TlsAcceptor::from(config).accept(client).await?;
    let mut client = Peer::new(tls, Vec::new());
    let mut upstream: Option<Upstream> = None;
    let hp = dsh_sandbox::host_port(host, port);
    loop {
        let Some(head) = client.head().await? else { break };
        let request = match parse_request(&head) {
            Ok(request) => request,
            Err(why) => {
                client.io.write_all(&made_up("400 Bad Request", &why.to_string())).await?;
                break;
            }
        };
        let (mut head, injected) = vault.rewrite_request(&head, host, port);
        if request.expect_continue {
            head = without_expect(&head);
            client.io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        if upstream.is_none() {
            match connect_upstream(vault, host, addrs).await {
                Ok(peer) => upstream = Some(peer),
                Err(why) => {
                    tracing::warn!(host = %hp, error = %why, "a bound host could not be reached");
                    client.io.write_all(&made_up("502 Bad Gateway", &format!("{hp}: {why}"))).await?;
                    break;
                }
            }
        }
        let Some(server) = upstream.as_mut() else { break };
        server.io.write_all(&head).await?;
        // Reported once the request carrying it went to the verified host.
        for name in &injected {
            gate.record_credential(name, &hp);
        }
        client.copy_body(request.framing, &mut server.io).await?;
        server.io.flush().await?;
        let response = loop {
            let Some(head) = server.head().await? else {
                client
                    .io
                    .write_all(&made_up("502 Bad Gateway", &format!("{hp} closed the connection")))
                    .await?;
                return client.io.shutdown().await;
            };
            let response = parse_response(&head, &request.method).map_err(std::io::Error::other)?;
            client.io.write_all(&head).await?;
            if response.status == 101 {
                // A protocol switch (a WebSocket): from here on both ways as they are.
                if !client.buf.is_empty() {
                    server.io.write_all(&std::mem::take(&mut client.buf)).await?;
                }
                if !server.buf.is_empty() {
                    client.io.write_all(&std::mem::take(&mut server.buf)).await?;
                }
                tokio::io::copy_bidirectional(&mut client.io, &mut server.io).await?;
                return Ok(());
            }
            if (100..200).contains(&response.status) {
                continue;
            }
            break response;
        };
        server.copy_body(response.framing, &mut client.io).await?;
        client.io.flush().await?;
        if response.close {
            upstream = None;
        }
        if request.close || response.close {
            break;
        }
    }
    client.io.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sandbox::HostPattern;

    /// A vault whose upstream trust is a file of the test's own (no host trust store needed).
    fn vault() -> CredentialVault {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = rcgen::CertificateParams::new(vec!["ca.test".to_owned()])
            .and_then(|p| p.self_signed(&key))
            .expect("a certificate");
        let file = dir.path().join("ca.pem");
        std::fs::write(&file, cert.pem()).expect("write the test CA");
        let binding = CredentialBinding::new(
            "API_TOKEN".into(),
            b"s3cret-value".to_vec(),
            vec![HostPattern::parse("api.example.com").expect("a pattern")],
            vec!["X-Api-Key".into()],
        );
        let vault = CredentialVault::new(&Credentials { bindings: vec![binding], upstream_ca: Some(file) })
            .expect("a vault");
        assert!(
            vault.trust_bundle().contains(&cert.pem())
                && vault.trust_bundle().ends_with(&vault.ca_certificate())
        );
        vault
    }

    #[test]
    fn placeholders_are_replaced_for_bound_hosts_only() {
        let v = vault();
        let (name, ph) = v.placeholders().next().map(|(n, p)| (n.to_owned(), p.to_owned())).unwrap();
        assert_eq!(name, "API_TOKEN");
        assert!(
            ph.starts_with("dsh-cred-api-token-") && ph.len() == "dsh-cred-api-token-".len() + 32,
            "{ph}"
        );
        let basic = BASE64.encode(format!("user:{ph}"));
        let head = format!(
            "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer {ph}\r\nx-api-key: {ph}\r\nX-Other: {ph}\r\n\r\n"
        );
        let (out, injected) = v.rewrite_request(head.as_bytes(), "api.example.com", 443);
        let out = String::from_utf8(out).unwrap();
        assert_eq!(injected, vec!["API_TOKEN".to_owned()]);
        assert!(out.contains("Authorization: Bearer s3cret-value\r\n"), "{out}");
        assert!(out.contains("x-api-key: s3cret-value\r\n"), "{out}");
        assert!(
            out.contains(&format!("X-Other: {ph}\r\n")),
            "an unnamed header keeps the placeholder: {out}"
        );
        let head = format!("GET / HTTP/1.1\r\nAuthorization: Basic {basic}\r\n\r\n");
        let (out, _) = v.rewrite_request(head.as_bytes(), "api.example.com", 443);
        let expected = BASE64.encode("user:s3cret-value");
        assert!(String::from_utf8(out).unwrap().contains(&format!("Authorization: Basic {expected}\r\n")));
        let (out, injected) = v.rewrite_request(head.as_bytes(), "evil.example.com", 443);
        assert_eq!(out, head.as_bytes());
        assert!(injected.is_empty());
        let (auth, _) = v.userinfo_authorization(&format!("me:{ph}"), "api.example.com", 80).unwrap();
        assert_eq!(auth, format!("Basic {}", BASE64.encode("me:s3cret-value")));
        assert!(v.userinfo_authorization(&format!("me:{ph}"), "other", 80).is_none());
        assert!(format!("{v:?}").contains("API_TOKEN") && !format!("{v:?}").contains("s3cret"));
    }

    #[test]
    fn framing_follows_the_heads() {
        let r =
            parse_request(b"POST / HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n").unwrap();
        assert_eq!((r.framing, r.close, r.expect_continue), (Framing::Length(5), false, true));
        let r = parse_request(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            .unwrap();
        assert_eq!((r.framing, r.close), (Framing::Chunked, true));
        let r = parse_response(b"HTTP/1.1 200 OK\r\n\r\n", "GET").unwrap();
        assert_eq!((r.framing, r.close), (Framing::UntilClose, true));
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", "HEAD").unwrap();
        assert_eq!(r.framing, Framing::None);
        assert_eq!(
            without_expect(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nA: b\r\n\r\n"),
            b"POST / HTTP/1.1\r\nA: b\r\n\r\n"
        );
    }
}
