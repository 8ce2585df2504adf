//! The confined command's own world, built inside its mount namespace after `/` is read-only:
//! a private `/dev`, the session's private `/tmp`, host socket directories masked, secrets
//! masked, and protected paths inside the writable roots read-only.
//!
//! Runs in a forked child (the template builder, or a confined child building its own
//! namespace): raw syscalls on data the parent prepared, stack buffers, no allocation.
//!
//! Order matters. Protected paths and masks are bound first (while the host's `/tmp` is still
//! visible as a bind source); the mounts that must stay reachable below an overmounted
//! directory (a workspace or the spill directory under `/tmp`) are then cloned with
//! `open_tree`; `/dev`, `/tmp` and the socket directories are covered; finally the clones are
//! moved back onto mount points in the new `/tmp`.

use std::ffi::{CStr, CString};
use std::os::fd::RawFd;

use super::child::{
    AT_RECURSIVE, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, MountAttr, StepError, errno,
    mount_setattr,
};
use super::record::Step;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
/// At most this many clones are held at once (device nodes plus re-attached mounts).
const MAX_CLONES: usize = 32;

/// Device nodes bound from the host into the private `/dev`.
pub(crate) const DEVICES: [&CStr; 6] =
    [c"/dev/null", c"/dev/zero", c"/dev/full", c"/dev/random", c"/dev/urandom", c"/dev/tty"];

/// Everything the world needs, prepared by the parent.
#[derive(Debug)]
pub(crate) struct WorldPlan {
    /// The session's private `/tmp` and `/dev/shm` (host directories), and whether they are
    /// writable.
    pub tmp: CString,
    pub shm: CString,
    pub writable: bool,
    /// Existing paths inside writable roots that become read-only.
    pub protected: Vec<CString>,
    /// Directories inside writable roots that hold a protected or denied path, each bound onto
    /// itself (writable as before) so the command cannot rename or remove them: a cover moves
    /// with its directory, and a directory rebuilt in its place would hold no cover.
    pub pinned: Vec<CString>,
    /// Paths covered by an empty file (`false`) or directory (`true`).
    pub masks: Vec<(CString, bool)>,
    /// Denied paths that did not exist when the world was built: covered as soon as the host
    /// makes one (see [`recover`]).
    pub late: Vec<CString>,
    /// The directories holding the covered and late paths, watched for entries the host adds,
    /// removes or renames ([`watch`]).
    pub watch: Vec<CString>,
    pub empty_file: CString,
    pub empty_dir: CString,
    /// Directories covered by an empty read-only tmpfs (`/run`, the runtime directory).
    pub hidden_dirs: Vec<CString>,
    /// Mounts re-attached at their own paths after `/tmp` is covered (on mount points the
    /// provider made in the private directory), and whether each is read-only.
    pub reattach: Vec<(CString, bool)>,
}

fn check(ret: libc::c_long, index: usize) -> Result<(), StepError> {
    if ret < 0 { Err((Step::World, index, errno())) } else { Ok(()) }
}

fn mount(
    source: &CStr,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> libc::c_long {
    // SAFETY: NUL-terminated strings owned by the plan or constants; null optional arguments.
    unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), CStr::as_ptr),
            flags,
            data.map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
        .into()
    }
}

fn set_attr(path: &CStr, flags: libc::c_uint, set: u64, clear: u64) -> libc::c_long {
    mount_setattr(path, flags, &MountAttr { attr_set: set, attr_clr: clear, propagation: 0, userns_fd: 0 })
}

/// Binds one of the session's private directories at `target`, writable or not (the bind
/// copies the read-only flag the host's tree got in this namespace).
fn bind_private(source: &CStr, target: &CStr, writable: bool, index: usize) -> Result<(), StepError> {
    check(mount(source, target, None, libc::MS_BIND | libc::MS_REC, None), index)?;
    let (set, clear) = match writable {
        true => (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, MOUNT_ATTR_RDONLY),
        false => (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0),
    };
    check(set_attr(target, 0, set, clear), index)
}

pub(crate) fn bind_read_only(source: &CStr, target: &CStr, index: usize) -> Result<(), StepError> {
    check(mount(source, target, None, libc::MS_BIND | libc::MS_REC, None), index)?;
    check(set_attr(target, AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0), index)
}

/// A detached copy of the mount tree at `path`.
fn clone_tree(path: &CStr, index: usize) -> Result<RawFd, StepError> {
    // SAFETY: open_tree with a NUL-terminated path; the returned fd is owned by the caller.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    check(fd, index)?;
    Ok(fd as RawFd)
}

