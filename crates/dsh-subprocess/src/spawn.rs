//! Starting a child and supervising it until settlement.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::unistd::AccessFlags;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::collector::{CaptureLimits, OutputCollector};
use crate::env::{EnvEntry, child_env, lookup};
use crate::error::{OsSpawnError, SpawnError, SpawnStage};
use crate::handle::{ProcessHandle, ProcessInner, ProcessOutcome};
use crate::limits::SpawnLimits;
use crate::service::SubprocessService;
use crate::signal_name::signal_name;

/// Code run in the forked child right before `exec` (e.g. to apply a sandbox). An error fails
/// the spawn with that errno.
///
/// Only [`PreExecHook::new`] makes one, and it is `unsafe`: whoever makes a hook promises it
/// is async-signal-safe (see its safety section), so holding or passing one on is safe.
#[derive(Clone)]
pub struct PreExecHook(Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>, bool);

impl PreExecHook {
    /// Wraps `hook` for running between `fork` and `exec`.
    ///
    /// # Safety
    ///
    /// `hook` runs in the child of a `fork` of a possibly multi-threaded process, where any
    /// lock may be held by a thread that no longer exists. It must be async-signal-safe: only
    /// raw system calls and plain reads and writes of memory prepared before the spawn — no
    /// allocation or deallocation, no lock (no `println!`, no `tracing`, no mutex, no lazy
    /// initialisation such as `OnceLock::get_or_init`), no panic. It must not close or reuse
    /// descriptors the standard library uses to report the spawn's result. These are the
    /// requirements of [`std::os::unix::process::CommandExt::pre_exec`].
    pub unsafe fn new(hook: impl Fn() -> std::io::Result<()> + Send + Sync + 'static) -> Self {
        Self(Arc::new(hook), false)
    }

    /// Lets the hook also run in a child that shares this process's memory until it `exec`s
    /// (`clone(CLONE_VM | CLONE_VFORK)`, the direct start) instead of a forked copy of it: no
    /// copy of the harness's address space is made for the command. The child has its own
    /// descriptors, working directory, credentials and signal actions, and runs on a stack of
    /// its own while the starting thread waits.
    ///
    /// # Safety
    ///
    /// Besides [`PreExecHook::new`]'s contract, the hook changes nothing that belongs to the
    /// address space rather than to the calling task (no `prctl(PR_SET_DUMPABLE)`, no
    /// mapping, no write to memory the harness reads, but for values it is handed to report
    /// through), starts no `fork` of it, and reads the image it is to start from
    /// [`crate::child_exec::current`]. Where it cannot keep to that, it calls
    /// [`crate::child_exec::ChildExec::want_fork`] and fails: the spawner then starts the
    /// child again with a `fork`, whose failure is the spawn's.
    pub unsafe fn sharing_memory(self) -> Self {
        Self(self.0, true)
    }

    /// Whether the hook may run in a child that shares this process's memory (see
    /// [`PreExecHook::sharing_memory`]).
    pub fn shares_memory(&self) -> bool {
        self.1
    }

    /// Runs the hook (in the forked child, or in tests in the caller).
    pub fn run(&self) -> std::io::Result<()> {
        (self.0)()
    }
}

impl std::fmt::Debug for PreExecHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreExecHook")
    }
}

/// The longest grace period a spawn takes: the longest delay a JavaScript timer (and so the
/// reference implementation) accepts, 2147483647 ms.
pub const MAX_GRACE: Duration = Duration::from_millis(2_147_483_647);

/// Bytes read from a pipe per chunk, at most and at first.
const CHUNK: usize = 256 * 1024;
const FIRST_CHUNK: usize = 4 * 1024;

/// Pipe capacity requested for a heavy stream (Linux's default `pipe-max-size`).
#[cfg(target_os = "linux")]
const PIPE_SIZE: libc::c_int = 1024 * 1024;

/// How far apart the tree of a settled process with lingering descendants is re-checked.
const LINGER_POLL_MAX: Duration = Duration::from_millis(500);

