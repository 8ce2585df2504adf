//! The Rust peer of the reference executor's benchmark driver (`scripts/reference/bench.mjs`),
//! and the extra measurements and the comparison table of `scripts/bench-compare`.
//!
//! Peer subcommands answer like `bench.mjs`: a fresh process composes
//! `LocalBashExecutor` over `SubprocessService`, runs one benchmark, disposes, and prints ONE
//! JSON line `{impl, bench, params, results, shape, compose_ms, dispose_ms, executor_config,
//! env, ts}` with the same `results` keys.
//!
//! ```text
//! bench_peer latency N [--warmup W]
//! bench_peer throughput BYTES [--plain]
//! bench_peer concurrent N
//! bench_peer background N
//! bench_peer timeout [--timeout-ms MS] [--command CMD]
//!     common: --config JSON   (bash-local keys: timeoutMs, maxOutputBytes, graceMs, …)
//! ```
//!
//! Extra subcommands (same line layout, `bench` named after the subcommand):
//!
//! ```text
//! bench_peer overhead N        raw `bash -c true` spawns vs the service vs run("true"), interleaved
//! bench_peer pipe BYTES [--plain]   the throughput command through a plain pipe, read and discarded
//! bench_peer raw-concurrent N  N `sleep 0.5; echo done` spawned by std at once, then awaited
//! bench_peer batch N [--bin DSH_BASH] [--warmup W] [--settle-ms S]   `dsh-bash batch`: per-line
//!                               cost and round trip
//! bench_peer mcp N [--bin DSH_BASH] [--warmup W] [--settle-ms S]     `dsh-bash mcp` over stdio:
//!                               tools/call round trip
//!                               (--settle-ms: an idle pause before each timed round trip and raw
//!                               spawn, so nothing one left to do runs in the next one's time)
//! bench_peer mcp-http N [--bin DSH_BASH] [--warmup W]   the same round trip over a keep-alive
//!                               HTTP connection and over stdio, alternating, in one run
//! bench_peer mcp-load [--sessions S] [--calls C] [--jobs J] [--churn K] [--rounds R] [--bin DSH_BASH]
//!                               S concurrent HTTP sessions (C calls, J jobs each), checked;
//!                               latency vs one session; server RSS/fds before, peak, after;
//!                               then K sessions created and deleted in a row
//! bench_peer mcp-soak [--seconds S] [--sessions N] [--every T] [--bin DSH_BASH]
//!                               N workers of back-to-back sessions for S seconds; the server's
//!                               memory slope and its spill files' disk use
//! bench_peer confined N        run("true") unconfined vs under Landlock vs under bubblewrap
//!                               (each also with network deny)
//! bench_peer proxy N           a CONNECT round trip through the network proxy vs a direct
//!                               loopback connect (1-byte echo each)
//! bench_peer proxy-tls N       an HTTPS request through the proxy to an unbound host (plain
//!                               tunnel) vs a bound one (TLS intercepted, secret added): first
//!                               request with the connection's setup, next on the same connection
//! bench_peer container N [--image IMAGE]   run("true") through the container executor vs the
//!                               transport's bare exec vs `docker exec <container> true`
//! bench_peer redact SECRETS BYTES [--corpus text|a]   the output redactor alone, in process (GB/s)
//! bench_peer ssh N [--ssh-host H] [--ssh-identity F] [--ssh-known-hosts F]
//!                               `true` through the SSH executor and transport vs a raw
//!                               `ssh host true` over the same master, interleaved (a loopback
//!                               sshd without --ssh-host)
//! bench_peer report FILE...    the comparison table of collected JSON lines
//! ```
//!
//! `--plain` drops `| tr '\0' a` from the throughput command, leaving `head -c BYTES /dev/zero`.
//! `--secrets N` (any executor benchmark) gives the service a redactor of N token-shaped values
//! that the output does not contain (see `redact.rs`).

mod baselines;
mod container;
mod hosts;
mod http;
mod measure;
mod peer;
mod redact;
mod report;
mod ssh;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_shell::{ShellExecRequest, ShellExecutor, ShellRunResult};
use dsh_subprocess::{Redactor, ServiceOptions, SubprocessService};
use serde_json::{Map, Value, json};

use crate::measure::{js, ms, round};

const MIB: f64 = 1024.0 * 1024.0;

