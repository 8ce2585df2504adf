//! Composition core (the **definition** of everything the other crates plug into).
//!
//! A [`Context`] of named services, plugins that stay pending until their injected services
//! exist, sessions and agents with append-only event logs, the tool registry with its argument
//! validation and execution pipeline, ordered prompt sections, and the approval seam. It knows
//! no shell, no sandbox backend and no host protocol.

#![deny(missing_docs)]

pub mod abort;
pub mod agent;
pub mod approval;
pub mod audit;
pub mod context;
pub mod error;
pub mod home;
pub mod json;
pub mod persistence;
pub mod plugins;
pub mod prompt;
pub mod services;
pub mod session;
pub mod time;
pub mod tools;

pub use abort::{AbortReason, AbortSignal, Deadline, DeadlineRangeError, MAX_TIMER_DELAY_MS};
pub use agent::{AGENTS, Agent, AgentError, AgentMessage, AgentStatus, Agents, Delivery};
pub use approval::{
    APPROVAL, ApprovalAsk, ApprovalError, ApprovalOutcome, ApprovalRequest, ApprovalService, ApprovalSubject,
    Secret, SecretReply, SecretRequest,
};
pub use context::{
    ConfigError, Context, Deps, Disposer, Effect, Factory, Handles, Plugin, PluginError, PluginFactory,
    PluginScope, PluginStatus, Service, ServiceKey, WeakContext,
};
pub use error::{ErrorInfo, ToolError};
pub use persistence::{HEADER_RECORD, JsonlPersistence, SESSION_PERSISTENCE, SessionPersistence};
pub use prompt::{HARNESS_IDENTITY_SECTION, PERSONA_SECTION, PromptSection, SYSTEM_PROMPT, SystemPrompt};
pub use session::{Session, SessionError, SessionEvent, SessionHeader, SessionLocator};
pub use tools::{
    ContentBlock, Decision, PostDecision, Schema, TOOLS, Tool, ToolCall, ToolExec, ToolParams, ToolRegistry,
    ToolResult, ToolSchema, ToolSpec,
};