/// Attaches the detached tree `fd` at `target` and closes `fd`, whether or not it could.
fn attach(fd: RawFd, target: &CStr, index: usize) -> Result<(), StepError> {
    let attached = move_tree(fd, target, index);
    // SAFETY: closing the clone fd this module opened.
    unsafe { libc::close(fd) };
    attached
}

/// Attaches the detached tree `fd` at `target`. `fd` stays open: after a failure it still
/// holds the detached tree, which can be attached elsewhere or later.
fn move_tree(fd: RawFd, target: &CStr, index: usize) -> Result<(), StepError> {
    // SAFETY: move_mount of a detached tree fd onto a NUL-terminated path.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check(ret, index)
}

/// Builds the world. `index` values in errors: 0–99 protected paths and masks, 100+ the
/// private `/dev`, 200+ `/tmp` and hidden directories, 300+ re-attached mounts.
/// The empty covers cloned while the host's `/tmp` is still in sight, for the template's
/// init (forked after the build, it inherits the descriptors): file, directory.
pub(crate) static SPARE_FDS: [std::sync::atomic::AtomicI32; 2] =
    [std::sync::atomic::AtomicI32::new(-1), std::sync::atomic::AtomicI32::new(-1)];

pub(crate) fn build(plan: &WorldPlan) -> Result<(), StepError> {
    if !plan.masks.is_empty() || !plan.late.is_empty() {
        for (kind, source) in [&plan.empty_file, &plan.empty_dir].into_iter().enumerate() {
            SPARE_FDS[kind].store(clone_tree(source, 0).unwrap_or(-1), std::sync::atomic::Ordering::Relaxed);
        }
    }
    for path in &plan.pinned {
        // A directory this process cannot reach (a command under another uid) cannot be
        // renamed by that command either.
        match check(mount(path, path, None, libc::MS_BIND, None), 40) {
            Err((_, _, libc::EACCES)) => {}
            result => result?,
        }
    }
    for (i, path) in plan.protected.iter().enumerate() {
        bind_read_only(path, path, i)?;
    }
    for (i, (path, dir)) in plan.masks.iter().enumerate() {
        let source = if *dir { &plan.empty_dir } else { &plan.empty_file };
        match bind_read_only(source, path, 50 + i) {
            // A path this process cannot reach (a command spawned under another uid, below a
            // directory closed to it): the command, with these credentials and none of the
            // capabilities, cannot reach it either, so there is nothing to cover.
            Err((_, _, libc::EACCES)) => {}
            result => result?,
        }
    }
    let mut clones = [-1 as RawFd; MAX_CLONES];
    if DEVICES.len() + plan.reattach.len() > MAX_CLONES {
        return Err((Step::World, 300, libc::E2BIG));
    }
    for (i, device) in DEVICES.iter().enumerate() {
        clones[i] = clone_tree(device, 100 + i)?;
    }
    for (i, (path, _)) in plan.reattach.iter().enumerate() {
        clones[DEVICES.len() + i] = clone_tree(path, 300 + i)?;
    }
    build_dev(plan, &clones[..DEVICES.len()])?;
    bind_private(&plan.tmp, c"/tmp", plan.writable, 200)?;
    for (i, dir) in plan.hidden_dirs.iter().enumerate() {
        check(
            mount(
                c"tmpfs",
                dir,
                Some(c"tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                Some(c"mode=0755,size=16k"),
            ),
            210 + i,
        )?;
        check(set_attr(dir, 0, MOUNT_ATTR_RDONLY, 0), 210 + i)?;
    }
    for (i, (path, read_only)) in plan.reattach.iter().enumerate() {
        attach(clones[DEVICES.len() + i], path, 300 + i)?;
        if *read_only {
            check(set_attr(path, AT_RECURSIVE, MOUNT_ATTR_RDONLY, 0), 300 + i)?;
        }
    }
    Ok(())
}

/// Makes the covers of the protected paths and masks again where one is gone: called in the
/// namespace each time its mount table changes (by the template's init, or by bubblewrap's
/// warden). A cover is a mount on a file or directory, and the kernel drops it in every
/// namespace when the host renames another file over that path or removes it (as
/// `git config`, editors and credential helpers do when they rewrite a file); the path then
/// shows the host's new file, writable inside a writable root. Each path that is no longer a
/// mount's root is covered again: a protected path by its new file, read-only; a mask by the
/// empty file or directory, bound from another mask still covered or from a spare copy
/// ([`Spares`]). A path that is gone stays uncovered (nothing to read or keep), and a failed
/// mount leaves it as it is (the next change tries again).
///
/// The kernel reports the change when it drops the cover, which is before the rename puts the
/// new file at the path: a pass that runs in between finds the old file there, which can no
/// longer be mounted on. So passes repeat, a millisecond apart, until one finds every path
/// covered (or gone), for at most about a fifth of a second per change.
///
/// Between passes it waits on `stop` (descriptors that become readable when the watcher is to
/// end: the harness or bubblewrap gone) and returns at once when one is.
pub(crate) fn recover(plan: &WorldPlan, spares: &mut Spares, stop: &[RawFd]) {
    for _ in 0..200 {
        if recover_once(plan, spares) {
            return;
        }
        let mut fds = [libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 }; 2];
        for (slot, fd) in fds.iter_mut().zip(stop) {
            slot.fd = *fd;
        }
        // SAFETY: polling a stack array of two pollfds (a negative descriptor is ignored) for
        // a millisecond.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, 1) } > 0 {
            return;
        }
    }
}

