//! `shell-container`: the plugin providing the container executor (`shell`).

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use dsh_core::{ConfigError as PluginConfigError, Disposer, Handles, Plugin, PluginError, PluginScope};
use dsh_shell::{SHELL, ShellExecutor};
use dsh_shell_remote::{REMOTE_TRANSPORT, RemoteExecutor, RemoteTransport};
use dsh_subprocess::plugin::Subprocess;

use crate::config::{ContainerExecutorConfig, parse_memory};
use crate::transport::{ContainerSettings, ContainerTransport};

/// Loads the container executor (`shell`) and its transport (`remoteTransport`).
pub struct ShellContainerPlugin;

/// The harness's own `uid:gid`, so files the commands create in the workspace are the
/// user's (the owner of `/proc/self` is the effective user).
fn harness_user() -> Option<String> {
    let meta = std::fs::metadata("/proc/self").ok()?;
    Some(format!("{}:{}", meta.uid(), meta.gid()))
}

impl Plugin for ShellContainerPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-shell-container";
    const SHORT_NAME: &'static str = "shell-container";
    type Deps = (Subprocess,);
    type Config = ContainerExecutorConfig;
    type Validated = ContainerExecutorConfig;

    fn validate(config: ContainerExecutorConfig) -> Result<ContainerExecutorConfig, PluginConfigError> {
        config.validate().map_err(PluginConfigError::new)?;
        Ok(config)
    }

    fn apply(
        scope: &mut PluginScope,
        (service,): Handles<Self>,
        config: &ContainerExecutorConfig,
    ) -> Result<(), PluginError> {
        let workspace = match config.workspace.clone().or_else(|| config.cwd.clone()) {
            Some(dir) => dsh_core::home::absolutize(&dir),
            None => std::env::current_dir()
                .map_err(|e| PluginError::config(format!("shell-container: no workspace: {e}")))?,
        };
        let settings = ContainerSettings {
            image: config.image.clone(),
            container: config.container.clone(),
            workspace,
            memory: config.memory.as_deref().and_then(parse_memory),
            nano_cpus: config.cpus.map(|c| (c * 1e9) as i64),
            pids_limit: config.pids_limit,
            network_none: config.network.as_deref() == Some("deny"),
            user: harness_user(),
            warm: config.warm.unwrap_or(0),
        };
        let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        let transport = ContainerTransport::new(settings, tag, Some(scope.ctx().downgrade()));
        transport.prewarm();
        let executor = Arc::new(
            RemoteExecutor::new(Arc::clone(&transport) as Arc<dyn RemoteTransport>, config.local(), service)
                .map_err(PluginError::config)?,
        );
        executor.tie_to(scope.ctx().downgrade());
        scope.provide(SHELL, Arc::clone(&executor) as Arc<dyn ShellExecutor>)?;
        scope.provide(REMOTE_TRANSPORT, Arc::clone(&transport) as Arc<dyn RemoteTransport>)?;
        scope.add(Disposer::new_async(move || async move {
            // The spill directories in a named container (one per session, shared).
            executor.release().await;
            if let Err(e) = transport.shutdown().await {
                tracing::warn!(error = %e, "the sessions' containers could not be removed");
            }
        }));
        Ok(())
    }
}
