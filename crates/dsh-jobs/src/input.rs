//! Input to running jobs: the jobs whose owners may write to their stdin (`job_input`),
//! whether one is waiting for input right now, and one notice to the owner when a job starts
//! waiting.
//!
//! A job that takes input is watched while it runs ([`WAITING_POLL`] apart, only with a
//! [`WaitingListener`] set, and only for an owned job): once it has waited for input for
//! [`WAITING_SETTLE`] without printing anything new, its owner is told once. That *waiting
//! episode* ends when the job is seen not waiting or its owner writes to it; the next one may
//! be told again. An episode the owner has already seen (a job tool showed the job
//! `waiting for input`) is not told.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use dsh_core::{Agent, ServiceKey};
use parking_lot::Mutex;

/// How far apart a running job that takes input is looked at.
pub const WAITING_POLL: Duration = Duration::from_millis(250);

/// How long a job waits for input, printing nothing new, before its owner is told.
pub const WAITING_SETTLE: Duration = Duration::from_millis(400);

/// What `job_input` can do to a running job.
pub trait JobInput: Send + Sync {
    /// Writes `bytes` to the job's stdin; the error says why it could not.
    fn write(&self, bytes: &[u8]) -> Result<(), String>;
    /// Closes the job's stdin (it reads end of file); on a terminal, types `Ctrl-D` instead.
    /// `true` if it was open.
    fn close(&self) -> bool;
    /// `Ctrl-C`: interrupts the job (`SIGINT` to its foreground processes); `true` if delivered.
    fn interrupt(&self) -> bool;
    /// Whether the job is blocked right now reading the stdin its owner writes (the kernel's
    /// account, not a guess from its output).
    fn waiting(&self) -> bool;
    /// The job's latest line of output, when known.
    fn latest_line(&self) -> Option<String>;
    /// Whether the job runs on a terminal: its input is typed (`Enter` is `\r`). The default
    /// is a pipe.
    fn terminal(&self) -> bool {
        false
    }
}

/// Told when a job starts waiting for input: the job id, its latest line of output, and its
/// owner (the only one told).
pub type WaitingListener = Arc<dyn Fn(&str, Option<String>, &Arc<Agent>) + Send + Sync>;

/// Where a job is in its current waiting episode.
#[derive(Default)]
struct Episode {
    /// Since when the job has waited with this latest line (the settle period's start).
    since: Option<(Instant, Option<String>)>,
    /// The episode was told (or seen by the owner).
    told: bool,
}

struct Entry {
    input: Weak<dyn JobInput>,
    episode: Episode,
}

/// The jobs that take input, by job id. The starter keeps each [`JobInput`] alive for the
/// job's life; this registry only holds weak references.
#[derive(Default)]
pub struct JobInputs {
    inputs: Mutex<HashMap<String, Entry>>,
    listener: Option<WaitingListener>,
}

impl std::fmt::Debug for JobInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobInputs").field("jobs", &self.inputs.lock().len()).finish()
    }
}

impl JobInputs {
    /// A registry that tells `listener` when an owned job starts waiting for input.
    pub fn with_listener(listener: WaitingListener) -> Self {
        Self { inputs: Mutex::new(HashMap::new()), listener: Some(listener) }
    }

    /// Registers the input of job `id`, owned by `owner`. With a listener, an owned job is
    /// watched while it lives (on the current tokio runtime).
    pub fn register(self: &Arc<Self>, id: &str, input: &Arc<dyn JobInput>, owner: Option<&Arc<Agent>>) {
        {
            let mut inputs = self.inputs.lock();
            inputs.retain(|_, entry| entry.input.strong_count() > 0);
            inputs.insert(id.to_owned(), Entry { input: Arc::downgrade(input), episode: Episode::default() });
        }
        if let (Some(_), Some(owner), Ok(runtime)) =
            (&self.listener, owner, tokio::runtime::Handle::try_current())
        {
            runtime.spawn(watch(
                Arc::downgrade(self),
                id.to_owned(),
                Arc::downgrade(input),
                Arc::downgrade(owner),
            ));
        }
    }

    /// The input of job `id`, while the job lives and takes input.
    pub fn get(&self, id: &str) -> Option<Arc<dyn JobInput>> {
        self.inputs.lock().get(id).and_then(|entry| entry.input.upgrade())
    }

    /// Whether job `id` is waiting for input right now.
    pub fn waiting(&self, id: &str) -> bool {
        self.get(id).is_some_and(|input| input.waiting())
    }

