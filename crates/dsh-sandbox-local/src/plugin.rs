//! `sandbox-local`: the plugin providing the local sandbox provider (`sandbox`; Landlock,
//! bubblewrap; fails closed).

use std::sync::Arc;

use dsh_core::{ConfigError, Plugin, PluginError, PluginScope};
use dsh_sandbox::{SANDBOX, SandboxProvider};

use crate::{ConfigError as ProviderConfigError, LocalSandboxConfig, LocalSandboxProvider};

/// A refused provider config is a refused plugin config (same message).
impl From<ProviderConfigError> for ConfigError {
    fn from(error: ProviderConfigError) -> Self {
        ConfigError::new(error)
    }
}

/// A refused provider config is a refused plugin config (same message).
impl From<ProviderConfigError> for PluginError {
    fn from(error: ProviderConfigError) -> Self {
        PluginError::config(error)
    }
}

/// Loads the local sandbox provider (`sandbox`).
pub struct SandboxLocalPlugin;

impl Plugin for SandboxLocalPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-sandbox-local";
    const SHORT_NAME: &'static str = "sandbox-local";
    type Deps = ();
    type Config = LocalSandboxConfig;
    type Validated = LocalSandboxConfig;

    fn validate(config: LocalSandboxConfig) -> Result<LocalSandboxConfig, ConfigError> {
        config.validate()?;
        Ok(config)
    }

    fn apply(scope: &mut PluginScope, (): (), config: &LocalSandboxConfig) -> Result<(), PluginError> {
        let provider = Arc::new(LocalSandboxProvider::new(config.clone())?);
        // Select the runner now, on a thread of its own: probing blocks (`poll`, `sleep`), and
        // the first confined command, on an async worker, then finds the verdict made. If the
        // thread cannot start, the first command probes as before.
        let warming = Arc::clone(&provider);
        let _ = std::thread::Builder::new().name("dsh-sandbox-warm".to_owned()).spawn(move || warming.warm());
        let provider: Arc<dyn SandboxProvider> = provider;
        scope.provide(SANDBOX, provider)
    }
}
