//! `Origin` validation of the streamable HTTP transport (the MCP transport's defence against
//! DNS rebinding: a web page must not drive a local server through the user's browser).
//!
//! A request without `Origin` comes from a non-browser client and passes. A browser origin
//! passes when its host is a loopback name or address (`localhost`, `127.0.0.0/8`, `[::1]`)
//! over `http` or `https`, or when it equals one of the explicitly allowed origins; every
//! other origin, `null` included, is refused.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use http::Uri;

/// One web origin, `scheme://host[:port]`, compared as RFC 6454 does: scheme and host
/// case-insensitively, a missing port as the scheme's default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Origin {
    /// The port, explicit or implied by the scheme (`http` 80, `https` 443).
    fn effective_port(&self) -> Option<u16> {
        self.port.or(match self.scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        })
    }

    /// Same scheme, host and (effective) port.
    fn matches(&self, other: &Origin) -> bool {
        self.scheme == other.scheme
            && self.host == other.host
            && self.effective_port() == other.effective_port()
    }

    /// A page served from this machine: `http(s)` on `localhost` or a loopback address.
    fn is_loopback(&self) -> bool {
        if self.scheme != "http" && self.scheme != "https" {
            return false;
        }
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
    }
}

/// A text that is not a bare web origin `scheme://host[:port]`; carries the text as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected an origin scheme://host[:port], got {0:?}")]
pub struct InvalidOrigin(pub String);

impl FromStr for Origin {
    type Err = InvalidOrigin;

    /// Parses `scheme://host[:port]` (no path, query or user info).
    fn from_str(text: &str) -> Result<Self, InvalidOrigin> {
        let invalid = || InvalidOrigin(text.to_owned());
        let uri: Uri = text.trim().parse().map_err(|_| invalid())?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(invalid());
        };
        let bare = uri.path_and_query().is_none_or(|p| p.as_str().is_empty() || p.as_str() == "/");
        if !bare || authority.as_str().contains('@') || authority.host().is_empty() {
            return Err(invalid());
        }
        Ok(Origin {
            scheme: scheme.to_ascii_lowercase(),
            host: authority.host().to_ascii_lowercase(),
            port: authority.port_u16(),
        })
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host)?;
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// Whether a request with this `Origin` header value (if any) may be served.
pub(crate) fn origin_allowed(header: Option<&[u8]>, allowed: &[Origin]) -> bool {
    let Some(value) = header else { return true };
    let Some(origin) = std::str::from_utf8(value).ok().and_then(|text| text.parse::<Origin>().ok()) else {
        return false;
    };
    origin.is_loopback() || allowed.iter().any(|a| a.matches(&origin))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(header: &str, extra: &[&str]) -> bool {
        let extra: Vec<Origin> = extra.iter().map(|o| o.parse().expect("origin")).collect();
        origin_allowed(Some(header.as_bytes()), &extra)
    }

    #[test]
    fn no_origin_and_loopback_origins_pass() {
        assert!(origin_allowed(None, &[]));
        for origin in [
            "http://localhost",
            "http://localhost:8765",
            "https://LOCALHOST:1",
            "http://127.0.0.1:9",
            "http://127.1.2.3",
            "http://[::1]:80",
            "http://[::ffff:127.0.0.1]",
        ] {
            assert!(allowed(origin, &[]), "{origin}");
        }
    }

    #[test]
    fn other_origins_are_refused_unless_allowed_exactly() {
        for origin in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://128.0.0.1",
            "http://[::2]",
            "null",
            "file://",
            "chrome-extension://localhost",
            "",
            "http://u@localhost",
            "\u{7f}",
        ] {
            assert!(!allowed(origin, &[]), "{origin}");
        }
        assert!(!origin_allowed(Some(b"http://\xff"), &[]));
        let extra = ["https://app.example.com", "http://tool.example:3000"];
        assert!(allowed("https://app.example.com", &extra));
        assert!(allowed("https://APP.example.com:443", &extra));
        assert!(allowed("http://tool.example:3000", &extra));
        assert!(!allowed("https://app.example.com:8443", &extra));
        assert!(!allowed("http://app.example.com", &extra));
        assert!(!allowed("http://tool.example", &extra));
    }

    #[test]
    fn origins_parse_and_print_without_paths() {
        let origin: Origin = "HTTPS://App.Example.com:8443".parse().expect("origin");
        assert_eq!(origin.to_string(), "https://app.example.com:8443");
        assert_eq!("http://[::1]".parse::<Origin>().expect("v6").to_string(), "http://[::1]");
        assert_eq!("http://h/".parse::<Origin>().expect("slash").to_string(), "http://h");
        for bad in ["app.example.com", "https://app.example.com/path", "https://h?q", "https://u:p@h", "null"]
        {
            let error = bad.parse::<Origin>().unwrap_err();
            assert_eq!(error, InvalidOrigin(bad.to_owned()));
            assert_eq!(error.to_string(), format!("expected an origin scheme://host[:port], got {bad:?}"));
        }
    }
}
