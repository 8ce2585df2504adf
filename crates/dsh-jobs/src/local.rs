//! The in-process job registry.
//!
//! One record per published job, kept in registration order. Producers' `done` futures are
//! driven by a task per job; settlement is first-wins, so a teardown force-failure survives a
//! late producer outcome. Completion listeners run last, outside the lock, because a listener
//! may open a model turn synchronously: every other observer must already see the record.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dsh_core::json::MAX_SAFE_INTEGER;
use dsh_core::{AGENTS, AbortSignal, Agent, Disposer, MAX_TIMER_DELAY_MS, WeakContext};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::{JobError, json_number_text};
use crate::job::{JobOutcome, JobSnapshot, JobStartSpec, JobStatus, KillOutcome, OutcomeStatus};
use crate::journal::{Journal, LostJob};
use crate::registry::{JobRegistry, SettledListener};

type Cancel = Arc<dyn Fn(Option<String>) -> Result<(), String> + Send + Sync>;
type Reader = Arc<dyn Fn() -> String + Send + Sync>;

/// The reason teardown forwards to an owner's live jobs.
pub const OWNER_DISPOSED: &str = "owner disposed";
/// The reason service teardown forwards to every live job.
pub const SERVICE_DISPOSED: &str = "jobs service disposed";

/// The detail of a `lost` job: the harness that ran it ended before it settled.
const LOST: &str = "the harness that ran it ended";

/// The detail of a `lost` job (exact, pinned by tests):
/// `the harness that ran it ended; full output: <path>[, <path>]` when its process kept spill
/// files, else `the harness that ran it ended; its output was not kept`.
pub fn lost_detail(spills: &[PathBuf]) -> String {
    if spills.is_empty() {
        return format!("{LOST}; its output was not kept");
    }
    let paths: Vec<String> = spills.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    format!("{LOST}; full output: {}", paths.join(", "))
}

/// Where a `lost` job came from: its owner's session id, the dead harness's journal and the
/// id it had there.
struct LostMark {
    owner_session: Option<String>,
    origin: PathBuf,
    original_id: String,
}

struct Record {
    id: String,
    kind: String,
    label: String,
    output_limit_bytes: Option<f64>,
    owner: Option<Arc<Agent>>,
    cancel: Cancel,
    read_output: Option<Reader>,
    status: JobStatus,
    detail: Option<String>,
    output: Option<String>,
    started_at: u64,
    finished_at: Option<u64>,
    reported: bool,
    /// Pending `wait` calls. A settlement while any is pending defers the completion
    /// listeners until the last of them ends: one that reports the end marks the job
    /// reported first (no notice); one that was cancelled does not (the notice goes out).
    waiters: usize,
    /// The settlement's listeners wait for the pending waiters to end.
    listeners_deferred: bool,
    /// Carries the settled snapshot once terminal.
    settled: watch::Sender<Option<JobSnapshot>>,
    /// Set for a job a dead harness's journal left behind.
    lost: Option<LostMark>,
}

impl Record {
    fn snapshot(&self) -> JobSnapshot {
        JobSnapshot {
            id: self.id.clone(),
            kind: self.kind.clone(),
            label: self.label.clone(),
            output_limit_bytes: self.output_limit_bytes,
            owner_session: match &self.lost {
                Some(lost) => lost.owner_session.clone(),
                None => self.owner.as_ref().map(|o| o.id().to_owned()),
            },
            status: self.status,
            detail: self.detail.clone(),
            started_at: self.started_at,
            finished_at: self.finished_at,
            reported: self.reported,
        }
    }

    /// The access fence: owned jobs are reachable only from the owner's session id; a lost
    /// job of another session is not even named.
    fn check_access(&self, caller: Option<&Arc<Agent>>) -> Result<(), JobError> {
        if !self.lost_visible_to(caller) {
            return Err(JobError::UnknownJob(self.id.clone()));
        }
        match &self.owner {
            Some(owner) if caller.map(|c| c.id()) != Some(owner.id()) => {
                Err(JobError::OtherSession(self.id.clone()))
            }
            _ => Ok(()),
        }
    }

