//! The executor trait and the values that cross it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dsh_core::tools::OutputProbeSlot;
use dsh_core::{AbortSignal, ErrorInfo, ToolError};
use dsh_sandbox::{
    NetworkApprover, NetworkFacts, SandboxEnforcement, SandboxExecutionPolicy, SandboxMode,
    SandboxUnavailableError,
};
use futures::future::BoxFuture;
use serde::{Serialize, Serializer};

/// The service key name an executor registers under.
pub const SHELL_SERVICE: &str = "shell";

/// The typed service key of the mounted executor.
pub const SHELL: dsh_core::ServiceKey<Arc<dyn ShellExecutor>> = dsh_core::ServiceKey::new(SHELL_SERVICE);

/// A caller's request; everything but `command` is optional and filled by `resolve`.
#[derive(Clone, Debug, Default)]
pub struct ShellExecRequest {
    /// The bash command line (run as `bash -c <command>`).
    pub command: String,
    /// Working directory; `None` uses the executor's configured or the harness cwd.
    pub workdir: Option<PathBuf>,
    /// Foreground timeout hint (ms); validated positive-finite and capped by `resolve`.
    pub timeout_ms: Option<f64>,
    /// Trusted-caller stdout capture budget (bytes); never exposed to a model.
    pub stdout_max_bytes: Option<f64>,
    /// The caller's abort signal; firing it kills the command.
    pub signal: Option<AbortSignal>,
    /// Bytes written to stdin, then closed; absent → stdin is `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Ordinary extra environment, merged after the credential scrub.
    pub env: Option<BTreeMap<String, String>>,
    /// Managed `DSH_*` snapshot, merged last (wins over `env`).
    pub dsh_env: Option<BTreeMap<String, String>>,
    /// The per-call sandbox policy; `None` lets a sandboxing executor use its standing one.
    pub sandbox_policy: Option<SandboxExecutionPolicy>,
    /// Where a foreground run installs a probe of its latest output line once the process has
    /// started (removed when the run ends); `None` when nobody observes. Background starts
    /// ignore it.
    pub output_probe: Option<OutputProbeSlot>,
    /// Who answers the call's network `ask`s (the approval service, for this call's agent);
    /// `None`: the call cannot ask, and an unlisted host is refused.
    pub network_approver: Option<NetworkApproverSlot>,
    /// A file the command gets open (read-write) at a descriptor named in its environment;
    /// `None` for none. Trusted callers only (the bash tool's persistent shell state).
    pub shared_file: Option<SharedFile>,
    /// Background starts: keep the command's stdin a pipe its owner can write to
    /// ([`ShellProcess::write_input`]) instead of `/dev/null`. Off by default.
    pub keep_stdin: bool,
    /// Background starts: run the command on a pseudo-terminal (its stdin, stdout, stderr and,
    /// unconfined, its controlling terminal) whose output is collected as stdout, instead of
    /// pipes; input is typed with [`ShellProcess::write_input`]. Off by default.
    pub tty: bool,
}

/// A file handed to a command as an open descriptor: the command's environment gets
/// `<env>=<descriptor number>`, and the descriptor stays open across its `exec`. Nothing but
/// the descriptor reaches the command, so a file without a name (or in a directory the
/// command cannot see) works as well, confined or not.
#[derive(Clone, Debug)]
pub struct SharedFile {
    /// The open file (its descriptor number is what the command is told).
    pub file: Arc<std::fs::File>,
    /// The environment variable that carries the descriptor number.
    pub env: String,
}

/// A shared [`NetworkApprover`], carried by requests and specs.
#[derive(Clone)]
pub struct NetworkApproverSlot(pub Arc<dyn NetworkApprover>);

impl std::fmt::Debug for NetworkApproverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NetworkApproverSlot")
    }
}

