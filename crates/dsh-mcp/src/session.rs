//! One MCP session = one session of the composition: its own agent (registered in `agents`),
//! its own cwd, its own jobs, its own approval answerer and notice channel.

// Logging and roots are deprecated by SEP-2577 (the session-less 2026 revision); this server
// speaks the 2025-11-25 revision, where they are current and the only channels for notices and cwd.
#![allow(deprecated)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dsh_approval::APPROVAL_HUB;
use dsh_core::{AGENTS, Agent, AgentMessage, AgentStatus, Context, Disposer, SESSION_PERSISTENCE};
use parking_lot::Mutex;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::approval::{
    InFlightCalls, elicitation_answerer, no_url_mode_answerer, supports_elicitation, supports_url_elicitation,
};
use crate::options::McpOptions;
use crate::order::CallBook;
use crate::roots::first_file_root;

/// The level completion notices are logged at.
const NOTICE_LEVEL: LoggingLevel = LoggingLevel::Notice;
/// The `logger` name of completion notices.
const NOTICE_LOGGER: &str = "dsh";
/// Notices waiting to be sent as notifications; beyond it (a client that does not read) new
/// ones are dropped: each also reaches the session's next tool result.
const NOTICE_BACKLOG: usize = 64;
/// How long a session's teardown waits for its aborted calls to end before it kills the
/// session's jobs anyway (a call never outlives its session's agent).
const CALLS_END_GRACE: Duration = Duration::from_secs(10);

/// The reason a session's calls are aborted with when the session ends under them.
pub(crate) const SESSION_ENDED: &str = "the MCP session has ended";

/// What every session of one server shares.
pub(crate) struct Shared {
    pub ctx: Context,
    pub options: McpOptions,
    sessions: Mutex<Vec<Weak<McpSession>>>,
}

impl Shared {
    /// The server's shared state. The server is the host of the approval hub's answer
    /// channels from here on: the answerers registered before it starts (a host's fixed
    /// answer) and the elicitation answerer of each session whose client can answer are all
    /// of them, so the hub is told its answerers are exhaustive and can report a session that
    /// no answer can reach.
    pub fn new(ctx: Context, options: McpOptions) -> Self {
        if let Some(hub) = ctx.get(APPROVAL_HUB) {
            hub.answerers_are_exhaustive();
        }
        Self { ctx, options, sessions: Mutex::new(Vec::new()) }
    }

    /// Tracks a live session so a shutdown can end it.
    pub fn track(&self, session: &Arc<McpSession>) {
        let mut sessions = self.sessions.lock();
        sessions.retain(|s| s.strong_count() > 0);
        sessions.push(Arc::downgrade(session));
    }

    /// Ends every live session (a server shutdown), all at once.
    pub async fn close_sessions(&self) {
        let live: Vec<Arc<McpSession>> = self.sessions.lock().drain(..).filter_map(|s| s.upgrade()).collect();
        futures::future::join_all(live.iter().map(|session| session.close())).await;
    }
}

enum AgentSlot {
    Empty,
    Ready(Arc<Agent>),
    Closed,
}

/// Errors a session can give a call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    #[error("the MCP session has ended")]
    Ended,
}

/// One MCP session's state.
pub(crate) struct McpSession {
    shared: Arc<Shared>,
    peer: Peer<RoleServer>,
    /// The agent is made on the first call, once the client's roots can be asked.
    agent: tokio::sync::Mutex<AgentSlot>,
    calls: InFlightCalls,
    /// Tools declare no concurrency classifier, so calls are exclusive: one call of a
    /// session runs at a time, in the order the calls reach the server. Calls are numbered
    /// by the session's transport as they arrive, in this book (the transport's own); it
    /// also numbers calls that came without a number (a transport that does not number
    /// them), and tells the teardown when no call is left.
    book: CallBook,
    in_flight: Mutex<usize>,
    next_call: AtomicU64,
    log_level: Arc<Mutex<LoggingLevel>>,
    /// Cancelled when the session ends: queued and running calls abort, new ones are refused.
    ended: CancellationToken,
    /// The session's approval answerers, withdrawn when it ends.
    answerers: Mutex<Vec<Disposer>>,
    /// Set once the teardown is complete (every closer waits for it).
    closed: tokio::sync::OnceCell<()>,
    /// The spill files the session's results named (`spillPath`), removed when it ends.
    spills: Mutex<Vec<PathBuf>>,
}

