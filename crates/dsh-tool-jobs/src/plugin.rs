//! The `tool-jobs` plugin: controller attachment, the three tools, the `tool:jobs` section and
//! the completion listener.

use std::sync::Arc;

use dsh_core::services::{SystemPrompt, Tools};
use dsh_core::{ConfigError, Handles, Plugin, PluginError, PluginScope, Tool};
use dsh_jobs::services::Jobs;

use crate::config::{CheckedToolJobsConfig, ToolJobsConfig};
use crate::input_tool::JobInputTool;
use crate::notice::Notifier;
use crate::tools::{JobKillTool, JobListTool, JobOutputTool};
use dsh_jobs::{JOB_INPUTS, JobInputs};

/// Name of the prompt section.
pub const JOBS_SECTION: &str = "tool:jobs";
/// Order of the prompt section (tool guidance band).
pub const JOBS_SECTION_ORDER: f64 = 106.0;
/// Text of the `tool:jobs` section (exact).
const JOBS_SECTION_TEXT: &str = "Track every background job id you start. You are notified in-session when a job finishes \u{2014} do not busy-poll or sleep on one; keep working on independent steps and do not duplicate a running job's work. Before giving a final answer, collect every still-relevant job with job_output (set wait: true only when you are genuinely blocked on it), and job_kill jobs that stopped mattering.";

/// Registers `job_output`, `job_list`, `job_kill` and `tool:jobs`, and delivers completion
/// notices. Jobs outlive this plugin: unloading it stops no job.
pub struct ToolJobsPlugin;

impl ToolJobsPlugin {
    /// The exact `tool:jobs` section text.
    pub const SECTION_TEXT: &'static str = JOBS_SECTION_TEXT;
}

impl Plugin for ToolJobsPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-tool-jobs";
    const SHORT_NAME: &'static str = "tool-jobs";
    type Deps = (Tools, Jobs, SystemPrompt);
    type Config = ToolJobsConfig;
    type Validated = CheckedToolJobsConfig;

    fn validate(config: ToolJobsConfig) -> Result<CheckedToolJobsConfig, ConfigError> {
        Ok(config.checked()?)
    }

    fn apply(
        scope: &mut PluginScope,
        (tools, jobs, prompt): Handles<Self>,
        checked: &CheckedToolJobsConfig,
    ) -> Result<(), PluginError> {
        let config = &checked.config;
        scope.add(jobs.attach_controller());
        let section = prompt.register_section(JOBS_SECTION, JOBS_SECTION_ORDER, JOBS_SECTION_TEXT)?;
        scope.add(section);

        let notifier = Notifier::new(checked.delivery, checked.max_consecutive_wakes);
        let settled = Arc::clone(&notifier);
        scope.add(jobs.on_settled(Arc::new(move |job, owner| settled.on_settled(job, owner))));

        let output = JobOutputTool::new(
            Arc::clone(&jobs),
            config.wait_timeout_ms,
            config.max_wait_timeout_ms,
            config.tail_lines,
        );
        let list = JobListTool::new(Arc::clone(&jobs));
        let mut definitions: Vec<Arc<dyn Tool>> = Vec::new();
        if config.input {
            // Background starters find the registry and keep their jobs' stdin a pipe.
            // A job that starts waiting for input is announced to its owner once.
            let registry = Arc::downgrade(&jobs);
            let inputs = Arc::new(JobInputs::with_listener(Arc::new(move |id, line, owner| {
                if let Some(job) = registry.upgrade().and_then(|jobs| jobs.get(id, Some(owner)).ok()) {
                    notifier.on_waiting(&job, line.as_deref(), owner);
                }
            })));
            scope.provide(JOB_INPUTS, Arc::clone(&inputs))?;
            definitions.push(Arc::new(output.with_inputs(Arc::clone(&inputs))));
            definitions.push(Arc::new(list.with_inputs(Arc::clone(&inputs))));
            definitions.push(Arc::new(JobKillTool::new(Arc::clone(&jobs))));
            definitions.push(Arc::new(JobInputTool::new(Arc::clone(&jobs), inputs)));
        } else {
            definitions.push(Arc::new(output));
            definitions.push(Arc::new(list));
            definitions.push(Arc::new(JobKillTool::new(Arc::clone(&jobs))));
        }
        for tool in definitions {
            let registration = tools.register(tool)?;
            scope.add(registration);
        }
        Ok(())
    }
}
