//! Spill files: where they live, how they are named, and how they are created safely.
//!
//! Files go in a private directory (`<os temp>/dsh-subprocess-XXXXXX`, mode `0700`, created
//! lazily on the first spill) unless a host injects its own directory. A process spawned for
//! an owner (a session whose commands must not see other sessions' output) spills into that
//! owner's directory instead: a private directory of its own, made like the shared one, or,
//! in an injected directory, a subdirectory `owner-<hash>` made the same safe way.
//!
//! What this guarantees, even against a command (confined or not) that can rename and plant
//! symlinks wherever the harness's user can write:
//!
//! * The directory is opened **once** per service, as a directory descriptor, and every spill
//!   file is created relative to that descriptor (`openat`). Replacing the directory (or any
//!   of its parents) by a symlink after it was opened changes nothing: later spill files still
//!   land in the directory that was opened, never where the symlink points.
//! * The directory is opened without following symlinks: its path is resolved once, then
//!   opened with no symlink allowed anywhere in the resolved path (`RESOLVE_NO_SYMLINKS`
//!   where the kernel has `openat2`, else `O_NOFOLLOW` on the last component). The private
//!   directory is created exclusively (`mkdirat`, fails if the name exists) and opened
//!   relative to the temp directory's descriptor.
//! * The opened directory must be owned by the harness's effective user and not writable by
//!   group or others; otherwise spilling is refused with an error naming the directory (the
//!   stream is then reported without a spill path).
//! * Each file is created exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode `0600`), so a
//!   pre-planted file or symlink at the chosen name is never opened, let alone followed; a
//!   collision is retried under a fresh name a few times and then reported as "no spill". An
//!   abandoned spill is deleted relative to the same descriptor.
//!
//! The path reported for a spill file is `<directory as spelled>/<name>`; it names the file the
//! harness wrote only for as long as nobody renames the directory.
//!
//! Clean-up of directories left behind by harnesses that are gone:
//!
//! * Every private spill directory a harness opens (created, or injected under a name of that
//!   pattern) is held with a shared `flock` for the rest of the process's life (a close-on-exec
//!   duplicate of its descriptor is kept open on purpose, even after the service is dropped),
//!   so spill files a model was told about stay readable while their harness lives.
//! * The first time a process creates its private directory, a background thread runs
//!   [`remove_stale_spill_dirs`] over the temp directory with the age from
//!   [`SPILL_MAX_AGE_ENV`] (default [`DEFAULT_SPILL_MAX_AGE`]; `0` disables it), looking into
//!   at most 16 candidates from a random one on, so its cost does not grow with what other
//!   harnesses left. Nothing runs per spill or per call.
//! * A private directory this process made and that is still empty when it exits is removed
//!   by an `atexit` hook (a process that spilled nothing leaves nothing behind).
//! * A directory is removed only when its name is exactly `dsh-subprocess-XXXXXX`, it is a real
//!   directory (never a symlink) owned by the effective user, no process holds its lock, no
//!   entry name carries the pid of a live process, it holds no subdirectory, and neither it nor
//!   any entry was modified within the age. Its files are removed through the directory's own
//!   descriptor.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, Flock, FlockArg, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;
use parking_lot::Mutex;

use crate::retention::{Ledger, SpillRetention};

/// How many fresh names are tried when the chosen path already exists.
const CREATE_ATTEMPTS: usize = 4;

/// How many fresh names are tried for the private directory.
const DIR_ATTEMPTS: usize = 16;

/// The process-wide spill counter (the `<n>` in every spill file name).
static SPILL_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The prefix of private spill directory names (followed by six alphanumerics).
const DIR_PREFIX: &str = "dsh-subprocess-";

/// Environment variable of the harness: how old (in whole seconds) a spill directory of a
/// harness that is gone must be before a starting harness removes it. Unset or blank means
/// [`DEFAULT_SPILL_MAX_AGE`]; `0` (or any value that is not a whole number) disables clean-up.
pub const SPILL_MAX_AGE_ENV: &str = "DSH_SPILL_MAX_AGE_SECS";

