//! The network axis of a policy: `allow`, `deny` or `ask`, and the host allowlist.
//!
//! Orthogonal to the file modes. Under `deny` and `ask` a confined command runs in its own
//! network namespace with only loopback; it reaches the hosts the allowlist names (and, under
//! `ask`, the hosts a user approves) through the harness's proxy, which resolves every name
//! itself.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// How a confined command may use the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// The host's network, as without a policy (the default).
    #[default]
    Allow,
    /// Only the allowlisted hosts, through the harness's proxy.
    Deny,
    /// The allowlisted hosts, and any other host:port a user approves for the call.
    Ask,
}

impl NetworkMode {
    /// Every mode.
    pub const ALL: [NetworkMode; 3] = [NetworkMode::Allow, NetworkMode::Deny, NetworkMode::Ask];

    /// The wire spelling (`allow`, `deny`, `ask`).
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Allow => "allow",
            NetworkMode::Deny => "deny",
            NetworkMode::Ask => "ask",
        }
    }

    /// Parses the wire spelling; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// Whether commands run in their own network namespace.
    pub fn isolates(self) -> bool {
        self != NetworkMode::Allow
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The host part of an allowlist entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HostMatch {
    /// One name or address literal (lower-cased; IPv6 without brackets).
    Exact(String),
    /// `*.suffix`: any name that ends with `.suffix` (never the suffix itself, never an
    /// address literal, never a private or loopback destination).
    Suffix(String),
}

/// One allowlist entry: `host`, `host:port`, `*.suffix` or `*.suffix:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostPattern {
    /// Which hosts.
    pub host: HostMatch,
    /// Which port; `None` is any port.
    pub port: Option<u16>,
}

/// Whether an allowlist admits a destination, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostAdmission {
    /// An exact entry names it: any address it resolves to is allowed.
    Explicit,
    /// Only a wildcard matches: allowed unless it resolves to a private or loopback address.
    Wildcard,
    /// Nothing matches.
    No,
}

