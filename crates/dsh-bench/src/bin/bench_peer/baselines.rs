//! What the executor is measured against: raw spawns, plain pipes, and confinement.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_bash_sandbox::SandboxBashExecutor;
use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider, RunnerKind};
use dsh_sandbox_policy::{LocalSandboxPolicy, SandboxPolicyConfig};
use dsh_shell::{ShellExecRequest, ShellExecutor};
use dsh_subprocess::{SpawnSpec, SubprocessService};
use serde_json::{Map, Value, json};

use crate::measure::{max_rss_mib, ms, pct, round, stats};
use crate::peer::throughput_command;
use crate::{Args, Composed, Outcome, run, run_with};

/// `bash -c true` by std: posix_spawn (no hook), or fork+exec (a no-op `pre_exec` hook).
pub(crate) fn raw_spawn(fork: bool) -> anyhow::Result<()> {
    let mut cmd = Command::new("bash");
    cmd.args(["-c", "true"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    if fork {
        // SAFETY: the hook does nothing, so it is trivially async-signal-safe; it only makes
        // std fork instead of using posix_spawn, as every hooked spawn does.
        unsafe { cmd.pre_exec(|| Ok(())) };
    }
    let status = cmd.status()?;
    if !status.success() {
        bail!("bash -c true: {status}");
    }
    Ok(())
}

pub(crate) async fn overhead(c: &Composed, args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let warmup = args.int_flag("warmup", 20)?;
    let service_spawn = || async {
        let spec = SpawnSpec::new(vec!["bash".into(), "-c".into(), "true".into()]);
        c.service.spawn(spec).map_err(|e| anyhow::anyhow!("{e}"))?.wait().await;
        anyhow::Ok(())
    };
    for _ in 0..warmup {
        raw_spawn(false)?;
        raw_spawn(true)?;
        service_spawn().await?;
        run(c.executor.as_ref(), "true").await?;
    }
    let mut samples: [Vec<f64>; 4] = Default::default();
    for _ in 0..n {
        let t = Instant::now();
        raw_spawn(false)?;
        samples[0].push(ms(t.elapsed()));
        let t = Instant::now();
        raw_spawn(true)?;
        samples[1].push(ms(t.elapsed()));
        let t = Instant::now();
        service_spawn().await?;
        samples[2].push(ms(t.elapsed()));
        let t = Instant::now();
        let r = run(c.executor.as_ref(), "true").await?;
        samples[3].push(ms(t.elapsed()));
        if r.exit_code != Some(0) {
            bail!("run(true) exit {:?}", r.exit_code);
        }
    }
    let p50 = |s: &[f64]| {
        let mut v = s.to_vec();
        v.sort_by(f64::total_cmp);
        pct(&v, 50.0)
    };
    Ok(Outcome {
        params: json!({"n": n, "warmup": warmup, "command": "true", "interleaved": true}),
        results: json!({
            "raw_spawn": stats(&samples[0]),
            "raw_fork": stats(&samples[1]),
            "service": stats(&samples[2]),
            "run": stats(&samples[3]),
            "run_vs_raw_p50": round(p50(&samples[3]) / p50(&samples[0]), 3),
        }),
        shape: Value::Null,
    })
}

/// The throughput command through a plain pipe: read and discarded by this process, and
/// redirected to `/dev/null` inside bash.
pub(crate) fn pipe(args: &Args) -> anyhow::Result<Outcome> {
    let bytes = args.int_at(1, "BYTES")?;
    let command = throughput_command(bytes, args.has("plain"));
    let t0 = Instant::now();
    let mut child = Command::new("bash").args(["-c", &command]).stdout(Stdio::piped()).spawn()?;
    let mut stdout = child.stdout.take().context("stdout pipe")?;
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let got = stdout.read(&mut buf)?;
        if got == 0 {
            break;
        }
        total += got as u64;
    }
    child.wait()?;
    let read_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    Command::new("bash").args(["-c", &format!("{command} > /dev/null")]).status()?;
    let devnull_s = t0.elapsed().as_secs_f64();
    Ok(Outcome {
        params: json!({"bytes": bytes, "command": command}),
        results: json!({
            "read": {"wall_s": round(read_s, 4), "mb_per_s": round(bytes as f64 / 1e6 / read_s, 1), "bytes": total},
            "devnull": {"wall_s": round(devnull_s, 4), "mb_per_s": round(bytes as f64 / 1e6 / devnull_s, 1)},
            "max_rss_mib": round(max_rss_mib(), 1),
        }),
        shape: Value::Null,
    })
}

/// The concurrency baseline: N `bash -c 'sleep 0.5; echo done'` spawned by std with stdout
/// piped, then each awaited and read.
pub(crate) fn raw_concurrent(args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let command = "sleep 0.5; echo done";
    let t0 = Instant::now();
    let mut children = Vec::with_capacity(n as usize);
    for _ in 0..n {
        children.push(
            Command::new("bash").args(["-c", command]).stdin(Stdio::null()).stdout(Stdio::piped()).spawn()?,
        );
    }
    let started = ms(t0.elapsed());
    let mut ok = 0;
    for child in children {
        let output = child.wait_with_output()?;
        if output.status.success() && output.stdout == b"done\n" {
            ok += 1;
        }
    }
    let wall = ms(t0.elapsed());
    Ok(Outcome {
        params: json!({"n": n, "command": command}),
        results: json!({
            "wall_ms": round(wall, 3),
            "overhead_ms": round(wall - 500.0, 3),
            "start_all_ms": round(started, 3),
            "all_ok": ok == n,
            "ok": ok,
        }),
        shape: Value::Null,
    })
}

/// A sandboxing executor confining under exactly one runner, `workspace-write` at `root`.
fn confined_executor(
    service: &Arc<SubprocessService>,
    runner: RunnerKind,
    root: &Path,
    network: Option<&str>,
) -> anyhow::Result<SandboxBashExecutor> {
    let local = LocalBashExecutor::new(LocalBashConfig::default(), Arc::clone(service))?;
    let provider = LocalSandboxProvider::new(LocalSandboxConfig {
        runners: vec![runner],
        ..LocalSandboxConfig::default()
    })?;
    let policy = LocalSandboxPolicy::new(&SandboxPolicyConfig {
        mode: Some("workspace-write".into()),
        workspace_root: Some(root.to_string_lossy().into_owned()),
        network: network.map(str::to_owned),
        ..Default::default()
    })
    .map_err(anyhow::Error::msg)?;
    Ok(SandboxBashExecutor::new(local, Arc::new(provider), Arc::new(policy)))
}

pub(crate) async fn confined(c: &Composed, args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let warmup = args.int_flag("warmup", 10)?;
    let base = if Path::new("/var/tmp").is_dir() { PathBuf::from("/var/tmp") } else { std::env::temp_dir() };
    let dir = tempfile::Builder::new().prefix("dsh-bench-root-").tempdir_in(base)?;
    let root = std::fs::canonicalize(dir.path())?;
    let request = || ShellExecRequest {
        command: "true".to_owned(),
        workdir: Some(root.clone()),
        ..ShellExecRequest::default()
    };
    let mut variants: Vec<(&str, Arc<dyn ShellExecutor>)> = vec![("unconfined", c.executor.clone())];
    let mut skipped = Map::new();
    for (name, runner, network) in [
        ("landlock", RunnerKind::Landlock, None),
        ("bwrap", RunnerKind::Bwrap, None),
        ("landlock_netdeny", RunnerKind::Landlock, Some("deny")),
        ("bwrap_netdeny", RunnerKind::Bwrap, Some("deny")),
    ] {
        let executor: Arc<dyn ShellExecutor> =
            Arc::new(confined_executor(&c.service, runner, &root, network)?);
        match run_with(executor.as_ref(), request()).await {
            Ok(r) if r.exit_code == Some(0) => variants.push((name, executor)),
            Ok(r) => {
                skipped
                    .insert(name.into(), json!(format!("exit {:?}: {}", r.exit_code, r.stderr.text.trim())));
            }
            Err(e) => {
                skipped.insert(name.into(), json!(e.to_string()));
            }
        }
    }
    for _ in 0..warmup {
        for (_, executor) in &variants {
            run_with(executor.as_ref(), request()).await?;
        }
    }
    let mut samples = vec![Vec::with_capacity(n as usize); variants.len()];
    for _ in 0..n {
        for (i, (name, executor)) in variants.iter().enumerate() {
            let t = Instant::now();
            let r = run_with(executor.as_ref(), request()).await?;
            samples[i].push(ms(t.elapsed()));
            if r.exit_code != Some(0) {
                bail!("{name}: exit {:?}: {}", r.exit_code, r.stderr.text);
            }
        }
    }
    let mut results = Map::new();
    for ((name, _), s) in variants.iter().zip(&samples) {
        results.insert((*name).into(), Value::Object(stats(s)));
    }
    results.insert("skipped".into(), Value::Object(skipped));
    Ok(Outcome {
        params: json!({"n": n, "warmup": warmup, "command": "true", "mode": "workspace-write", "interleaved": true}),
        results: Value::Object(results),
        shape: Value::Null,
    })
}

/// One CONNECT round trip through the network proxy versus a direct loopback connect: each
/// sample connects, (through the proxy: sends `CONNECT`, reads the `200`), writes one byte and
/// reads the echo.
pub(crate) async fn proxy(args: &Args) -> anyhow::Result<Outcome> {
    use dsh_netproxy::NetworkGate;
    use dsh_sandbox::{HostPattern, NetworkMode, NetworkPolicy, ProxyListener};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    let n = args.int_at(1, "N")?;
    let warmup = args.int_flag("warmup", 20)?;
    let echo = TcpListener::bind("127.0.0.1:0").await?;
    let echo_port = echo.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = echo.accept().await {
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let mut buf = [0u8; 256];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let proxy_port = std_listener.local_addr()?.port();
    let proxy = Arc::new(ProxyListener::new(std::os::fd::OwnedFd::from(std_listener), proxy_port));
    let target = format!("127.0.0.1:{echo_port}");
    let policy = NetworkPolicy {
        mode: NetworkMode::Deny,
        allow: vec![HostPattern::parse(&target).map_err(anyhow::Error::msg)?],
    };
    let gate = NetworkGate::new(policy);
    let _call = gate.enter(None);
    dsh_netproxy::serve(&proxy, gate)?;
    let direct = || async {
        let mut s = TcpStream::connect(("127.0.0.1", echo_port)).await?;
        s.set_nodelay(true)?;
        s.write_all(b"x").await?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        anyhow::Ok(())
    };
    let through = || async {
        let mut s = TcpStream::connect(("127.0.0.1", proxy_port)).await?;
        s.set_nodelay(true)?;
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes()).await?;
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).await?;
            head.push(b[0]);
        }
        anyhow::ensure!(
            head.starts_with(b"HTTP/1.1 200"),
            "proxy answered {:?}",
            String::from_utf8_lossy(&head)
        );
        s.write_all(b"x").await?;
        s.read_exact(&mut b).await?;
        anyhow::Ok(())
    };
    for _ in 0..warmup {
        direct().await?;
        through().await?;
    }
    let (mut d, mut p) = (Vec::with_capacity(n as usize), Vec::with_capacity(n as usize));
    for _ in 0..n {
        let t = Instant::now();
        direct().await?;
        d.push(ms(t.elapsed()));
        let t = Instant::now();
        through().await?;
        p.push(ms(t.elapsed()));
    }
    Ok(Outcome {
        params: json!({"n": n, "warmup": warmup, "interleaved": true}),
        results: json!({"direct": Value::Object(stats(&d)), "proxy": Value::Object(stats(&p))}),
        shape: Value::Null,
    })
}