/// The clean-up age when [`SPILL_MAX_AGE_ENV`] is unset: 24 hours.
pub const DEFAULT_SPILL_MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// Shared locks on every spill directory this process opened, never released before exit.
static HELD_LOCKS: Mutex<Vec<Flock<OwnedFd>>> = Mutex::new(Vec::new());

/// Whether this process already started its clean-up sweep.
static SWEPT: AtomicBool = AtomicBool::new(false);

/// How many times a busy lock is retried (a sweep holds it only for a moment).
const LOCK_ATTEMPTS: usize = 50;

/// Chooses the file name (not the directory) of a new spill file.
///
/// The default is `dsh-subprocess-<pid>-<counter>-<12 random hex>-<label>.log`. Tests inject
/// deterministic names to plant files or symlinks at the exact path a spill will try. A name
/// must be a single path component.
pub trait SpillNamer: Send + Sync {
    /// The file name for a new spill of the stream `label`; a single path component.
    fn file_name(&self, label: &str) -> String;
}

/// The default naming scheme described on [`SpillNamer`].
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultSpillNamer;

impl SpillNamer for DefaultSpillNamer {
    fn file_name(&self, label: &str) -> String {
        let counter = SPILL_COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
        let random: u64 = rand::random::<u64>() & 0xFFFF_FFFF_FFFF;
        format!("dsh-subprocess-{}-{counter}-{random:012x}-{label}.log", std::process::id())
    }
}

/// An open spill file being written.
pub(crate) trait SpillSink: Send {
    fn path(&self) -> &Path;
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Closes the file, reporting a failing close (the file may then be incomplete).
    fn close(self: Box<Self>) -> io::Result<()>;
    /// Closes and deletes the file (the stream outgrew its spill cap or a write failed).
    fn discard(self: Box<Self>) -> io::Result<()>;
    /// The file was removed while open (no name refers to it any more).
    fn removed(&self) -> bool {
        false
    }
}

/// Opens a new spill sink for a stream label.
pub(crate) type SpillFactory = Arc<dyn Fn(&str) -> io::Result<Box<dyn SpillSink>> + Send + Sync>;

/// The opened spill directory.
pub(crate) struct SpillDir {
    /// As spelled (injected, or `<os temp>/<name>`): the prefix of every reported path.
    pub(crate) path: PathBuf,
    /// Its canonical path when it was opened.
    canonical: PathBuf,
    pub(crate) fd: OwnedFd,
}

struct FileSink {
    path: PathBuf,
    name: String,
    dir: Arc<SpillDir>,
    file: File,
    /// The ledger every byte is charged to before it is written, and this file's id in it.
    ledger: Arc<Ledger>,
    id: u64,
}

