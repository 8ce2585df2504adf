//! The direct start: a `vfork`-style start with an environment made mostly of C strings built
//! once.
//!
//! A child that needs no code of the caller's between `fork` and `exec` (no hook, no new
//! session, no terminal, no shared file) is started here rather than through the standard
//! library's `Command`. The child shares the harness's memory until it `exec`s, as with
//! `posix_spawn`, but `Command` copies every environment variable three times on every start
//! (into its own map, into the captured one, into C strings); here the scrubbed ambient part is
//! a list of C strings made once per service, and only the call's own variables are converted.
//! On Linux the start is `clone(CLONE_VM | CLONE_VFORK)` with the child's few steps written
//! out (see [`vfork`]); elsewhere it is `posix_spawn`. The child gets what a forked start gives
//! it: a process group of its own, an empty signal mask, every signal at its default action,
//! the working directory, and exactly the three standard descriptors (every other one is
//! marked close-on-exec: on Linux in the child, elsewhere just before the start).

use std::ffi::{CString, OsStr, OsString, c_char};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;

/// The scrubbed ambient environment as `NAME=value` C strings, in the order of the pairs they
/// were made from.
pub(crate) struct InheritedEntries(Vec<CString>);

impl InheritedEntries {
    pub(crate) fn new(inherited: &[(OsString, OsString)]) -> Self {
        Self(inherited.iter().map(|(name, value)| entry(name, value).unwrap_or_default()).collect())
    }
}

/// `NAME=value` as a C string; `None` when either holds a NUL byte.
fn entry(name: &OsStr, value: &OsStr) -> Option<CString> {
    let mut bytes = Vec::with_capacity(name.len() + value.len() + 2);
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(b'=');
    bytes.extend_from_slice(value.as_bytes());
    CString::new(bytes).ok()
}

fn c_string(text: &[u8]) -> Result<CString, Errno> {
    CString::new(text).map_err(|_| Errno::EINVAL)
}

/// The parent's ends of a directly started child's standard streams (the output ends already
/// non-blocking).
pub(crate) struct Direct {
    pub(crate) pid: i32,
    /// The child's pidfd, when the start made one.
    pub(crate) pidfd: Option<OwnedFd>,
    /// The write end of the child's stdin, when it is a pipe.
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

/// What a direct start runs, and where.
pub(crate) struct Image<'a> {
    pub(crate) executable: &'a Path,
    /// `argv[0]` and the arguments.
    pub(crate) argv: &'a [String],
    /// The final environment: the inherited pairs that survived (borrowed, in order), then
    /// the call's own.
    pub(crate) env: &'a [(&'a OsStr, &'a OsStr)],
    /// The pairs `env` borrows its inherited part from, and their C strings.
    pub(crate) inherited: (&'a [(OsString, OsString)], &'a InheritedEntries),
    pub(crate) cwd: Option<&'a Path>,
    /// Stdin is a pipe (else `/dev/null`).
    pub(crate) stdin_piped: bool,
    /// The groups the child joins and the resource limits it sets before `exec` (Linux).
    pub(crate) limits: Option<&'a crate::limits::SpawnLimits>,
    /// A hook that may run in a child sharing this process's memory (see
    /// [`crate::PreExecHook::sharing_memory`]; Linux only), run last before `exec`, and the
    /// flag the child sets when it failed (its errno is then the start's error).
    pub(crate) hook: Option<(&'a crate::PreExecHook, &'a std::cell::Cell<bool>)>,
}

/// A close-on-exec pipe, both ends with the status `flags`: (read end, write end).
fn pipe(flags: libc::c_int) -> Result<(OwnedFd, OwnedFd), Errno> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | flags) } < 0 {
        return Err(Errno::last());
    }
    // SAFETY: both descriptors were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A close-on-exec pipe for a child's output: (read end, non-blocking, for the runtime; write
/// end, blocking, for the child).
fn output_pipe() -> Result<(OwnedFd, OwnedFd), Errno> {
    let (read, write) = pipe(libc::O_NONBLOCK)?;
    // The flags belong to each end's file description, which the child's descriptor 1 or 2
    // shares: its end blocks, as a program expects of its output. A fresh pipe has no other
    // status flag to keep.
    // SAFETY: setting the status flags of a descriptor owned here.
    if unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, 0) } < 0 {
        return Err(Errno::last());
    }
    Ok((read, write))
}

