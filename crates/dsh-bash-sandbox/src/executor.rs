//! Foreground and background runs under a sandbox provider (contract §7.5).

use std::path::Path;
use std::sync::Arc;

use dsh_bash_local::{ExecError, LocalBashExecutor, SettleFacts, bash_argv, shell_spawn_error};
use dsh_sandbox::{
    ConfinedCommand, SandboxExecutionPolicy, SandboxMode, SandboxPolicyService, SandboxProvider,
    SandboxUnavailableError, SpawnFailure, SpawnStage, classify_runner_failure, is_runner_spawn_failure,
    matches_signature,
};
use dsh_shell::{
    ShellError, ShellExecRequest, ShellExecSpec, ShellExecutor, ShellProcess, ShellRunResult,
    ShellSandboxInfo,
};
use dsh_subprocess::OsSpawnError;

/// The local executor wrapped by a sandbox provider.
pub struct SandboxBashExecutor {
    local: LocalBashExecutor,
    provider: Arc<dyn SandboxProvider>,
    policy: Arc<dyn SandboxPolicyService>,
}

impl SandboxBashExecutor {
    pub fn new(
        local: LocalBashExecutor,
        provider: Arc<dyn SandboxProvider>,
        policy: Arc<dyn SandboxPolicyService>,
    ) -> Self {
        Self { local, provider, policy }
    }

    /// The policy a resolved spec runs under (resolve always fills it).
    fn policy_of(&self, spec: &ShellExecSpec) -> SandboxExecutionPolicy {
        spec.sandbox_policy.clone().unwrap_or_else(|| self.policy.resolve(None, None).policy)
    }
}

/// The runner-failure detail of a spawn failure, when the runner itself failed (§7.7): the
/// in-child confinement refused, or the exec of the known runner program failed with
/// `ENOENT`/`EACCES` while the workdir is usable. A failing `chdir` is never the runner.
fn runner_spawn_failure(confined: &ConfinedCommand, error: &OsSpawnError, workdir: &Path) -> Option<String> {
    let stage = match error.stage {
        dsh_subprocess::SpawnStage::Cwd => SpawnStage::Chdir,
        dsh_subprocess::SpawnStage::PreExec => SpawnStage::Confinement,
        dsh_subprocess::SpawnStage::Exec => SpawnStage::Exec,
    };
    let errno = error.code();
    let failure = SpawnFailure { errno: &errno, program: Some(&error.program), stage };
    if !is_runner_spawn_failure(&failure, confined.runner.as_deref(), workdir) {
        return None;
    }
    match stage {
        SpawnStage::Confinement => Some(confined.confinement_failure().unwrap_or_else(|| error.to_string())),
        _ => Some(error.to_string()),
    }
}

/// Sandbox facts of a settled confined process (per process, never "latest wrap").
fn settle_facts(
    confined: &ConfinedCommand,
    mode: SandboxMode,
    workdir: &Path,
    facts: &SettleFacts,
) -> ShellSandboxInfo {
    let runner_failed = match (&facts.spawn_error, facts.spawn_failed) {
        (Some(error), true) => runner_spawn_failure(confined, error, workdir).is_some(),
        (_, true) => false,
        (_, false) => {
            classify_runner_failure(facts.exit_code, &facts.stderr_tail, &confined.runner_failure_rules)
                .is_some()
        }
    };
    let denied = !runner_failed
        && !facts.spawn_failed
        && matches_signature(facts.exit_code, &facts.stderr_tail, &confined.denial_signatures);
    ShellSandboxInfo {
        mode,
        denied,
        enforcement: Some(confined.enforcement),
        runner_failed: runner_failed.then_some(true),
    }
}

#[async_trait::async_trait]
impl ShellExecutor for SandboxBashExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        Some(self.policy.default_mode())
    }

    fn resolve(&self, request: ShellExecRequest) -> Result<ShellExecSpec, ShellError> {
        let explicit = request.sandbox_policy.clone();
        let mut spec = self.local.resolve(request)?;
        spec.sandbox_policy = Some(explicit.unwrap_or_else(|| self.policy.resolve(None, None).policy));
        Ok(spec)
    }

    async fn run(&self, spec: ShellExecSpec) -> Result<ShellRunResult, ShellError> {
        let policy = self.policy_of(&spec);
        let mode = policy.mode;
        if mode == SandboxMode::DangerFullAccess {
            let mut result = self.local.run(spec).await?;
            result.sandbox =
                Some(ShellSandboxInfo { mode, denied: false, enforcement: None, runner_failed: None });
            return Ok(result);
        }
        let confined = self.provider.confine(&bash_argv(&spec.command), &policy)?;
        let outcome = self.local.run_argv(&spec, confined.argv.clone(), confined.pre_exec_hook()).await;
        let mut result = match outcome {
            Ok(result) => result,
            Err(ExecError::Spawn(error)) => {
                if let Some(signal) = spec.signal.as_ref().filter(|s| s.is_aborted()) {
                    let reason =
                        signal.reason().map(|r| r.message.clone()).unwrap_or_else(|| "aborted".into());
                    return Err(ShellError::AbortedBeforeSpawn(reason));
                }
                return Err(match runner_spawn_failure(&confined, &error, &spec.workdir) {
                    Some(detail) => SandboxUnavailableError::with_detail(mode, detail).into(),
                    None => shell_spawn_error(&error),
                });
            }
            Err(ExecError::Shell(error)) => return Err(error),
        };
        if let Some(line) =
            classify_runner_failure(result.exit_code, &result.stderr.text, &confined.runner_failure_rules)
        {
            return Err(SandboxUnavailableError::with_detail(mode, line).into());
        }
        let denied = matches_signature(result.exit_code, &result.stderr.text, &confined.denial_signatures);
        result.sandbox = Some(ShellSandboxInfo {
            mode,
            denied,
            enforcement: Some(confined.enforcement),
            runner_failed: None,
        });
        Ok(result)
    }

    fn start(&self, spec: ShellExecSpec) -> Result<Arc<dyn ShellProcess>, ShellError> {
        let policy = self.policy_of(&spec);
        let mode = policy.mode;
        if mode == SandboxMode::DangerFullAccess {
            return self.local.start(spec);
        }
        let confined = self.provider.confine(&bash_argv(&spec.command), &policy)?;
        let workdir = spec.workdir.clone();
        let argv = confined.argv.clone();
        let hook = confined.pre_exec_hook();
        let on_settle: dsh_bash_local::SettleHook =
            Box::new(move |facts: &SettleFacts| Some(settle_facts(&confined, mode, &workdir, facts)));
        let process = self.local.start_argv(&spec, argv, hook, Some(on_settle))?;
        Ok(process)
    }
}
