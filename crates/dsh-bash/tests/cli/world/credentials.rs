//! Secrets bound to hosts: a confined command holds a placeholder, and the harness's proxy
//! puts the value into its requests to the bound host only. The bound host here is the
//! test's own HTTPS server on the host's loopback, with a certificate of the test's own
//! authority, which the harness is told to trust (`--credential-upstream-ca`); the server
//! records the credentials each request carried.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::cell::{Mode, Outcome, World};
use super::host;
use super::matrix::{Skip, over_matrix};

/// The server: answers `401` with a `Basic` challenge to a request without `Authorization`
/// (as a git host does), else `200 ok`; never echoes a header. Each request is one log line:
/// `<client port> <path> auth=<Authorization> key=<X-Api-Key>`, and for a `POST`, ` body=<bytes
/// read>` (a `Content-Length` or chunked body). With a fourth argument `plain` it serves plain
/// HTTP.
const SERVER: &str = r#"
import http.server, ssl, sys
log = open(sys.argv[3], "a", buffering=1)
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            size = 0
            while True:
                n = int(self.rfile.readline().split(b";")[0], 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                size += len(self.rfile.read(n))
                self.rfile.readline()
        else:
            size = len(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.do_GET(" body=%d" % size)
    def do_GET(self, extra=""):
        auth = self.headers.get("Authorization")
        log.write("%d %s auth=%s key=%s%s\n" % (self.client_address[1], self.path, auth, self.headers.get("X-Api-Key"), extra))
        if auth is None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test"')
            body = b"who are you\n"
        else:
            self.send_response(200)
            body = b"ok\n"
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer((sys.argv[5] if sys.argv[5:] else "127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
if sys.argv[4:5] != ["plain"]:
    server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// The test's HTTPS server, stopped when dropped.
struct TlsServer {
    child: Child,
    port: u16,
    log: PathBuf,
    /// The test authority's certificate (PEM), the harness's upstream trust.
    ca: PathBuf,
}

impl TlsServer {
    /// Starts the server with a certificate for `localhost` and `127.0.0.1` signed by a
    /// fresh test authority; its files are in `dir`.
    fn start(world: &World, dir: &Path) -> TlsServer {
        Self::start_as(world, dir, false)
    }

    /// [`TlsServer::start`], serving plain HTTP when `plain` (its files in a directory of
    /// their own under `dir`).
    fn start_as(world: &World, dir: &Path, plain: bool) -> TlsServer {
        Self::start_on(world, dir, plain, "127.0.0.1")
    }

    /// [`TlsServer::start_as`] listening on `address`.
    fn start_on(world: &World, dir: &Path, plain: bool, address: &str) -> TlsServer {
        let dir = &dir.join(format!("{}-{address}", if plain { "plain" } else { "tls" }));
        std::fs::create_dir_all(dir).expect("a server directory");
        let ca_key = rcgen::KeyPair::generate().expect("a CA key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "dsh-bash credentials test CA");
        ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let ca = ca_params.self_signed(&ca_key).expect("the test CA");
        let key = rcgen::KeyPair::generate().expect("a server key");
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("params");
        params.distinguished_name.push(rcgen::DnType::CommonName, "localhost");
        let cert = params.signed_by(&key, &ca, &ca_key).expect("the server certificate");
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("write a server file");
            path
        };
        let ca_file = write("test-ca.pem", &ca.pem());
        let cert_file = write("server.pem", &cert.pem());
        let key_file = write("server.key", &key.serialize_pem());
        let script = write("server.py", SERVER);
        let log = write("requests.log", "");
        world.give(dir);
        let mut child = Command::new("python3")
            .env("PATH", world.path_env())
            .arg(&script)
            .arg(&cert_file)
            .arg(&key_file)
            .arg(&log)
            .arg(if plain { "plain" } else { "tls" })
            .arg(address)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the test's HTTPS server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("server stdout")).read_line(&mut line).expect("its port");
        let port = line.trim().parse().unwrap_or_else(|_| panic!("the server printed no port: {line:?}"));
        TlsServer { child, port, log, ca: ca_file }
    }

    /// The requests seen so far, one line each.
    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log).expect("read the request log").lines().map(str::to_owned).collect()
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn require_tools(world: &World) -> Result<(), Skip> {
    for tool in ["curl", "python3", "git"] {
        world.require(tool)?;
    }
    Ok(())
}

/// The lines of `requests` for `path`.
fn seen<'a>(requests: &'a [String], path: &str) -> Vec<&'a str> {
    requests.iter().filter(|l| l.split(' ').nth(1) == Some(path)).map(String::as_str).collect()
}

#[test]
fn a_bound_credential_reaches_its_host_and_never_the_command() {
    over_matrix("a_bound_credential_reaches_its_host_and_never_the_command", |world| {
        require_tools(world)?;
        let server = TlsServer::start(world, &world.outside);
        let port = server.port;
        let plain = TlsServer::start_as(world, &world.outside, true);
        let plain_port = plain.port;
        let secret = host::unique("world-secret-value");
        // Bound to `localhost:PORT` only: `127.0.0.1:PORT` is the same server under a name
        // the secret is not bound to.
        let flags = [
            "--network".to_owned(),
            "deny".to_owned(),
            "--allow-host".to_owned(),
            format!("localhost:{port}"),
            "--allow-host".to_owned(),
            format!("127.0.0.1:{port}"),
            "--allow-host".to_owned(),
            format!("localhost:{plain_port}"),
            "--credential".to_owned(),
            format!("WORLD_TOKEN=localhost:{port},localhost:{plain_port};header=X-Api-Key"),
            "--credential-upstream-ca".to_owned(),
            server.ca.display().to_string(),
        ];
        let command = format!(
            r#"echo "ENV=$WORLD_TOKEN"
cat /proc/self/environ | tr '\0' '\n' | grep '^WORLD_TOKEN=' | sed 's/^/PROC=/'
for p in /proc/[0-9]*; do tr '\0' '\n' < "$p/environ"; done 2>/dev/null | grep '^WORLD_TOKEN=' | sort -u | sed 's/^/ANY=/'
curl -sS -m 20 -H "Authorization: Bearer $WORLD_TOKEN" -H "X-Api-Key: $WORLD_TOKEN" https://localhost:{port}/curl https://localhost:{port}/curl-again
python3 - <<'PY'
import os
needle = ("world-secret" + "-value").encode()
found = []
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        maps = open("/proc/%s/maps" % pid).read().splitlines()
        mem = open("/proc/%s/mem" % pid, "rb", 0)
    except OSError:
        continue
    for line in maps:
        span, perms = line.split()[:2]
        start, end = (int(x, 16) for x in span.split("-"))
        if not perms.startswith("r") or end - start > 1 << 28:
            continue
        try:
            mem.seek(start)
            chunk = mem.read(end - start)
        except (OSError, ValueError, OverflowError):
            continue
        if needle in chunk:
            found.append(pid)
            break
print("MEMSCAN", "found in " + ",".join(found) if found else "clean")
PY
python3 -c 'import os, urllib.request as u; print("URLLIB", u.urlopen(u.Request("https://localhost:{port}/urllib", headers={{"Authorization": "token " + os.environ["WORLD_TOKEN"]}}), timeout=20).read().decode().strip())'
python3 -c 'import os, requests; print("REQUESTS", requests.get("https://localhost:{port}/requests", headers={{"Authorization": "Bearer " + os.environ["WORLD_TOKEN"]}}, timeout=20).text.strip())'
git -c http.lowSpeedTime=20 ls-remote https://localhost:{port}/repo.git >/dev/null 2>&1; echo GIT-DONE
curl -sS -m 20 -H "Authorization: Bearer $WORLD_TOKEN" https://127.0.0.1:{port}/unbound
head -c 300000 /dev/zero > body.bin
curl -sS -m 20 -H "Authorization: Bearer $WORLD_TOKEN" -H 'Expect: 100-continue' --data-binary @body.bin https://localhost:{port}/post-length
curl -sS -m 20 -H "Authorization: Bearer $WORLD_TOKEN" -H 'Transfer-Encoding: chunked' --data-binary @body.bin https://localhost:{port}/post-chunked
curl -sS -m 20 -H "Authorization: Bearer $WORLD_TOKEN" http://localhost:{plain_port}/plain
curl -sS -m 20 "http://x-access-token:$WORLD_TOKEN@localhost:{plain_port}/userinfo"
true"#
        );
        let output = call_with_secret(world, &flags, &command, &secret);
        let whole =
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        let out = Outcome::parse(&output);
        let requests = server.requests();

        // The command holds the placeholder, everywhere it can look.
        let placeholder = placeholder_of(&out);
        assert!(placeholder.starts_with("dsh-cred-world-token-") && placeholder.len() > 40, "{out:#?}");
        assert!(out.stdout.contains(&format!("PROC=WORLD_TOKEN={placeholder}\n")), "{out:#?}");
        for line in out.stdout.lines().filter(|l| l.starts_with("ANY=")) {
            assert_eq!(
                line,
                format!("ANY=WORLD_TOKEN={placeholder}"),
                "a process env the command reads: {out:#?}"
            );
        }
        assert!(!whole.contains(&secret), "the value reached the command's result: {whole}");
        assert!(
            !whole.contains("[redacted:WORLD_TOKEN]"),
            "the value reached the command (redacted): {whole}"
        );
        assert!(
            out.stdout.contains("MEMSCAN clean\n"),
            "the memory of every process the command can see holds no value: {out:#?}"
        );
        assert!(out.stdout.contains("URLLIB ok"), "{out:#?}");
        assert!(out.stdout.contains("REQUESTS ok"), "{out:#?}");
        assert!(out.stdout.contains("GIT-DONE"), "{out:#?}");
        assert!(
            out.text.contains(&format!("[network: credential WORLD_TOKEN added for localhost:{port}]")),
            "the addition is reported: {out:#?}"
        );

        // The bound host saw the value: bearer, named header, both requests on one connection.
        let curl = seen(&requests, "/curl");
        let again = seen(&requests, "/curl-again");
        assert_eq!((curl.len(), again.len()), (1, 1), "{requests:#?}");
        for line in [curl[0], again[0]] {
            assert!(line.ends_with(&format!(" auth=Bearer {secret} key={secret}")), "{requests:#?}");
        }
        assert_eq!(
            curl[0].split(' ').next(),
            again[0].split(' ').next(),
            "one kept-alive connection: {requests:#?}"
        );
        assert_eq!(
            seen(&requests, "/urllib"),
            vec![format!("{} /urllib auth=token {secret} key=None", urllib_port(&requests))]
        );
        let requests_seen = seen(&requests, "/requests");
        assert_eq!(requests_seen.len(), 1, "{requests:#?}");
        assert!(requests_seen[0].ends_with(&format!(" auth=Bearer {secret} key=None")), "{requests:#?}");
        // git asked its credential helper after the challenge; the proxy put the value into
        // the Basic pair.
        let basic = basic_pair(&format!("x-access-token:{secret}"));
        assert!(
            requests
                .iter()
                .any(|l| l.contains("/repo.git/info/refs") && l.contains(&format!("auth=Basic {basic} "))),
            "git's request carried the value: {requests:#?}"
        );
        // The same server under a name the secret is not bound to saw the placeholder only.
        let unbound = seen(&requests, "/unbound");
        assert_eq!(unbound.len(), 1, "{requests:#?}");
        assert!(unbound[0].ends_with(&format!(" auth=Bearer {placeholder} key=None")), "{requests:#?}");
        assert!(!unbound[0].contains(&secret));

        // Bodies go through whole, by length (after the proxy's `100 Continue`) and chunked.
        for path in ["/post-length", "/post-chunked"] {
            let lines = seen(&requests, path);
            assert_eq!(lines.len(), 1, "{path}: {requests:#?}");
            assert!(
                lines[0].ends_with(&format!(" auth=Bearer {secret} key=None body=300000")),
                "{requests:#?}"
            );
        }
        // Plain HTTP to a bound host: the header, and the URL's userinfo as Basic credentials.
        let plain_requests = plain.requests();
        assert_eq!(seen(&plain_requests, "/plain").len(), 1, "{plain_requests:#?}");
        assert!(seen(&plain_requests, "/plain")[0].ends_with(&format!(" auth=Bearer {secret} key=None")));
        let userinfo = seen(&plain_requests, "/userinfo");
        assert_eq!(userinfo.len(), 1, "{plain_requests:#?}");
        assert!(userinfo[0].ends_with(&format!(" auth=Basic {basic} key=None")), "{plain_requests:#?}");

        // Nothing the harness wrote (session logs, spill files) holds the value.
        let found = world.host_sh(&format!(
            "grep -rlF -- {} {} /tmp/dsh-credentials-* 2>/dev/null || true",
            host::q(&secret),
            host::q(world.dsh_home().display().to_string())
        ));
        assert!(found.trim().is_empty(), "the value was written to {found}");
        Ok(())
    });
}

/// `dsh-bash FLAGS call` of `command` under workspace-write, the harness holding `secret` as
/// `$WORLD_TOKEN`.
fn call_with_secret(world: &World, flags: &[String], command: &str, secret: &str) -> std::process::Output {
    let mut args = flags.to_vec();
    args.extend(world.call_args(Mode::WorkspaceWrite, None, command));
    world.dsh(&args).env("WORLD_TOKEN", secret).output().expect("spawn dsh-bash")
}

/// What the command printed as `ENV=<its $WORLD_TOKEN>`.
fn placeholder_of(out: &Outcome) -> String {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("ENV="))
        .unwrap_or_else(|| panic!("no ENV line: {out:#?}"))
        .to_owned()
}

/// The client port of the `/urllib` request (a connection of its own).
fn urllib_port(requests: &[String]) -> String {
    seen(requests, "/urllib").first().and_then(|l| l.split(' ').next()).unwrap_or_default().to_owned()
}

/// `user:password` as a `Basic` pair (base64).
fn basic_pair(pair: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = pair.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn credentials_need_an_isolating_network_and_never_take_a_value_on_the_command_line() {
    use crate::harness::run;
    let out = run(&["--credential", "T=example.com", "schema"]);
    assert!(
        out.code != Some(0) && out.stderr.contains("needs a sandbox and --network deny or ask"),
        "{out:?}"
    );
    let out = run(&["--sandbox", "workspace-write", "--credential", "T=example.com", "schema"]);
    assert!(out.code != Some(0) && out.stderr.contains("credentials need network"), "{out:?}");
}

#[test]
fn a_bound_host_that_fails_verification_gets_nothing() {
    over_matrix("a_bound_host_that_fails_verification_gets_nothing", |world| {
        require_tools(world)?;
        let server = TlsServer::start(world, &world.outside);
        let port = server.port;
        let secret = host::unique("world-secret-value");
        // No --credential-upstream-ca: the test's authority is in no trust store the proxy
        // uses, so the server cannot prove it is `localhost`.
        let flags = [
            "--network".to_owned(),
            "deny".to_owned(),
            "--allow-host".to_owned(),
            format!("localhost:{port}"),
            "--credential".to_owned(),
            format!("WORLD_TOKEN=localhost:{port}"),
        ];
        let command = format!(
            r#"curl -sS -m 20 -H "Authorization: Bearer $WORLD_TOKEN" https://localhost:{port}/bound; true"#
        );
        let output = call_with_secret(world, &flags, &command, &secret);
        let out = Outcome::parse(&output);
        assert!(
            out.stdout
                .contains(&format!("dsh-bash network proxy: localhost:{port}: TLS with localhost failed")),
            "the command is told why: {out:#?}"
        );
        assert!(server.requests().is_empty(), "an unverified host got a request: {:#?}", server.requests());
        assert!(!out.text.contains("[network: credential"), "{out:#?}");
        Ok(())
    });
}

/// This machine's address on its first global IPv4 interface (`ip -4 -o addr show scope
/// global`): reached through a network interface, not loopback.
fn non_loopback_address() -> String {
    let out =
        Command::new("ip").args(["-4", "-o", "addr", "show", "scope", "global"]).output().expect("run ip");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("test setup: this machine has no global IPv4 address: {text:?}"))
}

#[test]
fn a_bound_secret_never_goes_in_cleartext_beyond_loopback() {
    over_matrix("a_bound_secret_never_goes_in_cleartext_beyond_loopback", |world| {
        require_tools(world)?;
        let address = non_loopback_address();
        let plain = TlsServer::start_on(world, &world.outside, true, &address);
        let port = plain.port;
        let secret = host::unique("world-secret-value");
        // Bound without a port, as a user binding a host would: port 80 style plain HTTP to
        // the host's real (non-loopback) address must keep the placeholder.
        let flags = [
            "--network".to_owned(),
            "deny".to_owned(),
            "--allow-host".to_owned(),
            format!("{address}:{port}"),
            "--credential".to_owned(),
            format!("WORLD_TOKEN={address}"),
        ];
        let command = format!(
            r#"echo "ENV=$WORLD_TOKEN"; curl -sS -m 20 -H "Authorization: Bearer $WORLD_TOKEN" http://{address}:{port}/far"#
        );
        let output = call_with_secret(world, &flags, &command, &secret);
        let out = Outcome::parse(&output);
        let placeholder = placeholder_of(&out);
        let requests = plain.requests();
        let far = seen(&requests, "/far");
        assert_eq!(far.len(), 1, "the request went through: {requests:#?} {out:#?}");
        assert!(far[0].ends_with(&format!(" auth=Bearer {placeholder} key=None")), "{requests:#?}");
        assert!(!far[0].contains(&secret), "the value crossed a network in cleartext: {requests:#?}");
        assert!(!out.text.contains("[network: credential"), "{out:#?}");
        Ok(())
    });
}

#[test]
fn credentials_from_the_composition_file_have_one_placeholder_per_session() {
    over_matrix("credentials_from_the_composition_file_have_one_placeholder_per_session", |world| {
        require_tools(world)?;
        let server = TlsServer::start(world, &world.outside);
        let port = server.port;
        let secret = host::unique("world-secret-value");
        let token = world.outside.join("file-token");
        std::fs::write(&token, format!("{secret}\n")).expect("write the token file");
        world.give(&token);
        world.configure(&format!(
            "[sandbox-policy]\nnetwork = \"deny\"\nallowHosts = [\"localhost:{port}\"]\ncredentialsUpstreamCa = {ca:?}\n\n[[sandbox-policy.credentials]]\nname = \"FILE_TOKEN\"\nhosts = [\"localhost:{port}\"]\nfile = {file:?}\n",
            ca = server.ca.display().to_string(),
            file = token.display().to_string(),
        ));
        let token_path = host::q(token.display().to_string());
        let first = format!(
            r#"echo "P=$FILE_TOKEN"; cat {token_path} 2>/dev/null || echo CANNOT-READ; curl -sS -m 20 -H "Authorization: Bearer $FILE_TOKEN" https://localhost:{port}/s1"#
        );
        let outcomes = world.batch(&[
            ("cred-s1", &first),
            ("cred-s1", "echo \"P=$FILE_TOKEN\""),
            ("cred-s2", "echo \"P=$FILE_TOKEN\""),
        ]);
        let placeholder = |o: &Outcome| {
            o.stdout
                .lines()
                .find_map(|l| l.strip_prefix("P="))
                .map(str::to_owned)
                .unwrap_or_else(|| panic!("no placeholder: {o:#?}"))
        };
        let (a, b, c) = (placeholder(&outcomes[0]), placeholder(&outcomes[1]), placeholder(&outcomes[2]));
        assert!(a.starts_with("dsh-cred-file-token-"), "{outcomes:#?}");
        assert_eq!(a, b, "one placeholder for the calls of a session: {outcomes:#?}");
        assert_ne!(a, c, "another session has another placeholder: {outcomes:#?}");
        assert!(outcomes[0].stdout.contains("CANNOT-READ"), "the token file is hidden: {outcomes:#?}");
        for o in &outcomes {
            assert!(!o.text.contains(&secret) && !o.text.contains("[redacted:FILE_TOKEN]"), "{o:#?}");
        }
        let requests = server.requests();
        let s1 = seen(&requests, "/s1");
        assert_eq!(s1.len(), 1, "{requests:#?}");
        assert!(s1[0].ends_with(&format!(" auth=Bearer {secret} key=None")), "{requests:#?}");
        Ok(())
    });
}
