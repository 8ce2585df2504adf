//! The request head a confined command sends the proxy: `CONNECT host:port`, or a plain-HTTP
//! request in absolute form, parsed by `httparse` and re-written to origin form.
//!
//! This file depends on `httparse` alone, so the fuzz target (`fuzz/fuzz_targets/proxy_head.rs`)
//! compiles it on its own.

/// The most header lines a request head may have.
pub(crate) const MAX_HEADERS: usize = 128;

/// A parsed request head.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// `CONNECT host:port`.
    Connect {
        /// The host as the command spelled it (brackets of an IPv6 literal removed).
        host: String,
        /// The port, never 0.
        port: u16,
    },
    /// A plain-HTTP request in absolute form, re-written to origin form for the destination
    /// (the URL's userinfo, if any, apart).
    Forward {
        /// The host of the URL.
        host: String,
        /// The port of the URL, 80 when it names none.
        port: u16,
        /// The head to send: request line in origin form, the headers but `Proxy-Connection`
        /// and `Proxy-Authorization`, each line ended by CRLF, then an empty line.
        head: Vec<u8>,
        /// The URL's userinfo (`user:password`), when it has one.
        userinfo: Option<String>,
    },
}

/// Why a head could not be used: the status line and a message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadRequest(pub(crate) &'static str, pub(crate) String);

