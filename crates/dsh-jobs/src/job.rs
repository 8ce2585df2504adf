//! The job vocabulary: statuses, outcomes, snapshots, and what producers hand the runtime.

use std::fmt;
use std::sync::Arc;

use dsh_core::Agent;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Where a job is in its life; the last four are terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Started and not yet settled.
    Running,
    /// Cancellation was requested; the work has not settled yet.
    Stopping,
    /// The work ended on its own (whatever its exit code).
    Completed,
    /// The work ended because it was cancelled.
    Killed,
    /// The work could not run or finish (the detail says why).
    Failed,
    /// The harness that ran the job ended (was killed) before it settled: recovered from that
    /// harness's journal by a later harness with the same home; the detail says what is left.
    Lost,
}

impl JobStatus {
    /// The wire name (`running`, `stopping`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Stopping => "stopping",
            JobStatus::Completed => "completed",
            JobStatus::Killed => "killed",
            JobStatus::Failed => "failed",
            JobStatus::Lost => "lost",
        }
    }

    /// True for `completed`, `killed`, `failed` and `lost`.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobStatus::Completed | JobStatus::Killed | JobStatus::Failed | JobStatus::Lost)
    }

    /// True for `running` and `stopping` (the statuses that occupy an admission slot).
    pub fn is_active(self) -> bool {
        !self.is_terminal()
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The terminal status a producer reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutcomeStatus {
    /// The work ended on its own (whatever its exit code).
    Completed,
    /// The work ended because it was cancelled.
    Killed,
    /// The work could not run or finish.
    Failed,
}

impl From<OutcomeStatus> for JobStatus {
    fn from(status: OutcomeStatus) -> Self {
        match status {
            OutcomeStatus::Completed => JobStatus::Completed,
            OutcomeStatus::Killed => JobStatus::Killed,
            OutcomeStatus::Failed => JobStatus::Failed,
        }
    }
}

/// How the work ended, as the producer reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// The terminal status the job settles in.
    pub status: OutcomeStatus,
    /// Short terminal detail shown in status lines (`exit code: 0`, `signal: SIGTERM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The result of a final-output job (ignored for stream jobs, which are read incrementally).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl JobOutcome {
    /// An outcome with a status and detail and no final output.
    pub fn new(status: OutcomeStatus, detail: impl Into<String>) -> Self {
        Self { status, detail: Some(detail.into()), output: None }
    }
}

/// The cancel hook: an `Err` (the producer's message) reaches `kill()` callers as
/// [`JobError::CancelFailed`](crate::JobError::CancelFailed).
pub type CancelHook = Box<dyn Fn(Option<String>) -> Result<(), String> + Send + Sync>;
/// The consuming incremental read of a stream job.
pub type ReadHook = Box<dyn Fn() -> String + Send + Sync>;

/// What a producer hands the runtime from `run()`.
pub struct JobHooks {
    /// Cancel the work (bash: `proc.kill()`); an Err reaches `kill()` callers as `JobError::CancelFailed`.
    pub cancel: CancelHook,
    /// Resolves once with the outcome; an Err is recorded as `failed` with detail = the error.
    pub done: BoxFuture<'static, Result<JobOutcome, String>>,
    /// Consuming incremental read for stream jobs; None → a final-output job.
    pub read_output: Option<ReadHook>,
    /// The process running the work, for the crash-safe job journal (see [`JobProcess`]);
    /// `None` when the work is no process of its own.
    pub process: Option<JobProcess>,
}

/// Tells an observer the path of each spill file a job's process opens (at once for one
/// already open).
pub type SpillWatch = Box<dyn FnOnce(Box<dyn Fn(std::path::PathBuf) + Send + Sync>) + Send>;

/// What the job journal records about a job's process, so that a later harness can find
/// (and stop) it when this one is killed, and point at its spill files.
pub struct JobProcess {
    /// The process id.
    pub pid: u32,
    /// Its process group (the journal only signals a group the process leads).
    pub pgid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22, clock ticks after boot); `None` when it
    /// could not be read: such a process is never signalled by a later harness.
    pub start_time: Option<u64>,
    /// Registers the spill-file observer; `None` when the process keeps no spill files.
    pub spills: Option<SpillWatch>,
}

impl fmt::Debug for JobProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobProcess")
            .field("pid", &self.pid)
            .field("pgid", &self.pgid)
            .field("start_time", &self.start_time)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for JobHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobHooks").field("stream", &self.read_output.is_some()).finish_non_exhaustive()
    }
}

/// The starter a producer hands to `start`.
pub type RunHook = Box<dyn FnOnce() -> Result<JobHooks, String> + Send>;

/// A request to start one job.
pub struct JobStartSpec {
    /// The id prefix and display kind (`bash`).
    pub kind: String,
    /// What the job is, for listings and notices (bash: the full command).
    pub label: String,
    /// The calling agent; `None` makes an unowned job, open to every caller.
    pub owner: Option<Arc<Agent>>,
    /// Byte budget for the job tools' texts about this job (bash sets none).
    pub output_limit_bytes: Option<f64>,
    /// Called once, synchronously, only after every preflight passed; an Err (the producer's
    /// message) reaches `start()` callers as `JobError::StartFailed`, and no id is consumed.
    pub run: RunHook,
}

impl fmt::Debug for JobStartSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobStartSpec")
            .field("kind", &self.kind)
            .field("label", &self.label)
            .field("owner", &self.owner.as_ref().map(|o| o.id().to_owned()))
            .field("output_limit_bytes", &self.output_limit_bytes)
            .finish_non_exhaustive()
    }
}

/// A fresh copy of one job's record. [`JobSnapshot::public_json`] is what tools return.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSnapshot {
    /// The job id (`<kind>-<n>`).
    pub id: String,
    /// The id prefix and display kind (`bash`).
    pub kind: String,
    /// What the job is, for listings and notices (bash: the full command).
    pub label: String,
    /// Byte budget for the job tools' texts about this job, as given at start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_limit_bytes: Option<f64>,
    /// The id of the owning agent; `None` for an unowned job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_session: Option<String>,
    /// Where the job is in its life.
    pub status: JobStatus,
    /// Short terminal detail (`exit code: 0`, `signal: SIGTERM`), once the producer gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Epoch milliseconds.
    pub started_at: u64,
    /// Epoch milliseconds, once terminal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
    /// Someone has already been told how the job ended (suppresses the completion notice).
    pub reported: bool,
}

impl JobSnapshot {
    /// `{id, kind, label, status, detail?, startedAt, finishedAt?}` — never `ownerSession`,
    /// `reported` or `outputLimitBytes`.
    pub fn public_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("id".into(), json!(self.id));
        out.insert("kind".into(), json!(self.kind));
        out.insert("label".into(), json!(self.label));
        out.insert("status".into(), json!(self.status.as_str()));
        if let Some(detail) = &self.detail {
            out.insert("detail".into(), json!(detail));
        }
        out.insert("startedAt".into(), json!(self.started_at));
        if let Some(finished) = self.finished_at {
            out.insert("finishedAt".into(), json!(finished));
        }
        Value::Object(out)
    }
}

/// What `kill` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillOutcome {
    /// Cancellation was forwarded to the producer; the job is `stopping` until it settles.
    Requested,
    /// The job was already terminal; nothing was cancelled.
    AlreadyFinished,
}
