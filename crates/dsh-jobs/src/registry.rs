//! The `jobs` service seam.

use std::sync::Arc;

use dsh_core::{AbortSignal, Agent, Disposer, ServiceKey};
use futures::future::BoxFuture;

use crate::error::JobError;
use crate::job::{JobSnapshot, JobStartSpec, KillOutcome};

/// Service key of the job registry.
pub const JOBS: ServiceKey<Arc<dyn JobRegistry>> = ServiceKey::new("jobs");

/// A completion listener: the settled snapshot and the exact owner instance captured at start.
pub type SettledListener = Arc<dyn Fn(&JobSnapshot, Option<&Arc<Agent>>) + Send + Sync>;

/// The background job runtime. Errors are [`JobError`]s; their `Display` is the exact message (pinned by tests).
pub trait JobRegistry: Send + Sync {
    /// Preflights, calls `spec.run`, and publishes the job; returns its id `<kind>-<n>`.
    fn start(&self, spec: JobStartSpec) -> Result<String, JobError>;
    /// Whether jobs of a dead harness can come back as `lost` (the registry keeps a journal).
    fn journaled(&self) -> bool {
        false
    }
    /// The caller's own jobs plus every unowned job, in registration order (terminal ones too).
    fn list(&self, caller: Option<&Arc<Agent>>) -> Vec<JobSnapshot>;
    /// A snapshot, with no side effects.
    fn get(&self, id: &str, caller: Option<&Arc<Agent>>) -> Result<JobSnapshot, JobError>;
    /// Stream jobs: the output since the previous read (consuming). Final-output jobs: `""`
    /// while live, the outcome's output after settlement (repeatable). Marks a terminal job reported.
    fn read(&self, id: &str, caller: Option<&Arc<Agent>>) -> Result<(String, JobSnapshot), JobError>;
    /// Forwards cancellation (a throwing cancel propagates and changes nothing) and marks the
    /// job `stopping` and reported; a terminal job is only marked reported.
    fn kill(
        &self,
        id: &str,
        caller: Option<&Arc<Agent>>,
        reason: Option<String>,
    ) -> Result<KillOutcome, JobError>;
    /// Waits up to `timeout_ms` for settlement; a timeout returns the live snapshot untouched.
    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout_ms: f64,
        caller: Option<&'a Arc<Agent>>,
        signal: Option<AbortSignal>,
    ) -> BoxFuture<'a, Result<JobSnapshot, JobError>>;
    /// A job controller (the job tools) serving every owner; start() refuses owners when none is attached.
    fn attach_controller(&self) -> Disposer;
    /// Completion listeners, called at settlement with the settled snapshot and the exact owner instance.
    fn on_settled(&self, listener: SettledListener) -> Disposer;
    /// Service teardown: cancel with reason `jobs service disposed`, await, clear.
    fn dispose(&self) -> BoxFuture<'_, ()>;
}
