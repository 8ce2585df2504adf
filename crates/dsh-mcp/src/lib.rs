//! The MCP server host (a **host**: it serves a composition, it defines no service).
//!
//! [`serve_stdio`] and [`serve_http`] serve every tool registered in a [`dsh_core::Context`]
//! to MCP clients. Each MCP session is a session of the composition: its own agent (registered
//! in `agents`, so its background jobs are its own), its own cwd, approvals asked through MCP
//! elicitation, completion notices sent as logging notifications. It knows the core seams and
//! the approval hub, and nothing of shells, sandboxes or jobs: those arrive as tools.
//!
//! The server owns the composition it is given: when it stops (the client closes stdin, or
//! SIGINT/SIGTERM, or [`McpOptions::shutdown`]) it ends every session and disposes the
//! context before returning.
//!
//! Choices a client can observe:
//!
//! * **Protocol**: revisions up to 2025-11-25 over the `initialize` handshake, and 2026-07-28
//!   without it (`server/discover`; each request carries its revision, client and capabilities
//!   in `_meta`). A 2026-07-28 client's session is its stdio connection, or over HTTP the
//!   principal's (the bearer token's holder) one session; its questions (approvals, network
//!   asks, secrets) come back as `input_required` results the client answers by sending the
//!   call again (see `rounds`); it gets no logging notifications (notices go with the next
//!   result) and is not asked for roots. The revision is in the session's `MCP session agent`
//!   log line.
//! * **Results**: the model-facing text blocks, `isError`, and the canonical value as
//!   `structuredContent`; a failure's `{message, info}` is in `_meta["dsh/error"]`. Output
//!   schemas are advertised only as object schemas — see [`output`] for how a `oneOf` (bash)
//!   and non-object values (`job_list`) are carried.
//! * **Session cwd**: fixed when the session's first call arrives — the client's first
//!   `file://` root, else [`McpOptions::workspace_root`], else the server's cwd. Later root
//!   changes are ignored (a session's cwd is immutable).
//! * **Calls** of one session run one at a time in arrival order (tools declare no
//!   concurrency classifier, so they are exclusive); the agent is busy during a call and idle
//!   between calls, and each call runs inside its own turn.
//! * **Cancellation**: `notifications/cancelled` fires the call's abort signal (the pipeline
//!   then yields `tool call aborted`; per MCP, a cancelled request gets no response). A call
//!   already past its point of no return (a consuming job read ran) ignores the
//!   cancellation and is answered, as MCP allows, so its output is not lost.
//! * **Progress**: with a progress token, `notifications/progress` every
//!   [`McpOptions::progress_interval`] (never more than two per second) carrying the elapsed
//!   seconds; the command's latest output line is not observable through the tool seam, so it
//!   is not reported.
//! * **Notices** delivered to a session's agent (a background job finished) are sent at once
//!   as a `notifications/message` (level `notice`), and every message waiting in the agent's
//!   inbox is attached to the session's next tool result, as text blocks after the result's
//!   own text and as `_meta["dsh/notices"]`.
//! * **Approvals**: when an approval hub is composed, each session registers an answerer that
//!   asks through form elicitation (`accept` → allowed once, `decline` → rejected, `cancel` →
//!   cancelled); a client without elicitation passes to the next answerer (`unavailable` when
//!   there is none).
//! * **Bad input** gets JSON-RPC errors and the session goes on (see the `stdio` module); over
//!   HTTP, every request needs `Authorization: Bearer <token>` (401 otherwise), bodies above
//!   [`McpOptions::max_message_bytes`] get 413, and a session idle for
//!   [`McpOptions::http_idle_timeout`] (no call in flight and no request) or deleted by its
//!   client ends (its agent and jobs with it). A `DELETE` is answered once the teardown is
//!   complete: the session's calls answered or aborted, its processes killed and awaited.
//!   At most [`McpOptions::http_max_sessions`] sessions are open at once; an `initialize`
//!   beyond it gets 503 and [`session_cap_message`].
//! * **Vanished clients**: over stdio, the end of stdin ends the session at once (running
//!   calls aborted, processes killed and awaited before the server returns); over HTTP, a
//!   `tools/call` whose response stream is dropped before its result (the connection closed)
//!   is aborted — resuming a call's stream with `Last-Event-ID` is not supported. A client
//!   that reads slowly holds at most one progress notification per call (later ticks are
//!   dropped) and a bounded backlog of notices (later ones go only with the next result);
//!   results are never dropped.
//! * **HTTP responses**: accepted connections have `TCP_NODELAY`; a request answered by one
//!   message (no notification or server request before it, within a second) gets it as plain
//!   `application/json`, otherwise an SSE stream.
//! * **HTTP exposure**: a browser `Origin` that is not loopback and not in
//!   [`McpOptions::http_allowed_origins`] gets 403 (DNS-rebinding defence, as the MCP
//!   transport asks); a connection gets [`McpOptions::http_header_timeout`] to send each
//!   request head, and as long again for its body (else 408 and the connection closes), and
//!   connections beyond [`McpOptions::http_max_connections`] are closed at accept. Out of
//!   descriptors, the accept loop pauses (5 ms, doubling up to 100 ms) instead of spinning,
//!   warns once per episode, and serves again once descriptors are free.
//! * **Request ids**: a request whose id is in use by a request of the same session still in
//!   flight gets a JSON-RPC error (`-32600`, `Invalid Request: request id <id> is already in
//!   use by a request in flight`) and never reaches the handler; the first request goes on
//!   untouched. An id is free again once its response was sent (or, cancelled, once its
//!   handler returned). Over HTTP, malformed bodies get the stdio server's JSON-RPC errors
//!   (`-32700`, `-32600`, `-32602`): with 200 in an open session when they answer a request,
//!   400 otherwise.

#![deny(missing_docs)]

mod approval;
mod http;
mod options;
mod order;
mod origin;
pub mod output;
mod roots;
mod rounds;
pub mod secret_page;
mod server;
mod session;
mod shutdown;
mod stdio;
mod stdio_streams;

pub use approval::{
    ELICITATION_COMPLETE, Elicitor, InFlightCalls, NO_URL_MODE, SCOPE_FIELD, approval_message,
    approval_schema, ask, elicit, elicit_answer, elicit_secret, elicitation_answerer, no_url_mode_answerer,
    secret_message, supports_elicitation, supports_url_elicitation,
};
pub use http::session_cap_message;
pub use http::{MCP_PATH, serve_http, serve_http_on};
pub use options::{
    DEFAULT_HTTP_HEADER_TIMEOUT, DEFAULT_HTTP_MAX_CONNECTIONS, DEFAULT_HTTP_MAX_SESSIONS,
    MIN_PROGRESS_INTERVAL, McpOptions,
};
pub use origin::{InvalidOrigin, Origin};
pub use roots::file_uri_path;
pub use server::{CLIENT_CANCELLED, NEWEST_PROTOCOL_VERSION, PROTOCOL_VERSION};
pub use stdio::{serve_io, serve_stdio};
pub use stdio_streams::{StdinStream, StdoutStream, answer_written, stdio_streams};
