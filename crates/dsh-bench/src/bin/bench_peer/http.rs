//! `dsh-bash mcp --http` as an HTTP client drives it: the keep-alive round trip next to the
//! stdio one (`mcp-http`), and the server under many sessions at once (`mcp-load`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use dsh_test_support::http::{Conn, Reply, start_line_authority};
use serde_json::{Map, Value, json};

use crate::hosts::{McpStdio, dsh_bash_path};
use crate::measure::{ms, round, stats};
use crate::{Args, Outcome};

const TOKEN: &str = "bench-peer-token";

/// `dsh-bash mcp --http 127.0.0.1:0` with a private `DSH_HOME`; killed on drop.
pub(crate) struct HttpServer {
    child: Child,
    pub authority: String,
    _home: tempfile::TempDir,
}

impl HttpServer {
    pub(crate) fn spawn(bin: &Path, extra: &[&str]) -> anyhow::Result<Self> {
        Self::spawn_with_env(bin, extra, &[])
    }

    /// [`HttpServer::spawn`] with `env` set for the server.
    pub(crate) fn spawn_with_env(bin: &Path, extra: &[&str], env: &[(&str, &Path)]) -> anyhow::Result<Self> {
        let home = tempfile::Builder::new().prefix("dsh-bench-home-").tempdir()?;
        let mut child = Command::new(bin)
            .args(["mcp", "--http", "0"])
            .args(extra)
            .envs(env.iter().map(|(k, v)| (*k, *v)))
            .env("DSH_HOME", home.path())
            .env("DSH_MCP_TOKEN", TOKEN)
            .current_dir(home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        let mut stderr = BufReader::new(child.stderr.take().context("stderr")?);
        let mut line = String::new();
        stderr.read_line(&mut line)?;
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::stderr()));
        let authority = start_line_authority(&line).context("no start line")?;
        Ok(Self { child, authority, _home: home })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        // SAFETY: SIGTERM to the child this spawned and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// A keep-alive connection to the server (`TCP_NODELAY`, each request written in one piece).
pub(crate) fn open(authority: &str) -> anyhow::Result<Conn> {
    Ok(Conn::open(authority, TOKEN, Duration::from_secs(120))?)
}

/// The response to request `id` in `reply`.
fn response(reply: &Reply, id: u64) -> anyhow::Result<Value> {
    reply.response(id).with_context(|| format!("no response to {id} (HTTP {}): {}", reply.status, reply.body))
}

/// One `tools/call`; returns its response.
pub(crate) fn call(
    conn: &mut Conn,
    session: &str,
    id: u64,
    tool: &str,
    arguments: Value,
) -> anyhow::Result<Value> {
    response(&conn.call(session, id, tool, arguments)?, id)
}

fn bash_true() -> Value {
    json!({"command": "true", "description": "t"})
}

/// `bench_peer mcp-http N [--bin DSH_BASH] [--warmup W]`: a `tools/call bash true` round trip
/// over a keep-alive HTTP connection and over stdio, alternating call by call in one run.
pub(crate) fn mcp_http(args: &Args) -> anyhow::Result<Outcome> {
    let n = args.int_at(1, "N")?;
    let warmup = args.int_flag("warmup", 20)?;
    let bin = dsh_bash_path(args)?;
    let server = HttpServer::spawn(&bin, &[])?;
    let mut conn = open(&server.authority)?;
    let session = conn.open_session("bench_peer")?;
    let mut stdio = McpStdio::start(&bin)?;
    let (mut http_samples, mut stdio_samples) = (Vec::new(), Vec::new());
    let mut json_answers = 0u64;
    for i in 0..warmup + n {
        let id = i + 1;
        let t = Instant::now();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": bash_true()}});
        let reply = conn.exchange("POST", Some(&session), Some(&body))?;
        let took = ms(t.elapsed());
        let response = response(&reply, id)?;
        if response["result"]["isError"] != json!(false) {
            bail!("HTTP tools/call failed: {response}");
        }
        let stdio_took = stdio.call_true(id)?;
        if i >= warmup {
            json_answers += u64::from(reply.header("content-type") == Some("application/json"));
            http_samples.push(took);
            stdio_samples.push(stdio_took);
        }
    }
    stdio.finish()?;
    let _ = conn.delete(&session);
    let http = stats(&http_samples);
    let over_stdio = stats(&stdio_samples);
    let ratio = match (http["p50_ms"].as_f64(), over_stdio["p50_ms"].as_f64()) {
        (Some(a), Some(b)) if b > 0.0 => a / b,
        _ => f64::NAN,
    };
    let mut results = Map::new();
    results.insert("http".into(), Value::Object(http));
    results.insert("stdio".into(), Value::Object(over_stdio));
    results.insert("http_over_stdio_p50".into(), round(ratio, 3));
    results.insert("json_answers".into(), json!(json_answers));
    Ok(Outcome {
        params: json!({"n": n, "warmup": warmup, "tool": "bash", "arguments": bash_true(), "bin": bin,
            "client": "keep-alive HTTP/1.1, one connection, Accept: application/json, text/event-stream"}),
        results: Value::Object(results),
        shape: Value::Null,
    })
}

/// Resident set size (KiB) and open descriptors of process `pid`.
/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `RssAnon`), 0 when unreadable.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn footprint(pid: u32) -> (u64, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).unwrap_or(0);
    (status_kib(pid, "VmRSS"), fds)
}

