//! `askpass`: provides the askpass service to the tools that run commands.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::{ConfigError, Handles, Plugin, PluginError, PluginScope, Secret, ServiceKey};
use dsh_sandbox::SANDBOX;
use dsh_subprocess::plugin::Subprocess;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::REDACTION_NAME;
use crate::server::{AskpassService, RedactFn};

/// Service key of the askpass service. Present only when the `askpass` plugin is composed:
/// without it commands get no askpass variables.
pub const ASKPASS: ServiceKey<Arc<AskpassService>> = ServiceKey::new("askpass");

/// Configuration of the askpass service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AskpassConfig {
    /// The executable the askpass variables point at (through a link named `dsh-askpass`);
    /// it must run the askpass program when invoked under that name. Default: the running
    /// executable.
    pub program: Option<PathBuf>,
}

/// Makes the askpass directory, adds answers to the output redaction of the `subprocess`
/// service, and shares the program's directory and the program read-only with confined
/// commands, and each session's socket directory with that session's commands only, when a
/// sandbox provider is composed (load it after the provider).
pub struct AskpassPlugin;

impl Plugin for AskpassPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-askpass";
    const SHORT_NAME: &'static str = "askpass";
    type Deps = (Subprocess,);
    type Config = AskpassConfig;
    type Validated = AskpassConfig;

    fn validate(config: AskpassConfig) -> Result<AskpassConfig, ConfigError> {
        match &config.program {
            Some(program) if !program.is_absolute() => Err(ConfigError::new(format!(
                "askpass program {} must be an absolute path",
                program.display()
            ))),
            _ => Ok(config),
        }
    }

    fn apply(
        scope: &mut PluginScope,
        (subprocess,): Handles<Self>,
        config: &AskpassConfig,
    ) -> Result<(), PluginError> {
        let program = match &config.program {
            Some(program) => program.clone(),
            None => std::env::current_exe().map_err(|e| {
                PluginError::Apply(format!("askpass: cannot find the running executable: {e}"))
            })?,
        };
        // The link points at the program itself, not at another link to it: that one file is
        // what a confined command's world must show (below).
        let program = std::fs::canonicalize(&program).unwrap_or(program);
        // Commands started from now on may print an answer given while they run.
        subprocess.redacts_late_values();
        let redact: RedactFn = Arc::new(move |secret: &Secret| {
            subprocess.redact_also(REDACTION_NAME, secret.expose()).map_err(|e| e.to_string())
        });
        let mut service = AskpassService::new(&program, Some(redact))
            .map_err(|e| PluginError::Apply(format!("askpass: cannot make its directory: {e}")))?;
        if let Some(provider) = scope.get(SANDBOX) {
            provider.share_read_only(service.dir());
            // The program too, wherever it is installed: a world with a private `/tmp` would
            // otherwise hide one that lives there (only the program, not its directory).
            provider.share_read_only(&program);
            // Each session's sockets to that session's commands only.
            service.share_each_session_with(Arc::new(move |session, dir| {
                provider.share_read_only_with_session(session, dir);
            }));
        }
        scope.provide(ASKPASS, Arc::new(service))
    }
}