    /// Whether job `id` is waiting for input right now, as shown to its owner: the current
    /// waiting episode then counts as told (no notice follows for it).
    pub fn show_waiting(&self, id: &str) -> bool {
        let Some(input) = self.get(id) else { return false };
        let waiting = input.waiting();
        if waiting && let Some(entry) = self.inputs.lock().get_mut(id) {
            entry.episode.told = true;
        }
        waiting
    }

    /// The owner wrote to job `id`: its waiting episode ends (the next one may be told).
    pub fn note_input(&self, id: &str) {
        if let Some(entry) = self.inputs.lock().get_mut(id) {
            entry.episode = Episode::default();
        }
    }

    /// One look at job `id` at `now`: whether its owner is to be told now.
    fn observe(&self, id: &str, waiting: bool, line: &Option<String>, now: Instant) -> bool {
        let mut inputs = self.inputs.lock();
        let Some(entry) = inputs.get_mut(id) else { return false };
        let episode = &mut entry.episode;
        if !waiting {
            *episode = Episode::default();
            return false;
        }
        match &episode.since {
            Some((since, seen)) if seen == line => {
                if !episode.told && now.duration_since(*since) >= WAITING_SETTLE {
                    episode.told = true;
                    return true;
                }
                false
            }
            // New output restarts the settle period.
            _ => {
                episode.since = Some((now, line.clone()));
                false
            }
        }
    }
}

/// Watches one job until it ends (its input is dropped), the registry or the owner goes.
async fn watch(inputs: Weak<JobInputs>, id: String, input: Weak<dyn JobInput>, owner: Weak<Agent>) {
    loop {
        tokio::time::sleep(WAITING_POLL).await;
        let (Some(inputs), Some(input), Some(owner)) = (inputs.upgrade(), input.upgrade(), owner.upgrade())
        else {
            return;
        };
        let waiting = input.waiting();
        let line = if waiting { input.latest_line() } else { None };
        if inputs.observe(&id, waiting, &line, Instant::now())
            && let Some(listener) = &inputs.listener
        {
            listener(&id, line, &owner);
        }
    }
}

/// The service key of the job input registry, provided when job input is enabled
/// (`[tool-jobs] input = true`). Background starters look it up at start: when present, a
/// job's stdin stays a pipe its owner writes through `job_input`.
pub const JOB_INPUTS: ServiceKey<Arc<JobInputs>> = ServiceKey::new("jobInputs");

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake;

    impl JobInput for Fake {
        fn write(&self, _: &[u8]) -> Result<(), String> {
            Ok(())
        }
        fn close(&self) -> bool {
            true
        }
        fn interrupt(&self) -> bool {
            true
        }
        fn waiting(&self) -> bool {
            true
        }
        fn latest_line(&self) -> Option<String> {
            None
        }
    }

    #[test]
    fn an_episode_is_told_once_after_it_settles_and_again_after_input() {
        let inputs = Arc::new(JobInputs::default());
        let input: Arc<dyn JobInput> = Arc::new(Fake);
        inputs.register("bash-1", &input, None);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let line = |s: &str| Some(s.to_owned());
        assert!(!inputs.observe("bash-1", true, &line("a"), at(0)));
        // New output restarts the settle period.
        assert!(!inputs.observe("bash-1", true, &line("b"), at(250)));
        assert!(!inputs.observe("bash-1", true, &line("b"), at(500)));
        assert!(inputs.observe("bash-1", true, &line("b"), at(750)));
        assert!(!inputs.observe("bash-1", true, &line("b"), at(1000)), "told once");
        // Not waiting ends the episode.
        assert!(!inputs.observe("bash-1", false, &None, at(1250)));
        assert!(!inputs.observe("bash-1", true, &line("c"), at(1500)));
        assert!(inputs.observe("bash-1", true, &line("c"), at(2000)));
        // Input ends it too.
        inputs.note_input("bash-1");
        assert!(!inputs.observe("bash-1", true, &line("c"), at(2250)));
        assert!(inputs.observe("bash-1", true, &line("c"), at(2750)));
        // An episode the owner saw is not told.
        inputs.note_input("bash-1");
        assert!(inputs.show_waiting("bash-1"));
        assert!(!inputs.observe("bash-1", true, &line("c"), at(3000)));
        assert!(!inputs.observe("bash-1", true, &line("c"), at(3500)));
    }
}
