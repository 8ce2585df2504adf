//! The remote executor: the `shell` seam over a [`RemoteTransport`].

use std::sync::Arc;

use dsh_bash_local::{BASH_TIMEOUT, ConfigError, LocalBashConfig, byte_cap, memory_cap, shell_spawn_error};
use dsh_core::Deadline;
use dsh_sandbox::SandboxMode;
use dsh_shell::{ShellError, ShellExecRequest, ShellExecSpec, ShellExecutor, ShellProcess, ShellRunResult};
use dsh_subprocess::{CaptureLimits, OutputCollector, SubprocessService};

use crate::call::{Call, CallEnd, collected};
use crate::process::RemoteShellProcess;
use crate::spill::{CallSpills, FarSpills};
use crate::transport::RemoteTransport;

/// Runs `bash -c <command>` on the far side of a [`RemoteTransport`], with the local
/// executor's request rules (defaults, caps, messages: [`dsh_bash_local::resolve`]) and its
/// results: output is collected on the harness's side by the [`SubprocessService`]'s
/// collectors (tail-bounded, spilled to its spill directory, redacted), a spilled stream is
/// copied into the session's own directory on the far side and results name that copy
/// (where the session's next command can read it), timeouts and aborts
/// end every process of the call (`TERM`, the grace, `KILL`), and exit facts tell an exit
/// from a signal.
///
/// How a call is contained on the far side: each command's processes carry a per-call
/// marker in their environment (`DSH_CALL`); when the command ends, or on a timeout or
/// abort, every process carrying it is killed, which also reaches `setsid` and
/// double-forked escapes (processes with `DSH_DETACH=1` are spared, as locally). A process
/// that scrubs the marker from its own environment escapes the per-call kill, not the
/// transport's teardown at the end of the session.
pub struct RemoteExecutor {
    transport: Arc<dyn RemoteTransport>,
    config: LocalBashConfig,
    service: Arc<SubprocessService>,
    /// The sessions' spill directories on the far side.
    far: Arc<FarSpills>,
}

/// A foreground run whose future is dropped (its caller went away) must not leave the
/// command running on the far side: the guard ends it unless the run finished.
struct EndUnlessFinished {
    call: Arc<Call>,
    grace_ms: u64,
    finished: bool,
}

impl Drop for EndUnlessFinished {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Err(e) = self.call.signal("TERM", self.grace_ms) {
            tracing::warn!(error = %e, "could not end an abandoned remote call");
        }
    }
}

impl RemoteExecutor {
    /// Validates `config` (the local executor's keys and messages) and builds the executor.
    /// `service` provides the spill directory and the redactor of collected output; it
    /// starts nothing.
    pub fn new(
        transport: Arc<dyn RemoteTransport>,
        config: LocalBashConfig,
        service: Arc<SubprocessService>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let far = FarSpills::new(Arc::clone(&transport));
        Ok(Self { transport, config, service, far })
    }

    /// Removes a session's spill directory on the far side when the session's agent (in
    /// `ctx`'s agents registry) ends.
    pub fn tie_to(&self, ctx: dsh_core::WeakContext) {
        self.far.tie_to(ctx);
    }

    /// Removes every session's spill directory on the far side (at the harness's end,
    /// before the transport shuts down). Best effort: a failure is logged.
    pub async fn release(&self) {
        self.far.remove_all().await;
    }

    /// The far side's copies of the spill files of a call for `spec`.
    pub(crate) fn call_spills(&self, spec: &ShellExecSpec) -> Arc<CallSpills> {
        CallSpills::new(&self.far, session_of(spec))
    }

    /// The transport commands run through.
    pub fn transport(&self) -> &Arc<dyn RemoteTransport> {
        &self.transport
    }

    /// The validated configuration.
    pub fn config(&self) -> &LocalBashConfig {
        &self.config
    }

    pub(crate) fn grace_ms(&self) -> u64 {
        byte_cap(self.config.grace_ms).max(1)
    }

    /// The grace as the mechanics take it.
    pub(crate) fn grace(&self) -> std::time::Duration {
        dsh_bash_local::grace_duration(self.config.grace_ms)
    }

    pub(crate) fn collectors(&self, stdout_cap: usize) -> (Arc<OutputCollector>, Arc<OutputCollector>) {
        let spill = Some(byte_cap(self.config.max_spill_bytes));
        let stderr_cap = memory_cap(self.config.max_output_bytes);
        (
            Arc::new(self.service.collector(CaptureLimits::new("stdout", stdout_cap, spill))),
            Arc::new(self.service.collector(CaptureLimits::new("stderr", stderr_cap, spill))),
        )
    }

