//! `bash-local`: provides the local `bash -c` executor over the subprocess service.

use std::sync::Arc;

use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::{Plugin, PluginError, PluginScope};
use dsh_shell::{SHELL, ShellExecutor};
use dsh_subprocess::SUBPROCESS;

/// Loads the local executor (`shell`).
pub struct BashLocalPlugin;

impl Plugin for BashLocalPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-bash-local";
    const SHORT_NAME: &'static str = "bash-local";
    const INJECT: &'static [&'static str] = &["subprocess"];
    type Config = LocalBashConfig;

    fn validate(config: &LocalBashConfig) -> Result<(), String> {
        config.validate().map_err(|e| e.to_string())
    }

    fn apply(scope: &mut PluginScope, config: LocalBashConfig) -> Result<(), PluginError> {
        let service = scope
            .get(SUBPROCESS)
            .ok_or_else(|| PluginError::Apply("bash-local: the subprocess service is missing".to_owned()))?;
        let executor =
            LocalBashExecutor::new(config, service).map_err(|e| PluginError::Config(e.to_string()))?;
        let executor: Arc<dyn ShellExecutor> = Arc::new(executor);
        scope.provide(SHELL, executor)
    }
}
