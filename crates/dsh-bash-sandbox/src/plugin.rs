//! `bash-sandbox`: provides the sandboxing executor (`shell`).

use std::sync::Arc;

use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::{Plugin, PluginError, PluginScope};
use dsh_sandbox::{SANDBOX, SANDBOX_POLICY};
use dsh_shell::{SHELL, ShellExecutor};
use dsh_subprocess::SUBPROCESS;

use crate::executor::SandboxBashExecutor;

/// Loads the sandboxing executor; same config as the local executor.
pub struct BashSandboxPlugin;

impl Plugin for BashSandboxPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-bash-sandbox";
    const SHORT_NAME: &'static str = "bash-sandbox";
    const INJECT: &'static [&'static str] = &["subprocess", "sandbox", "sandboxPolicy"];
    type Config = LocalBashConfig;

    fn validate(config: &LocalBashConfig) -> Result<(), String> {
        config.validate().map_err(|e| e.to_string())
    }

    fn apply(scope: &mut PluginScope, config: LocalBashConfig) -> Result<(), PluginError> {
        let missing = |what: &str| PluginError::Apply(format!("bash-sandbox: the {what} service is missing"));
        let service = scope.get(SUBPROCESS).ok_or_else(|| missing("subprocess"))?;
        let provider = scope.get(SANDBOX).ok_or_else(|| missing("sandbox"))?;
        let policy = scope.get(SANDBOX_POLICY).ok_or_else(|| missing("sandboxPolicy"))?;
        let local =
            LocalBashExecutor::new(config, service).map_err(|e| PluginError::Config(e.to_string()))?;
        let executor: Arc<dyn ShellExecutor> = Arc::new(SandboxBashExecutor::new(local, provider, policy));
        scope.provide(SHELL, executor)
    }
}
