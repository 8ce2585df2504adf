//! The `dsh-bash` command as a host drives it: `batch` lines and an MCP client over stdio.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};
use serde_json::{Map, Value, json};

use crate::measure::{ms, round, settle, settle_flag, stats, with_settle};
use crate::{Args, Outcome};

pub(crate) fn dsh_bash_path(args: &Args) -> anyhow::Result<PathBuf> {
    if let Some(bin) = args.flag("bin") {
        return Ok(PathBuf::from(bin));
    }
    // target/<profile>/bench_peer -> target/<profile>/dsh-bash
    let me = std::env::current_exe()?;
    let profile = me.parent().context("no profile directory")?;
    Ok(profile.join("dsh-bash"))
}

/// A `dsh-bash` child speaking lines on stdin/stdout, with a private `DSH_HOME` and cwd.
struct LineChild {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    _home: tempfile::TempDir,
}

impl LineChild {
    fn spawn(bin: &Path, subcommand: &str) -> anyhow::Result<Self> {
        let home = tempfile::Builder::new().prefix("dsh-bench-home-").tempdir()?;
        let mut child = Command::new(bin)
            .arg(subcommand)
            .env("DSH_HOME", home.path())
            .current_dir(home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        let stdin = child.stdin.take().context("stdin pipe")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout pipe")?);
        Ok(Self { child, stdin: Some(stdin), stdout, _home: home })
    }

    fn send(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        stdin.write_all(format!("{line}\n").as_bytes())?;
        Ok(())
    }

    fn receive(&mut self) -> anyhow::Result<Value> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("the server closed its stdout");
        }
        Ok(serde_json::from_str(&line)?)
    }

    /// Closes stdin and waits for the exit; returns how long the teardown took.
    fn finish(mut self) -> anyhow::Result<f64> {
        let t0 = Instant::now();
        drop(self.stdin.take());
        let status = self.child.wait()?;
        if !status.success() {
            bail!("dsh-bash exited with {status}");
        }
        Ok(ms(t0.elapsed()))
    }
}

const BATCH_LINE: &str = r#"{"tool":"bash","args":{"command":"true","description":"t"}}"#;

fn check_batch(reply: &Value) -> anyhow::Result<()> {
    if reply["isError"] != json!(false) {
        bail!("batch reply is an error: {reply}");
    }
    Ok(())
}

pub(crate) fn batch(args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let warmup = args.int_flag("warmup", 20)?;
    let bin = dsh_bash_path(args)?;
    let pause = settle_flag(args)?;
    let t_spawn = Instant::now();
    let mut child = LineChild::spawn(&bin, "batch")?;
    child.send(BATCH_LINE)?;
    check_batch(&child.receive()?)?;
    let cold_first = ms(t_spawn.elapsed());
    for _ in 0..warmup {
        child.send(BATCH_LINE)?;
        check_batch(&child.receive()?)?;
    }
    // Round trips: one line written, its response read, then the next; each after a raw
    // `bash -c true` spawn, the baseline measured in the same moments.
    let mut round_trips = Vec::with_capacity(n as usize);
    let mut raw = Vec::with_capacity(n as usize);
    for _ in 0..n {
        settle(pause);
        let t = Instant::now();
        crate::baselines::raw_spawn(false)?;
        raw.push(ms(t.elapsed()));
        settle(pause);
        let t = Instant::now();
        child.send(BATCH_LINE)?;
        check_batch(&child.receive()?)?;
        round_trips.push(ms(t.elapsed()));
    }
    // Pipelined: N lines fed at once, wall time until the N-th response, divided by N.
    let mut stdin = child.stdin.take().context("stdin")?;
    let t0 = Instant::now();
    let writer = std::thread::spawn(move || -> std::io::Result<std::process::ChildStdin> {
        let line = format!("{BATCH_LINE}\n");
        for _ in 0..n {
            stdin.write_all(line.as_bytes())?;
        }
        Ok(stdin)
    });
    for _ in 0..n {
        check_batch(&child.receive()?)?;
    }
    let pipelined = ms(t0.elapsed());
    child.stdin = Some(writer.join().map_err(|_| anyhow::anyhow!("writer panicked"))??);
    let teardown = child.finish()?;
    let mut results = Map::new();
    results.insert("pipelined_wall_ms".into(), round(pipelined, 3));
    results.insert("pipelined_per_line_ms".into(), round(pipelined / n.max(1) as f64, 4));
    results.insert("lines_per_s".into(), round(n as f64 / (pipelined / 1000.0), 1));
    results.insert("round_trip".into(), Value::Object(stats(&round_trips)));
    results.insert("raw_spawn".into(), Value::Object(stats(&raw)));
    results.insert("round_trip_vs_raw_p50".into(), round(p50(&round_trips) / p50(&raw), 3));
    results.insert("cold_first_ms".into(), round(cold_first, 3));
    results.insert("teardown_ms".into(), round(teardown, 3));
    Ok(Outcome {
        params: with_settle(json!({"n": n, "warmup": warmup, "line": BATCH_LINE, "bin": bin}), pause),
        results: Value::Object(results),
        shape: Value::Null,
    })
}

