//! `bash-local`: the plugin providing the local `bash -c` executor (`shell`) over the
//! subprocess service.

use std::sync::Arc;

use dsh_core::{ConfigError, Handles, Plugin, PluginError, PluginScope};
use dsh_shell::{SHELL, ShellExecutor};
use dsh_subprocess::plugin::Subprocess;

use crate::{ConfigError as ExecutorConfigError, LocalBashConfig, LocalBashExecutor};

/// A refused executor config is a refused plugin config (same message).
impl From<ExecutorConfigError> for ConfigError {
    fn from(error: ExecutorConfigError) -> Self {
        ConfigError::new(error)
    }
}

/// A refused executor config is a refused plugin config (same message).
impl From<ExecutorConfigError> for PluginError {
    fn from(error: ExecutorConfigError) -> Self {
        PluginError::config(error)
    }
}

/// Loads the local executor (`shell`).
pub struct BashLocalPlugin;

impl Plugin for BashLocalPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-bash-local";
    const SHORT_NAME: &'static str = "bash-local";
    type Deps = (Subprocess,);
    type Config = LocalBashConfig;
    type Validated = LocalBashConfig;

    fn validate(config: LocalBashConfig) -> Result<LocalBashConfig, ConfigError> {
        config.validate()?;
        Ok(config)
    }

    fn apply(
        scope: &mut PluginScope,
        (service,): Handles<Self>,
        config: &LocalBashConfig,
    ) -> Result<(), PluginError> {
        let executor = LocalBashExecutor::new(config.clone(), service)?;
        let executor: Arc<dyn ShellExecutor> = Arc::new(executor);
        scope.provide(SHELL, executor)
    }
}
