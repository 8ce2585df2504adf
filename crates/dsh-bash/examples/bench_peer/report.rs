//! The comparison table: medians over reps of the collected JSON lines, ratios, targets.

use std::path::Path;

use serde_json::{Value, json};

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

struct Lines(Vec<Value>);

impl Lines {
    /// Median over reps of `path` in lines of `peer` and `bench` whose `params.<key>` are
    /// the given values.
    fn med(&self, peer: &str, bench: &str, params: &[(&str, Value)], path: &str) -> Option<f64> {
        let xs = self
            .0
            .iter()
            .filter(|l| get(l, "peer").and_then(Value::as_str) == Some(peer))
            .filter(|l| get(l, "bench").and_then(Value::as_str) == Some(bench))
            .filter(|l| params.iter().all(|(k, v)| get(l, &format!("params.{k}")) == Some(v)))
            .filter_map(|l| get(l, path).and_then(Value::as_f64))
            .collect();
        median(xs)
    }

    fn all_true(&self, peer: &str, bench: &str, path: &str) -> Option<bool> {
        let vals: Vec<bool> = self
            .0
            .iter()
            .filter(|l| get(l, "peer").and_then(Value::as_str) == Some(peer))
            .filter(|l| get(l, "bench").and_then(Value::as_str) == Some(bench))
            .filter_map(|l| get(l, path).and_then(Value::as_bool))
            .collect();
        (!vals.is_empty()).then(|| vals.iter().all(|&b| b))
    }

    fn skipped(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .filter(|l| get(l, "bench").and_then(Value::as_str) == Some("confined"))
            .find_map(|l| get(l, &format!("results.skipped.{name}")).and_then(Value::as_str))
            .map(str::to_owned)
    }

    fn reps(&self, peer: &str, bench: &str) -> usize {
        self.0
            .iter()
            .filter(|l| get(l, "peer").and_then(Value::as_str) == Some(peer))
            .filter(|l| get(l, "bench").and_then(Value::as_str) == Some(bench))
            .count()
    }
}

