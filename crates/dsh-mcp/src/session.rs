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
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ProtocolVersion};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::approval::{
    InFlightCalls, answerer_through, elicitation_answerer, no_url_mode_answerer, supports_elicitation,
    supports_url_elicitation,
};
use crate::options::McpOptions;
use crate::order::CallBook;
use crate::roots::{file_uri_path, first_file_root};
use crate::rounds::Rounds;

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
    /// The session of the HTTP principal (the bearer token's holder): every 2026-07-28
    /// request over HTTP belongs to it (see `docs/mcp.md`, "Where state lives").
    principal: Mutex<Option<Arc<McpSession>>>,
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
        Self { ctx, options, sessions: Mutex::new(Vec::new()), principal: Mutex::new(None) }
    }

    /// The HTTP principal's session, made (from the first request's declarations) on first
    /// use; a new one once it ended.
    pub fn principal(self: &Arc<Self>, revision: ProtocolVersion, answerable: bool) -> Arc<McpSession> {
        let mut principal = self.principal.lock();
        if let Some(session) = principal.as_ref().filter(|session| !session.ended().is_cancelled()) {
            return Arc::clone(session);
        }
        let session = McpSession::inline(Arc::clone(self), revision, answerable, CallBook::default());
        self.track(&session);
        *principal = Some(Arc::clone(&session));
        session
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
    /// The client, under a revision with `initialize`; `None` under 2026-07-28, where the
    /// server sends no request or notification outside a request's own answer.
    peer: Option<Peer<RoleServer>>,
    /// The protocol revision the session's client speaks (its first request's).
    revision: ProtocolVersion,
    /// Whether the client declared form elicitation (under 2026-07-28, in the session's first
    /// call): only then is the session's answerer registered.
    answerable: bool,
    /// Under 2026-07-28, the calls that ask their questions through their rounds.
    rounds: Arc<Rounds>,
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
    pub fn new(
        shared: Arc<Shared>,
        peer: Peer<RoleServer>,
        revision: ProtocolVersion,
        book: CallBook,
    ) -> Arc<Self> {
        let answerable = supports_elicitation(&peer);
        Self::with_client(shared, Some(peer), revision, answerable, book)
    }

    /// A session of a 2026-07-28 client (no `initialize`, no server-initiated messages),
    /// answerable when its first call declared form elicitation.
    pub fn inline(
        shared: Arc<Shared>,
        revision: ProtocolVersion,
        answerable: bool,
        book: CallBook,
    ) -> Arc<Self> {
        Self::with_client(shared, None, revision, answerable, book)
    }

    fn with_client(
        shared: Arc<Shared>,
        peer: Option<Peer<RoleServer>>,
        revision: ProtocolVersion,
        answerable: bool,
        book: CallBook,
    ) -> Arc<Self> {
        Arc::new(Self {
            shared,
            peer,
            revision,
            answerable,
            rounds: Arc::default(),
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

    /// Whether the session's client speaks 2026-07-28 (calls answer questions in rounds).
    pub fn is_inline(&self) -> bool {
        self.peer.is_none()
    }

    /// The session's multi-round calls (see [`crate::rounds`]).
    pub fn rounds(&self) -> &Arc<Rounds> {
        &self.rounds
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
        let (cwd, roots) = self.resolve_cwd().await;
        let id = format!("mcp-{}", uuid::Uuid::new_v4());
        tracing::info!(agent = %id, cwd = %cwd.display(), revision = %self.revision, "MCP session agent");
        let agent = Agent::new(id.clone(), Some(cwd));
        agent.set_roots(roots);
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
        // Under 2026-07-28 notices are not sent on their own (there is no stream outside a
        // request's answer); they reach the next result only.
        match &self.peer {
            Some(peer) => {
                tokio::spawn(forward_notices(
                    peer.clone(),
                    rx,
                    Arc::clone(&self.log_level),
                    self.ended.clone(),
                ));
            }
            None => drop(rx),
        }
        // Only a client that declared form elicitation can answer consent: registering the
        // answerer for any other would make the session look answerable when no answer can
        // come. One that declared URL mode answers secrets; for any other, a secret question
        // that reaches the end of the waterfall is refused with why. Under 2026-07-28 each
        // round asks the call that asks, whose declared modes decide (the answerer passes
        // what that call cannot take).
        if self.shared.options.elicitation
            && let Some(hub) = ctx.get(APPROVAL_HUB)
        {
            let mut answerers = self.answerers.lock();
            match &self.peer {
                Some(peer) => {
                    let answer = elicitation_answerer(peer.clone(), self.calls.clone());
                    if supports_elicitation(peer) {
                        answerers.push(hub.register_answerer(Some(id.clone()), answer, true));
                    } else if supports_url_elicitation(peer) {
                        answerers.push(hub.register_secret_answerer(Some(id.clone()), answer, true));
                    }
                    if !supports_url_elicitation(peer) {
                        answerers.push(hub.register_secret_answerer(Some(id), no_url_mode_answerer(), false));
                    }
                }
                None => {
                    let rounds = Arc::downgrade(&self.rounds);
                    let answer = answerer_through(
                        move |question| {
                            let call_id = question.call_id.as_deref()?;
                            rounds.upgrade()?.asker(call_id)
                        },
                        self.calls.clone(),
                    );
                    if self.answerable {
                        answerers.push(hub.register_answerer(Some(id.clone()), answer, true));
                    } else {
                        answerers.push(hub.register_secret_answerer(Some(id.clone()), answer, true));
                    }
                    answerers.push(hub.register_secret_answerer(Some(id), no_url_mode_answerer(), false));
                }
            }
        }
        agent
    }

    /// The first `file://` root the client offers, else the workspace root, else our cwd;
    /// and every `file://` root the client offers.
    async fn resolve_cwd(&self) -> (PathBuf, Vec<PathBuf>) {
        // Under 2026-07-28 roots would be one more round trip of the first call; the session's
        // cwd is the workspace root there.
        let peer = self
            .peer
            .as_ref()
            .filter(|peer| peer.peer_info().is_some_and(|info| info.capabilities.roots.is_some()));
        if let Some(peer) = peer {
            let listed = tokio::time::timeout(self.shared.options.roots_timeout, peer.list_roots()).await;
            match listed {
                Ok(Ok(result)) => {
                    if let Some(root) = first_file_root(result.roots.iter().map(|r| r.uri.as_str())) {
                        let all = result.roots.iter().filter_map(|r| file_uri_path(&r.uri)).collect();
                        return (root, all);
                    }
                }
                Ok(Err(error)) => tracing::warn!(%error, "roots/list failed"),
                Err(_) => tracing::warn!("roots/list timed out"),
            }
        }
        if let Some(root) = &self.shared.options.workspace_root {
            return (root.clone(), Vec::new());
        }
        (std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")), Vec::new())
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
        // Nothing can read the session's spill files any more: its client is gone with it,
        // and its calls and jobs are over. Every file the subprocess service charged to the
        // session goes (background jobs' too); a named file it does not know of (an
        // executor's elsewhere) is removed by its path.
        let released = match self.shared.ctx.get(dsh_subprocess::SUBPROCESS) {
            Some(service) => service.release_spills(agent.session().id()),
            None => Vec::new(),
        };
        let spills = std::mem::take(&mut *self.spills.lock());
        for spill in spills.into_iter().filter(|spill| !released.contains(spill)) {
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
