//! A pre-built mount namespace that each confined child joins with `setns`.
//!
//! Building a mount namespace per command is cheap, but tearing it down when the command exits
//! is not (the kernel waits for an RCU grace period while unmounting the copied tree), and that
//! cost lands on every call. Instead a short-lived helper builds the namespace once per policy
//! and the parent keeps it alive through an fd; children join it in a few microseconds and
//! nothing is torn down per command. The helper is forked from the parent, so it too only runs
//! async-signal-safe code.

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};

use super::child::{self, MountPlan, StepError, Template};
use super::record::{self, Step};

/// Builds the namespace in a helper child and keeps fds to it.
pub(crate) fn create(plan: &MountPlan) -> Result<Template, TemplateError> {
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
        let packed: u64 = match child::build_namespace(plan) {
            Ok(userns) => 1 | (u64::from(userns) << 1),
            Err((step, index, errno)) => record::pack(step, index, errno),
        };
        let bytes = packed.to_ne_bytes();
        let mut byte = 0u8;
        // SAFETY: writes from and reads into stack buffers on fds this child owns; `_exit`
        // never returns.
        unsafe {
            libc::write(std::os::fd::AsRawFd::as_raw_fd(&ready_write), bytes.as_ptr().cast(), bytes.len());
            // Stay alive until the parent holds its fds (EOF when it closes the write end).
            libc::read(std::os::fd::AsRawFd::as_raw_fd(&release_read), (&mut byte as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(ready_write);
    drop(release_read);
    let result = (|| {
        let mut bytes = [0u8; 8];
        File::from(ready_read).read_exact(&mut bytes).map_err(TemplateError::Io)?;
        let packed = u64::from_ne_bytes(bytes);
        if packed >> 56 != 0 {
            let step = Step::from_u8((packed >> 56) as u8).unwrap_or(Step::Unshare);
            return Err(TemplateError::Step((
                step,
                ((packed >> 32) & 0xFF_FFFF) as usize,
                packed as u32 as i32,
            )));
        }
        let mntns = File::open(format!("/proc/{pid}/ns/mnt")).map_err(TemplateError::Io)?;
        let userns = if packed & 2 != 0 {
            Some(OwnedFd::from(File::open(format!("/proc/{pid}/ns/user")).map_err(TemplateError::Io)?))
        } else {
            None
        };
        Ok(Template { userns, mntns: OwnedFd::from(mntns) })
    })();
    drop(release_write);
    let mut status = 0;
    // SAFETY: reaping the helper forked above (it exits once `release_write` is closed).
    unsafe { libc::waitpid(pid, &mut status, 0) };
    result
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
