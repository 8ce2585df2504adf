//! The syscall sequence the forked child runs before `exec`.
//!
//! Everything here runs between `fork` and `exec` in a copy of a possibly multi-threaded
//! process: only raw syscalls on data the parent prepared, stack buffers, no allocation, no
//! locks. Order matters: the mount namespace (and the command's world in it) is entered first
//! (Landlock forbids mount changes once applied), then the PID namespace (which takes another
//! process, below); the command then loses every capability, sets `no_new_privs`, enters the
//! Landlock domain and the seccomp filter.
//!
//! With the session's PID namespace (the template's), the forked child joins it for its
//! children and starts the command with `clone(CLONE_VM | CLONE_VFORK)` on a stack of its own
//! (no second copy of the address space), execing the image the spawner published
//! ([`dsh_subprocess::child_exec`]):
//! * when the spawner takes a sibling, the command is created with `CLONE_PARENT` — the
//!   harness's own child, in the session's namespace, in the child's session and process
//!   group — its pid is reported, and the forked child leaves at once;
//! * otherwise (a spawner that knows nothing of this, or no published image: a plain `fork`)
//!   the forked child stays as the command's **relay**: it ignores the harness's termination
//!   signals (the process group carries them to the command) and exits with the command's
//!   status, re-raising a fatal signal.
//!
//! The namespace's init (see [`super::template`]) ends everything in it when the harness is
//! gone, however it died. Without a template, each command gets a PID namespace of its own,
//! whose **init** mounts its `/proc`, dies with the relay (`PR_SET_PDEATHSIG`), reaps
//! orphans, reports the command's wait status and exits, which kills what is left.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::record::Step;
use super::world::{self, WorldPlan};
use crate::seccomp::SeccompFilter;
use dsh_subprocess::child_exec::ChildExec;

const CAP_SYS_ADMIN: u32 = 21;
pub(crate) const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
pub(crate) const AT_RECURSIVE: libc::c_uint = 0x8000;
const PATH_MAX: usize = 4096;
/// `SECBIT_NOROOT`, `SECBIT_NO_SETUID_FIXUP`, `SECBIT_NO_CAP_AMBIENT_RAISE` and the locks of
/// those three and of `SECBIT_KEEP_CAPS`: root is an ordinary user from here on, for good.
pub(crate) const LOCKED_SECUREBITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
/// The signals the harness terminates a command with; the relay leaves them to the command.
const TERMINATION_SIGNALS: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// The mount namespace part of the plan: roots to bind onto themselves, then the mounts to
/// make writable again once `/` is read-only.
#[derive(Debug)]
pub(crate) struct MountPlan {
    pub binds: Vec<CString>,
    pub writable: Vec<CString>,
    /// The command's own world inside the namespace.
    pub world: Option<WorldPlan>,
    /// The command also gets a network namespace of its own, with only loopback (up).
    pub network: bool,
}

/// What the child needs besides the mount plan, all prepared by the parent.
#[derive(Debug)]
pub(crate) struct ChildPlan<'a> {
    pub ruleset: &'a OwnedFd,
    pub mounts: Option<&'a MountPlan>,
    pub template: Option<&'a Template>,
    /// The read end of the harness's `alive` pipe (EOF once the harness is gone).
    pub alive: RawFd,
    /// The highest capability number the kernel knows.
    pub last_cap: u32,
    pub seccomp: Option<&'a SeccompFilter>,
    /// The top of a stack reserved for starting the command with `clone(CLONE_VM)`.
    pub stack_top: Option<usize>,
}

/// A failed step: which step, which item of it, and the errno.
pub(crate) type StepError = (Step, usize, i32);

/// `capget`/`capset`'s header (version 3).
#[repr(C)]
pub(crate) struct CapHeader {
    pub version: u32,
    pub pid: libc::c_int,
}

/// One of `capget`/`capset`'s two data words (version 3).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct CapData {
    pub effective: u32,
    pub permitted: u32,
    pub inheritable: u32,
}

