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
    /// The write end of the child's stdin pipe, when the spawn kept it (non-blocking).
    stdin: parking_lot::Mutex<Option<std::os::fd::OwnedFd>>,
}

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
        }
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
    pub(crate) fn contain_leftovers(&self) {
        if let Some(reaper) = &self.reaper {
            crate::containment::forget_spawned(self.pid);
            crate::containment::kill_leftovers(self.pid);
            reaper.wake();
        }
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
    /// ([`crate::SpawnSpec::keep_stdin`]). Never blocks: input the child does not read fast
    /// enough to fit in the pipe is refused (`WouldBlock`), whole or in the part not written.
    pub fn write_stdin(&self, bytes: &[u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let guard = self.inner.stdin.lock();
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

    /// Closes the child's stdin (it reads end of file); `true` if it was open.
    pub fn close_stdin(&self) -> bool {
        self.inner.stdin.lock().take().is_some()
    }

    /// Whether the child's stdin is a pipe the caller still holds.
    pub fn has_stdin(&self) -> bool {
        self.inner.stdin.lock().is_some()
    }

    /// Whether a live process of the group is blocked right now reading its stdin from the
    /// pipe this handle holds: the kernel's own account (`/proc/<pid>/syscall` shows `read` on
    /// descriptor 0, and that descriptor is this pipe), not a guess from the output.
    pub fn blocked_on_stdin(&self) -> bool {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let inode = {
            let guard = self.inner.stdin.lock();
            let Some(fd) = guard.as_ref() else { return false };
            match std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())) {
                Ok(meta) => meta.ino(),
                Err(_) => return false,
            }
        };
        let pipe = format!("pipe:[{inode}]");
        crate::containment::tree_members(self.inner.pid).into_iter().any(|pid| {
            let reading = std::fs::read_to_string(format!("/proc/{pid}/syscall")).is_ok_and(|line| {
                let mut fields = line.split_whitespace();
                fields.next() == Some("0") && fields.next() == Some("0x0")
            });
            reading
                && std::fs::read_link(format!("/proc/{pid}/fd/0"))
                    .is_ok_and(|target| target.as_os_str() == pipe.as_str())
        })
    }

    /// Sends `SIGINT` to the process group (what `Ctrl-C` on a terminal does); `true` if it
    /// was delivered.
    pub fn interrupt(&self) -> bool {
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.inner.pid), nix::sys::signal::Signal::SIGINT)
            .is_ok()
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
