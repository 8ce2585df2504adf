//! Input to running jobs: the jobs whose owners may write to their stdin (`job_input`), and
//! whether one is waiting for input right now.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use dsh_core::ServiceKey;
use parking_lot::Mutex;

/// What `job_input` can do to a running job.
pub trait JobInput: Send + Sync {
    /// Writes `bytes` to the job's stdin; the error says why it could not.
    fn write(&self, bytes: &[u8]) -> Result<(), String>;
    /// Closes the job's stdin (it reads end of file); `true` if it was open.
    fn close(&self) -> bool;
    /// Sends the job's process group `SIGINT` (`Ctrl-C`); `true` if delivered.
    fn interrupt(&self) -> bool;
    /// Whether the job is blocked right now reading the stdin its owner writes (the kernel's
    /// account, not a guess from its output).
    fn waiting(&self) -> bool;
    /// The job's latest line of output, when known.
    fn latest_line(&self) -> Option<String>;
}

/// The jobs that take input, by job id. The starter keeps each [`JobInput`] alive for the
/// job's life; this registry only holds weak references.
#[derive(Default)]
pub struct JobInputs {
    inputs: Mutex<HashMap<String, Weak<dyn JobInput>>>,
}

impl std::fmt::Debug for JobInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobInputs").field("jobs", &self.inputs.lock().len()).finish()
    }
}

impl JobInputs {
    /// Registers the input of job `id`.
    pub fn register(&self, id: &str, input: &Arc<dyn JobInput>) {
        let mut inputs = self.inputs.lock();
        inputs.retain(|_, input| input.strong_count() > 0);
        inputs.insert(id.to_owned(), Arc::downgrade(input));
    }

    /// The input of job `id`, while the job lives and takes input.
    pub fn get(&self, id: &str) -> Option<Arc<dyn JobInput>> {
        self.inputs.lock().get(id).and_then(Weak::upgrade)
    }

    /// Whether job `id` is waiting for input right now.
    pub fn waiting(&self, id: &str) -> bool {
        self.get(id).is_some_and(|input| input.waiting())
    }
}

/// The service key of the job input registry, provided when job input is enabled
/// (`[tool-jobs] input = true`). Background starters look it up at start: when present, a
/// job's stdin stays a pipe its owner writes through `job_input`.
pub const JOB_INPUTS: ServiceKey<Arc<JobInputs>> = ServiceKey::new("jobInputs");
