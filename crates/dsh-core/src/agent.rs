//! Agents (the live instance serving a session) and the registry of live agents.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};

use crate::context::{Effect, ServiceKey};
use crate::session::{Session, SessionHeader};

/// Whether the agent is between turns (`Idle`) or working (`Busy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentStatus {
    /// Between turns.
    Idle,
    /// Working on a turn.
    Busy,
}

/// How an out-of-band message reaches the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Opens a new turn.
    Followup,
    /// Joins the next step of the current turn (or waits in the inbox).
    Inject,
}

/// A user-role message delivered out of band, with its source.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentMessage {
    /// The message text.
    pub text: String,
    /// `{kind:'plugin', plugin, form, summary}` for plugin notices; `{kind:'user'}` for users.
    pub source: Value,
}

impl AgentMessage {
    /// A message authored by the user.
    pub fn user(text: impl Into<String>) -> Self {
        Self { text: text.into(), source: json!({ "kind": "user" }) }
    }

    /// True for user-authored messages.
    pub fn is_user_authored(&self) -> bool {
        self.source.get("kind").and_then(Value::as_str) == Some("user")
    }
}

type DeliveryListener = Arc<dyn Fn(&Agent, Delivery, &AgentMessage) + Send + Sync>;
type ClaimListener = Arc<dyn Fn(&Agent, &AgentMessage) + Send + Sync>;

/// A live agent: the instance serving one session.
pub struct Agent {
    session: Arc<Session>,
    status: Mutex<AgentStatus>,
    inbox: Mutex<Vec<(Delivery, AgentMessage)>>,
    delivery_listeners: Mutex<Vec<DeliveryListener>>,
    claim_listeners: Mutex<Vec<ClaimListener>>,
    dispose_hooks: Mutex<Vec<(u64, Effect)>>,
    next_hook: AtomicU64,
    disposed: AtomicBool,
    /// The directories the session's client works in (its `file://` roots), when it said.
    roots: Mutex<Vec<PathBuf>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("id", &self.id()).finish_non_exhaustive()
    }
}

impl Agent {
    /// A new idle agent over a fresh session.
    pub fn new(id: impl Into<String>, cwd: Option<PathBuf>) -> Arc<Self> {
        Self::with_session(Session::new(SessionHeader { id: id.into(), cwd }))
    }

    /// A new idle agent over an existing session.
    pub fn with_session(session: Arc<Session>) -> Arc<Self> {
        Arc::new(Self {
            session,
            status: Mutex::new(AgentStatus::Idle),
            inbox: Mutex::new(Vec::new()),
            delivery_listeners: Mutex::new(Vec::new()),
            claim_listeners: Mutex::new(Vec::new()),
            dispose_hooks: Mutex::new(Vec::new()),
            next_hook: AtomicU64::new(1),
            disposed: AtomicBool::new(false),
            roots: Mutex::new(Vec::new()),
        })
    }

    /// The agent id, equal to its session id.
    pub fn id(&self) -> &str {
        self.session.id()
    }

    /// The agent's session (same id as the agent).
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Whether the agent is idle or busy.
    pub fn status(&self) -> AgentStatus {
        *self.status.lock()
    }

    /// Records whether the agent is idle or busy.
    pub fn set_status(&self, status: AgentStatus) {
        *self.status.lock() = status;
    }

    /// Delivers a message that opens a new turn.
    pub fn followup(&self, message: AgentMessage) {
        self.deliver(Delivery::Followup, message);
    }

    /// Queues a message into the next step of the current turn.
    pub fn inject(&self, message: AgentMessage) {
        self.deliver(Delivery::Inject, message);
    }

    fn deliver(&self, lane: Delivery, message: AgentMessage) {
        let listeners = self.delivery_listeners.lock().clone();
        for listener in &listeners {
            listener(self, lane, &message);
        }
        self.inbox.lock().push((lane, message));
    }

    /// Observes every delivery (hosts forward notices at once through this).
    pub fn on_delivery(&self, listener: impl Fn(&Agent, Delivery, &AgentMessage) + Send + Sync + 'static) {
        self.delivery_listeners.lock().push(Arc::new(listener));
    }

    /// Observes every claimed message.
    pub fn on_claim(&self, listener: impl Fn(&Agent, &AgentMessage) + Send + Sync + 'static) {
        self.claim_listeners.lock().push(Arc::new(listener));
    }

    /// Takes every waiting message, claiming each.
    pub fn take_inbox(&self) -> Vec<(Delivery, AgentMessage)> {
        let messages = std::mem::take(&mut *self.inbox.lock());
        for (_, message) in &messages {
            self.claim(message);
        }
        messages
    }

