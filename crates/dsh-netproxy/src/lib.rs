//! The harness-side network proxy of confined commands.
//!
//! Under network policy `deny` or `ask` a confined command runs in a network namespace of its
//! own with only loopback. The provider makes a listening socket on that loopback; this crate
//! serves it from the harness, in the host's network namespace: HTTP `CONNECT` tunnels and
//! plain-HTTP requests in absolute form, to the destinations the [`NetworkGate`] admits.
//!
//! * **Names are resolved here, never in the namespace**, and only after the destination was
//!   admitted by name: a refused name is never looked up (no DNS exfiltration).
//! * A wildcard entry (`*.example.com`) never reaches a private or loopback address; an exact
//!   entry (`localhost:8080`, `10.0.0.5`) does.
//! * Under `ask`, an unlisted `host:port` goes to the approval of a call running in the
//!   session; `allowed-once` grants it for the rest of that call. A connection a grant
//!   admitted (a `CONNECT` tunnel, a kept-alive plain-HTTP connection) belongs to the call
//!   that holds the grant and is shut down, both ways, when that call ends: a process the
//!   call left running keeps no way to the host. Connections to listed hosts are unaffected.
//! * Every refusal answers `403` with one line saying why, and is recorded for the calls
//!   running at that moment ([`CallGuard::finish`]).
//! * Secrets bound to hosts ([`CredentialVault`], a gate made with
//!   [`NetworkGate::with_credentials`]): a `CONNECT` to a bound host has its TLS ended here
//!   and each request gets the value in place of the session's placeholder before it goes on,
//!   over verified TLS, to the host; a plain-HTTP request to a bound host is rewritten the same
//!   way only when the host's address is loopback (a secret never crosses a network in
//!   cleartext). Every other destination is relayed untouched. Each addition is recorded for the
//!   calls running at that moment ([`CallGuard::finish_with_credentials`]).
//!
//! One namespace (and one gate) serves a session: calls of a session that run at the same
//! time share it. A refusal is then reported to each of them, an approval is asked through
//! the most recently started call that can ask, and a grant serves them all until the call
//! that holds it ends.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod credentials;
mod head;

pub use credentials::{CredentialError, CredentialVault};

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use dsh_sandbox::{
    HostAdmission, NetworkApproval, NetworkApprover, NetworkMode, NetworkPolicy, ProxyListener, host_port,
    is_private_destination, normalize_host,
};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::head::{BadRequest, Request, parse_head};

/// The largest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to a destination may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How often an idle accept loop checks that its namespace is still in use.
const LIVENESS_POLL: Duration = Duration::from_secs(5);

/// Why a destination was refused (the text after `denied: ` in the proxy's answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal(pub String);

/// The policy of one namespace, and the calls running in it.
#[derive(Debug)]
pub struct NetworkGate {
    policy: NetworkPolicy,
    /// The session's bound secrets: requests to their hosts get the value in place of the
    /// placeholder.
    credentials: Option<Arc<CredentialVault>>,
    calls: Mutex<Calls>,
    /// Asks are made one at a time, so two connections to one host prompt once.
    ask: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Calls {
    next: u64,
    active: Vec<ActiveCall>,
}

impl std::fmt::Debug for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calls").field("active", &self.active.len()).finish()
    }
}

struct ActiveCall {
    id: u64,
    approver: Option<Arc<dyn NetworkApprover>>,
    grants: HashSet<String>,
    denied: Vec<String>,
    /// `NAME added for host:port`, once each, for every secret the proxy put in a request.
    credentials: Vec<String>,
    /// Dropped when the call ends (its entry leaves [`Calls::active`]): every connection one
    /// of its grants admitted holds a receiver and ends then.
    lapse: tokio::sync::watch::Sender<()>,
}

/// A call registered with a gate; [`CallGuard::finish`] ends it and returns its refusals.
/// Dropping it ends it too (its refusals are then lost).
#[derive(Debug)]
pub struct CallGuard {
    gate: Arc<NetworkGate>,
    id: u64,
}

impl CallGuard {
    /// Ends the call: its `allowed-once` grants lapse; returns each `host:port` refused while
    /// it ran, in first-refusal order.
    pub fn finish(self) -> Vec<String> {
        let mut calls = self.gate.calls.lock();
        let at = calls.active.iter().position(|c| c.id == self.id);
        at.map(|i| calls.active.remove(i).denied).unwrap_or_default()
    }

