//! What the harness does in bubblewrap's own process before exec'ing it: hand it the seccomp
//! program on an inherited descriptor, and scope signals and abstract Unix sockets to a
//! Landlock domain that bubblewrap and the command inherit (bubblewrap has no switch for
//! either; the domain handles no file access, so bubblewrap's own mounts still work).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use dsh_sandbox::ChildConfinement;
use landlock::{CompatLevel, Compatible, Ruleset, RulesetAttr, Scope};

/// The in-child part of a bubblewrap launch.
#[derive(Debug)]
pub(crate) struct BwrapLaunch {
    /// The seccomp program, on a descriptor of its own (its own file offset), inherited by
    /// bubblewrap at the number its `--seccomp` argument names.
    seccomp: Option<OwnedFd>,
    scope: Option<&'static OwnedFd>,
    /// The session's network namespace to join before bubblewrap runs (network `deny`/`ask`).
    network: Option<std::sync::Arc<crate::inprocess::NetworkHolder>>,
    /// The covers of denied reads, handed to bubblewrap as `--args` on a descriptor.
    masks: Option<MaskArgs>,
    /// The highest capability number the kernel knows.
    last_cap: u32,
}

/// bubblewrap's arguments binding each cover, written by the child into a memfd that
/// bubblewrap reads with `--args`: only the covers whose path the child (with the command's
/// credentials) can reach, since bubblewrap dies on a target it cannot reach, and the command
/// could not read what lies there anyway.
#[derive(Debug)]
struct MaskArgs {
    memfd: OwnedFd,
    /// Each covered path, with its NUL-separated `--ro-bind COVER PATH` arguments.
    items: Vec<(CString, Vec<u8>)>,
}