/// Parses one whole request head (through its empty line).
pub(crate) fn parse_head(head: &[u8]) -> Result<Request, BadRequest> {
    let bad = |msg: String| BadRequest("400 Bad Request", msg);
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(bad("an incomplete request head".to_owned())),
        Err(e) => return Err(bad(format!("a malformed request head ({e})"))),
    }
    let (Some(method), Some(target), Some(version)) = (request.method, request.path, request.version) else {
        return Err(bad("a malformed request line".to_owned()));
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) =
            split_authority(target, None).ok_or_else(|| bad(format!("bad CONNECT target {target:?}")))?;
        return Ok(Request::Connect { host, port });
    }
    let Some(rest) = target.get(..7).filter(|p| p.eq_ignore_ascii_case("http://")).map(|_| &target[7..])
    else {
        return Err(bad(format!(
            "only CONNECT and absolute http:// requests are proxied (got {method} {target})"
        )));
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') { format!("/{path}") } else { path.to_owned() };
    let (userinfo, authority) = match authority.rsplit_once('@') {
        Some((userinfo, authority)) => (Some(userinfo.to_owned()), authority),
        None => (None, authority),
    };
    let (host, port) =
        split_authority(authority, Some(80)).ok_or_else(|| bad(format!("bad target {target:?}")))?;
    let mut out = format!("{method} {path} HTTP/1.{version}\r\n").into_bytes();
    for header in request.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("proxy-connection") || name.eq_ignore_ascii_case("proxy-authorization") {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(header.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(Request::Forward { host, port, head: out, userinfo })
}

/// `host:port`, `[v6]:port`, or `host` with `default` port.
pub(crate) fn split_authority(authority: &str, default: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            Some(_) => return None,
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0)?,
        None => default?,
    };
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// Panics unless what [`parse_head`] makes of `data` holds what the proxy relies on: the same
/// answer twice; a `CONNECT` or forward to a named host and a port other than 0; a forwarded
/// head that `httparse` reads whole, with the same method and version, a target in origin form
/// and no `Proxy-*` credential or connection header. Run by the property test and the fuzz
/// target (`fuzz/fuzz_targets/proxy_head.rs`).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn assert_invariants(data: &[u8]) {
    let first = parse_head(data);
    assert_eq!(first, parse_head(data), "parsing is deterministic");
    let (host, port) = match &first {
        Err(BadRequest(status, _)) => return assert_eq!(*status, "400 Bad Request"),
        Ok(Request::Connect { host, port }) | Ok(Request::Forward { host, port, .. }) => (host, *port),
    };
    assert!(!host.is_empty() && port != 0, "{host:?}:{port}");
    let Ok(Request::Forward { head, .. }) = &first else { return };
    let mut theirs = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut original = httparse::Request::new(&mut theirs);
    assert!(original.parse(data).is_ok_and(|s| s.is_complete()), "a forward was not a whole head");
    let mut ours = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut forwarded = httparse::Request::new(&mut ours);
    assert_eq!(forwarded.parse(head), Ok(httparse::Status::Complete(head.len())), "the forwarded head");
    assert_eq!((forwarded.method, forwarded.version), (original.method, original.version));
    assert!(forwarded.path.is_some_and(|p| p.starts_with('/')), "{:?}", forwarded.path);
    assert!(forwarded.headers.iter().all(|h| !h.name.eq_ignore_ascii_case("proxy-authorization")
        && !h.name.eq_ignore_ascii_case("proxy-connection")));
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any bytes, and heads made of plausible pieces, keep the invariants.
        #[test]
        fn any_head_keeps_the_invariants(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            assert_invariants(&data);
        }

        #[test]
        fn plausible_heads_keep_the_invariants(
            method in "(GET|POST|CONNECT|get|PUT)",
            target in "(http://|HTTP://|/|)[a-z0-9.:@\\[\\]?/%-]{0,24}",
            version in "HTTP/1\\.[01]",
            headers in proptest::collection::vec("[A-Za-z-]{1,12}:[ \\t]?[ -~]{0,16}", 0..6),
            newline in "(\r\n|\n)",
        ) {
            let mut head = format!("{method} {target} {version}{newline}");
            for header in headers {
                head.push_str(&header);
                head.push_str(&newline);
            }
            head.push_str(&newline);
            assert_invariants(head.as_bytes());
        }
    }

    #[test]
    fn parses_connect_and_absolute_requests() {
        assert_eq!(
            parse_head(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
            Ok(Request::Connect { host: "example.com".into(), port: 443 })
        );
        assert_eq!(
            parse_head(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n"),
            Ok(Request::Connect { host: "::1".into(), port: 8443 })
        );
        let Ok(Request::Forward { host, port, head, .. }) = parse_head(
            b"GET http://localhost:8080/a/b?c=1 HTTP/1.1\r\nHost: localhost:8080\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        ) else {
            panic!("not a forward");
        };
        assert_eq!((host.as_str(), port), ("localhost", 8080));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /a/b?c=1 HTTP/1.1\r\nHost: localhost:8080\r\nAccept: */*\r\n\r\n"
        );
        let Ok(Request::Forward { port, head, .. }) = parse_head(b"GET http://h?x HTTP/1.0\r\n\r\n") else {
            panic!("not a forward");
        };
        assert_eq!(port, 80);
        assert!(head.starts_with(b"GET /?x HTTP/1.0\r\n"));
        assert!(parse_head(b"GET /relative HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_head(b"CONNECT host HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_head(b"CONNECT a:b:c HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn userinfo_stays_apart_and_case_of_the_scheme_does_not_matter() {
        let Ok(Request::Forward { host, port, head, userinfo }) =
            parse_head(b"POST HTTP://user:pw@Example.org:8081 HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        else {
            panic!("not a forward");
        };
        assert_eq!((host.as_str(), port, userinfo.as_deref()), ("Example.org", 8081, Some("user:pw")));
        assert_eq!(head, b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    }

    /// A head that would be read one way here and another way by the destination is refused:
    /// a header line without a name, a bare CR, a space before the colon, a folded line, a
    /// request line with extra words.
    #[test]
    fn ambiguous_heads_are_refused() {
        for head in [
            &b"GET http://h/ HTTP/1.1\r\n: no-name\r\n\r\n"[..],
            b"GET http://h/ HTTP/1.1\r\nA: b\rX: y\r\n\r\n",
            b"GET http://h/ HTTP/1.1\r\nHost : h\r\n\r\n",
            b"GET http://h/ HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
            b"GET http://h/ extra HTTP/1.1\r\n\r\n",
            b"GET http://h/ HTTP/2.0\r\n\r\n",
            b"GET http://h/ HTTP/1.1\r\n",
        ] {
            assert!(
                matches!(parse_head(head), Err(BadRequest("400 Bad Request", _))),
                "{:?} was accepted",
                String::from_utf8_lossy(head)
            );
        }
    }

    /// A head the proxy forwards is one the destination reads as a whole head with the same
    /// request line and header lines, CRLF-ended, whatever line endings the command used.
    #[test]
    fn a_forwarded_head_is_a_well_formed_head() {
        let Ok(Request::Forward { head, .. }) =
            parse_head(b"GET http://h/p HTTP/1.1\nHost: h\nProxy-Authorization: x\nA:  b \n\n")
        else {
            panic!("not a forward");
        };
        assert_eq!(String::from_utf8(head).unwrap(), "GET /p HTTP/1.1\r\nHost: h\r\nA: b\r\n\r\n");
    }
}
