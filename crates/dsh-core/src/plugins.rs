//! The core's own plugins: the tool registry, the system prompt, the agents registry and
//! JSONL session persistence.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::agent::{AGENTS, Agents};
use crate::context::{ConfigError, Plugin, PluginError, PluginScope};
use crate::persistence::{
    JsonlPersistence, SESSION_PERSISTENCE, SESSION_RETENTION_ENV, SessionPersistence, session_retention,
};
use crate::prompt::{SYSTEM_PROMPT, SystemPrompt};
use crate::tools::{TOOLS, ToolRegistry};

/// Provides `tools`.
pub struct ToolsPlugin;

/// Config of the tool registry.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolsConfig {
    /// `native` only (Code Mode is not part of this build).
    #[serde(default = "native")]
    pub mode: String,
}

fn native() -> String {
    "native".to_owned()
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self { mode: native() }
    }
}

impl Plugin for ToolsPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-tools";
    const SHORT_NAME: &'static str = "tools";
    type Deps = ();
    type Config = ToolsConfig;
    type Validated = ();

    fn validate(config: ToolsConfig) -> Result<(), ConfigError> {
        if config.mode == "native" {
            Ok(())
        } else {
            Err(ConfigError(format!("tools: mode must be \"native\" (got \"{}\")", config.mode)))
        }
    }

    fn apply(scope: &mut PluginScope, (): (), (): &()) -> Result<(), PluginError> {
        let registry = ToolRegistry::new(scope.ctx().downgrade());
        scope.provide(TOOLS, registry)
    }
}

/// Provides `systemPrompt`.
pub struct SystemPromptPlugin;

/// Config of the system prompt.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SystemPromptConfig {
    /// Include the built-in identity section (`harness:identity`); default true.
    pub include_harness_identity: bool,
    /// Render the registered runtime contexts into requests; default true.
    pub include_runtime_context: bool,
    /// The deployment's persona text (the `deployment:persona` section); default empty.
    pub persona: String,
}

impl Default for SystemPromptConfig {
    fn default() -> Self {
        Self { include_harness_identity: true, include_runtime_context: true, persona: String::new() }
    }
}

impl Plugin for SystemPromptPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-system-prompt";
    const SHORT_NAME: &'static str = "system-prompt";
    type Deps = ();
    type Config = SystemPromptConfig;
    type Validated = SystemPromptConfig;

    fn validate(config: SystemPromptConfig) -> Result<SystemPromptConfig, ConfigError> {
        Ok(config)
    }

    fn apply(scope: &mut PluginScope, (): (), config: &SystemPromptConfig) -> Result<(), PluginError> {
        let prompt = SystemPrompt::new(
            config.include_harness_identity,
            config.include_runtime_context,
            &config.persona,
        );
        scope.provide(SYSTEM_PROMPT, prompt)
    }
}

/// Provides `agents`; disposing it ends every live agent's lifecycle.
pub struct AgentsPlugin;

/// The agents registry has no settings.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoConfig {}

impl Plugin for AgentsPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-agent";
    const SHORT_NAME: &'static str = "agent";
    type Deps = ();
    type Config = NoConfig;
    type Validated = ();

    fn validate(NoConfig {}: NoConfig) -> Result<(), ConfigError> {
        Ok(())
    }

    fn apply(scope: &mut PluginScope, (): (), (): &()) -> Result<(), PluginError> {
        let agents = Agents::new();
        scope.provide(AGENTS, Arc::clone(&agents))?;
        scope.add(crate::context::Disposer::new_async(move || async move { agents.dispose_all().await }));
        Ok(())
    }
}

/// Session persistence over a root that cannot be written: nothing is kept or located;
/// headers recorded by an earlier process are still read.
struct NotKept(JsonlPersistence);

impl SessionPersistence for NotKept {
    fn locate(&self, _session_id: &str) -> Option<crate::session::SessionLocator> {
        None
    }

    fn attach(&self, _session: &crate::session::Session) {}

    fn recorded_header(&self, session_id: &str) -> Option<crate::session::SessionHeader> {
        self.0.recorded_header(session_id)
    }
}

/// Provides `sessionPersistence`: one JSONL file per session under `<DSH_HOME>/sessions`.
///
/// A root that cannot be created or written is reported once on stderr
/// ([`crate::home::unwritable_warning`]) and then no log is kept.
///
/// When applied, removes logs older than `DSH_SESSION_RETENTION_DAYS` days if that is set to
/// a positive whole number (see [`crate::persistence::SESSION_RETENTION_ENV`]); by default
/// every log is kept.
pub struct SessionJsonlPlugin;

/// Config of JSONL persistence.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionJsonlConfig {
    /// Directory of the session files; default `<DSH_HOME>/sessions`.
    pub root: Option<String>,
    /// Harness home used for the default root; default as `DSH_HOME` resolution.
    pub dsh_home: Option<String>,
}

impl Plugin for SessionJsonlPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-session-jsonl";
    const SHORT_NAME: &'static str = "session-jsonl";
    type Deps = ();
    type Config = SessionJsonlConfig;
    type Validated = SessionJsonlConfig;

    fn validate(config: SessionJsonlConfig) -> Result<SessionJsonlConfig, ConfigError> {
        Ok(config)
    }

    fn apply(scope: &mut PluginScope, (): (), config: &SessionJsonlConfig) -> Result<(), PluginError> {
        let root = match &config.root {
            Some(root) => crate::home::absolutize(std::path::Path::new(root)),
            None => {
                let ambient = std::env::var("DSH_HOME").ok();
                crate::home::resolve_dsh_home(config.dsh_home.as_deref(), ambient.as_deref()).join("sessions")
            }
        };
        // A root that cannot be written (a read-only home): one warning, and no logs are kept —
        // calls go on; an earlier process's recorded headers are still read.
        if crate::home::ensure_writable_dir(&root).is_err() {
            let backend: Arc<dyn SessionPersistence> = Arc::new(NotKept(JsonlPersistence::new(root)));
            return scope.provide(SESSION_PERSISTENCE, backend);
        }
        let jsonl = JsonlPersistence::new(root);
        // Opt-in retention, once per load: removing old logs never fails the load.
        let retention = std::env::var(SESSION_RETENTION_ENV).ok();
        if let Some(max_age) = session_retention(retention.as_deref()) {
            match jsonl.remove_older_than(max_age) {
                Ok(removed) if !removed.is_empty() => {
                    tracing::debug!(count = removed.len(), "removed session logs past retention");
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "session log retention skipped"),
            }
        }
        let backend: Arc<dyn SessionPersistence> = Arc::new(jsonl);
        scope.provide(SESSION_PERSISTENCE, backend)
    }
}