/// The median of `samples`.
fn p50(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    crate::measure::pct(&sorted, 50.0)
}

/// Reads messages until the response with `id` (skipping notifications).
fn mcp_response(child: &mut LineChild, id: u64) -> anyhow::Result<Value> {
    loop {
        let message = child.receive()?;
        if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
            if let Some(error) = message.get("error") {
                bail!("JSON-RPC error for {id}: {error}");
            }
            return Ok(message);
        }
    }
}

pub(crate) fn mcp(args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let warmup = args.int_flag("warmup", 20)?;
    let bin = dsh_bash_path(args)?;
    let pause = settle_flag(args)?;
    let t_spawn = Instant::now();
    let mut child = LineChild::spawn(&bin, "mcp")?;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench_peer", "version": "0"}}});
    child.send(&init.to_string())?;
    let reply = mcp_response(&mut child, 0)?;
    let initialize_ms = ms(t_spawn.elapsed());
    child.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
    let mut samples = Vec::with_capacity(n as usize);
    let mut raw = Vec::with_capacity(n as usize);
    for i in 0..warmup + n {
        let id = i + 1;
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": "true", "description": "t"}}});
        let line = call.to_string();
        // The baseline, a raw `bash -c true` spawn, measured in the same moments.
        settle(pause);
        let t = Instant::now();
        crate::baselines::raw_spawn(false)?;
        if i >= warmup {
            raw.push(ms(t.elapsed()));
        }
        settle(pause);
        let t = Instant::now();
        child.send(&line)?;
        let response = mcp_response(&mut child, id)?;
        let took = ms(t.elapsed());
        if response["result"]["isError"] != json!(false) {
            bail!("tools/call failed: {response}");
        }
        if i >= warmup {
            samples.push(took);
        }
    }
    let teardown = child.finish()?;
    let mut results = stats(&samples);
    results.insert("calls_per_s".into(), round(1000.0 * n as f64 / samples.iter().sum::<f64>(), 1));
    results.insert("raw_spawn".into(), Value::Object(stats(&raw)));
    results.insert("vs_raw_p50".into(), round(p50(&samples) / p50(&raw), 3));
    results.insert("initialize_ms".into(), round(initialize_ms, 3));
    results.insert("teardown_ms".into(), round(teardown, 3));
    Ok(Outcome {
        params: with_settle(
            json!({"n": n, "warmup": warmup, "tool": "bash", "arguments": {"command": "true", "description": "t"},
            "protocolVersion": reply["result"]["protocolVersion"], "bin": bin}),
            pause,
        ),
        results: Value::Object(results),
        shape: Value::Null,
    })
}

/// `dsh-bash mcp` on stdio with one initialized session (the stdio side of `mcp-http`).
pub(crate) struct McpStdio(LineChild);

impl McpStdio {
    pub(crate) fn start(bin: &Path) -> anyhow::Result<Self> {
        let mut child = LineChild::spawn(bin, "mcp")?;
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench_peer", "version": "0"}}});
        child.send(&init.to_string())?;
        mcp_response(&mut child, 0)?;
        child.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
        Ok(Self(child))
    }

    /// One `tools/call bash true` round trip, in milliseconds.
    pub(crate) fn call_true(&mut self, id: u64) -> anyhow::Result<f64> {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": "true", "description": "t"}}});
        let line = call.to_string();
        let t = Instant::now();
        self.0.send(&line)?;
        let response = mcp_response(&mut self.0, id)?;
        let took = ms(t.elapsed());
        if response["result"]["isError"] != json!(false) {
            bail!("tools/call failed: {response}");
        }
        Ok(took)
    }

    pub(crate) fn finish(self) -> anyhow::Result<f64> {
        self.0.finish()
    }
}
