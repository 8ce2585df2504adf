//! The `shell-env` plugin: provides the registry and its built-in `session-persistence`
//! contributor (`DSH_SESSION_JSONL`).

use std::collections::BTreeMap;
use std::sync::Arc;

use dsh_core::{ConfigError, Plugin, PluginError, PluginScope, SESSION_PERSISTENCE, ToolExec, WeakContext};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::env::{SHELL_ENV, ShellEnvContributor, ShellEnvError, ShellEnvRegistry};

/// The session's JSONL file, when the active persistence backend keeps one.
pub const DSH_SESSION_JSONL: &str = "DSH_SESSION_JSONL";
/// The built-in contributor's name.
pub const SESSION_PERSISTENCE_CONTRIBUTOR: &str = "session-persistence";
/// The built-in contributor's description of `DSH_SESSION_JSONL` (exact).
pub const SESSION_JSONL_DESCRIPTION: &str =
    "Absolute target path of the current session JSONL when the active persistence backend provides one.";

/// A registration the registry refuses fails the applying plugin (same message).
impl From<ShellEnvError> for PluginError {
    fn from(error: ShellEnvError) -> Self {
        PluginError::apply(error)
    }
}

/// Loads the shell-env registry (`shellEnv`).
pub struct ShellEnvPlugin;

/// Config of the registry.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShellEnvConfig {
    /// Harness home exported as `DSH_HOME`; default `$DSH_HOME` if non-blank, else `~/.dsh`.
    /// `~` expands to the user home; relative values resolve against the harness cwd.
    pub dsh_home: Option<String>,
}

/// The built-in contributor: looks the persistence backend up at call time (it may load after
/// this plugin, or change) and exports the located path when the backend keeps JSONL files.
pub fn session_persistence_contributor(ctx: WeakContext) -> ShellEnvContributor {
    ShellEnvContributor::new(
        SESSION_PERSISTENCE_CONTRIBUTOR,
        &[(DSH_SESSION_JSONL, SESSION_JSONL_DESCRIPTION)],
        move |exec: &ToolExec| {
            let mut out = BTreeMap::new();
            let Some(agent) = &exec.agent else { return Ok(out) };
            let Some(backend) = ctx.get(SESSION_PERSISTENCE) else { return Ok(out) };
            if let Some(locator) = backend.locate(&agent.session().header().id)
                && locator.kind == "jsonl"
            {
                out.insert(
                    DSH_SESSION_JSONL.to_owned(),
                    Value::String(locator.path.to_string_lossy().into_owned()),
                );
            }
            Ok(out)
        },
    )
}

impl Plugin for ShellEnvPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-shell-env";
    const SHORT_NAME: &'static str = "shell-env";
    type Deps = ();
    type Config = ShellEnvConfig;
    type Validated = ShellEnvConfig;

    fn validate(config: ShellEnvConfig) -> Result<ShellEnvConfig, ConfigError> {
        Ok(config)
    }

    fn apply(scope: &mut PluginScope, (): (), config: &ShellEnvConfig) -> Result<(), PluginError> {
        let ambient = std::env::var("DSH_HOME").ok();
        let registry = ShellEnvRegistry::new(config.dsh_home.as_deref(), ambient.as_deref());
        let builtin = registry.register(session_persistence_contributor(scope.ctx().downgrade()))?;
        scope.add(builtin);
        scope.provide(SHELL_ENV, Arc::clone(&registry))
    }
}
