//! A spawned process: its collected streams, its settlement, and its termination.
//!
//! Settlement (the outcome) happens when the direct child has exited and its pipes reached
//! EOF, or `grace` after the exit if a descendant still holds them. The process *tree* is
//! tracked separately: the handle stays live in its service until no member of the group is
//! left, and a termination keeps escalating until then.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::collector::OutputCollector;
use crate::containment::Reaper;
use crate::service::LiveSet;
use crate::tree::{group_alive, signal_group};

/// How often a pending escalation or an exit waiter re-checks the tree.
const TREE_POLL: Duration = Duration::from_millis(15);

/// How a settled process ended: an exit code, or the name of the signal that killed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessOutcome {
    /// The exit code when the direct child exited normally; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    /// `SIGTERM`, `SIGKILL`, … when a signal ended the direct child.
    pub signal: Option<String>,
}

pub(crate) struct ProcessInner {
    pub(crate) id: u64,
    pub(crate) pid: i32,
    pub(crate) grace: Duration,
    pub(crate) stdout: OutputCollector,
    pub(crate) stderr: OutputCollector,
    runtime: tokio::runtime::Handle,
    leader_reaped: AtomicBool,
    escalating: AtomicBool,
    tree_gone: watch::Sender<bool>,
    outcome: watch::Sender<Option<ProcessOutcome>>,
    live: Weak<LiveSet>,
    /// Present when the service contains strays.
    reaper: Option<Arc<Reaper>>,
    /// The write end of the child's stdin pipe, when the spawn kept it, or a terminal's
    /// master (non-blocking).
    stdin: parking_lot::Mutex<Option<std::os::fd::OwnedFd>>,
    /// Set when the child runs on a terminal (`stdin` is then its master).
    terminal: std::sync::OnceLock<Terminal>,
    /// What the process used, set just before it settles.
    usage: std::sync::OnceLock<crate::ResourceUsage>,
}

/// What the harness knows of a child's terminal.
#[derive(Clone, Copy, Debug)]
struct Terminal {
    /// The slave's `st_dev` and `st_ino`.
    slave_id: (u64, u64),
    /// The terminal is the child's controlling terminal (its line discipline signals it).
    controlling: bool,
}

/// `Ctrl-C` and `Ctrl-D` as a terminal's line discipline reads them.
const INTERRUPT_CHAR: u8 = 0x03;
const END_OF_FILE_CHAR: u8 = 0x04;

impl ProcessInner {
    pub(crate) fn new(
        id: u64,
        pid: i32,
        grace: Duration,
        streams: (OutputCollector, OutputCollector),
        runtime: tokio::runtime::Handle,
        live: Weak<LiveSet>,
        reaper: Option<Arc<Reaper>>,
    ) -> Self {
        Self {
            id,
            pid,
            grace,
            stdout: streams.0,
            stderr: streams.1,
            runtime,
            leader_reaped: AtomicBool::new(false),
            escalating: AtomicBool::new(false),
            tree_gone: watch::Sender::new(false),
            outcome: watch::Sender::new(None),
            live,
            reaper,
            stdin: parking_lot::Mutex::new(None),
            terminal: std::sync::OnceLock::new(),
            usage: std::sync::OnceLock::new(),
        }
    }

    /// Keeps the master of the child's terminal (already non-blocking) as its input.
    pub(crate) fn keep_terminal(
        &self,
        master: std::os::fd::OwnedFd,
        slave_id: (u64, u64),
        controlling: bool,
    ) {
        let _ = self.terminal.set(Terminal { slave_id, controlling });
        *self.stdin.lock() = Some(master);
    }

    /// Writes `bytes` to the child's stdin or terminal without blocking: see
    /// [`ProcessHandle::write_stdin`].
    pub(crate) fn write_input(&self, bytes: &[u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let guard = self.stdin.lock();
        let Some(fd) = guard.as_ref() else {
            return Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "stdin is closed"));
        };
        let mut written = 0;
        while written < bytes.len() {
            let rest = &bytes[written..];
            // SAFETY: writing a live slice to a descriptor this process owns.
            let n = unsafe { libc::write(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                let error = std::io::Error::last_os_error();
                if error.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return if written > 0 && error.kind() == std::io::ErrorKind::WouldBlock {
                    Ok(written)
                } else {
                    Err(error)
                };
            }
            written += n as usize;
        }
        Ok(written)
    }

