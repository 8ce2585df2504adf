//! Redaction of secret values in collected output.
//!
//! A [`Redactor`] is built once from `(name, value)` pairs (the values of the credentials the
//! environment scrub keeps from children, and any the host names) and shared with `Arc`.
//! Every occurrence of a value at least [`REDACT_MIN_LEN`] bytes long is replaced by
//! `[redacted:NAME]`; where occurrences overlap, the leftmost wins and, among those starting at
//! the same byte, the longest (`aho-corasick`'s leftmost-longest semantics).
//!
//! A stream is redacted chunk by chunk with a [`RedactStream`], which gives exactly the bytes
//! a redaction of the whole stream at once would give, however the stream is cut. It holds
//! back the end of a chunk only while that end could still become (part of) a secret: the
//! longest suffix that is a proper prefix of some value — never more than the longest value
//! less one byte — and releases it when the next chunk (or the end of the stream) decides it.
//! Output that ends in a newline is therefore never held (unless a value starts with one).
//!
//! Only the literal bytes of a value are found: a value that is base64-, hex-, URL- or
//! otherwise encoded, split by other bytes, or changed in any way is not redacted.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind, packed};

use crate::env::{AmbientEnv, is_credential};

/// Values shorter than this many bytes are never redacted (too likely to occur by chance).
pub const REDACT_MIN_LEN: usize = 8;

/// How many values one SIMD prefilter searcher takes (the packed searchers' limit). Teddy's
/// own heuristic stops at 64; measured on AVX2 with values of 8 bytes or more, one searcher of
/// 100 values (2.4 GB/s) beats two of 50 (1.4–1.9 GB/s).
const PACKED_GROUP: usize = 128;

/// Past this many prefilter groups (each one pass over the output), the automaton alone
/// decides: both are then about 0.25 GB/s.
const PACKED_MAX_GROUPS: usize = 16;

/// The replacement text for a value of the variable `name`: `[redacted:NAME]`.
pub fn redaction_marker(name: &str) -> String {
    format!("[redacted:{name}]")
}

/// A redactor refused to build (the matcher for its values could not be made).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the redaction matcher: {0}")]
pub struct RedactorError(String);

/// The values to redact and the matcher that finds them. Share it with `Arc`; stream state
/// lives in a [`RedactStream`]. Its `Debug` shows the variable names, never the values.
pub struct Redactor {
    /// `None` when there is nothing to redact.
    searcher: Option<AhoCorasick>,
    /// SIMD (Teddy) searchers for groups of at most [`PACKED_GROUP`] values, which say fast
    /// whether a buffer holds any value at all (the automaton runs only when one does); empty
    /// where the CPU has no Teddy, or past [`PACKED_MAX_GROUPS`] groups.
    packed: Vec<packed::Searcher>,
    /// The values, sorted and distinct; a pattern id is an index here.
    values: Vec<Vec<u8>>,
    /// The marker of each value, same index.
    markers: Vec<Vec<u8>>,
    /// The variable name behind each value, same index.
    names: Vec<String>,
    /// The longest value's length (0 without values).
    max_len: usize,
    /// Which bytes start some value: a held-back suffix must start with one.
    first_bytes: [bool; 256],
}

impl Redactor {
    /// A redactor that redacts nothing (and costs nothing).
    pub fn empty() -> Self {
        Self {
            searcher: None,
            packed: Vec::new(),
            values: Vec::new(),
            markers: Vec::new(),
            names: Vec::new(),
            max_len: 0,
            first_bytes: [false; 256],
        }
    }

    /// A redactor for `secrets`, `(name, value)` pairs. Values shorter than
    /// [`REDACT_MIN_LEN`] bytes are ignored; a value given twice keeps its first name.
    pub fn new<N, V>(secrets: impl IntoIterator<Item = (N, V)>) -> Result<Self, RedactorError>
    where
        N: Into<String>,
        V: AsRef<[u8]>,
    {
        let mut pairs: Vec<(Vec<u8>, String)> = Vec::new();
        for (name, value) in secrets {
            let value = value.as_ref();
            if value.len() >= REDACT_MIN_LEN && !pairs.iter().any(|(v, _)| v == value) {
                pairs.push((value.to_vec(), name.into()));
            }
        }
        Self::build(pairs)
    }

