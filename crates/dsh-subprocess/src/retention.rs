//! Spill retention: how many bytes of spill files one session and the whole service may
//! hold, and what happens to a session's files when it ends.
//!
//! Every spill file the service creates is entered in a ledger with the session it belongs
//! to (its account, [`crate::SpawnSpec::spill_account`]) and charged for every byte written
//! to it, before the write. A write that would take its session past the per-session quota,
//! or the service past its total cap, fails: the stream's spill file is then abandoned and
//! its result says the full output is unavailable. Under the total cap, room is first made
//! by removing, oldest first, files of sessions that ended (kept only with
//! [`SpillRetention::keep_ended`]); a file of a session that has not ended is never removed
//! to make room, so nothing a model was told it could read goes before its session ends.
//!
//! When a session ends, [`crate::SubprocessService::release_spills`] removes its files
//! (those of its foreground calls and of its background jobs alike), or, with
//! [`SpillRetention::keep_ended`], keeps them until the total cap needs their room.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use nix::unistd::UnlinkatFlags;
use parking_lot::Mutex;

use crate::spill::SpillDir;

/// How much spill the service keeps, and for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpillRetention {
    /// Bytes of spill files one session may hold at once; `None`: no quota.
    pub session_quota: Option<u64>,
    /// Bytes of spill files the whole service may hold at once; `None`: no cap.
    pub total_cap: Option<u64>,
    /// Keep an ended session's files (until the total cap needs their room, oldest first)
    /// instead of removing them when it ends.
    pub keep_ended: bool,
}

/// The default per-session quota: 1 GiB.
pub const DEFAULT_SPILL_SESSION_QUOTA: u64 = 1 << 30;
/// The default total cap: 4 GiB.
pub const DEFAULT_SPILL_TOTAL_CAP: u64 = 4 << 30;

impl Default for SpillRetention {
    fn default() -> Self {
        Self {
            session_quota: Some(DEFAULT_SPILL_SESSION_QUOTA),
            total_cap: Some(DEFAULT_SPILL_TOTAL_CAP),
            keep_ended: false,
        }
    }
}

impl SpillRetention {
    /// No quota, no cap, files removed when their session ends.
    pub fn unbounded() -> Self {
        Self { session_quota: None, total_cap: None, keep_ended: false }
    }
}

/// One spill file in the ledger.
struct Entry {
    account: Option<String>,
    name: String,
    dir: Arc<SpillDir>,
    bytes: u64,
    /// Its session ended (kept only under `keep_ended`): the first to go for room.
    ended: bool,
}

#[derive(Default)]
struct State {
    next: u64,
    /// By creation order: the oldest first.
    entries: BTreeMap<u64, Entry>,
    total: u64,
    by_account: HashMap<String, u64>,
    /// The sessions that ended, the last [`ENDED_REMEMBERED`] of them (in `ended_order`, the
    /// oldest first): a server that sees sessions come and go does not keep one entry each.
    ended: HashSet<String>,
    ended_order: VecDeque<String>,
}

/// How many ended sessions the ledger remembers, so that a spill a job of theirs starts
/// after the end is not kept. One that ended longer ago is forgotten: a late spill of it is
/// then kept like one of a live session, until the harness's own clean-up.
const ENDED_REMEMBERED: usize = 4096;

/// The service's spill ledger (see the module documentation).
pub(crate) struct Ledger {
    retention: SpillRetention,
    state: Mutex<State>,
}

impl Ledger {
    pub(crate) fn new(retention: SpillRetention) -> Self {
        Self { retention, state: Mutex::new(State::default()) }
    }

    /// Enters a new (empty) spill file; returns its ledger id.
    pub(crate) fn register(&self, account: Option<&str>, name: &str, dir: &Arc<SpillDir>) -> u64 {
        let mut state = self.state.lock();
        state.next += 1;
        let id = state.next;
        let entry = Entry {
            account: account.map(str::to_owned),
            name: name.to_owned(),
            dir: Arc::clone(dir),
            bytes: 0,
            ended: false,
        };
        state.entries.insert(id, entry);
        id
    }

