//! Starting a child and supervising it until settlement.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dsh_core::{AbortSignal, MAX_TIMER_DELAY_MS};
use nix::errno::Errno;
use nix::unistd::AccessFlags;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::task::JoinHandle;

use crate::collector::{CaptureLimits, OutputCollector};
use crate::env::{EnvEntry, child_env, lookup};
use crate::error::{OsSpawnError, SpawnError, SpawnStage};
use crate::handle::{ProcessHandle, ProcessInner, ProcessOutcome};
use crate::program::resolve_program;
use crate::service::SubprocessService;
use crate::signal_name::signal_name;

/// Runs in the forked child right before `exec` (e.g. to apply a sandbox). It must be
/// async-signal-safe: no allocation, no locks. An error fails the spawn with that errno.
pub type PreExecHook = Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>;

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
    pub stdout: CaptureLimits,
    pub stderr: CaptureLimits,
    /// Time between `SIGTERM` and `SIGKILL`, and the pipe-drain bound after exit.
    pub grace_ms: f64,
    /// Firing it terminates the process.
    pub signal: Option<AbortSignal>,
    /// Runs in the child before `exec`; when `None` the fast `posix_spawn` path is used.
    pub pre_exec: Option<PreExecHook>,
}

impl SpawnSpec {
    /// A spec with defaults: inherited cwd, no extra env, `/dev/null` stdin, 64000-byte tails
    /// without spill, 3000 ms grace, no signal, no hook.
    pub fn new(argv: Vec<String>) -> Self {
        Self {
            argv,
            cwd: None,
            env: Vec::new(),
            stdin: None,
            stdout: CaptureLimits::new("stdout", 64_000, None),
            stderr: CaptureLimits::new("stderr", 64_000, None),
            grace_ms: 3000.0,
            signal: None,
            pre_exec: None,
        }
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
            .field("grace_ms", &self.grace_ms)
            .field("pre_exec", &self.pre_exec.is_some())
            .finish_non_exhaustive()
    }
}

