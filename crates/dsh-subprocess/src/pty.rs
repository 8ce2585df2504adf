//! Pseudo-terminals for children that need a terminal: opening the pair, and turning the
//! terminal's output stream into text.
//!
//! A child spawned with [`crate::SpawnSpec::pty`] gets the slave side as its stdin, stdout
//! and stderr; the harness keeps the master. Both descriptors are opened close-on-exec, so
//! no other child (started concurrently, directly or not) inherits them.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

/// The size of a pseudo-terminal, in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtySize {
    /// Rows (lines).
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl PtySize {
    /// 40 rows of 120 columns: the size every terminal job gets.
    pub const DEFAULT: PtySize = PtySize { rows: 40, cols: 120 };
}

impl Default for PtySize {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// An open pseudo-terminal pair.
pub(crate) struct Pty {
    /// The harness's side (non-blocking, close-on-exec).
    pub(crate) master: OwnedFd,
    /// The child's side (close-on-exec; the spawn duplicates it onto 0, 1 and 2).
    pub(crate) slave: OwnedFd,
    /// The slave's identity (`st_dev`, `st_ino`), to recognise it as another process's fd 0.
    pub(crate) slave_id: (u64, u64),
}

impl Pty {
    /// Opens a pair of `size` with the kernel's default line discipline settings (canonical
    /// input, echo, `ISIG`, `ONLCR`).
    pub(crate) fn open(size: PtySize) -> std::io::Result<Pty> {
        use nix::fcntl::OFlag;
        let flags = OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
        let master = nix::pty::posix_openpt(flags)?;
        nix::pty::grantpt(&master)?;
        nix::pty::unlockpt(&master)?;
        let name = nix::pty::ptsname_r(&master)?;
        // SAFETY: `into_raw_fd` hands over a descriptor `PtyMaster` owned; nothing else
        // owns or closes it.
        let master = unsafe { OwnedFd::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(master)) };
        let slave = nix::fcntl::open(name.as_str(), flags, nix::sys::stat::Mode::empty())?;
        let winsize = libc::winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ reads a `winsize` that lives across the call; the descriptor is
        // the master this function owns.
        if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &winsize) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fcntl on a descriptor this function owns.
        unsafe {
            let flags = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
            if flags < 0 || libc::fcntl(master.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let meta = std::fs::metadata(format!("/proc/self/fd/{}", slave.as_raw_fd()))?;
        Ok(Pty { master, slave, slave_id: (meta.dev(), meta.ino()) })
    }
}

/// The reply to a cursor position query (`ESC [ 6 n`): row 1, column 1, always.
pub(crate) const CURSOR_POSITION_REPLY: &[u8] = b"\x1b[1;1R";

/// Longest control string (OSC, DCS, …) followed before the filter gives up on its end and
/// shows what comes next again, so a stray `ESC ]` cannot hide the rest of the output.
const MAX_CONTROL_STRING: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ground,
    /// After one or more `\r` (counted in `returns`): dropped if `\n` follows.
    CarriageReturn,
    Escape,
    /// `ESC` then intermediates (`ESC ( B`), up to the final byte.
    EscapeIntermediate,
    /// `ESC [` parameters and intermediates, up to the final byte.
    Csi,
    /// `ESC ]`, `ESC P`, `ESC X`, `ESC ^`, `ESC _` up to `BEL` or `ESC \`.
    ControlString,
    /// `ESC` inside a control string (`ESC \` ends it).
    ControlStringEscape,
}

/// Turns a terminal's output stream into text.
///
/// The exact rule: every escape sequence is removed — CSI sequences (`ESC [` … final byte:
/// cursor movement, erasing, colours and other SGR attributes, mode switches, queries), control
/// strings (`ESC ]`, `ESC P`, `ESC X`, `ESC ^`, `ESC _`, up to `BEL` or `ESC \`) and the
/// other escape sequences (`ESC 7`, `ESC =`, `ESC ( B`, …) — and so is `BEL`; `\r` right
/// before `\n` (the line discipline's `ONLCR` makes `\n` into `\r\n`, and a program's own
/// `\r\n` into `\r\r\n`) is dropped. Everything else stays as written:
/// text, `\n`, a lone `\r`, backspaces, tabs. A cursor position query (`ESC [ 6 n`) is
/// answered with [`CURSOR_POSITION_REPLY`], so a program that asks does not wait forever.
#[derive(Debug)]
pub(crate) struct TerminalFilter {
    state: State,
    /// The CSI sequence's bytes after `ESC [` (only while short enough to be a query).
    csi: Vec<u8>,
    /// Bytes of the current control string.
    string_len: usize,
    /// `\r` held back in [`State::CarriageReturn`].
    returns: usize,
}

/// What one chunk of terminal output became.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Filtered {
    /// The text to collect.
    pub(crate) text: Vec<u8>,
    /// Bytes to write back to the terminal (answers to queries).
    pub(crate) reply: Vec<u8>,
}

impl Default for TerminalFilter {
    fn default() -> Self {
        Self { state: State::Ground, csi: Vec::new(), string_len: 0, returns: 0 }
    }
}

impl TerminalFilter {
    /// Filters the next chunk of the stream (a sequence may span chunks).
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Filtered {
        let mut out = Filtered { text: Vec::with_capacity(bytes.len()), reply: Vec::new() };
        for &b in bytes {
            self.byte(b, &mut out);
        }
        out
    }

