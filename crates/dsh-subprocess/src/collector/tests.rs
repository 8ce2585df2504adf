use std::io;
use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::retention::SpillRetention;
use crate::spill::{DefaultSpillNamer, SpillLocation};

fn factory(dir: &Path) -> SpillFactory {
    Arc::new(SpillLocation::new(
        Some(dir.to_path_buf()),
        Arc::new(DefaultSpillNamer),
        SpillRetention::unbounded(),
    ))
    .factory(None, None)
}

fn collector(cap: usize, spill: Option<u64>, dir: &Path) -> OutputCollector {
    OutputCollector::new(CaptureLimits::new("stdout", cap, spill), Some(factory(dir)))
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("read dir").map(|e| e.expect("entry").path()).collect();
    files.sort();
    files
}

#[test]
fn sp_03_collector_tail_and_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = collector(10, Some(100), dir.path());
    c.push(b"0123456789abcdef");
    c.finish();
    let out = c.collected();
    assert_eq!(out.text, "6789abcdef");
    assert!(out.truncated);
    let path = out.spill_path.expect("spill path");
    assert_eq!(std::fs::read(&path).expect("spill"), b"0123456789abcdef");

    let c = OutputCollector::new(CaptureLimits::new("stdout", 10, None), None);
    for chunk in [&b"aaaa"[..], b"bbbbbb", b"cc"] {
        c.push(chunk);
    }
    c.finish();
    assert_eq!(
        c.collected(),
        CollectedStream { text: "aabbbbbbcc".into(), truncated: true, spill_path: None, spill_error: None }
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let c = collector(10, Some(100), dir.path());
    c.push(b"aaaaa");
    assert_eq!(
        c.read_from(0),
        StreamRead {
            text: "aaaaa".into(),
            lossy: false,
            next_offset: 5,
            spill_path: None,
            spill_error: None
        }
    );
    c.push(b"bbbbb");
    let read = c.read_from(5);
    assert_eq!((read.text.as_str(), read.lossy, read.next_offset), ("bbbbb", false, 10));
    c.push(&[b'c'; 20]);
    let read = c.read_from(10);
    assert_eq!(read.text, "cccccccccc");
    assert!(read.lossy);
    assert_eq!(read.next_offset, 30);
    let path = read.spill_path.expect("spill path while open");
    assert_eq!(std::fs::read(path).expect("spill").len(), 30);
}

#[test]
fn sp_04_spill_cap_and_sealing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = collector(4, Some(8), dir.path());
    c.push(b"aaaa");
    c.push(b"bbbb");
    let path = c.read_from(0).spill_path.expect("spill after first overflow");
    assert_eq!(std::fs::read(&path).expect("spill"), b"aaaabbbb");
    c.push(b"c");
    c.push(b"dddd");
    c.finish();
    assert_eq!(
        c.collected(),
        CollectedStream { text: "dddd".into(), truncated: true, spill_path: None, spill_error: None }
    );
    assert!(!path.exists(), "abandoned spill must be deleted");
    assert!(files_in(dir.path()).is_empty());

    let dir = tempfile::tempdir().expect("tempdir");
    let c = collector(4, Some(4), dir.path());
    c.push(b"abcdefgh");
    c.finish();
    assert_eq!(
        c.collected(),
        CollectedStream { text: "efgh".into(), truncated: true, spill_path: None, spill_error: None }
    );
    assert!(files_in(dir.path()).is_empty(), "no file is ever created");
}

struct FailingClose(PathBuf);

