//! The executor trait and the values that cross it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::tools::OutputProbeSlot;
use dsh_core::{AbortSignal, ErrorInfo, ToolError};
use dsh_sandbox::{SandboxEnforcement, SandboxExecutionPolicy, SandboxMode, SandboxUnavailableError};
use futures::future::BoxFuture;
use serde::Serialize;

/// The service key name an executor registers under.
pub const SHELL_SERVICE: &str = "shell";

/// The typed service key of the mounted executor.
pub const SHELL: dsh_core::ServiceKey<Arc<dyn ShellExecutor>> = dsh_core::ServiceKey::new(SHELL_SERVICE);

/// A caller's request; everything but `command` is optional and filled by `resolve`.
#[derive(Clone, Debug, Default)]
pub struct ShellExecRequest {
    pub command: String,
    pub workdir: Option<PathBuf>,
    /// Foreground timeout hint (ms); validated positive-finite and capped by `resolve`.
    pub timeout_ms: Option<f64>,
    /// Trusted-caller stdout capture budget (bytes); never exposed to a model.
    pub stdout_max_bytes: Option<f64>,
    pub signal: Option<AbortSignal>,
    /// Bytes written to stdin, then closed; absent → stdin is `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Ordinary extra environment, merged after the credential scrub.
    pub env: Option<BTreeMap<String, String>>,
    /// Managed `DSH_*` snapshot, merged last (wins over `env`).
    pub dsh_env: Option<BTreeMap<String, String>>,
    pub sandbox_policy: Option<SandboxExecutionPolicy>,
    /// Where a foreground run installs a probe of its latest output line once the process has
    /// started (removed when the run ends); `None` when nobody observes. Background starts
    /// ignore it.
    pub output_probe: Option<OutputProbeSlot>,
}

/// A resolved request: defaults and caps applied.
#[derive(Clone, Debug)]
pub struct ShellExecSpec {
    pub command: String,
    pub workdir: PathBuf,
    pub timeout_ms: f64,
    pub stdout_max_bytes: f64,
    pub signal: Option<AbortSignal>,
    pub stdin: Option<Vec<u8>>,
    pub env: Option<BTreeMap<String, String>>,
    pub dsh_env: Option<BTreeMap<String, String>>,
    pub sandbox_policy: Option<SandboxExecutionPolicy>,
    /// See [`ShellExecRequest::output_probe`]; carried verbatim by `resolve`.
    pub output_probe: Option<OutputProbeSlot>,
}

/// One collected stream: the (tail of the) text, whether bytes were dropped from memory, and
/// the complete spill file when one is intact.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CollectedOutput {
    pub text: String,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_path: Option<PathBuf>,
}

/// Sandbox facts of one run or process, present iff a sandboxing executor handled it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellSandboxInfo {
    pub mode: SandboxMode,
    pub denied: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<SandboxEnforcement>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner_failed: Option<bool>,
}

/// Exit facts of a foreground run.
///
/// Invariants: `timed_out` and `aborted` are mutually exclusive and record the **first** cause
/// that cut the command short; `exit_code` is `None` exactly when `signal` is `Some`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellRunResult {
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub timed_out: bool,
    pub aborted: bool,
    #[serde(serialize_with = "dsh_core::json::serialize_js_f64")]
    pub timeout_ms: f64,
    pub stdout: CollectedOutput,
    pub stderr: CollectedOutput,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<ShellSandboxInfo>,
}

/// Lifecycle of a background process: `Running` then exactly one terminal state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessStatus {
    Running,
    Completed,
    Killed,
}

/// One consuming read of a background process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShellProcessRead {
    /// stdout since the last read, then `[stderr]\n` + stderr since the last read.
    pub delta: String,
    /// Some unread bytes were dropped from memory before this read.
    pub lossy: bool,
    pub stdout_spill_path: Option<PathBuf>,
    pub stderr_spill_path: Option<PathBuf>,
}

/// A background process handle.
pub trait ShellProcess: Send + Sync {
    fn status(&self) -> ProcessStatus;
    fn exit_code(&self) -> Option<i32>;
    fn signal(&self) -> Option<String>;
    /// Resolves when the process has settled; never fails.
    fn done(&self) -> BoxFuture<'static, ()>;
    /// Sandbox facts, stamped once a confined process settles (before `done` resolves).
    fn sandbox(&self) -> Option<ShellSandboxInfo>;
    /// Consuming incremental read; never re-delivers; valid after exit.
    fn read_output(&self) -> ShellProcessRead;
    /// Kills the process group; `true` if it was running. Idempotent.
    fn kill(&self) -> bool;
    /// The latest line of output (stdout or stderr, whichever was written last), for
    /// progress displays; non-consuming, so reads are unaffected. `None` when unknown (the
    /// default for providers that cannot peek).
    fn latest_output_line(&self) -> Option<String> {
        None
    }
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
        message: String,
        /// The errno name (`ENOENT`, `EACCES`, …) when known.
        code: Option<String>,
        /// The program whose exec failed.
        program: String,
    },
    /// The caller's signal had fired before anything was spawned.
    #[error("aborted before spawn: {0}")]
    AbortedBeforeSpawn(String),
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
}