    /// The end of the stream: a `\r` held back to see whether `\n` follows is text after all.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let state = std::mem::replace(&mut self.state, State::Ground);
        if state == State::CarriageReturn {
            vec![b'\r'; std::mem::take(&mut self.returns)]
        } else {
            Vec::new()
        }
    }

    fn byte(&mut self, b: u8, out: &mut Filtered) {
        match self.state {
            State::Ground => self.ground(b, out),
            State::CarriageReturn => match b {
                b'\r' => self.returns += 1,
                b'\n' => {
                    self.returns = 0;
                    self.state = State::Ground;
                    out.text.push(b);
                }
                _ => {
                    out.text.extend(std::iter::repeat_n(b'\r', std::mem::take(&mut self.returns)));
                    self.state = State::Ground;
                    self.ground(b, out);
                }
            },
            State::Escape => match b {
                b'[' => {
                    self.csi.clear();
                    self.state = State::Csi;
                }
                b']' | b'P' | b'X' | b'^' | b'_' => {
                    self.string_len = 0;
                    self.state = State::ControlString;
                }
                0x20..=0x2f => self.state = State::EscapeIntermediate,
                // Another ESC starts over; anything else ends the sequence.
                0x1b => {}
                _ => self.state = State::Ground,
            },
            State::EscapeIntermediate => match b {
                0x20..=0x2f => {}
                0x1b => self.state = State::Escape,
                _ => self.state = State::Ground,
            },
            State::Csi => match b {
                0x20..=0x3f => {
                    if self.csi.len() < 16 {
                        self.csi.push(b);
                    }
                }
                0x40..=0x7e => {
                    if b == b'n' && self.csi == b"6" {
                        out.reply.extend_from_slice(CURSOR_POSITION_REPLY);
                    }
                    self.state = State::Ground;
                }
                0x1b => self.state = State::Escape,
                // A control character inside a sequence aborts it (as terminals do for CAN
                // and SUB) and is itself kept when it is text-like.
                _ => {
                    self.state = State::Ground;
                    self.ground(b, out);
                }
            },
            State::ControlString => {
                self.string_len += 1;
                match b {
                    0x07 => self.state = State::Ground,
                    0x1b => self.state = State::ControlStringEscape,
                    _ if self.string_len > MAX_CONTROL_STRING => self.state = State::Ground,
                    _ => {}
                }
            }
            State::ControlStringEscape => {
                self.state = if b == b'\\' { State::Ground } else { State::ControlString };
            }
        }
    }

    fn ground(&mut self, b: u8, out: &mut Filtered) {
        match b {
            0x1b => self.state = State::Escape,
            b'\r' => {
                self.returns = 1;
                self.state = State::CarriageReturn;
            }
            0x07 => {}
            _ => out.text.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(chunks: &[&[u8]]) -> (String, Vec<u8>) {
        let mut filter = TerminalFilter::default();
        let mut text = Vec::new();
        let mut reply = Vec::new();
        for chunk in chunks {
            let out = filter.push(chunk);
            text.extend(out.text);
            reply.extend(out.reply);
        }
        text.extend(filter.finish());
        (String::from_utf8_lossy(&text).into_owned(), reply)
    }

    #[test]
    fn line_endings_become_newlines_and_lone_carriage_returns_stay() {
        assert_eq!(filter(&[b">>> print(1)\r\n1\r\n>>> "]).0, ">>> print(1)\n1\n>>> ");
        assert_eq!(filter(&[b"a\r", b"\nb\r\r\nc"]).0, "a\nb\nc");
        assert_eq!(filter(&[b"10%\r50%\r"]).0, "10%\r50%\r");
    }

    #[test]
    fn escape_sequences_are_removed_and_text_kept() {
        assert_eq!(filter(&[b"\x1b[1;31mred\x1b[0m plain"]).0, "red plain");
        assert_eq!(filter(&[b"a\x1b[2K\x1b[1G\x1b[?2004hb\x1b[?2004l"]).0, "ab");
        assert_eq!(filter(&[b"\x1b]0;title\x07x\x1b]8;;http://e\x1b\\y"]).0, "xy");
        assert_eq!(filter(&[b"\x1b7\x1b=\x1b(Bz\x1b8\x07"]).0, "z");
        assert_eq!(filter(&[b"\x1b[", b"3", b"1m", b"split"]).0, "split");
        assert_eq!(filter(&["é\x1b[Kü".as_bytes()]).0, "éü");
    }

    #[test]
    fn a_cursor_position_query_is_answered() {
        assert_eq!(filter(&[b"q\x1b[6nr"]), ("qr".to_owned(), CURSOR_POSITION_REPLY.to_vec()));
        assert_eq!(filter(&[b"\x1b[5n\x1b[c"]).1, Vec::<u8>::new());
    }

    #[test]
    fn an_unended_control_string_does_not_hide_the_rest() {
        let mut stream = b"\x1b]".to_vec();
        stream.extend(std::iter::repeat_n(b'x', MAX_CONTROL_STRING + 1));
        stream.extend(b"after");
        assert_eq!(filter(&[&stream]).0, "after");
    }
}
