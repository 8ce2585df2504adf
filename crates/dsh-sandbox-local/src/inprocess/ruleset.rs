//! The Landlock ruleset, built in the parent and applied in the child. It grants read
//! everywhere but the denied reads ([`ReadDenial`]), and write only to `/dev/null` and the
//! writable roots.
//!
//! Landlock grants, it cannot deny: a rule on a directory covers everything below it. So a
//! denied path is left out by granting its siblings instead of its parent: each directory on
//! the way from `/` to a denied path is *expanded* (its entries get rules of their own, the
//! denied one none), and listing stays allowed everywhere. Rules are bound to inodes, not
//! names, which is what makes the denial hold when the host changes the tree: a file renamed
//! over a denied path, a denied path that did not exist yet, or a directory replaced by
//! another is a new inode no rule names, so it stays closed. What the host adds to an
//! expanded directory after the rules were made stays closed too, until the next command
//! starts: each start compares the expanded directories' change stamps and rebuilds the rules
//! when one moved ([`ReadDenial::stamps`]).

use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use std::os::fd::AsFd;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

/// The newest ABI whose filesystem rights we ask for; older kernels are served best-effort.
/// (Later ABIs add Unix-socket connection control, which is not a file effect.)
const TARGET_ABI: ABI = ABI::V5;

/// The kernel's Landlock ABI version, or why Landlock is unusable.
pub(crate) fn landlock_abi() -> Result<u32, String> {
    // SAFETY: the version query takes no attribute pointer and has no side effects.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, /* LANDLOCK_CREATE_RULESET_VERSION */
        )
    };
    if version >= 1 {
        return Ok(u32::try_from(version).unwrap_or(u32::MAX));
    }
    let error = std::io::Error::last_os_error();
    Err(match error.raw_os_error() {
        Some(libc::ENOSYS) => "Landlock is not supported by this kernel".to_owned(),
        Some(libc::EOPNOTSUPP) => "Landlock is disabled at boot on this kernel".to_owned(),
        _ => format!("Landlock ABI query failed: {error}"),
    })
}

/// The reads a command is denied outside its writable roots: canonical paths, existing or not,
/// none inside another, and the existing directories on the way to them that the rules expand.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadDenial {
    denied: Vec<PathBuf>,
    /// Sorted; every proper ancestor of a denied path that exists as a directory.
    expanded: Vec<PathBuf>,
}

/// What identifies an expanded directory's entries at one moment: its device, inode and the
/// change time of its content (`None`: it is gone).
pub(crate) type Stamp = Option<(u64, u64, i64, i64)>;

impl ReadDenial {
    /// The denial of `paths` (absolute, canonical: symlinks resolved, a missing tail kept as
    /// spelled). Paths inside another denied path are dropped.
    pub(crate) fn new(paths: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut denied: Vec<PathBuf> = Vec::new();
        for path in paths.into_iter().filter(|p| p.is_absolute()) {
            if denied.iter().any(|d| path.starts_with(d)) {
                continue;
            }
            denied.retain(|d| !d.starts_with(&path));
            denied.push(path);
        }
        let mut expanded: Vec<PathBuf> = Vec::new();
        for path in &denied {
            for ancestor in path.ancestors().skip(1) {
                if !expanded.iter().any(|e| e == ancestor) && ancestor.is_dir() {
                    expanded.push(ancestor.to_path_buf());
                }
            }
        }
        expanded.sort();
        Self { denied, expanded }
    }

    /// Whether nothing is denied.
    pub(crate) fn is_empty(&self) -> bool {
        self.denied.is_empty()
    }

    /// The expanded directories' stamps, in order: rules made at one set of stamps are
    /// current while the stamps are the same.
    pub(crate) fn stamps(&self) -> Vec<Stamp> {
        self.expanded
            .iter()
            .map(|dir| {
                std::fs::symlink_metadata(dir)
                    .ok()
                    .filter(std::fs::Metadata::is_dir)
                    .map(|m| (m.dev(), m.ino(), m.mtime(), m.mtime_nsec()))
            })
            .collect()
    }