impl HostPattern {
    /// Parses `host`, `host:port`, `[v6]:port`, `*.suffix[:port]`; the message names the
    /// entry.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("network pattern {text:?}: {why}");
        let text_trim = text.trim();
        if text_trim.is_empty() {
            return Err(bad("empty"));
        }
        let (host, port) = if let Some(rest) = text_trim.strip_prefix('[') {
            let (v6, after) = rest.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| bad("expected ':' after ']'"))?),
            };
            (v6.to_owned(), port)
        } else if text_trim.matches(':').count() > 1 {
            // A bare IPv6 literal, any port.
            (text_trim.to_owned(), None)
        } else {
            match text_trim.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port)),
                None => (text_trim.to_owned(), None),
            }
        };
        let port = match port {
            None | Some("*") => None,
            Some(p) => Some(
                p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| bad("the port must be 1-65535"))?,
            ),
        };
        let host = host.to_ascii_lowercase();
        let host = host.strip_suffix('.').unwrap_or(&host).to_owned();
        if host.is_empty() {
            return Err(bad("no host"));
        }
        if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') || suffix.parse::<IpAddr>().is_ok() {
                return Err(bad("a wildcard must be '*.' followed by a domain name"));
            }
            return Ok(Self { host: HostMatch::Suffix(suffix.to_owned()), port });
        }
        if host.contains('*') {
            return Err(bad("'*' is only allowed as a leading '*.'"));
        }
        if host.parse::<IpAddr>().is_err()
            && !host.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        {
            return Err(bad("not a host name or address"));
        }
        Ok(Self { host: HostMatch::Exact(host), port })
    }

    /// How this entry admits `host:port` (`host` as the command spelled it).
    pub fn admits(&self, host: &str, port: u16) -> HostAdmission {
        if self.port.is_some_and(|p| p != port) {
            return HostAdmission::No;
        }
        let host = normalize_host(host);
        match &self.host {
            HostMatch::Exact(name) if *name == host => HostAdmission::Explicit,
            HostMatch::Suffix(suffix)
                if host.parse::<IpAddr>().is_err()
                    && host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.' =>
            {
                HostAdmission::Wildcard
            }
            _ => HostAdmission::No,
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostMatch::Exact(h) if h.contains(':') => write!(f, "[{h}]")?,
            HostMatch::Exact(h) => f.write_str(h)?,
            HostMatch::Suffix(s) => write!(f, "*.{s}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// A host as compared: lower case, no trailing dot, no IPv6 brackets.
pub fn normalize_host(host: &str) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    host.strip_suffix('.').map(str::to_owned).unwrap_or(host)
}

/// `host:port` as reported (`[v6]:port` for IPv6).
pub fn host_port(host: &str, port: u16) -> String {
    let host = normalize_host(host);
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// Whether `ip` is loopback, private, link-local, unique-local, unspecified or otherwise not a
/// public destination: a wildcard entry never reaches these.
pub fn is_private_destination(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.octets()[0] == 0
                // 100.64.0.0/10, shared address space (carrier-grade NAT).
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private_destination(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

/// The network axis of one call's policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicy {
    /// `allow`, `deny` or `ask`.
    pub mode: NetworkMode,
    /// The hosts reachable through the proxy without asking.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<HostPattern>,
}

impl NetworkPolicy {
    /// The allowlist in words, as every report of the policy spells it (`doctor`'s
    /// `network:` line, the `sandbox:network` context): `no host is listed`, or `the listed
    /// hosts are a.example, *.b.example:8080`.
    pub fn allowlist_text(&self) -> String {
        if self.allow.is_empty() {
            return "no host is listed".to_owned();
        }
        let hosts: Vec<String> = self.allow.iter().map(ToString::to_string).collect();
        format!("the listed hosts are {}", hosts.join(", "))
    }

    /// How the allowlist admits `host:port`: the strongest admission of any entry.
    pub fn admission(&self, host: &str, port: u16) -> HostAdmission {
        let mut best = HostAdmission::No;
        for pattern in &self.allow {
            match pattern.admits(host, port) {
                HostAdmission::Explicit => return HostAdmission::Explicit,
                HostAdmission::Wildcard => best = HostAdmission::Wildcard,
                HostAdmission::No => {}
            }
        }
        best
    }
}

/// The answer to "may this call reach `host:port`?" under network policy `ask`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkApproval {
    /// Granted for the rest of the call.
    AllowedOnce,
    /// Refused; the text says why (`the user rejected it`, `no approval is available`, …).
    Refused(String),
}

/// The future of one network approval.
pub type NetworkApprovalFuture = std::pin::Pin<Box<dyn std::future::Future<Output = NetworkApproval> + Send>>;

/// Asks the user, through the approval service, whether a call may reach a host.
pub trait NetworkApprover: Send + Sync {
    /// Asks about `host_port` (`host:port`, as reported).
    fn approve(&self, host_port: String) -> NetworkApprovalFuture;
}

/// The approval request reason for a host: ``network access to `host:port` ``.
pub fn network_reason(host_port: &str) -> String {
    format!("network access to `{host_port}`")
}

/// What the network policy did during one call: present in a result only when it isolated
/// the command.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkFacts {
    /// The policy the call ran under.
    pub policy: NetworkMode,
    /// Each `host:port` refused during the call, in first-refusal order.
    pub denied: Vec<String>,
    /// Each bound credential the proxy added to a request (`NAME added for host:port`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
}

/// A secret bound to the hosts it is for: confined commands hold a placeholder in its place,
/// and the harness's proxy puts the value into requests to those hosts only.
#[derive(Clone, PartialEq, Eq)]
pub struct CredentialBinding {
    /// The variable name confined commands see (and the name audit lines give).
    pub name: String,
    /// The hosts the value is sent to (`host`, `host:port`, `*.suffix`).
    pub hosts: Vec<HostPattern>,
    /// Request headers besides `Authorization` whose placeholder is replaced (any case).
    pub headers: Vec<String>,
    value: Vec<u8>,
}

impl CredentialBinding {
    /// A binding of `value` to `hosts` under `name`.
    pub fn new(name: String, value: Vec<u8>, hosts: Vec<HostPattern>, headers: Vec<String>) -> Self {
        Self { name, hosts, headers, value }
    }

    /// The secret itself: for the proxy's requests and the output redaction, nothing else.
    pub fn expose(&self) -> &[u8] {
        &self.value
    }

    /// Whether `host:port` is one of the hosts the value is for.
    pub fn binds(&self, host: &str, port: u16) -> bool {
        self.hosts.iter().any(|p| p.admits(host, port) != HostAdmission::No)
    }
}

impl fmt::Debug for CredentialBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialBinding")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("headers", &self.headers)
            .field("value", &"[redacted]")
            .finish()
    }
}

