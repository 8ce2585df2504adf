//! Descriptors a child must never inherit.
//!
//! Whoever started the harness may have handed it descriptors (`dsh-bash call … 7>>file`); a
//! command must not be able to write through them. Every descriptor from 3 up is made
//! close-on-exec: once per process, for what the harness inherited; in every forked child
//! before any caller hook runs, and, on Linux, in the direct start's child after its `dup2`s.
//! Elsewhere, where that start is `posix_spawn` (no code of ours runs in the child), they are
//! marked in the parent just before the spawn, which leaves a window: a descriptor another thread opens without
//! close-on-exec between the mark and the spawn's `exec` is inherited (the standard library
//! and the runtime open every descriptor close-on-exec). Close-on-exec rather than close in a
//! forked child, so descriptors it still needs until `exec` (the standard library's exec-error
//! pipe, a sandbox's rule set) keep working.

use std::sync::Once;

static INHERITED: Once = Once::new();

/// Marks every descriptor `>= 3` of this process close-on-exec, once per process.
pub(crate) fn mark_inherited_cloexec() {
    INHERITED.call_once(|| {
        if close_range_cloexec().is_err() {
            mark_listed_fds();
        }
    });
}

/// Marks every descriptor `>= 3` of this process close-on-exec now: before a `posix_spawn`,
/// which runs no code in the child, so a descriptor opened without close-on-exec since the
/// harness started does not reach the program (on Linux the direct start's child closes them
/// itself instead). One system call where the kernel has `close_range`.
#[cfg(not(target_os = "linux"))]
pub(crate) fn mark_all_cloexec() {
    if close_range_cloexec().is_err() {
        mark_listed_fds();
    }
}

/// `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`; `Err` where the kernel lacks it (before 5.11).
#[cfg(target_os = "linux")]
fn close_range_cloexec() -> Result<(), ()> {
    // SAFETY: close_range takes no pointers; with CLOSE_RANGE_CLOEXEC it only sets a flag on
    // descriptors and closes none, so no descriptor another part of the process owns goes away.
    let rc = unsafe {
        libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC)
    };
    if rc == 0 { Ok(()) } else { Err(()) }
}

#[cfg(not(target_os = "linux"))]
fn close_range_cloexec() -> Result<(), ()> {
    Err(())
}

/// Sets `FD_CLOEXEC` on `fd` if it is open. Async-signal-safe.
fn set_cloexec(fd: libc::c_int) {
    // SAFETY: fcntl(F_GETFD/F_SETFD) only reads or sets the flag of a descriptor number; an
    // unused number fails with EBADF and nothing happens.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

/// The fallback of the parent: every descriptor listed in `/proc/self/fd`, else every number
/// below the descriptor limit.
fn mark_listed_fds() {
    match std::fs::read_dir("/proc/self/fd") {
        Ok(entries) => {
            let fds: Vec<libc::c_int> = entries
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .filter(|fd| *fd >= 3)
                .collect();
            // The directory's own descriptor is closed by now; it was close-on-exec anyway.
            fds.into_iter().for_each(set_cloexec);
        }
        Err(_) => mark_below_limit(),
    }
}

/// Every descriptor number from 3 below the soft descriptor limit (capped, so a huge limit
/// costs a bounded number of calls). Async-signal-safe.
fn mark_below_limit() {
    const CAP: libc::rlim_t = 1 << 16;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own and is async-signal-safe.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let max = if rc == 0 { limit.rlim_cur.min(CAP) } else { CAP };
    for fd in 3..max as libc::c_int {
        set_cloexec(fd);
    }
}

/// In a child before `exec` (forked, or the direct start's): marks every descriptor `>= 3`
/// close-on-exec.
/// Async-signal-safe (no allocation, no locks).
pub(crate) fn cloexec_from_3_in_child() {
    if close_range_cloexec().is_err() {
        mark_below_limit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn inherited_descriptors_become_close_on_exec() {
        let file = tempfile::tempfile().expect("tempfile");
        let fd = file.as_raw_fd();
        // SAFETY: clears the flag of a descriptor this test owns.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        // SAFETY: reads the flag of a descriptor this test owns.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC, 0);
        cloexec_from_3_in_child();
        // SAFETY: as above.
        assert_ne!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC, 0);
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        mark_listed_fds();
        // SAFETY: as above.
        assert_ne!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC, 0);
    }
}