#[repr(C)]
pub(crate) struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

pub(crate) fn errno() -> i32 {
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
    /// The shared PID namespace (with a world), whose init lives until `release` is closed.
    pub pidns: Option<OwnedFd>,
    #[allow(dead_code, reason = "held, never read: closing it ends the namespace's init")]
    pub release: Option<OwnedFd>,
    /// The namespace's own `devpts` (an `O_PATH` fd), for the Landlock rule that lets the
    /// command use terminals it opens there.
    pub pts: Option<OwnedFd>,
    /// The PID namespace's own `/proc` (an `O_PATH` fd), for the read rule that reaches it.
    pub proc: Option<OwnedFd>,
    /// The shared network namespace, when the plan isolates the network.
    pub netns: Option<OwnedFd>,
    /// The shared UTS and IPC namespaces (the session's own hostname, SysV IPC objects and
    /// POSIX message queues).
    pub utsns: OwnedFd,
    pub ipcns: OwnedFd,
    /// The proxy's listening socket on the namespace's loopback.
    pub proxy: Option<std::sync::Arc<dsh_sandbox::ProxyListener>>,
}

/// Runs the whole sequence. Must stay async-signal-safe. Returns only in the process that is
/// to exec the command.
///
/// In a child that shares the harness's memory (see
/// [`dsh_subprocess::child_exec::ChildExec::sharing_memory`]) only the steps that change
/// nothing of the address space run: joining the pre-built namespaces and starting the
/// command from a stack here, or confining this process itself. Building a namespace (which
/// may make the process dumpable) and the relays (which `fork` and become non-dumpable) ask
/// for a forked start instead.
pub(crate) fn confine(plan: &ChildPlan<'_>) -> Result<(), StepError> {
    // SAFETY: in the child before it execs or exits, while the spawner's image is published.
    let image = unsafe { dsh_subprocess::child_exec::current() };
    let shared = image.is_some_and(ChildExec::shares_memory);
    // Not recorded as a failure: the spawner starts the child again with a `fork`.
    let forked_start = || -> Result<(), StepError> {
        image.inspect(|image| image.want_fork());
        Err((Step::Exec, 0, libc::EAGAIN))
    };
    let mut cwd_buf = [0u8; PATH_MAX];
    let cwd = (plan.mounts.is_some() && read_cwd(&mut cwd_buf)).then_some(&cwd_buf);
    if let Some(mounts) = plan.mounts {
        // Joining resets the working directory to the namespace's root, so it needs the path
        // to come back to. Joining also fails for a child whose credentials differ from the
        // template's builder (a spawn under another uid). Either way the child then builds its
        // own namespace, which keeps the working directory.
        let joined = cwd.is_some() && plan.template.is_some_and(|t| join(t).is_ok());
        if !joined {
            if shared {
                return forked_start();
            }
            build_namespace(mounts)?;
        }
        match plan.template.and_then(|t| t.pidns.as_ref()) {
            Some(pidns) if joined => {
                // SAFETY: setns on an fd the parent keeps open; it applies to our children.
                let entered = unsafe { libc::setns(pidns.as_raw_fd(), libc::CLONE_NEWPID) };
                check(entered.into(), Step::PidNamespace, 0)?;
                return relay_to_command(plan, cwd);
            }
            _ if mounts.world.is_some() && shared => return forked_start(),
            _ if mounts.world.is_some() => {
                // No shared namespace to join: this command gets a PID namespace of its own
                // (its own mount namespace is already private), with an init of its own.
                // SAFETY: unshare with a constant flag; the child is single-threaded.
                check(unsafe { libc::unshare(libc::CLONE_NEWPID) }.into(), Step::PidNamespace, 0)?;
                relay(plan.alive)?;
            }
            _ => {}
        }
    }
    finish(plan, cwd)
}

