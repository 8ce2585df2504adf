//! The local executor: foreground runs with a fused deadline, and background starts.

use std::sync::Arc;

use dsh_core::Deadline;
use dsh_sandbox::SandboxMode;
use dsh_shell::{
    CollectedOutput, ShellError, ShellExecRequest, ShellExecSpec, ShellExecutor, ShellProcess, ShellRunResult,
};
use dsh_subprocess::{CollectedStream, PreExecHook, ProcessHandle, SpawnError, SubprocessService};

use crate::config::{ConfigError, LocalBashConfig, memory_cap};
use crate::error::{ExecError, spawn_failure};
use crate::mapping::{bash_argv, spawn_spec};
use crate::process::{LocalShellProcess, SettleHook};

/// The abort code of the executor's own timeout.
pub const BASH_TIMEOUT: &str = "BASH_TIMEOUT";

/// Runs `bash -c <command>` through a shared [`SubprocessService`].
///
/// Background processes belong to the service, not to the executor: dropping the executor
/// leaves them running; disposing the service ends them.
pub struct LocalBashExecutor {
    config: LocalBashConfig,
    service: Arc<SubprocessService>,
}

fn collected(stream: CollectedStream) -> CollectedOutput {
    CollectedOutput {
        text: stream.text,
        truncated: stream.truncated,
        spill_path: stream.spill_path,
        spill_error: stream.spill_error,
    }
}

/// How long a foreground start waits for processes to free up (a previous call's fork bomb
/// still being torn down while the user's or the harness's process limit is reached).
const SPAWN_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(10);
const SPAWN_RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// Spawns `spawn`; while the start fails with `EAGAIN` (no process can be made right now),
/// tries again for a while, unless the call is aborted meanwhile.
async fn spawn_when_processes_free(
    service: &SubprocessService,
    spawn: dsh_subprocess::SpawnSpec,
    signal: &dsh_core::AbortSignal,
) -> Result<ProcessHandle, SpawnError> {
    let started = tokio::time::Instant::now();
    loop {
        match service.spawn(spawn.clone()) {
            Err(SpawnError::Os(error))
                if error.errno == dsh_subprocess::Errno::EAGAIN
                    && started.elapsed() < SPAWN_RETRY_FOR
                    && !signal.is_aborted() =>
            {
                tokio::time::sleep(SPAWN_RETRY_EVERY).await;
            }
            other => return other,
        }
    }
}

/// What the subprocess layer measured, as the seam reports it.
fn shell_usage(usage: dsh_subprocess::ResourceUsage) -> dsh_shell::ShellUsage {
    dsh_shell::ShellUsage {
        cpu_time_ms: usage.cpu_time.map(|t| t.as_millis() as u64),
        peak_memory_bytes: usage.peak_memory_bytes,
        peak_processes: usage.peak_processes,
        process_limit_reached: usage.process_limit_reached,
        memory_limit_reached: usage.memory_limit_reached,
        limits: usage.enforcement.map(|e| e.as_str().to_owned()),
    }
}

/// What a result reports of `usage`: all of it when the configuration asks (`reportUsage`),
/// else only a limit the call reached (with how limits are enforced), so a call that reaches
/// none keeps the contract's canonical value.
fn reported_usage(usage: dsh_shell::ShellUsage, all: bool) -> Option<dsh_shell::ShellUsage> {
    if all {
        return Some(usage);
    }
    (usage.process_limit_reached.is_some() || usage.memory_limit_reached.is_some()).then(|| {
        dsh_shell::ShellUsage {
            process_limit_reached: usage.process_limit_reached,
            memory_limit_reached: usage.memory_limit_reached,
            limits: usage.limits,
            ..Default::default()
        }
    })
}

/// A foreground run whose future is dropped (its caller went away) must not leave the
/// command running: the guard terminates it unless it already settled.
struct TerminateUnlessSettled<'a>(&'a ProcessHandle);

impl Drop for TerminateUnlessSettled<'_> {
    fn drop(&mut self) {
        if self.0.outcome().is_none() {
            self.0.terminate();
        }
    }
}

