//! `bench_peer redact SECRETS BYTES [--corpus text|a]`: the output redactor's streaming
//! throughput, in process: BYTES of output with no secret in it, fed in 256 KiB chunks (the
//! pump's read size) through a [`RedactStream`] over SECRETS token-shaped values.
//!
//! `text` (the default) is log-like lines of mixed characters, cycled from an 8 MiB buffer; `a`
//! is the capture benchmark's `tr '\0' a` stream.

use std::sync::Arc;
use std::time::Instant;

use anyhow::bail;
use dsh_subprocess::Redactor;
use serde_json::{Value, json};

use crate::Args;
use crate::measure::round;

/// The pump's read size (`dsh-subprocess`'s `CHUNK`).
const CHUNK: usize = 256 * 1024;

/// A small deterministic generator (xorshift64), so every run redacts the same values.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `n` token-shaped values (`ghp_…`, `sk-…`, `AKIA…`, …) of 24 to 51 bytes, named `SECRET_<i>`.
pub(crate) fn secrets(n: u64) -> Vec<(String, String)> {
    const PREFIXES: [&str; 8] = ["ghp_", "github_pat_", "sk-", "AKIA", "xoxb-", "glpat-", "npm_", "hf_"];
    const ALPHANUMERIC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    (0..n)
        .map(|i| {
            let prefix = PREFIXES[i as usize % PREFIXES.len()];
            let len = 20 + rng.below(21);
            let body: String =
                (0..len).map(|_| char::from(ALPHANUMERIC[rng.below(ALPHANUMERIC.len())])).collect();
            (format!("SECRET_{i}"), format!("{prefix}{body}"))
        })
        .collect()
}

/// About `bytes` of log-like lines.
fn text_corpus(bytes: usize) -> Vec<u8> {
    const LEVELS: [&str; 4] = ["INFO ", "DEBUG", "WARN ", "TRACE"];
    const WORDS: [&str; 12] = [
        "compiling",
        "crate",
        "request",
        "handled",
        "in",
        "token",
        "cache",
        "miss",
        "for",
        "key",
        "ghp",
        "sk",
    ];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = Vec::with_capacity(bytes + 256);
    let mut n = 0u64;
    while out.len() < bytes {
        n += 1;
        let words: Vec<&str> = (0..4 + rng.below(8)).map(|_| WORDS[rng.below(WORDS.len())]).collect();
        let line = format!(
            "2025-01-{:02}T12:{:02}:{:02}.{:03}Z {} [worker-{}] {} /home/user/project/src/mod_{}.rs:{} id={:x}\n",
            1 + n % 28,
            n % 60,
            (n / 60) % 60,
            n % 1000,
            LEVELS[rng.below(LEVELS.len())],
            rng.below(16),
            words.join(" "),
            rng.below(100),
            rng.below(2000),
            rng.next(),
        );
        out.extend_from_slice(line.as_bytes());
    }
    out
}

pub(crate) fn redact(args: &Args) -> anyhow::Result<Value> {
    let n = args.int_at(1, "SECRETS")?;
    let bytes = args.int_at(2, "BYTES")?;
    let corpus_name = args.flag("corpus").unwrap_or("text");
    let corpus = match corpus_name {
        "text" => text_corpus(8 << 20),
        "a" => vec![b'a'; 8 << 20],
        other => bail!("--corpus must be text or a, got {other}"),
    };
    let redactor = Arc::new(Redactor::new(secrets(n))?);
    let mut stream = redactor.stream();
    let (mut fed, mut out) = (0u64, 0u64);
    let t0 = Instant::now();
    while fed < bytes {
        for chunk in corpus.chunks(CHUNK) {
            let chunk = &chunk[..chunk.len().min((bytes - fed) as usize)];
            out += stream.feed(std::hint::black_box(chunk)).len() as u64;
            fed += chunk.len() as u64;
            if fed >= bytes {
                break;
            }
        }
    }
    out += stream.finish().len() as u64;
    let wall_s = t0.elapsed().as_secs_f64();
    if out != fed {
        bail!("the corpus held a secret: {fed} bytes in, {out} out");
    }
    Ok(json!({
        "impl": "rust",
        "bench": "redact",
        "params": {"secrets": n, "bytes": bytes, "corpus": corpus_name},
        "results": {
            "wall_s": round(wall_s, 4),
            "gb_per_s": round(bytes as f64 / 1e9 / wall_s.max(1e-9), 2),
            "values": redactor.len(),
        },
        "env": crate::env_info(),
        "ts": crate::iso_now(),
    }))
}
