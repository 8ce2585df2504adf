//! The job tools (a **consumer** of the `jobs` seam): `job_output`, `job_list`, `job_kill`,
//! the `tool:jobs` prompt section, and the completion notices that tell an owner its job ended.
//!
//! Loading the plugin attaches a job controller, so the runtime admits owned jobs. This crate
//! owns every model-facing job text (status lines, listings, cancellation replies, notices) and
//! knows nothing about what a job runs: producers such as the bash tool speak only to the
//! runtime.

#![deny(missing_docs)]

mod config;
mod input_tool;
mod notice;
mod plugin;
mod render;
mod tools;

pub use config::{CheckedToolJobsConfig, CompletionDelivery, ToolJobsConfig, ToolJobsConfigError};
pub use input_tool::{JOB_INPUT_DESCRIPTION, JobInputTool};
pub use notice::{
    SUMMARY_MAX_UTF16, WAITING_LINE_MAX_CHARS, completion_notice, completion_summary, waiting_notice,
};
pub use plugin::{JOBS_SECTION, JOBS_SECTION_ORDER, ToolJobsPlugin};
pub use render::{WAITING_FOR_INPUT, public_job_schema, status_line};
pub use tools::{
    JOB_KILL_DESCRIPTION, JOB_LIST_DESCRIPTION, JOB_OUTPUT_DESCRIPTION, JobKillTool, JobListTool,
    JobOutputTool,
};
