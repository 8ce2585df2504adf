//! Pathological output through the real local executor and the bash tool, in the foreground
//! and in the background (read through `job_output`): binary data, invalid UTF-8, a 100 MB
//! line, a flood of carriage-return progress updates, NUL bytes, and characters split across
//! reads or cut by the tail.
//!
//! Every case renders without panic, keeps the collected text within the executor's byte caps,
//! and leaves a complete spill file whenever the stream fits the spill cap. Nothing is timed.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::Harness;
use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::{ToolExec, ToolResult};
use dsh_jobs::JobsPlugin;
use dsh_subprocess::{ServiceOptions, SubprocessService};
use dsh_tool_bash::Config;
use dsh_tool_jobs::ToolJobsPlugin;
use serde_json::{Value, json};

/// The executor's default in-memory cap per stream.
const CAP: usize = 64_000;

struct Local {
    h: Harness,
    spill: tempfile::TempDir,
    /// Files the commands write besides their output (copies, FIFOs).
    scratch: tempfile::TempDir,
    service: Arc<SubprocessService>,
}

impl Local {
    /// S-JOBS with the default caps, a generous foreground timeout and a private spill dir.
    fn new() -> Self {
        let spill = tempfile::tempdir().expect("spill dir");
        let options =
            ServiceOptions { spill_dir: Some(spill.path().to_path_buf()), ..ServiceOptions::default() };
        let service = SubprocessService::with_options(options);
        let config = LocalBashConfig { grace_ms: 200.0, timeout_ms: 120_000.0, ..LocalBashConfig::default() };
        let executor = Arc::new(LocalBashExecutor::new(config, Arc::clone(&service)).expect("executor"));
        let h = Harness::new(executor, Config::default());
        h.ctx.load_default::<JobsPlugin>().expect("jobs");
        h.ctx.load_default::<ToolJobsPlugin>().expect("tool-jobs");
        Self { h, spill, scratch: tempfile::tempdir().expect("scratch dir"), service }
    }

    /// A foreground call that must succeed; returns the text and the structured value.
    async fn foreground(&self, command: &str) -> (String, Value) {
        let r = self.h.call(json!({"command": command, "description": "pathological output"})).await;
        assert!(!r.is_error, "{command}: {}", r.text());
        assert_eq!(r.content.len(), 1);
        (r.text(), r.value.expect("value"))
    }

    /// Starts `command` in the background and returns its job id.
    async fn start(&self, command: &str) -> String {
        let args =
            json!({"command": command, "description": "pathological output", "run_in_background": true});
        let r = self.h.call(args).await;
        assert!(!r.is_error, "{command}: {}", r.text());
        let id = r.value.clone().expect("value")["jobId"].as_str().expect("job id").to_owned();
        assert_eq!(r.text(), format!("started background job {id}"));
        id
    }

    async fn job_output(&self, args: Value) -> ToolResult {
        let r = self.h.tools.call("job_output", args, ToolExec::new(None, "read")).await;
        assert!(!r.is_error, "{}", r.text());
        r
    }

    /// One consuming read: the delta and the job's status.
    async fn read(&self, id: &str) -> (String, String) {
        let r = self.job_output(json!({"job_id": id})).await;
        let value = r.value.expect("value");
        (
            value["text"].as_str().expect("text").to_owned(),
            value["job"]["status"].as_str().expect("status").to_owned(),
        )
    }

    /// Waits for the job to settle and reads what is left; checks the rendered text against
    /// the value.
    async fn finish(&self, id: &str) -> String {
        let r = self.job_output(json!({"job_id": id, "wait": true, "timeout_ms": 300_000})).await;
        let value = r.value.clone().expect("value");
        assert_eq!(value["job"]["status"], "completed", "{value}");
        assert_eq!(value["job"]["detail"], "exit code: 0");
        let delta = value["text"].as_str().expect("text").to_owned();
        let body = if delta.is_empty() { "(no new output)" } else { &delta };
        let separator = if body.ends_with('\n') { "" } else { "\n" };
        assert_eq!(r.content.len(), 1);
        assert_eq!(r.text(), format!("{body}{separator}[status: completed, exit code: 0]"));
        delta
    }

    fn spill_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.spill.path())
            .expect("spill dir")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        files
    }
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// The stream value `{text, truncated, spillPath?}` of a foreground result.
fn stream<'v>(value: &'v Value, name: &str) -> (&'v str, bool, Option<&'v str>) {
    let s = &value[name];
    (s["text"].as_str().expect("text"), s["truncated"].as_bool().expect("truncated"), s["spillPath"].as_str())
}

/// A truncated stdout renders as its tail plus the notice, and exit 0 adds no marker.
fn assert_truncated_render(text: &str, value: &Value, spill: &str) {
    let (tail, truncated, _) = stream(value, "stdout");
    assert!(truncated);
    assert_eq!(value["exitCode"], 0);
    assert_eq!(text, format!("{tail}\n[output truncated; full output: {spill}]"));
}