    /// False only for a lost job whose owning session is not the caller's.
    fn lost_visible_to(&self, caller: Option<&Arc<Agent>>) -> bool {
        match &self.lost {
            Some(LostMark { owner_session: Some(owner), .. }) => caller.is_some_and(|c| c.id() == owner),
            _ => true,
        }
    }

    /// Marks the job reported; a lost one tells the journal (its dead journal may go).
    fn mark_reported(&mut self, journal: Option<&Journal>) {
        if std::mem::replace(&mut self.reported, true) {
            return;
        }
        if let (Some(lost), Some(journal)) = (&self.lost, journal) {
            journal.reported(&lost.origin, &lost.original_id);
        }
    }

    fn owned_by(&self, owner: Option<&Arc<Agent>>) -> bool {
        match (&self.owner, owner) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// An owner whose lifecycle carries our teardown hook.
struct OwnerHook {
    agent: Weak<Agent>,
    hook: u64,
}

#[derive(Default)]
struct State {
    records: Vec<Record>,
    counters: HashMap<String, u64>,
    /// Admission slots taken by starts whose `run` is in progress, per owner bucket.
    reserved: HashMap<usize, u64>,
    listeners: Vec<(u64, SettledListener)>,
    listeners_closed: bool,
    owner_hooks: HashMap<usize, OwnerHook>,
}

impl State {
    fn find(&self, id: &str) -> Result<&Record, JobError> {
        self.records.iter().find(|r| r.id == id).ok_or_else(|| JobError::UnknownJob(id.to_owned()))
    }
    fn find_mut(&mut self, id: &str) -> Result<&mut Record, JobError> {
        self.records.iter_mut().find(|r| r.id == id).ok_or_else(|| JobError::UnknownJob(id.to_owned()))
    }
}

struct Inner {
    limit: u64,
    ctx: Option<WeakContext>,
    controllers: AtomicUsize,
    next_listener: AtomicU64,
    state: Mutex<State>,
    /// The crash-safe journal, when the registry keeps one.
    journal: Option<Journal>,
}

/// The local job registry (provider of the `jobs` service).
#[derive(Clone)]
pub struct LocalJobRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LocalJobRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalJobRegistry").field("limit", &self.inner.limit).finish_non_exhaustive()
    }
}

/// The admission bucket of an owner: the exact instance, or the shared unowned bucket (0).
fn bucket(owner: Option<&Arc<Agent>>) -> usize {
    owner.map_or(0, |o| Arc::as_ptr(o) as usize)
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Runs a future to completion off the caller: on the current tokio runtime when there is one.
fn spawn_detached(fut: BoxFuture<'static, ()>) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(fut);
        }
        Err(_) => {
            std::thread::spawn(move || futures::executor::block_on(fut));
        }
    }
}

impl LocalJobRegistry {
    /// A registry admitting at most `max_concurrent_jobs_per_owner` running or stopping jobs
    /// per exact owner (unowned jobs share one bucket). `ctx` is where the agents registry is
    /// looked up when a start names an owner; without it owned starts are refused.
    pub fn new(max_concurrent_jobs_per_owner: u64, ctx: Option<WeakContext>) -> Self {
        Self {
            inner: Arc::new(Inner {
                limit: max_concurrent_jobs_per_owner,
                ctx,
                controllers: AtomicUsize::new(0),
                next_listener: AtomicU64::new(1),
                state: Mutex::new(State::default()),
                journal: None,
            }),
        }
    }

    /// [`LocalJobRegistry::new`] keeping a crash-safe journal in `journal_dir` (see the
    /// `journal` module): jobs that a dead harness's journal left unfinished are stopped if
    /// their process is still really alive and become `lost` records of their owning session
    /// (with their original ids where free). Journals of dead harnesses older than `retention`
    /// are removed unread. Fails only when the journal cannot be created.
    pub fn with_journal(
        max_concurrent_jobs_per_owner: u64,
        ctx: Option<WeakContext>,
        journal_dir: &Path,
        retention: Option<Duration>,
    ) -> std::io::Result<Self> {
        let (journal, lost) = Journal::open(journal_dir, retention)?;
        let registry = Self {
            inner: Arc::new(Inner {
                limit: max_concurrent_jobs_per_owner,
                ctx,
                controllers: AtomicUsize::new(0),
                next_listener: AtomicU64::new(1),
                state: Mutex::new(State::default()),
                journal: Some(journal),
            }),
        };
        registry.inner.adopt(lost);
        Ok(registry)
    }

