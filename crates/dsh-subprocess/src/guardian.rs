//! The guardian: nothing a harness started outlives it, however the harness dies.
//!
//! The `atexit` hook ([`crate::exit_guard`]) covers a harness that exits; a harness killed by a
//! signal (`kill -9`, the OOM killer, a crash) runs no hook, and its commands would be
//! re-parented to init and run on. So the first spawn forks a small **guardian** process that
//! holds the read ends of two pipes whose write ends only the harness holds (close-on-exec, so
//! no command inherits them). On the first, the harness records each live group as it starts
//! and ends (8-byte records, never blocking). The guardian reads them in batches: idle, it
//! sleeps until a record comes; after each read it rests for [`DRAIN_INTERVAL_MS`], and the
//! records written meanwhile cost the harness one `write` that wakes nobody (the pipe is
//! widened to hold far more than arrive in that time). Throughout, it also waits on the second
//! pipe, on which nothing is ever written: when it reaches end of file — the harness is gone,
//! whether it exited or was killed — the guardian reads the last records and then:
//!
//! 1. lists every process (`/proc`), marks those in a live group or a live group's session,
//!    and every descendant of a marked process (by parent pid), sparing processes whose
//!    initial environment holds `DSH_DETACH=1` (and their descendants);
//! 2. stops the marked ones (`SIGSTOP`: a stopped process cannot fork), lists again to catch
//!    children forked meanwhile, stops those;
//! 3. lists a last time and kills every marked process and every live group (`SIGKILL`).
//!
//! It takes well under a second. The guardian runs in a session of its own (a signal to the
//! harness's process group or terminal does not reach it), ignores the termination signals,
//! and, forked from a possibly multi-threaded harness, only issues raw syscalls on memory the
//! harness allocated before forking.
//!
//! What it cannot see: a descendant that already left the tree before the harness died (it
//! was re-parented, so no parent link leads to it) and moved to a session of its own — while
//! the harness lives, containment kills such strays as they are orphaned.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, Ordering};

/// At most this many live groups are tracked at once (more are not guarded).
const MAX_GROUPS: usize = 16 * 1024;
/// At most this many processes are looked at per listing.
const MAX_PROCS: usize = 64 * 1024;
/// How long the guardian rests after reading records before it waits for more.
const DRAIN_INTERVAL_MS: i32 = 500;
/// The records pipe is widened to this (best effort): 131,072 records, far more than a
/// harness starts and ends groups in [`DRAIN_INTERVAL_MS`].
const RECORDS_PIPE_BYTES: i32 = 1 << 20;
/// `DSH_DETACH=1` and its terminator, as found in `/proc/<pid>/environ`.
const DETACH: &[u8] = b"DSH_DETACH=1\0";

/// The guardian's pid, once started (0 before, -1 when it could not start).
static GUARDIAN: AtomicI32 = AtomicI32::new(0);
/// The write ends of the pipes to the guardian.
static CHANNEL: OnceLock<Option<Channel>> = OnceLock::new();

/// What the harness holds of the guardian's pipes.
struct Channel {
    /// Live and gone groups are written here.
    records: OwnedFd,
    /// Never written: its end of file tells the guardian that the harness is gone.
    _life: OwnedFd,
}

/// One process as listed: pid, parent, group, session, and whether it is marked.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Proc {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    sid: i32,
    marked: bool,
    detached: bool,
}

/// Whether `pid` is the guardian (containment never treats it as a stray).
pub(crate) fn is_guardian(pid: i32) -> bool {
    pid > 0 && GUARDIAN.load(Ordering::Relaxed) == pid
}

/// The guardian's pid, when it runs.
pub fn guardian_pid() -> Option<i32> {
    let pid = GUARDIAN.load(Ordering::Relaxed);
    (pid > 0).then_some(pid)
}

