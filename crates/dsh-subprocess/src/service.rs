//! The subprocess service: spawning, the set of live process trees, and teardown.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::signal::Signal;
use parking_lot::Mutex;

use crate::collector::{CaptureLimits, OutputCollector};
use crate::containment::{Containment, ContainmentStatus, Reaper};
use crate::env::AmbientEnv;
use crate::error::SpawnError;
use crate::handle::ProcessHandle;
use crate::redact::{Redactor, RedactorError, SharedRedactor};
use crate::retention::SpillRetention;
use crate::spawn::{SpawnSpec, spawn_process};
use crate::spill::{DefaultSpillNamer, SpillLocation, SpillNamer};

/// How a service is set up. `Default` is what a harness wants; tests and hosts inject the
/// spill directory, the ambient environment and the spill-file namer.
#[derive(Clone)]
pub struct ServiceOptions {
    /// Where spill files go; `None` creates `<os temp>/dsh-subprocess-XXXXXX` on first use.
    pub spill_dir: Option<PathBuf>,
    /// The environment children inherit (after the credential scrub).
    pub ambient_env: AmbientEnv,
    /// Chooses spill file names (default: [`DefaultSpillNamer`]).
    pub spill_namer: Arc<dyn SpillNamer>,
    /// Whether stray descendants are contained (default: [`Containment::Subreaper`]).
    pub containment: Containment,
    /// Secret values replaced by `[redacted:NAME]` in every collected stream (tails, spill
    /// files, reads, peeks); `None` (the default) or an empty redactor leaves output as is.
    /// A harness builds it with [`Redactor::from_env`].
    pub redactor: Option<Arc<Redactor>>,
    /// How many bytes of spill files sessions and the service may hold, and what happens to
    /// a session's when it ends (default: [`SpillRetention::default`]).
    pub spill_retention: SpillRetention,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        Self {
            spill_dir: None,
            ambient_env: AmbientEnv::Process,
            spill_namer: Arc::new(DefaultSpillNamer),
            containment: Containment::Subreaper,
            redactor: None,
            spill_retention: SpillRetention::default(),
        }
    }
}

/// How long disposal waits for killed strays to be reaped.
const STRAY_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// Handles whose process tree may still be alive, by service-local id.
#[derive(Default)]
pub(crate) struct LiveSet {
    handles: Mutex<HashMap<u64, ProcessHandle>>,
}

impl LiveSet {
    pub(crate) fn insert(&self, id: u64, handle: ProcessHandle) {
        self.handles.lock().insert(id, handle);
    }

    pub(crate) fn remove(&self, id: u64) {
        self.handles.lock().remove(&id);
    }

    fn snapshot(&self) -> Vec<ProcessHandle> {
        self.handles.lock().values().cloned().collect()
    }
}

/// Spawns children in their own process groups, collects their output, and owns every
/// process tree until it is gone.
///
/// Share it with `Arc`. Dropping the last reference sends `SIGKILL` to every group still
/// alive; [`SubprocessService::dispose`] is the orderly way down.
pub struct SubprocessService {
    /// The ambient environment after the scrub, made once.
    pub(crate) inherited_env: Arc<[(OsString, OsString)]>,
    /// The scrubbed ambient environment as C strings, for direct starts.
    pub(crate) inherited_entries: crate::direct::InheritedEntries,
    /// `/dev/null`, open for every direct start's stdin (`None`: starts go through the
    /// standard library).
    pub(crate) dev_null: Option<std::os::fd::OwnedFd>,
    /// Where programs named without a `/` were found.
    pub(crate) programs: crate::program::ProgramCache,
    pub(crate) spill: Arc<SpillLocation>,
    pub(crate) live: Arc<LiveSet>,
    pub(crate) containment: ContainmentStatus,
    /// Present when containment is active.
    pub(crate) reaper: Option<Arc<Reaper>>,
    /// The values to redact, the configured ones and those added since.
    pub(crate) redactor: Arc<SharedRedactor>,
    next_id: AtomicU64,
}

impl SubprocessService {
    /// A service with default options.
    pub fn new() -> Arc<Self> {
        Self::with_options(ServiceOptions::default())
    }

    /// A service with `options`. With [`Containment::Subreaper`] (the default) this makes
    /// the whole process a child subreaper.
    ///
    /// The first service of a process also marks every descriptor the process inherited
    /// (3 and up) close-on-exec, so none of them reaches a child.
    pub fn with_options(options: ServiceOptions) -> Arc<Self> {
        crate::fds::mark_inherited_cloexec();
        let containment = crate::containment::establish(options.containment);
        let reaper = containment.is_active().then(|| Arc::new(Reaper::new()));
        let inherited_env = crate::env::inherited(&options.ambient_env);
        Arc::new(Self {
            inherited_entries: crate::direct::InheritedEntries::new(&inherited_env),
            inherited_env,
            dev_null: std::fs::File::open("/dev/null").ok().map(std::os::fd::OwnedFd::from),
            programs: crate::program::ProgramCache::default(),
            spill: Arc::new(SpillLocation::new(
                options.spill_dir,
                options.spill_namer,
                options.spill_retention,
            )),
            live: Arc::new(LiveSet::default()),
            containment,
            reaper,
            redactor: Arc::new(SharedRedactor::new(
                options.redactor.unwrap_or_else(|| Arc::new(Redactor::empty())),
            )),
            next_id: AtomicU64::new(1),
        })
    }