/// Positional arguments and `--flag [value]` pairs, parsed like `bench.mjs` does: a flag
/// followed by nothing or by another flag is a boolean.
struct Args {
    positional: Vec<String>,
    flags: BTreeMap<String, Option<String>>,
}

impl Args {
    fn parse(argv: &[String]) -> Self {
        let mut positional = Vec::new();
        let mut flags = BTreeMap::new();
        let mut i = 0;
        while i < argv.len() {
            if let Some(key) = argv[i].strip_prefix("--") {
                match argv.get(i + 1) {
                    Some(next) if !next.starts_with("--") => {
                        flags.insert(key.to_owned(), Some(next.clone()));
                        i += 1;
                    }
                    _ => {
                        flags.insert(key.to_owned(), None);
                    }
                }
            } else {
                positional.push(argv[i].clone());
            }
            i += 1;
        }
        Self { positional, flags }
    }

    fn flag(&self, name: &str) -> Option<&str> {
        self.flags.get(name).and_then(|v| v.as_deref())
    }

    fn has(&self, name: &str) -> bool {
        self.flags.contains_key(name)
    }

    /// A non-negative integer: positional `index`, else `default`.
    fn int_at(&self, index: usize, name: &str) -> anyhow::Result<u64> {
        int_arg(self.positional.get(index).map(String::as_str), name, None)
    }

    fn int_flag(&self, name: &str, default: u64) -> anyhow::Result<u64> {
        int_arg(self.flag(name), &format!("--{name}"), Some(default))
    }
}

fn int_arg(value: Option<&str>, name: &str, default: Option<u64>) -> anyhow::Result<u64> {
    match (value, default) {
        (None, Some(d)) => Ok(d),
        (None, None) => bail!("missing {name}"),
        (Some(v), _) => v.parse().with_context(|| format!("{name} must be a non-negative integer, got {v}")),
    }
}

fn first_line(path: &str, prefix: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(prefix))?;
    Some(line.split_once(':').map(|(_, v)| v.trim()).unwrap_or(line).to_owned())
}

fn env_info() -> Value {
    json!({
        "rust_peer": env!("CARGO_PKG_VERSION"),
        "platform": format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_owned()).ok(),
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu": first_line("/proc/cpuinfo", "model name"),
        "packages": {"dsh-bash-local": env!("CARGO_PKG_VERSION"), "dsh-subprocess": env!("CARGO_PKG_VERSION")},
    })
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for now.
fn iso_now() -> String {
    dsh_core::time::utc_now()
}

/// The peer's composition: one subprocess service with a private spill directory (removed
/// on exit) and the local executor over it.
struct Composed {
    executor: Arc<LocalBashExecutor>,
    service: Arc<SubprocessService>,
    _spill: tempfile::TempDir,
}

fn compose(config_json: Option<&str>, secrets: u64) -> anyhow::Result<Composed> {
    let config: LocalBashConfig = match config_json {
        Some(text) => serde_json::from_str(text).context("--config")?,
        None => LocalBashConfig::default(),
    };
    let spill = tempfile::Builder::new().prefix("dsh-bench-peer-").tempdir()?;
    let redactor = (secrets > 0).then(|| Redactor::new(redact::secrets(secrets))).transpose()?;
    let service = SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(spill.path().to_path_buf()),
        redactor: redactor.map(Arc::new),
        ..ServiceOptions::default()
    });
    let executor = LocalBashExecutor::new(config, Arc::clone(&service))?;
    Ok(Composed { executor: Arc::new(executor), service, _spill: spill })
}

fn executor_config(config: &LocalBashConfig) -> Value {
    let mut m = Map::new();
    if let Some(cwd) = &config.cwd {
        m.insert("cwd".into(), json!(cwd));
    }
    m.insert("timeoutMs".into(), js(config.timeout_ms));
    m.insert("maxTimeoutMs".into(), js(config.max_timeout_ms));
    m.insert("maxOutputBytes".into(), js(config.max_output_bytes));
    m.insert("maxSpillBytes".into(), js(config.max_spill_bytes));
    m.insert("graceMs".into(), js(config.grace_ms));
    Value::Object(m)
}

async fn run_with(executor: &dyn ShellExecutor, request: ShellExecRequest) -> anyhow::Result<ShellRunResult> {
    let spec = executor.resolve(request)?;
    Ok(executor.run(spec).await?)
}

