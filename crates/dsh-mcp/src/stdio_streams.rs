//! The process's stdin and stdout as the runtime's own non-blocking pipes.
//!
//! `tokio::io::stdin()` and `stdout()` hand every read and write to a thread of the blocking
//! pool and wake the task again when it is done: thread switches on every message, which
//! a host that answers in about a millisecond can measure. When stdin or stdout is a pipe
//! (as it is for every host that starts `dsh-bash` as a child), the pipe is opened once
//! more through `/proc/self/fd`, which gives a file description of its own: that one is
//! made non-blocking and read or written through the runtime's event loop. When one is a
//! socket (hosts built on libuv, Node.js among them, give their children socket pairs), a
//! duplicate is watched by the event loop and read and written with `MSG_DONTWAIT`, which
//! asks for a non-blocking call without changing the socket's flags. Either way the
//! descriptors 0 and 1 keep their flags, so nothing that shares them (a parent, `2>&1`)
//! sees a change. Anything else is read and written as before: a terminal, a file, a
//! socket that is not a stream, no `/proc`, or a pipe that another user made (a pipe's
//! inode belongs to its maker and is mode 0600, so a harness running as another user than
//! its client cannot open it again).

use std::os::fd::{OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;

/// After an answer was written to stdout: on a one-worker runtime (a stdio server's, or
/// `batch`'s) the upkeep after a call waits until its answer is written, and a client that
/// shares this CPU (as a scheduler that packs a machine's work onto few CPUs keeps it) and was
/// woken by the answer may still wait behind that upkeep. Giving up the CPU once lets it read
/// its answer first; alone on the CPU, this returns at once.
pub fn answer_written() {
    if tokio::runtime::Handle::current().metrics().num_workers() == 1 {
        std::thread::yield_now();
    }
}

/// Standard input: a reopened pipe, a socket, or tokio's stdin.
#[derive(Debug)]
pub enum StdinStream {
    /// The pipe on descriptor 0, opened again without blocking.
    Pipe(pipe::Receiver),
    /// The socket on descriptor 0, read without blocking.
    Socket(AsyncFd<OwnedFd>),
    /// Read on the blocking pool.
    Blocking(tokio::io::Stdin),
}

/// Standard output: a reopened pipe, a socket, or tokio's stdout.
#[derive(Debug)]
pub enum StdoutStream {
    /// The pipe on descriptor 1, opened again without blocking.
    Pipe(pipe::Sender),
    /// The socket on descriptor 1, written without blocking.
    Socket(AsyncFd<OwnedFd>),
    /// Written on the blocking pool.
    Blocking(tokio::io::Stdout),
}

/// Stdin and stdout for a line protocol. Call inside the runtime.
pub fn stdio_streams() -> (StdinStream, StdoutStream) {
    use std::os::fd::AsFd;
    let stdin = if let Some(fd) = reopen(0, false) {
        pipe::Receiver::from_owned_fd_unchecked(fd).ok().map(StdinStream::Pipe)
    } else {
        socket(std::io::stdin().as_fd()).map(StdinStream::Socket)
    };
    let stdout = if let Some(fd) = reopen(1, true) {
        pipe::Sender::from_owned_fd_unchecked(fd).ok().map(StdoutStream::Pipe)
    } else {
        socket(std::io::stdout().as_fd()).map(StdoutStream::Socket)
    };
    (
        stdin.unwrap_or_else(|| StdinStream::Blocking(tokio::io::stdin())),
        stdout.unwrap_or_else(|| StdoutStream::Blocking(tokio::io::stdout())),
    )
}

/// A duplicate of `fd` watched by the event loop, when `fd` is a stream socket.
fn socket(fd: std::os::fd::BorrowedFd<'_>) -> Option<AsyncFd<OwnedFd>> {
    use nix::sys::socket::{SockType, getsockopt, sockopt};
    if getsockopt(&fd, sockopt::SockType).ok()? != SockType::Stream {
        return None;
    }
    let duplicate = fd.try_clone_to_owned().ok()?;
    // Deprecated because a registered `T` that does not own its descriptor could see it closed
    // and reused while registered; an `OwnedFd` moved into the `AsyncFd` cannot. (The
    // replacement, `register_with_interest`, is `unsafe`, which this crate forbids.)
    #[allow(deprecated)]
    let registered =
        AsyncFd::with_interest(duplicate, tokio::io::Interest::READABLE | tokio::io::Interest::WRITABLE);
    registered.ok()
}

/// One non-blocking `recv` or `send` on a socket once the event loop says it is ready.
fn poll_socket<T>(
    socket: &AsyncFd<OwnedFd>,
    cx: &mut Context<'_>,
    interest: tokio::io::Interest,
    mut io: impl FnMut(RawFd) -> nix::Result<T>,
) -> Poll<std::io::Result<T>> {
    use std::os::fd::AsRawFd;
    loop {
        let mut ready = if interest.is_readable() {
            std::task::ready!(socket.poll_read_ready(cx))?
        } else {
            std::task::ready!(socket.poll_write_ready(cx))?
        };
        match ready.try_io(|fd| io(fd.get_ref().as_raw_fd()).map_err(std::io::Error::from)) {
            Ok(result) => return Poll::Ready(result),
            Err(_would_block) => continue,
        }
    }
}

/// The pipe on descriptor `fd` opened again (a new, non-blocking, close-on-exec file
/// description), or `None` when it is not a pipe or cannot be reopened.
fn reopen(fd: RawFd, write: bool) -> Option<OwnedFd> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let path = format!("/proc/self/fd/{fd}");
    let pipe = std::fs::metadata(&path).ok().filter(|meta| meta.file_type().is_fifo())?;
    let file = std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .ok()?;
    // The same pipe, not another file that took the number meanwhile.
    let same = file.metadata().is_ok_and(|meta| (meta.dev(), meta.ino()) == (pipe.dev(), pipe.ino()));
    same.then(|| OwnedFd::from(file))
}