    /// The admission limit per owner.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }
}

impl Inner {
    /// Publishes the lost jobs of dead harnesses as terminal `lost` records.
    fn adopt(&self, lost: Vec<LostJob>) {
        let mut state = self.state.lock();
        for job in lost {
            let number = job
                .id
                .strip_prefix(&format!("{}-", job.kind))
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|_| !state.records.iter().any(|r| r.id == job.id));
            let counter = state.counters.entry(job.kind.clone()).or_insert(0);
            let id = match number {
                Some(n) => {
                    *counter = (*counter).max(n);
                    job.id.clone()
                }
                None => {
                    *counter += 1;
                    format!("{}-{counter}", job.kind)
                }
            };
            let (settled, _) = watch::channel(None);
            let record = Record {
                id,
                kind: job.kind,
                label: job.label,
                output_limit_bytes: None,
                owner: None,
                cancel: Arc::new(|_| Ok(())),
                read_output: None,
                status: JobStatus::Lost,
                detail: Some(lost_detail(&job.spills)),
                output: Some(String::new()),
                started_at: job.started_at,
                finished_at: Some(now_ms()),
                reported: false,
                waiters: 0,
                listeners_deferred: false,
                settled,
                lost: Some(LostMark { owner_session: job.owner, origin: job.origin, original_id: job.id }),
            };
            record.settled.send_replace(Some(record.snapshot()));
            state.records.push(record);
        }
    }

    /// Step 5 of preflight: the owner must be the live registered instance; the first job of
    /// an owner ties teardown of its jobs to the owner's lifecycle.
    fn ensure_owner_cleanup(self: &Arc<Self>, owner: &Arc<Agent>) -> Result<(), JobError> {
        let agents = self.ctx.as_ref().and_then(|ctx| ctx.get(AGENTS)).ok_or(JobError::NoAgentRegistry)?;
        if !agents.is_registered(owner) {
            return Err(JobError::OwnerNotLive(owner.id().to_owned()));
        }
        let key = bucket(Some(owner));
        let mut state = self.state.lock();
        if state
            .owner_hooks
            .get(&key)
            .is_some_and(|h| h.agent.upgrade().is_some_and(|a| Arc::ptr_eq(&a, owner)))
        {
            return Ok(());
        }
        let registry = Arc::downgrade(self);
        let hook = owner.on_dispose(Box::new(move || {
            Box::pin(async move {
                if let Some(inner) = registry.upgrade() {
                    inner.state.lock().owner_hooks.remove(&key);
                    inner.dispose_owned(key).await;
                }
            })
        }));
        state.owner_hooks.insert(key, OwnerHook { agent: Arc::downgrade(owner), hook });
        Ok(())
    }

    fn preflight(self: &Arc<Self>, spec: &JobStartSpec) -> Result<usize, JobError> {
        if self.controllers.load(Ordering::Acquire) == 0 {
            return Err(JobError::NoController);
        }
        if spec.kind.is_empty() {
            return Err(JobError::EmptyKind);
        }
        if spec.label.is_empty() {
            return Err(JobError::EmptyLabel);
        }
        if let Some(limit) = spec.output_limit_bytes
            && !(limit.is_finite() && limit.fract() == 0.0 && limit > 0.0 && limit <= MAX_SAFE_INTEGER)
        {
            return Err(JobError::InvalidOutputLimit(json_number_text(limit)));
        }
        if let Some(owner) = &spec.owner {
            self.ensure_owner_cleanup(owner)?;
        }
        let key = bucket(spec.owner.as_ref());
        let mut state = self.state.lock();
        let active =
            state.records.iter().filter(|r| r.owned_by(spec.owner.as_ref()) && r.status.is_active()).count()
                as u64;
        let reserved = state.reserved.get(&key).copied().unwrap_or(0);
        if active + reserved >= self.limit {
            return Err(JobError::LimitReached(self.limit));
        }
        *state.reserved.entry(key).or_insert(0) += 1;
        Ok(key)
    }

    fn release_reservation(&self, state: &mut State, key: usize) {
        if let Some(n) = state.reserved.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.reserved.remove(&key);
            }
        }
    }

    /// Records the first outcome; later ones are ignored. Listeners run after the lock is
    /// released — at once, or when the last pending waiter ends (see `Record::waiters`).
    fn settle(&self, id: &str, outcome: Result<JobOutcome, String>) {
        let outcome = outcome.unwrap_or_else(|error| {
            tracing::warn!("jobs: job {id} producer done future failed: {error}");
            JobOutcome { status: OutcomeStatus::Failed, detail: Some(error), output: None }
        });
        let notice = {
            let mut state = self.state.lock();
            let Ok(record) = state.find_mut(id) else { return };
            if record.status.is_terminal() {
                return;
            }
            record.status = outcome.status.into();
            record.detail = outcome.detail;
            record.output = outcome.output;
            record.finished_at = Some(now_ms());
            if let Some(journal) = &self.journal {
                journal.ended(id);
            }
            let deferred = record.waiters > 0 && !record.reported;
            record.listeners_deferred = deferred;
            record.settled.send_replace(Some(record.snapshot()));
            if deferred {
                return;
            }
            Self::settlement(&state, id)
        };
        Self::notify(notice);
    }

    /// The listeners to tell about `id`'s settlement, with what they are told.
    fn settlement(state: &State, id: &str) -> Option<Settlement> {
        let record = state.find(id).ok()?;
        let listeners: Vec<SettledListener> = if state.listeners_closed {
            Vec::new()
        } else {
            state.listeners.iter().map(|(_, l)| Arc::clone(l)).collect()
        };
        Some((record.snapshot(), record.owner.clone(), listeners))
    }

    /// Runs the settlement listeners (outside the registry lock).
    fn notify(settlement: Option<Settlement>) {
        let Some((snapshot, owner, listeners)) = settlement else { return };
        for listener in listeners {
            let called = std::panic::catch_unwind(AssertUnwindSafe(|| listener(&snapshot, owner.as_ref())));
            if called.is_err() {
                tracing::warn!("jobs: completion listener panicked for {}", snapshot.id);
            }
        }
    }

    /// Marks each live job reported and forwards `reason`; a throwing cancel force-fails the
    /// record so teardown cannot hang on it.
    fn cancel_for_teardown(&self, ids: &[String], reason: &str) {
        for id in ids {
            let cancel = {
                let mut state = self.state.lock();
                let Ok(record) = state.find_mut(id) else { continue };
                if record.status.is_terminal() {
                    continue;
                }
                record.reported = true;
                Arc::clone(&record.cancel)
            };
            match cancel(Some(reason.to_owned())) {
                Ok(()) => {
                    let mut state = self.state.lock();
                    if let Ok(record) = state.find_mut(id)
                        && !record.status.is_terminal()
                    {
                        record.status = JobStatus::Stopping;
                    }
                }
                Err(error) => {
                    tracing::warn!(
                        "jobs: cancel of {id} threw during teardown; job record forced failed and work may be orphaned: {error}"
                    );
                    self.settle(
                        id,
                        Ok(JobOutcome::new(
                            OutcomeStatus::Failed,
                            format!("cancel threw during teardown; work may be orphaned: {error}"),
                        )),
                    );
                }
            }
        }
    }

    /// Cancels the given jobs, awaits their settlement, then removes their records.
    async fn teardown(&self, ids: Vec<String>, reason: &str) {
        self.cancel_for_teardown(&ids, reason);
        let receivers: Vec<watch::Receiver<Option<JobSnapshot>>> = {
            let state = self.state.lock();
            state.records.iter().filter(|r| ids.contains(&r.id)).map(|r| r.settled.subscribe()).collect()
        };
        for mut rx in receivers {
            // A closed channel means the record is gone already.
            let _ = rx.wait_for(Option::is_some).await;
        }
        // Listeners a pending waiter deferred are told now: the waiter will find no record.
        let deferred: Vec<Option<Settlement>> = {
            let mut state = self.state.lock();
            let deferred = state
                .records
                .iter()
                .filter(|r| r.listeners_deferred && ids.contains(&r.id))
                .map(|r| Self::settlement(&state, &r.id))
                .collect();
            state.records.retain(|r| !ids.contains(&r.id));
            deferred
        };
        deferred.into_iter().for_each(Self::notify);
    }

    /// Owner teardown: every job of that exact owner.
    async fn dispose_owned(&self, key: usize) {
        let ids: Vec<String> = {
            let state = self.state.lock();
            state
                .records
                .iter()
                .filter(|r| r.owner.is_some() && bucket(r.owner.as_ref()) == key)
                .map(|r| r.id.clone())
                .collect()
        };
        self.teardown(ids, OWNER_DISPOSED).await;
    }

    async fn dispose_all(&self) {
        let (ids, hooks) = {
            let mut state = self.state.lock();
            state.listeners_closed = true;
            state.listeners.clear();
            let ids: Vec<String> = state.records.iter().map(|r| r.id.clone()).collect();
            let hooks: Vec<OwnerHook> = state.owner_hooks.drain().map(|(_, h)| h).collect();
            (ids, hooks)
        };
        self.teardown(ids, SERVICE_DISPOSED).await;
        self.state.lock().records.clear();
        if let Some(journal) = &self.journal {
            journal.close();
        }
        for hook in hooks {
            if let Some(agent) = hook.agent.upgrade() {
                agent.cancel_on_dispose(hook.hook);
            }
        }
    }

    fn mark_reported_if_terminal(&self, id: &str) -> Option<JobSnapshot> {
        self.report_if_terminal(id, None).ok().flatten()
    }

    /// A waiter's report: a terminal job is marked reported — unless `signal` fired first, for
    /// reporting the end is the waiting call's point of no return (sealed, under the lock, so
    /// the call cannot be cancelled after it reported). `Ok(None)`: the record is gone.
    fn report_if_terminal(
        &self,
        id: &str,
        signal: Option<&AbortSignal>,
    ) -> Result<Option<JobSnapshot>, JobError> {
        let mut state = self.state.lock();
        let Ok(record) = state.find_mut(id) else { return Ok(None) };
        if record.status.is_terminal() {
            if signal.is_some_and(|s| !s.seal()) {
                return Err(JobError::WaitAborted);
            }
            record.mark_reported(self.journal.as_ref());
        }
        Ok(Some(record.snapshot()))
    }

    /// A waiter ends; the last one runs the listeners its settlement deferred.
    fn unwait(&self, id: &str) {
        let notice = {
            let mut state = self.state.lock();
            let Ok(record) = state.find_mut(id) else { return };
            record.waiters = record.waiters.saturating_sub(1);
            if record.waiters > 0 || !std::mem::take(&mut record.listeners_deferred) {
                return;
            }
            Self::settlement(&state, id)
        };
        Self::notify(notice);
    }
}