    /// Keeps the write end of the child's stdin (made non-blocking).
    pub(crate) fn keep_stdin(&self, fd: std::os::fd::OwnedFd) {
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on a descriptor this process owns.
        unsafe {
            let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        *self.stdin.lock() = Some(fd);
    }

    pub(crate) fn mark_leader_reaped(&self) {
        self.leader_reaped.store(true, Ordering::SeqCst);
    }

    /// With containment, the leader's exit ends the tree: what is left of its group is
    /// killed (opted-out members aside) and the reaper sweeps strays that left the group.
    /// Its one caller, the supervisor, has already forgotten the leader's pid as a spawn.
    pub(crate) fn contain_leftovers(&self) {
        if let Some(reaper) = &self.reaper {
            crate::containment::kill_leftovers(self.pid);
            reaper.after_exit();
        }
    }

    pub(crate) fn set_usage(&self, usage: crate::ResourceUsage) {
        let _ = self.usage.set(usage);
    }

    pub(crate) fn settle(&self, outcome: ProcessOutcome) {
        self.stdout.finish();
        self.stderr.finish();
        self.outcome.send_replace(Some(outcome));
    }

    fn is_tree_gone(&self) -> bool {
        *self.tree_gone.borrow()
    }

    /// Re-checks the tree; once absence is observed it is final and the group is forgotten.
    pub(crate) fn check_tree(&self) -> bool {
        if self.is_tree_gone() {
            return true;
        }
        if group_alive(self.pid, self.leader_reaped.load(Ordering::SeqCst)) {
            return false;
        }
        if !self.tree_gone.send_replace(true) {
            crate::exit_guard::unregister(self.pid);
            if let Some(live) = self.live.upgrade() {
                live.remove(self.id);
            }
        }
        true
    }

    /// Resolves once the tree is gone, polling at `TREE_POLL` at most `max_poll` apart.
    pub(crate) async fn observe_until_gone(&self, max_poll: Duration) {
        let mut gone = self.tree_gone.subscribe();
        let mut poll = TREE_POLL;
        while !self.check_tree() {
            tokio::select! {
                _ = tokio::time::sleep(poll) => {}
                _ = gone.wait_for(|g| *g) => {}
            }
            poll = (poll * 2).min(max_poll);
        }
    }

    /// SIGTERM to the group now, SIGKILL after `grace` if any member is still alive.
    pub(crate) fn terminate(self: &Arc<Self>) {
        if self.is_tree_gone() || self.escalating.swap(true, Ordering::SeqCst) {
            return;
        }
        signal_group(self.pid, Signal::SIGTERM);
        let inner = Arc::clone(self);
        self.runtime.spawn(async move { inner.escalate().await });
    }

    async fn escalate(&self) {
        let deadline = Instant::now() + self.grace;
        let mut gone = self.tree_gone.subscribe();
        loop {
            if self.check_tree() {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(TREE_POLL.min(deadline - now)) => {}
                _ = gone.wait_for(|g| *g) => return,
            }
        }
        // Absence observed at any point above cancels the SIGKILL (pid reuse safety).
        if !self.check_tree() {
            signal_group(self.pid, Signal::SIGKILL);
        }
        self.observe_until_gone(TREE_POLL).await;
    }
}

/// A spawned process. Cheap to clone; every clone is the same process.
#[derive(Clone)]
pub struct ProcessHandle {
    pub(crate) inner: Arc<ProcessInner>,
}

impl std::fmt::Debug for ProcessHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessHandle").field("pid", &self.inner.pid).finish_non_exhaustive()
    }
}

impl ProcessHandle {
    /// The direct child's pid, which is also its process-group id.
    pub fn pid(&self) -> u32 {
        self.inner.pid as u32
    }

    /// Starts the termination escalation: `SIGTERM` to the group, then `SIGKILL` after the
    /// grace period if any member is still alive (even after the direct child exited).
    /// Idempotent; a no-op once the tree is gone or an escalation is pending.
    pub fn terminate(&self) {
        self.inner.terminate();
    }

    /// Resolves with the outcome once the process has settled.
    pub async fn wait(&self) -> ProcessOutcome {
        let mut rx = self.inner.outcome.subscribe();
        let settled = rx.wait_for(Option::is_some).await;
        match settled.as_deref() {
            Ok(Some(outcome)) => outcome.clone(),
            // The sender lives as long as `self.inner`; this arm is unreachable in practice.
            _ => ProcessOutcome { exit_code: None, signal: Some("SIGKILL".to_owned()) },
        }
    }

    /// What the process (and, with limits, everything it started) used, once settled:
    /// see [`crate::ResourceUsage`].
    pub fn usage(&self) -> Option<crate::ResourceUsage> {
        self.inner.usage.get().cloned()
    }

