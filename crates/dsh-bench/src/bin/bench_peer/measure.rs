//! Samples and process facts: percentiles, JavaScript-like numbers, result shapes, RSS, CPU.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};

/// A number as JavaScript would print it: integral values without a fraction.
pub(crate) fn js(x: f64) -> Value {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 9.0e15 {
        Value::from(x as i64)
    } else if x.is_finite() {
        Value::from(x)
    } else {
        Value::Null
    }
}

pub(crate) fn round(x: f64, digits: i32) -> Value {
    let f = 10f64.powi(digits);
    js((x * f).round() / f)
}

/// The pause before each timed operation of an interleaved measurement (`--settle-ms`, default
/// none). Without one, what the previous operation left to do after its answer (a server's
/// upkeep once it has replied, a child's teardown) may run in the next one's time, on a
/// machine whose scheduler keeps both on one CPU; with one, each starts from an idle machine,
/// as an agent's next call does after the model has read the last answer (and with the caches
/// an idle CPU leaves).
pub(crate) fn settle_flag(args: &crate::Args) -> anyhow::Result<Duration> {
    Ok(Duration::from_millis(args.int_flag("settle-ms", 0)?))
}

/// `params` with `settle_ms` when there was a pause (lines without one stay as they were).
pub(crate) fn with_settle(mut params: Value, pause: Duration) -> Value {
    if !pause.is_zero()
        && let Some(map) = params.as_object_mut()
    {
        map.insert("settle_ms".into(), js(ms(pause)));
    }
    params
}

/// Sleeps for `pause` unless it is zero.
pub(crate) fn settle(pause: Duration) {
    if !pause.is_zero() {
        std::thread::sleep(pause);
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Nearest-rank percentile over an ascending slice.
pub(crate) fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `{n, min_ms, p50_ms, p90_ms, p99_ms, max_ms, mean_ms}` of samples in milliseconds.
pub(crate) fn stats(samples_ms: &[f64]) -> Map<String, Value> {
    let mut s = samples_ms.to_vec();
    s.sort_by(f64::total_cmp);
    let mean = s.iter().sum::<f64>() / s.len().max(1) as f64;
    let mut m = Map::new();
    m.insert("n".into(), json!(s.len()));
    m.insert("min_ms".into(), round(s.first().copied().unwrap_or(f64::NAN), 3));
    m.insert("p50_ms".into(), round(pct(&s, 50.0), 3));
    m.insert("p90_ms".into(), round(pct(&s, 90.0), 3));
    m.insert("p99_ms".into(), round(pct(&s, 99.0), 3));
    m.insert("max_ms".into(), round(s.last().copied().unwrap_or(f64::NAN), 3));
    m.insert("mean_ms".into(), round(mean, 3));
    m
}

/// Keys (sorted) mapped to the shape of their values; leaves are JavaScript `typeof` names.
pub(crate) fn shape_of(v: &Value) -> Value {
    match v {
        Value::Null => json!("null"),
        Value::Bool(_) => json!("boolean"),
        Value::Number(_) => json!("number"),
        Value::String(_) => json!("string"),
        Value::Array(a) => Value::Array(a.first().map(shape_of).into_iter().collect()),
        Value::Object(o) => {
            let sorted: BTreeMap<_, _> = o.iter().map(|(k, v)| (k.clone(), shape_of(v))).collect();
            Value::Object(sorted.into_iter().collect())
        }
    }
}

fn status_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Current resident set, in bytes.
pub(crate) fn rss_bytes() -> u64 {
    status_kib("VmRSS:").unwrap_or(0) * 1024
}

/// Lifetime peak resident set of this process (`getrusage` `ru_maxrss`), in MiB.
pub(crate) fn max_rss_mib() -> f64 {
    status_kib("VmHWM:").unwrap_or(0) as f64 / 1024.0
}

/// User and system CPU seconds of this process so far (`/proc/self/stat`, USER_HZ = 100).
pub(crate) fn cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
    (tick(11), tick(12))
}

/// Samples the resident set every `interval` until stopped; reports the peak and the count.
pub(crate) struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    samples: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    pub(crate) fn start(interval: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_bytes()));
        let samples = Arc::new(AtomicU64::new(1));
        let (s, p, n) = (Arc::clone(&stop), Arc::clone(&peak), Arc::clone(&samples));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_bytes(), Ordering::Relaxed);
                n.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(interval);
            }
        });
        Self { stop, peak, samples, thread: Some(thread) }
    }

    pub(crate) fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.fetch_max(rss_bytes(), Ordering::Relaxed);
        (self.peak.load(Ordering::Relaxed), self.samples.load(Ordering::Relaxed) + 1)
    }
}