    /// A spec this executor cannot honour.
    fn refuse(&self, spec: &ShellExecSpec) -> Result<(), ShellError> {
        if spec.shared_file.is_some() {
            return Err(ShellError::Invalid(format!(
                "the {} executor cannot carry shell state between calls (persist)",
                self.transport.kind()
            )));
        }
        if spec.tty {
            return Err(ShellError::Invalid(format!(
                "the {} executor runs commands on pipes, not on a terminal (tty)",
                self.transport.kind()
            )));
        }
        Ok(())
    }

    fn unavailable(&self, error: impl std::fmt::Display) -> ShellError {
        ShellError::Other(format!("{} executor: {error}", self.transport.kind()))
    }
}

/// The session a call runs for (`DSH_SESSION_ID`).
fn session_of(spec: &ShellExecSpec) -> Option<String> {
    spec.dsh_env.as_ref().and_then(|env| env.get(dsh_shell::DSH_SESSION_ID)).cloned()
}

/// Why a call was lost, followed by what it printed before (its streams' tails), so output
/// received before the far side went away is not lost with it.
fn lost_with_output(message: &str, call: &Call) -> String {
    let (stdout, stderr) = (collected(&call.stdout), collected(&call.stderr));
    if stdout.text.is_empty() && stderr.text.is_empty() {
        return message.to_owned();
    }
    let mut said = format!("{message}; its output until then:\n{}", stdout.text);
    if !stderr.text.is_empty() {
        if !said.ends_with('\n') {
            said.push('\n');
        }
        said.push_str("[stderr]\n");
        said.push_str(&stderr.text);
    }
    said.trim_end_matches('\n').to_owned()
}

#[async_trait::async_trait]
impl ShellExecutor for RemoteExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        None
    }

    fn resolve(&self, request: ShellExecRequest) -> Result<ShellExecSpec, ShellError> {
        dsh_bash_local::resolve(&self.config, request)
    }

    async fn run(&self, spec: ShellExecSpec) -> Result<ShellRunResult, ShellError> {
        self.refuse(&spec)?;
        let deadline = Deadline::new(spec.signal.as_ref(), spec.timeout.millis(), BASH_TIMEOUT)
            .map_err(|e| ShellError::Other(e.to_string()))?;
        if let Some(reason) = deadline.signal().reason() {
            return Err(ShellError::AbortedBeforeSpawn(reason.message.clone()));
        }
        let streams = self.collectors(spec.stdout_max_bytes);
        let spills = self.call_spills(&spec);
        let call = Call::start(&self.transport, &spec, streams, None, self.grace(), spills)
            .await
            .map_err(|e| self.unavailable(e))?;
        let mut guard =
            EndUnlessFinished { call: Arc::clone(&call), grace_ms: self.grace_ms(), finished: false };
        let _probe = spec.output_probe.as_ref().map(|slot| {
            let observed = Arc::clone(&call);
            slot.install(Arc::new(move || observed.latest_line()))
        });
        let end = deadline
            .watch(async {
                tokio::select! {
                    end = call.ended() => end,
                    () = deadline.signal().aborted() => {
                        if let Err(e) = call.signal("TERM", self.grace_ms()) {
                            tracing::warn!(error = %e, "could not end a remote call");
                        }
                        call.ended().await
                    }
                }
            })
            .await;
        guard.finished = true;
        let (timed_out, aborted) = (deadline.timed_out(), deadline.aborted());
        drop(deadline);
        match end {
            CallEnd::Ended { exit_code, signal, out_of_memory } => Ok(ShellRunResult {
                exit_code,
                signal,
                timed_out,
                aborted,
                timeout: spec.timeout,
                stdout: call.collected(&call.stdout),
                stderr: call.collected(&call.stderr),
                sandbox: None,
                network: None,
                out_of_memory,
                usage: None,
            }),
            CallEnd::Spawn(error) => Err(shell_spawn_error(&error)),
            CallEnd::Lost(message) => Err(self.unavailable(lost_with_output(&message, &call))),
        }
    }

    fn start(&self, spec: ShellExecSpec) -> Result<Arc<dyn ShellProcess>, ShellError> {
        self.refuse(&spec)?;
        Ok(RemoteShellProcess::start(self, spec))
    }

    fn reports_out_of_memory(&self) -> bool {
        true
    }
}