    /// The outcome, once settled.
    pub fn outcome(&self) -> Option<ProcessOutcome> {
        self.inner.outcome.borrow().clone()
    }

    /// Whether the direct child has exited: a zombie waiting for its reap (looked at without
    /// reaping it), or reaped already (which its supervisor records just after). Once true
    /// it stays true. The process may still be unsettled: its pipes drain (or a descendant
    /// holds them) for up to the grace period.
    pub fn leader_exited(&self) -> bool {
        if self.inner.leader_reaped.load(Ordering::SeqCst) {
            return true;
        }
        // SAFETY: an all-zero `siginfo_t` is a valid value; `waitid` fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        // SAFETY: a non-blocking, non-reaping look at a child of this process.
        let looked = unsafe { libc::waitid(libc::P_PID, self.inner.pid as libc::id_t, &mut info, flags) };
        if looked != 0 {
            // ECHILD: our child is no longer there to wait for, so it was reaped (the
            // supervisor may not have recorded it yet).
            return std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD);
        }
        // SAFETY: a successful `waitid` sets `si_pid` (0 when the child is still running).
        unsafe { info.si_pid() != 0 }
    }

    /// Resolves `true` once no member of the process group is alive, or `false` if `cancel`
    /// is cancelled first.
    pub async fn wait_for_exit(&self, cancel: Option<&CancellationToken>) -> bool {
        if self.inner.check_tree() {
            return true;
        }
        let aborted = async {
            match cancel {
                Some(cancel) => cancel.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = self.inner.observe_until_gone(TREE_POLL) => true,
            () = aborted => self.inner.check_tree(),
        }
    }

    /// Whether the whole tree has been confirmed gone.
    pub fn is_tree_gone(&self) -> bool {
        self.inner.check_tree()
    }

    /// Writes `bytes` to the child's stdin, when the spawn kept it a pipe
    /// ([`crate::SpawnSpec::keep_stdin`]), or to its terminal ([`crate::SpawnSpec::pty`]: the
    /// line discipline echoes and edits it as typed input). Never blocks: input the child does
    /// not read fast enough to fit in the pipe (or the terminal's input queue) is refused
    /// (`WouldBlock`), whole or in the part not written.
    pub fn write_stdin(&self, bytes: &[u8]) -> std::io::Result<usize> {
        self.inner.write_input(bytes)
    }

    /// Ends the child's input: closes its stdin pipe (it reads end of file), or on a terminal
    /// types `Ctrl-D` (end of file when the line being typed is empty). `true` if the input
    /// was open (and, on a terminal, `Ctrl-D` was written).
    pub fn close_stdin(&self) -> bool {
        if self.is_terminal() {
            return matches!(self.inner.write_input(&[END_OF_FILE_CHAR]), Ok(1));
        }
        self.inner.stdin.lock().take().is_some()
    }

    /// Whether the child's stdin is a pipe (or terminal) the caller still holds.
    pub fn has_stdin(&self) -> bool {
        self.inner.stdin.lock().is_some()
    }

    /// Whether the child runs on a pseudo-terminal ([`crate::SpawnSpec::pty`]). Its stdout
    /// is then the terminal's output with escape sequences removed and `\r\n` turned into
    /// `\n` (the exact rule: see the `pty` module), and a cursor position query is answered
    /// with row 1, column 1.
    pub fn is_terminal(&self) -> bool {
        self.inner.terminal.get().is_some()
    }

    /// Whether a live process of the tree is blocked right now reading the stdin this handle
    /// holds (its pipe, or its terminal): the kernel's own account, not a guess from the
    /// output. `/proc/<pid>/syscall` shows `read` on descriptor 0, or `select`/`pselect6`
    /// watching descriptor 0 alone (how readline waits for a key), and that descriptor is
    /// this pipe or this terminal's slave.
    pub fn blocked_on_stdin(&self) -> bool {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let target = match self.inner.terminal.get() {
            Some(terminal) => terminal.slave_id,
            None => {
                let guard = self.inner.stdin.lock();
                let Some(fd) = guard.as_ref() else { return false };
                match std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())) {
                    Ok(meta) => (meta.dev(), meta.ino()),
                    Err(_) => return false,
                }
            }
        };
        crate::containment::recent_tree_members(self.inner.pid).into_iter().any(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/syscall")).is_ok_and(|line| waits_on_fd0(&line))
                && std::fs::metadata(format!("/proc/{pid}/fd/0"))
                    .is_ok_and(|meta| (meta.dev(), meta.ino()) == target)
        })
    }

    /// `Ctrl-C`: on the child's controlling terminal, types it (the line discipline sends
    /// `SIGINT` to the terminal's foreground process group); otherwise sends `SIGINT` to the
    /// process group. `true` if it was delivered.
    pub fn interrupt(&self) -> bool {
        if let Some(terminal) = self.inner.terminal.get() {
            if terminal.controlling {
                return matches!(self.inner.write_input(&[INTERRUPT_CHAR]), Ok(1));
            }
            // Not its controlling terminal (a runner started the command in a session of its
            // own): what the line discipline would reach is what reads the terminal below
            // the runner — signalling the runner itself would end the whole job.
            let readers = self.terminal_readers(terminal.slave_id);
            if !readers.is_empty() {
                let signal = nix::sys::signal::Signal::SIGINT;
                return readers
                    .into_iter()
                    .filter(|pid| nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), signal).is_ok())
                    .count()
                    > 0;
            }
        }
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.inner.pid), nix::sys::signal::Signal::SIGINT)
            .is_ok()
    }

    /// The live members of the tree but the leader that have the terminal `slave_id` as
    /// descriptor 0.
    fn terminal_readers(&self, slave_id: (u64, u64)) -> Vec<i32> {
        use std::os::unix::fs::MetadataExt;
        crate::containment::tree_members(self.inner.pid)
            .into_iter()
            .filter(|pid| *pid != self.inner.pid)
            .filter(|pid| {
                std::fs::metadata(format!("/proc/{pid}/fd/0"))
                    .is_ok_and(|meta| (meta.dev(), meta.ino()) == slave_id)
            })
            .collect()
    }

    /// The collected stdout.
    pub fn stdout(&self) -> &OutputCollector {
        &self.inner.stdout
    }

    /// The collected stderr.
    pub fn stderr(&self) -> &OutputCollector {
        &self.inner.stderr
    }

    /// The latest line of output (see [`crate::latest_line`]) of whichever stream was written
    /// last, else of the other one; `None` while neither has visible text. Peeks at the last
    /// [`crate::LATEST_LINE_WINDOW`] bytes of a stream's tail only; consumes nothing, so reads and
    /// the final result are unaffected. Cheap enough to call a few times per second.
    pub fn latest_output_line(&self) -> Option<String> {
        crate::latest_line::latest_output_line(&self.inner.stdout, &self.inner.stderr)
    }
}

