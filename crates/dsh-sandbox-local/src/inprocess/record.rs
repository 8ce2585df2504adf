//! A failure record the forked child writes and the parent reads after the spawn failed.
//!
//! The standard library only carries an errno from a failed pre-exec hook back to the parent,
//! which cannot tell "the confinement refused" from "exec failed". The child therefore writes
//! which step failed into a shared anonymous page before returning the error; the spawn's own
//! error pipe orders that write before the parent sees the failure.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// One step of the in-child confinement, packed with an index and an errno into the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Step {
    Unshare = 1,
    IdMap = 2,
    MakePrivate = 3,
    Bind = 4,
    ReadOnly = 5,
    Writable = 6,
    Chdir = 7,
    DropCaps = 8,
    NoNewPrivs = 9,
    Restrict = 10,
}

impl Step {
    pub(crate) fn from_u8(v: u8) -> Option<Step> {
        use Step::*;
        [Unshare, IdMap, MakePrivate, Bind, ReadOnly, Writable, Chdir, DropCaps, NoNewPrivs, Restrict]
            .into_iter()
            .find(|s| *s as u8 == v)
    }
}

/// A failed step as read back by the parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    pub step: Step,
    pub index: u32,
    pub errno: i32,
}

/// A page shared between the parent and the children forked while it lives.
#[derive(Debug)]
pub(crate) struct FailureRecord {
    slot: NonNull<AtomicU64>,
}

// SAFETY: the slot is an `AtomicU64` in a private mapping owned by this value; atomics are
// safe to share between threads.
unsafe impl Send for FailureRecord {}
// SAFETY: as above; every access goes through atomic operations.
unsafe impl Sync for FailureRecord {}

impl FailureRecord {
    pub(crate) fn new() -> std::io::Result<Self> {
        // SAFETY: an anonymous shared mapping of one page; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page_size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let slot = NonNull::new(ptr.cast::<AtomicU64>()).ok_or_else(std::io::Error::last_os_error)?;
        // SAFETY: the mapping is page-aligned, zero-filled and large enough for an AtomicU64.
        unsafe { slot.as_ref() }.store(0, Ordering::Relaxed);
        Ok(Self { slot })
    }

    /// Child side: record the first failure. Async-signal-safe (one atomic operation).
    pub(crate) fn set(&self, step: Step, index: usize, errno: i32) {
        let packed =
            (u64::from(step as u8) << 56) | (((index as u64) & 0x00FF_FFFF) << 32) | u64::from(errno as u32);
        // SAFETY: the slot stays mapped while `self` lives.
        let _ = unsafe { self.slot.as_ref() }.compare_exchange(0, packed, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Parent side: the recorded failure, if any.
    pub(crate) fn get(&self) -> Option<Failure> {
        // SAFETY: the slot stays mapped while `self` lives.
        let packed = unsafe { self.slot.as_ref() }.load(Ordering::SeqCst);
        let step = Step::from_u8((packed >> 56) as u8)?;
        Some(Failure { step, index: ((packed >> 32) & 0x00FF_FFFF) as u32, errno: packed as u32 as i32 })
    }
}

impl Drop for FailureRecord {
    fn drop(&mut self) {
        // SAFETY: unmapping the page this value mapped; nothing references it afterwards.
        unsafe {
            libc::munmap(self.slot.as_ptr().cast(), page_size());
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|s| *s >= 8).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_records_its_failure_for_the_parent() {
        let record = FailureRecord::new().unwrap();
        assert_eq!(record.get(), None);
        // SAFETY: the child only performs an atomic store and `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            record.set(Step::Bind, 2, libc::EPERM);
            record.set(Step::Restrict, 0, libc::EINVAL);
            // SAFETY: leaving the forked child without running destructors.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(record.get(), Some(Failure { step: Step::Bind, index: 2, errno: libc::EPERM }));
    }
}