/// The command's own last steps: back into its working directory, every capability gone,
/// `no_new_privs`, the Landlock domain, the seccomp filter.
fn finish(plan: &ChildPlan<'_>, cwd: Option<&[u8; PATH_MAX]>) -> Result<(), StepError> {
    // The working directory still points into the mount that was current before; re-enter
    // it by path so relative paths see the writable binds. A directory without a path
    // (deleted) stays as it was: read-only.
    if let Some(cwd) = cwd {
        // SAFETY: `cwd` holds a NUL-terminated absolute path written by getcwd.
        check(unsafe { libc::chdir(cwd.as_ptr().cast()) }.into(), Step::Chdir, 0)?;
    }
    drop_capabilities(plan.last_cap)?;
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    check(ret.into(), Step::NoNewPrivs, 0)?;
    // SAFETY: the ruleset fd is open for as long as the plan lives (the parent holds it).
    let ret = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, plan.ruleset.as_raw_fd(), 0u32) };
    check(ret, Step::Restrict, 0)?;
    if let Some(filter) = plan.seccomp {
        filter.apply().map_err(|e| (Step::Seccomp, 0, e))?;
    }
    Ok(())
}

/// What the command process started by [`launch_shared`] needs, on the relay's stack.
struct Launch<'a, 'b> {
    plan: &'a ChildPlan<'b>,
    cwd: Option<&'a [u8; PATH_MAX]>,
    image: &'a ChildExec,
    failure: Option<StepError>,
}

/// The command process of [`launch_shared`], on a stack of its own in the relay's memory.
extern "C" fn command_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the relay's `Launch`, alive while the relay is suspended (CLONE_VFORK).
    let launch = unsafe { &mut *arg.cast::<Launch<'_, '_>>() };
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if let Err(failure) = finish(launch.plan, launch.cwd) {
        launch.failure = Some(failure);
        // SAFETY: leaving the command process.
        unsafe { libc::_exit(127) };
    }
    // SAFETY: the image's strings and NULL-terminated vectors were made before the fork.
    unsafe { libc::execve(launch.image.path().as_ptr(), launch.image.argv(), launch.image.envp()) };
    launch.failure = Some((Step::Exec, 0, errno()));
    // SAFETY: leaving the command process.
    unsafe { libc::_exit(127) }
}

/// Starts the command with `clone(CLONE_VM | CLONE_VFORK)` on the prepared stack, so the
/// relay's address space is not copied a second time: the command shares it until it
/// `exec`s (or fails, which the relay then returns as the spawn's error). Never returns `Ok`.
fn launch_shared(
    plan: &ChildPlan<'_>,
    cwd: Option<&[u8; PATH_MAX]>,
    image: &ChildExec,
    stack_top: usize,
) -> Result<(), StepError> {
    let mut launch = Launch { plan, cwd, image, failure: None };
    // When the spawner takes a sibling, the command becomes the harness's own child
    // (`CLONE_PARENT`) and this process leaves at once: no relay stays behind.
    let sibling = image.takes_sibling();
    let flags =
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | if sibling { libc::CLONE_PARENT } else { 0 };
    // SAFETY: the child runs `command_main` on the prepared stack, sharing our memory while we
    // are suspended until it execs or exits; it only runs async-signal-safe code.
    let command = unsafe {
        libc::clone(
            command_main,
            stack_top as *mut libc::c_void,
            flags,
            (&mut launch as *mut Launch<'_, '_>).cast(),
        )
    };
    check(command.into(), Step::PidNamespace, 2)?;
    if sibling {
        // Reported even after a failure, so the spawner reaps it.
        image.report_sibling(command);
        if let Some(failure) = launch.failure {
            return Err(failure);
        }
        // SAFETY: leaving this process; the command runs on as the harness's child.
        unsafe { libc::_exit(0) };
    }
    if let Some(failure) = launch.failure {
        let mut status = 0;
        // SAFETY: reaping our own child, which has exited.
        unsafe { libc::waitpid(command, &mut status, 0) };
        return Err(failure);
    }
    run_command_relay(command)
}