/// A background read of a stream that lost bytes from memory: the retained tail, then the
/// notice naming the stdout spill (or `(unavailable)`).
fn split_lossy_read(delta: &str) -> (&str, &str) {
    let (tail, notice) =
        delta.rsplit_once("\n[some output was dropped from memory; full output: ").expect(delta);
    (tail, notice.strip_suffix(']').expect("notice closes"))
}

/// `text` is the lossy decoding of the last at most `CAP` bytes of `stream`, after skipping at
/// most three continuation bytes that the tail cut separated from their lead byte.
fn assert_decoded_tail(text: &str, stream: &[u8]) {
    let window = &stream[stream.len().saturating_sub(CAP)..];
    let skipped = (0..=3).find(|k| String::from_utf8_lossy(&window[*k..]) == text);
    let k =
        skipped.unwrap_or_else(|| panic!("{} chars are no decoded tail of the stream", text.chars().count()));
    assert!(window[..k].iter().all(|b| b & 0xC0 == 0x80), "only continuation bytes are skipped");
    assert!(text.chars().count() <= CAP, "one character per retained byte at most");
}

#[tokio::test]
async fn binary_output_is_bounded_and_spilled_completely() {
    let l = Local::new();
    for background in [false, true] {
        let copy = l.scratch.path().join(format!("copy-{background}"));
        let command = format!("head -c 1048576 /dev/urandom | tee {}", shell_quote(&copy));
        let (tail, spill) = if background {
            let id = l.start(&command).await;
            let delta = l.finish(&id).await;
            let (tail, spill) = split_lossy_read(&delta);
            (tail.to_owned(), spill.to_owned())
        } else {
            let (text, value) = l.foreground(&command).await;
            let spill = stream(&value, "stdout").2.expect("a complete spill").to_owned();
            assert_truncated_render(&text, &value, &spill);
            (stream(&value, "stdout").0.to_owned(), spill)
        };
        let bytes = std::fs::read(&copy).expect("copy");
        assert_eq!(bytes.len(), 1_048_576);
        assert!(spill.ends_with("-stdout.log"), "{spill}");
        assert!(std::fs::read(&spill).expect("spill") == bytes, "the spill file holds the complete stream");
        assert_decoded_tail(&tail, &bytes);
    }
}

/// Lone continuation bytes, a truncated sequence, an encoded surrogate and an incomplete
/// character at end of stream.
const INVALID_UTF8: &str = r"printf 'a\xff\xfeb\xc3(\xed\xa0\x80z\xf0\x9f\x98'";

#[tokio::test]
async fn invalid_utf8_decodes_to_replacement_characters() {
    let l = Local::new();
    let expected = String::from_utf8_lossy(b"a\xff\xfeb\xc3(\xed\xa0\x80z\xf0\x9f\x98").into_owned();
    assert_eq!(expected, "a\u{FFFD}\u{FFFD}b\u{FFFD}(\u{FFFD}\u{FFFD}\u{FFFD}z\u{FFFD}");
    let (text, value) = l.foreground(INVALID_UTF8).await;
    assert_eq!(text, expected);
    assert_eq!(stream(&value, "stdout"), (expected.as_str(), false, None));
    let id = l.start(INVALID_UTF8).await;
    assert_eq!(l.finish(&id).await, expected, "the held-back incomplete character is flushed at exit");
}

#[tokio::test]
async fn nul_bytes_pass_through_both_streams() {
    let l = Local::new();
    let command = r"printf 'a\0b\0\0c'; printf 'e\0rr' >&2";
    let (text, value) = l.foreground(command).await;
    assert_eq!(text, "a\0b\0\0c\n[stderr]\ne\0rr");
    assert_eq!(stream(&value, "stdout"), ("a\0b\0\0c", false, None));
    let id = l.start(command).await;
    assert_eq!(l.finish(&id).await, "a\0b\0\0c\n[stderr]\ne\0rr");
}