/// Output pipes for one start, made while the harness had nothing else to do.
type OutputPipes = [(OwnedFd, OwnedFd); 2];

/// The spare pair of output pipes: the next direct start takes it, and the supervisor of a
/// finished child makes the next one once the result is on its way ([`refill_spare`]). Four
/// idle close-on-exec descriptors; no child inherits them (see [`spawn`]'s file actions and
/// the forked start's prelude).
static SPARE: std::sync::Mutex<Option<OutputPipes>> = std::sync::Mutex::new(None);

/// Makes the spare pair of output pipes when there is none (best effort: a start that finds
/// none makes its own).
pub(crate) fn refill_spare() {
    let mut spare = SPARE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if spare.is_none() {
        *spare = output_pipe().and_then(|stdout| Ok([stdout, output_pipe()?])).ok();
    }
}

/// The spare output pipes, or new ones.
fn output_pipes() -> Result<OutputPipes, Errno> {
    let spare = SPARE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    match spare {
        Some(pipes) => Ok(pipes),
        None => Ok([output_pipe()?, output_pipe()?]),
    }
}

/// Sets `O_NONBLOCK` on a descriptor this process owns.
pub(crate) fn set_nonblocking(fd: &OwnedFd) {
    // SAFETY: reading and setting the flags of an open descriptor.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}

/// The environment as `envp` wants it. Inherited pairs are recognised by address (they are
/// borrowed from `inherited`, in order), so their prebuilt C strings are used; the call's own
/// are converted and kept in `owned`.
fn envp(image: &Image<'_>, owned: &mut Vec<CString>) -> Result<Vec<*const c_char>, Errno> {
    let (pairs, entries) = image.inherited;
    let same = |a: &OsStr, b: &OsStr| std::ptr::eq(a.as_bytes(), b.as_bytes());
    let mut pointers = Vec::with_capacity(image.env.len() + 1);
    let mut next = 0;
    for (name, value) in image.env {
        let found = pairs[next..]
            .iter()
            .position(|(n, v)| same(n, name) && same(v, value))
            .map(|at| next + at)
            .filter(|at| !entries.0[*at].is_empty());
        match found {
            Some(at) => {
                pointers.push(entries.0[at].as_ptr());
                next = at + 1;
            }
            None => {
                let entry = entry(name, value).ok_or(Errno::EINVAL)?;
                pointers.push(entry.as_ptr());
                owned.push(entry);
            }
        }
    }
    pointers.push(std::ptr::null());
    Ok(pointers)
}

/// What the child of a direct start does before it `exec`s, made before the start: the child
/// shares the harness's memory until then and allocates nothing.
struct Plan<'a> {
    path: &'a CString,
    argv: &'a [*const c_char],
    envp: &'a [*const c_char],
    cwd: Option<&'a CString>,
    /// The descriptors that become the child's 0, 1 and 2 (all above 2, close-on-exec).
    stdio: [RawFd; 3],
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    limits: Option<&'a crate::limits::SpawnLimits>,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    hook: Option<(&'a crate::PreExecHook, &'a std::cell::Cell<bool>)>,
}