/// RSS, its anonymous part, descriptors and threads. The anonymous part is the memory the
/// server holds: the rest of RSS is file-backed (the binary's and libraries' pages, paged in
/// the first time a code path runs, shared and reclaimable), so it grows once with the code
/// a load exercises and is no measure of a leak.
fn footprint_json(pid: u32) -> Value {
    let (rss, fds) = footprint(pid);
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0);
    json!({"rss_kib": rss, "anon_kib": status_kib(pid, "RssAnon"), "fds": fds, "threads": threads})
}

/// What one session of the load saw.
#[derive(Default)]
struct SessionTally {
    latencies: Vec<f64>,
    lost: u64,
    wrong: u64,
    notices: u64,
    foreign_notices: u64,
    jobs_read: u64,
}

/// Notices attached to a result (`_meta["dsh/notices"]`), as text.
fn notices(response: &Value) -> Vec<String> {
    let Some(list) = response["result"]["_meta"]["dsh/notices"].as_array() else { return Vec::new() };
    list.iter()
        .map(|n| n.get("text").and_then(Value::as_str).map_or_else(|| n.to_string(), str::to_owned))
        .collect()
}

/// One session of the load: `calls` foreground `echo`s and `jobs` background jobs read to
/// their end, every answer checked; `tag` names the session in its output and its jobs.
fn load_session(authority: &str, tag: &str, calls: u64, jobs: u64) -> anyhow::Result<SessionTally> {
    let mut tally = SessionTally::default();
    let mut conn = open(authority)?;
    let session = conn.open_session("bench_peer")?;
    let mut id = 0;
    let mut job_ids = Vec::new();
    let tally_notices = |tally: &mut SessionTally, response: &Value| {
        for notice in notices(response) {
            tally.notices += 1;
            if !notice.contains(&format!("echo {tag}-job")) {
                tally.foreign_notices += 1;
            }
        }
    };
    for k in 0..jobs {
        id += 1;
        let command = format!("sleep 0.2; echo {tag}-job{k}");
        let args =
            json!({"command": command, "description": format!("{tag} job {k}"), "run_in_background": true});
        let response = call(&mut conn, &session, id, "bash", args)?;
        let text = response["result"]["content"][0]["text"].as_str().unwrap_or("").to_owned();
        match text.strip_prefix("started background job ") {
            Some(job) => job_ids.push((job.to_owned(), format!("{tag}-job{k}"))),
            None => bail!("{tag}: no job started: {response}"),
        }
    }
    for i in 0..calls {
        id += 1;
        let expected = format!("{tag}-{i}\n");
        let args = json!({"command": format!("echo {tag}-{i}"), "description": format!("{tag} call")});
        let t = Instant::now();
        let response = call(&mut conn, &session, id, "bash", args);
        tally.latencies.push(ms(t.elapsed()));
        match response {
            Ok(response) => {
                if response["result"]["content"][0]["text"].as_str() != Some(expected.as_str()) {
                    tally.wrong += 1;
                }
                tally_notices(&mut tally, &response);
            }
            Err(_) => tally.lost += 1,
        }
    }
    for (job, output) in job_ids {
        id += 1;
        let response = call(&mut conn, &session, id, "job_output", json!({"job_id": job, "wait": true}))?;
        let text = response["result"]["content"][0]["text"].as_str().unwrap_or("");
        if text.contains(&output) && text.ends_with("[status: completed, exit code: 0]") {
            tally.jobs_read += 1;
        } else {
            tally.wrong += 1;
        }
        tally_notices(&mut tally, &response);
    }
    let deleted = conn.delete(&session)?;
    if !matches!(deleted, 200 | 204) {
        bail!("{tag}: DELETE answered {deleted}");
    }
    Ok(tally)
}