impl SpillSink for FileSink {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.ledger.charge(self.id, bytes.len() as u64)?;
        self.file.write_all(bytes)
    }

    fn removed(&self) -> bool {
        nix::sys::stat::fstat(self.file.as_fd()).is_ok_and(|stat| stat.st_nlink == 0)
    }

    fn close(self: Box<Self>) -> io::Result<()> {
        nix::unistd::close(self.file).map_err(io::Error::from)
    }

    fn discard(self: Box<Self>) -> io::Result<()> {
        let Self { name, dir, file, ledger, id, .. } = *self;
        drop(file);
        ledger.forget(id);
        match nix::unistd::unlinkat(dir.fd.as_fd(), name.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The directory spill files go to, opened on first use and kept open; and the directory of
/// each owner that keeps its spill files apart (see [`SpillLocation::owned_dir`]).
pub(crate) struct SpillLocation {
    injected: Option<PathBuf>,
    opened: Mutex<Option<Arc<SpillDir>>>,
    owned: Mutex<Vec<(String, Arc<SpillDir>)>>,
    namer: Arc<dyn SpillNamer>,
    /// What every spill file is charged to (see [`crate::SpillRetention`]).
    pub(crate) ledger: Arc<Ledger>,
}

impl SpillLocation {
    pub(crate) fn new(
        injected: Option<PathBuf>,
        namer: Arc<dyn SpillNamer>,
        retention: SpillRetention,
    ) -> Self {
        let ledger = Arc::new(Ledger::new(retention));
        Self { injected, opened: Mutex::new(None), owned: Mutex::new(Vec::new()), namer, ledger }
    }

    /// The directory of `owner`'s spill files, opened (and made) on first use: without an
    /// injected directory, a private directory of its own made exactly as the shared one
    /// (`<os temp>/dsh-subprocess-XXXXXX`, mode `0700`, locked, swept alike); in an injected
    /// directory, its subdirectory `owner-<hash of DSH_HOME and owner>` (mode `0700`, made
    /// with `mkdirat` and opened without following a symlink, relative to the injected
    /// directory's descriptor; refused unless owned by the harness's user and closed to
    /// group and others), the same in every process of that `DSH_HOME`.
    fn owned_dir(&self, owner: &str) -> io::Result<Arc<SpillDir>> {
        let mut owned = self.owned.lock();
        if let Some((_, dir)) = owned.iter().find(|(name, _)| name == owner) {
            return Ok(Arc::clone(dir));
        }
        let dir = Arc::new(match &self.injected {
            Some(_) => open_owned_subdir(self.dir()?.as_ref(), owner)?,
            None => create_private()?,
        });
        owned.push((owner.to_owned(), Arc::clone(&dir)));
        Ok(dir)
    }

    /// The canonical directory of `owner`'s spill files, opened (and made) if needed.
    pub(crate) fn canonical_owned_dir(&self, owner: &str) -> io::Result<PathBuf> {
        self.owned_dir(owner).map(|dir| dir.canonical.clone())
    }

    /// The spill directory as spelled in reported paths, if it exists already (or was
    /// injected).
    pub(crate) fn existing_dir(&self) -> Option<PathBuf> {
        self.injected.clone().or_else(|| self.opened.lock().as_ref().map(|dir| dir.path.clone()))
    }

    /// The canonical spill directory, opened (and for the private one created) if needed.
    pub(crate) fn canonical_dir(&self) -> io::Result<PathBuf> {
        self.dir().map(|dir| dir.canonical.clone())
    }

    fn dir(&self) -> io::Result<Arc<SpillDir>> {
        let mut opened = self.opened.lock();
        if let Some(dir) = &*opened {
            return Ok(Arc::clone(dir));
        }
        let dir = Arc::new(match &self.injected {
            Some(path) => open_injected(path)?,
            None => create_private()?,
        });
        *opened = Some(Arc::clone(&dir));
        Ok(dir)
    }

    /// Creates a fresh spill file for `label` (in `owner`'s directory when given), charged
    /// to the session `account` when given, never opening an existing path.
    pub(crate) fn create(
        &self,
        owner: Option<&str>,
        account: Option<&str>,
        label: &str,
    ) -> io::Result<Box<dyn SpillSink>> {
        if account.is_some_and(|account| self.ledger.has_ended(account)) {
            return Err(io::Error::other("the session that would read this spill file has ended"));
        }
        let dir = match owner {
            Some(owner) => self.owned_dir(owner)?,
            None => self.dir()?,
        };
        let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
        for _ in 0..CREATE_ATTEMPTS {
            let name = self.namer.file_name(label);
            if name.is_empty() || name == "." || name == ".." || name.contains('/') {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("spill file name {name:?} is not a single path component"),
                ));
            }
            let flags =
                OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_WRONLY | OFlag::O_CLOEXEC;
            match nix::fcntl::openat(dir.fd.as_fd(), name.as_str(), flags, Mode::from_bits_truncate(0o600)) {
                Ok(fd) => {
                    let path = dir.path.join(&name);
                    let ledger = Arc::clone(&self.ledger);
                    let id = ledger.register(account, &name, &dir);
                    return Ok(Box::new(FileSink { path, name, dir, file: File::from(fd), ledger, id }));
                }
                Err(Errno::EEXIST) => last = Errno::EEXIST.into(),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last)
    }

    /// This location as a factory the collectors call, for `owner`'s files when given,
    /// charged to the session `account` when given.
    pub(crate) fn factory(self: &Arc<Self>, owner: Option<String>, account: Option<String>) -> SpillFactory {
        let location = Arc::clone(self);
        Arc::new(move |label: &str| location.create(owner.as_deref(), account.as_deref(), label))
    }
}

/// Makes (if missing) and opens `owner`'s subdirectory of the injected directory `parent`.
fn open_owned_subdir(parent: &SpillDir, owner: &str) -> io::Result<SpillDir> {
    use std::hash::{Hash, Hasher};
    // The std hasher with its fixed keys: the same name in every process.
    let mut hasher = std::hash::DefaultHasher::new();
    std::env::var_os("DSH_HOME").hash(&mut hasher);
    owner.hash(&mut hasher);
    let name = format!("owner-{:016x}", hasher.finish());
    let path = parent.path.join(&name);
    let described =
        |e: io::Error| io::Error::new(e.kind(), format!("spill directory {}: {e}", path.display()));
    match nix::sys::stat::mkdirat(parent.fd.as_fd(), name.as_str(), Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(described(e.into())),
    }
    let fd = nix::fcntl::openat(parent.fd.as_fd(), name.as_str(), dir_flags(), Mode::empty())
        .map_err(|e| described(e.into()))?;
    verify_private(&fd, &path)?;
    Ok(SpillDir { canonical: parent.canonical.join(&name), path, fd })
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Opens an injected directory: resolved once, then opened with no symlink on the way.
fn open_injected(path: &Path) -> io::Result<SpillDir> {
    let described =
        |e: io::Error| io::Error::new(e.kind(), format!("spill directory {}: {e}", path.display()));
    let canonical = std::fs::canonicalize(path).map_err(described)?;
    let fd = open_without_symlinks(&canonical).map_err(described)?;
    verify_private(&fd, path)?;
    // Only a directory a sweep would consider needs the lock (one kept descriptor each).
    if path.file_name().and_then(|n| n.to_str()).is_some_and(is_private_dir_name) {
        hold_for_process_lifetime(&fd);
    }
    Ok(SpillDir { path: path.to_path_buf(), canonical, fd })
}

/// `openat2(RESOLVE_NO_SYMLINKS)` where the kernel has it, else `O_NOFOLLOW` (last component).
fn open_without_symlinks(canonical: &Path) -> io::Result<OwnedFd> {
    let how = OpenHow::new().flags(dir_flags()).resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    match nix::fcntl::openat2(nix::fcntl::AT_FDCWD, canonical, how) {
        Ok(fd) => Ok(fd),
        // No openat2 here (old kernel, or a seccomp filter that refuses unknown calls).
        Err(Errno::ENOSYS | Errno::EPERM | Errno::EINVAL) => {
            Ok(nix::fcntl::open(canonical, dir_flags(), Mode::empty())?)
        }
        Err(e) => Err(e.into()),
    }
}

/// Creates `<os temp>/dsh-subprocess-XXXXXX` exclusively, mode `0700`, and opens it.
fn create_private() -> io::Result<SpillDir> {
    let temp = std::env::temp_dir();
    let described =
        |e: io::Error| io::Error::new(e.kind(), format!("spill directory in {}: {e}", temp.display()));
    let temp_fd =
        nix::fcntl::open(&temp, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| described(e.into()))?;
    let canonical_temp = std::fs::canonicalize(&temp).map_err(described)?;
    for _ in 0..DIR_ATTEMPTS {
        let name = format!("dsh-subprocess-{}", random_suffix());
        match nix::sys::stat::mkdirat(temp_fd.as_fd(), name.as_str(), Mode::from_bits_truncate(0o700)) {
            Ok(()) => {}
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(described(e.into())),
        }
        let path = temp.join(&name);
        let fd = nix::fcntl::openat(temp_fd.as_fd(), name.as_str(), dir_flags(), Mode::empty())
            .map_err(|e| described(e.into()))?;
        // The umask may have narrowed the mode further; the directory must be exactly 0700.
        nix::sys::stat::fchmod(fd.as_fd(), Mode::from_bits_truncate(0o700))
            .map_err(|e| described(e.into()))?;
        verify_private(&fd, &path)?;
        hold_for_process_lifetime(&fd);
        remove_at_exit_if_empty(&temp_fd, &name, &fd);
        start_sweep(&temp);
        // Completed spill files outlive the service: this process removes the directory only
        // when it holds none at exit (a later harness may, once this one is gone and the
        // directory is old).
        return Ok(SpillDir { path, canonical: canonical_temp.join(&name), fd });
    }
    Err(described(io::Error::from(io::ErrorKind::AlreadyExists)))
}

/// The private directories this process made, with the temporary directory they are in and
/// their identity: at exit, each one still empty is removed (a process that spilled nothing
/// leaves nothing behind).
#[allow(clippy::type_complexity, reason = "one private static")]
static MADE: Mutex<Vec<(OwnedFd, String, (u64, u64))>> = Mutex::new(Vec::new());
static EXIT_HOOK: std::sync::Once = std::sync::Once::new();

fn remove_at_exit_if_empty(temp_fd: &OwnedFd, name: &str, dir: &OwnedFd) {
    let (Ok(temp), Ok(stat)) = (temp_fd.try_clone(), nix::sys::stat::fstat(dir.as_fd())) else { return };
    EXIT_HOOK.call_once(|| {
        // SAFETY: `atexit` only records a function pointer; the hook is a plain `extern "C"`
        // function that takes no borrowed state and never blocks.
        unsafe { libc::atexit(remove_empty_private_dirs) };
    });
    MADE.lock().push((temp, name.to_owned(), (stat.st_dev, stat.st_ino)));
}

extern "C" fn remove_empty_private_dirs() {
    // Never block at exit: another thread may hold the lock while the process goes down.
    let Some(made) = MADE.try_lock() else { return };
    for (temp, name, identity) in made.iter() {
        // Only the directory made here (not one put in its place), and only when empty: the
        // removal itself fails on a directory that holds anything.
        let same = nix::sys::stat::fstatat(temp.as_fd(), name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|now| (now.st_dev, now.st_ino) == *identity);
        if same {
            let _ = nix::unistd::unlinkat(temp.as_fd(), name.as_str(), UnlinkatFlags::RemoveDir);
        }
    }
}

/// Six random alphanumeric characters, like `mkdtemp`'s `XXXXXX`.
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bits: u64 = rand::random();
    (0..6)
        .map(|_| {
            let c = ALPHABET[(bits % ALPHABET.len() as u64) as usize] as char;
            bits /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Refuses a directory another user owns or that group or others can write.
fn verify_private(fd: &OwnedFd, path: &Path) -> io::Result<()> {
    let stat = nix::sys::stat::fstat(fd.as_fd())?;
    let (uid, mode) = (stat.st_uid, stat.st_mode);
    let euid = nix::unistd::geteuid().as_raw();
    if uid != euid || mode & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "spill directory {} must be owned by uid {euid} and not writable by group or others (it is owned by uid {} with mode {:o})",
                path.display(),
                uid,
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

/// Takes a shared `flock` on the opened directory (through a close-on-exec duplicate, so no
/// child inherits it) and keeps it until the process exits, so no sweep removes the directory
/// while this harness lives. A lock that cannot be taken (a sweep holding it for longer than
/// the retries, a filesystem without `flock`) leaves the directory unlocked: spilling never
/// fails or blocks for it.
fn hold_for_process_lifetime(fd: &OwnedFd) {
    let Ok(mut dup) = fd.try_clone() else { return };
    for _ in 0..LOCK_ATTEMPTS {
        match Flock::lock(dup, FlockArg::LockSharedNonblock) {
            Ok(lock) => {
                HELD_LOCKS.lock().push(lock);
                return;
            }
            Err((fd, Errno::EWOULDBLOCK | Errno::EINTR)) => {
                dup = fd;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => return,
        }
    }
}

/// Starts the once-per-process sweep of `temp` on a background thread.
fn start_sweep(temp: &Path) {
    if SWEPT.swap(true, Ordering::SeqCst) {
        return;
    }
    let Some(max_age) = spill_max_age(std::env::var(SPILL_MAX_AGE_ENV).ok().as_deref()) else {
        return;
    };
    let temp = temp.to_path_buf();
    let sweep = move || match sweep_some(&temp, max_age, SWEEP_BUDGET) {
        Ok(removed) if !removed.is_empty() => {
            tracing::debug!(count = removed.len(), "removed stale spill directories");
        }
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "spill directory clean-up skipped"),
    };
    // A failing thread spawn only means no clean-up this time.
    let _ = std::thread::Builder::new().name("dsh-spill-sweep".into()).spawn(sweep);
}

/// The clean-up age for a value of [`SPILL_MAX_AGE_ENV`]: unset or blank → the default;
/// `0` or anything but a whole number of seconds → `None` (disabled).
pub fn spill_max_age(value: Option<&str>) -> Option<Duration> {
    match value.map(str::trim) {
        None | Some("") => Some(DEFAULT_SPILL_MAX_AGE),
        Some(text) => match text.parse::<u64>() {
            Ok(0) | Err(_) => None,
            Ok(secs) => Some(Duration::from_secs(secs)),
        },
    }
}

/// Removes, from `temp_dir`, the private spill directories of harnesses that are gone and
/// that were last modified longer than `max_age` ago; returns the paths removed.
///
/// A candidate is an entry named exactly `dsh-subprocess-` followed by six ASCII alphanumerics.
/// It is opened without following symlinks (`O_NOFOLLOW|O_DIRECTORY`) and left alone unless
/// it is a directory owned by the effective user; its newest modification time (its own and
/// every entry's) is older than `max_age`; no entry is a directory; no entry name
/// (`dsh-subprocess-<pid>-…`) carries the pid of a live process; and an exclusive
/// non-blocking `flock` succeeds (a live harness holds a shared one). Its entries are then
/// unlinked through the directory's descriptor and the directory is removed if it is still
/// the one that was opened. Candidates that fail any step are skipped; only failing to open or
/// read `temp_dir` itself is an error.
pub fn remove_stale_spill_dirs(temp_dir: &Path, max_age: Duration) -> io::Result<Vec<PathBuf>> {
    sweep_some(temp_dir, max_age, usize::MAX)
}

/// How many candidates one process's sweep looks into at most, so its cost does not grow with
/// the directories other harnesses left (the names are listed, which is cheap; each candidate
/// looked into costs an open, a lock and a listing). Every harness looks at another window, so
/// together they go through all.
const SWEEP_BUDGET: usize = 16;

/// [`remove_stale_spill_dirs`] looking into at most `budget` candidates, from a random one on.
fn sweep_some(temp_dir: &Path, max_age: Duration, budget: usize) -> io::Result<Vec<PathBuf>> {
    let temp_fd =
        nix::fcntl::open(temp_dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
    let names: Vec<String> = nix::dir::Dir::from_fd(temp_fd.try_clone()?)?
        .into_iter()
        .filter_map(|entry| entry.ok()?.file_name().to_str().ok().map(str::to_owned))
        .filter(|name| is_private_dir_name(name))
        .collect();
    let start = if names.is_empty() { 0 } else { rand::random::<u64>() as usize % names.len() };
    let now = SystemTime::now();
    let mut removed = Vec::new();
    for name in names.iter().cycle().skip(start).take(budget.min(names.len())) {
        if remove_if_stale(&temp_fd, name, now, max_age) {
            removed.push(temp_dir.join(name));
        }
    }
    Ok(removed)
}

/// `dsh-subprocess-` followed by exactly six ASCII alphanumerics.
fn is_private_dir_name(name: &str) -> bool {
    name.strip_prefix(DIR_PREFIX)
        .is_some_and(|suffix| suffix.len() == 6 && suffix.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// One candidate of [`remove_stale_spill_dirs`]; `true` when it was removed.
fn remove_if_stale(temp_fd: &OwnedFd, name: &str, now: SystemTime, max_age: Duration) -> bool {
    let Ok(fd) = nix::fcntl::openat(temp_fd.as_fd(), name, dir_flags(), Mode::empty()) else {
        return false;
    };
    let Ok(stat) = nix::sys::stat::fstat(fd.as_fd()) else { return false };
    if stat.st_uid != nix::unistd::geteuid().as_raw() || !is_kind(&stat, SFlag::S_IFDIR) {
        return false;
    }
    // Checked before locking, so a sweep never holds the lock of a fresh directory.
    if survey(&fd, &stat, now, max_age).is_none() {
        return false;
    }
    let Ok(lock) = Flock::lock(fd, FlockArg::LockExclusiveNonblock) else { return false };
    // Checked again under the lock: nothing may have been added or touched meanwhile.
    let Some(entries) = survey(&lock, &stat, now, max_age) else { return false };
    for entry in &entries {
        if nix::unistd::unlinkat(lock.as_fd(), entry.as_str(), UnlinkatFlags::NoRemoveDir).is_err() {
            return false;
        }
    }
    let same = nix::sys::stat::fstatat(temp_fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|now| now.st_dev == stat.st_dev && now.st_ino == stat.st_ino);
    same && nix::unistd::unlinkat(temp_fd.as_fd(), name, UnlinkatFlags::RemoveDir).is_ok()
}

/// The entry names of an opened candidate directory when it may be removed: every entry and
/// the directory itself older than `max_age`, no subdirectory, no live pid in an entry name.
fn survey(dir: &OwnedFd, stat: &FileStat, now: SystemTime, max_age: Duration) -> Option<Vec<String>> {
    let own = nix::sys::stat::fstat(dir.as_fd()).ok()?;
    if own.st_dev != stat.st_dev || own.st_ino != stat.st_ino || !older_than(&own, now, max_age) {
        return None;
    }
    let mut names = Vec::new();
    let mut listing = nix::dir::Dir::from_fd(dir.try_clone().ok()?).ok()?;
    for entry in listing.iter() {
        let entry = entry.ok()?;
        let name = entry.file_name().to_str().ok()?.to_owned();
        if name == "." || name == ".." {
            continue;
        }
        let entry_stat =
            nix::sys::stat::fstatat(dir.as_fd(), name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
        if is_kind(&entry_stat, SFlag::S_IFDIR)
            || !older_than(&entry_stat, now, max_age)
            || names_live_process(&name)
        {
            return None;
        }
        names.push(name);
    }
    Some(names)
}

fn is_kind(stat: &FileStat, kind: SFlag) -> bool {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == kind
}

/// Whether the modification time is more than `max_age` before `now` (a time in the future
/// is never old).
fn older_than(stat: &FileStat, now: SystemTime, max_age: Duration) -> bool {
    let Ok(secs) = u64::try_from(stat.st_mtime) else { return false };
    let Ok(nanos) = u32::try_from(stat.st_mtime_nsec) else { return false };
    let modified = UNIX_EPOCH + Duration::new(secs, nanos);
    now.duration_since(modified).is_ok_and(|age| age > max_age)
}

/// Whether a spill file name (`dsh-subprocess-<pid>-…`) names a process that exists (or that
/// we may not signal): such a directory may belong to a harness that holds no lock.
fn names_live_process(name: &str) -> bool {
    let Some(pid) = name
        .strip_prefix(DIR_PREFIX)
        .and_then(|rest| rest.split('-').next())
        .and_then(|pid| pid.parse::<i32>().ok())
        .filter(|pid| *pid > 0)
    else {
        return false;
    };
    !matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(Errno::ESRCH))
}