/// A resolved request: defaults and caps applied.
#[derive(Clone, Debug)]
pub struct ShellExecSpec {
    /// The bash command line.
    pub command: String,
    /// The working directory the command starts in.
    pub workdir: PathBuf,
    /// The effective foreground timeout (the hint or default, capped).
    pub timeout: ShellTimeout,
    /// The foreground stdout capture budget in whole bytes.
    pub stdout_max_bytes: usize,
    /// The caller's abort signal; firing it kills the command.
    pub signal: Option<AbortSignal>,
    /// Bytes written to stdin, then closed; `None` → stdin is `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Ordinary extra environment, merged after the credential scrub.
    pub env: Option<BTreeMap<String, String>>,
    /// Managed `DSH_*` snapshot, merged last (wins over `env`).
    pub dsh_env: Option<BTreeMap<String, String>>,
    /// The sandbox policy to confine under (a sandboxing executor always sets it).
    pub sandbox_policy: Option<SandboxExecutionPolicy>,
    /// See [`ShellExecRequest::output_probe`]; carried verbatim by `resolve`.
    pub output_probe: Option<OutputProbeSlot>,
    /// See [`ShellExecRequest::network_approver`]; carried verbatim by `resolve`.
    pub network_approver: Option<NetworkApproverSlot>,
    /// See [`ShellExecRequest::shared_file`]; carried verbatim by `resolve`.
    pub shared_file: Option<SharedFile>,
    /// See [`ShellExecRequest::keep_stdin`]; carried verbatim by `resolve`.
    pub keep_stdin: bool,
    /// See [`ShellExecRequest::tty`]; carried verbatim by `resolve`.
    pub tty: bool,
}

/// A resolved foreground timeout: the [`Duration`] the mechanics arm, and the same bound in
/// milliseconds as the JavaScript number it was requested or configured as.
///
/// The millisecond number is what is reported back (`timeoutMs`, `[timed out after <ms>ms]`,
/// the deadline's reason). A JavaScript number need not be a whole number of nanoseconds
/// (`1e-7`, `0.1234567891`), so it is kept beside the duration rather than recomputed from
/// it: reports stay byte-identical to the value the caller gave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShellTimeout {
    duration: Duration,
    millis: f64,
}

impl ShellTimeout {
    /// A timeout of `millis` milliseconds (a JavaScript number). The duration of a positive
    /// value is at least one nanosecond and saturates at [`Duration::MAX`]; a value that is
    /// not positive (or NaN) has a zero duration, meaning "no timer".
    pub fn from_millis(millis: f64) -> Self {
        let duration = if millis.is_nan() || millis <= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(millis / 1000.0)
                .map_or(Duration::MAX, |d| d.max(Duration::from_nanos(1)))
        };
        Self { duration, millis }
    }

    /// The bound the mechanics arm.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// The bound in milliseconds, exactly as requested or configured (the reported number).
    pub fn millis(&self) -> f64 {
        self.millis
    }
}

/// Serialized as its JavaScript millisecond number.
impl Serialize for ShellTimeout {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        dsh_core::json::serialize_js_f64(&self.millis, serializer)
    }
}

/// One collected stream: the (tail of the) text, whether bytes were dropped from memory, and
/// the complete spill file when one is intact.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CollectedOutput {
    /// The collected text (only its tail when bytes were dropped).
    pub text: String,
    /// Some bytes were dropped from memory (the spill file, if any, has them all).
    pub truncated: bool,
    /// The complete output on disk, while the spill file is intact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_path: Option<PathBuf>,
    /// Why the complete output could not be kept on disk (spill directory full, spill file
    /// removed, …), when bytes were dropped and no spill file holds them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_error: Option<String>,
}

/// Sandbox facts of one run or process, present iff a sandboxing executor handled it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellSandboxInfo {
    /// The mode the command ran under.
    pub mode: SandboxMode,
    /// The command exited non-zero with a denial signature in stderr (a refused file effect).
    pub denied: bool,
    /// How completely the runner confined; `None` when nothing confined (`danger-full-access`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<SandboxEnforcement>,
    /// `Some(true)` when a background process failed because the sandbox runner itself failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner_failed: Option<bool>,
    /// Background processes: each `host:port` the network policy refused while it ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network_denied: Vec<String>,
    /// Auto-run surfaces (hooks, code-running config keys, start-up files) a confined command
    /// of the session left changed, each moved into quarantine when the run or process ended.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<dsh_sandbox::Quarantined>,
}

