//! A pre-built world that each confined child joins with `setns`: a mount namespace (with the
//! command's private `/dev`, `/tmp` and masks) and, with a world, a PID namespace whose init
//! lives as long as the template.
//!
//! Building a mount namespace per command is cheap, but tearing it down when the command exits
//! is not (the kernel waits for an RCU grace period while unmounting the copied tree), and that
//! cost lands on every call. Instead a short-lived helper builds the namespaces once per policy
//! and the parent keeps them alive through fds; children join them in a few microseconds and
//! nothing is torn down per command. The helper is forked from the parent, so it too only runs
//! async-signal-safe code.
//!
//! The PID namespace's init is forked by the helper (which then exits, so the init is adopted
//! by the harness, in the harness's own process group, where containment leaves it alone). It
//! mounts the namespace's `/proc`, reaps orphans (`SIGCHLD` ignored), and exits — killing
//! everything left in the namespace — as soon as the harness is gone (its `alive` pipe reaches
//! EOF) or the template is dropped (the `release` pipe reaches EOF; every spawn holds the
//! template until its process settles).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use super::child::{self, MountPlan, StepError, Template};
use super::record::{self, Step};

/// Builds the namespaces in a helper child and keeps fds to them.
pub(crate) fn create(plan: &MountPlan, alive: Option<RawFd>) -> Result<Template, TemplateError> {
    let (ready_read, ready_write) = pipe()?;
    let (release_read, release_write) = pipe()?;
    // SAFETY: the child below only runs async-signal-safe code (syscalls on data prepared by
    // the parent) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(TemplateError::Io(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(release_write);
        helper(plan, alive, ready_write.as_raw_fd(), release_read.as_raw_fd());
    }
    drop(ready_write);
    let result = (|| {
        let mut bytes = [0u8; 12];
        File::from(ready_read).read_exact(&mut bytes).map_err(TemplateError::Io)?;
        let packed = u64::from_ne_bytes(bytes[..8].try_into().unwrap_or_default());
        let init = i32::from_ne_bytes(bytes[8..].try_into().unwrap_or_default());
        if packed >> 56 != 0 {
            return Err(match record::unpack(packed) {
                Some(failure) => TemplateError::Step((failure.step, failure.index as usize, failure.errno)),
                None => {
                    TemplateError::Io(std::io::Error::other("the namespace helper reported an unknown step"))
                }
            });
        }
        // Without a PID namespace the helper itself holds the namespaces until released.
        let holder = if init > 0 { init } else { pid };
        let open = |what: &str| File::open(format!("/proc/{holder}/ns/{what}")).map_err(TemplateError::Io);
        let mntns = OwnedFd::from(open("mnt")?);
        let userns = if packed & 2 != 0 { Some(OwnedFd::from(open("user")?)) } else { None };
        let pidns = if init > 0 { Some(OwnedFd::from(open("pid")?)) } else { None };
        let pts = match plan.world {
            Some(_) => Some(OwnedFd::from(
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                    .open(format!("/proc/{holder}/root/dev/pts"))
                    .map_err(TemplateError::Io)?,
            )),
            None => None,
        };
        Ok((userns, mntns, pidns, pts))
    })();
    drop(release_read);
    // On failure `release_write` is dropped here, which ends the helper (or the init).
    let result = result.and_then(|(userns, mntns, pidns, pts)| {
        let release = match pidns {
            Some(_) => {
                // Done with /proc/<init>: the init may now become non-dumpable.
                let mut release = File::from(release_write);
                release.write_all(&[1]).map_err(TemplateError::Io)?;
                Some(OwnedFd::from(release))
            }
            None => None,
        };
        Ok(Template { userns, mntns, pidns, pts, release })
    });
    let mut status = 0;
    // SAFETY: reaping the helper forked above (it exits at once with a PID namespace, else
    // once `release_write` is closed — which happened above for the namespace-less template).
    unsafe { libc::waitpid(pid, &mut status, 0) };
    result
}

/// The helper: builds the mount namespace and, with a world, the PID namespace and its init.
fn helper(plan: &MountPlan, alive: Option<RawFd>, ready: RawFd, release: RawFd) -> ! {
    let send = |packed: u64, init: i32| {
        let mut bytes = [0u8; 12];
        bytes[..8].copy_from_slice(&packed.to_ne_bytes());
        bytes[8..].copy_from_slice(&init.to_ne_bytes());
        // SAFETY: writing a stack buffer to a pipe this process owns.
        unsafe { libc::write(ready, bytes.as_ptr().cast(), bytes.len()) };
    };
    let userns = match child::build_namespace(plan) {
        Ok(userns) => userns,
        Err((step, index, errno)) => {
            send(record::pack(step, index, errno), 0);
            // SAFETY: leaving the helper.
            unsafe { libc::_exit(1) }
        }
    };
    let built = 1 | (u64::from(userns) << 1);
    match (plan.world.is_some(), alive) {
        (true, Some(alive)) => match start_init(alive, release) {
            Ok(init) => send(built, init),
            Err((step, index, errno)) => send(record::pack(step, index, errno), 0),
        },
        _ => {
            send(built, 0);
            let mut byte = 0u8;
            // SAFETY: stay alive until the parent holds its fds (EOF when it closes the write
            // end), reading into a stack byte.
            unsafe { libc::read(release, (&mut byte as *mut u8).cast(), 1) };
        }
    }
    // SAFETY: leaving the helper.
    unsafe { libc::_exit(0) }
}

/// Forks the PID namespace's init and waits until it has mounted `/proc`; returns its pid.
fn start_init(alive: RawFd, release: RawFd) -> Result<i32, StepError> {
    let mut ready = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the two-element array; unshare with a constant flag.
    unsafe {
        if libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC) < 0 {
            return Err((Step::PidNamespace, 1, child::errno()));
        }
        if libc::unshare(libc::CLONE_NEWPID) < 0 {
            return Err((Step::PidNamespace, 0, child::errno()));
        }
    }
    // SAFETY: fork of the single-threaded helper; the init only runs async-signal-safe code.
    let init = unsafe { libc::fork() };
    if init < 0 {
        return Err((Step::PidNamespace, 2, child::errno()));
    }
    if init == 0 {
        // SAFETY: closing the read end this process does not use.
        unsafe { libc::close(ready[0]) };
        child::run_template_init(alive, release, ready[1]);
    }
    let mut bytes = [0u8; 4];
    // SAFETY: closing our write end, then reading the init's errno (0: ready) into a stack
    // buffer.
    let read = unsafe {
        libc::close(ready[1]);
        libc::read(ready[0], bytes.as_mut_ptr().cast(), bytes.len())
    };
    match (read, i32::from_ne_bytes(bytes)) {
        (4, 0) => Ok(init),
        (4, errno) => Err((Step::MountProc, 0, errno)),
        _ => Err((Step::PidNamespace, 3, libc::ECHILD)),
    }
}

/// Why a template could not be built.
#[derive(Debug)]
pub(crate) enum TemplateError {
    Step(StepError),
    Io(std::io::Error),
}

fn pipe() -> Result<(OwnedFd, OwnedFd), TemplateError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(TemplateError::Io(std::io::Error::last_os_error()));
    }
    // SAFETY: both fds were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
