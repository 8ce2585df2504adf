//! `subprocess`: the plugin providing the subprocess service to a `dsh-core` composition;
//! disposing it kills and awaits every tree. Behind the `plugin` feature.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::{ConfigError, Disposer, Plugin, PluginError, PluginScope, Service, ServiceKey};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{SUBPROCESS, ServiceOptions, SubprocessService};

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
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubprocessConfig {
    /// Directory for spill files; default a private `<os temp>/dsh-subprocess-XXXXXX`.
    pub spill_dir: Option<PathBuf>,
}

impl Plugin for SubprocessPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-subprocess-local";
    const SHORT_NAME: &'static str = "subprocess";
    type Deps = ();
    type Config = SubprocessConfig;
    type Validated = SubprocessConfig;

    fn validate(config: SubprocessConfig) -> Result<SubprocessConfig, ConfigError> {
        Ok(config)
    }

    fn apply(scope: &mut PluginScope, (): (), config: &SubprocessConfig) -> Result<(), PluginError> {
        let spill_dir = config.spill_dir.as_deref().map(dsh_core::home::absolutize);
        let service =
            SubprocessService::with_options(ServiceOptions { spill_dir, ..ServiceOptions::default() });
        scope.provide(SUBPROCESS, Arc::clone(&service))?;
        scope.add(Disposer::new_async(move || async move { service.dispose().await }));
        Ok(())
    }
}
