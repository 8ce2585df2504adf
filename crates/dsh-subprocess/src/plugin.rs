//! `subprocess`: the plugin providing the subprocess service to a `dsh-core` composition;
//! disposing it kills and awaits every tree. Behind the `plugin` feature.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::{ConfigError, Disposer, Plugin, PluginError, PluginScope, Service, ServiceKey};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{AmbientEnv, Redactor, SUBPROCESS, ServiceOptions, SubprocessService};

/// `subprocess` as a type, for plugins' [`Plugin::Deps`].
pub struct Subprocess;

impl Service for Subprocess {
    const NAME: &'static str = SUBPROCESS.name();
    type Handle = Arc<SubprocessService>;
}

// The marker's handle is the key's value type.
const _: ServiceKey<<Subprocess as Service>::Handle> = SUBPROCESS;

/// Loads the subprocess service (`subprocess`).
pub struct SubprocessPlugin;

/// Config of the subprocess service.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubprocessConfig {
    /// Directory for spill files; default a private `<os temp>/dsh-subprocess-XXXXXX`.
    pub spill_dir: Option<PathBuf>,
    /// Names of harness environment variables whose values (at least 8 bytes long) are
    /// replaced by `[redacted:NAME]` in all collected output, in addition to the scrubbed
    /// credentials. Values are read once, when the service starts.
    #[serde(default)]
    pub redact_values: Vec<String>,
    /// Redact the values of the credential-shaped variables the environment scrub keeps from
    /// children (default true).
    #[serde(default = "redact_scrubbed_default")]
    pub redact_scrubbed: bool,
}

fn redact_scrubbed_default() -> bool {
    true
}

impl Default for SubprocessConfig {
    fn default() -> Self {
        Self { spill_dir: None, redact_values: Vec::new(), redact_scrubbed: true }
    }
}

impl Plugin for SubprocessPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-subprocess-local";
    const SHORT_NAME: &'static str = "subprocess";
    type Deps = ();
    type Config = SubprocessConfig;
    type Validated = SubprocessConfig;

    fn validate(config: SubprocessConfig) -> Result<SubprocessConfig, ConfigError> {
        if let Some(name) = config.redact_values.iter().find(|n| n.is_empty() || n.contains(['=', '\0'])) {
            return Err(ConfigError::new(format!(
                "subprocess: redactValues must hold environment variable names, got {name:?}"
            )));
        }
        Ok(config)
    }

    fn apply(scope: &mut PluginScope, (): (), config: &SubprocessConfig) -> Result<(), PluginError> {
        let spill_dir = config.spill_dir.as_deref().map(dsh_core::home::absolutize);
        // The values are read from the harness's environment now, once; they are never logged.
        let redactor =
            Redactor::from_env(&AmbientEnv::Process, config.redact_scrubbed, &config.redact_values)
                .map_err(PluginError::config)?;
        tracing::debug!(values = redactor.len(), "output redaction");
        let service = SubprocessService::with_options(ServiceOptions {
            spill_dir,
            redactor: Some(Arc::new(redactor)),
            ..ServiceOptions::default()
        });
        scope.provide(SUBPROCESS, Arc::clone(&service))?;
        scope.add(Disposer::new_async(move || async move { service.dispose().await }));
        Ok(())
    }
}