/// A settled job's snapshot and owner, and the listeners to tell.
type Settlement = (JobSnapshot, Option<Arc<Agent>>, Vec<SettledListener>);

/// Unregisters a pending waiter however the wait ends (including being dropped).
struct WaiterGuard<'a> {
    inner: &'a Inner,
    id: &'a str,
    armed: bool,
}

impl WaiterGuard<'_> {
    fn release(&mut self) {
        if std::mem::take(&mut self.armed) {
            self.inner.unwait(self.id);
        }
    }
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

impl JobRegistry for LocalJobRegistry {
    fn journaled(&self) -> bool {
        self.inner.journal.is_some()
    }

    fn start(&self, spec: JobStartSpec) -> Result<String, JobError> {
        let key = self.inner.preflight(&spec)?;
        let hooks = match (spec.run)() {
            Ok(hooks) => hooks,
            Err(error) => {
                let mut state = self.inner.state.lock();
                self.inner.release_reservation(&mut state, key);
                return Err(JobError::StartFailed(error));
            }
        };
        let process = hooks.process;
        let id = {
            let mut state = self.inner.state.lock();
            self.inner.release_reservation(&mut state, key);
            let counter = state.counters.entry(spec.kind.clone()).or_insert(0);
            *counter += 1;
            let id = format!("{}-{}", spec.kind, counter);
            let (settled, _) = watch::channel(None);
            state.records.push(Record {
                id: id.clone(),
                kind: spec.kind,
                label: spec.label,
                output_limit_bytes: spec.output_limit_bytes,
                owner: spec.owner,
                cancel: Arc::from(hooks.cancel),
                read_output: hooks.read_output.map(Arc::from),
                status: JobStatus::Running,
                detail: None,
                output: None,
                started_at: now_ms(),
                finished_at: None,
                reported: false,
                waiters: 0,
                listeners_deferred: false,
                settled,
                lost: None,
            });
            if let (Some(journal), Some(record)) = (&self.inner.journal, state.records.last()) {
                let owner = record.owner.as_ref().map(|o| o.id());
                let identity = process.as_ref().map(|p| (p.pid, p.pgid, p.start_time));
                journal.started(&id, &record.kind, &record.label, owner, record.started_at, identity);
            }
            id
        };
        // Spill files a process opens are journaled as they appear.
        if let (Some(_), Some(spills)) = (&self.inner.journal, process.and_then(|p| p.spills)) {
            let inner = Arc::downgrade(&self.inner);
            let spill_id = id.clone();
            spills(Box::new(move |path: PathBuf| {
                if let Some(journal) = inner.upgrade().as_ref().and_then(|i| i.journal.as_ref()) {
                    journal.spilled(&spill_id, &path);
                }
            }));
        }
        let inner = Arc::clone(&self.inner);
        let settle_id = id.clone();
        let done = hooks.done;
        spawn_detached(Box::pin(async move {
            let outcome = done.await;
            inner.settle(&settle_id, outcome);
        }));
        Ok(id)
    }