impl BwrapLaunch {
    /// Prepares one launch: a fresh descriptor on the filter program, and the scope domain.
    pub(crate) fn prepare(
        network: Option<std::sync::Arc<crate::inprocess::NetworkHolder>>,
    ) -> Result<Self, String> {
        let seccomp = match program_memfd()? {
            Some(memfd) => {
                let path = CString::new(format!("/proc/self/fd/{}", memfd.as_raw_fd()))
                    .map_err(|e| e.to_string())?;
                // SAFETY: opening a NUL-terminated path; the fd is owned below.
                let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                if fd < 0 {
                    return Err(format!(
                        "cannot reopen the seccomp program: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                // SAFETY: `fd` was just opened and is owned by nobody else.
                Some(unsafe { OwnedFd::from_raw_fd(fd) })
            }
            None => None,
        };
        Ok(Self {
            seccomp,
            scope: scope_ruleset(),
            network,
            masks: None,
            last_cap: crate::inprocess::last_cap(),
        })
    }

    /// Hands bubblewrap the covers of `items` (each path with its `--ro-bind COVER PATH`
    /// arguments, NUL-separated) through a memfd of this launch ([`Self::masks_fd`]).
    pub(crate) fn with_masks(mut self, items: Vec<(CString, Vec<u8>)>) -> Result<Self, String> {
        if items.is_empty() {
            return Ok(self);
        }
        // SAFETY: memfd_create with a constant name; the fd is owned below.
        let fd = unsafe { libc::memfd_create(c"dsh-bwrap-masks".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("cannot make the masks file: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: just created, owned by nobody else.
        let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
        self.masks = Some(MaskArgs { memfd, items });
        Ok(self)
    }

    /// The descriptor number bubblewrap reads the covers' arguments from (`--args`).
    pub(crate) fn masks_fd(&self) -> Option<i32> {
        self.masks.as_ref().map(|m| m.memfd.as_raw_fd())
    }

    /// The descriptor number bubblewrap reads the seccomp program from.
    pub(crate) fn seccomp_fd(&self) -> Option<i32> {
        self.seccomp.as_ref().map(AsRawFd::as_raw_fd)
    }
}

// SAFETY: `apply_in_child` only issues `faccessat`, `pwrite`, `ftruncate`, `lseek`, `setns`,
// `fcntl`, `capget`, `capset`, `prctl` and `landlock_restrict_self` on paths and descriptors
// prepared in the parent (`prepare` and `with_masks` initialise the memfds, the masks'
// strings, the capability count and the scope ruleset there); it allocates nothing and takes
// no lock.
unsafe impl ChildConfinement for BwrapLaunch {
    fn apply_in_child(&self) -> std::io::Result<()> {
        // First, with the command's own credentials (after any uid change of the spawn).
        if let Some(masks) = &self.masks {
            write_masks(masks)?;
        }
        if let Some(network) = &self.network {
            // SAFETY: setns on descriptors the parent keeps open; the child is single-threaded.
            unsafe {
                if let Some(userns) = &network.userns
                    && libc::setns(userns.as_raw_fd(), libc::CLONE_NEWUSER) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::setns(network.netns.as_raw_fd(), libc::CLONE_NEWNET) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        if let Some(fd) = &self.seccomp {
            // SAFETY: clearing close-on-exec on a descriptor this process holds.
            if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        hand_capabilities_to_bubblewrap(self.last_cap)?;
        if let Some(ruleset) = self.scope {
            // SAFETY: prctl with integer arguments; landlock_restrict_self on a ruleset fd the
            // parent keeps open for the process's life.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0
                    || libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// `SECBIT_NOROOT`, `SECBIT_NO_SETUID_FIXUP`, `SECBIT_NO_CAP_AMBIENT_RAISE` and the locks of
/// those three and of `SECBIT_KEEP_CAPS`, as the in-process runner sets them.
const LOCKED_SECUREBITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// For a harness with capabilities (root): bubblewrap keeps the bounding set of a root
/// caller and cannot lock securebits, so this process does both before it execs bubblewrap,
/// and hands bubblewrap its capabilities as ambient ones instead (with `SECBIT_NOROOT` an
/// exec grants root nothing by itself). bubblewrap needs them for its mounts and drops them
/// all (`--cap-drop ALL`) before it execs the command, which is then root with an empty
/// bounding set and locked securebits: no exec can give it a capability again. A process
/// that is not root has nothing to hand on and is left as it is (bubblewrap then makes a
/// user namespace of its own and empties the bounding set there).
fn hand_capabilities_to_bubblewrap(last_cap: u32) -> std::io::Result<()> {
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and a two-element data array as capget(2) expects for version 3.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a plain id getter.
    let root = unsafe { libc::geteuid() } == 0;
    // Capabilities held as another user are those of a user namespace joined for the
    // network; an exec drops them by itself, as bubblewrap expects of an unprivileged caller.
    if !root || data.iter().all(|d| d.permitted == 0) {
        return Ok(());
    }
    // Ambient capabilities must be permitted and inheritable.
    for d in &mut data {
        d.inheritable = d.permitted;
        d.effective = d.permitted;
    }
    // SAFETY: header and data as capset(2) expects for version 3.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    for cap in 0..=last_cap.min(63) {
        if data[(cap / 32) as usize].permitted & (1 << (cap % 32)) == 0 {
            continue;
        }
        let cap = libc::c_ulong::from(cap);
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE, cap, 0, 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    for cap in 0..=last_cap {
        // SAFETY: prctl with integer arguments only.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
        // EINVAL: the kernel does not know this capability, so nobody can hold it.
        if ret < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, LOCKED_SECUREBITS, 0, 0, 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Writes the arguments of the covers this process can reach into the masks memfd, from its
/// start, and leaves it open across `exec` for bubblewrap. Runs in the forked child.
fn write_masks(masks: &MaskArgs) -> std::io::Result<()> {
    let fd = masks.memfd.as_raw_fd();
    let mut offset: libc::off_t = 0;
    for (path, bytes) in &masks.items {
        // SAFETY: a NUL-terminated path prepared in the parent; no memory is written.
        if unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), libc::F_OK, 0) } != 0 {
            continue;
        }
        // SAFETY: writing from a live slice to a descriptor this process holds.
        let written = unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), offset) };
        if written != bytes.len() as isize {
            return Err(std::io::Error::last_os_error());
        }
        offset += written as libc::off_t;
    }
    // SAFETY: integer arguments on a descriptor this process holds.
    unsafe {
        if libc::ftruncate(fd, offset) < 0
            || libc::lseek(fd, 0, libc::SEEK_SET) < 0
            || libc::fcntl(fd, libc::F_SETFD, 0) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A memfd holding the filter program, made once.
fn program_memfd() -> Result<Option<&'static OwnedFd>, String> {
    static MEMFD: OnceLock<Result<Option<OwnedFd>, String>> = OnceLock::new();
    MEMFD
        .get_or_init(|| {
            let filter = crate::seccomp::filter()?;
            let bytes = filter.bytes();
            if bytes.is_empty() {
                return Ok(None);
            }
            // SAFETY: memfd_create with a constant name; the fd is owned below.
            let fd = unsafe { libc::memfd_create(c"dsh-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(format!(
                    "cannot make the seccomp program file: {}",
                    std::io::Error::last_os_error()
                ));
            }
            // SAFETY: just created, owned here for the process's life.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let mut file = std::fs::File::from(fd);
            std::io::Write::write_all(&mut file, bytes)
                .map_err(|e| format!("cannot write the seccomp program: {e}"))?;
            Ok(Some(OwnedFd::from(file)))
        })
        .as_ref()
        .map(Option::as_ref)
        .map_err(Clone::clone)
}

/// A Landlock ruleset that only scopes signals and abstract Unix sockets (`None` where the
/// kernel has no scoping).
fn scope_ruleset() -> Option<&'static OwnedFd> {
    static SCOPE: OnceLock<Option<OwnedFd>> = OnceLock::new();
    SCOPE
        .get_or_init(|| {
            let ruleset = Ruleset::default()
                .set_compatibility(CompatLevel::BestEffort)
                .scope(Scope::AbstractUnixSocket | Scope::Signal)
                .ok()?
                .create()
                .ok()?;
            ruleset.into()
        })
        .as_ref()
}
