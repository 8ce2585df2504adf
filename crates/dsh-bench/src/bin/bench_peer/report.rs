//! The comparison table: medians over reps of the collected JSON lines, ratios, targets.

use std::path::Path;

use serde_json::{Value, json};

use crate::peer::throughput_command;

fn get<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |a, k| a.get(k))
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    Some(if xs.len() % 2 == 1 { xs[m] } else { (xs[m - 1] + xs[m]) / 2.0 })
}

/// Every collected line; raw.mjs lines become peer `node-raw` with their baseline as `bench`.
struct Lines(Vec<Value>);

impl Lines {
    fn load(files: &[String]) -> anyhow::Result<Self> {
        let mut lines = Vec::new();
        for file in files.iter().filter(|f| Path::new(f).exists()) {
            for line in std::fs::read_to_string(file)?.lines().filter(|l| !l.trim().is_empty()) {
                let mut v: Value = serde_json::from_str(line)?;
                let baseline = (v["impl"] == "raw").then(|| v["baseline"].clone());
                if let (Some(obj), Some(baseline)) = (v.as_object_mut(), baseline) {
                    obj.insert("peer".into(), json!("node-raw"));
                    obj.insert("bench".into(), baseline);
                }
                lines.push(v);
            }
        }
        Ok(Self(lines))
    }

    fn of<'a>(&'a self, peer: &'a str, bench: &'a str) -> impl Iterator<Item = &'a Value> {
        self.0.iter().filter(move |l| l["peer"] == peer && l["bench"] == bench)
    }

    /// Median over reps of `path` in the lines of `peer` and `bench` whose `params.<key>` are
    /// the given values (`null`: the line has no such key).
    fn med(&self, peer: &str, bench: &str, params: &[(&str, Value)], path: &str) -> Option<f64> {
        let xs = self
            .of(peer, bench)
            .filter(|l| params.iter().all(|(k, v)| l["params"].get(k).unwrap_or(&Value::Null) == v))
            .filter_map(|l| get(l, path).and_then(Value::as_f64))
            .collect();
        median(xs)
    }

    /// `Some(false)` when any line of `peer` and `bench` has `path` false.
    fn all_true(&self, peer: &str, bench: &str, path: &str) -> Option<bool> {
        let vals: Vec<bool> =
            self.of(peer, bench).filter_map(|l| get(l, path).and_then(Value::as_bool)).collect();
        (!vals.is_empty()).then(|| vals.iter().all(|&b| b))
    }

    fn confined_skip(&self, runner: &str) -> Option<String> {
        self.of("rust", "confined").find_map(|l| l["results"]["skipped"][runner].as_str()).map(str::to_owned)
    }
}

#[derive(Clone, Copy)]
enum Unit {
    Ms,
    MbPerS,
    GbPerS,
    Mib,
    PerS,
}

fn fmt(x: Option<f64>, unit: Unit) -> String {
    match (x, unit) {
        (None, _) => "—".into(),
        (Some(x), Unit::Ms) => format!("{x:.3} ms"),
        (Some(x), Unit::MbPerS) => format!("{x:.1} MB/s"),
        (Some(x), Unit::GbPerS) => format!("{x:.2} GB/s"),
        (Some(x), Unit::Mib) => format!("{x:.1} MiB"),
        (Some(x), Unit::PerS) => format!("{x:.1}/s"),
    }
}