    /// The containment in effect: a child subreaper that kills stray descendants, or none
    /// (with the reason).
    pub fn containment(&self) -> &ContainmentStatus {
        &self.containment
    }

    /// Starts a process. Must be called inside a tokio runtime.
    ///
    /// Every failure is reported here, synchronously: invalid grace or argv, a pre-aborted
    /// signal, and OS-level failures ([`crate::OsSpawnError`], telling a bad working directory
    /// from a program that could not be executed). A returned handle always settles.
    pub fn spawn(&self, spec: SpawnSpec) -> Result<ProcessHandle, SpawnError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        spawn_process(self, id, spec)
    }

    /// The canonical spill directory, opened (and, for the private default, created) if it
    /// was not yet. Spill files are reported as `<directory as spelled>/<name>`; a host that
    /// confines commands can bind this directory read-only into their world so later
    /// commands can read spill files at the reported paths.
    ///
    /// Fails when the directory cannot be created or opened, or is refused (not owned by the
    /// harness's effective user, or writable by group or others).
    pub fn spill_dir(&self) -> std::io::Result<PathBuf> {
        self.spill.canonical_dir()
    }

    /// The canonical directory of the spill files of the processes spawned with
    /// [`SpawnSpec::spill_owner`] `owner`, opened (and made) if it was not yet: a private
    /// directory of its own (`<os temp>/dsh-subprocess-XXXXXX`, like the shared one), or,
    /// in an injected spill directory, its subdirectory `owner-<hash>` (the same in every
    /// process with the same `DSH_HOME`). A host that confines commands binds it read-only
    /// into the world of that owner's commands only.
    ///
    /// Fails as [`SubprocessService::spill_dir`] does.
    pub fn owned_spill_dir(&self, owner: &str) -> std::io::Result<PathBuf> {
        self.spill.canonical_owned_dir(owner)
    }

    /// The spill directory as spelled in reported paths, if it exists already (or was
    /// injected); never creates it.
    pub fn existing_spill_dir(&self) -> Option<PathBuf> {
        self.spill.existing_dir()
    }

    /// A collector for one stream of a process this service did not spawn (one started on
    /// a remote host, say), with the service's spill directory and redactor: what the
    /// caller [`push`](OutputCollector::push)es is bounded, spilled and redacted exactly as
    /// a local child's output is. The caller [`finish`](OutputCollector::finish)es it when
    /// the stream ends.
    pub fn collector(&self, limits: CaptureLimits) -> OutputCollector {
        let factory = limits.spill_cap.and(Some(self.spill.factory(None, None)));
        let redactor = Some(&self.redactor).filter(|r| r.is_needed());
        OutputCollector::with_shared_redactor(limits, factory, redactor)
    }

    /// The session `account` ended: its spill files (those of every process spawned with
    /// [`crate::SpawnSpec::spill_account`] `account`, foreground and background alike) are
    /// removed, or, with [`SpillRetention::keep_ended`], kept until the total cap needs their
    /// room; spills it would start from now on are not kept. Call it once nothing can read
    /// the session's output any more (its calls and jobs are over). Returns the paths of the
    /// files it had, as reported.
    pub fn release_spills(&self, account: &str) -> Vec<PathBuf> {
        self.spill.ledger.release(account)
    }

    /// The redactor applied to collected output now, if it has values to redact.
    pub fn redactor(&self) -> Option<Arc<Redactor>> {
        Some(self.redactor.current()).filter(|r| !r.is_empty())
    }

    /// Redacts `value` as `[redacted:NAME]` from now on, in the output of every process of
    /// this service, including the ones already running (a secret a user typed for a running
    /// command). Unlike configured values, a short one is redacted too.
    pub fn redact_also(&self, name: &str, value: &[u8]) -> Result<(), RedactorError> {
        self.redacts_late_values();
        self.redactor.add(name, value)
    }

    /// Declares that values will be added with [`SubprocessService::redact_also`] while
    /// processes run: every process started from now on has its output follow the redaction,
    /// even while there is nothing to redact yet. Without it (and without values) output is
    /// collected as it is, with no redaction stage at all.
    pub fn redacts_late_values(&self) {
        self.redactor.expect_late_values();
    }

    /// How many process trees the service still tracks.
    pub fn live_count(&self) -> usize {
        self.live.handles.lock().len()
    }

    /// Terminates every live process tree (escalating to `SIGKILL` after each grace period)
    /// and resolves once all have settled and every tree is gone. Trees already gone are
    /// untouched. The service stays usable afterwards.
    pub async fn dispose(&self) {
        let handles = self.live.snapshot();
        for handle in &handles {
            handle.terminate();
        }
        for handle in handles {
            handle.wait().await;
            handle.wait_for_exit(None).await;
        }
        if self.reaper.is_some() {
            // Strays re-parented while the trees went down die before disposal resolves.
            crate::containment::settle_strays(STRAY_BOUND).await;
        }
    }
}

impl Drop for SubprocessService {
    fn drop(&mut self) {
        for handle in self.live.snapshot() {
            if !handle.is_tree_gone() {
                crate::tree::signal_group(handle.inner.pid, Signal::SIGKILL);
            }
        }
        if self.reaper.is_some() {
            crate::containment::sweep();
        }
    }
}