impl LocalBashExecutor {
    /// Validates `config` (its messages are exact and pinned by tests) and builds the executor.
    pub fn new(config: LocalBashConfig, service: Arc<SubprocessService>) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self { config, service })
    }

    /// The validated configuration the executor runs with.
    pub fn config(&self) -> &LocalBashConfig {
        &self.config
    }

    /// The subprocess service that starts the executor's children.
    pub fn service(&self) -> &Arc<SubprocessService> {
        &self.service
    }

    /// A foreground run of `argv` (instead of `bash -c`) with the local semantics: one fused
    /// deadline (caller signal or `timeoutMs`, first cause wins, code `BASH_TIMEOUT`), exit
    /// facts, and both collected streams. `pre_exec` runs in the child before exec.
    ///
    /// When the spec carries an output-probe slot, a probe of the process's latest output
    /// line is installed there from the spawn until the run ends.
    ///
    /// Spawn failures keep their OS facts ([`ExecError::Spawn`]); a caller signal that fired
    /// before the spawn is `aborted before spawn: <reason>`.
    pub async fn run_argv(
        &self,
        spec: &ShellExecSpec,
        argv: Vec<String>,
        pre_exec: Option<PreExecHook>,
    ) -> Result<ShellRunResult, ExecError> {
        // The deadline takes the JavaScript number: its range check and its reason
        // (`timed out after <ms>ms`) are stated in those terms.
        let deadline = Deadline::new(spec.signal.as_ref(), spec.timeout.millis(), BASH_TIMEOUT)
            .map_err(|e| ShellError::Other(e.to_string()))?;
        let mut spawn = spawn_spec(&self.config, spec, argv, spec.stdout_max_bytes, pre_exec);
        spawn.cancel = Some(deadline.signal().token().clone());
        let handle = spawn_when_processes_free(&self.service, spawn, deadline.signal())
            .await
            .map_err(|e| spawn_failure(e, Some(deadline.signal())))?;
        let _cancel = TerminateUnlessSettled(&handle);
        // Observers see the running command's latest output line until the run ends.
        let _probe = spec.output_probe.as_ref().map(|slot| {
            let observed = handle.clone();
            slot.install(Arc::new(move || observed.latest_output_line()))
        });
        // The exit is looked at before the timer counts: a command that ended before its
        // deadline is never timed out, however late this task runs.
        let outcome = deadline.watch_ended(handle.wait(), || handle.leader_exited()).await;
        let (timed_out, aborted) = (deadline.timed_out(), deadline.aborted());
        let usage = handle.usage();
        drop(deadline);
        Ok(ShellRunResult {
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            timed_out,
            aborted,
            timeout: spec.timeout,
            stdout: collected(handle.stdout().collected()),
            stderr: collected(handle.stderr().collected()),
            sandbox: None,
            network: None,
            out_of_memory: usage.as_ref().is_some_and(|u| u.memory_limit_reached.is_some()),
            usage: usage.map(shell_usage).and_then(|u| reported_usage(u, self.config.report_usage)),
        })
    }

    /// A background start of `argv`. The spec's signal (if any) terminates it.
    ///
    /// An OS spawn failure does not fail the start: the process comes back already settled
    /// as `killed`, its error readable once as `spawn failed: Error: spawn <program> <ERRNO>`,
    /// and `on_settle` sees `spawn_failed` with the error. `on_settle` always runs before
    /// `done` resolves; what it returns is stamped as the process's sandbox facts.
    pub fn start_argv(
        &self,
        spec: &ShellExecSpec,
        argv: Vec<String>,
        pre_exec: Option<PreExecHook>,
        on_settle: Option<SettleHook>,
    ) -> Result<Arc<LocalShellProcess>, ShellError> {
        let mut spawn =
            spawn_spec(&self.config, spec, argv, memory_cap(self.config.max_output_bytes), pre_exec);
        spawn.cancel = spec.signal.as_ref().map(|signal| signal.token().clone());
        match self.service.spawn(spawn) {
            Ok(handle) => Ok(LocalShellProcess::running(handle, spec.signal.clone(), on_settle)),
            Err(SpawnError::Os(error)) => Ok(LocalShellProcess::spawn_failed(error, on_settle)),
            Err(other) => Err(spawn_failure(other, spec.signal.as_ref()).into()),
        }
    }
}

#[async_trait::async_trait]
impl ShellExecutor for LocalBashExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        None
    }

    fn reports_out_of_memory(&self) -> bool {
        true
    }

    fn reports_usage(&self) -> bool {
        true
    }

    fn resolve(&self, request: ShellExecRequest) -> Result<ShellExecSpec, ShellError> {
        crate::resolve::resolve(&self.config, request)
    }

    async fn run(&self, spec: ShellExecSpec) -> Result<ShellRunResult, ShellError> {
        let argv = bash_argv(&spec.command);
        Ok(self.run_argv(&spec, argv, None).await?)
    }

    fn start(&self, spec: ShellExecSpec) -> Result<Arc<dyn ShellProcess>, ShellError> {
        let argv = bash_argv(&spec.command);
        Ok(self.start_argv(&spec, argv, None, None)?)
    }
}
