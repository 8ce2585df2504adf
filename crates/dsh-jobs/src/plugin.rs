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
    /// Keep the crash-safe job journal under `<DSH_HOME>/sessions/jobs` (default false; the
    /// `dsh-bash` host turns it on): a later harness with the same home reports the jobs of a
    /// killed one as `lost` to their owning sessions and stops their leftover processes.
    pub journal: bool,
    /// Harness home of the journal; default as `DSH_HOME` resolution.
    pub dsh_home: Option<String>,
}

impl Default for JobsConfig {
    fn default() -> Self {
        Self { max_concurrent_jobs_per_owner: 10.0, journal: false, dsh_home: None }
    }
}

/// The validated config of the jobs runtime.
#[derive(Clone, Debug)]
pub struct CheckedJobsConfig {
    /// The per-owner limit.
    pub limit: u64,
    /// The journal's directory, when the journal is on.
    pub journal_dir: Option<std::path::PathBuf>,
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
    type Validated = CheckedJobsConfig;

    fn validate(config: JobsConfig) -> Result<CheckedJobsConfig, ConfigError> {
        let limit = config.limit()?;
        let journal_dir = config.journal.then(|| {
            let ambient = std::env::var("DSH_HOME").ok();
            dsh_core::home::resolve_dsh_home(config.dsh_home.as_deref(), ambient.as_deref())
                .join("sessions")
                .join("jobs")
        });
        Ok(CheckedJobsConfig { limit, journal_dir })
    }

    fn apply(scope: &mut PluginScope, (): (), config: &CheckedJobsConfig) -> Result<(), PluginError> {
        let (limit, ctx) = (config.limit, Some(scope.ctx().downgrade()));
        // A journal that cannot be kept (an unwritable home: one warning) leaves jobs unjournaled.
        let registry = match &config.journal_dir {
            Some(dir) if dsh_core::home::ensure_writable_dir(dir).is_ok() => {
                let retention = std::env::var(dsh_core::persistence::SESSION_RETENTION_ENV).ok();
                let retention = dsh_core::persistence::session_retention(retention.as_deref());
                LocalJobRegistry::with_journal(limit, ctx.clone(), dir, retention).unwrap_or_else(|e| {
                    tracing::debug!(error = %e, "job journal not kept");
                    LocalJobRegistry::new(limit, ctx)
                })
            }
            _ => LocalJobRegistry::new(limit, ctx),
        };
        let service: Arc<dyn JobRegistry> = Arc::new(registry.clone());
        scope.provide(JOBS, service)?;
        scope.add(Disposer::new_async(move || async move { registry.dispose().await }));
        Ok(())
    }
}