/// Everything needed to start one process.
#[derive(Clone)]
pub struct SpawnSpec {
    /// Program and arguments; `argv[0]` is looked up on the child's `PATH`.
    pub argv: Vec<String>,
    /// Working directory; `None` inherits the harness's.
    pub cwd: Option<PathBuf>,
    /// Explicit entries over the scrubbed ambient environment, applied in order.
    pub env: Vec<(String, EnvEntry)>,
    /// Written to stdin and then closed; `None` connects stdin to `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// How stdout is captured (memory tail and spill caps).
    pub stdout: CaptureLimits,
    /// How stderr is captured (memory tail and spill caps).
    pub stderr: CaptureLimits,
    /// Time between `SIGTERM` and `SIGKILL`, and the pipe-drain bound after exit: more than
    /// zero and at most [`MAX_GRACE`].
    pub grace: Duration,
    /// Cancelling it terminates the process (and, cancelled before the spawn, refuses it).
    pub cancel: Option<CancellationToken>,
    /// Runs in the child before `exec` (set with [`SpawnSpec::with_pre_exec`] or
    /// [`SpawnSpec::pre_exec`]); when `None` (and `new_session` is false) the fast direct
    /// start is used.
    pre_exec: Option<PreExecHook>,
    /// Start the child in a new session (`setsid`) instead of only a new process group, so
    /// it has no controlling terminal (it cannot reach the harness's terminal through
    /// `/dev/tty` or `TIOCSTI`). The process group id is still the child's pid. Off by default.
    /// While the harness's own session has no terminal, a new process group gives the same
    /// guarantee and is what the child gets (the faster direct start).
    pub new_session: bool,
    /// A file the child keeps open at the descriptor number it has here (every other
    /// descriptor from 3 is closed on `exec`); the caller tells the program that number.
    pub shared_file: Option<Arc<std::fs::File>>,
    /// Keep the child's stdin a pipe the caller writes through
    /// ([`crate::ProcessHandle::write_stdin`]) instead of `/dev/null` (ignored when `stdin` is
    /// given). Off by default.
    pub keep_stdin: bool,
    /// Run the child on a pseudo-terminal of this size instead of pipes: the slave is its
    /// stdin, stdout and stderr, and (without a pre-exec hook) its controlling terminal, in a
    /// session of its own (`new_session` is implied). The terminal's output, filtered to text
    /// (see [`crate::ProcessHandle::is_terminal`]), is collected as stdout; stderr stays
    /// empty; input is written with [`crate::ProcessHandle::write_stdin`] (`stdin` and
    /// `keep_stdin` are ignored). A pre-exec hook (a sandbox) that starts a session of its own
    /// leaves the command the terminal without it being the controlling one. Off by default.
    pub pty: Option<crate::PtySize>,
    /// Keeps this process's spill files apart from those of every other owner: they go to
    /// the owner's own directory (see [`crate::SubprocessService::owned_spill_dir`]) instead
    /// of the service's shared one. A host that shows each session's commands only that
    /// session's spill files names the session here. `None` (the default): the shared one.
    pub spill_owner: Option<String>,
    /// The session this process's spill files are charged to (its quota, see
    /// [`crate::SpillRetention`]) and removed with
    /// ([`crate::SubprocessService::release_spills`]). `None` (the default): only the
    /// service's total cap applies.
    pub spill_account: Option<String>,
    /// What the child and everything it starts may use (see [`crate::ResourceLimits`]):
    /// enforced from before its `exec`, by control groups where this process may make them,
    /// else by resource limits. `None` (the default): no limits.
    pub limits: Option<crate::ResourceLimits>,
}

impl SpawnSpec {
    /// A spec with defaults: inherited cwd, no extra env, `/dev/null` stdin, 64000-byte tails
    /// without spill, 3000 ms grace, no cancellation token, no hook.
    pub fn new(argv: Vec<String>) -> Self {
        Self {
            argv,
            cwd: None,
            env: Vec::new(),
            stdin: None,
            stdout: CaptureLimits::new("stdout", 64_000, None),
            stderr: CaptureLimits::new("stderr", 64_000, None),
            grace: Duration::from_millis(3000),
            cancel: None,
            pre_exec: None,
            new_session: false,
            keep_stdin: false,
            shared_file: None,
            pty: None,
            spill_owner: None,
            spill_account: None,
            limits: None,
        }
    }

    /// Runs `hook` in the child right before `exec` (replacing any hook set before); `None`
    /// removes it. Safe: whoever made the hook vouched for it ([`PreExecHook::new`]).
    pub fn with_pre_exec(&mut self, hook: Option<PreExecHook>) -> &mut Self {
        self.pre_exec = hook;
        self
    }

    /// Runs `hook` in the child right before `exec` (replacing any hook set before), as
    /// tokio's and the standard library's `Command::pre_exec` do.
    ///
    /// # Safety
    ///
    /// `hook` must be async-signal-safe: see [`PreExecHook::new`].
    pub unsafe fn pre_exec(
        &mut self,
        hook: impl Fn() -> std::io::Result<()> + Send + Sync + 'static,
    ) -> &mut Self {
        // SAFETY: the caller upholds `PreExecHook::new`'s contract, which this function's
        // safety section repeats.
        self.with_pre_exec(Some(unsafe { PreExecHook::new(hook) }))
    }

    /// Whether a pre-exec hook is set.
    pub fn has_pre_exec(&self) -> bool {
        self.pre_exec.is_some()
    }
}

impl std::fmt::Debug for SpawnSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnSpec")
            .field("argv", &self.argv)
            .field("cwd", &self.cwd)
            .field("env", &self.env)
            .field("stdin", &self.stdin.as_ref().map(Vec::len))
            .field("stdout", &self.stdout)
            .field("stderr", &self.stderr)
            .field("grace", &self.grace)
            .field("pre_exec", &self.pre_exec.is_some())
            .field("new_session", &self.new_session)
            .field("shared_file", &self.shared_file.as_ref().map(|f| f.as_raw_fd()))
            .field("pty", &self.pty)
            .finish_non_exhaustive()
    }
}

fn validate_grace(grace: Duration) -> Result<Duration, SpawnError> {
    if !grace.is_zero() && grace <= MAX_GRACE { Ok(grace) } else { Err(SpawnError::InvalidGrace) }
}

/// `chdir` would fail: missing, not a directory, or not searchable.
fn check_cwd(cwd: &Path) -> Result<(), Errno> {
    let meta =
        std::fs::metadata(cwd).map_err(|e| e.raw_os_error().map(Errno::from_raw).unwrap_or(Errno::ENOENT))?;
    if !meta.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    nix::unistd::access(cwd, AccessFlags::X_OK)
}