/// One pass of [`recover`]; whether every path was found covered or gone.
fn recover_once(plan: &WorldPlan, spares: &mut Spares) -> bool {
    let mut settled = true;
    for path in &plan.protected {
        if mount_root(path) == Some(false) {
            settled &= bind_read_only(path, path, 0).is_ok() && mount_root(path) != Some(false);
        }
    }
    for path in plan.masks.iter().map(|(p, _)| p).chain(&plan.late) {
        if let (Some(false), Some(dir)) = (mount_root(path), is_dir(path)) {
            spares.cover(plan, usize::from(dir), path);
            settled &= mount_root(path) != Some(false);
        }
    }
    settled
}

/// An inotify descriptor watching `plan.watch` for entries added, removed or renamed there
/// (a denied path made by the host, a denied directory replaced by another: neither changes
/// the mount table), or `-1`. Non-blocking; see [`drain`].
pub(crate) fn watch(plan: &WorldPlan) -> RawFd {
    if plan.watch.is_empty() {
        return -1;
    }
    // SAFETY: inotify_init1 with constant flags.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if fd < 0 {
        return -1;
    }
    let mask = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_MOVED_FROM | libc::IN_DELETE;
    for dir in &plan.watch {
        // SAFETY: a NUL-terminated path; a watch that cannot be added is skipped.
        unsafe { libc::inotify_add_watch(fd, dir.as_ptr(), mask) };
    }
    fd
}