    fn list(&self, caller: Option<&Arc<Agent>>) -> Vec<JobSnapshot> {
        let session = caller.map(|c| c.id());
        let mut state = self.inner.state.lock();
        let journal = self.inner.journal.as_ref();
        state
            .records
            .iter_mut()
            .filter(|r| r.owner.as_ref().is_none_or(|o| Some(o.id()) == session) && r.lost_visible_to(caller))
            .map(|r| {
                // Listing a lost job is how its owner learns of it: that reports it.
                if r.lost.is_some() {
                    r.mark_reported(journal);
                }
                r.snapshot()
            })
            .collect()
    }

    fn get(&self, id: &str, caller: Option<&Arc<Agent>>) -> Result<JobSnapshot, JobError> {
        let state = self.inner.state.lock();
        let record = state.find(id)?;
        record.check_access(caller)?;
        Ok(record.snapshot())
    }

    fn read(&self, id: &str, caller: Option<&Arc<Agent>>) -> Result<(String, JobSnapshot), JobError> {
        let (reader, fallback) = {
            let state = self.inner.state.lock();
            let record = state.find(id)?;
            record.check_access(caller)?;
            let fallback = match (&record.read_output, record.status.is_terminal()) {
                (Some(_), _) | (None, false) => String::new(),
                (None, true) => record.output.clone().unwrap_or_default(),
            };
            (record.read_output.clone(), (fallback, record.snapshot()))
        };
        // The producer's read runs outside the lock: it may be slow or look at the registry.
        let text = match reader {
            Some(read) => read(),
            None => fallback.0,
        };
        // The status reported is the one taken before the read: a job terminal by then has no
        // output left after this read, while one that settles during the read reports its end
        // (with anything written meanwhile) on the next read, never over undelivered output.
        let snapshot = if fallback.1.status.is_terminal() {
            self.inner.mark_reported_if_terminal(id).unwrap_or(fallback.1)
        } else {
            fallback.1
        };
        Ok((text, snapshot))
    }