pub(crate) fn spawn_process(
    service: &SubprocessService,
    id: u64,
    spec: SpawnSpec,
) -> Result<ProcessHandle, SpawnError> {
    let grace = validate_grace(spec.grace)?;
    let program = match spec.argv.first() {
        Some(program) if !program.is_empty() => program.clone(),
        _ => return Err(SpawnError::InvalidArgv),
    };
    if spec.cancel.as_ref().is_some_and(CancellationToken::is_cancelled) {
        return Err(SpawnError::CancelledBeforeSpawn);
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| SpawnError::NoRuntime)?;
    let cwd = spec.cwd.clone().unwrap_or_else(|| PathBuf::from("."));
    let os_error = |errno, stage| OsSpawnError { program: program.clone(), errno, stage, cwd: cwd.clone() };

    // `chdir` happens before `exec`, so whenever starting fails, a bad working directory is
    // the cause reported. It is only checked then, keeping the successful path short.
    let failed = |errno, stage| match spec.cwd.as_deref().map(check_cwd) {
        Some(Err(cwd_errno)) => os_error(cwd_errno, SpawnStage::Cwd),
        _ => os_error(errno, stage),
    };
    let env = child_env(&service.inherited_env, &spec.env);
    let path_var = lookup(&env, "PATH");
    let resolve = || {
        (service.programs).resolve(&program, path_var, &cwd).map_err(|errno| failed(errno, SpawnStage::Exec))
    };
    // A start that can go direct takes the file remembered for the program as it is: the
    // direct start reports a file it cannot execute, and then it is searched for
    // afresh and started once more (below). Any other start checks it first.
    // (Unless a new session is needed, which only the terminal probe below can tell.)
    let limits = spec.limits.as_ref().filter(|l| l.any()).map(|l| Arc::new(SpawnLimits::prepare(l)));
    let may_go_direct = spec.pty.is_none()
        && spec.pre_exec.is_none()
        && (cfg!(target_os = "linux") || limits.is_none())
        && spec.shared_file.is_none()
        && service.dev_null.is_some();
    let remembered = if may_go_direct { service.programs.remembered(&program, path_var) } else { None };
    let unchecked = remembered.is_some();
    let executable = match remembered {
        Some(found) => found,
        None => resolve()?,
    };

    let pty = match spec.pty {
        Some(size) => Some(crate::pty::Pty::open(size).map_err(|e| SpawnError::Terminal(errno_of(&e)))?),
        None => None,
    };
    // A new session only matters while the harness's own session has a terminal: without
    // one, a child in a new group of this session has none either and cannot get one (only a
    // session leader acquires a terminal), so the direct start, which does not `setsid`,
    // gives the same guarantee at the cost of a `vfork` instead of a `fork`. A terminal job
    // always gets a session of its own (its terminal becomes the controlling one).
    let new_session = pty.is_some() || (spec.new_session && session_has_terminal());
    // The terminal becomes the controlling one only when nothing runs between the prelude and
    // the program: a hook may start the program in another process and exit, and a session
    // leader's exit hangs up its terminal's foreground group.
    let controlling_terminal = pty.is_some() && spec.pre_exec.is_none();
    let direct = match &service.dev_null {
        Some(dev_null) if may_go_direct && !new_session => Some(dev_null.as_raw_fd()),
        _ => None,
    };
    // A hook that may share the harness's memory takes the direct start too, with the same
    // conditions but the hook (see `start_hooked`).
    let hooked = match (&service.dev_null, &spec.pre_exec) {
        (Some(dev_null), Some(hook))
            if cfg!(target_os = "linux")
                && hook.shares_memory()
                && spec.pty.is_none()
                && spec.shared_file.is_none()
                && !new_session =>
        {
            Some((dev_null.as_raw_fd(), hook.clone()))
        }
        _ => None,
    };
    let started = match direct {
        Some(dev_null) => {
            let start = |executable: &Path| {
                let child = DirectChild { dev_null, limits: limits.as_deref() };
                start_direct(service, &runtime, &spec, executable, &env, child, &failed)
            };
            match start(&executable) {
                Err(SpawnError::Os(error)) if unchecked && gone_from_where_it_was(&error) => {
                    service.programs.forget(&program, path_var);
                    start(&resolve()?)?
                }
                started => started?,
            }
        }
        None => {
            let executable = if unchecked { resolve()? } else { executable };
            let launch = Launch { program: &program, executable: &executable, env: &env, pty: pty.as_ref() };
            let started = match &hooked {
                Some((dev_null, hook)) => {
                    let child = DirectChild { dev_null: *dev_null, limits: limits.as_deref() };
                    start_hooked(service, &runtime, &spec, &launch, child, hook, (&failed, &os_error))?
                }
                None => None,
            };
            match started {
                Some(started) => started,
                None => {
                    let modes = Modes { new_session, controlling_terminal, limits: limits.clone() };
                    start_command(&runtime, &spec, &launch, modes, &failed, &os_error)?
                }
            }
        }
    };
    let Started { pid, leader, stdin, stdout, stderr } = started;
    let factory = Some(service.spill.factory(spec.spill_owner.clone(), spec.spill_account.clone()));
    let redactor = Some(&service.redactor).filter(|r| r.is_needed());
    let streams = (
        OutputCollector::with_shared_redactor(
            spec.stdout.clone(),
            spec.stdout.spill_cap.and(factory.clone()),
            redactor,
        ),
        OutputCollector::with_shared_redactor(
            spec.stderr.clone(),
            spec.stderr.spill_cap.and(factory),
            redactor,
        ),
    );
    let reaper = service.reaper.clone();
    if let Some(reaper) = &reaper {
        reaper.ensure_started(&runtime);
    }
    let inner = Arc::new(ProcessInner::new(
        id,
        pid,
        grace,
        streams,
        runtime.clone(),
        Arc::downgrade(&service.live),
        reaper,
    ));
    let handle = ProcessHandle { inner: Arc::clone(&inner) };
    service.live.insert(id, handle.clone());

    // The harness keeps no slave descriptor: the master reads end of file (EIO) once the
    // child and its descendants have all closed theirs.
    let terminal = match pty {
        Some(pty) => {
            drop(pty.slave);
            let reader = pty.master.try_clone().ok();
            inner.keep_terminal(pty.master, pty.slave_id, controlling_terminal);
            reader
        }
        None => None,
    };
    let stdin_task = match (spec.stdin, stdin) {
        (Some(data), Some(stdin)) => {
            let _guard = runtime.enter();
            crate::direct::set_nonblocking(&stdin);
            tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(stdin).ok().map(|mut stdin| {
                runtime.spawn(async move {
                    // EPIPE and friends are expected when the child does not read everything.
                    let _ = stdin.write_all(&data).await;
                    let _ = stdin.shutdown().await;
                })
            })
        }
        (None, Some(stdin)) if spec.pty.is_none() && spec.keep_stdin => {
            inner.keep_stdin(stdin);
            None
        }
        _ => None,
    };
    runtime.spawn(supervise(leader, (stdout, stderr), inner, spec.cancel, stdin_task, terminal, limits));
    Ok(handle)
}

