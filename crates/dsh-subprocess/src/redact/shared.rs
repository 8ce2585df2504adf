//! A redactor that learns values while commands run.
//!
//! A secret a user types for a command (askpass) becomes known only once the command is
//! running and its output is being collected. A [`SharedRedactor`] holds the service's
//! current [`Redactor`]; adding a value replaces it, and every stream over it picks the new
//! one up before its next chunk. A value added before the command could have printed it is
//! therefore redacted in everything collected from then on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::RwLock;

use super::{RedactStream, Redactor, RedactorError};

/// The current redactor of a service, extended as secrets become known. Its `Debug` shows
/// the variable names, never the values.
#[derive(Debug)]
pub struct SharedRedactor {
    current: RwLock<Arc<Redactor>>,
    /// Whether values may be added while streams run (someone asked for it with
    /// [`SharedRedactor::expect_late_values`]); until then a stream is needed only when there
    /// are values already.
    late: AtomicBool,
    /// Bumped after each change of `current`, so streams notice with one atomic load.
    generation: AtomicU64,
}

impl SharedRedactor {
    /// Starts from `base`.
    pub fn new(base: Arc<Redactor>) -> Self {
        Self { current: RwLock::new(base), late: AtomicBool::new(false), generation: AtomicU64::new(0) }
    }

    /// Declares that values may be added while commands run: every stream started from now on
    /// follows this redactor, even while it has nothing to redact.
    pub fn expect_late_values(&self) {
        self.late.store(true, Ordering::Release);
    }

    /// Whether a stream started now needs redaction: there are values, or some may come.
    pub fn is_needed(&self) -> bool {
        self.late.load(Ordering::Acquire) || !self.current.read().is_empty()
    }

    /// The redactor in effect now.
    pub fn current(&self) -> Arc<Redactor> {
        Arc::clone(&self.current.read())
    }

    /// Redacts `value` as `[redacted:NAME]` from now on in every stream of this redactor,
    /// including the ones already running. See [`Redactor::extended`] for which values count.
    pub fn add(&self, name: &str, value: &[u8]) -> Result<(), RedactorError> {
        let mut current = self.current.write();
        let extended = current.extended(name, value)?;
        *current = Arc::new(extended);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// A fresh stream that follows this redactor.
    pub(crate) fn stream(self: &Arc<Self>) -> SharedStream {
        let seen = self.generation.load(Ordering::Acquire);
        SharedStream { stream: self.current().stream(), source: Arc::clone(self), seen }
    }
}

/// A [`RedactStream`] that switches to its [`SharedRedactor`]'s newer redactor before each
/// chunk.
#[derive(Debug)]
pub(crate) struct SharedStream {
    source: Arc<SharedRedactor>,
    seen: u64,
    stream: RedactStream,
}

impl SharedStream {
    fn refresh(&mut self) {
        let now = self.source.generation.load(Ordering::Acquire);
        if now != self.seen {
            self.seen = now;
            self.stream.rebase(self.source.current());
        }
    }

    /// See [`RedactStream::feed`].
    pub(crate) fn feed<'a>(&'a mut self, chunk: &'a [u8]) -> &'a [u8] {
        self.refresh();
        self.stream.feed(chunk)
    }

    /// See [`RedactStream::finish`].
    pub(crate) fn finish(&mut self) -> &[u8] {
        self.refresh();
        self.stream.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_added_mid_stream_is_redacted_from_the_next_chunk() {
        let shared = Arc::new(SharedRedactor::new(Arc::new(Redactor::empty())));
        let mut stream = shared.stream();
        assert_eq!(stream.feed(b"before pw1 "), b"before pw1 ");
        shared.add("askpass", b"pw1").expect("added");
        assert_eq!(stream.feed(b"echo pw1 and p"), b"echo [redacted:askpass] and ");
        assert_eq!(stream.finish(), b"p", "a held prefix is released at the end");
    }

    #[test]
    fn a_stream_is_needed_only_with_values_or_values_to_come() {
        let shared = SharedRedactor::new(Arc::new(Redactor::empty()));
        assert!(!shared.is_needed(), "nothing to redact: output is collected as it is");
        shared.expect_late_values();
        assert!(shared.is_needed());
        let base = Redactor::new([("TOKEN", "ghp_secretvalue123")]).expect("base");
        assert!(SharedRedactor::new(Arc::new(base)).is_needed());
    }

    #[test]
    fn added_values_keep_the_earlier_ones_and_ignore_empty_ones() {
        let base = Redactor::new([("TOKEN", "ghp_secretvalue123")]).expect("base");
        let shared = SharedRedactor::new(Arc::new(base));
        shared.add("askpass", b"").expect("nothing added");
        assert_eq!(shared.current().len(), 1);
        shared.add("askpass", b"short").expect("added");
        let current = shared.current();
        assert_eq!(current.len(), 2);
        assert_eq!(
            current.redact(b"ghp_secretvalue123 short").as_ref(),
            b"[redacted:TOKEN] [redacted:askpass]"
        );
    }
}