/// The stack of a command started by a child that shares the harness's memory, on that
/// child's own stack (see [`launch_from_own_stack`]).
const COMMAND_STACK: usize = 64 * 1024;

/// [`launch_shared`] from a child that shares the harness's memory: the process-wide stack
/// ([`ChildPlan::stack_top`]) would then be the same memory for every start in the harness,
/// so the command runs on a stack reserved in this frame, which stays untouched while this
/// child is suspended (CLONE_VFORK). The command is always a sibling (no relay stays).
#[inline(never)]
fn launch_from_own_stack(
    plan: &ChildPlan<'_>,
    cwd: Option<&[u8; PATH_MAX]>,
    image: &ChildExec,
) -> Result<(), StepError> {
    let mut stack = std::mem::MaybeUninit::<[u8; COMMAND_STACK]>::uninit();
    // Stacks grow down; the top, aligned down to 16 bytes, lies inside the reservation.
    let top = (stack.as_mut_ptr() as usize + COMMAND_STACK) & !15;
    launch_shared(plan, cwd, image, top)
}

/// Forks the command into the joined PID namespace; returns only in the command. The calling
/// process becomes its relay: it ignores the termination signals (the process group carries
/// them to the command), waits, and leaves with the command's status. The command dies with
/// the relay; the namespace's init ends everything else when the harness is gone.
fn relay_to_command(plan: &ChildPlan<'_>, cwd: Option<&[u8; PATH_MAX]>) -> Result<(), StepError> {
    // SAFETY: in the forked child before exec, where a published image is alive.
    let image = unsafe { dsh_subprocess::child_exec::current() };
    if let Some(image) = image.filter(|image| image.shares_memory()) {
        return launch_from_own_stack(plan, cwd, image);
    }
    if let (Some(image), Some(stack_top)) = (image, plan.stack_top) {
        return launch_shared(plan, cwd, image, stack_top);
    }
    // SAFETY: fork in a single-threaded child; both sides only run async-signal-safe code.
    let command = unsafe { libc::fork() };
    check(command.into(), Step::PidNamespace, 2)?;
    if command == 0 {
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
        return finish(plan, cwd);
    }
    run_command_relay(command)
}

/// The relay's life once the command runs: no descriptors, not dumpable, deaf to the
/// termination signals (the process group carries them to the command); leaves with the
/// command's status.
fn run_command_relay(command: libc::pid_t) -> ! {
    become_relay(&[]);
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let pid = unsafe { libc::waitpid(command, &mut status, 0) };
        if pid == command || (pid < 0 && errno() != libc::EINTR) {
            break;
        }
    }
    leave_with(status)
}

/// What every relay does first: keeps only the descriptors in `keep`, becomes non-dumpable (it
/// is a copy of the harness's memory), and ignores the termination signals, which the
/// process group carries to the command.
fn become_relay(keep: &[RawFd]) {
    close_all_but(keep);
    // SAFETY: prctl and signal with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        for signal in TERMINATION_SIGNALS {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
}