/// Whether a start of a remembered file failed because the file is no longer there to execute
/// (removed, replaced by a directory or a dangling link, or no longer executable).
fn gone_from_where_it_was(error: &OsSpawnError) -> bool {
    error.stage == SpawnStage::Exec
        && matches!(error.errno, Errno::ENOENT | Errno::EACCES | Errno::ENOTDIR | Errno::ELOOP)
}

/// How a spawn's failure is reported: the OS error and the stage it happened at.
type Failure<'a> = &'a dyn Fn(Errno, SpawnStage) -> OsSpawnError;

/// The parent's end of an output pipe, read by the runtime (made non-blocking first unless it
/// is already).
fn receiver(runtime: &tokio::runtime::Handle, fd: std::os::fd::OwnedFd, nonblocking: bool) -> Option<Pipe> {
    let _guard = runtime.enter();
    if !nonblocking {
        crate::direct::set_nonblocking(&fd);
    }
    tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(fd).ok()
}

/// What a direct start gives its child besides the image: `/dev/null` for its stdin, and the
/// limits it takes on before `exec`.
#[derive(Clone, Copy)]
struct DirectChild<'a> {
    dev_null: std::os::fd::RawFd,
    limits: Option<&'a SpawnLimits>,
}

/// Starts a child that needs no code of the caller's between `fork` and `exec` directly (see
/// [`crate::direct`]).
fn start_direct(
    service: &SubprocessService,
    runtime: &tokio::runtime::Handle,
    spec: &SpawnSpec,
    executable: &Path,
    env: &[(&OsStr, &OsStr)],
    child: DirectChild<'_>,
    failed: Failure<'_>,
) -> Result<Started, SpawnError> {
    let DirectChild { dev_null, limits } = child;
    // On Linux the child marks them itself (`crate::direct`).
    #[cfg(not(target_os = "linux"))]
    crate::fds::mark_all_cloexec();
    let image = direct_image(service, spec, executable, env, limits, None);
    // The spawn lock is held until the pid is registered (and its group is live), so
    // no reaper — this service's, or another's in this process — mistakes this fresh
    // child for a stray, whether or not this service contains its own trees.
    let mut spawned_pids = crate::containment::spawn_lock();
    let spawned = crate::direct::spawn(&image, dev_null).map_err(|errno| failed(errno, SpawnStage::Exec))?;
    spawned_pids.insert(spawned.pid);
    crate::exit_guard::register(spawned.pid);
    drop(spawned_pids);
    Ok(Started {
        pid: spawned.pid,
        leader: Leader { pid: spawned.pid, pidfd: None, opened: spawned.pidfd, first: None, rusage: None },
        stdin: spawned.stdin,
        stdout: receiver(runtime, spawned.stdout, true),
        stderr: receiver(runtime, spawned.stderr, true),
    })
}

/// The image a direct start runs: `spec`'s program with the final environment `env`, the
/// service's inherited pairs, and `hook` when the child runs one.
fn direct_image<'a>(
    service: &'a SubprocessService,
    spec: &'a SpawnSpec,
    executable: &'a Path,
    env: &'a [(&'a OsStr, &'a OsStr)],
    limits: Option<&'a crate::limits::SpawnLimits>,
    hook: Option<(&'a PreExecHook, &'a std::cell::Cell<bool>)>,
) -> crate::direct::Image<'a> {
    crate::direct::Image {
        executable,
        argv: &spec.argv,
        env,
        inherited: (&service.inherited_env, &service.inherited_entries),
        cwd: spec.cwd.as_deref(),
        stdin_piped: spec.stdin.is_some() || spec.keep_stdin,
        limits,
        hook,
    }
}