#[tokio::test]
async fn a_100_mb_line_keeps_the_tail_and_reports_the_spill_unavailable() {
    let l = Local::new();
    let command = "head -c 100M /dev/zero | tr '\\0' a";
    let tail = "a".repeat(CAP);
    let (text, value) = l.foreground(command).await;
    assert_eq!(stream(&value, "stdout"), (tail.as_str(), true, None), "longer than the spill cap");
    assert_eq!(text, format!("{tail}\n[output truncated; full output: (unavailable)]"));
    assert_eq!(l.spill_files(), Vec::<PathBuf>::new(), "the oversized spill was discarded");

    let id = l.start(command).await;
    assert_eq!(
        l.finish(&id).await,
        format!("{tail}\n[some output was dropped from memory; full output: (unavailable)]")
    );
    assert_eq!(l.spill_files(), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn a_long_line_within_the_spill_cap_is_spilled_completely() {
    let l = Local::new();
    let command = "head -c 5000000 /dev/zero | tr '\\0' b";
    let tail = "b".repeat(CAP);
    let (text, value) = l.foreground(command).await;
    let spill = stream(&value, "stdout").2.expect("spill").to_owned();
    assert_eq!(stream(&value, "stdout").0, tail);
    assert_truncated_render(&text, &value, &spill);
    let spilled = std::fs::read(&spill).expect("spill");
    assert!(spilled.len() == 5_000_000 && spilled.iter().all(|b| *b == b'b'), "complete spill");

    let id = l.start(command).await;
    let delta = l.finish(&id).await;
    let (read_tail, read_spill) = split_lossy_read(&delta);
    assert_eq!(read_tail, tail);
    assert_ne!(read_spill, spill, "each process spills to its own file");
    assert!(std::fs::read(read_spill).expect("spill") == spilled);
}

const PROGRESS: &str = r"for i in $(seq 1 200000); do printf '\r%d%%' $i; done";

fn progress_stream() -> String {
    (1..=200_000).map(|i| format!("\r{i}%")).collect()
}

#[tokio::test]
async fn carriage_return_progress_flood() {
    let l = Local::new();
    let expected = progress_stream();
    let (text, value) = l.foreground(PROGRESS).await;
    let (tail, _, spill) = stream(&value, "stdout");
    let spill = spill.expect("spill").to_owned();
    assert_eq!(tail, &expected[expected.len() - CAP..]);
    assert_truncated_render(&text, &value, &spill);
    assert!(std::fs::read_to_string(&spill).expect("spill") == expected, "complete spill");

    // In the background, read while the flood runs: every read is a contiguous piece of the
    // stream after the previous one (a lossy read skips ahead, a plain one continues exactly).
    let id = l.start(PROGRESS).await;
    let mut position = 0;
    let mut reads = 0;
    loop {
        let (delta, status) = l.read(&id).await;
        let (piece, lossy) = match delta.rsplit_once("\n[some output was dropped from memory; full output: ")
        {
            Some((piece, notice)) => {
                assert!(notice.ends_with("-stdout.log]"), "{notice}");
                (piece, true)
            }
            None => (delta.as_str(), false),
        };
        assert!(piece.len() <= CAP, "{} bytes in one read", piece.len());
        if lossy {
            let skip = expected[position..].find(piece).expect("a later piece of the stream");
            assert!(skip > 0, "a lossy read skipped something");
            position += skip;
        } else {
            assert!(expected[position..].starts_with(piece), "a plain read continues where the last ended");
        }
        position += piece.len();
        reads += 1;
        if status != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(position, expected.len(), "the reads reached the end of the stream in {reads} reads");
}

/// `x` then 30,000 euro signs: 90,001 bytes, so the 64,000-byte tail starts inside a character.
const EUROS: &str = r"printf x; yes € | tr -d '\n' | head -c 90000";

#[tokio::test]
async fn a_tail_cut_never_splits_a_character() {
    let l = Local::new();
    let kept = "€".repeat(CAP / 3);
    let (text, value) = l.foreground(EUROS).await;
    let spill = stream(&value, "stdout").2.expect("spill").to_owned();
    assert_eq!(stream(&value, "stdout").0, kept, "the cut skips the orphaned continuation byte");
    assert_truncated_render(&text, &value, &spill);
    assert_eq!(std::fs::read_to_string(&spill).expect("spill"), format!("x{}", "€".repeat(30_000)));

    let id = l.start(EUROS).await;
    let delta = l.finish(&id).await;
    assert_eq!(split_lossy_read(&delta).0, kept);
}

#[tokio::test]
async fn a_character_split_across_writes_reads_back_whole() {
    let l = Local::new();
    let id = l.start(r"printf '\xe2\x82'; sleep 0.2; printf '\xac'").await;
    let mut reads = Vec::new();
    loop {
        let (delta, status) = l.read(&id).await;
        reads.push(delta);
        if status != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(reads.iter().all(|r| !r.contains('\u{FFFD}')), "{reads:?}");
    assert_eq!(reads.concat(), "€");
}

#[tokio::test]
async fn a_read_between_the_halves_of_a_character_holds_the_start_back() {
    let l = Local::new();
    let fifo = l.scratch.path().join("fifo");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let id =
        l.start(&format!(r"printf 'a\xe2\x82'; read -r _ < {}; printf '\xac'", shell_quote(&fifo))).await;
    // The first piece the reader sees is `a`: the two bytes of `€` already written are held
    // back, never delivered as replacement characters.
    let first = loop {
        let (delta, status) = l.read(&id).await;
        assert_eq!(status, "running");
        if !delta.is_empty() {
            break delta;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(first, "a");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(l.read(&id).await, (String::new(), "running".to_owned()));
    // Release the command; the last byte completes the character.
    let writer = fifo.clone();
    tokio::task::spawn_blocking(move || std::fs::write(writer, "go\n"))
        .await
        .expect("join")
        .expect("write fifo");
    assert_eq!(l.finish(&id).await, "€");
    l.service.dispose().await;
}