impl McpSession {
    /// A session whose calls are numbered in `book` (its transport's, see [`crate::order`]).
    pub fn new(shared: Arc<Shared>, peer: Peer<RoleServer>, book: CallBook) -> Arc<Self> {
        Arc::new(Self {
            shared,
            peer,
            agent: tokio::sync::Mutex::new(AgentSlot::Empty),
            calls: InFlightCalls::default(),
            book,
            in_flight: Mutex::new(0),
            next_call: AtomicU64::new(1),
            log_level: Arc::new(Mutex::new(LoggingLevel::Debug)),
            ended: CancellationToken::new(),
            answerers: Mutex::new(Vec::new()),
            closed: tokio::sync::OnceCell::new(),
            spills: Mutex::new(Vec::new()),
        })
    }

    /// Notes the spill files a result of this session names (`stdout.spillPath`,
    /// `stderr.spillPath` of its structured value): the session's output, readable by its
    /// client until the session ends, and removed then.
    pub fn note_spills(&self, value: Option<&Value>) {
        let Some(value) = value else { return };
        let named = ["stdout", "stderr"].into_iter().filter_map(|stream| value[stream]["spillPath"].as_str());
        self.spills.lock().extend(named.map(PathBuf::from));
    }

    /// Cancelled once the session is ending.
    pub fn ended(&self) -> &CancellationToken {
        &self.ended
    }

    pub fn peer(&self) -> &Peer<RoleServer> {
        &self.peer
    }

    /// `logging/setLevel`: notices below `level` are no longer sent (they still reach results).
    pub fn set_log_level(&self, level: LoggingLevel) {
        *self.log_level.lock() = level;
    }

    /// The session's call book (see [`crate::order`]).
    pub fn book(&self) -> &CallBook {
        &self.book
    }

    /// A fresh call id for this session.
    pub fn next_call_id(&self) -> String {
        format!("mcp-call-{}", self.next_call.fetch_add(1, Ordering::Relaxed))
    }

    /// The session's agent, made (and registered) on first use.
    pub async fn agent(&self) -> Result<Arc<Agent>, SessionError> {
        let mut slot = self.agent.lock().await;
        match &*slot {
            AgentSlot::Ready(agent) => return Ok(Arc::clone(agent)),
            AgentSlot::Closed => return Err(SessionError::Ended),
            AgentSlot::Empty if self.ended.is_cancelled() => return Err(SessionError::Ended),
            AgentSlot::Empty => {}
        }
        let agent = self.create_agent().await;
        *slot = AgentSlot::Ready(Arc::clone(&agent));
        Ok(agent)
    }

    async fn create_agent(&self) -> Arc<Agent> {
        let cwd = self.resolve_cwd().await;
        let id = format!("mcp-{}", uuid::Uuid::new_v4());
        tracing::info!(agent = %id, cwd = %cwd.display(), "MCP session agent");
        let agent = Agent::new(id.clone(), Some(cwd));
        let ctx = &self.shared.ctx;
        if let Some(persistence) = ctx.get(SESSION_PERSISTENCE) {
            persistence.attach(agent.session());
        }
        if let Some(agents) = ctx.get(AGENTS)
            && let Err(error) = agents.register(Arc::clone(&agent))
        {
            tracing::warn!(%error, "could not register the MCP session agent");
        }
        let (tx, rx) = mpsc::channel::<AgentMessage>(NOTICE_BACKLOG);
        agent.on_delivery(move |_agent, _lane, message| {
            if tx.try_send(message.clone()).is_err() {
                tracing::debug!("a client that does not read: a notice goes with the next result only");
            }
        });
        tokio::spawn(forward_notices(self.peer.clone(), rx, Arc::clone(&self.log_level), self.ended.clone()));
        // Only a client that declared form elicitation can answer consent: registering the
        // answerer for any other would make the session look answerable when no answer can
        // come. One that declared URL mode answers secrets; for any other, a secret question
        // that reaches the end of the waterfall is refused with why.
        if self.shared.options.elicitation
            && let Some(hub) = ctx.get(APPROVAL_HUB)
        {
            let answer = elicitation_answerer(self.peer.clone(), self.calls.clone());
            let mut answerers = self.answerers.lock();
            if supports_elicitation(&self.peer) {
                answerers.push(hub.register_answerer(Some(id.clone()), answer, true));
            } else if supports_url_elicitation(&self.peer) {
                answerers.push(hub.register_secret_answerer(Some(id.clone()), answer, true));
            }
            if !supports_url_elicitation(&self.peer) {
                answerers.push(hub.register_secret_answerer(Some(id), no_url_mode_answerer(), false));
            }
        }
        agent
    }