/// Starts a child whose hook may share the harness's memory (see
/// [`PreExecHook::sharing_memory`]) with the direct start: `clone(CLONE_VM | CLONE_VFORK)`,
/// no copy of the harness's address space. When the hook starts the program in a sibling
/// (`clone(CLONE_PARENT)`, reported in memory) and leaves, the child is reaped here at once
/// and the sibling is the process waited for; it stays in the child's process group, whose
/// id is the child's pid. `None`: the hook asked for a forked start (see
/// [`crate::child_exec::ChildExec::want_fork`]), or the image cannot be made; the caller then
/// starts it with [`start_command`].
fn start_hooked(
    service: &SubprocessService,
    runtime: &tokio::runtime::Handle,
    spec: &SpawnSpec,
    start: &Launch<'_>,
    child: DirectChild<'_>,
    hook: &PreExecHook,
    (failed, os_error): (Failure<'_>, Failure<'_>),
) -> Result<Option<Started>, SpawnError> {
    let Launch { program, executable, env, .. } = *start;
    let argv = std::iter::once(OsStr::new(program)).chain(spec.argv[1..].iter().map(OsStr::new));
    let Some(exec) = crate::child_exec::ChildExec::new(executable, argv, env.iter().copied()) else {
        return Ok(None);
    };
    let exec = exec.sharing_memory();
    let hook_failed = std::cell::Cell::new(false);
    let image = direct_image(service, spec, executable, env, child.limits, Some((hook, &hook_failed)));
    // The spawn lock is held until the pid is registered: see `start_direct`.
    let mut spawned_pids = crate::containment::spawn_lock();
    let spawned = {
        let _published = exec.publish();
        crate::direct::spawn(&image, child.dev_null)
    };
    // The child is done with the image: it has `exec`ed or exited (CLONE_VFORK).
    let sibling = exec.sibling();
    let spawned = match spawned {
        Ok(spawned) => spawned,
        Err(errno) => {
            drop(spawned_pids);
            if let Some(sibling) = sibling {
                // The sibling failed before its exec (that is the spawn's error): reap it.
                // SAFETY: waiting for a child of this process that has exited.
                unsafe { libc::waitpid(sibling, std::ptr::null_mut(), 0) };
            }
            if exec.fork_wanted() {
                return Ok(None);
            }
            // The hook runs after `chdir`, so a failed hook also vouches for the directory.
            let error = if hook_failed.get() {
                os_error(errno, SpawnStage::PreExec)
            } else {
                failed(errno, SpawnStage::Exec)
            };
            return Err(error.into());
        }
    };
    let leader = match sibling {
        Some(sibling) => {
            // The child left as soon as the sibling `exec`ed; its pid stays the group's id
            // while the sibling lives.
            // SAFETY: waiting for a child of this process that has exited (or is exiting).
            unsafe { libc::waitpid(spawned.pid, std::ptr::null_mut(), 0) };
            drop(spawned.pidfd);
            spawned_pids.insert(sibling);
            Leader::of(sibling)
        }
        None => {
            spawned_pids.insert(spawned.pid);
            Leader { pid: spawned.pid, pidfd: None, opened: spawned.pidfd, first: None, rusage: None }
        }
    };
    crate::exit_guard::register(spawned.pid);
    drop(spawned_pids);
    Ok(Some(Started {
        pid: spawned.pid,
        leader,
        stdin: spawned.stdin,
        stdout: receiver(runtime, spawned.stdout, true),
        stderr: receiver(runtime, spawned.stderr, true),
    }))
}

/// What [`start_command`] starts.
struct Launch<'a> {
    program: &'a str,
    executable: &'a Path,
    env: &'a [(&'a OsStr, &'a OsStr)],
    pty: Option<&'a crate::pty::Pty>,
}

/// How [`start_command`] starts the child: a new session (with the terminal as its
/// controlling one), and the limits it joins.
struct Modes {
    new_session: bool,
    controlling_terminal: bool,
    limits: Option<Arc<SpawnLimits>>,
}

/// Starts a child through the standard library's `Command` (a `fork`): with a hook, a new
/// session, a terminal or a shared file, or when the direct start has no `/dev/null`.
fn start_command(
    runtime: &tokio::runtime::Handle,
    spec: &SpawnSpec,
    start: &Launch<'_>,
    modes: Modes,
    failed: Failure<'_>,
    os_error: Failure<'_>,
) -> Result<Started, SpawnError> {
    let Launch { program, executable, env, pty } = *start;
    let Modes { new_session, controlling_terminal, limits } = modes;
    let mut command = std::process::Command::new(executable);
    command.arg0(program).args(&spec.argv[1..]).env_clear().envs(env.iter().copied());
    match &pty {
        Some(pty) => {
            let slave =
                || pty.slave.try_clone().map(Stdio::from).map_err(|e| SpawnError::Terminal(errno_of(&e)));
            command.stdin(slave()?).stdout(slave()?).stderr(slave()?);
        }
        None => {
            command
                .stdin(if spec.stdin.is_some() || spec.keep_stdin { Stdio::piped() } else { Stdio::null() })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        }
    }
    if let Some(dir) = &spec.cwd {
        command.current_dir(dir);
    }
    if !new_session {
        // A group leader cannot call setsid: with a new session, `setsid` makes the child the
        // leader of a new group instead, with the same pgid (its pid).
        command.process_group(0);
    }
    // Every child started here gets the prelude, the plain one too (only when `/dev/null`
    // could not be opened for the direct start): a bare `fork` and `exec` would leave it the
    // signals the harness ignores.
    let shared_fd = spec.shared_file.as_ref().map(|f| f.as_raw_fd());
    install_prelude(&mut command, Prelude { new_session, controlling_terminal, shared_fd, limits });
    let hook_marker = match &spec.pre_exec {
        Some(hook) => Some(
            install_hook(&mut command, hook.clone()).map_err(|e| failed(errno_of(&e), SpawnStage::Exec))?,
        ),
        None => None,
    };

    // The spawn lock is held until the pid is registered: see `start_direct`.
    let mut spawned_pids = crate::containment::spawn_lock();
    // A hook that starts the program from another process (a PID-namespaced confinement)
    // needs it as C strings made before the fork.
    // It may start the program in a sibling of the child (`clone(CLONE_PARENT)`) and report
    // the sibling's pid on this pipe: then the sibling is the process this spawn waits for.
    let report = match &spec.pre_exec {
        Some(_) => Some(std::io::pipe().map_err(|e| failed(errno_of(&e), SpawnStage::Exec))?),
        None => None,
    };
    let image = spec.pre_exec.as_ref().and_then(|_| {
        let argv = std::iter::once(OsStr::new(&program)).chain(spec.argv[1..].iter().map(OsStr::new));
        let image = crate::child_exec::ChildExec::new(executable, argv, env.iter().copied())?;
        Some(match &report {
            Some((_, writer)) => image.with_report(writer.as_raw_fd()),
            None => image,
        })
    });
    let spawned = {
        let _published = image.as_ref().map(crate::child_exec::ChildExec::publish);
        command.spawn()
    };
    drop(image);
    let sibling = report.and_then(|(reader, writer)| {
        drop(writer);
        read_sibling(reader)
    });
    if let Ok(child) = &spawned {
        // Every service's leaders are known, so no sweep reaps a leader's zombie before
        // its own waiter does.
        let pid = child.id() as i32;
        spawned_pids.insert(pid);
        spawned_pids.extend(sibling);
        crate::exit_guard::register(pid);
    }
    drop(spawned_pids);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            if let Some(sibling) = sibling {
                // The sibling failed before its exec (that is the spawn's error): reap it.
                // SAFETY: waiting for a child of this process that has exited.
                unsafe { libc::waitpid(sibling, std::ptr::null_mut(), 0) };
            }
            // The hook runs after `chdir`, so a fired hook also vouches for the directory.
            let error = if hook_marker.is_some_and(HookMarker::fired) {
                os_error(errno_of(&e), SpawnStage::PreExec)
            } else {
                failed(errno_of(&e), SpawnStage::Exec)
            };
            return Err(error.into());
        }
    };
    let pid = child.id() as i32;
    // The standard library's handle is only used for its descriptors: the child is waited
    // for through its pidfd, like a direct one, and dropping the handle neither waits nor
    // kills.
    let _guard = runtime.enter();
    Ok(Started {
        pid,
        leader: Leader {
            pid: sibling.unwrap_or(pid),
            pidfd: None,
            opened: None,
            first: sibling.map(|_| Box::new(Leader::of(pid))),
            rusage: None,
        },
        stdin: child.stdin.take().map(std::os::fd::OwnedFd::from),
        stdout: child.stdout.take().and_then(|out| receiver(runtime, out.into(), false)),
        stderr: child.stderr.take().and_then(|err| receiver(runtime, err.into(), false)),
    })
}