/// The credentials of a deployment: the bindings, and the trust store the proxy verifies
/// bound hosts against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// Each bound secret.
    pub bindings: Vec<CredentialBinding>,
    /// A PEM file of the certificate authorities bound hosts are verified against, in place
    /// of the host's trust store.
    pub upstream_ca: Option<std::path::PathBuf>,
}

/// The result line of one credential the proxy added to a request:
/// `[network: credential NAME added for host:port]`.
pub fn credential_added_line(entry: &str) -> String {
    format!("[network: credential {entry}]")
}

/// The result line of one refused destination: `[network: access to host:port denied]`.
pub fn network_denied_line(host_port: &str) -> String {
    format!("[network: access to {host_port} denied]")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> HostPattern {
        HostPattern::parse(text).unwrap()
    }

    #[test]
    fn parses_hosts_ports_wildcards_and_v6() {
        assert_eq!(
            p("Example.COM."),
            HostPattern { host: HostMatch::Exact("example.com".into()), port: None }
        );
        assert_eq!(p("localhost:8080").port, Some(8080));
        assert_eq!(p("*.github.com:443").host, HostMatch::Suffix("github.com".into()));
        assert_eq!(p("[::1]:22"), HostPattern { host: HostMatch::Exact("::1".into()), port: Some(22) });
        assert_eq!(p("::1").port, None);
        assert_eq!(p("host:*").port, None);
        assert_eq!(p("[::1]:22").to_string(), "[::1]:22");
        assert_eq!(p("*.x.org").to_string(), "*.x.org");
        for bad in ["", ":80", "a:0", "a:99999", "a*b", "*.", "*.1.2.3.4", "[::1", "a b", "x.*.com"] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            HostPattern::parse("a:0").unwrap_err(),
            "network pattern \"a:0\": the port must be 1-65535"
        );
    }

    #[test]
    fn admission_is_exact_or_wildcard_and_respects_ports() {
        let policy = NetworkPolicy {
            mode: NetworkMode::Deny,
            allow: vec![p("*.example.com"), p("localhost:8080"), p("api.example.com:443")],
        };
        assert_eq!(policy.admission("api.example.com", 443), HostAdmission::Explicit);
        assert_eq!(policy.admission("API.example.com.", 80), HostAdmission::Wildcard);
        assert_eq!(policy.admission("example.com", 80), HostAdmission::No);
        assert_eq!(policy.admission("badexample.com", 80), HostAdmission::No);
        assert_eq!(policy.admission("localhost", 8080), HostAdmission::Explicit);
        assert_eq!(policy.admission("localhost", 8081), HostAdmission::No);
    }

    #[test]
    fn private_destinations_are_recognized() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.0.1",
            "169.254.1.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "100.64.0.1",
        ] {
            assert!(is_private_destination(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1", "100.128.0.1"] {
            assert!(!is_private_destination(ip.parse().unwrap()), "{ip}");
        }
        assert_eq!(host_port("::1", 80), "[::1]:80");
        assert_eq!(host_port("Example.com.", 80), "example.com:80");
    }
}