    /// Ends the call like [`CallGuard::finish`]; also returns each secret the proxy added to a
    /// request while it ran (`NAME added for host:port`).
    pub fn finish_with_credentials(self) -> (Vec<String>, Vec<String>) {
        let mut calls = self.gate.calls.lock();
        let at = calls.active.iter().position(|c| c.id == self.id);
        at.map(|i| calls.active.remove(i)).map(|c| (c.denied, c.credentials)).unwrap_or_default()
    }

    /// The refusals so far, without ending the call.
    pub fn denied(&self) -> Vec<String> {
        let calls = self.gate.calls.lock();
        calls.active.iter().find(|c| c.id == self.id).map(|c| c.denied.clone()).unwrap_or_default()
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut calls = self.gate.calls.lock();
        calls.active.retain(|c| c.id != self.id);
    }
}

/// A destination the gate admitted: where to connect.
#[derive(Debug)]
struct Admitted {
    addrs: Vec<SocketAddr>,
    /// Set when a call's one-time grant admitted it: closed when that call ends, and the
    /// connection with it. `None` for a listed host.
    lapse: Option<tokio::sync::watch::Receiver<()>>,
}

impl Admitted {
    /// This admission, ending with the call whose grant made it.
    fn lapsing(mut self, lapse: tokio::sync::watch::Receiver<()>) -> Self {
        self.lapse = Some(lapse);
        self
    }
}

impl NetworkGate {
    /// A gate enforcing `policy`.
    pub fn new(policy: NetworkPolicy) -> Arc<Self> {
        Self::with_credentials(policy, None)
    }

    /// A gate enforcing `policy` that adds the secrets of `credentials` to the requests to
    /// their hosts.
    pub fn with_credentials(policy: NetworkPolicy, credentials: Option<Arc<CredentialVault>>) -> Arc<Self> {
        Arc::new(Self {
            policy,
            credentials,
            calls: Mutex::new(Calls::default()),
            ask: tokio::sync::Mutex::new(()),
        })
    }

    /// The vault of the session's bound secrets, if any.
    pub fn credentials(&self) -> Option<&Arc<CredentialVault>> {
        self.credentials.as_ref()
    }

    /// The policy this gate enforces.
    pub fn policy(&self) -> &NetworkPolicy {
        &self.policy
    }

    /// Registers a running call; `approver` answers its `ask`s (`None`: it cannot ask).
    pub fn enter(self: &Arc<Self>, approver: Option<Arc<dyn NetworkApprover>>) -> CallGuard {
        let mut calls = self.calls.lock();
        calls.next += 1;
        let id = calls.next;
        let (lapse, _) = tokio::sync::watch::channel(());
        calls.active.push(ActiveCall {
            id,
            approver,
            grants: HashSet::new(),
            denied: Vec::new(),
            credentials: Vec::new(),
            lapse,
        });
        CallGuard { gate: Arc::clone(self), id }
    }

    /// The lapse of the running call that holds a grant of `hp` (the most recent one).
    fn granted(&self, hp: &str) -> Option<tokio::sync::watch::Receiver<()>> {
        self.calls.lock().active.iter().rev().find(|c| c.grants.contains(hp)).map(|c| c.lapse.subscribe())
    }

    /// Records, for the calls running now, that the secret `name` went into a request to
    /// `hp` (the name only: never the value).
    fn record_credential(&self, name: &str, hp: &str) {
        let entry = format!("{name} added for {hp}");
        tracing::info!(credential = name, host = hp, "the proxy added a bound credential to a request");
        let mut calls = self.calls.lock();
        for call in &mut calls.active {
            if !call.credentials.contains(&entry) {
                call.credentials.push(entry.clone());
            }
        }
    }

    fn record_refusal(&self, hp: &str) {
        let mut calls = self.calls.lock();
        for call in &mut calls.active {
            if !call.denied.iter().any(|d| d == hp) {
                call.denied.push(hp.to_owned());
            }
        }
    }