impl SpillSink for FailingClose {
    fn path(&self) -> &Path {
        &self.0
    }
    fn write_all(&mut self, _bytes: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn close(self: Box<Self>) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
    fn discard(self: Box<Self>) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn sp_04_failing_close_withholds_the_spill_path() {
    let factory: SpillFactory =
        Arc::new(|_: &str| Ok(Box::new(FailingClose("/nonexistent/spill.log".into())) as _));
    let c = OutputCollector::new(CaptureLimits::new("stdout", 4, Some(100)), Some(factory));
    c.push(b"abcdefgh");
    assert_eq!(c.read_from(0).spill_path, Some(PathBuf::from("/nonexistent/spill.log")));
    c.finish();
    assert_eq!(
        c.collected(),
        CollectedStream { text: "efgh".into(), truncated: true, spill_path: None, spill_error: None }
    );
}

#[test]
fn exactly_the_cap_is_not_truncated_and_creates_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = collector(10, Some(100), dir.path());
    c.push(b"01234");
    c.push(b"56789");
    c.finish();
    assert_eq!(
        c.collected(),
        CollectedStream { text: "0123456789".into(), truncated: false, spill_path: None, spill_error: None }
    );
    assert!(files_in(dir.path()).is_empty());
}

#[test]
fn utf8_is_never_split_between_reads() {
    let c = OutputCollector::new(CaptureLimits::new("stdout", 100, None), None);
    let euro = "€".as_bytes();
    c.push(b"a");
    c.push(&euro[..1]);
    let first = c.read_from(0);
    assert_eq!((first.text.as_str(), first.next_offset), ("a", 1));
    c.push(&euro[1..2]);
    let again = c.read_from(first.next_offset);
    assert_eq!((again.text.as_str(), again.next_offset), ("", 1));
    c.push(&euro[2..]);
    c.push(b"b");
    let second = c.read_from(again.next_offset);
    assert_eq!((second.text.as_str(), second.next_offset), ("€b", 5));
    assert!(!second.lossy);
}

#[test]
fn utf8_incomplete_sequence_is_delivered_once_the_stream_ends() {
    let c = OutputCollector::new(CaptureLimits::new("stdout", 100, None), None);
    c.push(b"x\xE2\x82");
    assert_eq!(c.read_from(0).text, "x");
    c.finish();
    let read = c.read_from(1);
    assert_eq!(read.text, "\u{FFFD}");
    assert_eq!(read.next_offset, 3);
}

#[test]
fn utf8_is_never_split_at_the_tail_cut() {
    // 5 × "€" = 15 bytes; a cap of 10 cuts one byte into the second character.
    let c = OutputCollector::new(CaptureLimits::new("stdout", 10, None), None);
    c.push("€€€€€".as_bytes());
    c.finish();
    let out = c.collected();
    assert_eq!(out.text, "€€€");
    assert!(out.truncated);
    assert!(out.text.len() <= 10);

    let c = OutputCollector::new(CaptureLimits::new("stdout", 7, None), None);
    c.push("ab🦀cd".as_bytes()); // 8 bytes: the cut drops "a"
    c.push("🦀".as_bytes()); // cut lands inside the first crab
    c.finish();
    assert_eq!(c.collected().text, "cd🦀");
}

#[test]
fn memory_stays_within_the_cap() {
    let c = OutputCollector::new(CaptureLimits::new("stdout", 1000, None), None);
    let chunk = vec![b'z'; 333];
    for _ in 0..10_000 {
        c.push(&chunk);
    }
    let state = c.state.lock();
    assert_eq!(state.tail.len(), 1000);
    assert!(state.tail.capacity() < 2048, "capacity {}", state.tail.capacity());
    assert_eq!(state.total, 3_330_000);
}

#[test]
fn peek_tail_copies_only_the_end_and_stamps_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = collector(8, None, dir.path());
    let err = collector(8, None, dir.path());
    assert_eq!(out.peek_tail(4), TailPeek::default(), "nothing written yet");
    out.push(b"abc");
    let peek = out.peek_tail(4);
    assert_eq!((peek.bytes.as_slice(), peek.cut), (&b"abc"[..], false));
    err.push(b"x");
    assert!(err.written_at() > out.written_at(), "stderr written last");
    out.push(b"defghijk");
    assert!(out.written_at() > err.written_at(), "stdout written last");
    let peek = out.peek_tail(4);
    assert_eq!((peek.bytes.as_slice(), peek.cut), (&b"hijk"[..], true));
    let peek = out.peek_tail(100);
    assert_eq!((peek.bytes.as_slice(), peek.cut), (&b"defghijk"[..], true), "memory holds the last 8");
    assert_eq!(out.total(), 11, "a peek consumes nothing");
    assert_eq!(out.read_from(0).text, "defghijk");
}

fn redacting(cap: usize, dir: &Path) -> OutputCollector {
    let redactor = Arc::new(Redactor::new([("GITHUB_TOKEN", "ghp_secretvalue123")]).expect("redactor"));
    OutputCollector::with_redactor(
        CaptureLimits::new("stdout", cap, Some(1 << 20)),
        Some(factory(dir)),
        Some(&redactor),
    )
}

#[test]
fn redaction_reaches_the_tail_the_spill_file_reads_and_peeks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = redacting(16, dir.path());
    c.push(b"first line\nthe token is ghp_sec");
    // The possible start of the value waits; everything before it is collected.
    assert_eq!(c.read_from(0).text, "ne\nthe token is ", "the tail keeps the last 16 bytes");
    assert_eq!(c.total(), 24);
    assert_eq!(c.peek_tail(100).bytes, b"ne\nthe token is ");
    c.push(b"retvalue123 done\nghp_");
    let peek = c.peek_tail(100);
    assert_eq!(peek.bytes, b"HUB_TOKEN] done\n", "the peek sees the marker only");
    c.finish();
    let out = c.collected();
    assert_eq!(out.text, "TOKEN] done\nghp_", "an unfinished value is released at the end");
    let spill = std::fs::read_to_string(out.spill_path.expect("spill path")).expect("spill file");
    assert_eq!(spill, "first line\nthe token is [redacted:GITHUB_TOKEN] done\nghp_");
    assert_eq!(c.total(), spill.len() as u64);
}

#[test]
fn without_values_to_redact_the_collector_is_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = Arc::new(Redactor::empty());
    let c = OutputCollector::with_redactor(
        CaptureLimits::new("stdout", 64, None),
        Some(factory(dir.path())),
        Some(&empty),
    );
    assert!(c.redact.is_none());
    c.push(b"ghp_");
    assert_eq!(c.read_from(0).text, "ghp_");
}
