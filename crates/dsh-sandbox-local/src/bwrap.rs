//! What the harness does in bubblewrap's own process before exec'ing it: hand it the seccomp
//! program on an inherited descriptor, and scope signals and abstract Unix sockets to a
//! Landlock domain that bubblewrap and the command inherit (bubblewrap has no switch for
//! either; the domain handles no file access, so bubblewrap's own mounts still work).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use crate::inprocess::child::{CapData, CapHeader, LINUX_CAPABILITY_VERSION_3, LOCKED_SECUREBITS};
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
    /// The process that keeps the covers while the command runs (see [`Warden`]).
    warden: Option<Warden>,
}

/// What keeps bubblewrap's covers while the command runs.
///
/// A cover is a mount on a file, and the kernel drops it in every namespace when the host
/// renames another file over that path (as `git config`, editors and credential helpers do).
/// bubblewrap builds the command's namespace itself, so the harness keeps a **warden**
/// beside it: a process forked before bubblewrap starts, outside its namespaces and its
/// Landlock domain (the command can neither see nor signal it), which learns the sandbox's
/// pid from bubblewrap's `--info-fd`, waits until the sandbox is set up (its init has a
/// child), joins its mount namespace (through the user namespace that owns it), and from then
/// on makes again every cover the host drops, each time the namespace's mount table changes
/// (the kernel flags that on an open `mountinfo`). It dies with bubblewrap.
#[derive(Debug)]
struct Warden {
    info_read: OwnedFd,
    info_write: OwnedFd,
    plan: crate::inprocess::world::WorldPlan,
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
            warden: None,
        })
    }

    /// Keeps the covers of `plan` while the command runs (see [`Warden`]); bubblewrap is to
    /// be given `--info-fd` with [`Self::info_fd`].
    pub(crate) fn with_warden(mut self, plan: crate::inprocess::world::WorldPlan) -> Result<Self, String> {
        if plan.protected.is_empty() && plan.masks.is_empty() && plan.late.is_empty() {
            return Ok(self);
        }
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two-element array on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(format!("cannot make the warden's pipe: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: both fds were just created and are owned by nobody else.
        let (info_read, info_write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        self.warden = Some(Warden { info_read, info_write, plan });
        Ok(self)
    }

    /// The descriptor number bubblewrap writes its sandbox's pid to (`--info-fd`).
    pub(crate) fn info_fd(&self) -> Option<i32> {
        self.warden.as_ref().map(|w| w.info_write.as_raw_fd())
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

// SAFETY: `apply_in_child` forks the warden (which only runs `run_warden`, see there) and
// only issues `faccessat`, `pwrite`, `ftruncate`, `lseek`, `setns`,
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
        // The warden before anything narrows this process: it keeps the capabilities it
        // needs to join the sandbox's namespaces, outside the scope domain below.
        if let Some(warden) = &self.warden {
            // SAFETY: getpid has no preconditions; fork of the single-threaded child, whose
            // copy only runs async-signal-safe code (`run_warden`) and never returns.
            unsafe {
                let parent = libc::getpid();
                match libc::fork() {
                    0 => run_warden(warden, parent),
                    pid if pid < 0 => return Err(std::io::Error::last_os_error()),
                    _ => {}
                }
                if libc::fcntl(warden.info_write.as_raw_fd(), libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
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

/// The warden's life (see [`Warden`]), in a fork of the launch's child: raw syscalls on what
/// the parent prepared and stack buffers only. Never returns; any failure ends it quietly
/// (the covers then stay as bubblewrap made them).
fn run_warden(warden: &Warden, parent: libc::pid_t) -> ! {
    use crate::inprocess::world;
    let quit = || -> ! {
        // SAFETY: leaving the warden.
        unsafe { libc::_exit(0) }
    };
    let info = warden.info_read.as_raw_fd();
    // SAFETY: setsid, prctl and getppid with integer arguments; close_range on this process's
    // fds. A session (and process group) of its own: the harness waits for the call's group to
    // empty, and the warden, which outlives bubblewrap by a moment, is no part of the command.
    unsafe {
        libc::setsid();
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != parent {
            quit();
        }
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        if info > 0 {
            libc::syscall(libc::SYS_close_range, 0, info - 1, 0);
        }
        libc::syscall(libc::SYS_close_range, info + 1, libc::c_uint::MAX, 0);
    }
    // The warden ends with bubblewrap: its exit makes this descriptor readable (the parent-death
    // signal alone is not relied on).
    // SAFETY: pidfd_open of our parent with no flags.
    let bubblewrap = unsafe { libc::syscall(libc::SYS_pidfd_open, parent, 0) } as libc::c_int;
    if bubblewrap < 0 {
        quit();
    }
    let Some(pid) = read_child_pid(info) else { quit() };
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(info) };
    let mut path = [0u8; 64];
    let mut proc_open = |tail: &[u8], flags: libc::c_int| -> libc::c_int {
        proc_path(&mut path, pid, tail);
        // SAFETY: `path` is NUL-terminated by `proc_path`.
        unsafe { libc::open(path.as_ptr().cast(), flags | libc::O_CLOEXEC) }
    };
    // Set up once the sandbox's init has started the command: its mounts are all made.
    let mut waited = 0;
    loop {
        let children = proc_open(b"/task/", libc::O_RDONLY);
        if children < 0 {
            quit();
        }
        let mut byte = 0u8;
        // SAFETY: reading one byte into a stack variable, then closing our descriptor.
        let read = unsafe {
            let read = libc::read(children, (&mut byte as *mut u8).cast(), 1);
            libc::close(children);
            read
        };
        if read == 1 {
            break;
        }
        waited += 1;
        let mut gone = [libc::pollfd { fd: bubblewrap, events: libc::POLLIN, revents: 0 }];
        // SAFETY: polling a stack array of one pollfd for a millisecond.
        if waited > 30_000 || unsafe { libc::poll(gone.as_mut_ptr(), 1, 1) } != 0 {
            quit();
        }
    }
    let mounts = proc_open(b"/mountinfo", libc::O_RDONLY);
    let root = proc_open(b"/root", libc::O_PATH | libc::O_DIRECTORY);
    let userns = proc_open(b"/ns/user", libc::O_RDONLY);
    let mntns = proc_open(b"/ns/mnt", libc::O_RDONLY);
    if mounts < 0 || root < 0 || userns < 0 || mntns < 0 {
        quit();
    }
    if !join(userns, mntns) {
        quit();
    }
    // SAFETY: entering the sandbox's root through a descriptor opened before joining.
    unsafe {
        if libc::fchdir(root) < 0 || libc::chroot(c".".as_ptr()) < 0 {
            quit();
        }
    }
    let plan = &warden.plan;
    let events = world::watch(plan);
    let mut spares = world::Spares::new(plan);
    let mut recover = || world::recover(plan, &mut spares, &[bubblewrap]);
    recover();
    loop {
        // A negative descriptor is ignored by poll.
        let mut fds = [
            libc::pollfd { fd: mounts, events: libc::POLLPRI, revents: 0 },
            libc::pollfd { fd: events, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: bubblewrap, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: polling a stack array of three pollfds.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) };
        if (ready < 0 && child_errno() != libc::EINTR) || fds[2].revents != 0 {
            quit();
        }
        if fds[1].revents != 0 {
            world::drain(events);
        }
        if fds[..2].iter().any(|f| f.revents != 0) {
            recover();
        }
    }
}

fn child_errno() -> i32 {
    // SAFETY: reading the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Joins the sandbox's mount namespace: first the user namespace that owns it — bubblewrap
/// may nest a second one inside, whose parent owns the mounts — unless it is our own.
fn join(userns: libc::c_int, mntns: libc::c_int) -> bool {
    const NS_GET_PARENT: libc::c_ulong = 0xb702;
    let own = {
        // SAFETY: opening a constant NUL-terminated path.
        let fd = unsafe { libc::open(c"/proc/self/ns/user".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        let id = fd_inode(fd);
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        id
    };
    if fd_inode(userns) != own {
        // SAFETY: an ioctl with no argument on our descriptor; setns on descriptors we hold.
        unsafe {
            let parent = libc::ioctl(userns, NS_GET_PARENT);
            let joined =
                parent >= 0 && fd_inode(parent) != own && libc::setns(parent, libc::CLONE_NEWUSER) == 0;
            if !joined && libc::setns(userns, libc::CLONE_NEWUSER) < 0 {
                return false;
            }
        }
    }
    // SAFETY: setns on a descriptor we hold.
    unsafe { libc::setns(mntns, libc::CLONE_NEWNS) == 0 }
}

fn fd_inode(fd: libc::c_int) -> Option<u64> {
    // SAFETY: `stat` is plain old data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a live buffer on the stack.
    (fd >= 0 && unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}

/// Reads bubblewrap's `--info-fd` report up to its `"child-pid": N`; `None` when it closes
/// the pipe first (it failed) or the report has no such number.
fn read_child_pid(fd: libc::c_int) -> Option<libc::pid_t> {
    let mut buf = [0u8; 1024];
    let mut len = 0;
    loop {
        if let Some(pid) = parse_child_pid(&buf[..len]) {
            return Some(pid);
        }
        if len == buf.len() {
            return None;
        }
        // SAFETY: reading into the free tail of a stack buffer.
        let read = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if read < 0 && child_errno() == libc::EINTR {
            continue;
        }
        if read <= 0 {
            return None;
        }
        len += read as usize;
    }
}

/// The number after `"child-pid":` once a character that ends it has been read.
fn parse_child_pid(text: &[u8]) -> Option<libc::pid_t> {
    const KEY: &[u8] = b"\"child-pid\":";
    let start = text.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = &text[start..];
    let digits = rest.iter().position(|b| b.is_ascii_digit())?;
    let mut pid: libc::pid_t = 0;
    for (i, b) in rest[digits..].iter().enumerate() {
        if !b.is_ascii_digit() {
            return (i > 0 && pid > 0).then_some(pid);
        }
        pid = pid.checked_mul(10)?.checked_add(libc::pid_t::from(b - b'0'))?;
    }
    None
}

/// Writes `/proc/<pid><tail>` (for `/task/`: `/task/<pid>/children`), NUL-terminated, into
/// `buf`; returns its length.
fn proc_path(buf: &mut [u8; 64], pid: libc::pid_t, tail: &[u8]) -> usize {
    let (digits, count) = crate::inprocess::child::decimal(pid.unsigned_abs());
    let mut len = 0;
    let mut push = |bytes: &[u8], len: &mut usize| {
        buf[*len..*len + bytes.len()].copy_from_slice(bytes);
        *len += bytes.len();
    };
    push(b"/proc/", &mut len);
    push(&digits[..count], &mut len);
    push(tail, &mut len);
    if tail == b"/task/" {
        push(&digits[..count], &mut len);
        push(b"/children", &mut len);
    }
    buf[len] = 0;
    len
}

#[cfg(test)]
mod warden_tests {
    use super::*;

    #[test]
    fn the_sandbox_pid_is_read_from_bubblewraps_report() {
        let report = b"{\n    \"child-pid\": 22721,\n    \"cgroup-namespace\": 4026532179\n}";
        assert_eq!(parse_child_pid(report), Some(22721));
        assert_eq!(parse_child_pid(b"{\n    \"child-pid\": 2272"), None, "a number still being read");
        assert_eq!(parse_child_pid(b"{\"other\": 5}"), None);
        let mut buf = [0u8; 64];
        let len = proc_path(&mut buf, 4071, b"/task/");
        assert_eq!(&buf[..len], b"/proc/4071/task/4071/children");
        let len = proc_path(&mut buf, 7, b"/ns/mnt");
        assert_eq!(&buf[..len + 1], b"/proc/7/ns/mnt\0");
    }
}
