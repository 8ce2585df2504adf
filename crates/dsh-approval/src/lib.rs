//! The user-approval service (a **provider** of `approval`).
//!
//! One-shot approval requests: turn-enclosed `approval/asked` + `approval/decided` audit events,
//! the `ask`/`never` policy (session events outrank config), an answerer waterfall that hosts
//! fill (a fixed answer for scripts, a terminal prompt, MCP elicitation), and cancellation; and
//! secret-input questions (askpass) through the same waterfall, whose answers are recorded nowhere.
//! A command's approval is about a typed grant the user may give for a lasting scope, bounded
//! by policy files (see [`policy`]). It knows nothing about sandboxes or the bash tool.

#![deny(missing_docs)]

mod answerers;
mod hub;
pub mod policy;
mod render;

pub use answerers::{fixed_answerer, secret_file_answerer, tty_answerer};
pub use hub::{
    APPROVAL_HUB, Answer, AnswerFn, ApprovalConfig, ApprovalHub, ApprovalPlugin, ApprovalPolicy,
    ApprovalQuestion, PolicyError, ValidatedApproval,
};
pub use policy::{Grant, GrantOffer, Scope};
pub use render::{ESCAPES_NOTE, QuestionLines, escape_untrusted, subject_lines};