    /// This redactor's values and `value` (named `name`), whatever its length: a value known
    /// to be a secret (one a user typed for a command) is redacted even when short. Empty
    /// values and values already redacted add nothing.
    pub fn extended(&self, name: &str, value: &[u8]) -> Result<Self, RedactorError> {
        let mut pairs: Vec<(Vec<u8>, String)> =
            self.values.iter().cloned().zip(self.names.iter().cloned()).collect();
        if !value.is_empty() && !pairs.iter().any(|(v, _)| v == value) {
            pairs.push((value.to_vec(), name.to_owned()));
        }
        Self::build(pairs)
    }

    /// A redactor for distinct, non-empty `(value, name)` pairs.
    fn build(mut pairs: Vec<(Vec<u8>, String)>) -> Result<Self, RedactorError> {
        if pairs.is_empty() {
            return Ok(Self::empty());
        }
        pairs.sort();
        let (values, names): (Vec<Vec<u8>>, Vec<String>) = pairs.into_iter().unzip();
        let searcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&values)
            .map_err(|e| RedactorError(e.to_string()))?;
        let groups: Option<Vec<packed::Searcher>> = if values.len() <= PACKED_GROUP * PACKED_MAX_GROUPS {
            values
                .chunks(PACKED_GROUP)
                .map(|group| {
                    packed::Config::new().heuristic_pattern_limits(false).builder().extend(group).build()
                })
                .collect()
        } else {
            None
        };
        let mut first_bytes = [false; 256];
        for value in &values {
            first_bytes[usize::from(value[0])] = true;
        }
        Ok(Self {
            searcher: Some(searcher),
            packed: groups.unwrap_or_default(),
            max_len: values.iter().map(Vec::len).max().unwrap_or(0),
            markers: names.iter().map(|name| redaction_marker(name).into_bytes()).collect(),
            names,
            values,
            first_bytes,
        })
    }

    /// The redactor a harness starts with: from `ambient` (read once, now), the values of
    /// the credentials the scrub keeps from children when `scrubbed` is true, and the values
    /// of the variables called `names` (whatever their names look like). A variable scrubbed
    /// only because its name starts with `DSH_` (a stale managed value, not a credential) is
    /// not redacted unless it is named. Names are matched exactly; unset ones are skipped.
    pub fn from_env(ambient: &AmbientEnv, scrubbed: bool, names: &[String]) -> Result<Self, RedactorError> {
        let mut vars = ambient.vars();
        // The marker of a value shared by several variables names the first in name order.
        vars.sort();
        let chosen = vars.into_iter().filter(|(name, value)| {
            (scrubbed && is_credential(name, value)) || names.iter().any(|n| OsStr::new(n) == name)
        });
        Self::new(
            chosen.map(|(name, value)| (name.to_string_lossy().into_owned(), value.as_bytes().to_vec())),
        )
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.searcher.is_none()
    }

    /// How many distinct values are redacted.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The names of the redacted variables, one per distinct value (sorted by value).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// A fresh stream state over this redactor.
    pub fn stream(self: &Arc<Self>) -> RedactStream {
        RedactStream { redactor: Arc::clone(self), held: Vec::new(), joined: Vec::new(), out: Vec::new() }
    }

    /// `bytes` with every value replaced by its marker (borrowed when nothing was replaced).
    pub fn redact<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let mut out = Vec::new();
        match self.scan(bytes, true, &mut out) {
            Scan { matched: false, .. } => Cow::Borrowed(bytes),
            Scan { matched: true, .. } => Cow::Owned(out),
        }
    }

    /// `text` with every value replaced by its marker, matched without regard to ASCII case:
    /// for text the harness spelled itself from what a command gave it (a host name is
    /// reported lower-cased), where a value may stand in another case than it was given.
    pub fn redact_ignoring_ascii_case<'a>(&self, text: &'a str) -> Result<Cow<'a, str>, RedactorError> {
        if self.searcher.is_none() {
            return Ok(Cow::Borrowed(text));
        }
        let searcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .ascii_case_insensitive(true)
            .build(&self.values)
            .map_err(|e| RedactorError(e.to_string()))?;
        if !searcher.is_match(text) {
            return Ok(Cow::Borrowed(text));
        }
        let mut out = Vec::with_capacity(text.len());
        searcher.replace_all_with_bytes(text.as_bytes(), &mut out, |found, _, out| {
            out.extend_from_slice(&self.markers[found.pattern().as_usize()]);
            true
        });
        Ok(Cow::Owned(String::from_utf8_lossy(&out).into_owned()))
    }

    /// Redacts `input` up to the point where it is decided: everything, when `at_end`; else
    /// up to the earliest suffix that could still grow into a value. With a match, `out`
    /// holds the redacted decided part; without one it is untouched (the decided part is
    /// `input[..cut]` as it stands).
    fn scan(&self, input: &[u8], at_end: bool, out: &mut Vec<u8>) -> Scan {
        let Some(searcher) = &self.searcher else { return Scan { cut: input.len(), matched: false } };
        let mut cut = if at_end { input.len() } else { self.undecided_from(input, 0) };
        if !self.packed.is_empty() && self.packed.iter().all(|group| group.find(input).is_none()) {
            // The common case, output without a secret: the SIMD pass is all it costs.
            return Scan { cut, matched: false };
        }
        let mut emitted = 0;
        let mut matched = false;
        for found in searcher.find_iter(input) {
            // A match starting before the undecided suffix is final: nothing that follows can
            // make a longer or an earlier one there (either would start in the suffix).
            if found.start() >= cut {
                break;
            }
            if !matched {
                out.clear();
                matched = true;
            }
            out.extend_from_slice(&input[emitted..found.start()]);
            out.extend_from_slice(&self.markers[found.pattern().as_usize()]);
            emitted = found.end();
            if emitted > cut {
                // The match swallowed the suffix thought undecided: look again after it.
                cut = self.undecided_from(input, emitted);
            }
        }
        if matched {
            out.extend_from_slice(&input[emitted..cut]);
        }
        Scan { cut, matched }
    }

    /// The earliest position at or after `from` whose suffix is a proper prefix of a value
    /// (it may yet become one, or a longer one), or `input.len()`.
    fn undecided_from(&self, input: &[u8], from: usize) -> usize {
        let len = input.len();
        let start = from.max(len.saturating_sub(self.max_len.saturating_sub(1)));
        (start..len)
            .find(|&at| self.first_bytes[usize::from(input[at])] && self.is_proper_prefix(&input[at..]))
            .unwrap_or(len)
    }

    /// Whether some value is longer than `bytes` and starts with it.
    fn is_proper_prefix(&self, bytes: &[u8]) -> bool {
        // Values starting with `bytes` sort together, from the first one not below it; only
        // one value can equal `bytes`, so the first two tell.
        let at = self.values.partition_point(|value| value.as_slice() < bytes);
        self.values[at..].iter().take(2).any(|value| value.len() > bytes.len() && value.starts_with(bytes))
    }
}

