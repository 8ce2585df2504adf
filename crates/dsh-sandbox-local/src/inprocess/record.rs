//! A failure record the forked child writes and the parent reads after the spawn failed.
//!
//! The standard library only carries an errno from a failed pre-exec hook back to the parent,
//! which cannot tell "the confinement refused" from "exec failed". The child therefore writes
//! which step failed into shared memory before returning the error; the spawn's own error pipe
//! orders that write before the parent sees the failure.
//!
//! Mapping a shared page per spawn costs tens of microseconds (a shmem object, a fault, a
//! teardown), so records are slots of one process-wide shared page, handed out and returned
//! with atomics; only when every slot is taken does a record map a page of its own.

use std::ptr::NonNull;
use std::sync::OnceLock;
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
    /// Building the private `/dev`, `/tmp`, masks and protected paths (index: the item).
    World = 11,
    /// The per-command mount and PID namespaces, and the relay and init processes.
    PidNamespace = 12,
    MountProc = 13,
    Seccomp = 14,
    NewSession = 15,
    /// The `exec` of the command itself (reported as the spawn's error, never recorded).
    Exec = 16,
    /// `prctl(PR_SET_DUMPABLE, 1)` before writing the id maps of a new user namespace.
    Dumpable = 17,
    /// The network namespace: bringing its loopback up, making the proxy listener.
    Network = 18,
}

impl Step {
    pub(crate) fn from_u8(v: u8) -> Option<Step> {
        use Step::*;
        [
            Unshare,
            IdMap,
            MakePrivate,
            Bind,
            ReadOnly,
            Writable,
            Chdir,
            DropCaps,
            NoNewPrivs,
            Restrict,
            World,
            PidNamespace,
            MountProc,
            Seccomp,
            NewSession,
            Exec,
            Dumpable,
            Network,
        ]
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

/// Packs a failure into one word (`step << 56 | index << 32 | errno`); 0 means "none".
pub(crate) fn pack(step: Step, index: usize, errno: i32) -> u64 {
    (u64::from(step as u8) << 56) | (((index as u64) & 0x00FF_FFFF) << 32) | u64::from(errno as u32)
}

pub(crate) fn unpack(packed: u64) -> Option<Failure> {
    let step = Step::from_u8((packed >> 56) as u8)?;
    Some(Failure { step, index: ((packed >> 32) & 0x00FF_FFFF) as u32, errno: packed as u32 as i32 })
}

/// A shared anonymous page, never unmapped while a slot in it may be used.
#[derive(Debug)]
struct SharedPage {
    base: NonNull<AtomicU64>,
    len: usize,
}

// SAFETY: the page holds only atomics, accessed through atomic operations.
unsafe impl Send for SharedPage {}
// SAFETY: as above.
unsafe impl Sync for SharedPage {}

impl SharedPage {
    fn map() -> std::io::Result<Self> {
        let len = page_size();
        // SAFETY: an anonymous shared mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(ptr.cast::<AtomicU64>()).ok_or_else(std::io::Error::last_os_error)?;
        Ok(Self { base, len })
    }

    fn slots(&self) -> usize {
        self.len / std::mem::size_of::<AtomicU64>()
    }

    fn slot(&self, index: usize) -> &AtomicU64 {
        debug_assert!(index < self.slots());
        // SAFETY: the mapping is page-aligned, zero-filled, and `index` is within it.
        unsafe { &*self.base.as_ptr().add(index) }
    }

    fn unmap(&self) {
        // SAFETY: unmapping a page this value mapped; the caller guarantees no further use.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// The process-wide pool: one shared page of slots plus a bitmap of the taken ones.
#[derive(Debug)]
struct Pool {
    page: SharedPage,
    taken: Vec<AtomicU64>,
}

/// The pool, made on first use. Parent side only: a record keeps the `&'static Pool` it was
/// taken from, so the forked child never reaches this lazy initialiser.
fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let page = SharedPage::map().ok()?;
        let words = page.slots().div_ceil(64);
        Some(Pool { page, taken: (0..words).map(|_| AtomicU64::new(0)).collect() })
    })
    .as_ref()
}

impl Pool {
    fn take(&self) -> Option<usize> {
        let slots = self.page.slots();
        for (w, word) in self.taken.iter().enumerate() {
            let mut current = word.load(Ordering::Relaxed);
            loop {
                let free = !current;
                if free == 0 {
                    break;
                }
                let bit = free.trailing_zeros() as usize;
                let index = w * 64 + bit;
                if index >= slots {
                    break;
                }
                match word.compare_exchange_weak(
                    current,
                    current | (1 << bit),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(index),
                    Err(now) => current = now,
                }
            }
        }
        None
    }