    /// Marks a message as claimed by the agent (user messages reset wake budgets).
    pub fn claim(&self, message: &AgentMessage) {
        let listeners = self.claim_listeners.lock().clone();
        for listener in &listeners {
            listener(self, message);
        }
    }

    /// Runs `effect` when this agent's lifecycle ends; returns an id for [`Agent::cancel_on_dispose`].
    pub fn on_dispose(&self, effect: Effect) -> u64 {
        let id = self.next_hook.fetch_add(1, Ordering::Relaxed);
        self.dispose_hooks.lock().push((id, effect));
        id
    }

    /// Forgets a dispose hook.
    pub fn cancel_on_dispose(&self, id: u64) {
        self.dispose_hooks.lock().retain(|(h, _)| *h != id);
    }

    /// Records the directories the session's client works in (an MCP client's `file://`
    /// roots), for executors that must make them reachable (a container binds them).
    pub fn set_roots(&self, roots: Vec<PathBuf>) {
        *self.roots.lock() = roots;
    }

    /// The directories recorded by [`Agent::set_roots`] (none by default).
    pub fn roots(&self) -> Vec<PathBuf> {
        self.roots.lock().clone()
    }

    /// True once [`Agent::dispose`] has started.
    pub fn is_disposed(&self) -> bool {
        self.disposed.load(Ordering::Acquire)
    }

    /// Ends the agent's lifecycle: runs dispose hooks in reverse order, once.
    pub async fn dispose(&self) {
        if self.disposed.swap(true, Ordering::AcqRel) {
            return;
        }
        let hooks = std::mem::take(&mut *self.dispose_hooks.lock());
        for (_, hook) in hooks.into_iter().rev() {
            hook().await;
        }
    }
}

/// Why the agents registry refused an agent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// Another instance is already registered under this id (carried).
    #[error("agent \"{0}\" is already registered")]
    AlreadyRegistered(String),
}

/// The registry of live agents, keyed by id.
#[derive(Default)]
pub struct Agents {
    map: Mutex<HashMap<String, Arc<Agent>>>,
}

/// Service key of the agents registry.
pub const AGENTS: ServiceKey<Arc<Agents>> = ServiceKey::new("agents");

impl Agents {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Registers a live agent; an id already taken by another instance is refused.
    pub fn register(&self, agent: Arc<Agent>) -> Result<(), AgentError> {
        let mut map = self.map.lock();
        if let Some(existing) = map.get(agent.id()) {
            if Arc::ptr_eq(existing, &agent) {
                return Ok(());
            }
            return Err(AgentError::AlreadyRegistered(agent.id().to_owned()));
        }
        map.insert(agent.id().to_owned(), agent);
        Ok(())
    }

    /// The live agent registered under `id`, if any.
    pub fn get(&self, id: &str) -> Option<Arc<Agent>> {
        self.map.lock().get(id).cloned()
    }

    /// True when `agent` is the very instance registered under its id.
    pub fn is_registered(&self, agent: &Arc<Agent>) -> bool {
        self.map.lock().get(agent.id()).is_some_and(|a| Arc::ptr_eq(a, agent))
    }

    /// Removes an agent without ending its lifecycle (e.g. to replace it).
    pub fn detach(&self, id: &str) -> Option<Arc<Agent>> {
        self.map.lock().remove(id)
    }

    /// Removes an agent and ends its lifecycle (its jobs are torn down).
    pub async fn unregister(&self, id: &str) -> Option<Arc<Agent>> {
        let agent = self.detach(id)?;
        agent.dispose().await;
        Some(agent)
    }

    /// Every live agent.
    pub fn all(&self) -> Vec<Arc<Agent>> {
        self.map.lock().values().cloned().collect()
    }

    /// Unregisters and disposes every agent.
    pub async fn dispose_all(&self) {
        let agents: Vec<Arc<Agent>> = self.map.lock().drain().map(|(_, a)| a).collect();
        for agent in agents {
            agent.dispose().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_instance_under_a_taken_id_is_refused() {
        let agents = Agents::new();
        let first = Agent::new("a", None);
        agents.register(Arc::clone(&first)).expect("register");
        agents.register(Arc::clone(&first)).expect("the same instance again is fine");
        let err = agents.register(Agent::new("a", None)).expect_err("refused");
        assert_eq!(err, AgentError::AlreadyRegistered("a".into()));
        assert_eq!(err.to_string(), "agent \"a\" is already registered");
        assert!(agents.is_registered(&first));
    }
}
