//! `sandbox-local`: provides the local sandbox provider (Landlock, bubblewrap; fails closed).

use std::sync::Arc;

use dsh_core::{Plugin, PluginError, PluginScope};
use dsh_sandbox::{SANDBOX, SandboxProvider};
use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider};

/// Loads the local sandbox provider (`sandbox`).
pub struct SandboxLocalPlugin;

impl Plugin for SandboxLocalPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-sandbox-local";
    const SHORT_NAME: &'static str = "sandbox-local";
    const INJECT: &'static [&'static str] = &[];
    type Config = LocalSandboxConfig;

    fn validate(config: &LocalSandboxConfig) -> Result<(), String> {
        config.validate().map_err(|e| e.to_string())
    }

    fn apply(scope: &mut PluginScope, config: LocalSandboxConfig) -> Result<(), PluginError> {
        let provider = LocalSandboxProvider::new(config).map_err(|e| PluginError::Config(e.to_string()))?;
        let provider: Arc<dyn SandboxProvider> = Arc::new(provider);
        scope.provide(SANDBOX, provider)
    }
}