/// Samples the server's footprint until stopped; returns the peaks.
fn sample_peak(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, u64)> {
    let (rss_peak, fd_peak) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let (rss, fds) = footprint(pid);
            rss_peak.fetch_max(rss, Ordering::Relaxed);
            fd_peak.fetch_max(fds, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(20));
        }
        (rss_peak.load(Ordering::Relaxed), fd_peak.load(Ordering::Relaxed))
    })
}

/// Lets closed sessions' last tasks end before a footprint is taken.
fn settle() {
    std::thread::sleep(Duration::from_millis(500));
}

/// `sessions` sessions at once, each `calls` calls and `jobs` jobs: what they saw, and how
/// many sessions failed.
fn concurrent_round(
    authority: &str,
    round: &str,
    sessions: u64,
    calls: u64,
    jobs: u64,
) -> anyhow::Result<(SessionTally, u64)> {
    let workers: Vec<_> = (0..sessions)
        .map(|s| {
            let (authority, name) = (authority.to_owned(), format!("{round}s{s}"));
            std::thread::spawn(move || load_session(&authority, &name, calls, jobs))
        })
        .collect();
    let mut all = SessionTally::default();
    let mut failed_sessions = 0u64;
    for worker in workers {
        match worker.join().map_err(|_| anyhow::anyhow!("a session thread panicked"))? {
            Ok(t) => {
                all.latencies.extend(t.latencies);
                all.lost += t.lost;
                all.wrong += t.wrong;
                all.notices += t.notices;
                all.foreign_notices += t.foreign_notices;
                all.jobs_read += t.jobs_read;
            }
            Err(error) => {
                eprintln!("mcp-load: a session failed: {error:#}");
                failed_sessions += 1;
            }
        }
    }
    Ok((all, failed_sessions))
}

