//! The MCP server host (a **host**: it serves a composition, it defines no service).
//!
//! [`serve_stdio`] and [`serve_http`] serve every tool registered in a [`dsh_core::Context`]
//! to MCP clients. Each MCP session is a session of the composition: its own agent (registered
//! in `agents`, so its background jobs are its own), its own cwd (the client's first `file://`
//! root, else [`McpOptions::workspace_root`], else the server's cwd), approvals asked through
//! MCP elicitation, completion notices sent as logging notifications and attached to the next
//! tool result. Results carry the model-facing text, `isError`, and the canonical value as
//! `structuredContent` (see [`output`] for how non-object values are carried).
//!
//! The server owns the composition it is given: when it stops (the client closes stdin, or
//! SIGINT/SIGTERM, or [`McpOptions::shutdown`]) it ends every session and disposes the
//! context. It knows the core seams and the approval hub, and nothing of shells, sandboxes or
//! jobs: those arrive as tools.

mod approval;
mod http;
mod options;
pub mod output;
mod roots;
mod server;
mod session;
mod shutdown;
mod stdio;

pub use approval::{InFlightCalls, approval_message, elicit, elicitation_answerer, supports_elicitation};
pub use http::{MCP_PATH, serve_http, serve_http_on};
pub use options::{MIN_PROGRESS_INTERVAL, McpOptions};
pub use roots::file_uri_path;
pub use server::{CLIENT_CANCELLED, PROTOCOL_VERSION};
pub use stdio::{serve_io, serve_stdio};
