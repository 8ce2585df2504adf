//! Bounded capture of one output stream: an in-memory tail plus an optional spill file.
//!
//! Memory never holds more than the cap `M`: each chunk is appended and the head is cut so
//! the last `M` bytes remain. The first chunk that overflows memory opens a spill file and
//! writes the complete stream so far (at that moment memory still holds all of it), after
//! which every chunk is appended to the file. Once the stream grows past the spill cap `S`
//! the file is deleted and never reopened, so a spill path is only ever reported for a
//! complete stream. At settlement the file is sealed; a failing close withholds the path. A
//! spill file that could not be created or written (the directory full, removed, …), or that
//! was removed while open, is reported with a reason ([`StreamRead::spill_error`]) instead of
//! a path.
//!
//! With a [`Redactor`], every chunk passes through the stream's redaction state before any
//! of this: the tail, the spill file, reads, peeks and the totals only ever see redacted
//! bytes (a suffix that could still become a secret is held back until the next chunk or the
//! end of the stream decides it). Without one, chunks are taken as they come, uncopied.
//!
//! Reads are non-consuming and take a caller-owned offset. While the stream is open, an
//! incomplete trailing UTF-8 sequence is held back for the next read, and a window whose head
//! was cut starts on the next character boundary.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::watch;

#[cfg(test)]
use crate::redact::Redactor;
use crate::redact::{SharedRedactor, SharedStream};
use crate::spill::{SpillFactory, SpillSink};
use crate::utf8::{cut_head_len, incomplete_tail_len};

/// Caps for one collected stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureLimits {
    /// In-memory tail cap in bytes.
    pub memory_cap: usize,
    /// Spill cap in bytes; `None` disables spilling for this stream.
    pub spill_cap: Option<u64>,
    /// `stdout` or `stderr`: the last part of the spill file name.
    pub label: String,
}

impl CaptureLimits {
    /// Limits for the stream named `label` (`stdout`, `stderr`), caps in bytes.
    pub fn new(label: &str, memory_cap: usize, spill_cap: Option<u64>) -> Self {
        Self { memory_cap, spill_cap, label: label.to_owned() }
    }
}

/// One non-consuming read from an offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRead {
    /// The retained text from the offset on (lossily decoded; a partial trailing character is held back).
    pub text: String,
    /// Some bytes at or after the offset had already been dropped from memory.
    pub lossy: bool,
    /// Where the next read continues (held-back partial characters are not yet consumed).
    pub next_offset: u64,
    /// The spill file, while it is intact.
    pub spill_path: Option<PathBuf>,
    /// Why the complete stream could not be kept on disk, when a spill file could not be
    /// created or written, or was removed ([`SPILL_DIR_FULL`], [`SPILL_REMOVED`], or the
    /// error's text).
    pub spill_error: Option<String>,
}

/// [`StreamRead::spill_error`] when the spill directory's filesystem is full (exact).
pub const SPILL_DIR_FULL: &str = "the spill directory is full";
/// [`StreamRead::spill_error`] when the spill file or its directory was removed (exact).
pub const SPILL_REMOVED: &str = "the spill file or its directory was removed";

/// The reason a spill failure is reported with.
fn spill_failure(error: &std::io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => SPILL_DIR_FULL.to_owned(),
        Some(libc::ENOENT) => SPILL_REMOVED.to_owned(),
        // Described errors (opening the directory) keep only their kind.
        _ if error.kind() == std::io::ErrorKind::StorageFull => SPILL_DIR_FULL.to_owned(),
        _ if error.kind() == std::io::ErrorKind::NotFound => SPILL_REMOVED.to_owned(),
        _ => error.to_string(),
    }
}

/// Told the path of a spill file when it is opened.
pub type SpillPathObserver = Arc<dyn Fn(PathBuf) + Send + Sync>;

/// The final state of a stream after settlement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectedStream {
    /// The retained tail (the whole stream when not truncated).
    pub text: String,
    /// Some bytes were dropped from memory.
    pub truncated: bool,
    /// A sealed spill file holding the complete stream.
    pub spill_path: Option<PathBuf>,
    /// Why the complete stream could not be kept (see [`StreamRead::spill_error`]).
    pub spill_error: Option<String>,
}