/// The bench's TLS: *ring*, as the proxy's (see `dsh_netproxy`'s provider).
#[allow(deprecated)]
fn tls_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads one small HTTP response (head and a `Content-Length` body) from `s`.
async fn read_response<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).await?;
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    anyhow::ensure!(text.starts_with("http/1.1 200"), "answered {text:?}");
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).await?;
    Ok(())
}

/// The per-request cost of TLS interception: an HTTPS server of the bench's own authority on
/// loopback, reached through the proxy as an unbound host (a plain `CONNECT` tunnel, TLS end
/// to end) and as a bound host (the proxy ends the client's TLS with the session's authority,
/// puts the secret into `Authorization` and makes its own TLS connection to the server). Each
/// sample opens a connection and sends two requests on it: `first` is connect, `CONNECT`, TLS
/// handshake(s) and the first request; `next` is the second request on the kept-alive
/// connection.
pub(crate) async fn proxy_tls(args: &Args) -> anyhow::Result<Outcome> {
    use dsh_netproxy::{CredentialVault, NetworkGate};
    use dsh_sandbox::{
        CredentialBinding, Credentials, HostPattern, NetworkMode, NetworkPolicy, ProxyListener,
    };
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    let n = args.int_at(1, "N")?;
    let warmup = args.int_flag("warmup", 10)?;
    // The server: a certificate for localhost and 127.0.0.1 from the bench's authority.
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca = ca_params.self_signed(&ca_key)?;
    let key = rcgen::KeyPair::generate()?;
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?
        .signed_by(&key, &ca, &ca_key)?;
    let server_config = rustls::ServerConfig::builder_with_provider(tls_provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let server = TcpListener::bind("127.0.0.1:0").await?;
    let port = server.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = server.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let Ok(mut tls) = acceptor.accept(stream).await else { return };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if tls.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                    match tls.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });

    // The proxy: both names allowed, the secret bound to `localhost:PORT` only.
    let dir = tempfile::tempdir()?;
    let ca_file = dir.path().join("bench-ca.pem");
    std::fs::write(&ca_file, ca.pem())?;
    let bound = format!("localhost:{port}");
    let unbound = format!("127.0.0.1:{port}");
    let pattern = |p: &str| HostPattern::parse(p).map_err(anyhow::Error::msg);
    let binding = CredentialBinding::new(
        "BENCH_TOKEN".into(),
        b"bench-secret-value".to_vec(),
        vec![pattern(&bound)?],
        Vec::new(),
    );
    let vault = CredentialVault::new(&Credentials { bindings: vec![binding], upstream_ca: Some(ca_file) })
        .map_err(anyhow::Error::msg)?;
    let placeholder = vault.placeholders().next().map(|(_, p)| p.to_owned()).unwrap_or_default();
    let session_ca = vault.ca_certificate();
    let policy = NetworkPolicy { mode: NetworkMode::Deny, allow: vec![pattern(&bound)?, pattern(&unbound)?] };
    let gate = NetworkGate::with_credentials(policy, Some(Arc::new(vault)));
    let _call = gate.enter(None);
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let proxy_port = std_listener.local_addr()?.port();
    let proxy = Arc::new(ProxyListener::new(std::os::fd::OwnedFd::from(std_listener), proxy_port));
    dsh_netproxy::serve(&proxy, gate)?;

    // The client trusts both authorities, as a confined command's bundle does.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone())?;
    for cert in CertificateDer::pem_slice_iter(session_ca.as_bytes()) {
        roots.add(cert?)?;
    }
    let client_config = rustls::ClientConfig::builder_with_provider(tls_provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config));
    let request = format!("GET / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {placeholder}\r\n\r\n");

    // One sample: (first request with the connection's setup, the next request), in ms.
    let sample = |target: String, name: &'static str| {
        let connector = connector.clone();
        let request = request.clone();
        async move {
            let t = Instant::now();
            let mut s = TcpStream::connect(("127.0.0.1", proxy_port)).await?;
            s.set_nodelay(true)?;
            s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes()).await?;
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                s.read_exact(&mut b).await?;
                head.push(b[0]);
            }
            anyhow::ensure!(
                head.starts_with(b"HTTP/1.1 200"),
                "proxy answered {:?}",
                String::from_utf8_lossy(&head)
            );
            let mut tls = connector.connect(ServerName::try_from(name)?, s).await?;
            tls.write_all(request.as_bytes()).await?;
            read_response(&mut tls).await?;
            let first = ms(t.elapsed());
            let t = Instant::now();
            tls.write_all(request.as_bytes()).await?;
            read_response(&mut tls).await?;
            anyhow::Ok((first, ms(t.elapsed())))
        }
    };
    for _ in 0..warmup {
        sample(unbound.clone(), "127.0.0.1").await?;
        sample(bound.clone(), "localhost").await?;
    }
    let (mut tunnel_first, mut tunnel_next, mut bound_first, mut bound_next) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let (first, next) = sample(unbound.clone(), "127.0.0.1").await?;
        tunnel_first.push(first);
        tunnel_next.push(next);
        let (first, next) = sample(bound.clone(), "localhost").await?;
        bound_first.push(first);
        bound_next.push(next);
    }
    Ok(Outcome {
        params: json!({"n": n, "warmup": warmup, "interleaved": true}),
        results: json!({
            "tunnel_first": Value::Object(stats(&tunnel_first)),
            "tunnel_next": Value::Object(stats(&tunnel_next)),
            "intercepted_first": Value::Object(stats(&bound_first)),
            "intercepted_next": Value::Object(stats(&bound_next)),
        }),
        shape: Value::Null,
    })
}