    fn kill(
        &self,
        id: &str,
        caller: Option<&Arc<Agent>>,
        reason: Option<String>,
    ) -> Result<KillOutcome, JobError> {
        let cancel = {
            let mut state = self.inner.state.lock();
            let record = state.find_mut(id)?;
            record.check_access(caller)?;
            if record.status.is_terminal() {
                record.mark_reported(self.inner.journal.as_ref());
                return Ok(KillOutcome::AlreadyFinished);
            }
            Arc::clone(&record.cancel)
        };
        cancel(reason).map_err(JobError::CancelFailed)?;
        let mut state = self.inner.state.lock();
        if let Ok(record) = state.find_mut(id) {
            if !record.status.is_terminal() {
                record.status = JobStatus::Stopping;
            }
            record.reported = true;
        }
        Ok(KillOutcome::Requested)
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout_ms: f64,
        caller: Option<&'a Arc<Agent>>,
        signal: Option<AbortSignal>,
    ) -> BoxFuture<'a, Result<JobSnapshot, JobError>> {
        Box::pin(async move {
            let mut settled = {
                let mut state = self.inner.state.lock();
                let record = state.find_mut(id)?;
                record.check_access(caller)?;
                if !(timeout_ms.is_finite() && timeout_ms > 0.0) {
                    return Err(JobError::InvalidWaitTimeout(json_number_text(timeout_ms)));
                }
                if record.status.is_terminal() {
                    if signal.as_ref().is_some_and(|s| !s.seal()) {
                        return Err(JobError::WaitAborted);
                    }
                    record.mark_reported(self.inner.journal.as_ref());
                    return Ok(record.snapshot());
                }
                if signal.as_ref().is_some_and(AbortSignal::is_aborted) {
                    return Err(JobError::WaitAborted);
                }
                record.waiters += 1;
                record.settled.subscribe()
            };
            let mut guard = WaiterGuard { inner: &self.inner, id, armed: true };
            // Timers beyond the platform bound are clamped to it rather than firing early.
            let delay = Duration::from_secs_f64(timeout_ms.min(MAX_TIMER_DELAY_MS) / 1000.0);
            let aborted = async {
                match &signal {
                    Some(signal) => signal.aborted().await,
                    None => futures::future::pending().await,
                }
            };
            let last_known = tokio::select! {
                changed = settled.wait_for(Option::is_some) => changed.ok().and_then(|s| s.clone()),
                _ = tokio::time::sleep(delay) => None,
                _ = aborted => {
                    guard.release();
                    return Err(JobError::WaitAborted);
                }
            };
            // Reported before this waiter ends, so listeners it deferred see the report.
            let reported = self.inner.report_if_terminal(id, signal.as_ref());
            guard.release();
            match reported? {
                Some(snapshot) => Ok(snapshot),
                // Torn down while we waited: report what settlement recorded.
                None => last_known.ok_or_else(|| JobError::UnknownJob(id.to_owned())),
            }
        })
    }

    fn attach_controller(&self) -> Disposer {
        self.inner.controllers.fetch_add(1, Ordering::AcqRel);
        let inner = Arc::clone(&self.inner);
        Disposer::new(move || {
            inner.controllers.fetch_sub(1, Ordering::AcqRel);
        })
    }

    fn on_settled(&self, listener: SettledListener) -> Disposer {
        let id = self.inner.next_listener.fetch_add(1, Ordering::Relaxed);
        self.inner.state.lock().listeners.push((id, listener));
        let inner = Arc::downgrade(&self.inner);
        Disposer::new(move || {
            if let Some(inner) = inner.upgrade() {
                inner.state.lock().listeners.retain(|(i, _)| *i != id);
            }
        })
    }

    fn dispose(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.inner.dispose_all())
    }
}