fn validate_grace(grace_ms: f64) -> Result<Duration, SpawnError> {
    if grace_ms.is_finite() && grace_ms > 0.0 && grace_ms <= MAX_TIMER_DELAY_MS {
        Ok(Duration::from_secs_f64(grace_ms / 1000.0))
    } else {
        Err(SpawnError::InvalidGrace)
    }
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
    let grace = validate_grace(spec.grace_ms)?;
    let program = match spec.argv.first() {
        Some(program) if !program.is_empty() => program.clone(),
        _ => return Err(SpawnError::InvalidArgv),
    };
    if let Some(signal) = &spec.signal
        && signal.is_aborted()
    {
        let reason = signal.reason().map_or("aborted", |r| r.message.as_str());
        return Err(SpawnError::AbortedBeforeSpawn(reason.to_owned()));
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
    let env = child_env(&service.ambient_env, &spec.env);
    let executable = resolve_program(&program, lookup(&env, "PATH"), &cwd)
        .map_err(|errno| failed(errno, SpawnStage::Exec))?;

    let mut command = std::process::Command::new(&executable);
    command
        .arg0(&program)
        .args(&spec.argv[1..])
        .env_clear()
        .envs(env)
        .process_group(0)
        .stdin(if spec.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = &spec.cwd {
        command.current_dir(dir);
    }
    let hook_marker = match &spec.pre_exec {
        Some(hook) => Some(
            install_hook(&mut command, Arc::clone(hook))
                .map_err(|e| failed(errno_of(&e), SpawnStage::Exec))?,
        ),
        None => None,
    };

    // The spawn lock is held until the pid is registered, so the reaper never mistakes this
    // fresh child for a stray.
    let mut spawned_pids = service.reaper.as_ref().map(|_| crate::containment::spawn_lock());
    let spawned = {
        let _guard = runtime.enter();
        tokio::process::Command::from(command).kill_on_drop(false).spawn()
    };
    if let (Some(pids), Ok(child)) = (spawned_pids.as_mut(), &spawned)
        && let Some(pid) = child.id()
    {
        pids.insert(pid as i32);
    }
    drop(spawned_pids);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            // The hook runs after `chdir`, so a fired hook also vouches for the directory.
            let error = if hook_marker.is_some_and(HookMarker::fired) {
                os_error(errno_of(&e), SpawnStage::PreExec)
            } else {
                failed(errno_of(&e), SpawnStage::Exec)
            };
            return Err(error.into());
        }
    };
    let Some(pid) = child.id().map(|pid| pid as i32) else {
        // A freshly spawned child has not been waited on, so its id is always known.
        return Err(os_error(Errno::ESRCH, SpawnStage::Exec).into());
    };
    crate::exit_guard::register(pid);

    let factory = Some(service.spill.factory());
    let streams = (
        OutputCollector::new(spec.stdout.clone(), spec.stdout.spill_cap.and(factory.clone())),
        OutputCollector::new(spec.stderr.clone(), spec.stderr.spill_cap.and(factory)),
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

    let stdin_task = match (spec.stdin, child.stdin.take()) {
        (Some(data), Some(mut stdin)) => Some(runtime.spawn(async move {
            // EPIPE and friends are expected when the child does not read everything.
            let _ = stdin.write_all(&data).await;
            let _ = stdin.shutdown().await;
        })),
        _ => None,
    };
    runtime.spawn(supervise(child, inner, spec.signal, stdin_task));
    Ok(handle)
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

fn install_hook(
    command: &mut std::process::Command,
    hook: crate::PreExecHook,
) -> std::io::Result<HookMarker> {
    let (reader, writer) = std::io::pipe()?;
    let fd = writer.as_raw_fd();
    let wrapped = move || match hook() {
        Ok(()) => Ok(()),
        Err(e) => {
            // SAFETY: `write` is async-signal-safe; `fd` is the write end of a pipe that the
            // parent keeps open until the spawn returns, and the buffer is a static byte.
            unsafe { libc::write(fd, b"h".as_ptr().cast(), 1) };
            Err(e)
        }
    };
    // SAFETY: the closure runs between fork and exec. It only calls the caller's hook (which
    // the `PreExecHook` contract requires to be async-signal-safe) and `write(2)`.
    unsafe { command.pre_exec(wrapped) };
    Ok(HookMarker { reader, writer })
}

async fn pump(pipe: Option<impl AsyncRead + AsFd + Unpin>, collector: &OutputCollector) {
    let Some(mut pipe) = pipe else { return };
    // Small outputs never pay for the full chunk; a read that fills the buffer grows it.
    let mut buf = Vec::with_capacity(FIRST_CHUNK);
    loop {
        buf.clear();
        match pipe.read_buf(&mut buf).await {
            Ok(0) => return,
            Ok(n) => {
                collector.push(&buf);
                if n == buf.capacity() && n < CHUNK {
                    buf = Vec::with_capacity(CHUNK);
                    widen_pipe(&pipe);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Waits for the direct child and the pipes (at most `grace` past the exit), forwarding an
/// abort as a termination. Returns when the streams are complete; the pipes close on return.
async fn run_to_exit(
    child: &mut Child,
    inner: &Arc<ProcessInner>,
    signal: Option<&AbortSignal>,
) -> std::io::Result<ExitStatus> {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let pumps = async {
        tokio::join!(pump(stdout, &inner.stdout), pump(stderr, &inner.stderr));
    };
    let abort = async {
        match signal {
            Some(signal) => signal.aborted().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(pumps, abort);
    let mut pumps_done = false;
    let mut abort_seen = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = &mut pumps, if !pumps_done => pumps_done = true,
            () = &mut abort, if !abort_seen => {
                abort_seen = true;
                inner.terminate();
            }
        }
    };
    inner.mark_leader_reaped();
    inner.contain_leftovers();
    if !pumps_done {
        let drain = tokio::time::sleep(inner.grace);
        tokio::pin!(drain);
        loop {
            tokio::select! {
                () = &mut pumps => break,
                () = &mut drain => break,
                () = &mut abort, if !abort_seen => {
                    abort_seen = true;
                    inner.terminate();
                }
            }
        }
    }
    status
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
    mut child: Child,
    inner: Arc<ProcessInner>,
    signal: Option<AbortSignal>,
    stdin_task: Option<JoinHandle<()>>,
) {
    let status = run_to_exit(&mut child, &inner, signal.as_ref()).await;
    if let Some(task) = stdin_task {
        task.abort();
    }
    inner.settle(outcome_of(status));
    // Descendants outlive settlement; the service owns them until the whole tree is gone.
    inner.observe_until_gone(LINGER_POLL_MAX).await;
}
