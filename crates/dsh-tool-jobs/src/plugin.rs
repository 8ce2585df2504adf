//! The `tool-jobs` plugin: controller attachment, the three tools, the `tool:jobs` section and
//! the completion listener.

use std::sync::Arc;

use dsh_core::{Plugin, PluginError, PluginScope, SYSTEM_PROMPT, TOOLS, Tool};
use dsh_jobs::JOBS;

use crate::config::ToolJobsConfig;
use crate::notice::Notifier;
use crate::tools::{JobKillTool, JobListTool, JobOutputTool};

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
    const INJECT: &'static [&'static str] = &["tools", "jobs", "systemPrompt"];
    type Config = ToolJobsConfig;

    fn validate(config: &ToolJobsConfig) -> Result<(), String> {
        config.check()
    }

    fn apply(scope: &mut PluginScope, config: ToolJobsConfig) -> Result<(), PluginError> {
        config.check().map_err(PluginError::Config)?;
        let delivery = config.delivery().map_err(PluginError::Config)?;
        let missing = |key: &str| PluginError::Apply(format!("tool-jobs: service \"{key}\" is missing"));
        let jobs = scope.get(JOBS).ok_or_else(|| missing("jobs"))?;
        let tools = scope.get(TOOLS).ok_or_else(|| missing("tools"))?;
        let prompt = scope.get(SYSTEM_PROMPT).ok_or_else(|| missing("systemPrompt"))?;

        scope.add(jobs.attach_controller());
        let section = prompt
            .register_section(JOBS_SECTION, JOBS_SECTION_ORDER, JOBS_SECTION_TEXT)
            .map_err(|e| PluginError::Apply(e.to_string()))?;
        scope.add(section);

        // Validated above: a whole number ≥ 1 within the safe-integer range.
        let notifier = Notifier::new(delivery, config.max_consecutive_wakes as u64);
        scope.add(jobs.on_settled(Arc::new(move |job, owner| notifier.on_settled(job, owner))));

        let definitions: [Arc<dyn Tool>; 3] = [
            Arc::new(JobOutputTool::new(
                Arc::clone(&jobs),
                config.wait_timeout_ms,
                config.max_wait_timeout_ms,
                config.tail_lines,
            )),
            Arc::new(JobListTool::new(Arc::clone(&jobs))),
            Arc::new(JobKillTool::new(Arc::clone(&jobs))),
        ];
        for tool in definitions {
            let registration = tools.register(tool).map_err(|e| PluginError::Apply(e.to_string()))?;
            scope.add(registration);
        }
        Ok(())
    }
}
