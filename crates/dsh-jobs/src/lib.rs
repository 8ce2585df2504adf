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

#![deny(missing_docs)]

mod error;
mod job;
mod local;
mod plugin;
mod registry;
pub mod services;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use error::JobError;
pub use job::{JobHooks, JobOutcome, JobSnapshot, JobStartSpec, JobStatus, KillOutcome, OutcomeStatus};
pub use local::{LocalJobRegistry, OWNER_DISPOSED, SERVICE_DISPOSED};
pub use plugin::{JobsConfig, JobsPlugin};
pub use registry::{JOBS, JobRegistry, SettledListener};