/// Reads every pending event of the non-blocking inotify descriptor `fd`.
pub(crate) fn drain(fd: RawFd) {
    let mut buf = [0u8; 4096];
    // SAFETY: reading into a stack buffer until the descriptor has nothing more.
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

/// Detached copies of the empty file and directory covers, made in the namespace from a mask
/// still covered (the covers' own host paths may be out of sight there: below the private
/// `/tmp`), with their identities, to cover a mask again when no other is left to bind from.
#[derive(Debug)]
pub(crate) struct Spares {
    fd: [RawFd; 2],
    id: [Option<(u64, u64)>; 2],
}

impl Spares {
    /// Copies of a covered mask of each kind (file, directory), where there is one.
    pub(crate) fn new(plan: &WorldPlan) -> Spares {
        let mut spares = Spares { fd: [-1; 2], id: [None; 2] };
        for (kind, stashed) in SPARE_FDS.iter().enumerate() {
            let fd = stashed.swap(-1, std::sync::atomic::Ordering::Relaxed);
            if fd >= 0 {
                spares.fd[kind] = fd;
                spares.id[kind] = fd_identity(fd);
                continue;
            }
            let covered =
                plan.masks.iter().find(|(p, dir)| usize::from(*dir) == kind && mount_root(p) == Some(true));
            if let Some((path, _)) = covered {
                spares.refill(kind, path);
            }
        }
        spares
    }

    fn refill(&mut self, kind: usize, from: &CStr) {
        self.fd[kind] = clone_tree(from, 0).unwrap_or(-1);
        if self.id[kind].is_none() {
            self.id[kind] = identity(from);
        }
    }

    /// Covers `target` with the empty cover of `kind`: bound from another mask that shows it,
    /// else attached from the spare copy (and a new spare made from it).
    fn cover(&mut self, plan: &WorldPlan, kind: usize, target: &CStr) {
        let Some(empty) = self.id[kind] else { return };
        let intact =
            plan.masks.iter().find(|(other, _)| other.as_c_str() != target && identity(other) == Some(empty));
        if let Some((source, _)) = intact
            && bind_read_only(source, target, 0).is_ok()
        {
            if self.fd[kind] < 0 {
                self.refill(kind, target);
            }
            return;
        }
        // The spare is spent only once it is attached. A pass that runs while the host's
        // rename is under way finds the old file still at the path, which can no longer be
        // mounted on (the kernel refuses with ENOENT): the spare then stays for the next pass.
        // Were it spent there, a path with no other mask of its kind to bind from would stay
        // uncovered for the rest of the namespace's life.
        if self.fd[kind] >= 0 && move_tree(self.fd[kind], target, 0).is_ok() {
            let fd = std::mem::replace(&mut self.fd[kind], -1);
            // SAFETY: closing the spare's descriptor, whose tree is now attached at `target`.
            unsafe { libc::close(fd) };
            self.refill(kind, target);
            let flags = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
            if set_attr(target, 0, flags, 0) < 0 {
                // A cover the command could write to is no cover: taken off again, so the
                // path is found uncovered and the next pass tries anew.
                // SAFETY: unmounting the mount this function attached at a NUL-terminated path.
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}

/// The device and inode of what `fd` refers to.
fn fd_identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: `stat` is plain old data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a live buffer on the stack.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// The device and inode at `path` (not following a last link).
fn identity(path: &CStr) -> Option<(u64, u64)> {
    // SAFETY: `stat` is plain old data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a live buffer on the stack.
    let ret = unsafe { libc::lstat(path.as_ptr(), &mut st) };
    (ret == 0).then_some((st.st_dev, st.st_ino))
}

/// Whether `path` (not following a last link) is the root of a mount; `None` when it cannot be
/// looked at (gone, or a link: a link's target is checked at its own path).
fn mount_root(path: &CStr) -> Option<bool> {
    // SAFETY: `statx` is plain old data; all zeroes is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a live, correctly sized buffer on the stack.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_statx,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_TYPE,
            &mut stx as *mut libc::statx,
        )
    };
    let root = libc::STATX_ATTR_MOUNT_ROOT as u64;
    let link = u32::from(stx.stx_mode) & libc::S_IFMT == libc::S_IFLNK;
    (ret == 0 && !link && stx.stx_attributes_mask & root != 0).then_some(stx.stx_attributes & root != 0)
}

fn is_dir(path: &CStr) -> Option<bool> {
    // SAFETY: `stat` is plain old data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a live buffer on the stack.
    let ret = unsafe { libc::lstat(path.as_ptr(), &mut st) };
    (ret == 0).then_some(st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// A tmpfs on `/dev` holding the host's harmless device nodes, a fresh `devpts` instance,
/// the session's `/dev/shm`, and the usual symlinks; then `/dev` itself is made read-only.
fn build_dev(plan: &WorldPlan, devices: &[RawFd]) -> Result<(), StepError> {
    check(
        mount(
            c"tmpfs",
            c"/dev",
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_STRICTATIME,
            Some(c"mode=0755,size=64k"),
        ),
        100 + DEVICES.len(),
    )?;
    for (i, (path, fd)) in DEVICES.iter().zip(devices).enumerate() {
        // SAFETY: creating an empty mount point file at a NUL-terminated path.
        let file =
            unsafe { libc::open(path.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o666) };
        check(file.into(), 100 + i)?;
        // SAFETY: closing the fd opened above.
        unsafe { libc::close(file) };
        attach(*fd, path, 100 + i)?;
    }
    let base = 110;
    for (i, dir) in [c"/dev/pts", c"/dev/shm"].iter().enumerate() {
        // SAFETY: mkdir of a NUL-terminated path.
        check(unsafe { libc::mkdir(dir.as_ptr(), 0o755) }.into(), base + i)?;
    }
    check(
        mount(
            c"devpts",
            c"/dev/pts",
            Some(c"devpts"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some(c"newinstance,ptmxmode=0666,mode=620"),
        ),
        base + 2,
    )?;
    bind_private(&plan.shm, c"/dev/shm", plan.writable, base + 3)?;
    let links: [(&CStr, &CStr); 5] = [
        (c"pts/ptmx", c"/dev/ptmx"),
        (c"/proc/self/fd", c"/dev/fd"),
        (c"/proc/self/fd/0", c"/dev/stdin"),
        (c"/proc/self/fd/1", c"/dev/stdout"),
        (c"/proc/self/fd/2", c"/dev/stderr"),
    ];
    for (i, (target, link)) in links.iter().enumerate() {
        // SAFETY: symlink between NUL-terminated constants.
        check(unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) }.into(), base + 5 + i)?;
    }
    check(set_attr(c"/dev", 0, MOUNT_ATTR_RDONLY, 0), base + 10)
}
