//! `bash-sandbox`: provides the sandboxing executor (`shell`).

use std::sync::Arc;

use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::{ConfigError, Handles, Plugin, PluginError, PluginScope};
use dsh_sandbox::services::{Sandbox, SandboxPolicy};
use dsh_shell::{SHELL, ShellExecutor};
use dsh_subprocess::plugin::Subprocess;

use crate::executor::SandboxBashExecutor;

/// Loads the sandboxing executor; same config as the local executor.
pub struct BashSandboxPlugin;

impl Plugin for BashSandboxPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-bash-sandbox";
    const SHORT_NAME: &'static str = "bash-sandbox";
    type Deps = (Subprocess, Sandbox, SandboxPolicy);
    type Config = LocalBashConfig;
    type Validated = LocalBashConfig;

    fn validate(config: LocalBashConfig) -> Result<LocalBashConfig, ConfigError> {
        config.validate()?;
        Ok(config)
    }

    fn apply(
        scope: &mut PluginScope,
        (service, provider, policy): Handles<Self>,
        config: &LocalBashConfig,
    ) -> Result<(), PluginError> {
        let local = LocalBashExecutor::new(config.clone(), service)?;
        let executor: Arc<dyn ShellExecutor> = Arc::new(SandboxBashExecutor::new(local, provider, policy));
        scope.provide(SHELL, executor)
    }
}
