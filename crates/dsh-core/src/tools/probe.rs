//! The output probe: how a host observes a running call's latest output line.
//!
//! Pull-based, so it costs nothing while nobody asks: every [`ToolExec`](crate::ToolExec)
//! carries an [`OutputProbeSlot`] shared by all its clones. A tool body that runs something
//! observable (the bash tool's foreground command) installs a probe into the slot once that
//! thing has started and removes it when it ends; a host holding a clone of the call's exec
//! asks [`OutputProbeSlot::latest_line`] whenever it wants to show progress.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Reports the latest line of a running call's output: `None` when there is none yet.
///
/// Called from the host's task, at the host's pace; it must be cheap and must not block.
pub type OutputProbe = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Ids that tell one installation from the next, so a late removal never clears a newer probe.
static NEXT_INSTALL: AtomicU64 = AtomicU64::new(1);

/// A shared slot holding at most one [`OutputProbe`]. Cloning shares the slot.
#[derive(Clone, Default)]
pub struct OutputProbeSlot {
    probe: Arc<Mutex<Option<(u64, OutputProbe)>>>,
}

impl fmt::Debug for OutputProbeSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputProbeSlot").field("installed", &self.is_installed()).finish()
    }
}

impl OutputProbeSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs `probe`, replacing any other. It stays installed until the returned
    /// registration is dropped (or another probe replaces it).
    #[must_use = "the probe is removed when the registration is dropped"]
    pub fn install(&self, probe: OutputProbe) -> OutputProbeRegistration {
        let id = NEXT_INSTALL.fetch_add(1, Ordering::Relaxed);
        *self.probe.lock() = Some((id, probe));
        OutputProbeRegistration { slot: self.clone(), id }
    }

    /// Whether a probe is installed (something observable is running).
    pub fn is_installed(&self) -> bool {
        self.probe.lock().is_some()
    }

    /// The installed probe's answer; `None` when no probe is installed or it knows no line.
    /// The probe runs outside the slot's lock.
    pub fn latest_line(&self) -> Option<String> {
        let probe = self.probe.lock().as_ref().map(|(_, probe)| Arc::clone(probe))?;
        probe()
    }
}

/// Keeps a probe installed; dropping it removes that probe (never a newer one).
pub struct OutputProbeRegistration {
    slot: OutputProbeSlot,
    id: u64,
}

impl fmt::Debug for OutputProbeRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputProbeRegistration").field("id", &self.id).finish()
    }
}

impl Drop for OutputProbeRegistration {
    fn drop(&mut self) {
        let mut probe = self.slot.probe.lock();
        if probe.as_ref().is_some_and(|(id, _)| *id == self.id) {
            *probe = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installed_probe_answers_until_its_registration_drops() {
        let slot = OutputProbeSlot::new();
        assert_eq!(slot.latest_line(), None);
        assert!(!slot.is_installed());
        let shared = slot.clone();
        let first = slot.install(Arc::new(|| Some("one".to_owned())));
        assert!(shared.is_installed());
        assert_eq!(shared.latest_line().as_deref(), Some("one"));
        let second = slot.install(Arc::new(|| Some("two".to_owned())));
        drop(first);
        assert_eq!(shared.latest_line().as_deref(), Some("two"), "a stale removal keeps the newer probe");
        drop(second);
        assert_eq!(shared.latest_line(), None);
        assert!(!shared.is_installed());
    }
}
