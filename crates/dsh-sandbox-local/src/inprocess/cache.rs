//! Preparations cached per policy, dropped when the host's mount table or a root changes.
//!
//! The pre-built namespace is a private snapshot of the host's mounts, and its binds and the
//! Landlock rules pin the writable roots' inodes. So an entry is keyed by the roots together
//! with their device and inode (a root deleted and re-created is a new key), and the whole
//! cache is dropped as soon as the host's mount table changes (the kernel flags that on a
//! polled `/proc/self/mountinfo`), which also releases filesystems the snapshot kept busy.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::{Prepared, WorldSpec};

/// At most this many policies are kept; beyond it the cache starts over.
const CAPACITY: usize = 32;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Key {
    roots: Vec<(PathBuf, Option<(u64, u64)>)>,
    world: Option<WorldSpec>,
    mount_namespace: bool,
    network: bool,
    euid: u32,
    egid: u32,
}

/// The provider's cache of preparations.
#[derive(Debug, Default)]
pub(crate) struct PreparedCache {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: Vec<(Key, Arc<Prepared>)>,
    /// Open `/proc/self/mountinfo`, polled for mount-table changes.
    mountinfo: Option<File>,
    /// Counts the mount-table changes seen.
    generation: u64,
}

impl PreparedCache {
    /// The preparation for `writable`, built (with a pre-built namespace) on first use.
    pub(crate) fn get(
        &self,
        writable: &[PathBuf],
        world: Option<&WorldSpec>,
        mount_namespace: bool,
        network: bool,
    ) -> Result<Arc<Prepared>, String> {
        // SAFETY: plain id getters.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let roots = writable
            .iter()
            .map(|p| (p.clone(), std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))))
            .collect();
        let key = Key { roots, world: world.cloned(), mount_namespace, network, euid, egid };
        let generation = {
            let mut state = self.lock();
            state.forget_if_mounts_changed();
            if let Some((_, prepared)) = state.entries.iter().find(|(k, _)| *k == key) {
                return Ok(Arc::clone(prepared));
            }
            state.generation
        };
        // Built without the lock: building forks and waits for a namespace helper, and other
        // spawns must not wait behind it. Two spawns that race here both build; one is kept.
        let prepared = Arc::new(Prepared::build(writable, world, mount_namespace, true, network)?);
        let mut state = self.lock();
        state.forget_if_mounts_changed();
        if let Some((_, existing)) = state.entries.iter().find(|(k, _)| *k == key) {
            return Ok(Arc::clone(existing));
        }
        // A snapshot taken before the mount table changed is used once, never cached.
        if state.generation == generation {
            if state.entries.len() >= CAPACITY {
                state.entries.clear();
            }
            state.entries.push((key, Arc::clone(&prepared)));
        }
        Ok(prepared)
    }

    /// Ends the processes left in the PID namespaces of the worlds whose private `/tmp` lies
    /// in `session_dir` (one session's worlds: one per mode and set of roots); false when some
    /// did not end.
    pub(crate) fn end_strays(&self, session_dir: &std::path::Path) -> bool {
        let worlds: Vec<Arc<Prepared>> = {
            let state = self.lock();
            state
                .entries
                .iter()
                .filter(|(key, _)| key.world.as_ref().is_some_and(|w| w.tmp.starts_with(session_dir)))
                .map(|(_, prepared)| Arc::clone(prepared))
                .collect()
        };
        // Every world is swept, also after one that did not end.
        worlds.iter().map(|prepared| prepared.end_strays()).collect::<Vec<_>>().into_iter().all(|ended| ended)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// Drops every entry (and counts a generation) when the mount table changed.
    fn forget_if_mounts_changed(&mut self) {
        if self.mounts_changed() {
            self.entries.clear();
            self.generation += 1;
        }
    }

    /// True when the mount table changed since the last call (and on the first call, when
    /// the watch is opened). Without a watch every call says "changed".
    fn mounts_changed(&mut self) -> bool {
        let Some(file) = &self.mountinfo else {
            self.mountinfo = File::open("/proc/self/mountinfo").ok();
            return true;
        };
        let mut pfd = libc::pollfd { fd: file.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
        // SAFETY: one valid pollfd, zero timeout.
        let ready = unsafe { libc::poll(&mut pfd, 1, 0) };
        ready != 0 && (ready < 0 || pfd.revents & (libc::POLLPRI | libc::POLLERR) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usable() -> bool {
        crate::inprocess::Prepared::build(&[], None, true, false, false).is_ok()
            && matches!(
                crate::probe::SystemProber.probe_for_tests(),
                crate::runner::ProbeOutcome::Usable(ref c) if c.mount_namespace
            )
    }

    #[test]
    fn entries_are_reused_until_a_root_is_replaced() {
        if !usable() {
            eprintln!("SKIP: landlock runner with mount namespace unusable");
            return;
        }
        let dir = tempfile::Builder::new().prefix("dsh-sbx-cache-").tempdir_in("/var/tmp").unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let cache = PreparedCache::default();
        let roots = vec![ws.clone()];
        let first = cache.get(&roots, None, true, false).unwrap();
        assert!(first.template.is_some(), "{:?}", first.template_error);
        assert!(Arc::ptr_eq(&first, &cache.get(&roots, None, true, false).unwrap()));
        assert!(!Arc::ptr_eq(&first, &cache.get(&roots, None, false, false).unwrap()));

        std::fs::remove_dir(&ws).unwrap();
        std::fs::create_dir(&ws).unwrap();
        let replaced = cache.get(&roots, None, true, false).unwrap();
        assert!(!Arc::ptr_eq(&first, &replaced));
        assert!(Arc::ptr_eq(&replaced, &cache.get(&roots, None, true, false).unwrap()));
    }
}
