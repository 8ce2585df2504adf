//! The syscall sequence the forked child runs before `exec`.
//!
//! Everything here runs between `fork` and `exec` in a copy of a possibly multi-threaded
//! process: only raw syscalls on data the parent prepared, stack buffers, no allocation, no
//! locks. Order matters: the mount namespace is built first (Landlock forbids mount changes
//! once applied), then root's capabilities that could undo it are dropped, then
//! `no_new_privs` and the Landlock domain.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};

use super::record::Step;

/// Capabilities a root child loses: each can undo or sidestep the file sandbox (remount or
/// `mount_setattr` the read-only mounts, `open_by_handle_at` through a writable bind, make a
/// device node in a writable root, or run code in the kernel).
const DROPPED_CAPS: [u32; 7] = [
    2,  // CAP_DAC_READ_SEARCH
    16, // CAP_SYS_MODULE
    17, // CAP_SYS_RAWIO
    21, // CAP_SYS_ADMIN
    22, // CAP_SYS_BOOT
    27, // CAP_MKNOD
    39, // CAP_BPF
];
const CAP_SYS_ADMIN: u32 = 21;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const PATH_MAX: usize = 4096;

/// The mount namespace part of the plan: roots to bind onto themselves, then the mounts to
/// make writable again once `/` is read-only.
#[derive(Debug)]
pub(crate) struct MountPlan {
    pub binds: Vec<CString>,
    pub writable: Vec<CString>,
}

/// A failed step: which step, which item of it, and the errno.
pub(crate) type StepError = (Step, usize, i32);

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

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn errno() -> i32 {
    // SAFETY: reading the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

fn check(ret: libc::c_long, step: Step, index: usize) -> Result<(), StepError> {
    if ret < 0 { Err((step, index, errno())) } else { Ok(()) }
}

/// Pre-built namespaces to join instead of building fresh ones (see [`super::template`]).
#[derive(Debug)]
pub(crate) struct Template {
    pub userns: Option<OwnedFd>,
    pub mntns: OwnedFd,
}

/// Runs the whole sequence. Must stay async-signal-safe.
pub(crate) fn confine(
    ruleset: &OwnedFd,
    mounts: Option<&MountPlan>,
    template: Option<&Template>,
) -> Result<(), StepError> {
    if let Some(plan) = mounts {
        let mut cwd = [0u8; PATH_MAX];
        let has_cwd = read_cwd(&mut cwd);
        // Joining resets the working directory to the namespace's root, so it needs the path
        // to come back to. Joining also fails for a child whose credentials differ from the
        // template's builder (a spawn under another uid). Either way the child then builds its
        // own namespace, which keeps the working directory.
        if !(has_cwd && template.is_some_and(|t| join(t).is_ok())) {
            build_namespace(plan)?;
        }
        // The working directory still points into the mount that was current before; re-enter
        // it by path so relative paths see the writable binds. A directory without a path
        // (deleted) stays as it was: read-only.
        if has_cwd {
            // SAFETY: `cwd` holds a NUL-terminated absolute path written by getcwd.
            check(unsafe { libc::chdir(cwd.as_ptr().cast()) }.into(), Step::Chdir, 0)?;
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        drop_root_capabilities()?;
    }
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    check(ret.into(), Step::NoNewPrivs, 0)?;
    // SAFETY: the ruleset fd is open for as long as the plan lives (the parent holds it).
    let ret = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
    check(ret, Step::Restrict, 0)
}

fn join(template: &Template) -> Result<(), i32> {
    if let Some(userns) = &template.userns {
        // SAFETY: setns on an fd the parent keeps open; the child is single-threaded.
        if unsafe { libc::setns(userns.as_raw_fd(), libc::CLONE_NEWUSER) } < 0 {
            return Err(errno());
        }
    }
    // SAFETY: as above.
    if unsafe { libc::setns(template.mntns.as_raw_fd(), libc::CLONE_NEWNS) } < 0 {
        return Err(errno());
    }
    Ok(())
}

fn read_cwd(buf: &mut [u8; PATH_MAX]) -> bool {
    // SAFETY: the kernel writes at most `buf.len()` bytes into the stack buffer.
    let ret = unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) };
    ret > 0 && buf[0] == b'/'
}