/// Exit facts of a foreground run.
///
/// Invariants: `timed_out` and `aborted` are mutually exclusive and record the **first** cause
/// that cut the command short; `exit_code` is `None` exactly when `signal` is `Some`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellRunResult {
    /// The exit code when the command exited; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    /// The signal name (`SIGTERM`, `SIGKILL`, …) that ended the command, if one did.
    pub signal: Option<String>,
    /// The timeout cut the command short.
    pub timed_out: bool,
    /// The caller's signal cut the command short.
    pub aborted: bool,
    /// The effective timeout applied, serialized as `timeoutMs` (a JavaScript number).
    #[serde(rename = "timeoutMs")]
    pub timeout: ShellTimeout,
    /// The collected stdout.
    pub stdout: CollectedOutput,
    /// The collected stderr.
    pub stderr: CollectedOutput,
    /// Sandbox facts, present iff a sandboxing executor ran the command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<ShellSandboxInfo>,
    /// Network facts, present iff the command ran in its own network namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkFacts>,
    /// The kernel's out-of-memory killer ended the command or one of its processes (an
    /// executor with a memory limit knows; serialized only when true).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub out_of_memory: bool,
    /// What the command used and which limit stopped it, when the executor measures it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<ShellUsage>,
}

/// What a command (and everything it started) used, and which of its limits it reached, as
/// far as the executor could tell; every fact is optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellUsage {
    /// User and system CPU time, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    /// Peak memory in bytes (the whole tree's where the executor bounds it as one, else the
    /// largest single process's resident set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// The most processes (threads included) alive at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_processes: Option<u64>,
    /// The process limit, when it refused the command a fork.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_limit_reached: Option<u64>,
    /// The memory limit, when the out-of-memory killer acted within it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit_reached: Option<u64>,
    /// How the limits were enforced (`cgroup-v1`, `cgroup-v2`, `rlimit`); absent without
    /// limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
}

/// Lifecycle of a background process: `Running` then exactly one terminal state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessStatus {
    /// Started and not yet settled.
    Running,
    /// Exited on its own (whatever its exit code).
    Completed,
    /// Killed, ended by a signal, aborted, or never started (spawn failure).
    Killed,
}

/// One consuming read of a background process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShellProcessRead {
    /// stdout since the last read, then `[stderr]\n` + stderr since the last read.
    pub delta: String,
    /// Some unread bytes were dropped from memory before this read.
    pub lossy: bool,
    /// The complete stdout on disk, while its spill file is intact.
    pub stdout_spill_path: Option<PathBuf>,
    /// The complete stderr on disk, while its spill file is intact.
    pub stderr_spill_path: Option<PathBuf>,
    /// Why the complete output could not be kept on disk (either stream's reason).
    pub spill_error: Option<String>,
}

/// A background process handle.
pub trait ShellProcess: Send + Sync {
    /// Where the process is in its lifecycle.
    fn status(&self) -> ProcessStatus;
    /// The exit code once the process exited; `None` while running or when a signal ended it.
    fn exit_code(&self) -> Option<i32>;
    /// The name of the signal that ended the process (`SIGTERM`, …), if one did.
    fn signal(&self) -> Option<String>;
    /// Resolves when the process has settled; never fails.
    fn done(&self) -> BoxFuture<'static, ()>;
    /// Sandbox facts, stamped once a confined process settles (before `done` resolves).
    fn sandbox(&self) -> Option<ShellSandboxInfo>;
    /// Consuming incremental read; never re-delivers; valid after exit.
    fn read_output(&self) -> ShellProcessRead;
    /// Kills the process group; `true` if it was running. Idempotent.
    fn kill(&self) -> bool;
    /// The process's identity for a crash-safe job journal: pid, process group and start
    /// time (`/proc/<pid>/stat` field 22, when it could be read). `None` (the default) when
    /// the process never started or the executor does not say.
    fn identity(&self) -> Option<ProcessIdentity> {
        None
    }
    /// Calls `observer` with the path of each spill file the process opens (at once for one
    /// already open). The default never calls it.
    fn watch_spills(&self, observer: SpillObserver) {
        let _ = observer;
    }
    /// Writes to the process's stdin (started with `keep_stdin`); the error says why not.
    fn write_input(&self, _bytes: &[u8]) -> Result<(), String> {
        Err("this job takes no input".to_owned())
    }
    /// Closes the process's stdin (it reads end of file); on a terminal, types `Ctrl-D`
    /// instead. `true` if it was open.
    fn close_input(&self) -> bool {
        false
    }
    /// Whether the process runs on a terminal (started with `tty`): its input is typed, so
    /// `Enter` is `\r` and control keys are control characters.
    fn terminal(&self) -> bool {
        false
    }
    /// `Ctrl-C`: types it on the process's controlling terminal, else sends the process group
    /// `SIGINT`; `true` if delivered.
    fn interrupt(&self) -> bool {
        false
    }
    /// Whether the process is blocked right now reading the stdin its owner writes.
    fn waiting_for_input(&self) -> bool {
        false
    }
    /// The latest line of output, when known.
    fn latest_line(&self) -> Option<String> {
        None
    }
    /// Whether the kernel's out-of-memory killer struck the process (known once it settled,
    /// and only by executors with a memory limit).
    fn out_of_memory(&self) -> bool {
        false
    }
}

