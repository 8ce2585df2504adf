//! A scriptable producer for tests of the runtime and of its consumers (feature `testing`).

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::job::{JobHooks, JobOutcome, JobStartSpec, OutcomeStatus};

/// A producer whose reads, cancel behaviour and settlement the test drives.
#[derive(Default)]
pub struct FakeProducer {
    settle_tx: Mutex<Option<oneshot::Sender<Result<JobOutcome, String>>>>,
    reads: Mutex<VecDeque<String>>,
    cancels: Mutex<Vec<Option<String>>>,
    cancel_error: Mutex<Option<String>>,
    settle_on_cancel: Mutex<Option<JobOutcome>>,
}

impl FakeProducer {
    /// A producer with no queued reads that settles only when the test says so.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Queues one read result (reads past the queue return `""`).
    pub fn push_read(&self, text: &str) -> &Self {
        self.reads.lock().push_back(text.to_owned());
        self
    }

    /// Makes `cancel` fail with `error`.
    pub fn fail_cancel(&self, error: &str) -> &Self {
        *self.cancel_error.lock() = Some(error.to_owned());
        self
    }

    /// Makes a successful `cancel` settle the job with `outcome` (like a process dying of SIGTERM).
    pub fn settle_on_cancel(&self, outcome: JobOutcome) -> &Self {
        *self.settle_on_cancel.lock() = Some(outcome);
        self
    }

    /// Every reason `cancel` was called with, in order.
    pub fn cancels(&self) -> Vec<Option<String>> {
        self.cancels.lock().clone()
    }

    /// Resolves the producer's `done` (only the first call has an effect).
    pub fn settle(&self, outcome: Result<JobOutcome, String>) {
        if let Some(tx) = self.settle_tx.lock().take() {
            let _ = tx.send(outcome);
        }
    }

    /// Settles `completed` with `detail`.
    pub fn complete(&self, detail: &str) {
        self.settle(Ok(JobOutcome::new(OutcomeStatus::Completed, detail)));
    }

    /// Hooks for a stream job (`stream`) or a final-output job.
    pub fn hooks(self: &Arc<Self>, stream: bool) -> JobHooks {
        let (tx, rx) = oneshot::channel();
        *self.settle_tx.lock() = Some(tx);
        let cancel_me = Arc::clone(self);
        let read_me = Arc::clone(self);
        JobHooks {
            cancel: Box::new(move |reason| {
                cancel_me.cancels.lock().push(reason);
                if let Some(error) = cancel_me.cancel_error.lock().clone() {
                    return Err(error);
                }
                if let Some(outcome) = cancel_me.settle_on_cancel.lock().clone() {
                    cancel_me.settle(Ok(outcome));
                }
                Ok(())
            }),
            done: Box::pin(async move { rx.await.unwrap_or_else(|_| Err("producer dropped".to_owned())) }),
            read_output: stream.then(|| {
                Box::new(move || read_me.reads.lock().pop_front().unwrap_or_default())
                    as Box<dyn Fn() -> String + Send + Sync>
            }),
            process: None,
        }
    }

    /// A start spec running this producer as a stream job.
    pub fn spec(
        self: &Arc<Self>,
        kind: &str,
        label: &str,
        owner: Option<Arc<dsh_core::Agent>>,
    ) -> JobStartSpec {
        self.spec_with(kind, label, owner, true)
    }

    /// A start spec running this producer, as a stream job or a final-output job.
    pub fn spec_with(
        self: &Arc<Self>,
        kind: &str,
        label: &str,
        owner: Option<Arc<dsh_core::Agent>>,
        stream: bool,
    ) -> JobStartSpec {
        let me = Arc::clone(self);
        JobStartSpec {
            kind: kind.to_owned(),
            label: label.to_owned(),
            owner,
            output_limit_bytes: None,
            run: Box::new(move || Ok(me.hooks(stream))),
        }
    }
}
