//! The status frame the call script ends its stderr with, and the filter that takes it out.
//!
//! The frame is `\x1fdsh-status <fact> oom=<0|1>\n`, `<fact>` one of `exit=<n>`,
//! `signal=<n>`, `spawn=<ERRNO>`. The script also begins its stderr with
//! `\x1fdsh-status started\n`: from then on it runs on the far side, so a kill finds it (or
//! the command it starts), which a kill sent sooner might not. The filter passes stderr
//! through unchanged except for frames: bytes from the last `\x1f` on are held back only while they can still be the
//! start of a frame (live reads lag by at most one short frame), and a complete frame is
//! taken out and kept (the last one wins). Output after the frame is possible: a process
//! that was detached from the call (`DSH_DETACH=1`) may still write after the command ended.
//!
//! A command can print a frame of its own at the end of its stderr: the frame only states
//! facts about that command, which it could also bring about (`exit 7`, `kill -KILL $$`).

/// The byte that opens a frame (ASCII unit separator).
const MARK: u8 = 0x1f;
const PREFIX: &[u8] = b"\x1fdsh-status ";
/// The frame that says the call script runs.
const STARTED: &[u8] = b"\x1fdsh-status started\n";
/// The longest frame the filter holds back (`spawn=ENAMETOOLONG oom=1` is well within).
const MAX_FRAME: usize = 64;

/// The far side's account of how the command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FrameFact {
    /// It exited with this status.
    Exit(i32),
    /// This signal (number) ended it.
    Signal(i32),
    /// It never started: its working directory could not be entered (errno name).
    Spawn(String),
}

/// A parsed status frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StatusFrame {
    pub(crate) fact: FrameFact,
    /// The memory cgroup's out-of-memory kill counter rose while the command ran.
    pub(crate) out_of_memory: bool,
}

fn parse(frame: &[u8]) -> Option<StatusFrame> {
    let body = std::str::from_utf8(frame.strip_prefix(PREFIX)?.strip_suffix(b"\n")?).ok()?;
    let (fact, oom) = body.split_once(' ')?;
    let out_of_memory = match oom {
        "oom=0" => false,
        "oom=1" => true,
        _ => return None,
    };
    let (key, value) = fact.split_once('=')?;
    let fact = match key {
        "exit" => FrameFact::Exit(value.parse().ok()?),
        "signal" => FrameFact::Signal(value.parse().ok()?),
        "spawn" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_uppercase()) => {
            FrameFact::Spawn(value.to_owned())
        }
        _ => return None,
    };
    Some(StatusFrame { fact, out_of_memory })
}

/// Whether `held` (starting at a mark) may still grow into a frame.
fn may_be_frame(held: &[u8]) -> bool {
    if held.len() > MAX_FRAME {
        return false;
    }
    let common = held.len().min(PREFIX.len());
    if held[..common] != PREFIX[..common] {
        return false;
    }
    // A complete line is either the frame or not one.
    !held.contains(&b'\n') || held.ends_with(b"\n") && held.iter().filter(|b| **b == b'\n').count() == 1
}

/// Takes the status frame out of a stream.
#[derive(Default)]
pub(crate) struct FrameFilter {
    held: Vec<u8>,
    frame: Option<StatusFrame>,
    started: bool,
}

