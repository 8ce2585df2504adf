//! `shell-ssh`: the plugin providing the remote executor over an SSH host (`shell`), and the
//! transport itself (`remoteTransport`, and `sshTransport` with its SSH facts, for `doctor`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dsh_bash_local::LocalBashConfig;
use dsh_core::{ConfigError, Disposer, Handles, Plugin, PluginError, PluginScope, ServiceKey};
use dsh_shell::{SHELL, ShellExecutor};
use dsh_shell_remote::{REMOTE_TRANSPORT, RemoteExecutor, RemoteTransport};
use dsh_subprocess::plugin::Subprocess;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{SshConfig, SshTarget, SshTransport};

/// The SSH transport of the composed `shell-ssh` executor.
pub const SSH_TRANSPORT: ServiceKey<Arc<SshTransport>> = ServiceKey::new("sshTransport");

/// Config of `shell-ssh`: the host and how to reach it, then the executor's keys (those of
/// `bash-local`, same defaults and meaning, applied on the host).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ShellSshConfig {
    /// `[user@]host[:port]` (required); a host alias of the user's `ssh_config` works.
    pub host: Option<String>,
    /// Private key to log in with (then only it); default the ssh agent's keys.
    pub identity: Option<PathBuf>,
    /// Known-hosts file the host's key must be in; default `~/.ssh/known_hosts`.
    pub known_hosts: Option<PathBuf>,
    /// How long opening the connection may take.
    pub connect_timeout_ms: f64,
    /// Default working directory on the host; the harness's own path when absent.
    pub cwd: Option<PathBuf>,
    /// Default foreground timeout.
    pub timeout_ms: f64,
    /// Cap on any foreground timeout, including the default.
    pub max_timeout_ms: f64,
    /// In-memory tail per stream, kept on the harness's side.
    pub max_output_bytes: f64,
    /// Largest complete stream kept in a spill file on the harness's side.
    pub max_spill_bytes: f64,
    /// Time between `SIGTERM` and `SIGKILL` of a call's processes on the host.
    pub grace_ms: f64,
}

impl Default for ShellSshConfig {
    fn default() -> Self {
        let executor = LocalBashConfig::default();
        Self {
            host: None,
            identity: None,
            known_hosts: None,
            connect_timeout_ms: crate::DEFAULT_CONNECT_TIMEOUT.as_millis() as f64,
            cwd: executor.cwd,
            timeout_ms: executor.timeout_ms,
            max_timeout_ms: executor.max_timeout_ms,
            max_output_bytes: executor.max_output_bytes,
            max_spill_bytes: executor.max_spill_bytes,
            grace_ms: executor.grace_ms,
        }
    }
}

/// The checked `shell-ssh` config.
#[derive(Clone, Debug)]
pub struct CheckedShellSshConfig {
    /// The connection.
    pub ssh: SshConfig,
    /// The executor's keys.
    pub executor: LocalBashConfig,
}

impl ShellSshConfig {
    /// Checks the host and every number; the first problem is reported.
    pub fn check(self) -> Result<CheckedShellSshConfig, String> {
        let Some(host) = &self.host else {
            return Err("shell-ssh: host is required ([user@]host[:port]; --ssh-host)".to_owned());
        };
        let target: SshTarget = host.parse().map_err(|e| format!("shell-ssh: {e}"))?;
        if !(self.connect_timeout_ms.is_finite() && self.connect_timeout_ms >= 1000.0) {
            return Err("shell-ssh: connectTimeoutMs must be a number of at least 1000".to_owned());
        }
        let executor = LocalBashConfig {
            cwd: self.cwd,
            timeout_ms: self.timeout_ms,
            max_timeout_ms: self.max_timeout_ms,
            max_output_bytes: self.max_output_bytes,
            max_spill_bytes: self.max_spill_bytes,
            grace_ms: self.grace_ms,
            ..LocalBashConfig::default()
        };
        executor.validate().map_err(|e| e.to_string().replacen("bash-local:", "shell-ssh:", 1))?;
        let ssh = SshConfig {
            identity: self.identity,
            known_hosts: self.known_hosts,
            connect_timeout: Duration::from_millis(self.connect_timeout_ms as u64),
            ..SshConfig::new(target)
        };
        Ok(CheckedShellSshConfig { ssh, executor })
    }
}

/// Loads the remote executor over SSH (`shell`) in place of the local one.
pub struct ShellSshPlugin;

impl Plugin for ShellSshPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-shell-ssh";
    const SHORT_NAME: &'static str = "shell-ssh";
    type Deps = (Subprocess,);
    type Config = ShellSshConfig;
    type Validated = CheckedShellSshConfig;

    fn validate(config: ShellSshConfig) -> Result<CheckedShellSshConfig, ConfigError> {
        config.check().map_err(ConfigError::new)
    }

    fn apply(
        scope: &mut PluginScope,
        (service,): Handles<Self>,
        config: &CheckedShellSshConfig,
    ) -> Result<(), PluginError> {
        let transport = Arc::new(SshTransport::new(config.ssh.clone()));
        let remote: Arc<dyn RemoteTransport> = transport.clone();
        let executor = RemoteExecutor::new(Arc::clone(&remote), config.executor.clone(), service)
            .map_err(|e| PluginError::config(e.to_string().replacen("bash-local:", "shell-ssh:", 1)))?;
        let executor = Arc::new(executor);
        // A session's spill directory on the host goes when the session ends.
        executor.tie_to(scope.ctx().downgrade());
        scope.provide(SHELL, Arc::clone(&executor) as Arc<dyn ShellExecutor>)?;
        scope.provide(REMOTE_TRANSPORT, remote)?;
        scope.provide(SSH_TRANSPORT, transport.clone())?;
        // Disposed after the jobs (loaded later, disposed earlier) ended their processes.
        scope.add(Disposer::new_async(move || async move {
            // The spill directories still there, while the connection is open.
            executor.release().await;
            if let Err(e) = transport.shutdown().await {
                tracing::warn!(error = %e, "closing the SSH connection");
            }
        }));
        Ok(())
    }
}