    /// Adds the read rules: `/` listable, then every entry of each expanded directory that is
    /// neither denied nor itself expanded, readable (a directory with everything below it).
    ///
    /// Landlock looks at a rule where a path's walk to `/` passes, and that walk skips the
    /// directory a mount covers. So what the command's namespace mounts afresh below an
    /// expanded directory gets rules of its own: `inside`, the roots of its own `/tmp`,
    /// `/dev/shm` and device nodes, and `proc`, its own `/proc`.
    fn add_rules(
        &self,
        mut ruleset: landlock::RulesetCreated,
        read: BitFlags<AccessFs>,
        (inside, proc): (&[PathBuf], Option<&OwnedFd>),
    ) -> Result<landlock::RulesetCreated, String> {
        let root = Path::new("/");
        if self.denied.iter().any(|d| d == root) {
            return Ok(ruleset);
        }
        if self.expanded.is_empty() {
            return ruleset
                .add_rule(PathBeneath::new(open(root)?, read))
                .map_err(|e| format!("cannot add rule for /: {e}"));
        }
        ruleset = ruleset
            .add_rule(PathBeneath::new(open(root)?, AccessFs::ReadDir))
            .map_err(|e| format!("cannot add rule for /: {e}"))?;
        let file_read = read & AccessFs::from_file(TARGET_ABI);
        for path in inside.iter().filter(|p| p.exists()) {
            let access = if path.is_dir() { read } else { file_read };
            ruleset = ruleset
                .add_rule(PathBeneath::new(open(path)?, access))
                .map_err(|e| format!("cannot add rule for {}: {e}", path.display()))?;
        }
        if let Some(proc) = proc {
            ruleset = ruleset
                .add_rule(PathBeneath::new(proc.as_fd(), read))
                .map_err(|e| format!("cannot add rule for /proc: {e}"))?;
        }
        let mut pending = vec![root.to_path_buf()];
        while let Some(dir) = pending.pop() {
            // A directory that cannot be listed grants nothing below it: closed, not open.
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                if self.denied.contains(&path) {
                    continue;
                }
                if self.expanded.binary_search(&path).is_ok() {
                    pending.push(path);
                    continue;
                }
                // Not following links: a link is checked at its target.
                let Ok(file) = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&path)
                else {
                    continue;
                };
                let Ok(meta) = file.metadata() else { continue };
                let access = match meta.file_type() {
                    t if t.is_symlink() => continue,
                    t if t.is_dir() => read,
                    _ => file_read,
                };
                ruleset = ruleset
                    .add_rule(PathBeneath::new(OwnedFd::from(file), access))
                    .map_err(|e| format!("cannot add rule for {}: {e}", path.display()))?;
            }
        }
        Ok(ruleset)
    }
}

/// Builds the ruleset fd: reads everywhere but `reads` (with `inside` and `proc` as in
/// [`ReadDenial::add_rules`]). Writable roots that do not exist are
/// skipped (nothing there can be granted, and their parents stay read-only). `devices` get
/// the same rights as `/dev/null`; `pts`, a private `devpts`, those rights beneath it. Where the kernel has them (ABI 6),
/// signals and abstract Unix sockets are scoped to the domain: a confined command can signal
/// and connect only to what runs confined with it.
pub(crate) fn build_ruleset(
    writable: &[PathBuf],
    devices: &[PathBuf],
    pts: Option<&OwnedFd>,
    (reads, inside, proc): (&ReadDenial, &[PathBuf], Option<&OwnedFd>),
) -> Result<OwnedFd, String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    let read = AccessFs::from_read(TARGET_ABI) | AccessFs::IoctlDev;
    let sink: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(|e| fail("cannot create ruleset", &e))?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(|e| fail("cannot create ruleset", &e))?
        .create()
        .map_err(|e| fail("cannot create ruleset", &e))?;
    ruleset = reads
        .add_rules(ruleset, read, (inside, proc))?
        .add_rule(PathBeneath::new(open(Path::new("/dev/null"))?, sink))
        .map_err(|e| fail("cannot add rule for /dev/null", &e))?;
    for device in devices.iter().filter(|d| d.exists()) {
        ruleset = ruleset
            .add_rule(PathBeneath::new(open(device)?, sink))
            .map_err(|e| fail(&format!("cannot add rule for {}", device.display()), &e))?;
    }
    if let Some(pts) = pts {
        ruleset = ruleset
            .add_rule(PathBeneath::new(pts.as_fd(), sink | AccessFs::IoctlDev))
            .map_err(|e| fail("cannot add rule for /dev/pts", &e))?;
    }
    for root in writable {
        if !root.exists() {
            continue;
        }
        ruleset = ruleset
            .add_rule(PathBeneath::new(open(root)?, AccessFs::from_all(TARGET_ABI)))
            .map_err(|e| fail(&format!("cannot add rule for {}", root.display()), &e))?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| landlock_abi().err().unwrap_or_else(|| "Landlock is not enforced".to_owned()))
}

fn open(path: &Path) -> Result<PathFd, String> {
    PathFd::new(path).map_err(|e| format!("cannot open rule path: {}: {e}", path.display()))
}
