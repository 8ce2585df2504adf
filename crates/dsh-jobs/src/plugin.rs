//! The `jobs` plugin: provides a [`LocalJobRegistry`] and tears it down on unload.

use std::sync::Arc;

use dsh_core::json::{MAX_SAFE_INTEGER, js_number_text};
use dsh_core::{ConfigError, Disposer, Plugin, PluginError, PluginScope};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::local::LocalJobRegistry;
use crate::registry::{JOBS, JobRegistry};

/// Config of the jobs runtime.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct JobsConfig {
    /// Running + stopping jobs admitted per exact owner (unowned jobs share one bucket).
    pub max_concurrent_jobs_per_owner: f64,
}

impl Default for JobsConfig {
    fn default() -> Self {
        Self { max_concurrent_jobs_per_owner: 10.0 }
    }
}

impl JobsConfig {
    fn limit(&self) -> Result<u64, String> {
        let n = self.max_concurrent_jobs_per_owner;
        if n.fract() == 0.0 && (1.0..=MAX_SAFE_INTEGER).contains(&n) {
            Ok(n as u64)
        } else {
            Err(format!(
                "jobs: maxConcurrentJobsPerOwner must be a positive safe integer (got {})",
                js_number_text(n)
            ))
        }
    }
}

/// Provides `jobs`. The agents registry is looked up at start time, only for owned jobs.
pub struct JobsPlugin;

impl Plugin for JobsPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-jobs";
    const SHORT_NAME: &'static str = "jobs";
    type Deps = ();
    type Config = JobsConfig;
    /// The per-owner limit.
    type Validated = u64;

    fn validate(config: JobsConfig) -> Result<u64, ConfigError> {
        Ok(config.limit()?)
    }

    fn apply(scope: &mut PluginScope, (): (), &limit: &u64) -> Result<(), PluginError> {
        let registry = LocalJobRegistry::new(limit, Some(scope.ctx().downgrade()));
        let service: Arc<dyn JobRegistry> = Arc::new(registry.clone());
        scope.provide(JOBS, service)?;
        scope.add(Disposer::new_async(move || async move { registry.dispose().await }));
        Ok(())
    }
}
