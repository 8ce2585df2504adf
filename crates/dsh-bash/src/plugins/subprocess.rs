//! `subprocess`: provides the subprocess service; disposing it kills and awaits every tree.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::{Disposer, Plugin, PluginError, PluginScope};
use dsh_subprocess::{SUBPROCESS, ServiceOptions, SubprocessService};
use schemars::JsonSchema;
use serde::Deserialize;

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
    const INJECT: &'static [&'static str] = &[];
    type Config = SubprocessConfig;

    fn apply(scope: &mut PluginScope, config: SubprocessConfig) -> Result<(), PluginError> {
        let spill_dir = config.spill_dir.map(|dir| dsh_core::home::absolutize(&dir));
        let service =
            SubprocessService::with_options(ServiceOptions { spill_dir, ..ServiceOptions::default() });
        scope.provide(SUBPROCESS, Arc::clone(&service))?;
        scope.add(Disposer::new_async(move || async move { service.dispose().await }));
        Ok(())
    }
}
