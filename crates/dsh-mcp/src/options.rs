//! Host settings of the MCP server.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::origin::Origin;

/// The fastest rate at which one call may report progress (two notifications per second).
pub const MIN_PROGRESS_INTERVAL: Duration = Duration::from_millis(500);

/// Default of [`McpOptions::http_header_timeout`].
pub const DEFAULT_HTTP_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`McpOptions::http_max_connections`].
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 256;
/// Default of [`McpOptions::http_max_sessions`].
pub const DEFAULT_HTTP_MAX_SESSIONS: usize = 256;

/// Settings shared by the stdio and HTTP servers.
#[derive(Clone, Debug)]
pub struct McpOptions {
    /// The name reported as `serverInfo.name`.
    pub server_name: String,
    /// The version reported as `serverInfo.version`.
    pub server_version: String,
    /// A session's cwd when the client offers no `file://` root; `None` → the server's cwd.
    pub workspace_root: Option<PathBuf>,
    /// Gap between two progress notifications of one call; never below
    /// [`MIN_PROGRESS_INTERVAL`].
    pub progress_interval: Duration,
    /// Ask approvals through MCP elicitation when the client supports it and an approval hub
    /// is composed.
    pub elicitation: bool,
    /// Keep the harness identity line and the deployment persona in the `instructions` sent at
    /// initialisation. Off by default: the instructions describe the tools to the client's own
    /// agent, which has an identity of its own.
    pub instructions_with_identity: bool,
    /// A paragraph appended to the `instructions` (after a blank line): where the commands
    /// stand (executor, sandbox mode, writable roots, network). `None` adds nothing.
    pub instructions_standing: Option<String>,
    /// How long to wait for the client's `roots/list` answer before falling back.
    pub roots_timeout: Duration,
    /// The largest accepted message: one stdio line or one HTTP request body, in bytes.
    pub max_message_bytes: usize,
    /// An HTTP session is closed (its calls aborted, its agent disposed) once it has had no
    /// call in flight and no request for this long: never while a call runs; the time counts
    /// from the end of its last call or its last request, whichever is later.
    pub http_idle_timeout: Duration,
    /// The most HTTP sessions open at once; an `initialize` beyond it gets 503 with a JSON-RPC
    /// error naming the cap. A session's place is free again once its teardown is complete.
    pub http_max_sessions: usize,
    /// Called each time the last open HTTP session has been torn down (e.g. to give the
    /// allocator's freed pages back to the system).
    pub http_on_no_sessions: Option<fn()>,
    /// Browser origins served over HTTP besides loopback ones (a request without `Origin`
    /// always is); any other `Origin` gets 403.
    pub http_allowed_origins: Vec<Origin>,
    /// How long an HTTP client gets to send a complete request head (also the longest a
    /// kept-alive connection may sit idle), and then its body; the connection is closed
    /// after it (a late body gets 408 first).
    pub http_header_timeout: Duration,
    /// The most HTTP connections open at once; a connection beyond it is closed at accept.
    pub http_max_connections: usize,
    /// Stop serving when this token is cancelled (the composition is then disposed).
    pub shutdown: CancellationToken,
    /// Also stop on SIGINT and SIGTERM.
    pub handle_signals: bool,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            server_name: "dsh-bash".to_owned(),
            server_version: env!("CARGO_PKG_VERSION").to_owned(),
            workspace_root: None,
            progress_interval: Duration::from_secs(1),
            elicitation: true,
            instructions_with_identity: false,
            instructions_standing: None,
            roots_timeout: Duration::from_secs(5),
            max_message_bytes: 4 * 1024 * 1024,
            http_idle_timeout: Duration::from_secs(3600),
            http_max_sessions: DEFAULT_HTTP_MAX_SESSIONS,
            http_on_no_sessions: None,
            http_allowed_origins: Vec::new(),
            http_header_timeout: DEFAULT_HTTP_HEADER_TIMEOUT,
            http_max_connections: DEFAULT_HTTP_MAX_CONNECTIONS,
            shutdown: CancellationToken::new(),
            handle_signals: true,
        }
    }
}

impl McpOptions {
    /// The progress interval actually used (bounded below).
    pub(crate) fn effective_progress_interval(&self) -> Duration {
        self.progress_interval.max(MIN_PROGRESS_INTERVAL)
    }
}