/// Starts `image`. The error is the start's: an `exec`, `chdir` or descriptor failure in the
/// child, or a resource the start needed.
pub(crate) fn spawn(image: &Image<'_>, dev_null: RawFd) -> Result<Direct, Errno> {
    let path = c_string(image.executable.as_os_str().as_bytes())?;
    let args: Vec<CString> = image.argv.iter().map(|a| c_string(a.as_bytes())).collect::<Result<_, _>>()?;
    let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut owned = Vec::new();
    let envp = envp(image, &mut owned)?;
    let cwd = image.cwd.map(|dir| c_string(dir.as_os_str().as_bytes())).transpose()?;

    let [(stdout_read, stdout_write), (stderr_read, stderr_write)] = output_pipes()?;
    let stdin = if image.stdin_piped { Some(pipe(0)?) } else { None };
    let stdin_source = stdin.as_ref().map_or(dev_null, |(read, _)| read.as_raw_fd());
    // They are all above 2: the standard library keeps 0, 1 and 2 open in every Rust program,
    // so no new descriptor takes one of those numbers.
    let plan = Plan {
        path: &path,
        argv: &argv,
        envp: &envp,
        cwd: cwd.as_ref(),
        stdio: [stdin_source, stdout_write.as_raw_fd(), stderr_write.as_raw_fd()],
        limits: image.limits,
        hook: image.hook,
    };
    let (pid, pidfd) = start(&plan)?;
    drop((stdout_write, stderr_write));
    let stdin = stdin.map(|(_read, write)| write);
    Ok(Direct { pid, pidfd, stdin, stdout: stdout_read, stderr: stderr_read })
}

#[cfg(target_os = "linux")]
use vfork::start;

/// The start on Linux: `clone(CLONE_VM | CLONE_VFORK)` onto a stack this thread keeps, and the
/// child's steps written out in the order the C library's `posix_spawn` takes them. What that
/// does on every call and this does not: map and unmap a fresh stack (the unmapping can make
/// another CPU flush its TLB), read the descriptor limit once per file action, and leave the
/// C library's own signals ignored. The pidfd comes from the `clone` itself.
#[cfg(target_os = "linux")]
mod vfork {
    use std::cell::{Cell, UnsafeCell};
    use std::ffi::c_void;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::sync::atomic::{AtomicBool, Ordering};

    use nix::errno::Errno;

    use super::Plan;

    /// The child's stack, above one guard page: enough for the few calls it makes, and for a
    /// hook that starts the program from a stack of its own on this one (a confinement's).
    /// Only the pages a child touched are ever backed by memory.
    const STACK_SIZE: usize = 256 * 1024;

    /// A stack for `clone`, mapped once per thread that starts children.
    struct Stack {
        base: *mut c_void,
        len: usize,
    }