/// `bench_peer mcp-load [--sessions S] [--calls C] [--jobs J] [--churn K] [--rounds R] [--bin DSH_BASH]`:
/// S concurrent HTTP sessions, each C foreground calls and J background jobs read to their
/// end, every answer checked (lost, wrong, notices of another session); per-call latency vs
/// the same calls in one session alone; the server's RSS and descriptors before, at the peak
/// and after; then K sessions created and deleted in a row.
pub(crate) fn mcp_load(args: &Args) -> anyhow::Result<Outcome> {
    let sessions = args.int_flag("sessions", 100)?;
    let calls = args.int_flag("calls", 50)?;
    let jobs = args.int_flag("jobs", 2)?;
    let churn = args.int_flag("churn", 1000)?;
    let rounds = args.int_flag("rounds", 2)?;
    let bin = dsh_bash_path(args)?;
    let cap = (sessions + 8).to_string();
    let server = HttpServer::spawn(&bin, &["--max-sessions", &cap, "--max-connections", &cap])?;
    let pid = server.pid();
    let authority = server.authority.clone();
    // Warm up: pools and caches fill first.
    load_session(&authority, "warm", 10, 1)?;
    settle();
    let before = footprint_json(pid);

    let alone = load_session(&authority, "alone", calls, jobs)?;
    settle();

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_peak(pid, Arc::clone(&stop));
    let t0 = Instant::now();
    let (all, failed_sessions) = concurrent_round(&authority, "", sessions, calls, jobs)?;
    let wall = ms(t0.elapsed());
    stop.store(true, Ordering::Relaxed);
    let (rss_peak, fd_peak) = sampler.join().map_err(|_| anyhow::anyhow!("sampler panicked"))?;
    settle();
    let after = footprint_json(pid);
    // The runtime's idle blocking threads (and their stacks) go after 10 s.
    std::thread::sleep(Duration::from_secs(11));
    let after_idle = footprint_json(pid);

    let churn_before = footprint_json(pid);
    let t_churn = Instant::now();
    let mut conn = open(&authority)?;
    for _ in 0..churn {
        let session = conn.open_session("bench_peer")?;
        let status = conn.delete(&session)?;
        if !matches!(status, 200 | 204) {
            bail!("churn: DELETE answered {status}");
        }
    }
    let churn_ms = ms(t_churn.elapsed());
    settle();
    let churn_after = footprint_json(pid);

    // The same load again, by sessions of other names: memory that grew with the first round's peak and is kept for
    // reuse (allocator pools, the runtime's slabs) does not grow again; a leak would.
    let mut again = SessionTally::default();
    let (mut again_failed, mut again_after) = (0, Vec::new());
    for round in 0..rounds {
        let (tally, failed) = concurrent_round(&authority, &format!("r{round}-"), sessions, calls, jobs)?;
        again.latencies.extend(tally.latencies);
        again.lost += tally.lost;
        again.wrong += tally.wrong;
        again.foreign_notices += tally.foreign_notices;
        again_failed += failed;
        settle();
        again_after.push(footprint_json(pid));
    }

    let mut results = Map::new();
    results.insert("one_session".into(), Value::Object(stats(&alone.latencies)));
    results.insert("concurrent".into(), Value::Object(stats(&all.latencies)));
    results.insert("concurrent_wall_ms".into(), round(wall, 1));
    results.insert(
        "checks".into(),
        json!({"calls": all.latencies.len(), "lost_or_failed": all.lost, "wrong_or_duplicated": all.wrong,
            "jobs_read": all.jobs_read, "notices": all.notices, "notices_of_another_session": all.foreign_notices,
            "failed_sessions": failed_sessions}),
    );
    results.insert(
        "server".into(),
        json!({"before": before, "peak": {"rss_kib": rss_peak, "fds": fd_peak}, "after": after,
            "after_11s": after_idle}),
    );
    results.insert(
        "churn".into(),
        json!({"sessions": churn, "wall_ms": round(churn_ms, 1), "before": churn_before, "after": churn_after}),
    );
    results.insert(
        "more_rounds".into(),
        json!({"calls": again.latencies.len(), "lost_or_failed": again.lost, "wrong_or_duplicated": again.wrong,
            "notices_of_another_session": again.foreign_notices, "failed_sessions": again_failed,
            "after_each": again_after}),
    );
    Ok(Outcome {
        params: json!({"sessions": sessions, "calls": calls, "jobs": jobs, "churn": churn, "rounds": rounds, "bin": bin}),
        results: Value::Object(results),
        shape: Value::Null,
    })
}

