//! The host's sessions: one live agent per session id, registered in `agents` and attached to
//! the persistence backend when the composition has one.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use dsh_core::{AGENTS, Agent, Context, SESSION_PERSISTENCE};

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
    pub fn open(&mut self, ctx: &Context, id: &str, cwd: Option<&Path>) -> Result<Arc<Agent>, String> {
        let cwd = cwd.map(dsh_core::home::absolutize);
        if let Some(agent) = self.agents.get(id) {
            let current = agent.session().header().cwd.as_deref();
            return match &cwd {
                Some(wanted) if current != Some(wanted.as_path()) => Err(format!(
                    "session \"{id}\" already has cwd {}; a session's cwd cannot change",
                    describe(current)
                )),
                _ => Ok(Arc::clone(agent)),
            };
        }
        if id.is_empty() {
            return Err("invalid session: expected a non-empty id".to_owned());
        }
        let agents = ctx
            .get(AGENTS)
            .ok_or("sessions need the agent registry (add \"agent\" to the composition's plugins)")?;
        let persistence = ctx.get(SESSION_PERSISTENCE);
        // A session an earlier process persisted keeps the cwd it was created with.
        let recorded = persistence.as_ref().and_then(|p| p.recorded_header(id)).and_then(|h| h.cwd);
        let cwd = match (cwd, recorded) {
            (Some(wanted), Some(recorded)) if wanted != recorded => {
                return Err(format!(
                    "session \"{id}\" already has cwd {}; a session's cwd cannot change",
                    describe(Some(&recorded))
                ));
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