enum Spill {
    /// No overflow yet.
    Idle,
    Open(Box<dyn SpillSink>),
    /// Past the spill cap, or the file could not be created or written: never again.
    Abandoned,
    /// Closed at settlement; the path survives only when the close succeeded.
    Sealed(Option<PathBuf>),
}

/// Stamps of the latest write to any collector of this process: comparing two collectors'
/// stamps tells which one was written last.
static WRITE_STAMP: AtomicU64 = AtomicU64::new(1);

/// The end of a stream as [`OutputCollector::peek_tail`] sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TailPeek {
    /// The last bytes retained in memory (at most the requested count).
    pub bytes: Vec<u8>,
    /// `bytes` does not start at the stream's first byte.
    pub cut: bool,
    /// When the stream was last written, comparable across collectors (greater is later);
    /// 0 when nothing was written yet.
    pub written_at: u64,
}

struct State {
    tail: VecDeque<u8>,
    total: u64,
    /// See [`TailPeek::written_at`].
    written_at: u64,
    spill: Spill,
    /// Why spilling failed (not set when the stream merely outgrew the spill cap).
    spill_error: Option<String>,
    finished: bool,
}

/// Collects one stream under [`CaptureLimits`]; shared by the pump and every reader.
pub struct OutputCollector {
    limits: CaptureLimits,
    factory: Option<SpillFactory>,
    state: Mutex<State>,
    /// Ticks when output arrives or the stream finishes, for waiters.
    progress: watch::Sender<()>,
    /// The stream's redaction state, when there are (or may come) values to redact. Only the
    /// pump (and settlement) take this lock, always before `state`'s.
    redact: Option<Mutex<SharedStream>>,
    /// Told when the spill file is opened.
    spill_observer: Mutex<Option<SpillPathObserver>>,
}

impl OutputCollector {
    #[cfg(test)]
    pub(crate) fn new(limits: CaptureLimits, factory: Option<SpillFactory>) -> Self {
        Self::with_redactor(limits, factory, None)
    }

    /// A collector whose chunks are redacted by `redactor` first (an empty one is ignored).
    #[cfg(test)]
    pub(crate) fn with_redactor(
        limits: CaptureLimits,
        factory: Option<SpillFactory>,
        redactor: Option<&Arc<Redactor>>,
    ) -> Self {
        let shared = redactor.filter(|r| !r.is_empty()).map(|r| Arc::new(SharedRedactor::new(Arc::clone(r))));
        Self::with_shared_redactor(limits, factory, shared.as_ref())
    }

    /// A collector whose chunks are redacted first by `redactor`, in its latest state before
    /// each chunk.
    pub(crate) fn with_shared_redactor(
        limits: CaptureLimits,
        factory: Option<SpillFactory>,
        redactor: Option<&Arc<SharedRedactor>>,
    ) -> Self {
        let spill =
            if limits.spill_cap.is_some() && factory.is_some() { Spill::Idle } else { Spill::Abandoned };
        let state = State {
            tail: VecDeque::new(),
            total: 0,
            written_at: 0,
            spill,
            spill_error: None,
            finished: false,
        };
        let redact = redactor.map(|r| Mutex::new(r.stream()));
        Self {
            limits,
            factory,
            state: Mutex::new(state),
            progress: watch::Sender::new(()),
            redact,
            spill_observer: Mutex::new(None),
        }
    }

    /// Calls `observer` with the spill file's path when it is opened — at once when it is
    /// open already (it may then be told twice). Replaces an earlier observer.
    pub fn watch_spill(&self, observer: SpillPathObserver) {
        let open = {
            let state = self.state.lock();
            *self.spill_observer.lock() = Some(Arc::clone(&observer));
            match &state.spill {
                Spill::Open(sink) => Some(sink.path().to_path_buf()),
                _ => None,
            }
        };
        if let Some(path) = open {
            observer(path);
        }
    }

    /// The caps this collector applies.
    pub fn limits(&self) -> &CaptureLimits {
        &self.limits
    }

    /// Total bytes collected so far (after redaction: bytes held back by it are not counted
    /// yet, and a replaced value counts as its marker).
    pub fn total(&self) -> u64 {
        self.state.lock().total
    }

