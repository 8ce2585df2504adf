//! The core's services as types, for plugins' [`Plugin::Deps`](crate::Plugin::Deps).
//!
//! Each marker names the same wire key as the matching [`ServiceKey`] constant
//! ([`TOOLS`], [`SYSTEM_PROMPT`], …), which stays the value-level handle for lookups.

use std::sync::Arc;

use crate::agent::AGENTS;
use crate::approval::{APPROVAL, ApprovalService};
use crate::context::{Service, ServiceKey};
use crate::persistence::SESSION_PERSISTENCE;
use crate::prompt::SYSTEM_PROMPT;
use crate::tools::{TOOLS, ToolRegistry};

/// `tools`: the tool registry.
pub struct Tools;

impl Service for Tools {
    const NAME: &'static str = TOOLS.name();
    type Handle = Arc<ToolRegistry>;
}

/// `systemPrompt`: the ordered prompt sections and runtime contexts.
pub struct SystemPrompt;

impl Service for SystemPrompt {
    const NAME: &'static str = SYSTEM_PROMPT.name();
    type Handle = Arc<crate::prompt::SystemPrompt>;
}

/// `agents`: the live agents registry.
pub struct Agents;

impl Service for Agents {
    const NAME: &'static str = AGENTS.name();
    type Handle = Arc<crate::agent::Agents>;
}

/// `sessionPersistence`: the session log backend.
pub struct SessionPersistence;

impl Service for SessionPersistence {
    const NAME: &'static str = SESSION_PERSISTENCE.name();
    type Handle = Arc<dyn crate::persistence::SessionPersistence>;
}

/// `approval`: the approval seam.
pub struct Approval;

impl Service for Approval {
    const NAME: &'static str = APPROVAL.name();
    type Handle = Arc<dyn ApprovalService>;
}

// The markers' handles are the keys' value types.
const _: ServiceKey<<Tools as Service>::Handle> = TOOLS;
const _: ServiceKey<<SystemPrompt as Service>::Handle> = SYSTEM_PROMPT;
const _: ServiceKey<<Agents as Service>::Handle> = AGENTS;
const _: ServiceKey<<SessionPersistence as Service>::Handle> = SESSION_PERSISTENCE;
const _: ServiceKey<<Approval as Service>::Handle> = APPROVAL;