struct Scan {
    /// Where the decided part of the input ends.
    cut: usize,
    /// Whether a value was replaced in the decided part.
    matched: bool,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor").field("names", &self.names).finish_non_exhaustive()
    }
}

/// The redaction state of one stream: feed it chunks in order, then [`RedactStream::finish`].
pub struct RedactStream {
    redactor: Arc<Redactor>,
    /// The undecided end of what was fed so far.
    held: Vec<u8>,
    /// `held` followed by the next chunk, while they are searched together.
    joined: Vec<u8>,
    /// The redacted output of the last call, when it had to be rewritten.
    out: Vec<u8>,
}

impl RedactStream {
    /// The redacted bytes that `chunk` decides, in order (possibly fewer than fed, possibly
    /// including bytes held back from earlier chunks). Without a held suffix or a match it is
    /// `chunk` itself (or a prefix of it), not a copy.
    pub fn feed<'a>(&'a mut self, chunk: &'a [u8]) -> &'a [u8] {
        let Self { redactor, held, joined, out } = self;
        if redactor.is_empty() {
            return chunk;
        }
        let input: &[u8] = if held.is_empty() {
            chunk
        } else {
            joined.clear();
            joined.extend_from_slice(held);
            joined.extend_from_slice(chunk);
            held.clear();
            joined
        };
        let scan = redactor.scan(input, false, out);
        held.extend_from_slice(&input[scan.cut..]);
        if scan.matched { out } else { &input[..scan.cut] }
    }

    /// The end of the stream: the held-back bytes, redacted (nothing more can complete them).
    pub fn finish(&mut self) -> &[u8] {
        let held = std::mem::take(&mut self.held);
        self.joined = held;
        let scan = self.redactor.scan(&self.joined, true, &mut self.out);
        if scan.matched { &self.out } else { &self.joined }
    }

    /// Continues the stream with `redactor` (one that knows more values): the bytes held back
    /// so far are searched again with the next chunk, under the new values.
    pub fn rebase(&mut self, redactor: Arc<Redactor>) {
        self.redactor = redactor;
    }

    /// How many bytes are held back, waiting for the next chunk.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }
}

impl std::fmt::Debug for RedactStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedactStream").field("held", &self.held.len()).finish_non_exhaustive()
    }
}

mod shared;
#[cfg(test)]
mod tests;

pub use shared::SharedRedactor;
pub(crate) use shared::SharedStream;
