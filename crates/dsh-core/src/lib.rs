//! Composition core (the **definition** of everything the other crates plug into).
//!
//! A [`Context`] of named services, plugins that stay pending until their injected services
//! exist, sessions and agents with append-only event logs, the tool registry with its argument
//! validation and execution pipeline, and ordered prompt sections. It knows no shell, no
//! sandbox backend and no host protocol.

pub mod abort;
pub mod error;
pub mod json;

pub use abort::{AbortReason, AbortSignal, Deadline, DeadlineRangeError, MAX_TIMER_DELAY_MS};
pub use error::{ErrorInfo, ToolError};
