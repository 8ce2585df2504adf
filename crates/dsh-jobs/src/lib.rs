//! Background jobs (the **definition** of the `jobs` seam plus its local provider).
//!
//! A producer (the bash tool's background path, or any other tool) hands the runtime a
//! [`JobStartSpec`] whose `run` starts the work and returns [`JobHooks`]; the runtime owns
//! everything after that: preflight and admission, `<kind>-<n>` ids, owners and the
//! cross-session access fence, consuming reads, kills, bounded waits, first-wins settlement,
//! the `reported` flag that suppresses completion notices, and teardown when an owner or the
//! service goes away.
//!
//! This crate knows no shell, no process, no tool and no notice text: producers map their own
//! facts into [`JobOutcome`]s, and the job tools (a separate crate) render statuses and deliver
//! notices through [`JobRegistry::on_settled`].
//!
//! With a journal ([`LocalJobRegistry::with_journal`], the plugin's `journal` key), starts, the
//! spill files a producer's [`JobProcess`] reports, and ends are appended to a per-harness file;
//! a later harness stops what a killed one left running (only a process whose start time
//! matches) and publishes its unfinished jobs as [`JobStatus::Lost`] records of their owning
//! session, detail [`lost_detail`].

#![deny(missing_docs)]

mod error;
mod input;
mod job;
mod journal;
mod local;
mod plugin;
mod registry;
pub mod services;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use error::JobError;
pub use input::{JOB_INPUTS, JobInput, JobInputs, WAITING_POLL, WAITING_SETTLE, WaitingListener};
pub use job::{
    JobHooks, JobOutcome, JobProcess, JobSnapshot, JobStartSpec, JobStatus, KillOutcome, OutcomeStatus,
    SpillWatch,
};
pub use local::{LocalJobRegistry, OWNER_DISPOSED, SERVICE_DISPOSED, lost_detail};
pub use plugin::{CheckedJobsConfig, JobsConfig, JobsPlugin};
pub use registry::{JOBS, JobRegistry, SettledListener};