impl AsyncRead for StdinStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StdinStream::Pipe(pipe) => Pin::new(pipe).poll_read(cx, buf),
            StdinStream::Socket(socket) => {
                use nix::sys::socket::{MsgFlags, recv};
                let unfilled = buf.initialize_unfilled();
                let n = std::task::ready!(poll_socket(socket, cx, tokio::io::Interest::READABLE, |fd| {
                    recv(fd, unfilled, MsgFlags::MSG_DONTWAIT)
                }))?;
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            StdinStream::Blocking(stdin) => Pin::new(stdin).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for StdoutStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            StdoutStream::Pipe(pipe) => Pin::new(pipe).poll_write(cx, buf),
            StdoutStream::Socket(socket) => {
                use nix::sys::socket::{MsgFlags, send};
                poll_socket(socket, cx, tokio::io::Interest::WRITABLE, |fd| {
                    send(fd, buf, MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL)
                })
            }
            StdoutStream::Blocking(stdout) => Pin::new(stdout).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StdoutStream::Pipe(pipe) => Pin::new(pipe).poll_flush(cx),
            StdoutStream::Socket(_) => Poll::Ready(Ok(())),
            StdoutStream::Blocking(stdout) => Pin::new(stdout).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StdoutStream::Pipe(pipe) => Pin::new(pipe).poll_shutdown(cx),
            StdoutStream::Socket(_) => Poll::Ready(Ok(())),
            StdoutStream::Blocking(stdout) => Pin::new(stdout).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// The status flags of descriptor `fd` of this process, as `/proc` shows them.
    fn flags(fd: RawFd) -> i32 {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).expect("fdinfo");
        let octal = info.lines().find_map(|l| l.strip_prefix("flags:")).expect("flags").trim().to_owned();
        i32::from_str_radix(&octal, 8).expect("octal")
    }

    /// A pipe is reopened as a description of its own: the original keeps blocking mode, and
    /// what one end writes the reopened other end reads.
    #[tokio::test]
    async fn a_pipe_is_reopened_without_changing_the_original() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (read, write) = std::io::pipe().expect("pipe");
        let reader = reopen(read.as_raw_fd(), false).expect("a pipe reopens");
        let writer = reopen(write.as_raw_fd(), true).expect("a pipe reopens");
        assert_eq!(flags(read.as_raw_fd()) & libc::O_NONBLOCK, 0, "the original still blocks");
        assert_eq!(flags(write.as_raw_fd()) & libc::O_NONBLOCK, 0, "the original still blocks");
        assert_ne!(flags(reader.as_raw_fd()) & libc::O_NONBLOCK, 0);
        let mut sender = pipe::Sender::from_owned_fd_unchecked(writer).expect("sender");
        let mut receiver = pipe::Receiver::from_owned_fd_unchecked(reader).expect("receiver");
        sender.write_all(b"line\n").await.expect("write");
        drop((sender, write));
        let mut text = String::new();
        receiver.read_to_string(&mut text).await.expect("read to the end");
        assert_eq!(text, "line\n");
        drop(read);
    }

    /// A socket (what libuv-based hosts give their children) is read and written without
    /// blocking, and its flags stay as they were.
    #[tokio::test]
    async fn a_socket_is_read_and_written_without_changing_its_flags() {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let mut reader = StdinStream::Socket(socket(theirs.as_fd()).expect("a stream socket"));
        let mut writer = StdoutStream::Socket(socket(theirs.as_fd()).expect("a stream socket"));
        assert_eq!(flags(theirs.as_raw_fd()) & libc::O_NONBLOCK, 0, "the original still blocks");
        ours.write_all(b"request\n").expect("write");
        let mut line = [0u8; 8];
        reader.read_exact(&mut line).await.expect("read");
        assert_eq!(&line, b"request\n");
        writer.write_all(b"answer\n").await.expect("write");
        writer.flush().await.expect("flush");
        let mut answer = [0u8; 7];
        ours.read_exact(&mut answer).expect("read");
        assert_eq!(&answer, b"answer\n");
        drop(ours);
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).await.expect("end of input");
        assert!(rest.is_empty());
    }

    #[test]
    fn what_is_not_a_pipe_is_not_reopened() {
        let file = tempfile::tempfile().expect("file");
        assert!(reopen(file.as_raw_fd(), false).is_none());
        let (socket, _other) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        assert!(reopen(socket.as_raw_fd(), false).is_none());
    }
}