    /// Decides `host:port`; on admission, the addresses to connect to.
    async fn decide(&self, host: &str, port: u16) -> Result<Admitted, Refusal> {
        let hp = host_port(host, port);
        let result = self.decide_inner(host, port, &hp).await;
        if result.is_err() {
            self.record_refusal(&hp);
        }
        result
    }

    async fn decide_inner(&self, host: &str, port: u16, hp: &str) -> Result<Admitted, Refusal> {
        match self.policy.admission(host, port) {
            HostAdmission::Explicit => return resolve(host, port, false).await,
            HostAdmission::Wildcard => match resolve(host, port, true).await {
                Ok(admitted) => return Ok(admitted),
                Err(refusal) if self.policy.mode != NetworkMode::Ask => return Err(refusal),
                Err(_) => {}
            },
            HostAdmission::No => {}
        }
        if let Some(lapse) = self.granted(hp) {
            return resolve(host, port, false).await.map(|a| a.lapsing(lapse));
        }
        if self.policy.mode != NetworkMode::Ask {
            return Err(Refusal("not in the allowlist".to_owned()));
        }
        let _one_at_a_time = self.ask.lock().await;
        if let Some(lapse) = self.granted(hp) {
            return resolve(host, port, false).await.map(|a| a.lapsing(lapse));
        }
        // Asked and refused once in a running call: not asked again while it runs.
        if self.calls.lock().active.iter().any(|c| c.denied.iter().any(|d| d == hp)) {
            return Err(Refusal("refused earlier in this call".to_owned()));
        }
        let asking = {
            let calls = self.calls.lock();
            calls.active.iter().rev().find_map(|c| c.approver.clone().map(|a| (c.id, a)))
        };
        let Some((id, approver)) = asking else {
            return Err(Refusal("no approval is available".to_owned()));
        };
        match approver.approve(hp.to_owned()).await {
            NetworkApproval::AllowedOnce => {
                let lapse = {
                    let mut calls = self.calls.lock();
                    calls.active.iter_mut().find(|c| c.id == id).map(|call| {
                        call.grants.insert(hp.to_owned());
                        call.lapse.subscribe()
                    })
                };
                // A grant that came after its call ended admits nothing.
                let Some(lapse) = lapse else {
                    return Err(Refusal("the call it was granted to has ended".to_owned()));
                };
                resolve(host, port, false).await.map(|a| a.lapsing(lapse))
            }
            NetworkApproval::Refused(why) => Err(Refusal(why)),
        }
    }
}

/// Resolves `host` here, in the host's namespace; with `public_only`, private and loopback
/// addresses are dropped (a wildcard admission).
async fn resolve(host: &str, port: u16, public_only: bool) -> Result<Admitted, Refusal> {
    let name = normalize_host(host);
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((name.as_str(), port)).await {
        Ok(addrs) => addrs.collect(),
        Err(e) => return Err(Refusal(format!("cannot resolve {name}: {e}"))),
    };
    let addrs: Vec<SocketAddr> =
        addrs.into_iter().filter(|a| !public_only || !is_private_destination(a.ip())).collect();
    if addrs.is_empty() {
        return Err(Refusal(match public_only {
            true => "a wildcard entry never reaches a private or loopback address".to_owned(),
            false => format!("{name} resolves to no address"),
        }));
    }
    Ok(Admitted { addrs, lapse: None })
}