    fn give_back(&self, index: usize) {
        self.taken[index / 64].fetch_and(!(1 << (index % 64)), Ordering::AcqRel);
    }
}

/// Where a record lives.
#[derive(Debug)]
enum Home {
    Pooled(&'static Pool, usize),
    Own(SharedPage),
}

/// One spawn's failure record.
#[derive(Debug)]
pub(crate) struct FailureRecord {
    home: Home,
}

impl FailureRecord {
    pub(crate) fn new() -> std::io::Result<Self> {
        let home = match pool().and_then(|p| Some((p, p.take()?))) {
            Some((pool, index)) => Home::Pooled(pool, index),
            None => Home::Own(SharedPage::map()?),
        };
        let record = Self { home };
        record.slot().store(0, Ordering::SeqCst);
        Ok(record)
    }

    /// The record's word: a plain read of fields set in the parent (async-signal-safe).
    fn slot(&self) -> &AtomicU64 {
        match &self.home {
            Home::Own(page) => page.slot(0),
            Home::Pooled(pool, index) => pool.page.slot(*index),
        }
    }

    /// Child side: record the first failure. Async-signal-safe (one atomic operation).
    pub(crate) fn set(&self, step: Step, index: usize, errno: i32) {
        let _ = self.slot().compare_exchange(0, pack(step, index, errno), Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Parent side: the recorded failure, if any.
    pub(crate) fn get(&self) -> Option<Failure> {
        unpack(self.slot().load(Ordering::SeqCst))
    }
}

impl Drop for FailureRecord {
    fn drop(&mut self) {
        match &self.home {
            Home::Own(page) => page.unmap(),
            Home::Pooled(pool, index) => pool.give_back(*index),
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

    #[test]
    fn every_step_round_trips_and_unknown_steps_are_none() {
        for v in 1..=18u8 {
            let step = Step::from_u8(v).expect("a step");
            assert_eq!(step as u8, v);
            assert_eq!(
                unpack(pack(step, 3, libc::EPERM)),
                Some(Failure { step, index: 3, errno: libc::EPERM })
            );
        }
        assert_eq!(Step::from_u8(17), Some(Step::Dumpable), "a failed PR_SET_DUMPABLE is not an unshare");
        assert_eq!(Step::from_u8(18), Some(Step::Network));
        assert_eq!(Step::from_u8(19), None);
        assert_eq!(unpack(u64::from(19u8) << 56), None);
    }

    #[test]
    fn slots_are_reused_cleared_and_overflow_gets_its_own_page() {
        let records: Vec<FailureRecord> =
            (0..page_size() / 8 + 3).map(|_| FailureRecord::new().unwrap()).collect();
        assert!(records.iter().any(|r| matches!(r.home, Home::Own(_))));
        for (i, r) in records.iter().enumerate() {
            r.set(Step::Chdir, i, 2);
        }
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.get(), Some(Failure { step: Step::Chdir, index: i as u32, errno: 2 }));
        }
        drop(records);
        let fresh = FailureRecord::new().unwrap();
        assert_eq!(fresh.get(), None);
        assert!(matches!(fresh.home, Home::Pooled(..)));
    }
}