    impl Stack {
        fn map() -> Result<Self, Errno> {
            // SAFETY: sysconf with a constant name.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
            let len = STACK_SIZE + page;
            // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(Errno::last());
            }
            let stack = Self { base, len };
            // The lowest page is the guard: a child that ran off its stack faults instead of
            // writing over whatever lies below.
            // SAFETY: the first page of the mapping made above.
            if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } < 0 {
                return Err(Errno::last());
            }
            Ok(stack)
        }

        fn top(&self) -> *mut c_void {
            // Stacks grow down on every architecture Linux runs this on; the end of a mapping
            // is page-aligned, which satisfies every ABI's stack alignment.
            // SAFETY: one past the end of the mapping, which `clone` takes as the stack top.
            unsafe { self.base.cast::<u8>().add(self.len).cast() }
        }
    }

    impl Drop for Stack {
        fn drop(&mut self) {
            // SAFETY: the mapping made by `map`, used by no child any more (a `clone` on it
            // returns only once its child has `exec`ed or exited).
            unsafe { libc::munmap(self.base, self.len) };
        }
    }

    thread_local! {
        /// This thread's stack for its children; taken while a start uses it.
        static STACK: Cell<Option<Box<Stack>>> = const { Cell::new(None) };
    }

    /// Whether `clone` refused `CLONE_PIDFD` once (Linux before 5.2): then it is not asked again.
    static NO_CLONE_PIDFD: AtomicBool = AtomicBool::new(false);

    /// What the child reads, and where it leaves its errno when a step fails.
    struct Shared<'a> {
        plan: &'a Plan<'a>,
        error: UnsafeCell<libc::c_int>,
    }

    /// Starts the child; its pid, and its pidfd when the kernel gives one with the `clone`.
    pub(super) fn start(plan: &Plan<'_>) -> Result<(i32, Option<OwnedFd>), Errno> {
        let stack = match STACK.with(Cell::take) {
            Some(stack) => stack,
            None => Box::new(Stack::map()?),
        };
        let shared = Shared { plan, error: UnsafeCell::new(0) };
        let mut pidfd: libc::c_int = -1;
        let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        let with_pidfd = !NO_CLONE_PIDFD.load(Ordering::Relaxed);
        let mut pid =
            clone_child(&stack, &shared, flags | if with_pidfd { libc::CLONE_PIDFD } else { 0 }, &mut pidfd);
        if pid < 0 && with_pidfd && Errno::last() == Errno::EINVAL {
            NO_CLONE_PIDFD.store(true, Ordering::Relaxed);
            pid = clone_child(&stack, &shared, flags, &mut pidfd);
        }
        let clone_error = Errno::last();
        STACK.with(|slot| slot.set(Some(stack)));
        if pid < 0 {
            return Err(clone_error);
        }
        // SAFETY: the child has `exec`ed or exited (CLONE_VFORK), so nothing writes it now.
        let error = unsafe { *shared.error.get() };
        // SAFETY: with CLONE_PIDFD the kernel stored a fresh descriptor owned by nobody else.
        let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
        if error != 0 {
            // The child exited (127) after the failed step: reap it now. Its pidfd goes with it.
            let mut status = 0;
            // SAFETY: waiting for our own child, which has exited.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            return Err(Errno::from_raw(error));
        }
        Ok((pid, pidfd))
    }

    /// One `clone` with every signal blocked in this thread around it, so no handler of the
    /// harness runs in the child before the child has set every signal to its default.
    fn clone_child(stack: &Stack, shared: &Shared<'_>, flags: libc::c_int, pidfd: &mut libc::c_int) -> i32 {
        // SAFETY: sigset_t is plain data; sigfillset initialises it.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: filling a set on the stack, then changing this thread's mask (restored below).
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // SAFETY: the child runs `child_main` on `stack`, which nothing else uses meanwhile
        // (it is this thread's, taken out of its slot), sharing this process's memory while
        // this thread is suspended (CLONE_VFORK) until the child `exec`s or exits; `shared`
        // outlives that. The child only makes async-signal-safe calls and never returns.
        let pid = unsafe {
            libc::clone(
                child_main,
                stack.top(),
                flags,
                std::ptr::from_ref(shared).cast_mut().cast(),
                std::ptr::from_mut(pidfd),
            )
        };
        let error = Errno::last();
        // SAFETY: restoring this thread's mask as it was.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        Errno::set_raw(error as i32);
        pid
    }

    /// The child, on the kept stack in the harness's memory, with every signal blocked:
    /// every signal at its default action, a process group of its own, the three standard
    /// descriptors, the working directory, every other descriptor close-on-exec, an empty
    /// signal mask, then the program. A failed step leaves its errno for the parent and exits 127.
    extern "C" fn child_main(arg: *mut c_void) -> libc::c_int {
        // SAFETY: `arg` is the parent's `Shared`, alive while the parent is suspended.
        let shared = unsafe { &*arg.cast::<Shared<'_>>() };
        let plan = shared.plan;
        let fail = || -> ! {
            // SAFETY: the parent reads `error` only after this child has exited; leaving the
            // child with `_exit` runs none of the harness's exit handlers.
            unsafe {
                *shared.error.get() = Errno::last_raw();
                libc::_exit(127)
            }
        };
        crate::spawn::default_signals_in_child();
        // SAFETY: async-signal-safe calls with integer arguments or the plan's C strings and
        // NULL-terminated vectors, made before the start; the hook's maker promised it may run
        // here (`PreExecHook::sharing_memory`).
        unsafe {
            if libc::setpgid(0, 0) < 0 {
                fail();
            }
            if let Some(limits) = plan.limits
                && limits.apply_in_child().is_err()
            {
                fail();
            }
            // `dup2` onto 0, 1 and 2 clears close-on-exec there; the sources stay close-on-exec.
            for (target, source) in plan.stdio.iter().enumerate() {
                if libc::dup2(*source, target as libc::c_int) < 0 {
                    fail();
                }
            }
            if let Some(dir) = plan.cwd
                && libc::chdir(dir.as_ptr()) < 0
            {
                fail();
            }
            // Every descriptor from 3 close-on-exec, after the `dup2`s, as in a forked child:
            // one the harness opened without it (C code in another thread, say) never reaches
            // the program, however late it was opened.
            crate::fds::cloexec_from_3_in_child();
            // SAFETY: sigset_t is plain data; sigemptyset initialises it.
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            // The hook runs as in a forked child: after the standard descriptors, the working
            // directory and the signals are set (every action the default, so no handler of
            // the harness runs here), and may itself start the program elsewhere and leave.
            if let Some((hook, failed)) = plan.hook
                && let Err(e) = hook.run()
            {
                failed.set(true);
                Errno::set_raw(e.raw_os_error().unwrap_or(libc::EINVAL));
                // Nothing is freed here: the allocator is the harness's.
                std::mem::forget(e);
                fail();
            }
            libc::execve(plan.path.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr());
        }
        fail()
    }
}

