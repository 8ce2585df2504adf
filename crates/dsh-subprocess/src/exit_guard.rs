//! Best-effort `SIGKILL` of every still-live group when the harness exits normally.
//!
//! Every group is registered from spawn until its whole tree is confirmed gone (never longer,
//! so a recycled pid is never signalled). An `atexit` hook, installed once, kills whatever is
//! still registered when the process exits through `exit` or a return from `main`. A crash or
//! a `SIGKILL` of the harness runs no hook: the [`crate::guardian`], told of every group here,
//! covers those.

use std::collections::BTreeSet;
use std::sync::Once;

use nix::sys::signal::Signal;
use parking_lot::Mutex;

static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
static INSTALL: Once = Once::new();

extern "C" fn kill_live_groups_at_exit() {
    // Never block at exit: another thread may hold the lock while the process goes down.
    if let Some(groups) = LIVE_GROUPS.try_lock() {
        for pgid in groups.iter() {
            crate::tree::signal_group(*pgid, Signal::SIGKILL);
        }
    }
    crate::containment::sweep_at_exit();
}

pub(crate) fn register(pgid: i32) {
    INSTALL.call_once(|| {
        // SAFETY: `atexit` only records a function pointer; the hook is a plain `extern "C"`
        // function that takes no borrowed state and never blocks.
        let rc = unsafe { libc::atexit(kill_live_groups_at_exit) };
        if rc != 0 {
            tracing::warn!("could not install the exit hook that kills live process groups");
        }
    });
    LIVE_GROUPS.lock().insert(pgid);
    crate::guardian::tell(true, pgid);
}

pub(crate) fn unregister(pgid: i32) {
    if LIVE_GROUPS.lock().remove(&pgid) {
        crate::guardian::tell(false, pgid);
    }
}

/// Whether `pgid` is the group of a tree that is not confirmed gone yet.
pub(crate) fn is_live_group(pgid: i32) -> bool {
    LIVE_GROUPS.lock().contains(&pgid)
}

/// [`is_live_group`] without waiting for the lock: `None` when another thread holds it (at
/// exit, where nothing may block).
pub(crate) fn try_is_live_group(pgid: i32) -> Option<bool> {
    LIVE_GROUPS.try_lock().map(|groups| groups.contains(&pgid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_path_never_waits_for_the_lock() {
        // A group id no process can have (above pid_max), so the exit hook signals nothing.
        let pgid = i32::MAX - 7;
        register(pgid);
        assert_eq!(try_is_live_group(pgid), Some(true));
        let held = LIVE_GROUPS.lock();
        let answer = std::thread::spawn(move || try_is_live_group(pgid)).join().expect("thread");
        assert_eq!(answer, None, "a held lock is 'unknown', not a wait");
        drop(held);
        unregister(pgid);
        assert_eq!(try_is_live_group(pgid), Some(false));
    }
}