/// The template's init (PID 1 of the shared namespace): mounts `/proc`, reports to the
/// helper through `ready` (0, or the errno), then waits until the harness is gone or the
/// template is released, and exits — which kills everything left in the namespace.
///
/// With a world, it also keeps the world's covers: it watches the namespace's mount table
/// (the kernel flags every change on an open `mountinfo`) and, on a change, makes again each
/// cover the host dropped by renaming a file over it ([`world::recover`]): a running command
/// does not keep a writable `.git/config` or a readable new `~/.git-credentials` because the
/// host rewrote the file.
pub(crate) fn run_template_init(alive: RawFd, release: RawFd, ready: RawFd, world: Option<&WorldPlan>) -> ! {
    // SAFETY: signal with integer arguments; SIGCHLD ignored makes the kernel reap the
    // orphans this init adopts.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    let ret = mount_proc();
    let result: i32 = if ret < 0 { errno() } else { 0 };
    let bytes = result.to_ne_bytes();
    // SAFETY: writing a stack buffer to our own pipe.
    unsafe { libc::write(ready, bytes.as_ptr().cast(), bytes.len()) };
    if result != 0 {
        // SAFETY: leaving the init.
        unsafe { libc::_exit(1) };
    }
    // The parent opens the namespaces through /proc/<init>, which a non-dumpable init would
    // refuse to an unprivileged harness; it says when it is done with one byte. Only then does
    // the init, a copy of the harness's memory and environment, become non-dumpable, so the
    // commands cannot read it through /proc/1.
    let mut byte = 0u8;
    // SAFETY: reading one byte into a stack variable; prctl with integer arguments.
    unsafe {
        if libc::read(release, (&mut byte as *mut u8).cast(), 1) != 1 {
            libc::_exit(0);
        }
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    let spares = [0, 1].map(|kind| world::SPARE_FDS[kind].load(std::sync::atomic::Ordering::Relaxed));
    close_all_but(&[alive, release, spares[0], spares[1]]);
    let mounts = match world {
        // SAFETY: opening a constant NUL-terminated path; the fd stays open for the init's life.
        Some(_) => unsafe { libc::open(c"/proc/self/mountinfo".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) },
        None => -1,
    };
    let events = world.map_or(-1, world::watch);
    let mut spares = world.map(world::Spares::new);
    loop {
        // A negative descriptor is ignored by poll.
        let mut fds = [
            libc::pollfd { fd: alive, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: release, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: mounts, events: libc::POLLPRI, revents: 0 },
            libc::pollfd { fd: events, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: polling a stack array of four pollfds.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 4, -1) };
        if (ready < 0 && errno() != libc::EINTR) || fds[..2].iter().any(|f| f.revents != 0) {
            // SAFETY: leaving the init ends the namespace.
            unsafe { libc::_exit(0) };
        }
        if fds[3].revents != 0 {
            world::drain(events);
        }
        if let (Some(world), Some(spares), true) =
            (world, spares.as_mut(), fds[2].revents != 0 || fds[3].revents != 0)
        {
            world::recover(world, spares, &[alive, release]);
        }
    }
}

/// Forks the namespace's init, which forks the command; returns only in the command. The
/// calling process becomes the relay and never returns.
fn relay(alive: RawFd) -> Result<(), StepError> {
    let mut status_pipe = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the two-element array.
    check(unsafe { libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) }.into(), Step::PidNamespace, 1)?;
    let [status_read, status_write] = status_pipe;
    // SAFETY: fork in a single-threaded child; both sides only run async-signal-safe code.
    let init = unsafe { libc::fork() };
    check(init.into(), Step::PidNamespace, 2)?;
    if init > 0 {
        run_relay(init, alive, status_read);
    }
    // The init (PID 1 of the new namespace). Not dumpable: it is a copy of the harness, whose
    // memory and environment the command must not read through /proc/1.
    // SAFETY: prctl with integer arguments; closing an fd of this process.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        libc::close(status_read);
    }
    let ret = mount_proc();
    check(ret.into(), Step::MountProc, 0)?;
    // SAFETY: as above.
    let command = unsafe { libc::fork() };
    check(command.into(), Step::PidNamespace, 3)?;
    if command == 0 {
        // SAFETY: closing the status pipe's write end, which only the init keeps.
        unsafe { libc::close(status_write) };
        return Ok(());
    }
    run_init(command, status_write)
}

