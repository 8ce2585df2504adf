//! A pre-built world that each confined child joins with `setns`: a mount namespace (with the
//! command's private `/dev`, `/tmp` and masks), the UTS and IPC namespaces made with it (so
//! the commands of one session share their SysV IPC objects and message queues, as they share
//! `/dev/shm`) and, with a world, a PID namespace whose init lives as long as the template.
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
use super::world::WorldPlan;

/// How many times [`Template::end_strays`] looks again for processes it has not seen end.
const STRAY_ROUNDS: usize = 500;

impl Template {
    /// Kills every process of the PID namespace but its init, through the namespace's own
    /// `/proc` (each process's directory there is a handle to it, so a recycled number is never
    /// signalled), and waits until they are gone (each round 1 ms apart, at most
    /// [`STRAY_ROUNDS`]; what forks meanwhile is found in the next round). Called only while no
    /// command of the world runs: what is left then is a descendant that left its call.
    /// False when some are still there after the last round.
    pub(crate) fn end_strays(&self) -> bool {
        let Some(proc) = &self.proc else { return true };
        let dir = format!("/proc/self/fd/{}", proc.as_raw_fd());
        for _ in 0..STRAY_ROUNDS {
            let Ok(entries) = std::fs::read_dir(&dir) else { return false };
            let mut left = false;
            for entry in entries.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                    continue;
                };
                if pid == 1 {
                    continue;
                }
                left = true;
                if let Ok(process) = File::open(entry.path()) {
                    // SAFETY: pidfd_send_signal on a /proc/<pid> directory fd we own, no siginfo.
                    unsafe {
                        libc::syscall(
                            libc::SYS_pidfd_send_signal,
                            process.as_raw_fd(),
                            libc::SIGKILL,
                            std::ptr::null::<libc::siginfo_t>(),
                            0u32,
                        )
                    };
                }
            }
            if !left {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        false
    }
}

/// Builds the namespaces in a helper child and keeps fds to them.
pub(crate) fn create(plan: &MountPlan, alive: Option<RawFd>) -> Result<Template, TemplateError> {
    let (ready_read, ready_write) = pipe()?;
    let (release_read, release_write) = pipe()?;
    let (proxy_read, proxy_write) = socketpair()?;
    // SAFETY: the child below only runs async-signal-safe code (syscalls on data prepared by
    // the parent) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(TemplateError::Io(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(release_write);
        helper(plan, alive, ready_write.as_raw_fd(), release_read.as_raw_fd(), proxy_write.as_raw_fd());
    }
    drop(ready_write);
    drop(proxy_write);
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
        let utsns = OwnedFd::from(open("uts")?);
        let ipcns = OwnedFd::from(open("ipc")?);
        let (netns, proxy) = match plan.network {
            true => {
                let (listener, port) = receive_listener(&proxy_read).map_err(TemplateError::Io)?;
                let proxy = dsh_sandbox::ProxyListener::new(listener, port);
                (Some(OwnedFd::from(open("net")?)), Some(std::sync::Arc::new(proxy)))
            }
            false => (None, None),
        };
        let inside = |path: &str| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
                .open(format!("/proc/{holder}/root{path}"))
                .map(OwnedFd::from)
                .map_err(TemplateError::Io)
        };
        let pts = plan.world.as_ref().map(|_| inside("/dev/pts")).transpose()?;
        // The namespace's own `/proc` (mounted by the init), for the read rule that reaches
        // it: Landlock does not look at the host's `/proc` below it.
        let proc = match (&plan.world, init > 0) {
            (Some(_), true) => Some(inside("/proc")?),
            _ => None,
        };
        Ok((userns, mntns, pidns, (pts, proc), netns, proxy, utsns, ipcns))
    })();
    drop(release_read);
    // On failure `release_write` is dropped here, which ends the helper (or the init).
    let result = result.and_then(|(userns, mntns, pidns, (pts, proc), netns, proxy, utsns, ipcns)| {
        let release = match pidns {
            Some(_) => {
                // Done with /proc/<init>: the init may now become non-dumpable.
                let mut release = File::from(release_write);
                release.write_all(&[1]).map_err(TemplateError::Io)?;
                Some(OwnedFd::from(release))
            }
            None => None,
        };
        Ok(Template { userns, mntns, pidns, pts, proc, release, netns, proxy, utsns, ipcns })
    });
    let mut status = 0;
    // SAFETY: reaping the helper forked above (it exits at once with a PID namespace, else
    // once `release_write` is closed — which happened above for the namespace-less template).
    unsafe { libc::waitpid(pid, &mut status, 0) };
    result
}