/// Bytes of the regular files below `dir` (not following symlinks).
fn disk_use(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => disk_use(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// The least-squares slope of `(x, y)` points (y per x); 0 with fewer than two.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let num: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    if den == 0.0 { 0.0 } else { num / den }
}

/// One soak session: a foreground `echo`, a call whose output spills (300 kB), a background
/// job read to its end, then `DELETE`. Returns (calls answered right, calls lost or wrong).
fn soak_session(authority: &str, tag: &str) -> anyhow::Result<(u64, u64)> {
    let mut conn = open(authority)?;
    let session = conn.open_session("bench_peer")?;
    let (mut ok, mut bad) = (0u64, 0u64);
    // A wrong answer is named on stderr, with what came back, so a soak's count can be read.
    let mut check = |what: &str, good: bool, got: &dyn std::fmt::Debug| {
        if good {
            ok += 1;
        } else {
            bad += 1;
            let got = format!("{got:?}");
            eprintln!("mcp-soak: {tag}: wrong {what}: {}", got.chars().take(600).collect::<String>());
        }
    };
    let echo =
        call(&mut conn, &session, 1, "bash", json!({"command": format!("echo {tag}"), "description": "d"}));
    let good =
        echo.as_ref().is_ok_and(|r| r["result"]["content"][0]["text"].as_str() == Some(&format!("{tag}\n")));
    check("echo", good, &echo);
    let spill = json!({"command": "head -c 300000 /dev/zero | tr '\\0' s; echo", "description": "d"});
    let spilled = call(&mut conn, &session, 2, "bash", spill);
    let good =
        spilled.as_ref().is_ok_and(|r| r["result"]["structuredContent"]["stdout"]["spillPath"].is_string());
    check(
        "spill",
        good,
        &spilled.as_ref().map(|r| r["result"]["structuredContent"]["stdout"]["spillPath"].clone()),
    );
    let job = json!({"command": format!("echo {tag}-job"), "description": "d", "run_in_background": true});
    let started = call(&mut conn, &session, 3, "bash", job)?;
    let id = started["result"]["structuredContent"]["jobId"].as_str().unwrap_or_default().to_owned();
    let read = call(&mut conn, &session, 4, "job_output", json!({"job_id": id, "wait": true}));
    let good = read.as_ref().is_ok_and(|r| {
        r["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains(&format!("{tag}-job")))
    });
    check("job read", good, &read);
    let deleted = conn.delete(&session)?;
    check("DELETE", matches!(deleted, 200 | 204), &deleted);
    Ok((ok, bad))
}

/// `bench_peer mcp-soak [--seconds S] [--sessions N] [--every T] [--bin DSH_BASH]`: N
/// workers run soak sessions (an `echo`, a spilling call, a background job read to its end,
/// `DELETE`) back to back for S seconds (default 600) against one `mcp --http` server whose
/// temporary directory is private; every T seconds (default 10) the server's RSS (and its
/// anonymous part) and the bytes of its spill files are sampled. Reports the memory slope
/// (least squares over the samples after the first tenth, KiB per minute) and the spill
/// directory's disk use (peak and at the end).
pub(crate) fn mcp_soak(args: &Args) -> anyhow::Result<Outcome> {
    let seconds = args.int_flag("seconds", 600)?;
    let sessions = args.int_flag("sessions", 8)?;
    let every = args.int_flag("every", 10)?.max(1);
    let bin = dsh_bash_path(args)?;
    let tmp = tempfile::Builder::new().prefix("dsh-bench-soak-tmp-").tempdir()?;
    let server = HttpServer::spawn_with_env(&bin, &[], &[("TMPDIR", tmp.path())])?;
    let pid = server.pid();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, bad, failed) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let workers: Vec<_> = (0..sessions)
        .map(|w| {
            let (authority, stop) = (server.authority.clone(), Arc::clone(&stop));
            let (ok, bad, failed) = (Arc::clone(&ok), Arc::clone(&bad), Arc::clone(&failed));
            std::thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    match soak_session(&authority, &format!("w{w}r{round}")) {
                        Ok((good, wrong)) => {
                            ok.fetch_add(good, Ordering::Relaxed);
                            bad.fetch_add(wrong, Ordering::Relaxed);
                        }
                        Err(error) => {
                            eprintln!("mcp-soak: a session failed: {error:#}");
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    let mut samples = Vec::new();
    while t0.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(
            Duration::from_secs(every).min(Duration::from_secs(seconds).saturating_sub(t0.elapsed())),
        );
        let at = t0.elapsed().as_secs_f64();
        samples.push(json!({"s": round(at, 1), "rss_kib": status_kib(pid, "VmRSS"),
            "anon_kib": status_kib(pid, "RssAnon"), "spill_bytes": disk_use(tmp.path())}));
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().map_err(|_| anyhow::anyhow!("a soak worker panicked"))?;
    }
    settle();
    let end_spill = disk_use(tmp.path());
    let skip = samples.len() / 10;
    let points = |key: &str| -> Vec<(f64, f64)> {
        samples[skip..]
            .iter()
            .map(|s| (s["s"].as_f64().unwrap_or(0.0) / 60.0, s[key].as_f64().unwrap_or(0.0)))
            .collect()
    };
    let peak_spill = samples.iter().filter_map(|s| s["spill_bytes"].as_u64()).max().unwrap_or(0);
    let results = json!({
        "calls_ok": ok.load(Ordering::Relaxed), "calls_lost_or_wrong": bad.load(Ordering::Relaxed),
        "failed_sessions": failed.load(Ordering::Relaxed),
        "rss_slope_kib_per_min": round(slope(&points("rss_kib")), 1),
        "anon_slope_kib_per_min": round(slope(&points("anon_kib")), 1),
        "spill_bytes_peak": peak_spill, "spill_bytes_after_sessions": end_spill,
        "samples": samples,
    });
    Ok(Outcome {
        params: json!({"seconds": seconds, "sessions": sessions, "every": every, "bin": bin}),
        results,
        shape: Value::Null,
    })
}