/// Whether a `/proc/<pid>/syscall` line shows a process blocked waiting to read descriptor 0:
/// `read(0, …)`, or `select`/`pselect6` with one descriptor (so 0 alone) and a read set.
fn waits_on_fd0(line: &str) -> bool {
    let mut fields = line.split_whitespace();
    let (Some(nr), Some(arg0), Some(arg1)) = (fields.next(), fields.next(), fields.next()) else {
        return false;
    };
    let Ok(nr) = nr.parse::<libc::c_long>() else { return false };
    if nr == libc::SYS_read {
        return arg0 == "0x0";
    }
    #[cfg(target_arch = "x86_64")]
    let select = nr == libc::SYS_select || nr == libc::SYS_pselect6;
    #[cfg(not(target_arch = "x86_64"))]
    let select = nr == libc::SYS_pselect6;
    select && arg0 == "0x1" && arg1 != "0x0"
}

#[cfg(test)]
mod tests {
    use super::waits_on_fd0;

    #[test]
    fn only_reads_of_descriptor_zero_count_as_waiting() {
        let read = libc::SYS_read;
        let pselect = libc::SYS_pselect6;
        assert!(waits_on_fd0(&format!("{read} 0x0 0x55d0 0x1000 0x0 0x0 0x0 0x7ffd 0x7f00")));
        assert!(!waits_on_fd0(&format!("{read} 0x3 0x55d0 0x1000 0x0 0x0 0x0 0x7ffd 0x7f00")));
        assert!(waits_on_fd0(&format!("{pselect} 0x1 0x7ffe 0x0 0x0 0x0 0x7ffe 0x7ffe 0x7f00")));
        assert!(!waits_on_fd0(&format!("{pselect} 0x4 0x7ffe 0x0 0x0 0x0 0x7ffe 0x7ffe 0x7f00")));
        assert!(!waits_on_fd0(&format!("{pselect} 0x1 0x0 0x7ffe 0x0 0x0 0x7ffe 0x7ffe 0x7f00")));
        assert!(!waits_on_fd0("running"));
        assert!(!waits_on_fd0("35 0x7ffe 0x0 0x0 0x0 0x0 0x0 0x7ffe 0x7f00"));
    }
}
