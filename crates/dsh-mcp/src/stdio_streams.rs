//! The process's stdin and stdout as the runtime's own non-blocking pipes.
//!
//! `tokio::io::stdin()` and `stdout()` hand every read and write to a thread of the blocking
//! pool and wake the task again when it is done: thread switches on every message, which
//! a host that answers in about a millisecond can measure. When stdin or stdout is a pipe
//! (as it is for every host that starts `dsh-bash` as a child), the pipe is opened once
//! more through `/proc/self/fd`, which gives a file description of its own: that one is
//! made non-blocking and read or written through the runtime's event loop. The descriptors
//! 0 and 1 keep their flags, so nothing that shares them (a parent, `2>&1`) sees a change.
//! Anything else is read and written as before: a terminal, a file, a socket, no `/proc`,
//! or a pipe that another user made (a pipe's inode belongs to its maker and is mode 0600,
//! so a harness running as another user than its client cannot open it again).

use std::os::fd::{OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;

/// Standard input: a reopened pipe, or tokio's stdin.
#[derive(Debug)]
pub enum StdinStream {
    /// The pipe on descriptor 0, opened again without blocking.
    Pipe(pipe::Receiver),
    /// Read on the blocking pool.
    Blocking(tokio::io::Stdin),
}

/// Standard output: a reopened pipe, or tokio's stdout.
#[derive(Debug)]
pub enum StdoutStream {
    /// The pipe on descriptor 1, opened again without blocking.
    Pipe(pipe::Sender),
    /// Written on the blocking pool.
    Blocking(tokio::io::Stdout),
}

/// Stdin and stdout for a line protocol. Call inside the runtime.
pub fn stdio_streams() -> (StdinStream, StdoutStream) {
    let stdin = reopen(0, false)
        .and_then(|fd| pipe::Receiver::from_owned_fd_unchecked(fd).ok())
        .map_or_else(|| StdinStream::Blocking(tokio::io::stdin()), StdinStream::Pipe);
    let stdout = reopen(1, true)
        .and_then(|fd| pipe::Sender::from_owned_fd_unchecked(fd).ok())
        .map_or_else(|| StdoutStream::Blocking(tokio::io::stdout()), StdoutStream::Pipe);
    (stdin, stdout)
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
            StdinStream::Blocking(stdin) => Pin::new(stdin).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for StdoutStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            StdoutStream::Pipe(pipe) => Pin::new(pipe).poll_write(cx, buf),
            StdoutStream::Blocking(stdout) => Pin::new(stdout).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StdoutStream::Pipe(pipe) => Pin::new(pipe).poll_flush(cx),
            StdoutStream::Blocking(stdout) => Pin::new(stdout).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StdoutStream::Pipe(pipe) => Pin::new(pipe).poll_shutdown(cx),
            StdoutStream::Blocking(stdout) => Pin::new(stdout).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A pipe is reopened as a description of its own: the original keeps blocking mode, and
    /// what one end writes the reopened other end reads.
    #[tokio::test]
    async fn a_pipe_is_reopened_without_changing_the_original() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (read, write) = std::io::pipe().expect("pipe");
        let reader = reopen(read.as_raw_fd(), false).expect("a pipe reopens");
        let writer = reopen(write.as_raw_fd(), true).expect("a pipe reopens");
        let flags = |fd: RawFd| {
            let flags = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).expect("fdinfo");
            let octal =
                flags.lines().find_map(|l| l.strip_prefix("flags:")).expect("flags").trim().to_owned();
            i32::from_str_radix(&octal, 8).expect("octal")
        };
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

    #[test]
    fn what_is_not_a_pipe_is_not_reopened() {
        let file = tempfile::tempfile().expect("file");
        assert!(reopen(file.as_raw_fd(), false).is_none());
        let (socket, _other) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        assert!(reopen(socket.as_raw_fd(), false).is_none());
    }
}