/// Serves `proxy` with `gate` on the current tokio runtime until the provider drops the
/// listener (checked every few seconds while idle).
pub fn serve(proxy: &Arc<ProxyListener>, gate: Arc<NetworkGate>) -> std::io::Result<()> {
    let std_listener = proxy.listener()?;
    std_listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(std_listener)?;
    let alive: Weak<ProxyListener> = Arc::downgrade(proxy);
    tokio::spawn(async move {
        loop {
            match tokio::time::timeout(LIVENESS_POLL, listener.accept()).await {
                Ok(Ok((stream, _))) => {
                    let gate = Arc::clone(&gate);
                    tokio::spawn(async move {
                        if let Err(e) = handle(stream, &gate).await {
                            tracing::debug!(error = %e, "network proxy connection ended");
                        }
                    });
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "network proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_) => {}
            }
            if alive.strong_count() == 0 {
                break;
            }
        }
    });
    Ok(())
}

/// `host:port` as the command spelled the host (`[v6]:port` for IPv6).
fn spelled_host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// The proxy's answer to a refused destination.
pub fn refusal_response(hp: &str, why: &str) -> String {
    let body = format!("dsh-bash network policy: access to {hp} denied: {why}\n");
    format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn error_response(status: &str, message: &str) -> String {
    let body = format!("dsh-bash network proxy: {message}\n");
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok(Some((buf, rest)));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn handle(mut client: TcpStream, gate: &NetworkGate) -> std::io::Result<()> {
    let _ = client.set_nodelay(true);
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(result) => result?,
        Err(_) => None,
    };
    let Some((head, rest)) = head else {
        let response = error_response("400 Bad Request", "no complete request head");
        return client.write_all(response.as_bytes()).await;
    };
    let request = match parse_head(&head) {
        Ok(request) => request,
        Err(BadRequest(status, message)) => {
            return client.write_all(error_response(status, &message).as_bytes()).await;
        }
    };
    let (host, port) = match &request {
        Request::Connect { host, port } | Request::Forward { host, port, .. } => (host.clone(), *port),
    };
    // The answers to the command spell the destination as it did: a secret it put in a name
    // is then found, as given, by the redaction of its output (the gate's records are
    // lower-cased, and redacted without regard to case where they are reported).
    let hp = spelled_host_port(&host, port);
    let admitted = match gate.decide(&host, port).await {
        Ok(admitted) => admitted,
        Err(Refusal(why)) => return client.write_all(refusal_response(&hp, &why).as_bytes()).await,
    };
    if let (Request::Connect { .. }, Some(vault)) =
        (&request, gate.credentials.as_ref().filter(|v| v.binds(&host, port)))
    {
        client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await?;
        let relay = credentials::intercept(client, rest, &host, port, &admitted.addrs, vault, gate);
        let Some(mut lapse) = admitted.lapse else { return relay.await };
        return tokio::select! {
            relayed = relay => relayed,
            _ = lapse.changed() => Ok(()),
        };
    }
    let mut upstream = match connect(&admitted.addrs).await {
        Ok(stream) => stream,
        Err(e) => {
            let message = format!("cannot connect to {hp}: {e}");
            return client.write_all(error_response("502 Bad Gateway", &message).as_bytes()).await;
        }
    };
    let _ = upstream.set_nodelay(true);
    match request {
        Request::Connect { .. } => {
            client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await?;
        }
        Request::Forward { head, userinfo, .. } => {
            let bound = gate.credentials.as_ref().filter(|v| {
                v.binds(&host, port) && upstream.peer_addr().is_ok_and(|a| cleartext_stays_on_this_host(&a))
            });
            let head = match bound {
                Some(vault) => forward_with_credentials(vault, gate, &head, userinfo.as_deref(), &host, port),
                None => head,
            };
            upstream.write_all(&head).await?
        }
    }
    if !rest.is_empty() {
        upstream.write_all(&rest).await?;
    }
    let Some(mut lapse) = admitted.lapse else {
        return tokio::io::copy_bidirectional(&mut client, &mut upstream).await.map(|_| ());
    };
    // A one-time grant's connection lives as long as the granting call: when it ends (the
    // sender is dropped, before or while copying), both sockets are shut down and closed.
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut client, &mut upstream) => copied.map(|_| ()),
        _ = lapse.changed() => {
            tracing::debug!("a one-time grant's call ended; its connection is closed");
            let _ = client.shutdown().await;
            let _ = upstream.shutdown().await;
            Ok(())
        }
    }
}