    /// Takes in the next chunk of the stream (redacted first when there is a redactor).
    ///
    /// The pump of a process this crate spawned calls it; a process started elsewhere (on
    /// a remote host, in a container) is fed here by its own pump.
    pub fn push(&self, chunk: &[u8]) {
        match &self.redact {
            None => self.collect(chunk),
            Some(stream) => {
                let mut stream = stream.lock();
                let redacted = stream.feed(chunk);
                self.collect(redacted);
            }
        }
    }

    /// Takes in bytes that are final (redacted when there is a redactor).
    fn collect(&self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        let cap = self.limits.memory_cap;
        let mut state = self.state.lock();
        state.total += chunk.len() as u64;
        state.written_at = WRITE_STAMP.fetch_add(1, Ordering::Relaxed);
        let overflow = state.tail.len() + chunk.len() > cap;
        let was_idle = matches!(state.spill, Spill::Idle);
        if overflow || matches!(state.spill, Spill::Open(_)) {
            self.spill_chunk(&mut state, chunk);
        }
        let opened = match &state.spill {
            Spill::Open(sink) if was_idle => Some(sink.path().to_path_buf()),
            _ => None,
        };
        append_tail(&mut state.tail, chunk, cap);
        drop(state);
        if let Some(path) = opened
            && let Some(observer) = self.spill_observer.lock().clone()
        {
            observer(path);
        }
        // Waiters subscribe before they look at the state, so skipping the notification when
        // nobody listens cannot lose a wake-up; it keeps small chunks cheap.
        if self.progress.receiver_count() > 0 {
            self.progress.send_replace(());
        }
    }

    /// Resolves with the total once at least `bytes` have arrived or the stream is complete.
    pub async fn wait_for_total(&self, bytes: u64) -> u64 {
        let mut rx = self.progress.subscribe();
        loop {
            let (total, finished) = {
                let state = self.state.lock();
                (state.total, state.finished)
            };
            if total >= bytes || finished || rx.changed().await.is_err() {
                return total;
            }
        }
    }

    fn spill_chunk(&self, state: &mut State, chunk: &[u8]) {
        let Some(spill_cap) = self.limits.spill_cap else { return };
        if matches!(state.spill, Spill::Abandoned | Spill::Sealed(_)) {
            return;
        }
        if state.total > spill_cap {
            abandon(&mut state.spill);
            return;
        }
        if matches!(state.spill, Spill::Idle) {
            let Some(factory) = &self.factory else { return };
            match factory(&self.limits.label) {
                Ok(mut sink) => {
                    let (a, b) = state.tail.as_slices();
                    let written = sink.write_all(a).and_then(|()| sink.write_all(b));
                    state.spill = Spill::Open(sink);
                    if let Err(e) = written {
                        tracing::warn!(error = %e, "spill file write failed; abandoning it");
                        state.spill_error = Some(spill_failure(&e));
                        abandon(&mut state.spill);
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "spill file could not be created");
                    state.spill_error = Some(spill_failure(&e));
                    state.spill = Spill::Abandoned;
                    return;
                }
            }
        }
        if let Spill::Open(sink) = &mut state.spill
            && let Err(e) = sink.write_all(chunk)
        {
            tracing::warn!(error = %e, "spill file write failed; abandoning it");
            state.spill_error = Some(spill_failure(&e));
            abandon(&mut state.spill);
        }
    }

    /// Marks the stream complete and seals the spill file (no more bytes will arrive).
    /// Idempotent.
    pub fn finish(&self) {
        if let Some(stream) = &self.redact {
            let mut stream = stream.lock();
            if !self.state.lock().finished {
                // Whatever the redaction held back is decided now: nothing more will come.
                let rest = stream.finish();
                self.collect(rest);
            }
        }
        let mut state = self.state.lock();
        if state.finished {
            return;
        }
        state.finished = true;
        state.spill = match std::mem::replace(&mut state.spill, Spill::Abandoned) {
            // Removed while open (its directory deleted mid-run): the path names nothing.
            Spill::Open(sink) if sink.removed() => {
                state.spill_error = Some(SPILL_REMOVED.to_owned());
                abandon(&mut Spill::Open(sink));
                Spill::Sealed(None)
            }
            Spill::Open(sink) => {
                let path = sink.path().to_path_buf();
                match sink.close() {
                    Ok(()) => Spill::Sealed(Some(path)),
                    Err(e) => {
                        tracing::warn!(error = %e, path = %path.display(), "spill file close failed; withholding its path");
                        Spill::Sealed(None)
                    }
                }
            }
            Spill::Idle | Spill::Sealed(_) => Spill::Sealed(None),
            Spill::Abandoned => Spill::Abandoned,
        };
        drop(state);
        self.progress.send_replace(());
    }