/// The relay's loop: waits for the init, kills it when the harness is gone, and leaves with
/// the command's status.
fn run_relay(init: libc::pid_t, alive: RawFd, status_read: RawFd) -> ! {
    become_relay(&[alive, status_read]);
    // SAFETY: pidfd_open of our own child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, init, 0) } as RawFd;
    loop {
        let mut fds = [
            libc::pollfd { fd: alive, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: pidfd, events: libc::POLLIN, revents: 0 },
        ];
        let count = if pidfd >= 0 { 2 } else { 1 };
        // SAFETY: polling a stack array of `count` pollfds; a pidfd-less relay polls with a
        // short timeout and checks the init with waitpid instead.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), count, if pidfd >= 0 { -1 } else { 100 }) };
        if ready < 0 && errno() != libc::EINTR {
            break;
        }
        if fds[0].revents != 0 {
            // The harness is gone: end the namespace (the init's death kills the rest).
            // SAFETY: signalling our own child.
            unsafe { libc::kill(init, libc::SIGKILL) };
            break;
        }
        if fds[1].revents != 0 {
            break;
        }
        if pidfd < 0 {
            let mut status = 0;
            // SAFETY: non-blocking wait for our own child.
            if unsafe { libc::waitpid(init, &mut status, libc::WNOHANG) } == init {
                report(status_read);
            }
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(init, &mut status, 0) };
    report(status_read)
}

/// Leaves with the command's wait status as the init reported it.
fn report(status_read: RawFd) -> ! {
    let mut bytes = [0u8; 4];
    // SAFETY: reading into a stack buffer from our own pipe; the init has exited, so the
    // write end is closed and the read cannot block.
    let read = unsafe { libc::read(status_read, bytes.as_mut_ptr().cast(), bytes.len()) };
    if read != 4 {
        // The init died before the command ended (killed, or the harness went away).
        // SAFETY: leaving the relay.
        unsafe { libc::_exit(128 + libc::SIGKILL) };
    }
    leave_with(libc::c_int::from_ne_bytes(bytes))
}

/// The kernel interfaces of `/proc` made read-only over the namespace's own `/proc`, as
/// bubblewrap and container runtimes do: the sysctls (the host's hostname, `core_pattern`,
/// …), the SysRq trigger, interrupt and bus settings.
const PROC_COVERS: [&CStr; 4] = [c"/proc/sys", c"/proc/sysrq-trigger", c"/proc/irq", c"/proc/bus"];

/// Mounts the calling process's PID namespace's own `/proc` over `/proc`, with
/// [`PROC_COVERS`] read-only (those this kernel has). Returns -1 with errno set on failure.
fn mount_proc() -> libc::c_int {
    // SAFETY: constant NUL-terminated strings.
    let ret = unsafe {
        libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    };
    if ret < 0 {
        return ret;
    }
    for path in PROC_COVERS {
        // A cover this kernel has no entry for is skipped; any other failure leaves errno set.
        match world::bind_read_only(path, path, 0) {
            Ok(()) | Err((_, _, libc::ENOENT)) => {}
            Err(_) => return -1,
        }
    }
    0
}

/// Leaves with a command's wait status: its exit code, or its fatal signal re-raised.
fn leave_with(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: re-raising the command's fatal signal on the relay with its default action
        // and no core dump; the relay ignores nothing else at this point.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
        }
    }
    // SAFETY: leaving the relay with the command's exit code.
    unsafe {
        libc::_exit(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::SIGKILL })
    }
}

/// The init's loop: reaps every child until the command ends, reports its status, and exits,
/// which ends the namespace.
fn run_init(command: libc::pid_t, status_write: RawFd) -> ! {
    close_all_but(&[status_write]);
    loop {
        let mut status = 0;
        // SAFETY: waiting for any child of the init.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == command {
            let bytes = status.to_ne_bytes();
            // SAFETY: writing a stack buffer to our own pipe, then leaving.
            unsafe {
                libc::write(status_write, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(0);
            }
        }
        if pid < 0 && errno() != libc::EINTR {
            // SAFETY: leaving the init.
            unsafe { libc::_exit(1) };
        }
    }
}

/// Closes every descriptor except `keep` (the standard streams and the spawn's error pipe
/// included: only the command keeps those).
fn close_all_but(keep: &[RawFd]) {
    let mut sorted = [-1 as RawFd; 4];
    let n = keep.len().min(sorted.len());
    sorted[..n].copy_from_slice(&keep[..n]);
    sorted[..n].sort_unstable();
    let mut low: libc::c_uint = 0;
    for fd in sorted[..n].iter().filter(|fd| **fd >= 0) {
        let fd = *fd as libc::c_uint;
        if fd > low {
            // SAFETY: closing a range of this process's descriptors.
            unsafe { libc::syscall(libc::SYS_close_range, low, fd - 1, 0) };
        }
        low = fd + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, low, libc::c_uint::MAX, 0) };
}