enum Target {
    Info,
    AtMost(f64, &'static str),
    AtLeast(f64, &'static str),
}

struct Row {
    what: String,
    value: String,
    baseline: String,
    ratio: Option<f64>,
    target: String,
    met: &'static str,
}

struct Table(Vec<Option<Row>>);

fn fmt_ms(x: Option<f64>) -> String {
    x.map_or("—".into(), |x| format!("{x:.3} ms"))
}

impl Table {
    fn section(&mut self, title: &str) {
        self.0.push(None);
        self.0.push(Some(Row {
            what: format!("## {title}"),
            value: String::new(),
            baseline: String::new(),
            ratio: None,
            target: String::new(),
            met: "",
        }));
    }

    /// A row; `checked` is the number the target applies to (the ratio, or the value).
    fn row(
        &mut self,
        what: &str,
        value: String,
        baseline: String,
        ratio: Option<f64>,
        target: Target,
        checked: Option<f64>,
    ) {
        let (target, met) = match target {
            Target::Info => ("(info)".to_owned(), ""),
            Target::AtMost(limit, label) => (
                label.to_owned(),
                match checked {
                    Some(x) if x <= limit => "yes",
                    Some(_) => "NO",
                    None => "n/a",
                },
            ),
            Target::AtLeast(limit, label) => (
                label.to_owned(),
                match checked {
                    Some(x) if x >= limit => "yes",
                    Some(_) => "NO",
                    None => "n/a",
                },
            ),
        };
        self.0.push(Some(Row { what: what.to_owned(), value, baseline, ratio, target, met }));
    }

    fn print(&self) {
        println!(
            "{:<58} {:>15} {:>15} {:>8}  {:<26} met",
            "measurement (median over reps)", "value", "baseline", "ratio", "target"
        );
        for row in &self.0 {
            match row {
                None => println!(),
                Some(r) if r.what.starts_with("## ") => println!("{}", r.what),
                Some(r) => println!(
                    "{:<58} {:>15} {:>15} {:>8}  {:<26} {}",
                    r.what,
                    r.value,
                    r.baseline,
                    r.ratio.map_or(String::new(), |x| format!("{x:.2}x")),
                    r.target,
                    r.met
                ),
            }
        }
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

fn load(files: &[String]) -> anyhow::Result<Lines> {
    let mut lines = Vec::new();
    for file in files {
        if !Path::new(file).exists() {
            continue;
        }
        for line in std::fs::read_to_string(file)?.lines().filter(|l| !l.trim().is_empty()) {
            let mut v: Value = serde_json::from_str(line)?;
            // raw.mjs lines: {"impl":"raw","baseline":…} -> peer "node-raw", bench = baseline.
            if let (Some(obj), Some(baseline)) = (v.as_object_mut(), line_baseline(line)) {
                obj.insert("peer".into(), Value::from("node-raw"));
                obj.insert("bench".into(), Value::from(baseline));
            }
            lines.push(v);
        }
    }
    Ok(Lines(lines))
}

fn line_baseline(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    (v.get("impl")?.as_str()? == "raw").then(|| v.get("baseline")?.as_str().map(str::to_owned))?
}

pub(crate) fn print(files: &[String]) -> anyhow::Result<()> {
    let d = load(files)?;
    let mut t = Table(Vec::new());
    let has_ts = d.reps("ts", "latency") + d.reps("ts", "throughput") > 0;

    // Per-call latency of `true`.
    t.section("per-call latency of `true` (p50 per rep)");
    let raw = d.med("rust", "overhead", &[], "results.raw_spawn.p50_ms");
    t.row(
        "raw `bash -c true`: std spawn+wait (posix_spawn)",
        fmt_ms(raw),
        String::new(),
        None,
        Target::Info,
        None,
    );
    let fork = d.med("rust", "overhead", &[], "results.raw_fork.p50_ms");
    t.row(
        "raw `bash -c true`: std fork+exec (pre_exec hook)",
        fmt_ms(fork),
        fmt_ms(raw),
        ratio(fork, raw),
        Target::Info,
        None,
    );
    let service = d.med("rust", "overhead", &[], "results.service.p50_ms");
    t.row(
        "SubprocessService spawn+wait",
        fmt_ms(service),
        fmt_ms(raw),
        ratio(service, raw),
        Target::Info,
        None,
    );
    let ours = d.med("rust", "overhead", &[], "results.run.p50_ms");
    let r = ratio(ours, raw);
    t.row(
        "LocalBashExecutor::run(`true`)",
        fmt_ms(ours),
        fmt_ms(raw),
        r,
        Target::AtMost(1.10, "<= 1.10x raw spawn"),
        r,
    );
    let batch = d.med("rust", "batch", &[], "results.pipelined_per_line_ms");
    t.row(
        "dsh-bash batch, per line (N lines fed at once)",
        fmt_ms(batch),
        fmt_ms(raw),
        ratio(batch, raw),
        Target::Info,
        None,
    );
    let batch_rt = d.med("rust", "batch", &[], "results.round_trip.p50_ms");
    t.row(
        "dsh-bash batch, one-line round trip",
        fmt_ms(batch_rt),
        fmt_ms(raw),
        ratio(batch_rt, raw),
        Target::Info,
        None,
    );
    let mcp = d.med("rust", "mcp", &[], "results.p50_ms");
    t.row(
        "dsh-bash mcp (stdio), tools/call bash round trip",
        fmt_ms(mcp),
        fmt_ms(raw),
        ratio(mcp, raw),
        Target::Info,
        None,
    );
    let cold = d.med("rust", "batch", &[], "results.cold_first_ms");
    t.row("dsh-bash batch: start + first response", fmt_ms(cold), String::new(), None, Target::Info, None);
    let init = d.med("rust", "mcp", &[], "results.initialize_ms");
    t.row("dsh-bash mcp: start + initialize", fmt_ms(init), String::new(), None, Target::Info, None);

    if has_ts {
        t.section("Rust peer vs the reference executor (bench.mjs latency, sequential `true`)");
        let (rp, tp) =
            (d.med("rust", "latency", &[], "results.p50_ms"), d.med("ts", "latency", &[], "results.p50_ms"));
        t.row(
            "latency p50: Rust peer vs reference",
            fmt_ms(rp),
            fmt_ms(tp),
            ratio(rp, tp),
            Target::Info,
            None,
        );
        let (rp, tp) =
            (d.med("rust", "latency", &[], "results.p99_ms"), d.med("ts", "latency", &[], "results.p99_ms"));
        t.row(
            "latency p99: Rust peer vs reference",
            fmt_ms(rp),
            fmt_ms(tp),
            ratio(rp, tp),
            Target::Info,
            None,
        );
        let (rc, tc) = (
            d.med("rust", "latency", &[], "results.calls_per_s"),
            d.med("ts", "latency", &[], "results.calls_per_s"),
        );
        let r = ratio(rc, tc);
        let f = |x: Option<f64>| x.map_or("—".into(), |x| format!("{x:.1}/s"));
        t.row("calls/s: Rust peer vs reference", f(rc), f(tc), r, Target::AtLeast(2.0, ">= 2x reference"), r);
        for (name, label) in [
            ("spawnsync", "node spawnSync `bash -c true`"),
            ("spawn-async", "node async spawn `bash -c true`"),
            ("shell-loop", "bash fork loop `bash -c true`"),
            ("hyperfine", "hyperfine -N `bash -c true`"),
        ] {
            if let Some(x) = d.med("node-raw", name, &[], "results.p50_ms") {
                t.row(&format!("raw.mjs: {label}"), fmt_ms(Some(x)), String::new(), None, Target::Info, None);
            }
        }
    }

    // Throughput and RSS.
    t.section("stdout capture: `head -c BYTES /dev/zero | tr '\\0' a`, default caps (fresh process per run)");
    let mbs = |x: Option<f64>| x.map_or("—".into(), |x| format!("{x:.1} MB/s"));
    let mib = |x: Option<f64>| x.map_or("—".into(), |x| format!("{x:.1} MiB"));
    let sizes = [(1_000_000u64, "1 MB"), (100_000_000, "100 MB"), (1_000_000_000, "1 GB")];
    for (bytes, label) in sizes {
        let p = [("bytes", json!(bytes)), ("command", json!(crate::peer::throughput_command(bytes, false)))];
        let ours = d.med("rust", "throughput", &p, "results.mb_per_s");
        let pipe = d.med("rust", "pipe", &p, "results.read.mb_per_s");
        let target =
            if bytes >= 100_000_000 { Target::AtLeast(1000.0, ">= 1000 MB/s") } else { Target::Info };
        t.row(
            &format!("{label}: Rust capture vs plain pipe read"),
            mbs(ours),
            mbs(pipe),
            ratio(ours, pipe),
            target,
            ours,
        );
        let devnull = d.med("rust", "pipe", &p, "results.devnull.mb_per_s");
        t.row(
            &format!("{label}: same pipeline > /dev/null inside bash"),
            mbs(devnull),
            String::new(),
            None,
            Target::Info,
            None,
        );
        if has_ts {
            let theirs = d.med("ts", "throughput", &p, "results.mb_per_s");
            t.row(
                &format!("{label}: Rust capture vs reference"),
                mbs(ours),
                mbs(theirs),
                ratio(ours, theirs),
                Target::Info,
                None,
            );
        }
        let rss = d.med("rust", "throughput", &p, "results.max_rss_mib");
        if has_ts {
            let theirs = d.med("ts", "throughput", &p, "results.max_rss_mib");
            let r = ratio(rss, theirs);
            t.row(
                &format!("{label}: peak RSS, Rust vs reference"),
                mib(rss),
                mib(theirs),
                r,
                Target::AtMost(0.25, "<= 1/4 of reference"),
                r,
            );
        } else {
            t.row(
                &format!("{label}: peak RSS, Rust peer"),
                mib(rss),
                String::new(),
                None,
                Target::Info,
                None,
            );
        }
    }
    let rss_at = |bytes: u64| {
        let p = [("bytes", json!(bytes)), ("command", json!(crate::peer::throughput_command(bytes, false)))];
        d.med("rust", "throughput", &p, "results.max_rss_mib")
    };
    let (small, large) = (rss_at(1_000_000), rss_at(1_000_000_000));
    let growth = match (small, large) {
        (Some(s), Some(l)) => Some(l - s),
        _ => None,
    };
    t.row(
        "peak RSS growth, 1 MB -> 1 GB (Rust)",
        mib(growth),
        mib(small),
        None,
        Target::AtMost(2.0, "flat: <= 2 MiB growth"),
        growth,
    );
    let gb = 1_000_000_000u64;
    let p = [("bytes", json!(gb)), ("command", json!(crate::peer::throughput_command(gb, true)))];
    let plain_ours = d.med("rust", "throughput", &p, "results.mb_per_s");
    let plain_pipe = d.med("rust", "pipe", &p, "results.read.mb_per_s");
    if plain_ours.is_some() {
        t.row(
            "1 GB plain `head -c` (no tr): Rust capture vs pipe read",
            mbs(plain_ours),
            mbs(plain_pipe),
            ratio(plain_ours, plain_pipe),
            Target::AtLeast(1000.0, ">= 1000 MB/s"),
            plain_ours,
        );
    }

    // Concurrency.
    t.section("concurrency (100 calls at once; raw = std spawn of the same commands)");
    let n100 = [("n", json!(100))];
    let raw_over = d.med("rust", "raw-concurrent", &n100, "results.overhead_ms");
    t.row(
        "raw: 100 x `sleep 0.5; echo done`, wall - 500 ms",
        fmt_ms(raw_over),
        String::new(),
        None,
        Target::Info,
        None,
    );
    for (peer, label) in [("rust", "Rust"), ("ts", "reference")] {
        if peer == "ts" && !has_ts {
            continue;
        }
        let over = d.med(peer, "concurrent", &n100, "results.overhead_ms");
        let ok = d.all_true(peer, "concurrent", "results.all_ok");
        let what = format!(
            "{label}: 100 concurrent run(), wall - 500 ms{}",
            if ok == Some(false) { " (NOT all ok)" } else { "" }
        );
        t.row(&what, fmt_ms(over), fmt_ms(raw_over), ratio(over, raw_over), Target::Info, None);
    }
    for (peer, label) in [("rust", "Rust"), ("ts", "reference")] {
        if peer == "ts" && !has_ts {
            continue;
        }
        let wall = d.med(peer, "background", &n100, "results.wall_ms");
        let start = d.med(peer, "background", &n100, "results.start_all_ms");
        let exact = d.all_true(peer, "background", "results.all_exact");
        let what = format!(
            "{label}: 100 background jobs started, drained, read{}",
            if exact == Some(false) { " (NOT all exact)" } else { "" }
        );
        t.row(&what, fmt_ms(wall), String::new(), None, Target::Info, None);
        t.row(
            &format!("{label}: ... of which starting all 100"),
            fmt_ms(start),
            String::new(),
            None,
            Target::Info,
            None,
        );
    }

    // Confinement.
    t.section("confined `true` (run() through the sandboxing executor, workspace-write)");
    let unconfined = d.med("rust", "confined", &[], "results.unconfined.p50_ms");
    t.row("unconfined LocalBashExecutor::run", fmt_ms(unconfined), String::new(), None, Target::Info, None);
    for (name, label) in [("landlock", "Landlock (in-process) + mount namespace"), ("bwrap", "bubblewrap")] {
        match d.med("rust", "confined", &[], &format!("results.{name}.p50_ms")) {
            Some(x) => t.row(
                label,
                fmt_ms(Some(x)),
                fmt_ms(unconfined),
                ratio(Some(x), unconfined),
                Target::Info,
                None,
            ),
            None => {
                let why = d.skipped(name).unwrap_or_else(|| "not measured".into());
                t.row(
                    &format!("{label}: skipped ({why})"),
                    "—".into(),
                    String::new(),
                    None,
                    Target::Info,
                    None,
                );
            }
        }
    }

    // Timeout.
    t.section("timeout 500 ms of `sleep 30`: overshoot");
    for (peer, label) in [("rust", "Rust"), ("ts", "reference")] {
        let p = [("timeoutMs", json!(500)), ("command", json!("sleep 30"))];
        let over = d.med(peer, "timeout", &p, "results.overshoot_ms");
        if over.is_some() {
            t.row(&format!("{label}: wall - timeout"), fmt_ms(over), String::new(), None, Target::Info, None);
        }
    }
    t.print();
    Ok(())
}