    /// Charges `bytes` about to be written to the file `id`; fails (charging nothing) when
    /// they would take its session past its quota or the service past its cap.
    pub(crate) fn charge(&self, id: u64, bytes: u64) -> io::Result<()> {
        let mut state = self.state.lock();
        let Some(account) = state.entries.get(&id).map(|e| e.account.clone()) else {
            // Removed already (its session ended): nothing to account for.
            return Ok(());
        };
        if let (Some(quota), Some(account)) = (self.retention.session_quota, &account) {
            let held = state.by_account.get(account).copied().unwrap_or(0);
            if held.saturating_add(bytes) > quota {
                return Err(io::Error::other(format!(
                    "the session's spill quota of {quota} bytes is used up"
                )));
            }
        }
        if let Some(cap) = self.retention.total_cap {
            while state.total.saturating_add(bytes) > cap {
                let Some(oldest) = state.entries.iter().find(|(_, e)| e.ended).map(|(id, _)| *id) else {
                    return Err(io::Error::other(format!(
                        "the spill files of this harness reached their cap of {cap} bytes"
                    )));
                };
                remove_entry(&mut state, oldest, true);
            }
        }
        state.total += bytes;
        if let Some(account) = account {
            *state.by_account.entry(account).or_insert(0) += bytes;
        }
        if let Some(entry) = state.entries.get_mut(&id) {
            entry.bytes += bytes;
        }
        Ok(())
    }

    /// Forgets the file `id` (its writer deleted it).
    pub(crate) fn forget(&self, id: u64) {
        remove_entry(&mut self.state.lock(), id, false);
    }

    /// The session `account` ended: its files are removed (or, with `keep_ended`, marked
    /// as the first to go for room). Returns the paths of the files it had.
    pub(crate) fn release(&self, account: &str) -> Vec<PathBuf> {
        let mut state = self.state.lock();
        if state.ended.insert(account.to_owned()) {
            state.ended_order.push_back(account.to_owned());
            while state.ended_order.len() > ENDED_REMEMBERED {
                if let Some(oldest) = state.ended_order.pop_front() {
                    state.ended.remove(&oldest);
                }
            }
        }
        let ids: Vec<u64> = state
            .entries
            .iter()
            .filter(|(_, e)| e.account.as_deref() == Some(account))
            .map(|(id, _)| *id)
            .collect();
        let mut paths = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(entry) = state.entries.get_mut(&id) {
                paths.push(entry.dir.path.join(&entry.name));
                entry.ended = true;
            }
            if !self.retention.keep_ended {
                remove_entry(&mut state, id, true);
            }
        }
        paths
    }

    /// Whether the session `account` ended already (its new spills are not kept).
    pub(crate) fn has_ended(&self, account: &str) -> bool {
        self.state.lock().ended.contains(account)
    }
}

/// Drops the entry `id` and its charge, unlinking its file when `unlink`.
fn remove_entry(state: &mut State, id: u64, unlink: bool) {
    let Some(entry) = state.entries.remove(&id) else { return };
    state.total = state.total.saturating_sub(entry.bytes);
    if let Some(account) = &entry.account
        && let Some(held) = state.by_account.get_mut(account)
    {
        *held = held.saturating_sub(entry.bytes);
        if *held == 0 {
            state.by_account.remove(account);
        }
    }
    if unlink {
        use std::os::fd::AsFd;
        match nix::unistd::unlinkat(entry.dir.fd.as_fd(), entry.name.as_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
            Err(error) => tracing::debug!(%error, name = %entry.name, "could not remove a spill file"),
        }
    }
}

/// `"256m"`, `"1g"`, `"512k"`, `"1048576"` as bytes; `None` when it is none of those.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().last()? {
        (at, c) if c.is_ascii_alphabetic() => (&text[..at], c.to_ascii_lowercase()),
        _ => (text, 'b'),
    };
    let number: u64 = digits.trim().parse().ok()?;
    let factor: u64 = match unit {
        'b' => 1,
        'k' => 1 << 10,
        'm' => 1 << 20,
        'g' => 1 << 30,
        't' => 1 << 40,
        _ => return None,
    };
    number.checked_mul(factor).filter(|bytes| *bytes > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that sees sessions come and go remembers the last ones that ended, not all.
    #[test]
    fn ended_sessions_are_remembered_up_to_a_bound() {
        let ledger = Ledger::new(SpillRetention { session_quota: None, total_cap: None, keep_ended: false });
        let count = ENDED_REMEMBERED + 100;
        for n in 0..count {
            ledger.release(&format!("s{n}"));
        }
        let state = ledger.state.lock();
        assert_eq!((state.ended.len(), state.ended_order.len()), (ENDED_REMEMBERED, ENDED_REMEMBERED));
        drop(state);
        assert!(!ledger.has_ended("s0"), "the oldest ended session is still remembered");
        assert!(ledger.has_ended(&format!("s{}", count - 1)), "the last ended session is forgotten");
        // Ending one again adds nothing.
        ledger.release(&format!("s{}", count - 1));
        assert_eq!(ledger.state.lock().ended_order.len(), ENDED_REMEMBERED);
    }
}