/// Builds a fresh mount namespace (and a user namespace when the caller lacks
/// `CAP_SYS_ADMIN`): everything private, writable roots bound onto themselves, `/` read-only,
/// the writable mounts read-write again. Returns whether a user namespace was created.
pub(crate) fn build_namespace(plan: &MountPlan) -> Result<bool, StepError> {
    let admin = has_effective_cap(CAP_SYS_ADMIN);
    // SAFETY: plain id getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let flags = if admin { libc::CLONE_NEWNS } else { libc::CLONE_NEWUSER | libc::CLONE_NEWNS };
    if !admin {
        // A child whose credentials changed since fork (a spawn with another uid) is not
        // dumpable until exec, which leaves its /proc/self files owned by root and the id maps
        // unwritable. exec recomputes the flag for the new program.
        // SAFETY: prctl with integer arguments only.
        let ret = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
        check(ret.into(), Step::Unshare, 1)?;
    }
    // SAFETY: unshare with constant flags; the child is single-threaded after fork.
    check(unsafe { libc::unshare(flags) }.into(), Step::Unshare, usize::from(!admin))?;
    if !admin {
        write_file(c"/proc/self/setgroups", b"deny").map_err(|e| (Step::IdMap, 0, e))?;
        let mut buf = [0u8; 40];
        let len = id_map_line(&mut buf, uid);
        write_file(c"/proc/self/uid_map", &buf[..len]).map_err(|e| (Step::IdMap, 1, e))?;
        let len = id_map_line(&mut buf, gid);
        write_file(c"/proc/self/gid_map", &buf[..len]).map_err(|e| (Step::IdMap, 2, e))?;
    }
    // Private first, so nothing below propagates back to the host's mounts.
    // SAFETY: constant NUL-terminated strings and null optional arguments.
    let ret = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    check(ret.into(), Step::MakePrivate, 0)?;
    for (i, path) in plan.binds.iter().enumerate() {
        // SAFETY: `path` is a NUL-terminated string owned by the plan.
        let ret = unsafe {
            libc::mount(
                path.as_ptr(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            )
        };
        check(ret.into(), Step::Bind, i)?;
    }
    let read_only = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
    check(mount_setattr(c"/", AT_RECURSIVE, &read_only), Step::ReadOnly, 0)?;
    let writable =
        MountAttr { attr_set: MOUNT_ATTR_NODEV, attr_clr: MOUNT_ATTR_RDONLY, propagation: 0, userns_fd: 0 };
    for (i, path) in plan.writable.iter().enumerate() {
        check(mount_setattr(path, 0, &writable), Step::Writable, i)?;
    }
    Ok(!admin)
}

fn mount_setattr(path: &CStr, flags: libc::c_uint, attr: &MountAttr) -> libc::c_long {
    // SAFETY: `path` is NUL-terminated; `attr` is a live, correctly sized `struct mount_attr`.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    }
}

fn has_effective_cap(cap: u32) -> bool {
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and a two-element data array as capget(2) expects for version 3.
    let ret = unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) };
    ret == 0 && data[(cap / 32) as usize].effective & (1 << (cap % 32)) != 0
}

fn drop_root_capabilities() -> Result<(), StepError> {
    for (i, cap) in DROPPED_CAPS.iter().enumerate() {
        // SAFETY: prctl with integer arguments only.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(*cap), 0, 0, 0) };
        // EINVAL: the kernel does not know this capability, so nobody can hold it.
        if ret < 0 && errno() != libc::EINVAL {
            return Err((Step::DropCaps, i, errno()));
        }
    }
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: as in `has_effective_cap`.
    let ret = unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) };
    check(ret, Step::DropCaps, DROPPED_CAPS.len())?;
    for cap in DROPPED_CAPS {
        let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
        data[word].effective &= !bit;
        data[word].permitted &= !bit;
        data[word].inheritable &= !bit;
    }
    // SAFETY: header and data as capset(2) expects for version 3.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) };
    check(ret, Step::DropCaps, DROPPED_CAPS.len() + 1)
}

/// Writes `bytes` to a procfs file in one `write`; returns the errno on failure.
fn write_file(path: &CStr, bytes: &[u8]) -> Result<(), i32> {
    // SAFETY: `path` is NUL-terminated; flags need no mode argument.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: writing from a live slice to the fd opened above.
    let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    let result = if written < 0 { Err(errno()) } else { Ok(()) };
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(fd) };
    result
}

/// Formats `"<id> <id> 1\n"` into `buf` without allocating; returns the length.
fn id_map_line(buf: &mut [u8; 40], id: u32) -> usize {
    let mut digits = [0u8; 10];
    let mut n = id;
    let mut count = 0;
    loop {
        digits[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut len = 0;
    for _ in 0..2 {
        for d in digits[..count].iter().rev() {
            buf[len] = *d;
            len += 1;
        }
        buf[len] = b' ';
        len += 1;
    }
    buf[len] = b'1';
    buf[len + 1] = b'\n';
    len + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_map_lines_are_formatted_without_allocation() {
        let mut buf = [0u8; 40];
        let len = id_map_line(&mut buf, 0);
        assert_eq!(&buf[..len], b"0 0 1\n");
        let len = id_map_line(&mut buf, 65534);
        assert_eq!(&buf[..len], b"65534 65534 1\n");
        let len = id_map_line(&mut buf, u32::MAX);
        assert_eq!(&buf[..len], b"4294967295 4294967295 1\n");
    }
}