/// The pid a hook reported for a sibling that runs the program, if it reported one. The
/// write ends are closed by now (ours above, the child's when it exec'd or exited, which
/// `spawn` waited for), so the read cannot block.
fn read_sibling(mut reader: std::io::PipeReader) -> Option<i32> {
    let mut bytes = [0u8; 4];
    match reader.read(&mut bytes) {
        Ok(4) => Some(i32::from_ne_bytes(bytes)).filter(|pid| *pid > 0),
        _ => None,
    }
}

/// What a start hands to the rest of the spawn.
struct Started {
    /// The child's pid, which is also its process group.
    pid: i32,
    leader: Leader,
    stdin: Option<std::os::fd::OwnedFd>,
    stdout: Option<Pipe>,
    stderr: Option<Pipe>,
}

/// The parent's end of an output pipe.
type Pipe = tokio::net::unix::pipe::Receiver;

/// The process a spawn waits for: the child itself, or a sibling the child started in its
/// place (`first` is then the child, which exits at once and is reaped first). Waiting is
/// by pidfd, and the status is taken with `waitpid` of that one pid, never of any child.
struct Leader {
    pid: i32,
    pidfd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
    /// A pidfd the start made, registered with the runtime at the first wait.
    opened: Option<std::os::fd::OwnedFd>,
    first: Option<Box<Leader>>,
    /// What the process and the descendants it waited for used, once reaped.
    rusage: Option<libc::rusage>,
}

/// How often a leader is looked at where pidfds are missing (Linux before 5.3).
const NO_PIDFD_POLL: Duration = Duration::from_millis(5);

impl Leader {
    fn of(pid: i32) -> Self {
        Self { pid, pidfd: None, opened: None, first: None, rusage: None }
    }

    async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(first) = &mut self.first {
            Box::pin(first.wait()).await?;
            self.first = None;
        }
        let pid = self.pid;
        if self.pidfd.is_none() {
            let fd = match self.opened.take() {
                Some(fd) => Some(fd),
                None => {
                    // SAFETY: pidfd_open of a child of this process; the fd is owned below.
                    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
                    if fd < 0 && Errno::last() != Errno::ENOSYS {
                        return Err(std::io::Error::last_os_error());
                    }
                    // SAFETY: a fresh descriptor nobody else owns.
                    (fd >= 0).then(|| unsafe {
                        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32)
                    })
                }
            };
            if let Some(fd) = fd {
                // SAFETY: the `OwnedFd` is open and is moved into the `AsyncFd`, which owns it
                // (and so its descriptor number) until it is dropped.
                self.pidfd = Some(unsafe { tokio::io::unix::AsyncFd::register(fd) }?);
            }
        }
        loop {
            let guard = match &self.pidfd {
                Some(pidfd) => Some(pidfd.readable().await?),
                None => None,
            };
            let mut status = 0;
            // SAFETY: rusage is plain data, filled by wait4.
            let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: a non-blocking wait for a child of this process.
            let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut rusage) };
            if reaped == pid {
                self.rusage = Some(rusage);
                crate::containment::forget_spawned(pid);
                return Ok(<ExitStatus as std::os::unix::process::ExitStatusExt>::from_raw(status));
            }
            if reaped < 0 {
                if Errno::last() == Errno::EINTR {
                    continue;
                }
                return Err(std::io::Error::last_os_error());
            }
            match guard {
                Some(mut guard) => guard.clear_ready(),
                None => tokio::time::sleep(NO_PIDFD_POLL).await,
            }
        }
    }
}

/// A stream that fills whole chunks gets a larger pipe, so the writer blocks and we wake
/// far less often. Best effort: the kernel may refuse (`pipe-max-size`, per-user limits).
fn widen_pipe(pipe: &impl AsFd) {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::fcntl::fcntl(pipe.as_fd(), nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_SIZE));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pipe;
}

