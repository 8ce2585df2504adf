//! The container executor against the engine's own per-call cost: `run("true")` through
//! `RemoteExecutor` over `ContainerTransport`, the transport's bare exec of `true` (bollard
//! alone), and `docker exec <container> true` (the CLI), interleaved in one container.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::bail;
use dsh_bash_local::LocalBashConfig;
use dsh_shell::ShellExecRequest;
use dsh_shell_container::{ContainerSettings, ContainerTransport};
use dsh_shell_remote::{RemoteExecSpec, RemoteExecutor, RemoteTransport};
use serde_json::{Map, Value, json};
use tokio::io::AsyncReadExt;

use crate::measure::{ms, round, stats};
use crate::{Args, Composed, Outcome, run_with};

/// `true` through the transport alone: exec, both streams to their end, the exit.
async fn bare_exec(transport: &ContainerTransport) -> anyhow::Result<()> {
    let spec = RemoteExecSpec { argv: vec!["true".to_owned()], ..RemoteExecSpec::default() };
    let mut child = transport.exec(spec).await?;
    let mut sink = Vec::new();
    child.stdout.read_to_end(&mut sink).await?;
    child.stderr.read_to_end(&mut sink).await?;
    let exit = child.exit.await?;
    if exit.code != Some(0) {
        bail!("true exited {:?}", exit.code);
    }
    Ok(())
}

fn docker_exec(container: &str) -> anyhow::Result<()> {
    let status = Command::new("docker")
        .args(["exec", container, "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("docker exec {container} true: {status}");
    }
    Ok(())
}

/// The settings of the measured container: `image`, the workspace `root`.
fn settings_of(image: &str, root: &std::path::Path) -> ContainerSettings {
    ContainerSettings {
        image: Some(image.to_owned()),
        workspace: root.to_path_buf(),
        ..ContainerSettings::default()
    }
}

/// A new session's first call, `reps` times each way: `[cold, warm]` in ms. Cold: a fresh
/// transport's first exec (it creates and starts the container). Warm: a fresh transport
/// with a warm pool of one, measured once the pool is ready.
async fn first_calls(settings: &ContainerSettings, reps: u64) -> anyhow::Result<[Vec<f64>; 2]> {
    let mut samples: [Vec<f64>; 2] = Default::default();
    for i in 0..reps {
        for (slot, warm) in [(0, 0), (1, 1)] {
            let settings = ContainerSettings { warm, ..settings.clone() };
            let transport = ContainerTransport::new(
                settings,
                format!("benchfirst{}-{i}-{slot}", std::process::id()),
                None,
            );
            transport.prewarm();
            let deadline = Instant::now() + std::time::Duration::from_secs(60);
            while transport.warm_ready() < warm {
                if Instant::now() > deadline {
                    bail!("the warm pool did not fill within 60 s");
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            let t = Instant::now();
            let done = bare_exec(&transport).await;
            samples[slot].push(ms(t.elapsed()));
            transport.shutdown().await?;
            done?;
        }
    }
    Ok(samples)
}

pub(crate) async fn container(c: &Composed, args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let warmup = args.int_flag("warmup", 5)?;
    let image = args.flag("image").unwrap_or("dsh-bash-test:minimal").to_owned();
    let workspace = tempfile::Builder::new().prefix("dsh-bench-container-").tempdir()?;
    let session = format!("bench{}", std::process::id());
    let root = std::fs::canonicalize(workspace.path())?;
    let settings = settings_of(&image, &root);
    let transport = ContainerTransport::new(settings, session.clone(), None);
    let params = json!({"n": n, "warmup": warmup, "command": "true", "image": image, "interleaved": true});
    // The first exec creates the container; an engine that does not answer skips the rows.
    if let Err(e) = bare_exec(&transport).await {
        let _ = transport.shutdown().await;
        return Ok(Outcome { params, results: json!({"skipped": e.to_string()}), shape: Value::Null });
    }
    let executor = RemoteExecutor::new(
        Arc::clone(&transport) as Arc<dyn RemoteTransport>,
        LocalBashConfig::default(),
        Arc::clone(&c.service),
    )?;
    let name = format!("dsh-{session}-0");
    let request = || ShellExecRequest {
        command: "true".to_owned(),
        workdir: Some(root.clone()),
        ..ShellExecRequest::default()
    };
    let measured = async {
        for _ in 0..warmup {
            docker_exec(&name)?;
            bare_exec(&transport).await?;
            run_with(&executor, request()).await?;
        }
        let mut samples: [Vec<f64>; 3] = Default::default();
        for _ in 0..n {
            let t = Instant::now();
            docker_exec(&name)?;
            samples[0].push(ms(t.elapsed()));
            let t = Instant::now();
            bare_exec(&transport).await?;
            samples[1].push(ms(t.elapsed()));
            let t = Instant::now();
            let r = run_with(&executor, request()).await?;
            samples[2].push(ms(t.elapsed()));
            if r.exit_code != Some(0) {
                bail!("run(true): exit {:?}: {}", r.exit_code, r.stderr.text);
            }
        }
        anyhow::Ok(samples)
    }
    .await;
    transport.shutdown().await?;
    let samples = measured?;
    let first = first_calls(&settings_of(&image, &root), (n / 10).clamp(3, 10)).await?;
    let mut results = Map::new();
    for (key, s) in ["first_call_cold", "first_call_warm"].into_iter().zip(&first) {
        results.insert(key.into(), Value::Object(stats(s)));
    }
    for (key, s) in ["docker_exec", "bollard_exec", "executor_run"].into_iter().zip(&samples) {
        results.insert(key.into(), Value::Object(stats(s)));
    }
    let p50 = |key: &str| results[key]["p50_ms"].as_f64().filter(|x| *x > 0.0);
    if let (Some(run), Some(raw)) = (p50("executor_run"), p50("docker_exec")) {
        results.insert("run_vs_docker_exec_p50".into(), round(run / raw, 3));
    }
    Ok(Outcome { params, results: Value::Object(results), shape: Value::Null })
}
