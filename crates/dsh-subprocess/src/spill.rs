//! Spill files: where they live, how they are named, and how they are created safely.
//!
//! Files go in a private directory (`<os temp>/dsh-subprocess-XXXXXX`, mode `0700`, created
//! lazily on the first spill) unless a host injects its own directory.
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

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use parking_lot::Mutex;

/// How many fresh names are tried when the chosen path already exists.
const CREATE_ATTEMPTS: usize = 4;

/// How many fresh names are tried for the private directory.
const DIR_ATTEMPTS: usize = 16;

/// The process-wide spill counter (the `<n>` in every spill file name).
static SPILL_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Chooses the file name (not the directory) of a new spill file.
///
/// The default is `dsh-subprocess-<pid>-<counter>-<12 random hex>-<label>.log`. Tests inject
/// deterministic names to plant files or symlinks at the exact path a spill will try. A name
/// must be a single path component.
pub trait SpillNamer: Send + Sync {
    fn file_name(&self, label: &str) -> String;
}

/// The contract's naming scheme.
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
}

/// Opens a new spill sink for a stream label.
pub(crate) type SpillFactory = Arc<dyn Fn(&str) -> io::Result<Box<dyn SpillSink>> + Send + Sync>;

/// The opened spill directory.
struct SpillDir {
    /// As spelled (injected, or `<os temp>/<name>`): the prefix of every reported path.
    path: PathBuf,
    /// Its canonical path when it was opened.
    canonical: PathBuf,
    fd: OwnedFd,
}

struct FileSink {
    path: PathBuf,
    name: String,
    dir: Arc<SpillDir>,
    file: File,
}

impl SpillSink for FileSink {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)
    }

    fn close(self: Box<Self>) -> io::Result<()> {
        nix::unistd::close(self.file).map_err(io::Error::from)
    }

    fn discard(self: Box<Self>) -> io::Result<()> {
        let Self { name, dir, file, .. } = *self;
        drop(file);
        match nix::unistd::unlinkat(dir.fd.as_fd(), name.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The directory spill files go to, opened on first use and kept open.
pub(crate) struct SpillLocation {
    injected: Option<PathBuf>,
    opened: Mutex<Option<Arc<SpillDir>>>,
    namer: Arc<dyn SpillNamer>,
}

impl SpillLocation {
    pub(crate) fn new(injected: Option<PathBuf>, namer: Arc<dyn SpillNamer>) -> Self {
        Self { injected, opened: Mutex::new(None), namer }
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

    /// Creates a fresh spill file for `label`, never opening an existing path.
    pub(crate) fn create(&self, label: &str) -> io::Result<Box<dyn SpillSink>> {
        let dir = self.dir()?;
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
                    return Ok(Box::new(FileSink { path, name, dir, file: File::from(fd) }));
                }
                Err(Errno::EEXIST) => last = Errno::EEXIST.into(),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last)
    }

    /// This location as a factory the collectors call.
    pub(crate) fn factory(self: &Arc<Self>) -> SpillFactory {
        let location = Arc::clone(self);
        Arc::new(move |label: &str| location.create(label))
    }
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
        // The umask may have narrowed the mode further; 0700 exactly is the contract.
        nix::sys::stat::fchmod(fd.as_fd(), Mode::from_bits_truncate(0o700))
            .map_err(|e| described(e.into()))?;
        verify_private(&fd, &path)?;
        // Completed spill files outlive the service: the directory is never removed.
        return Ok(SpillDir { path, canonical: canonical_temp.join(&name), fd });
    }
    Err(described(io::Error::from(io::ErrorKind::AlreadyExists)))
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
