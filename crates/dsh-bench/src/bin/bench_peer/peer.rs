//! The benchmarks of `scripts/reference/bench.mjs` (the reference executor's driver), with its
//! parameters and result keys.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use dsh_shell::{ShellExecRequest, ShellExecutor, ShellProcess};
use serde_json::{Map, Value, json};

use crate::measure::{RssSampler, cpu_seconds, js, max_rss_mib, ms, round, rss_bytes, shape_of, stats};
use crate::{Args, Composed, MIB, Outcome, run, run_with};

pub(crate) async fn latency(c: &Composed, args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let warmup = args.int_flag("warmup", 5)?;
    let (mut first, mut shape) = (None, Value::Null);
    for i in 0..warmup {
        let t0 = Instant::now();
        let r = run(c.executor.as_ref(), "true").await?;
        if i == 0 {
            first = Some(ms(t0.elapsed()));
            shape = shape_of(&serde_json::to_value(&r)?);
        }
        if r.exit_code != Some(0) {
            bail!("warmup exit {:?}", r.exit_code);
        }
    }
    let mut samples = Vec::with_capacity(n as usize);
    let mut failures = 0;
    let wall0 = Instant::now();
    for _ in 0..n {
        let t0 = Instant::now();
        let r = run(c.executor.as_ref(), "true").await?;
        samples.push(ms(t0.elapsed()));
        if r.exit_code != Some(0) {
            failures += 1;
        }
        if shape.is_null() {
            shape = shape_of(&serde_json::to_value(&r)?);
        }
    }
    let wall = ms(wall0.elapsed());
    let mut results = stats(&samples);
    results.insert("total_wall_ms".into(), round(wall, 3));
    results.insert("calls_per_s".into(), round(n as f64 / (wall / 1000.0), 1));
    results.insert("cold_first_ms".into(), first.map_or(Value::Null, |f| round(f, 3)));
    results.insert("failures".into(), json!(failures));
    Ok(Outcome {
        params: json!({"n": n, "warmup": warmup, "command": "true"}),
        results: Value::Object(results),
        shape,
    })
}

pub(crate) fn throughput_command(bytes: u64, plain: bool) -> String {
    if plain {
        format!("head -c {bytes} /dev/zero")
    } else {
        format!("head -c {bytes} /dev/zero | tr '\\0' a")
    }
}

pub(crate) async fn throughput(c: &Composed, args: &Args) -> anyhow::Result<Outcome> {
    let bytes = args.int_at(1, "BYTES")?;
    let plain = args.has("plain");
    let command = throughput_command(bytes, plain);
    let rss_before = rss_bytes();
    let sampler = RssSampler::start(Duration::from_millis(5));
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let r = run(c.executor.as_ref(), &command).await?;
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu1 = cpu_seconds();
    let (peak, samples) = sampler.stop();
    let mut spill_bytes = None;
    if let Some(path) = &r.stdout.spill_path {
        spill_bytes = std::fs::metadata(path).ok().map(|m| m.len());
    }
    for path in [&r.stdout.spill_path, &r.stderr.spill_path].into_iter().flatten() {
        let _ = std::fs::remove_file(path);
    }
    let tail = &r.stdout.text;
    let fill = if plain { '\0' } else { 'a' };
    let config = c.executor.config();
    let mut params = json!({
        "bytes": bytes, "command": command,
        "stdoutMaxBytes": js(config.max_output_bytes), "maxSpillBytes": js(config.max_spill_bytes),
    });
    // Only a redacting run carries the key, so the plain rows keep their parameters.
    let secrets = args.int_flag("secrets", 0)?;
    if secrets > 0 {
        params["secrets"] = json!(secrets);
    }
    Ok(Outcome {
        params,
        results: json!({
            "wall_s": round(wall_s, 4),
            "mb_per_s": round(bytes as f64 / 1e6 / wall_s, 1),
            "mib_per_s": round(bytes as f64 / MIB / wall_s, 1),
            "exit_code": r.exit_code,
            "truncated": r.stdout.truncated,
            "retained_tail_chars": tail.chars().count(),
            "tail_all_a": tail.chars().all(|ch| ch == fill),
            "spill_path": r.stdout.spill_path,
            "spill_file_bytes": spill_bytes,
            "spill_complete": spill_bytes.map(|b| b == bytes),
            "rss_before_mib": round(rss_before as f64 / MIB, 1),
            "rss_peak_sampled_mib": round(peak as f64 / MIB, 1),
            "rss_samples": samples,
            "max_rss_mib": round(max_rss_mib(), 1),
            "cpu_user_s": round(cpu1.0 - cpu0.0, 3),
            "cpu_sys_s": round(cpu1.1 - cpu0.1, 3),
        }),
        shape: shape_of(&serde_json::to_value(&r)?),
    })
}

