//! `subprocess`: the plugin providing the subprocess service to a `dsh-core` composition;
//! disposing it kills and awaits every tree. Behind the `plugin` feature.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::{ConfigError, Disposer, Plugin, PluginError, PluginScope, Service, ServiceKey};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{AmbientEnv, Redactor, SUBPROCESS, ServiceOptions, SpillRetention, SubprocessService};

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
    /// Bytes of spill files one session may hold at once: bytes, optionally with `k`, `m`
    /// or `g` (`"256m"`), or `"none"`. Absent: 1 GiB. A spill past it is not kept.
    pub spill_session_quota: Option<String>,
    /// Bytes of spill files this harness may hold at once, in the same form. Absent: 4 GiB.
    /// Room is made by removing ended sessions' files, oldest first; a spill that still does
    /// not fit is not kept.
    pub spill_total_cap: Option<String>,
    /// Keep an ended session's spill files until the total cap needs their room (oldest
    /// first) instead of removing them when it ends (default false).
    #[serde(default)]
    pub spill_keep_ended: bool,
}

/// A spill size setting: `None` for `"none"`, the default when absent.
fn spill_size(field: &str, value: Option<&str>, default: u64) -> Result<Option<u64>, ConfigError> {
    match value.map(str::trim) {
        None => Ok(Some(default)),
        Some(text) if text.eq_ignore_ascii_case("none") => Ok(None),
        Some(text) => crate::parse_size(text).map(Some).ok_or_else(|| {
            ConfigError::new(format!(
                "subprocess: {field} must be a number of bytes, optionally with k, m or g (\"256m\"), or \"none\", got {text:?}"
            ))
        }),
    }
}

impl SubprocessConfig {
    /// The spill retention these settings ask for.
    pub fn spill_retention(&self) -> Result<SpillRetention, ConfigError> {
        Ok(SpillRetention {
            session_quota: spill_size(
                "spillSessionQuota",
                self.spill_session_quota.as_deref(),
                crate::DEFAULT_SPILL_SESSION_QUOTA,
            )?,
            total_cap: spill_size(
                "spillTotalCap",
                self.spill_total_cap.as_deref(),
                crate::DEFAULT_SPILL_TOTAL_CAP,
            )?,
            keep_ended: self.spill_keep_ended,
        })
    }
}

fn redact_scrubbed_default() -> bool {
    true
}

impl Default for SubprocessConfig {
    fn default() -> Self {
        Self {
            spill_dir: None,
            redact_values: Vec::new(),
            redact_scrubbed: true,
            spill_session_quota: None,
            spill_total_cap: None,
            spill_keep_ended: false,
        }
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
        config.spill_retention()?;
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
            spill_retention: config.spill_retention().map_err(PluginError::config)?,
            ..ServiceOptions::default()
        });
        scope.provide(SUBPROCESS, Arc::clone(&service))?;
        scope.add(Disposer::new_async(move || async move { service.dispose().await }));
        Ok(())
    }
}
