//! The host's sessions: one live agent per session id, registered in `agents` and attached to
//! the persistence backend when the composition has one.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use dsh_core::{AGENTS, Agent, AgentError, Context, SESSION_PERSISTENCE};

/// Why a session could not be opened. `Display` is the host error's exact message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionOpenError {
    /// The session already has another cwd (in this process, or recorded by an earlier one):
    /// carries its id and its current cwd as shown (a JSON string, or `(none)`).
    #[error("session \"{id}\" already has cwd {current}; a session's cwd cannot change")]
    CwdChanged {
        /// The session id.
        id: String,
        /// The session's cwd as shown in the message.
        current: String,
    },
    /// The session id is empty.
    #[error("invalid session: expected a non-empty id")]
    EmptyId,
    /// The composition has no agent registry to register the session's agent in.
    #[error("sessions need the agent registry (add \"agent\" to the composition's plugins)")]
    NoAgentRegistry,
    /// The agent registry refused the session's agent.
    #[error(transparent)]
    Register(#[from] AgentError),
}

/// Sessions created by this process, by id.
#[derive(Default)]
pub struct Sessions {
    agents: HashMap<String, Arc<Agent>>,
}

impl Sessions {
    /// The agent of session `id`, created on first use with `cwd` as its header cwd.
    ///
    /// A session's cwd is fixed at creation: naming a different one later is refused, also
    /// when the session was created by an earlier process whose log recorded it (then the
    /// recorded cwd is the session's cwd when none is named).
    pub fn open(
        &mut self,
        ctx: &Context,
        id: &str,
        cwd: Option<&Path>,
    ) -> Result<Arc<Agent>, SessionOpenError> {
        let cwd = cwd.map(dsh_core::home::absolutize);
        if let Some(agent) = self.agents.get(id) {
            let current = agent.session().header().cwd.as_deref();
            return match &cwd {
                Some(wanted) if current != Some(wanted.as_path()) => {
                    Err(SessionOpenError::CwdChanged { id: id.to_owned(), current: describe(current) })
                }
                _ => Ok(Arc::clone(agent)),
            };
        }
        if id.is_empty() {
            return Err(SessionOpenError::EmptyId);
        }
        let agents = ctx.get(AGENTS).ok_or(SessionOpenError::NoAgentRegistry)?;
        let persistence = ctx.get(SESSION_PERSISTENCE);
        // A session an earlier process persisted keeps the cwd it was created with.
        let recorded = persistence.as_ref().and_then(|p| p.recorded_header(id)).and_then(|h| h.cwd);
        let cwd = match (cwd, recorded) {
            (Some(wanted), Some(recorded)) if wanted != recorded => {
                return Err(SessionOpenError::CwdChanged {
                    id: id.to_owned(),
                    current: describe(Some(&recorded)),
                });
            }
            (Some(wanted), _) => Some(wanted),
            (None, recorded) => recorded,
        };
        let agent = Agent::new(id, cwd);
        if let Some(persistence) = persistence {
            persistence.attach(agent.session());
        }
        agents.register(Arc::clone(&agent))?;
        self.agents.insert(id.to_owned(), Arc::clone(&agent));
        Ok(agent)
    }
}

fn describe(cwd: Option<&Path>) -> String {
    match cwd {
        Some(path) => serde_json::Value::String(path.to_string_lossy().into_owned()).to_string(),
        None => "(none)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::Agents;

    #[test]
    fn each_refusal_is_its_own_variant_with_its_exact_message() {
        let mut sessions = Sessions::default();
        let bare = Context::new();
        let err = sessions.open(&bare, "s", None).expect_err("no registry");
        assert_eq!(err, SessionOpenError::NoAgentRegistry);
        assert_eq!(
            err.to_string(),
            "sessions need the agent registry (add \"agent\" to the composition's plugins)"
        );

        let ctx = Context::new();
        let agents = Agents::new();
        ctx.provide(AGENTS, Arc::clone(&agents)).expect("agents");
        let err = sessions.open(&ctx, "", None).expect_err("empty id");
        assert_eq!(err, SessionOpenError::EmptyId);
        assert_eq!(err.to_string(), "invalid session: expected a non-empty id");

        agents.register(Agent::new("taken", None)).expect("register");
        let err = sessions.open(&ctx, "taken", None).expect_err("taken");
        assert_eq!(err, SessionOpenError::Register(AgentError::AlreadyRegistered("taken".into())));
        assert_eq!(err.to_string(), "agent \"taken\" is already registered");

        sessions.open(&ctx, "s", Some(Path::new("/a"))).expect("open");
        let err = sessions.open(&ctx, "s", Some(Path::new("/b"))).expect_err("cwd fixed");
        assert!(matches!(&err, SessionOpenError::CwdChanged { id, .. } if id == "s"), "{err:?}");
        assert_eq!(err.to_string(), "session \"s\" already has cwd \"/a\"; a session's cwd cannot change");
    }
}