/// Told the path of each spill file a background process opens.
pub type SpillObserver = Arc<dyn Fn(PathBuf) + Send + Sync>;

/// Who a background process is, for a crash-safe job journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// The process id.
    pub pid: u32,
    /// Its process group.
    pub pgid: u32,
    /// Its start time in clock ticks after boot (`/proc/<pid>/stat` field 22).
    pub start_time: Option<u64>,
}

/// Why an executor could not produce a result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShellError {
    /// A request value `resolve` refuses (its exact message, pinned by tests).
    #[error("{0}")]
    Invalid(String),
    /// The OS refused to start the command (`spawn bash ENOENT`-like message).
    #[error("{message}")]
    Spawn {
        /// The OS error as a message (`spawn bash ENOENT`).
        message: String,
        /// The errno name (`ENOENT`, `EACCES`, …) when known.
        code: Option<String>,
        /// The program whose exec failed.
        program: String,
    },
    /// The caller's signal had fired before anything was spawned.
    #[error("aborted before spawn: {0}")]
    AbortedBeforeSpawn(String),
    /// No sandbox backend can confine the command, so it did not run.
    #[error(transparent)]
    SandboxUnavailable(#[from] SandboxUnavailableError),
    /// Anything else a provider reports.
    #[error("{0}")]
    Other(String),
}

impl ShellError {
    /// The `{name, code}` carried to a tool failure, when the error is a coded harness error.
    pub fn info(&self) -> Option<ErrorInfo> {
        match self {
            ShellError::SandboxUnavailable(e) => Some(e.info()),
            _ => None,
        }
    }
}

impl From<ShellError> for ToolError {
    fn from(e: ShellError) -> Self {
        ToolError { message: e.to_string(), info: e.info() }
    }
}

/// A bash-dialect executor. Exactly one provides the `shell` service per composition.
#[async_trait::async_trait]
pub trait ShellExecutor: Send + Sync {
    /// The default mode a sandboxing executor confines under; `None` when it does not confine.
    fn sandbox_mode(&self) -> Option<SandboxMode>;
    /// Fills defaults and caps; may refuse invalid values.
    fn resolve(&self, request: ShellExecRequest) -> Result<ShellExecSpec, ShellError>;
    /// Foreground run. Fails only for infrastructure failures; exits, timeouts and abort kills
    /// resolve.
    async fn run(&self, spec: ShellExecSpec) -> Result<ShellRunResult, ShellError>;
    /// Background start: returns immediately; no timeout applies.
    fn start(&self, spec: ShellExecSpec) -> Result<Arc<dyn ShellProcess>, ShellError>;
    /// Whether results may carry [`ShellRunResult::out_of_memory`] (an executor that runs
    /// commands under a memory limit it can observe); the tool's output schema says so only
    /// then. Default: no.
    fn reports_out_of_memory(&self) -> bool {
        false
    }
    /// Whether results may carry [`ShellRunResult::usage`]; the tool's output schema says so
    /// only then. Default: no.
    fn reports_usage(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_keeps_the_number_it_reports() {
        for (millis, duration) in [
            (120_000.0, Duration::from_secs(120)),
            (1.5, Duration::from_micros(1500)),
            (0.1, Duration::from_micros(100)),
            (1e-7, Duration::from_nanos(1)),
            (0.1234567891, Duration::from_nanos(123_457)),
            (1e300, Duration::MAX),
            (0.0, Duration::ZERO),
            (-1.0, Duration::ZERO),
        ] {
            let timeout = ShellTimeout::from_millis(millis);
            assert_eq!((timeout.millis(), timeout.duration()), (millis, duration), "{millis}");
        }
        assert!(ShellTimeout::from_millis(f64::NAN).duration().is_zero());
    }

    #[test]
    fn a_timeout_serializes_as_its_javascript_number() {
        let text = |millis: f64| serde_json::to_string(&ShellTimeout::from_millis(millis)).ok();
        assert_eq!(text(10_000.0).as_deref(), Some("10000"));
        assert_eq!(text(2.5).as_deref(), Some("2.5"));
        assert_eq!(text(1e-7).as_deref(), Some("1e-7"));
    }
}