/// Whether a secret may go to `upstream` in a plain-HTTP request: only when the address is
/// this host's loopback, where no network carries it. Anywhere else a bound secret travels
/// only inside TLS whose server certificate was verified; a plain-HTTP request keeps the
/// placeholder.
fn cleartext_stays_on_this_host(upstream: &SocketAddr) -> bool {
    match upstream.ip() {
        std::net::IpAddr::V4(ip) => ip.is_loopback(),
        std::net::IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The head of a plain-HTTP request to a bound host, with the secrets put in (and the URL's
/// userinfo as `Basic` credentials when it carries a placeholder and the head has no
/// `Authorization`). The request asks the destination to close the connection after its
/// answer: later requests on the connection would be relayed as they are, unseen.
fn forward_with_credentials(
    vault: &CredentialVault,
    gate: &NetworkGate,
    head: &[u8],
    userinfo: Option<&str>,
    host: &str,
    port: u16,
) -> Vec<u8> {
    let (head, mut injected) = vault.rewrite_request(head, host, port);
    let mut out = Vec::with_capacity(head.len() + 64);
    let mut has_authorization = false;
    let mut lines = head.split_inclusive(|b| *b == b'\n');
    if let Some(first) = lines.next() {
        out.extend_from_slice(first);
    }
    for line in lines {
        let lower = String::from_utf8_lossy(line).to_ascii_lowercase();
        if lower.starts_with("connection:") || lower.starts_with("keep-alive:") {
            continue;
        }
        if line == b"\r\n" {
            if let Some((auth, names)) = userinfo
                .filter(|_| !has_authorization)
                .and_then(|u| vault.userinfo_authorization(u, host, port))
            {
                out.extend_from_slice(format!("Authorization: {auth}\r\n").as_bytes());
                injected.extend(names);
            }
            out.extend_from_slice(b"Connection: close\r\n");
        }
        has_authorization |= lower.starts_with("authorization:");
        out.extend_from_slice(line);
    }
    let hp = host_port(host, port);
    injected.dedup();
    for name in &injected {
        gate.record_credential(name, &hp);
    }
    out
}

async fn connect(addrs: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address");
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = e,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
        }
    }
    Err(last)
}

#[cfg(test)]
mod cleartext_tests {
    use super::cleartext_stays_on_this_host;

    #[test]
    fn a_secret_goes_in_cleartext_only_to_this_hosts_loopback() {
        for (addr, ok) in [
            ("127.0.0.1:80", true),
            ("127.1.2.3:8080", true),
            ("[::1]:80", true),
            ("[::ffff:127.0.0.1]:80", true),
            ("192.0.2.2:80", false),
            ("10.0.0.5:80", false),
            ("[2001:db8::1]:80", false),
            ("[::ffff:192.0.2.2]:80", false),
        ] {
            assert_eq!(cleartext_stays_on_this_host(&addr.parse().expect("an address")), ok, "{addr}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sandbox::{HostPattern, NetworkApprovalFuture};

    struct Scripted(NetworkApproval, Arc<Mutex<Vec<String>>>);
    impl NetworkApprover for Scripted {
        fn approve(&self, host_port: String) -> NetworkApprovalFuture {
            self.1.lock().push(host_port);
            let answer = self.0.clone();
            Box::pin(async move { answer })
        }
    }

    fn policy(mode: NetworkMode, allow: &[&str]) -> NetworkPolicy {
        NetworkPolicy { mode, allow: allow.iter().map(|p| HostPattern::parse(p).unwrap()).collect() }
    }

    #[tokio::test]
    async fn deny_refuses_unlisted_hosts_without_resolving_them_and_records_each_once() {
        let gate = NetworkGate::new(policy(NetworkMode::Deny, &["localhost:8080"]));
        let call = gate.enter(None);
        assert!(gate.decide("localhost", 8080).await.is_ok());
        // A name that cannot resolve is refused for the policy, not for the lookup.
        let refusal = gate.decide("secret.exfil.invalid", 443).await.unwrap_err();
        assert_eq!(refusal.0, "not in the allowlist");
        gate.decide("secret.exfil.invalid", 443).await.unwrap_err();
        gate.decide("localhost", 8081).await.unwrap_err();
        assert_eq!(call.finish(), vec!["secret.exfil.invalid:443".to_owned(), "localhost:8081".to_owned()]);
    }

    #[tokio::test]
    async fn wildcards_never_reach_loopback() {
        let gate = NetworkGate::new(policy(NetworkMode::Deny, &["*.localhost"]));
        let call = gate.enter(None);
        // `*.localhost` names resolve to loopback (where the resolver knows them) or not at
        // all: refused either way.
        assert!(gate.decide("a.localhost", 80).await.is_err());
        assert_eq!(call.finish(), vec!["a.localhost:80".to_owned()]);
    }

    #[tokio::test]
    async fn ask_grants_once_per_call_and_refusals_carry_the_reason() {
        let gate = NetworkGate::new(policy(NetworkMode::Ask, &[]));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let call = gate.enter(Some(Arc::new(Scripted(NetworkApproval::AllowedOnce, Arc::clone(&asked)))));
        assert!(gate.decide("127.0.0.1", 9).await.is_ok());
        assert!(gate.decide("127.0.0.1", 9).await.is_ok());
        assert_eq!(*asked.lock(), vec!["127.0.0.1:9".to_owned()]);
        assert!(call.finish().is_empty());
        let rejecting = gate.enter(Some(Arc::new(Scripted(
            NetworkApproval::Refused("the user rejected it".into()),
            Arc::clone(&asked),
        ))));
        assert_eq!(gate.decide("127.0.0.1", 9).await.unwrap_err().0, "the user rejected it");
        assert_eq!(gate.decide("127.0.0.1", 9).await.unwrap_err().0, "refused earlier in this call");
        assert_eq!(asked.lock().len(), 2, "a refusal is not asked again within the call");
        assert_eq!(rejecting.finish(), vec!["127.0.0.1:9".to_owned()]);
        let silent = gate.enter(None);
        assert_eq!(gate.decide("127.0.0.1", 9).await.unwrap_err().0, "no approval is available");
        drop(silent);
    }

    /// A tunnel through a proxy served with `gate` to a fresh loopback listener: the client
    /// end, and the destination's end of the same connection.
    async fn tunnel(gate: &Arc<NetworkGate>) -> (TcpStream, TcpStream) {
        let destination = TcpListener::bind("127.0.0.1:0").await.expect("bind the destination");
        let port = destination.local_addr().expect("destination address").port();
        let proxy = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let proxy_addr = proxy.local_addr().expect("proxy address");
        let served = Arc::clone(gate);
        tokio::spawn(async move {
            let (stream, _) = proxy.accept().await.expect("accept at the proxy");
            let _ = handle(stream, &served).await;
        });
        let mut client = TcpStream::connect(proxy_addr).await.expect("connect to the proxy");
        client.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        let mut answer = [0u8; 39];
        client.read_exact(&mut answer).await.expect("the proxy's answer");
        assert_eq!(&answer[..], b"HTTP/1.1 200 Connection established\r\n\r\n");
        let (far, _) = destination.accept().await.expect("the tunnel reaches the destination");
        (client, far)
    }

    /// Whether `stream` ends (EOF or reset) within a generous bound.
    async fn ends(stream: &mut TcpStream) -> bool {
        let mut buf = [0u8; 64];
        loop {
            match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }

    async fn round_trip(client: &mut TcpStream, far: &mut TcpStream) {
        client.write_all(b"ping").await.expect("send through the tunnel");
        let mut buf = [0u8; 4];
        far.read_exact(&mut buf).await.expect("the destination reads it");
        assert_eq!(&buf, b"ping");
    }

    #[tokio::test]
    async fn a_one_time_grant_s_tunnel_ends_with_its_call() {
        let gate = NetworkGate::new(policy(NetworkMode::Ask, &[]));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let call = gate.enter(Some(Arc::new(Scripted(NetworkApproval::AllowedOnce, Arc::clone(&asked)))));
        let (mut client, mut far) = tunnel(&gate).await;
        round_trip(&mut client, &mut far).await;
        assert!(call.finish().is_empty());
        assert!(ends(&mut far).await, "the destination's end stayed open after the call ended");
        assert!(ends(&mut client).await, "the command's end stayed open after the call ended");
        assert_eq!(asked.lock().len(), 1);
    }

    #[tokio::test]
    async fn a_listed_host_s_tunnel_outlives_the_call() {
        // The destination's port is not known before the tunnel is made: list the address.
        let gate = NetworkGate::new(policy(NetworkMode::Deny, &["127.0.0.1"]));
        let call = gate.enter(None);
        let (mut client, mut far) = tunnel(&gate).await;
        assert!(call.finish().is_empty());
        round_trip(&mut client, &mut far).await;
    }

    #[test]
    fn refusal_response_is_exact() {
        assert_eq!(
            refusal_response("example.com:443", "not in the allowlist"),
            "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 80\r\nConnection: close\r\n\r\ndsh-bash network policy: access to example.com:443 denied: not in the allowlist\n"
        );
    }
}