#[cfg(not(target_os = "linux"))]
use posix::start;

/// The start elsewhere: `posix_spawn`.
#[cfg(not(target_os = "linux"))]
mod posix {
    use std::ffi::c_char;
    use std::os::fd::OwnedFd;

    use nix::errno::Errno;

    use super::Plan;

    /// RAII for the two `posix_spawn` attribute objects.
    struct Attributes {
        attr: libc::posix_spawnattr_t,
        actions: libc::posix_spawn_file_actions_t,
    }

    impl Drop for Attributes {
        fn drop(&mut self) {
            // SAFETY: both were initialised by `Attributes::new`.
            unsafe {
                libc::posix_spawnattr_destroy(&mut self.attr);
                libc::posix_spawn_file_actions_destroy(&mut self.actions);
            }
        }
    }

    fn check(rc: libc::c_int) -> Result<(), Errno> {
        if rc == 0 { Ok(()) } else { Err(Errno::from_raw(rc)) }
    }

    impl Attributes {
        fn new() -> Result<Box<Self>, Errno> {
            // SAFETY: all-zero values are placeholders that the init calls overwrite.
            let mut this: Box<Self> = Box::new(unsafe { std::mem::zeroed() });
            // SAFETY: initialising the objects in place.
            unsafe {
                check(libc::posix_spawnattr_init(&mut this.attr))?;
                if let Err(e) = check(libc::posix_spawn_file_actions_init(&mut this.actions)) {
                    libc::posix_spawnattr_destroy(&mut this.attr);
                    // Only the attributes were initialised: do not destroy the actions in Drop.
                    std::mem::forget(this);
                    return Err(e);
                }
            }
            Ok(this)
        }
    }

    pub(super) fn start(plan: &Plan<'_>) -> Result<(i32, Option<OwnedFd>), Errno> {
        let mut spawn = Attributes::new()?;
        let Attributes { attr, actions } = &mut *spawn;
        // SAFETY: plain calls on initialised objects with valid arguments; the sigsets live on
        // the stack until `posix_spawn` returns.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            // Every signal at its default action: a signal the harness ignores (SIGPIPE here, or
            // SIGINT and SIGHUP when a host started it in the background or under `nohup`) would
            // stay ignored across `exec`, and a program could neither be interrupted nor trap it.
            let mut default: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut default);
            check(libc::posix_spawnattr_setpgroup(attr, 0))?;
            check(libc::posix_spawnattr_setsigmask(attr, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(attr, &default))?;
            let flags =
                libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
            check(libc::posix_spawnattr_setflags(attr, flags as libc::c_short))?;
            for (target, source) in plan.stdio.iter().enumerate() {
                check(libc::posix_spawn_file_actions_adddup2(actions, *source, target as libc::c_int))?;
            }
            if let Some(dir) = plan.cwd {
                check(libc::posix_spawn_file_actions_addchdir_np(actions, dir.as_ptr()))?;
            }
            let mut pid: libc::pid_t = 0;
            check(libc::posix_spawn(
                &mut pid,
                plan.path.as_ptr(),
                actions,
                attr,
                plan.argv.as_ptr().cast::<*mut c_char>(),
                plan.envp.as_ptr().cast::<*mut c_char>(),
            ))?;
            Ok((pid, None))
        }
    }
}