async fn run(executor: &dyn ShellExecutor, command: &str) -> anyhow::Result<ShellRunResult> {
    run_with(executor, ShellExecRequest { command: command.to_owned(), ..ShellExecRequest::default() }).await
}

/// What a benchmark reports: `params`, `results` and the result `shape`.
struct Outcome {
    params: Value,
    results: Value,
    shape: Value,
}

const USAGE: &str = "usage: bench_peer <latency|throughput|concurrent|background|timeout|overhead|pipe|raw-concurrent|batch|mcp|mcp-http|mcp-load|mcp-soak|confined|proxy|proxy-tls|container|ssh|redact> ARG [--config JSON] [--secrets N] [--warmup W] [--timeout-ms MS] [--command CMD] [--image IMAGE] [--ssh-host H] | bench_peer report FILE...";

fn main() -> std::process::ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = Args::parse(&argv);
    let name = args.positional.first().cloned().unwrap_or_default();
    if name == "redact" {
        return match redact::redact(&args) {
            Ok(line) => {
                println!("{line}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("bench failed: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if name == "report" {
        return match report::print(&args.positional[1..]) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench_peer report: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let known = [
        "latency",
        "throughput",
        "concurrent",
        "background",
        "timeout",
        "overhead",
        "pipe",
        "raw-concurrent",
        "batch",
        "mcp",
        "mcp-http",
        "mcp-load",
        "mcp-soak",
        "confined",
        "proxy",
        "proxy-tls",
        "ssh",
        "container",
    ];
    if !known.contains(&name.as_str()) {
        eprintln!("{USAGE}");
        return std::process::ExitCode::from(2);
    }
    match bench(&name, &args) {
        Ok(line) => {
            println!("{line}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn bench(name: &str, args: &Args) -> anyhow::Result<Value> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let t_compose = Instant::now();
    let composed = compose(args.flag("config"), args.int_flag("secrets", 0)?)?;
    let compose_ms = ms(t_compose.elapsed());
    let composed = Arc::new(composed);
    let in_task = Arc::clone(&composed);
    let (name_owned, positional, flags) = (name.to_owned(), args.positional.clone(), args.flags.clone());
    let outcome = match name {
        // Blocking measurements of other processes: run on this thread.
        "pipe" => baselines::pipe(args),
        "raw-concurrent" => baselines::raw_concurrent(args),
        "batch" => hosts::batch(args),
        "mcp" => hosts::mcp(args),
        "mcp-http" => http::mcp_http(args),
        "mcp-load" => http::mcp_load(args),
        "mcp-soak" => http::mcp_soak(args),
        // The executor's, measured inside a runtime task, where a host makes its calls.
        _ => runtime.block_on(async move {
            tokio::spawn(async move {
                let args = Args { positional, flags };
                let c = in_task.as_ref();
                match name_owned.as_str() {
                    "latency" => peer::latency(c, &args).await,
                    "throughput" => peer::throughput(c, &args).await,
                    "concurrent" => peer::concurrent(c, &args).await,
                    "background" => peer::background(c, &args).await,
                    "timeout" => peer::timeout(c, &args).await,
                    "overhead" => baselines::overhead(c, &args).await,
                    "confined" => baselines::confined(c, &args).await,
                    "proxy" => baselines::proxy(&args).await,
                    "proxy-tls" => baselines::proxy_tls(&args).await,
                    "ssh" => ssh::ssh(c, &args).await,
                    "container" => container::container(c, &args).await,
                    other => bail!("unknown benchmark {other}"),
                }
            })
            .await
            .map_err(|e| anyhow::anyhow!("benchmark task: {e}"))?
        }),
    };
    let config = composed.executor.config().clone();
    let t_dispose = Instant::now();
    runtime.block_on(composed.service.dispose());
    let dispose_ms = ms(t_dispose.elapsed());
    let outcome = outcome?;
    Ok(json!({
        "impl": "rust",
        "bench": name,
        "params": outcome.params,
        "results": outcome.results,
        "shape": outcome.shape,
        "compose_ms": round(compose_ms, 3),
        "executor_config": executor_config(&config),
        "env": env_info(),
        "ts": iso_now(),
        "dispose_ms": round(dispose_ms, 3),
    }))
}