fn errno_of(e: &std::io::Error) -> Errno {
    e.raw_os_error().map(Errno::from_raw).unwrap_or(Errno::EINVAL)
}

/// Tells a failing pre-exec hook apart from a failing `exec`: the wrapped hook writes one
/// byte to a close-on-exec pipe before reporting its error.
struct HookMarker {
    reader: std::io::PipeReader,
    writer: std::io::PipeWriter,
}

impl HookMarker {
    fn fired(self) -> bool {
        let Self { mut reader, writer } = self;
        // The failed child has been reaped by now, so with our write end closed the read
        // cannot block.
        drop(writer);
        let mut byte = [0u8; 1];
        matches!(reader.read(&mut byte), Ok(1))
    }
}

/// Whether this process's session has a controlling terminal right now (`/dev/tty` opens).
fn session_has_terminal() -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open("/dev/tty")
        .is_ok()
}

/// What the prelude of a forked child does.
struct Prelude {
    /// `setsid` first.
    new_session: bool,
    /// Then make descriptor 0 (a terminal's slave) the session's controlling terminal.
    controlling_terminal: bool,
    /// The descriptor that stays open across `exec`.
    shared_fd: Option<std::os::fd::RawFd>,
    /// The groups to join and resource limits to set (before any caller hook).
    limits: Option<Arc<SpawnLimits>>,
}

/// The start of every forked child's pre-exec sequence, before any caller hook (pre-exec
/// closures run in the order they were installed): a new session when asked (with the
/// terminal on descriptor 0 as its controlling terminal, when asked), then
/// close-on-exec for every descriptor from 3, so nothing the harness holds reaches the
/// program — but the shared file, when there is one — and every signal at its default
/// action, so no signal the harness ignores stays ignored in the program.
fn install_prelude(command: &mut std::process::Command, prelude: Prelude) {
    let Prelude { new_session, controlling_terminal, shared_fd, limits } = prelude;
    let prelude = move || {
        if new_session {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
        }
        if let Some(limits) = &limits {
            limits.apply_in_child().map_err(std::io::Error::from)?;
        }
        // SAFETY: TIOCSCTTY takes an integer argument; descriptor 0 is the terminal's slave,
        // which the standard library put there before pre-exec code runs.
        if controlling_terminal && unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        crate::fds::cloexec_from_3_in_child();
        default_signals_in_child();
        if let Some(fd) = shared_fd {
            // SAFETY: clears the flags of a descriptor the spec keeps open across the fork.
            if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the closure runs between fork and exec and only makes the setsid(2), ioctl(2),
    // fcntl(2), getrlimit(2), setrlimit(2), write(2), close_range(2) and sigaction(2) system calls, all
    // async-signal-safe; it allocates nothing (an errno converts to `io::Error` without
    // allocating).
    unsafe { command.pre_exec(prelude) };
}

/// In a child, before `exec`: every signal at its default action. `exec` resets the signals
/// that have a handler but keeps the ignored ones ignored, so a harness started in the
/// background by a shell (SIGINT and SIGQUIT ignored) or under `nohup` (SIGHUP) would hand
/// that on to every program. Async-signal-safe: `rt_sigaction(2)` only. The system call
/// itself, because the C library's wrapper refuses its own signals (32 up to SIGRTMIN), which
/// a harness started by that library's `posix_spawn` has ignored; SIGKILL and SIGSTOP are
/// left alone. Where the kernel's signal set is not 64 bits, the wrapper does what it can.
pub(crate) fn default_signals_in_child() {
    // SIG_DFL, no flags, no restorer, an empty mask: the kernel's `struct sigaction` all zero,
    // whatever its layout (at most 32 bytes where the set has 64 bits).
    #[cfg(target_os = "linux")]
    let action = [0u64; 8];
    for signal in 1..=libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        #[cfg(target_os = "linux")]
        {
            // SAFETY: rt_sigaction reads the zeroed action and writes nothing (no old action).
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    signal,
                    action.as_ptr(),
                    std::ptr::null::<u64>(),
                    8usize,
                )
            };
            if rc == 0 {
                continue;
            }
        }
        // SAFETY: sets a signal's action to its default; no handler runs.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
}

fn install_hook(command: &mut std::process::Command, hook: PreExecHook) -> std::io::Result<HookMarker> {
    let (reader, writer) = std::io::pipe()?;
    let fd = writer.as_raw_fd();
    let wrapped = move || match hook.run() {
        Ok(()) => Ok(()),
        Err(e) => {
            // SAFETY: `write` is async-signal-safe; `fd` is the write end of a pipe that the
            // parent keeps open until the spawn returns, and the buffer is a static byte.
            unsafe { libc::write(fd, b"h".as_ptr().cast(), 1) };
            Err(e)
        }
    };
    // SAFETY: the closure runs between fork and exec. It only calls the caller's hook (whose
    // maker promised, by the `unsafe` `PreExecHook::new`, that it is async-signal-safe) and
    // `write(2)`.
    unsafe { command.pre_exec(wrapped) };
    Ok(HookMarker { reader, writer })
}