/// Tells the guardian that group `pgid` is live (`true`) or gone (`false`); starts the
/// guardian on first use. Never blocks: a full pipe drops the record (logged).
pub(crate) fn tell(live: bool, pgid: i32) {
    let Some(channel) = CHANNEL.get_or_init(start) else { return };
    let mut record = [0u8; 8];
    record[..4].copy_from_slice(&i32::from(live).to_ne_bytes());
    record[4..].copy_from_slice(&pgid.to_ne_bytes());
    // SAFETY: writing a stack buffer to a descriptor this process owns.
    let written = unsafe { libc::write(channel.records.as_raw_fd(), record.as_ptr().cast(), record.len()) };
    if written != record.len() as isize {
        tracing::warn!(pgid, error = %std::io::Error::last_os_error(), "could not tell the guardian about a group");
    }
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Forks the guardian; `None` (logged) when it cannot start.
fn start() -> Option<Channel> {
    let pipes = pipe().and_then(|records| Ok((records, pipe()?)));
    let ((records_read, records), (life_read, life)) = match pipes {
        Ok(pipes) => pipes,
        Err(error) => {
            tracing::warn!(%error, "no guardian: cannot make its pipes");
            GUARDIAN.store(-1, Ordering::Relaxed);
            return None;
        }
    };
    // SAFETY: setting flags and the size of pipes this process owns. A pipe that cannot be
    // widened keeps its default size (64 KiB, 8,192 records).
    unsafe {
        libc::fcntl(records.as_raw_fd(), libc::F_SETPIPE_SZ, RECORDS_PIPE_BYTES);
        let flags = libc::fcntl(records.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(records.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        let flags = libc::fcntl(records_read.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(records_read.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    // Everything the guardian uses is allocated now, before the fork.
    let mut groups = vec![0i32; MAX_GROUPS].into_boxed_slice();
    let mut procs = vec![Proc::default(); MAX_PROCS].into_boxed_slice();
    let mut seen = vec![0i32; MAX_PROCS].into_boxed_slice();
    // SAFETY: the child only runs `guardian_main`: raw syscalls on the buffers allocated above
    // and on its stack, then `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "no guardian: fork failed");
        GUARDIAN.store(-1, Ordering::Relaxed);
        return None;
    }
    if pid == 0 {
        let channel = Inbound { records: records_read.as_raw_fd(), life: life_read.as_raw_fd() };
        guardian_main(channel, &mut groups, &mut procs, &mut seen);
    }
    drop((records_read, life_read));
    GUARDIAN.store(pid, Ordering::Relaxed);
    Some(Channel { records, _life: life })
}

/// The guardian's read ends.
#[derive(Clone, Copy)]
struct Inbound {
    records: RawFd,
    life: RawFd,
}

/// The live groups the guardian knows of.
struct Groups<'a> {
    slots: &'a mut [i32],
    count: usize,
}

impl Groups<'_> {
    /// Reads every record waiting in the pipe (it never blocks: the read end is
    /// non-blocking) and applies them in order.
    fn drain(&mut self, records: RawFd) {
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reading into a stack buffer from the inherited read end. Records are
            // written whole (8 bytes, at most `PIPE_BUF`), so a read of a multiple of 8 bytes
            // never splits one.
            let n = unsafe { libc::read(records, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                // SAFETY: reading the calling thread's errno.
                if n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR {
                    continue;
                }
                return;
            }
            for record in buf[..n as usize].chunks_exact(8) {
                let live = i32::from_ne_bytes([record[0], record[1], record[2], record[3]]) != 0;
                let pgid = i32::from_ne_bytes([record[4], record[5], record[6], record[7]]);
                self.apply(live, pgid);
            }
        }
    }

    fn apply(&mut self, live: bool, pgid: i32) {
        match (live, self.slots[..self.count].iter().position(|g| *g == pgid)) {
            (true, None) if self.count < self.slots.len() => {
                self.slots[self.count] = pgid;
                self.count += 1;
            }
            (false, Some(at)) => {
                self.slots[at] = self.slots[self.count - 1];
                self.count -= 1;
            }
            _ => {}
        }
    }
}

fn guardian_main(channel: Inbound, slots: &mut [i32], procs: &mut [Proc], seen: &mut [i32]) -> ! {
    // SAFETY: raw syscalls with constant or stack arguments; the process is single-threaded.
    unsafe {
        libc::setsid();
        libc::prctl(libc::PR_SET_NAME, c"dsh-guardian".as_ptr(), 0, 0, 0);
        for signal in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM, libc::SIGQUIT, libc::SIGPIPE, libc::SIGTSTP]
        {
            libc::signal(signal, libc::SIG_IGN);
        }
        // Keep the two read ends, close everything else.
        let (low, high) = (
            channel.records.min(channel.life) as libc::c_uint,
            channel.records.max(channel.life) as libc::c_uint,
        );
        if low > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, low - 1, 0u32);
        }
        if high > low + 1 {
            libc::syscall(libc::SYS_close_range, low + 1, high - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, high + 1, libc::c_uint::MAX, 0u32);
    }
    let mut groups = Groups { slots, count: 0 };
    // Nothing is ever written on the life pipe: any event on it is its end of file (or an
    // error on it, which ends the guardian's watch all the same).
    let harness_gone = |timeout: i32, with_records: bool| {
        let mut fds = [
            libc::pollfd { fd: channel.life, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: channel.records, events: libc::POLLIN, revents: 0 },
        ];
        let count = if with_records { 2 } else { 1 };
        // SAFETY: polling `count` descriptors described on the stack.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), count, timeout) };
        ready > 0 && fds[0].revents != 0
    };
    // Idle, the guardian sleeps until a record or the end comes. After each read it rests for
    // `DRAIN_INTERVAL_MS`, watching only for the end: the records written meanwhile wake
    // nobody and are read together.
    while !harness_gone(-1, true) {
        groups.drain(channel.records);
        if harness_gone(DRAIN_INTERVAL_MS, false) {
            break;
        }
    }
    groups.drain(channel.records);
    let count = groups.count;
    let groups = &groups.slots[..count];
    if !groups.is_empty() {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        // Marked once, marked for good: a stopped process whose parent died meanwhile (and so
        // was re-parented out of reach of the parent links) is still found by its pid.
        let mut seen_count = 0usize;
        for signal in [libc::SIGSTOP, libc::SIGSTOP, libc::SIGKILL] {
            let listed = list_processes(procs);
            mark(&mut procs[..listed], groups, me, &seen[..seen_count]);
            for p in procs[..listed].iter().filter(|p| p.marked) {
                if seen_count < seen.len() && !seen[..seen_count].contains(&p.pid) {
                    seen[seen_count] = p.pid;
                    seen_count += 1;
                }
                // SAFETY: signalling a pid listed a moment ago (stopped ones cannot exit).
                unsafe { libc::kill(p.pid, signal) };
            }
        }
        for pgid in groups {
            // SAFETY: signalling a group the harness reported live.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
    // SAFETY: leaving the guardian.
    unsafe { libc::_exit(0) }
}

/// Marks the processes of `groups` (by group or session), those marked in an earlier round
/// (`seen`), and their descendants, sparing opted-out ones, `me` and init.
fn mark(procs: &mut [Proc], groups: &[i32], me: i32, seen: &[i32]) {
    for p in procs.iter_mut() {
        p.marked = false;
        p.detached = opted_out(p.pid);
    }
    for p in procs.iter_mut() {
        let member = groups.contains(&p.pgrp) || groups.contains(&p.sid) || seen.contains(&p.pid);
        if p.pid > 1 && p.pid != me && !p.detached && member {
            p.marked = true;
        }
    }
    loop {
        let mut changed = false;
        for i in 0..procs.len() {
            if procs[i].marked || procs[i].detached || procs[i].pid <= 1 || procs[i].pid == me {
                continue;
            }
            let parent = procs[i].ppid;
            if procs.iter().any(|q| q.marked && q.pid == parent) {
                procs[i].marked = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// Lists every process into `procs`; returns how many.
fn list_processes(procs: &mut [Proc]) -> usize {
    // SAFETY: opening a constant path.
    let dir = unsafe { libc::open(c"/proc".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if dir < 0 {
        return 0;
    }
    let mut count = 0;
    let mut entries = [0u8; 8192];
    'read: loop {
        // SAFETY: getdents64 into a stack buffer of the given size.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, entries.as_mut_ptr(), entries.len()) };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        while at + 19 < n as usize {
            let reclen = u16::from_ne_bytes([entries[at + 16], entries[at + 17]]) as usize;
            if reclen == 0 {
                break;
            }
            let name = &entries[at + 19..at + reclen];
            let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
            if let Some(pid) = parse_pid(name)
                && let Some(p) = read_stat(pid)
            {
                if count == procs.len() {
                    break 'read;
                }
                procs[count] = p;
                count += 1;
            }
            at += reclen;
        }
    }
    // SAFETY: closing the directory opened above.
    unsafe { libc::close(dir) };
    count
}

fn parse_pid(name: &[u8]) -> Option<i32> {
    if name.is_empty() || name.len() > 9 || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(name.iter().fold(0i32, |acc, d| acc * 10 + i32::from(d - b'0')))
}

/// `/proc/<pid>/<file>` into `path` (NUL-terminated); the length used.
fn proc_path(path: &mut [u8; 40], pid: i32, file: &[u8]) {
    let mut digits = [0u8; 10];
    let mut n = pid;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut at = 0;
    for b in b"/proc/" {
        path[at] = *b;
        at += 1;
    }
    for i in (0..len).rev() {
        path[at] = digits[i];
        at += 1;
    }
    path[at] = b'/';
    at += 1;
    for b in file {
        path[at] = *b;
        at += 1;
    }
    path[at] = 0;
}

/// Reads `/proc/<pid>/stat`: ppid, group and session.
fn read_stat(pid: i32) -> Option<Proc> {
    let mut path = [0u8; 40];
    proc_path(&mut path, pid, b"stat");
    let mut buf = [0u8; 1024];
    // SAFETY: opening a NUL-terminated stack path, reading into a stack buffer, closing.
    let n = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return None;
    }
    let text = &buf[..n as usize];
    // The command name may hold anything, so fields are counted from its closing ')'.
    let close = text.iter().rposition(|b| *b == b')')?;
    let mut fields = text[close + 1..].split(|b| *b == b' ').filter(|f| !f.is_empty());
    let _state = fields.next()?;
    let number = |f: &[u8]| -> Option<i32> {
        let (negative, digits) = match f.first() {
            Some(b'-') => (true, &f[1..]),
            _ => (false, f),
        };
        let value = parse_pid(digits)?;
        Some(if negative { -value } else { value })
    };
    let ppid = number(fields.next()?)?;
    let pgrp = number(fields.next()?)?;
    let sid = number(fields.next()?)?;
    Some(Proc { pid, ppid, pgrp, sid, marked: false, detached: false })
}

/// Whether `pid`'s initial environment holds `DSH_DETACH=1` (read in pieces, matched across
/// them).
fn opted_out(pid: i32) -> bool {
    let mut path = [0u8; 40];
    proc_path(&mut path, pid, b"environ");
    // SAFETY: opening a NUL-terminated stack path.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 4096];
    // How much of DETACH the bytes so far end with, as the start of an entry.
    let mut matched = 0usize;
    let mut at_entry_start = true;
    let mut found = false;
    'read: loop {
        // SAFETY: reading into a stack buffer from the descriptor opened above.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        for &b in &buf[..n as usize] {
            if matched > 0 || at_entry_start {
                if b == DETACH[matched] {
                    matched += 1;
                    if matched == DETACH.len() {
                        found = true;
                        break 'read;
                    }
                } else {
                    matched = 0;
                }
            }
            at_entry_start = b == 0;
        }
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_and_paths_are_read_without_allocation() {
        let me = std::process::id() as i32;
        let p = read_stat(me).expect("my own stat");
        assert_eq!(p.pid, me);
        // SAFETY: plain id getters.
        let (ppid, pgrp, sid) = unsafe { (libc::getppid(), libc::getpgrp(), libc::getsid(0)) };
        assert_eq!((p.ppid, p.pgrp, p.sid), (ppid, pgrp, sid));
        let mut path = [0u8; 40];
        proc_path(&mut path, 1234567, b"environ");
        assert_eq!(&path[..21], b"/proc/1234567/environ");
        assert_eq!(path[21], 0);
        assert_eq!(parse_pid(b"42"), Some(42));
        assert_eq!(parse_pid(b"self"), None);
    }

    #[test]
    fn listing_finds_this_process_and_marking_follows_parents() {
        let mut procs = vec![Proc::default(); MAX_PROCS];
        let listed = list_processes(&mut procs);
        let me = std::process::id() as i32;
        assert!(procs[..listed].iter().any(|p| p.pid == me), "listed {listed}");
        let mut tree = [
            Proc { pid: 100, ppid: 1, pgrp: 100, sid: 100, ..Proc::default() },
            Proc { pid: 101, ppid: 100, pgrp: 101, sid: 101, ..Proc::default() },
            Proc { pid: 102, ppid: 101, pgrp: 102, sid: 102, ..Proc::default() },
            Proc { pid: 200, ppid: 1, pgrp: 200, sid: 200, ..Proc::default() },
            Proc { pid: 300, ppid: 1, pgrp: 300, sid: 100, ..Proc::default() },
        ];
        // The pids do not exist here, so none reads as opted out.
        mark(&mut tree, &[100], 999_999, &[]);
        let marked: Vec<i32> = tree.iter().filter(|p| p.marked).map(|p| p.pid).collect();
        assert_eq!(marked, vec![100, 101, 102, 300]);
        // 102 lost its parent (re-parented to init) but was marked before.
        tree[2].ppid = 1;
        tree[1].pid = 0;
        mark(&mut tree, &[], 999_999, &[102]);
        let marked: Vec<i32> = tree.iter().filter(|p| p.marked).map(|p| p.pid).collect();
        assert_eq!(marked, vec![102]);
    }

    #[test]
    fn the_opt_out_is_found_only_as_a_whole_entry() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .env("X", "DSH_DETACH=1")
            .env("DSH_DETACH", "1")
            .spawn()
            .expect("sleep");
        // The spawn may return while the child is still becoming `sleep` (its environment
        // is then the parent's): look until it is.
        let pid = child.id() as i32;
        let detached = (0..100).any(|_| {
            opted_out(pid) || {
                std::thread::sleep(std::time::Duration::from_millis(10));
                false
            }
        });
        let _ = child.kill();
        let _ = child.wait();
        assert!(detached);
        let mut plain = std::process::Command::new("sleep")
            .arg("5")
            .env("X", "DSH_DETACH=1")
            .env_remove("DSH_DETACH")
            .spawn()
            .expect("sleep");
        let not = opted_out(plain.id() as i32);
        let _ = plain.kill();
        let _ = plain.wait();
        assert!(!not, "a value that merely contains the text is not the opt-out");
    }
}