/// A target and the number it judges: the ratio to the baseline, or the value itself.
enum Target {
    Info,
    RatioAtMost(f64, &'static str),
    RatioAtLeast(f64, &'static str),
    ValueAtMost(f64, &'static str),
    ValueAtLeast(f64, &'static str),
}

enum Line {
    Title(String),
    Row {
        what: String,
        value: String,
        baseline: String,
        ratio: Option<f64>,
        target: String,
        met: &'static str,
    },
}

#[derive(Default)]
struct Table(Vec<Line>);

impl Table {
    fn section(&mut self, title: &str) {
        self.0.push(Line::Title(title.to_owned()));
    }

    fn add(&mut self, what: &str, unit: Unit, value: Option<f64>, baseline: Option<f64>, target: Target) {
        self.add_paired(what, unit, (value, baseline), None, target);
    }

    /// A row whose measurement and baseline were taken in the same moments, rep by rep: the
    /// ratio judged is the median of the reps' own ratios (`paired`), which the machine's
    /// drift from one rep to the next does not move, as it moves a ratio of two medians that
    /// may come from different reps. Without it, the ratio of the medians.
    fn add_paired(
        &mut self,
        what: &str,
        unit: Unit,
        (value, baseline): (Option<f64>, Option<f64>),
        paired: Option<f64>,
        target: Target,
    ) {
        let ratio = paired.or(match (value, baseline) {
            (Some(a), Some(b)) if b != 0.0 => Some(a / b),
            _ => None,
        });
        self.add_ratio(what, unit, value, baseline, ratio, target);
    }

    fn add_ratio(
        &mut self,
        what: &str,
        unit: Unit,
        value: Option<f64>,
        baseline: Option<f64>,
        ratio: Option<f64>,
        target: Target,
    ) {
        let judge = |checked: Option<f64>, ok: &dyn Fn(f64) -> bool| match checked {
            Some(x) if ok(x) => "yes",
            Some(_) => "NO",
            None => "n/a",
        };
        let (label, met) = match target {
            Target::Info => ("(info)", ""),
            Target::RatioAtMost(limit, label) => (label, judge(ratio, &|x| x <= limit)),
            Target::RatioAtLeast(limit, label) => (label, judge(ratio, &|x| x >= limit)),
            Target::ValueAtMost(limit, label) => (label, judge(value, &|x| x <= limit)),
            Target::ValueAtLeast(limit, label) => (label, judge(value, &|x| x >= limit)),
        };
        self.0.push(Line::Row {
            what: what.to_owned(),
            value: fmt(value, unit),
            baseline: if baseline.is_some() { fmt(baseline, unit) } else { String::new() },
            ratio,
            target: label.to_owned(),
            met,
        });
    }

    /// An informational row, compared with `baseline` when there is one.
    fn info(&mut self, what: &str, unit: Unit, value: Option<f64>, baseline: Option<f64>) {
        self.add(what, unit, value, baseline, Target::Info);
    }

    fn print(&self) {
        let header = ["measurement (median over reps)", "value", "baseline", "ratio", "target"];
        println!(
            "{:<58} {:>15} {:>15} {:>8}  {:<24} met",
            header[0], header[1], header[2], header[3], header[4]
        );
        for line in &self.0 {
            match line {
                Line::Title(title) => println!("\n## {title}"),
                Line::Row { what, value, baseline, ratio, target, met } => {
                    let ratio = ratio.map_or(String::new(), |x| format!("{x:.2}x"));
                    println!("{what:<58} {value:>15} {baseline:>15} {ratio:>8}  {target:<24} {met}");
                }
            }
        }
    }
}

pub(crate) fn print(files: &[String]) -> anyhow::Result<()> {
    let d = Lines::load(files)?;
    let mut t = Table::default();
    let has_ts = d.of("ts", "latency").next().is_some() || d.of("ts", "throughput").next().is_some();
    latency(&d, &mut t, has_ts);
    capture(&d, &mut t, has_ts);
    concurrency(&d, &mut t, has_ts);
    confinement(&d, &mut t);
    network_proxy(&d, &mut t);
    ssh(&d, &mut t);
    container(&d, &mut t);
    redaction(&d, &mut t);
    t.section("timeout 500 ms of `sleep 30`: overshoot (wall - timeout)");
    let p = [("timeoutMs", json!(500)), ("command", json!("sleep 30"))];
    for (peer, label) in [("rust", "Rust peer"), ("ts", "reference")] {
        if let Some(x) = d.med(peer, "timeout", &p, "results.overshoot_ms") {
            t.info(label, Unit::Ms, Some(x), None);
        }
    }
    t.print();
    Ok(())
}

fn latency(d: &Lines, t: &mut Table, has_ts: bool) {
    t.section(
        "per-call latency of `true` (p50 of each rep; a same-moments ratio is the median of the reps' own)",
    );
    // Back to back (no pause before a timed operation); the rows after an idle pause follow.
    let hot = [("settle_ms", Value::Null)];
    let raw = d.med("rust", "overhead", &[], "results.raw_spawn.p50_ms");
    t.info("raw `bash -c true`: std spawn+wait (posix_spawn)", Unit::Ms, raw, None);
    let fork = d.med("rust", "overhead", &[], "results.raw_fork.p50_ms");
    t.info("raw `bash -c true`: std fork+exec (pre_exec hook)", Unit::Ms, fork, raw);
    let service = d.med("rust", "overhead", &[], "results.service.p50_ms");
    t.info("SubprocessService spawn+wait", Unit::Ms, service, raw);
    let run = d.med("rust", "overhead", &[], "results.run.p50_ms");
    t.add_paired(
        "LocalBashExecutor::run(`true`)",
        Unit::Ms,
        (run, raw),
        d.med("rust", "overhead", &[], "results.run_vs_raw_p50"),
        Target::RatioAtMost(1.10, "<= 1.10x raw spawn (same moments)"),
    );
    let batch = d.med("rust", "batch", &hot, "results.pipelined_per_line_ms");
    t.info("dsh-bash batch, per line (N lines fed at once)", Unit::Ms, batch, raw);
    // The host rows are set against the raw spawns measured between their own round trips
    // (the machine's speed drifts between benchmarks), else against the overhead run's.
    let batch_rt = d.med("rust", "batch", &hot, "results.round_trip.p50_ms");
    let batch_raw = d.med("rust", "batch", &hot, "results.raw_spawn.p50_ms").or(raw);
    t.add_paired(
        "dsh-bash batch, one-line round trip",
        Unit::Ms,
        (batch_rt, batch_raw),
        d.med("rust", "batch", &hot, "results.round_trip_vs_raw_p50"),
        Target::RatioAtMost(1.15, "<= 1.15x raw spawn (same moments)"),
    );
    let mcp = d.med("rust", "mcp", &hot, "results.p50_ms");
    let mcp_raw = d.med("rust", "mcp", &hot, "results.raw_spawn.p50_ms").or(raw);
    t.add_paired(
        "dsh-bash mcp (stdio), tools/call bash round trip",
        Unit::Ms,
        (mcp, mcp_raw),
        d.med("rust", "mcp", &hot, "results.vs_raw_p50"),
        Target::RatioAtMost(1.20, "<= 1.20x raw spawn (same moments)"),
    );
    // The same two round trips, each (and each raw spawn) after a 1 ms idle pause: nothing the
    // previous operation left to do runs in the next one's time, and the caches are an idle
    // CPU's. Information: the targets are the back-to-back rows'.
    let idle = [("settle_ms", json!(1))];
    for (bench, label, rt, paired) in [
        (
            "batch",
            "dsh-bash batch round trip, after a 1 ms idle pause",
            "results.round_trip.p50_ms",
            "results.round_trip_vs_raw_p50",
        ),
        (
            "mcp",
            "dsh-bash mcp (stdio) round trip, after a 1 ms idle pause",
            "results.p50_ms",
            "results.vs_raw_p50",
        ),
    ] {
        let value = d.med("rust", bench, &idle, rt);
        if value.is_some() {
            let base = d.med("rust", bench, &idle, "results.raw_spawn.p50_ms");
            t.add_paired(label, Unit::Ms, (value, base), d.med("rust", bench, &idle, paired), Target::Info);
        }
    }
    let http = d.med("rust", "mcp-http", &[], "results.http.p50_ms");
    let stdio = d.med("rust", "mcp-http", &[], "results.stdio.p50_ms");
    t.add_paired(
        "HTTP / stdio round trip (keep-alive, same run)",
        Unit::Ms,
        (http, stdio),
        d.med("rust", "mcp-http", &[], "results.http_over_stdio_p50"),
        Target::RatioAtMost(1.5, "<= 1.5x stdio"),
    );
    t.info(
        "dsh-bash batch: start + first response",
        Unit::Ms,
        d.med("rust", "batch", &hot, "results.cold_first_ms"),
        None,
    );
    t.info(
        "dsh-bash mcp: start + initialize",
        Unit::Ms,
        d.med("rust", "mcp", &hot, "results.initialize_ms"),
        None,
    );
    if !has_ts {
        let calls = d.med("rust", "latency", &[], "results.calls_per_s");
        t.info("Rust peer, bench.mjs `latency`: calls/s", Unit::PerS, calls, None);
        return;
    }
    t.section("Rust peer vs the reference executor (bench.mjs latency, sequential `true`)");
    let both = |path: &str| (d.med("rust", "latency", &[], path), d.med("ts", "latency", &[], path));
    let (ours, theirs) = both("results.p50_ms");
    t.info("latency p50: Rust peer vs reference", Unit::Ms, ours, theirs);
    let (ours, theirs) = both("results.p99_ms");
    t.info("latency p99: Rust peer vs reference", Unit::Ms, ours, theirs);
    let (ours, theirs) = both("results.calls_per_s");
    t.add(
        "calls/s: Rust peer vs reference",
        Unit::PerS,
        ours,
        theirs,
        Target::RatioAtLeast(2.0, ">= 2x reference"),
    );
    for (name, label) in [
        ("spawnsync", "node spawnSync"),
        ("spawn-async", "node async spawn"),
        ("shell-loop", "bash fork loop"),
        ("hyperfine", "hyperfine -N"),
    ] {
        if let Some(x) = d.med("node-raw", name, &[], "results.p50_ms") {
            t.info(&format!("raw.mjs `bash -c true`: {label}"), Unit::Ms, Some(x), None);
        }
    }
}

fn capture(d: &Lines, t: &mut Table, has_ts: bool) {
    t.section("stdout capture of `head -c BYTES /dev/zero | tr '\\0' a`, default caps, fresh process each");
    let params = |bytes: u64, plain: bool| {
        [
            ("bytes", json!(bytes)),
            ("command", json!(throughput_command(bytes, plain))),
            ("secrets", Value::Null),
        ]
    };
    for (bytes, label) in [(1_000_000u64, "1 MB"), (100_000_000, "100 MB"), (1_000_000_000, "1 GB")] {
        let p = params(bytes, false);
        let ours = d.med("rust", "throughput", &p, "results.mb_per_s");
        let pipe = d.med("rust", "pipe", &p, "results.read.mb_per_s");
        let what = format!("{label}: Rust capture vs plain pipe read");
        if bytes >= 100_000_000 {
            t.add(&what, Unit::MbPerS, ours, pipe, Target::ValueAtLeast(1000.0, ">= 1000 MB/s"));
        } else {
            t.info(&what, Unit::MbPerS, ours, pipe);
        }
        let devnull = d.med("rust", "pipe", &p, "results.devnull.mb_per_s");
        t.info(&format!("{label}: the pipeline > /dev/null inside bash"), Unit::MbPerS, devnull, None);
        let rss = d.med("rust", "throughput", &p, "results.max_rss_mib");
        if has_ts {
            let theirs = d.med("ts", "throughput", &p, "results.mb_per_s");
            t.info(&format!("{label}: Rust capture vs reference"), Unit::MbPerS, ours, theirs);
            let theirs = d.med("ts", "throughput", &p, "results.max_rss_mib");
            let what = format!("{label}: peak RSS, Rust vs reference");
            t.add(&what, Unit::Mib, rss, theirs, Target::RatioAtMost(0.25, "<= 1/4 of reference"));
        } else {
            t.info(&format!("{label}: peak RSS, Rust peer"), Unit::Mib, rss, None);
        }
    }
    let rss = |bytes| d.med("rust", "throughput", &params(bytes, false), "results.max_rss_mib");
    let growth = rss(1_000_000_000).zip(rss(1_000_000)).map(|(large, small)| large - small);
    t.add(
        "peak RSS growth 1 MB -> 1 GB (Rust)",
        Unit::Mib,
        growth,
        None,
        Target::ValueAtMost(2.0, "flat: <= 2 MiB"),
    );
    let p = params(1_000_000_000, true);
    let ours = d.med("rust", "throughput", &p, "results.mb_per_s");
    let pipe = d.med("rust", "pipe", &p, "results.read.mb_per_s");
    let what = "1 GB without `tr`: Rust capture vs pipe read";
    t.add(what, Unit::MbPerS, ours, pipe, Target::ValueAtLeast(1000.0, ">= 1000 MB/s"));
}

fn concurrency(d: &Lines, t: &mut Table, has_ts: bool) {
    t.section("100 at once (raw: std spawns the same commands, then waits for each)");
    let n100 = [("n", json!(100))];
    let raw = d.med("rust", "raw-concurrent", &n100, "results.overhead_ms");
    t.info("raw: 100 x `sleep 0.5; echo done`, wall - 500 ms", Unit::Ms, raw, None);
    let peers: &[(&str, &str)] =
        if has_ts { &[("rust", "Rust"), ("ts", "reference")] } else { &[("rust", "Rust")] };
    for (peer, label) in peers {
        let failed = d.all_true(peer, "concurrent", "results.all_ok") == Some(false);
        let what = format!(
            "{label}: 100 concurrent run(), wall - 500 ms{}",
            if failed { " (NOT all ok)" } else { "" }
        );
        t.info(&what, Unit::Ms, d.med(peer, "concurrent", &n100, "results.overhead_ms"), raw);
    }
    for (peer, label) in peers {
        let failed = d.all_true(peer, "background", "results.all_exact") == Some(false);
        let what = format!(
            "{label}: 100 background starts, drained, read{}",
            if failed { " (NOT exact)" } else { "" }
        );
        t.info(&what, Unit::Ms, d.med(peer, "background", &n100, "results.wall_ms"), None);
        let start = d.med(peer, "background", &n100, "results.start_all_ms");
        t.info(&format!("{label}: ... of which the 100 starts"), Unit::Ms, start, None);
    }
}

fn confinement(d: &Lines, t: &mut Table) {
    t.section("confined `true`: run() through the sandboxing executor, workspace-write (p50)");
    let unconfined = d.med("rust", "confined", &[], "results.unconfined.p50_ms");
    t.info("unconfined LocalBashExecutor::run", Unit::Ms, unconfined, None);
    for (runner, label) in [
        ("landlock", "Landlock in-process (+ mount namespace)"),
        ("bwrap", "bubblewrap"),
        ("landlock_netdeny", "Landlock, network deny (target <= 1.3x)"),
        ("bwrap_netdeny", "bubblewrap, network deny"),
    ] {
        match d.med("rust", "confined", &[], &format!("results.{runner}.p50_ms")) {
            Some(x) => t.info(label, Unit::Ms, Some(x), unconfined),
            None => {
                let why = d.confined_skip(runner).unwrap_or_else(|| "not measured".into());
                t.info(&format!("{label}: skipped ({why})"), Unit::Ms, None, None);
            }
        }
    }
}

fn container(d: &Lines, t: &mut Table) {
    t.section("container executor: per-call `true` in one container (p50)");
    if let Some(why) =
        d.of("rust", "container").find_map(|l| l["results"]["skipped"].as_str().map(str::to_owned))
    {
        t.info(&format!("skipped ({why})"), Unit::Ms, None, None);
        return;
    }
    let raw = d.med("rust", "container", &[], "results.docker_exec.p50_ms");
    t.info("docker exec <container> true (the CLI)", Unit::Ms, raw, None);
    let bare = d.med("rust", "container", &[], "results.bollard_exec.p50_ms");
    t.info("the transport's bare exec (bollard)", Unit::Ms, bare, raw);
    let run = d.med("rust", "container", &[], "results.executor_run.p50_ms");
    t.add_paired(
        "run(\"true\") through the container executor",
        Unit::Ms,
        (run, raw),
        d.med("rust", "container", &[], "results.run_vs_docker_exec_p50"),
        Target::RatioAtMost(1.2, "<= 1.2x docker exec (same moments)"),
    );
    let cold = d.med("rust", "container", &[], "results.first_call_cold.p50_ms");
    t.info("a new session's first call, no warm pool (container start)", Unit::Ms, cold, None);
    let warm = d.med("rust", "container", &[], "results.first_call_warm.p50_ms");
    t.info("a new session's first call, --container-warm 1", Unit::Ms, warm, cold);
}

fn network_proxy(d: &Lines, t: &mut Table) {
    t.section("network proxy: connect + 1-byte echo on loopback (p50)");
    let direct = d.med("rust", "proxy", &[], "results.direct.p50_ms");
    t.info("direct loopback connect", Unit::Ms, direct, None);
    t.info(
        "through the proxy (CONNECT)",
        Unit::Ms,
        d.med("rust", "proxy", &[], "results.proxy.p50_ms"),
        direct,
    );
    let tunnel_first = d.med("rust", "proxy-tls", &[], "results.tunnel_first.p50_ms");
    if tunnel_first.is_none() {
        return;
    }
    t.section("HTTPS through the proxy: unbound host (tunnel) vs bound host (TLS intercepted) (p50)");
    t.info("tunnel: connect + TLS + first request", Unit::Ms, tunnel_first, None);
    t.info(
        "intercepted: connect + 2 TLS + first request",
        Unit::Ms,
        d.med("rust", "proxy-tls", &[], "results.intercepted_first.p50_ms"),
        tunnel_first,
    );
    let tunnel_next = d.med("rust", "proxy-tls", &[], "results.tunnel_next.p50_ms");
    t.info("tunnel: next request, same connection", Unit::Ms, tunnel_next, None);
    t.info(
        "intercepted: next request, same connection",
        Unit::Ms,
        d.med("rust", "proxy-tls", &[], "results.intercepted_next.p50_ms"),
        tunnel_next,
    );
}

fn ssh(d: &Lines, t: &mut Table) {
    let raw = d.med("rust", "ssh", &[], "results.raw_ssh.p50_ms");
    if raw.is_none() {
        return;
    }
    t.section("`true` over SSH, one master connection (p50)");
    t.info("raw `ssh -S <master> host true`", Unit::Ms, raw, None);
    t.info("SshTransport exec(`true`)", Unit::Ms, d.med("rust", "ssh", &[], "results.transport.p50_ms"), raw);
    t.add_paired(
        "SSH executor run(`true`) (--executor ssh)",
        Unit::Ms,
        (d.med("rust", "ssh", &[], "results.run.p50_ms"), raw),
        d.med("rust", "ssh", &[], "results.run_vs_raw_p50"),
        Target::RatioAtMost(1.2, "<= 1.2x raw ssh (same moments)"),
    );
}

fn redaction(d: &Lines, t: &mut Table) {
    t.section("output redaction: 1 GB with no secret in it, 256 KiB chunks, in process");
    for (secrets, corpus, label) in [
        (0u64, "text", "redaction throughput, 0 secrets"),
        (100, "text", "redaction throughput, 100 secrets"),
        (100, "a", "redaction throughput, 100 secrets, `tr '\\0' a` stream"),
    ] {
        let p = [("secrets", json!(secrets)), ("bytes", json!(1_000_000_000u64)), ("corpus", json!(corpus))];
        let x = d.med("rust", "redact", &p, "results.gb_per_s");
        t.add(label, Unit::GbPerS, x, None, Target::ValueAtLeast(1.0, ">= 1 GB/s"));
    }
    let bytes = 1_000_000_000u64;
    for (plain, label) in [
        (false, "1 GB capture with 100 secrets to redact vs none"),
        (true, "1 GB without `tr`: capture with 100 secrets vs none"),
    ] {
        let p = |secrets: Value| {
            [
                ("bytes", json!(bytes)),
                ("command", json!(throughput_command(bytes, plain))),
                ("secrets", secrets),
            ]
        };
        let none = d.med("rust", "throughput", &p(Value::Null), "results.mb_per_s");
        let redacting = d.med("rust", "throughput", &p(json!(100)), "results.mb_per_s");
        t.info(label, Unit::MbPerS, redacting, none);
    }
}