impl FrameFilter {
    /// Feeds a chunk; returns the bytes that are certainly output.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut pending = std::mem::take(&mut self.held);
        pending.extend_from_slice(chunk);
        if pending.contains(&MARK) {
            pending = self.take_frames(pending);
        }
        match pending.iter().rposition(|b| *b == MARK) {
            Some(at) if may_be_frame(&pending[at..]) => {
                self.held = pending.split_off(at);
                pending
            }
            _ => pending,
        }
    }

    /// Cuts every complete frame out of `bytes`, keeping the last.
    fn take_frames(&mut self, bytes: Vec<u8>) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len());
        let mut rest = &bytes[..];
        while let Some(at) = rest.iter().position(|b| *b == MARK) {
            out.extend_from_slice(&rest[..at]);
            rest = &rest[at..];
            if rest.starts_with(STARTED) {
                self.started = true;
                rest = &rest[STARTED.len()..];
                continue;
            }
            let end = rest.iter().take(MAX_FRAME).position(|b| *b == b'\n').map(|i| i + 1);
            match end.and_then(|end| parse(&rest[..end]).map(|frame| (end, frame))) {
                Some((end, frame)) => {
                    self.frame = Some(frame);
                    rest = &rest[end..];
                }
                None => {
                    out.push(MARK);
                    rest = &rest[1..];
                }
            }
        }
        out.extend_from_slice(rest);
        out
    }

    /// Whether the start frame came.
    pub(crate) fn started(&self) -> bool {
        self.started
    }

    /// The frame seen so far, if any.
    pub(crate) fn frame(&self) -> Option<&StatusFrame> {
        self.frame.as_ref()
    }

    /// The stream ended: the held bytes are output after all; the frame, if one came.
    pub(crate) fn finish(&mut self) -> (Vec<u8>, Option<StatusFrame>) {
        (std::mem::take(&mut self.held), self.frame.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&[u8]]) -> (Vec<u8>, Option<StatusFrame>) {
        let mut filter = FrameFilter::default();
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(filter.feed(chunk));
        }
        let (rest, frame) = filter.finish();
        out.extend(rest);
        (out, frame)
    }

    #[test]
    fn a_frame_at_the_end_is_taken_off_even_split_across_chunks() {
        let (out, frame) = run(&[b"err\n\x1fdsh-st", b"atus signal=15 o", b"om=1\n"]);
        assert_eq!(out, b"err\n");
        assert_eq!(frame, Some(StatusFrame { fact: FrameFact::Signal(15), out_of_memory: true }));
        let (out, frame) = run(&[b"\x1fdsh-status spawn=ENOENT oom=0\n"]);
        assert_eq!(out, b"");
        assert_eq!(frame.map(|f| f.fact), Some(FrameFact::Spawn("ENOENT".into())));
    }

    #[test]
    fn output_that_only_looks_like_a_frame_passes_unchanged() {
        for chunks in [
            &[&b"a\x1fb"[..]][..],
            &[b"\x1fdsh-status exit=x oom=0\n"],
            &[b"\x1fdsh-status exit=1 oom=2\n", b"x"],
            &[b"\x1fdsh-status exit=1 oom=0"],
        ] {
            let (out, frame) = run(chunks);
            assert_eq!(out, chunks.concat(), "{chunks:?}");
            assert_eq!(frame, None);
        }
    }

    #[test]
    fn output_after_the_frame_is_kept_and_the_last_frame_wins() {
        let (out, frame) =
            run(&[b"a\x1fdsh-status exit=1 oom=0\nmore", b"\x1fdsh-status exit=2 oom=0\nx\x1f"]);
        assert_eq!(out, b"amorex\x1f");
        assert_eq!(frame.map(|f| f.fact), Some(FrameFact::Exit(2)));
    }

    #[test]
    fn the_start_frame_is_taken_off_and_noted() {
        let mut filter = FrameFilter::default();
        assert_eq!(filter.feed(b"\x1fdsh-status sta"), b"");
        assert!(!filter.started());
        assert_eq!(filter.feed(b"rted\nerr\n"), b"err\n");
        assert!(filter.started());
        let (out, frame) = run(&[b"\x1fdsh-status started\nx\x1fdsh-status exit=3 oom=0\n"]);
        assert_eq!((out.as_slice(), frame.map(|f| f.fact)), (&b"x"[..], Some(FrameFact::Exit(3))));
    }

    #[test]
    fn nothing_is_held_back_without_a_mark() {
        let mut filter = FrameFilter::default();
        assert_eq!(filter.feed(b"line one\n"), b"line one\n");
        assert_eq!(filter.feed(b"partial"), b"partial");
        assert_eq!(filter.feed(b"\x1fdsh"), b"");
        assert_eq!(filter.feed(b"-x"), b"\x1fdsh-x");
    }
}