fn join(template: &Template) -> Result<(), i32> {
    if let Some(userns) = &template.userns {
        // SAFETY: setns on an fd the parent keeps open; the child is single-threaded.
        if unsafe { libc::setns(userns.as_raw_fd(), libc::CLONE_NEWUSER) } < 0 {
            return Err(errno());
        }
    }
    if let Some(netns) = &template.netns {
        // SAFETY: as above.
        if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
            return Err(errno());
        }
    }
    for (ns, kind) in [(&template.utsns, libc::CLONE_NEWUTS), (&template.ipcns, libc::CLONE_NEWIPC)] {
        // SAFETY: as above.
        if unsafe { libc::setns(ns.as_raw_fd(), kind) } < 0 {
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

/// Builds a fresh mount namespace with a UTS and an IPC namespace of its own (and a user
/// namespace when the caller lacks `CAP_SYS_ADMIN`): everything private, writable roots bound
/// onto themselves, `/` read-only, the writable mounts read-write again (never setuid, never
/// devices). Returns whether a user namespace was created.
pub(crate) fn build_namespace(plan: &MountPlan) -> Result<bool, StepError> {
    let admin = has_effective_cap(CAP_SYS_ADMIN);
    // SAFETY: plain id getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::CLONE_NEWIPC;
    if !admin {
        flags |= libc::CLONE_NEWUSER;
    }
    if plan.network {
        flags |= libc::CLONE_NEWNET;
    }
    if !admin {
        // A child whose credentials changed since fork (a spawn with another uid) is not
        // dumpable until exec, which leaves its /proc/self files owned by root and the id maps
        // unwritable. exec recomputes the flag for the new program.
        // SAFETY: prctl with integer arguments only.
        let ret = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
        check(ret.into(), Step::Dumpable, 0)?;
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
    if plan.network {
        loopback_up()?;
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
    let writable = MountAttr {
        attr_set: MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID,
        attr_clr: MOUNT_ATTR_RDONLY,
        propagation: 0,
        userns_fd: 0,
    };
    for (i, path) in plan.writable.iter().enumerate() {
        check(mount_setattr(path, 0, &writable), Step::Writable, i)?;
    }
    if let Some(world) = &plan.world {
        world::build(world)?;
    }
    Ok(!admin)
}

/// Enters a new network namespace (inside a new user namespace when the caller lacks
/// `CAP_SYS_ADMIN`) with its loopback up. Returns whether a user namespace was created.
pub(crate) fn enter_network_namespace() -> Result<bool, StepError> {
    let admin = has_effective_cap(CAP_SYS_ADMIN);
    // SAFETY: plain id getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if admin {
        // SAFETY: unshare with a constant flag; the child is single-threaded after fork.
        check(unsafe { libc::unshare(libc::CLONE_NEWNET) }.into(), Step::Unshare, 0)?;
    } else {
        // SAFETY: prctl with integer arguments only.
        check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) }.into(), Step::Dumpable, 0)?;
        // SAFETY: unshare with constant flags; the child is single-threaded after fork.
        check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) }.into(), Step::Unshare, 1)?;
        write_file(c"/proc/self/setgroups", b"deny").map_err(|e| (Step::IdMap, 0, e))?;
        let mut buf = [0u8; 40];
        let len = id_map_line(&mut buf, uid);
        write_file(c"/proc/self/uid_map", &buf[..len]).map_err(|e| (Step::IdMap, 1, e))?;
        let len = id_map_line(&mut buf, gid);
        write_file(c"/proc/self/gid_map", &buf[..len]).map_err(|e| (Step::IdMap, 2, e))?;
    }
    loopback_up()?;
    Ok(!admin)
}