async fn pump<P: AsyncRead + AsFd + Unpin>(pipe: Option<P>, collector: &OutputCollector) -> Option<P> {
    let mut pipe = pipe?;
    // Small outputs never pay for the full chunk; a read that fills the buffer grows it.
    let mut buf = Vec::with_capacity(FIRST_CHUNK);
    loop {
        buf.clear();
        match pipe.read_buf(&mut buf).await {
            Ok(0) => return Some(pipe),
            Ok(n) => {
                collector.push(&buf);
                if n == buf.capacity() && n < CHUNK {
                    buf = Vec::with_capacity(CHUNK);
                    widen_pipe(&pipe);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Some(pipe),
        }
    }
}

/// Reads a terminal's master until every slave descriptor is closed (the kernel then reports
/// `EIO`), collecting the filtered text as stdout and answering cursor position queries.
async fn pump_terminal(master: Option<std::os::fd::OwnedFd>, inner: &ProcessInner) {
    let Some(master) = master else { return };
    // SAFETY: the `OwnedFd` is open and moves into the `AsyncFd`, which owns it (and so its
    // descriptor number) until it is dropped.
    let Ok(master) = (unsafe { tokio::io::unix::AsyncFd::register(master) }) else { return };
    let mut filter = crate::pty::TerminalFilter::default();
    let mut buf = vec![0u8; FIRST_CHUNK * 4];
    loop {
        let Ok(mut guard) = master.readable().await else { break };
        let read = guard.try_io(|fd| {
            // SAFETY: reading into a live buffer of `buf.len()` bytes from an open descriptor.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 { Err(std::io::Error::last_os_error()) } else { Ok(n as usize) }
        });
        match read {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => {
                let filtered = filter.push(&buf[..n]);
                inner.stdout.push(&filtered.text);
                if !filtered.reply.is_empty() {
                    let _ = inner.write_input(&filtered.reply);
                }
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // EIO: no slave is open any more; anything else ends the stream too.
            Ok(Err(_)) => break,
            Err(_would_block) => {}
        }
    }
    let rest = filter.finish();
    if !rest.is_empty() {
        inner.stdout.push(&rest);
    }
}

/// The output pipes a child has finished with, still open (closing them is upkeep).
type SpentPipes = (Option<Pipe>, Option<Pipe>);

/// Waits for the direct child and the pipes (at most `grace` past the exit), forwarding an
/// abort as a termination. Returns when the streams are complete, with the pipes read to
/// their end (the others close on return).
async fn run_to_exit(
    leader: &mut Leader,
    streams: (Option<Pipe>, Option<Pipe>),
    inner: &Arc<ProcessInner>,
    cancel: Option<&CancellationToken>,
    terminal: Option<std::os::fd::OwnedFd>,
) -> (std::io::Result<ExitStatus>, SpentPipes) {
    let (stdout, stderr) = streams;
    let pumps = async {
        let (stdout, stderr, ()) = tokio::join!(
            pump(stdout, &inner.stdout),
            pump(stderr, &inner.stderr),
            pump_terminal(terminal, inner)
        );
        (stdout, stderr)
    };
    let abort = async {
        match cancel {
            Some(cancel) => cancel.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(pumps, abort);
    let mut spent = None;
    let mut abort_seen = false;
    let status = loop {
        tokio::select! {
            status = leader.wait() => break status,
            pipes = &mut pumps, if spent.is_none() => spent = Some(pipes),
            () = &mut abort, if !abort_seen => {
                abort_seen = true;
                inner.terminate();
            }
        }
    };
    inner.mark_leader_reaped();
    crate::containment::forget_spawned(inner.pid);
    inner.contain_leftovers();
    if spent.is_none() {
        let drain = tokio::time::sleep(inner.grace);
        tokio::pin!(drain);
        loop {
            tokio::select! {
                pipes = &mut pumps => {
                    spent = Some(pipes);
                    break;
                }
                () = &mut drain => break,
                () = &mut abort, if !abort_seen => {
                    abort_seen = true;
                    inner.terminate();
                }
            }
        }
    }
    (status, spent.unwrap_or_default())
}

fn outcome_of(status: std::io::Result<ExitStatus>) -> ProcessOutcome {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (_, Some(signo)) => ProcessOutcome { exit_code: None, signal: Some(signal_name(signo)) },
            (code, None) => ProcessOutcome { exit_code: Some(code.unwrap_or(-1)), signal: None },
        },
        Err(e) => {
            // Only possible when something else reaped our child; its real status is lost.
            tracing::warn!(error = %e, "waiting for a child failed; reporting exit code -1");
            ProcessOutcome { exit_code: Some(-1), signal: None }
        }
    }
}

async fn supervise(
    mut leader: Leader,
    streams: (Option<Pipe>, Option<Pipe>),
    inner: Arc<ProcessInner>,
    cancel: Option<CancellationToken>,
    stdin_task: Option<JoinHandle<()>>,
    terminal: Option<std::os::fd::OwnedFd>,
    limits: Option<Arc<SpawnLimits>>,
) {
    let (status, spent) = run_to_exit(&mut leader, streams, &inner, cancel.as_ref(), terminal).await;
    if let Some(task) = stdin_task {
        task.abort();
    }
    inner.set_usage(match &limits {
        Some(limits) => limits.usage(leader.rusage.as_ref()),
        None => crate::limits::rusage_usage(leader.rusage.as_ref()),
    });
    inner.settle(outcome_of(status));
    // The rest is upkeep, which the result does not wait for. On a runtime with one worker
    // (a stdio server's), it waits until the tasks the settlement woke (the waiter, and what
    // answers with its result) have run: a yielded task there wakes no other thread.
    if tokio::runtime::Handle::current().metrics().num_workers() == 1 {
        tokio::task::yield_now().await;
    }
    drop(spent);
    crate::direct::refill_spare();
    // Descendants outlive settlement; the service owns them until the whole tree is gone.
    inner.observe_until_gone(LINGER_POLL_MAX).await;
    // Then the groups go (a few system calls; a blocking thread keeps them off the runtime).
    if let Some(limits) = limits {
        drop(tokio::task::spawn_blocking(move || drop(limits)));
    }
}