    /// Reads from `offset` without consuming anything.
    pub fn read_from(&self, offset: u64) -> StreamRead {
        let state = self.state.lock();
        let retained = state.tail.len() as u64;
        let window_start = state.total - retained;
        let lossy = offset < window_start;
        let start = if lossy { 0 } else { (offset - window_start).min(retained) as usize };
        let mut bytes = copy_from(&state.tail, start);
        let head = if lossy { cut_head_len(&bytes) } else { 0 };
        let held = if state.finished { 0 } else { incomplete_tail_len(&bytes[head..]) };
        bytes.truncate(bytes.len() - held);
        let text = String::from_utf8_lossy(&bytes[head..]).into_owned();
        let removed = matches!(&state.spill, Spill::Open(sink) if sink.removed());
        StreamRead {
            text,
            lossy,
            next_offset: state.total - held as u64,
            spill_path: if removed { None } else { spill_path(&state.spill) },
            spill_error: if removed { Some(SPILL_REMOVED.to_owned()) } else { state.spill_error.clone() },
        }
    }

    /// The last at most `max_bytes` retained bytes, copied under the lock without touching
    /// the rest of the buffer, with the stamp of the latest write. Nothing is consumed.
    pub fn peek_tail(&self, max_bytes: usize) -> TailPeek {
        let state = self.state.lock();
        let bytes = copy_from(&state.tail, state.tail.len().saturating_sub(max_bytes));
        let cut = state.total > bytes.len() as u64;
        TailPeek { bytes, cut, written_at: state.written_at }
    }

    /// The stamp of the latest write (see [`TailPeek::written_at`]).
    pub fn written_at(&self) -> u64 {
        self.state.lock().written_at
    }

    /// The whole retained output with its truncation facts (the final result once settled).
    pub fn collected(&self) -> CollectedStream {
        let read = self.read_from(0);
        CollectedStream {
            text: read.text,
            truncated: read.lossy,
            spill_path: read.spill_path,
            spill_error: read.spill_error,
        }
    }
}

fn spill_path(spill: &Spill) -> Option<PathBuf> {
    match spill {
        Spill::Open(sink) => Some(sink.path().to_path_buf()),
        Spill::Sealed(path) => path.clone(),
        Spill::Idle | Spill::Abandoned => None,
    }
}

/// Closes and deletes an open spill file; the stream never spills again.
fn abandon(spill: &mut Spill) {
    if let Spill::Open(sink) = std::mem::replace(spill, Spill::Abandoned) {
        let path = sink.path().to_path_buf();
        if let Err(e) = sink.discard() {
            tracing::warn!(error = %e, path = %path.display(), "abandoned spill file could not be deleted");
        }
    }
}

/// Appends `chunk` and cuts the head so at most `cap` bytes remain, growing the buffer
/// geometrically but never past `cap`.
fn append_tail(tail: &mut VecDeque<u8>, chunk: &[u8], cap: usize) {
    if chunk.len() >= cap {
        tail.clear();
        let keep = &chunk[chunk.len() - cap..];
        reserve_bounded(tail, keep.len(), cap);
        tail.extend(keep);
        return;
    }
    let excess = (tail.len() + chunk.len()).saturating_sub(cap);
    if excess > 0 {
        tail.drain(..excess);
    }
    let needed = tail.len() + chunk.len();
    reserve_bounded(tail, needed, cap);
    tail.extend(chunk);
}

fn reserve_bounded(tail: &mut VecDeque<u8>, needed: usize, cap: usize) {
    if tail.capacity() >= needed {
        return;
    }
    let target = needed.max(tail.capacity().saturating_mul(2).min(cap));
    tail.reserve_exact(target - tail.len());
}

fn copy_from(tail: &VecDeque<u8>, start: usize) -> Vec<u8> {
    let (a, b) = tail.as_slices();
    let mut out = Vec::with_capacity(tail.len() - start);
    if start < a.len() {
        out.extend_from_slice(&a[start..]);
        out.extend_from_slice(b);
    } else {
        out.extend_from_slice(&b[start - a.len()..]);
    }
    out
}

#[cfg(test)]
mod tests;