pub(crate) async fn concurrent(c: &Composed, args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let command = "sleep 0.5; echo done";
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let executor = Arc::clone(&c.executor);
        set.spawn(async move {
            let s = Instant::now();
            let r = run(executor.as_ref(), command).await;
            (i, ms(s.elapsed()), r)
        });
    }
    let mut per = vec![0.0; n as usize];
    let mut results = Vec::with_capacity(n as usize);
    while let Some(joined) = set.join_next().await {
        let (i, took, r) = joined?;
        per[i as usize] = took;
        results.push(r?);
    }
    let wall = ms(t0.elapsed());
    let ok = results.iter().filter(|r| r.exit_code == Some(0) && r.stdout.text == "done\n").count();
    let shape = match results.first() {
        Some(r) => shape_of(&serde_json::to_value(r)?),
        None => Value::Null,
    };
    Ok(Outcome {
        params: json!({"n": n, "command": command}),
        results: json!({
            "wall_ms": round(wall, 3),
            "overhead_ms": round(wall - 500.0, 3),
            "all_ok": ok as u64 == n,
            "ok": ok,
            "per_call": Value::Object(stats(&per)),
        }),
        shape,
    })
}

fn process_shape(p: &dyn ShellProcess) -> Value {
    json!({
        "done": "future",
        "exitCode": if p.exit_code().is_some() { "number" } else { "null" },
        "kill": "function",
        "readOutput": "function",
        "signal": if p.signal().is_some() { "string" } else { "null" },
        "status": "string",
    })
}

pub(crate) async fn background(c: &Composed, args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let command = "for i in $(seq 1 100); do echo line $i; done";
    let expected: String = (1..=100).map(|i| format!("line {i}\n")).collect();
    let t0 = Instant::now();
    let mut procs = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let request = ShellExecRequest { command: command.to_owned(), ..ShellExecRequest::default() };
        let spec = c.executor.resolve(request)?;
        procs.push(c.executor.start(spec)?);
    }
    let t_started = Instant::now();
    let shape_start = procs.first().map_or(Value::Null, |p| process_shape(p.as_ref()));
    for p in &procs {
        p.done().await;
    }
    let t_done = Instant::now();
    let shape_done = procs.first().map_or(Value::Null, |p| process_shape(p.as_ref()));
    let reads: Vec<_> = procs.iter().map(|p| p.read_output()).collect();
    let t_read = Instant::now();
    let counts: Vec<usize> =
        reads.iter().map(|r| r.delta.split('\n').filter(|l| !l.is_empty()).count()).collect();
    let exact = reads.iter().filter(|r| r.delta == expected).count();
    for r in &reads {
        for path in [&r.stdout_spill_path, &r.stderr_spill_path].into_iter().flatten() {
            let _ = std::fs::remove_file(path);
        }
    }
    let mut statuses = BTreeMap::new();
    for p in &procs {
        *statuses.entry(format!("{:?}", p.status()).to_lowercase()).or_insert(0u64) += 1;
    }
    let second_read_empty = procs.iter().all(|p| p.read_output().delta.is_empty());
    let read_shape = reads.first().map_or(Value::Null, |r| {
        let mut m = Map::new();
        m.insert("delta".into(), json!("string"));
        m.insert("lossy".into(), json!("boolean"));
        if r.stderr_spill_path.is_some() {
            m.insert("stderrSpillPath".into(), json!("string"));
        }
        if r.stdout_spill_path.is_some() {
            m.insert("stdoutSpillPath".into(), json!("string"));
        }
        Value::Object(m)
    });
    Ok(Outcome {
        params: json!({"n": n, "command": command}),
        results: json!({
            "wall_ms": round(ms(t_read - t0), 3),
            "start_all_ms": round(ms(t_started - t0), 3),
            "all_done_ms": round(ms(t_done - t0), 3),
            "read_all_ms": round(ms(t_read - t_done), 3),
            "all_have_100_lines": counts.iter().all(|&c| c == 100),
            "all_exact": exact as u64 == n,
            "min_lines": counts.iter().min(),
            "max_lines": counts.iter().max(),
            "any_lossy": reads.iter().any(|r| r.lossy),
            "statuses": statuses,
            "exit_codes_zero": procs.iter().all(|p| p.exit_code() == Some(0)),
            "second_read_empty": second_read_empty,
        }),
        shape: json!({"process_at_start": shape_start, "process_after_done": shape_done, "read": read_shape}),
    })
}

pub(crate) async fn timeout(c: &Composed, args: &Args) -> anyhow::Result<Outcome> {
    let timeout_ms = args.int_flag("timeout-ms", 500)?;
    let command = args.flag("command").unwrap_or("sleep 30").to_owned();
    let t0 = Instant::now();
    let request = ShellExecRequest {
        command: command.clone(),
        timeout_ms: Some(timeout_ms as f64),
        ..ShellExecRequest::default()
    };
    let r = run_with(c.executor.as_ref(), request).await?;
    let wall = ms(t0.elapsed());
    Ok(Outcome {
        params: json!({"command": command, "timeoutMs": timeout_ms, "graceMs": js(c.executor.config().grace_ms)}),
        results: json!({
            "wall_ms": round(wall, 3),
            "overshoot_ms": round(wall - timeout_ms as f64, 3),
            "timedOut": r.timed_out,
            "aborted": r.aborted,
            "signal": r.signal,
            "exitCode": r.exit_code,
            "timeoutMs": js(r.timeout.millis()),
            "stdout_text": r.stdout.text,
            "stderr_text": r.stderr.text,
        }),
        shape: shape_of(&serde_json::to_value(&r)?),
    })
}
