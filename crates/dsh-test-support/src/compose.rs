//! The composition most tests start from: the tool registry, the system prompt and the agents
//! registry, loaded the way hosts load them, plus calls and agents over it.

use std::sync::Arc;

use dsh_core::plugins::{AgentsPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_core::{AGENTS, Agent, Agents, Context, TOOLS, ToolExec, ToolRegistry, ToolResult};
use serde_json::Value;

/// A context with `tools`, `systemPrompt` and `agents` (their default configs) and nothing
/// else.
pub fn host() -> Context {
    let ctx = Context::new();
    ctx.load_default::<ToolsPlugin>().expect("tools");
    ctx.load_default::<SystemPromptPlugin>().expect("prompt");
    ctx.load_default::<AgentsPlugin>().expect("agents");
    ctx
}

/// A composition under test with its tool and agents registries at hand.
pub struct Composition {
    pub ctx: Context,
    pub tools: Arc<ToolRegistry>,
    pub agents: Arc<Agents>,
}

impl Composition {
    /// Wraps `ctx`, which must provide `tools` and `agents` (e.g. one built on [`host`]).
    pub fn of(ctx: Context) -> Self {
        Self { tools: ctx.get(TOOLS).expect("tools"), agents: ctx.get(AGENTS).expect("agents"), ctx }
    }

    /// A new idle agent, registered.
    pub fn agent(&self, id: &str) -> Arc<Agent> {
        let agent = Agent::new(id, None);
        self.agents.register(Arc::clone(&agent)).expect("register");
        agent
    }

    /// A new agent with one open turn, registered.
    pub fn agent_in_turn(&self, id: &str) -> Arc<Agent> {
        let agent = Agent::new(id, None);
        agent.session().begin_turn().expect("turn");
        self.agents.register(Arc::clone(&agent)).expect("register");
        agent
    }

    /// Calls tool `name` through the registry's pipeline (call id `call-1`), as `agent`.
    pub async fn call(&self, name: &str, args: Value, agent: Option<&Arc<Agent>>) -> ToolResult {
        self.tools.call(name, args, ToolExec::new(agent.cloned(), "call-1")).await
    }
}