    /// The first `file://` root the client offers, else the workspace root, else our cwd.
    async fn resolve_cwd(&self) -> PathBuf {
        let offers_roots = self.peer.peer_info().is_some_and(|info| info.capabilities.roots.is_some());
        if offers_roots {
            let listed =
                tokio::time::timeout(self.shared.options.roots_timeout, self.peer.list_roots()).await;
            match listed {
                Ok(Ok(result)) => {
                    if let Some(root) = first_file_root(result.roots.iter().map(|r| r.uri.as_str())) {
                        return root;
                    }
                }
                Ok(Err(error)) => tracing::warn!(%error, "roots/list failed"),
                Err(_) => tracing::warn!("roots/list timed out"),
            }
        }
        if let Some(root) = &self.shared.options.workspace_root {
            return root.clone();
        }
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
    }

    /// Marks a call in flight: the first one opens a turn and makes the agent busy.
    pub fn enter_call(
        self: &Arc<Self>,
        agent: &Arc<Agent>,
        call_id: &str,
        tool: &str,
        args: &Value,
    ) -> CallGuard {
        self.calls.insert(call_id, tool, args);
        let mut n = self.in_flight.lock();
        if *n == 0 {
            agent.set_status(AgentStatus::Busy);
            if let Err(error) = agent.session().begin_turn() {
                tracing::warn!(%error, "could not open a turn");
            }
        }
        *n += 1;
        CallGuard { session: Arc::clone(self), agent: Arc::clone(agent), call_id: call_id.to_owned() }
    }

    fn leave_call(&self, agent: &Agent, call_id: &str) {
        self.calls.remove(call_id);
        let mut n = self.in_flight.lock();
        *n = n.saturating_sub(1);
        if *n == 0 {
            if let Err(error) = agent.session().end_turn() {
                tracing::warn!(%error, "could not close a turn");
            }
            agent.set_status(AgentStatus::Idle);
        }
    }

    /// Ends the session: aborts its queued and running calls and waits for them to end (at
    /// most [`CALLS_END_GRACE`]), stops its notice channel, withdraws its answerer, then
    /// unregisters and disposes its agent (which kills and awaits its jobs). Idempotent; every
    /// caller returns once the teardown is complete.
    pub async fn close(&self) {
        self.closed.get_or_init(|| self.teardown()).await;
    }

    async fn teardown(&self) {
        self.ended.cancel();
        if tokio::time::timeout(CALLS_END_GRACE, self.book.idle()).await.is_err() {
            tracing::warn!("calls of an ending MCP session did not end in time; ending its agent anyway");
        }
        let answerers = std::mem::take(&mut *self.answerers.lock());
        for answerer in answerers {
            answerer.dispose().await;
        }
        let agent = {
            let mut slot = self.agent.lock().await;
            match std::mem::replace(&mut *slot, AgentSlot::Closed) {
                AgentSlot::Ready(agent) => Some(agent),
                _ => None,
            }
        };
        let Some(agent) = agent else { return };
        match self.shared.ctx.get(AGENTS) {
            Some(agents) if agents.is_registered(&agent) => {
                agents.unregister(agent.id()).await;
            }
            _ => agent.dispose().await,
        }
        // Nothing can read the session's spill files any more: its client is gone with it.
        let spills = std::mem::take(&mut *self.spills.lock());
        for spill in spills {
            match std::fs::remove_file(&spill) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::debug!(%error, spill = %spill.display(), "could not remove a spill file")
                }
            }
        }
        tracing::info!(agent = %agent.id(), "MCP session closed");
    }
}

/// Keeps a call counted as in flight until dropped.
pub(crate) struct CallGuard {
    session: Arc<McpSession>,
    agent: Arc<Agent>,
    call_id: String,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.session.leave_call(&self.agent, &self.call_id);
    }
}

fn rank(level: &LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Sends each message delivered to the session's agent as a logging notification, in order.
async fn forward_notices(
    peer: Peer<RoleServer>,
    mut rx: mpsc::Receiver<AgentMessage>,
    level: Arc<Mutex<LoggingLevel>>,
    ended: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            message = rx.recv() => match message {
                Some(message) => message,
                None => return,
            },
            _ = ended.cancelled() => return,
        };
        if rank(&NOTICE_LEVEL) < rank(&level.lock()) {
            continue;
        }
        let logger = message.source.get("plugin").and_then(Value::as_str).unwrap_or(NOTICE_LOGGER).to_owned();
        let data = json!(message.text);
        let sent = peer
            .notify_logging_message(
                LoggingMessageNotificationParam::new(NOTICE_LEVEL, data).with_logger(logger),
            )
            .await;
        if let Err(error) = sent {
            tracing::debug!(%error, "could not send a notice");
        }
    }
}
