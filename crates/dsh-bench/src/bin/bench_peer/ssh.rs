//! `true` over SSH: the SSH executor (`RemoteExecutor` over `SshTransport`, what
//! `--executor ssh` runs) and the bare transport against a raw `ssh host true` through the
//! same master connection, interleaved in one run.
//!
//! Without `--ssh-host` a loopback `sshd` is started for the run (generated keys), so the
//! figures are the SSH machinery's own cost, not a network's.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use dsh_bash_local::LocalBashConfig;
use dsh_shell_remote::{RemoteExecSpec, RemoteExecutor, RemoteTransport};
use dsh_shell_ssh::fixture::LoopbackSshd;
use dsh_shell_ssh::{SshConfig, SshTarget, SshTransport};
use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::measure::{ms, pct, round, stats};
use crate::{Args, Composed, Outcome, run};

/// `bench_peer ssh N [--warmup W] [--ssh-host H --ssh-identity F --ssh-known-hosts F]`.
pub(crate) async fn ssh(c: &Composed, args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let warmup = args.int_flag("warmup", 20)?;
    let (config, _sshd) = match args.flag("ssh-host") {
        Some(host) => {
            let target: SshTarget = host.parse()?;
            let config = SshConfig {
                identity: args.flag("ssh-identity").map(PathBuf::from),
                known_hosts: args.flag("ssh-known-hosts").map(PathBuf::from),
                ..SshConfig::new(target)
            };
            (config, None)
        }
        None => {
            let sshd = LoopbackSshd::start().map_err(|why| anyhow::anyhow!("loopback sshd: {why}"))?;
            (sshd.config(), Some(sshd))
        }
    };
    let transport = Arc::new(SshTransport::new(config.clone()));
    let remote: Arc<dyn RemoteTransport> = transport.clone();
    let executor = RemoteExecutor::new(remote, LocalBashConfig::default(), Arc::clone(&c.service))?;
    exec_true(&transport).await?;
    let socket = transport.control_socket().await.context("the master is open")?;
    let raw = || raw_ssh_true(&config, &socket);
    let run_true = || async {
        let result = run(&executor, "true").await?;
        match result.exit_code {
            Some(0) => anyhow::Ok(()),
            code => bail!("run(true) over ssh: exit {code:?}, stderr {:?}", result.stderr.text),
        }
    };
    for _ in 0..warmup {
        raw()?;
        exec_true(&transport).await?;
        run_true().await?;
    }
    let mut samples: [Vec<f64>; 3] = Default::default();
    for _ in 0..n {
        let t = Instant::now();
        raw()?;
        samples[0].push(ms(t.elapsed()));
        let t = Instant::now();
        exec_true(&transport).await?;
        samples[1].push(ms(t.elapsed()));
        let t = Instant::now();
        run_true().await?;
        samples[2].push(ms(t.elapsed()));
    }
    transport.shutdown().await?;
    let p50 = |s: &[f64]| {
        let mut v = s.to_vec();
        v.sort_by(f64::total_cmp);
        pct(&v, 50.0)
    };
    Ok(Outcome {
        params: json!({"n": n, "warmup": warmup, "command": "true", "host": config.target.to_string(), "interleaved": true}),
        results: json!({
            "raw_ssh": stats(&samples[0]),
            "transport": stats(&samples[1]),
            "run": stats(&samples[2]),
            "transport_vs_raw_p50": round(p50(&samples[1]) / p50(&samples[0]), 3),
            "run_vs_raw_p50": round(p50(&samples[2]) / p50(&samples[0]), 3),
        }),
        shape: serde_json::Value::Null,
    })
}

/// `true` through the transport: started, both streams read to their end, exit awaited.
async fn exec_true(transport: &SshTransport) -> anyhow::Result<()> {
    let mut child =
        transport.exec(RemoteExecSpec { argv: vec!["true".into()], ..Default::default() }).await?;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (a, b) = tokio::join!(child.stdout.read_to_end(&mut out), child.stderr.read_to_end(&mut err));
    a?;
    b?;
    match child.exit.await?.code {
        Some(0) => Ok(()),
        code => bail!("true over ssh: exit {code:?}"),
    }
}

/// `ssh -S <master socket> host true`: a new `ssh` client process that runs `true` as one
/// more channel of the same master.
fn raw_ssh_true(config: &SshConfig, socket: &std::path::Path) -> anyhow::Result<()> {
    let mut ssh = Command::new("ssh");
    ssh.arg("-S").arg(socket).args(["-o", "ControlMaster=no", "-o", "BatchMode=yes"]);
    if let Some(port) = config.target.port {
        ssh.arg("-p").arg(port.to_string());
    }
    if let Some(user) = &config.target.user {
        ssh.arg("-l").arg(user);
    }
    let status = ssh
        .arg("--")
        .arg(&config.target.host)
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("ssh -S {} {} true: {status}", socket.display(), config.target);
    }
    Ok(())
}