/// Brings the new network namespace's loopback interface up (it starts down).
fn loopback_up() -> Result<(), StepError> {
    // SAFETY: socket with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(fd.into(), Step::Network, 0)?;
    // SAFETY: `ifreq` is plain old data; all zeroes is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    request.ifr_name[0] = b'l' as libc::c_char;
    request.ifr_name[1] = b'o' as libc::c_char;
    request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads the live, correctly sized `ifreq` on the stack.
    let ret = unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &request) };
    let error = errno();
    // SAFETY: closing the socket made above.
    unsafe { libc::close(fd) };
    if ret < 0 { Err((Step::Network, 1, error)) } else { Ok(()) }
}

/// Makes the proxy's listening socket on `127.0.0.1` (an ephemeral port) in the current
/// network namespace; returns it and its port.
pub(crate) fn proxy_listener() -> Result<(RawFd, u16), StepError> {
    // SAFETY: socket with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    check(fd.into(), Step::Network, 2)?;
    // SAFETY: `sockaddr_in` is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: bind, listen and getsockname on the socket made above with a live, correctly
    // sized address on the stack.
    let ok = unsafe {
        libc::bind(fd, (&raw const addr).cast(), len) == 0
            && libc::listen(fd, 128) == 0
            && libc::getsockname(fd, (&raw mut addr).cast(), &mut len) == 0
    };
    if !ok {
        let error = errno();
        // SAFETY: closing the socket made above.
        unsafe { libc::close(fd) };
        return Err((Step::Network, 3, error));
    }
    Ok((fd, u16::from_be(addr.sin_port)))
}

pub(crate) fn mount_setattr(path: &CStr, flags: libc::c_uint, attr: &MountAttr) -> libc::c_long {
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

/// Drops every capability for good: the bounding set, the ambient set, and the effective,
/// permitted and inheritable sets, with the securebits that would give root its
/// capabilities back on exec locked off. A process without capabilities (an unprivileged
/// user outside a user namespace) has nothing to drop and cannot change the sets; it is left
/// as it is.
fn drop_capabilities(last_cap: u32) -> Result<(), StepError> {
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and a two-element data array as capget(2) expects for version 3.
    let ret = unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) };
    check(ret, Step::DropCaps, 0)?;
    if data.iter().all(|d| d.permitted == 0 && d.effective == 0 && d.inheritable == 0) {
        return Ok(());
    }
    for cap in 0..=last_cap {
        // SAFETY: prctl with integer arguments only.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
        // EINVAL: the kernel does not know this capability, so nobody can hold it.
        if ret < 0 && errno() != libc::EINVAL {
            return Err((Step::DropCaps, 1, errno()));
        }
    }
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, LOCKED_SECUREBITS, 0, 0, 0) };
    check(ret.into(), Step::DropCaps, 2)?;
    // SAFETY: as above.
    let ret = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    // EINVAL: a kernel without ambient capabilities.
    if ret < 0 && errno() != libc::EINVAL {
        return Err((Step::DropCaps, 3, errno()));
    }
    let none = [CapData::default(); 2];
    // SAFETY: header and data as capset(2) expects for version 3.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, none.as_ptr()) };
    check(ret, Step::DropCaps, 4)
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
    let (digits, count) = decimal(id);
    let mut len = 0;
    for _ in 0..2 {
        buf[len..len + count].copy_from_slice(&digits[..count]);
        len += count;
        buf[len] = b' ';
        len += 1;
    }
    buf[len] = b'1';
    buf[len + 1] = b'\n';
    len + 2
}

/// The decimal digits of `n`, most significant first, and how many there are (no allocation).
pub(crate) fn decimal(mut n: u32) -> ([u8; 10], usize) {
    let mut reversed = [0u8; 10];
    let mut count = 0;
    loop {
        reversed[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut digits = [0u8; 10];
    for (i, d) in reversed[..count].iter().rev().enumerate() {
        digits[i] = *d;
    }
    (digits, count)
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
