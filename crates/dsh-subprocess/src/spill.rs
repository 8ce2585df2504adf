//! Spill files: where they live, how they are named, and how they are created safely.
//!
//! Files go in a private directory (`<os temp>/dsh-subprocess-XXXXXX`, mode `0700`, created
//! lazily on the first spill) unless a host injects its own directory. Each file is created
//! exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode `0600`), so a pre-planted file or symlink at
//! the chosen path is never opened, let alone followed; a collision is retried under a fresh
//! name a few times and then reported as "no spill".

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// How many fresh names are tried when the chosen path already exists.
const CREATE_ATTEMPTS: usize = 4;

/// The process-wide spill counter (the `<n>` in every spill file name).
static SPILL_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Chooses the file name (not the directory) of a new spill file.
///
/// The default is `dsh-subprocess-<pid>-<counter>-<12 random hex>-<label>.log`. Tests inject
/// deterministic names to plant files or symlinks at the exact path a spill will try.
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
}

/// Opens a new spill sink for a stream label.
pub(crate) type SpillFactory = Arc<dyn Fn(&str) -> io::Result<Box<dyn SpillSink>> + Send + Sync>;

struct FileSink {
    path: PathBuf,
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
}

/// The directory spill files go to, created on first use.
pub(crate) struct SpillLocation {
    injected: Option<PathBuf>,
    private: Mutex<Option<PathBuf>>,
    namer: Arc<dyn SpillNamer>,
}

impl SpillLocation {
    pub(crate) fn new(injected: Option<PathBuf>, namer: Arc<dyn SpillNamer>) -> Self {
        Self { injected, private: Mutex::new(None), namer }
    }

    /// The spill directory if one exists already (or was injected).
    pub(crate) fn existing_dir(&self) -> Option<PathBuf> {
        self.injected.clone().or_else(|| self.private.lock().clone())
    }

    fn dir(&self) -> io::Result<PathBuf> {
        if let Some(dir) = &self.injected {
            return Ok(dir.clone());
        }
        let mut private = self.private.lock();
        if let Some(dir) = &*private {
            return Ok(dir.clone());
        }
        let dir = tempfile::Builder::new()
            .prefix("dsh-subprocess-")
            .rand_bytes(6)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?
            // Completed spill files outlive the service: the directory is never removed.
            .keep();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        *private = Some(dir.clone());
        Ok(dir)
    }

    /// Creates a fresh spill file for `label`, never opening an existing path.
    pub(crate) fn create(&self, label: &str) -> io::Result<Box<dyn SpillSink>> {
        let dir = self.dir()?;
        let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
        for _ in 0..CREATE_ATTEMPTS {
            let path = dir.join(self.namer.file_name(label));
            let opened = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path);
            match opened {
                Ok(file) => return Ok(Box::new(FileSink { path, file })),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
                Err(e) => return Err(e),
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