/// The helper: builds the mount namespace and, with a world, the PID namespace and its init.
fn helper(plan: &MountPlan, alive: Option<RawFd>, ready: RawFd, release: RawFd, proxy: RawFd) -> ! {
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
    if plan.network {
        // The proxy's listener, made inside the new network namespace and handed to the
        // parent, which serves it from the host's.
        let sent = child::proxy_listener().and_then(|(fd, port)| {
            let sent = send_listener(proxy, fd, port);
            // SAFETY: the parent holds its own copy now (or the send failed).
            unsafe { libc::close(fd) };
            sent.map_err(|e| (Step::Network, 4, e))
        });
        if let Err((step, index, errno)) = sent {
            send(record::pack(step, index, errno), 0);
            // SAFETY: leaving the helper.
            unsafe { libc::_exit(1) }
        }
    }
    let built = 1 | (u64::from(userns) << 1);
    match (plan.world.is_some(), alive) {
        (true, Some(alive)) => match start_init(alive, release, plan.world.as_ref()) {
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
fn start_init(alive: RawFd, release: RawFd, world: Option<&WorldPlan>) -> Result<i32, StepError> {
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
        child::run_template_init(alive, release, ready[1], world);
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

/// A network namespace (and, for an unprivileged harness, the user namespace that owns it)
/// with its loopback up and the proxy's listener on it: what a bubblewrap launch joins before
/// it execs bubblewrap.
#[derive(Debug)]
pub(crate) struct NetworkHolder {
    pub userns: Option<OwnedFd>,
    pub netns: OwnedFd,
    pub proxy: std::sync::Arc<dsh_sandbox::ProxyListener>,
}

/// Builds a [`NetworkHolder`] in a short-lived forked helper.
pub(crate) fn create_network() -> Result<NetworkHolder, String> {
    let io = |e: TemplateError| match e {
        TemplateError::Io(e) => e.to_string(),
        TemplateError::Step(failure) => format!("{failure:?}"),
    };
    let (ready_read, ready_write) = pipe().map_err(io)?;
    let (release_read, release_write) = pipe().map_err(io)?;
    let (proxy_read, proxy_write) = socketpair().map_err(io)?;
    // SAFETY: the child below only runs async-signal-safe code (raw syscalls on stack data)
    // and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(release_write);
        let result = child::enter_network_namespace().and_then(|userns| {
            let (fd, port) = child::proxy_listener()?;
            let sent = send_listener(proxy_write.as_raw_fd(), fd, port);
            // SAFETY: the parent holds its own copy now (or the send failed).
            unsafe { libc::close(fd) };
            sent.map(|()| userns).map_err(|e| (Step::Network, 4, e))
        });
        let packed: u64 = match result {
            Ok(userns) => 1 | (u64::from(userns) << 1),
            Err((step, index, errno)) => record::pack(step, index, errno),
        };
        let bytes = packed.to_ne_bytes();
        let mut byte = 0u8;
        // SAFETY: writing a stack buffer to a pipe this process owns, then waiting (reading a
        // stack byte) until the parent holds its fds and closes the release pipe.
        unsafe {
            libc::write(ready_write.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
            libc::read(release_read.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
            libc::_exit(0)
        }
    }
    drop(ready_write);
    drop(proxy_write);
    drop(release_read);
    let result = (|| {
        let mut bytes = [0u8; 8];
        File::from(ready_read).read_exact(&mut bytes).map_err(|e| e.to_string())?;
        let packed = u64::from_ne_bytes(bytes);
        if packed >> 56 != 0 {
            return Err(match record::unpack(packed) {
                Some(f) => format!(
                    "building the network namespace failed at {:?} (item {}): {}",
                    f.step,
                    f.index,
                    std::io::Error::from_raw_os_error(f.errno)
                ),
                None => "the network namespace helper failed".to_owned(),
            });
        }
        let (listener, port) = receive_listener(&proxy_read).map_err(|e| e.to_string())?;
        let open = |what: &str| {
            File::open(format!("/proc/{pid}/ns/{what}")).map(OwnedFd::from).map_err(|e| e.to_string())
        };
        let netns = open("net")?;
        let userns = if packed & 2 != 0 { Some(open("user")?) } else { None };
        let proxy = std::sync::Arc::new(dsh_sandbox::ProxyListener::new(listener, port));
        Ok(NetworkHolder { userns, netns, proxy })
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

/// A connected pair of datagram-ordered Unix sockets (close-on-exec).
fn socketpair() -> Result<(OwnedFd, OwnedFd), TemplateError> {
    let mut fds = [0; 2];
    // SAFETY: socketpair fills the two-element array on success.
    if unsafe {
        libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr())
    } < 0
    {
        return Err(TemplateError::Io(std::io::Error::last_os_error()));
    }
    // SAFETY: both fds were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Room for one `SCM_RIGHTS` control message carrying one descriptor, suitably aligned.
#[repr(C, align(8))]
struct ControlBuffer([u8; 32]);

/// Sends `fd` and `port` over `socket` (in the forked helper: stack buffers, raw syscalls).
fn send_listener(socket: RawFd, fd: RawFd, port: u16) -> Result<(), i32> {
    let mut payload = port.to_ne_bytes();
    let mut iov = libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() };
    let mut control = ControlBuffer([0; 32]);
    // SAFETY: `msghdr` is plain old data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // SAFETY: the control buffer is large enough for one descriptor (CMSG_SPACE(4) <= 32), so
    // CMSG_FIRSTHDR is non-null and CMSG_DATA points inside it.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&msg);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<RawFd>(), fd);
    }
    // SAFETY: sendmsg on a socket this process owns, with the live message above.
    if unsafe { libc::sendmsg(socket, &msg, 0) } < 0 { Err(child::errno()) } else { Ok(()) }
}

/// Receives the listener the helper sent (in the parent).
fn receive_listener(socket: &OwnedFd) -> std::io::Result<(OwnedFd, u16)> {
    let mut payload = [0u8; 2];
    let mut iov = libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() };
    let mut control = ControlBuffer([0; 32]);
    // SAFETY: `msghdr` is plain old data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len();
    // SAFETY: recvmsg into the live buffers above; close-on-exec for the received descriptor.
    let received = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if received < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel filled `msg`; CMSG_FIRSTHDR checks the length it reported.
    let header = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    // SAFETY: a non-null header lies inside the control buffer the kernel filled.
    let valid = !header.is_null()
        && received == 2
        && unsafe { (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS };
    if !valid {
        return Err(std::io::Error::other("the namespace helper sent no proxy listener"));
    }
    // SAFETY: an SCM_RIGHTS message carries one descriptor, now owned by this process.
    let fd =
        unsafe { OwnedFd::from_raw_fd(std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<RawFd>())) };
    Ok((fd, u16::from_ne_bytes(payload)))
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
