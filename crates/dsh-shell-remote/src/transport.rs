//! The seam between the remote executor and one way of running a program elsewhere.

use std::collections::BTreeMap;
use std::path::PathBuf;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};

/// What to start on the far side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteExecSpec {
    /// The program and its arguments, passed as they are (no shell interprets them unless
    /// the program is one).
    pub argv: Vec<String>,
    /// The working directory on the far side; `None`: the transport's default.
    pub cwd: Option<PathBuf>,
    /// Added to (and overriding) the far side's own environment, exactly these entries.
    pub env: BTreeMap<String, String>,
    /// Keep the program's stdin a writable stream ([`RemoteChild::stdin`]); otherwise its
    /// stdin reads end of file at once.
    pub stdin: bool,
    /// The harness session the program runs for (`DSH_SESSION_ID`); `None`: none. A
    /// transport that gives each session a far side of its own (a container) keys it by this.
    pub session: Option<String>,
    /// Directories of the harness's host the program works in (its working directory), which
    /// a transport that mounts host directories makes reachable at the same path.
    pub roots: Vec<PathBuf>,
}

/// A program started on the far side.
pub struct RemoteChild {
    /// Its stdin, when [`RemoteExecSpec::stdin`] asked for one; dropping it closes it.
    pub stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Its stdout, to end of file.
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    /// Its stderr, to end of file.
    pub stderr: Box<dyn AsyncRead + Send + Unpin>,
    /// Resolves once the program has exited (after its streams reached end of file).
    pub exit: BoxFuture<'static, Result<RemoteExit, RemoteError>>,
}

/// How a program on the far side ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteExit {
    /// Its exit status as the far side reports it (`None` when the far side could not say).
    pub code: Option<i32>,
    /// The far side reports that the kernel's out-of-memory killer ended it (or its
    /// container) — a fact only some transports know.
    pub out_of_memory: bool,
}

/// Why a transport could not do what was asked; the message is shown as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The far side cannot be reached or refused us (engine down, host unreachable, host key
    /// unknown, authentication failed). The message names the far side and the cause.
    #[error("{0}")]
    Unavailable(String),
    /// The far side was reached but could not start the program or lost it mid-way.
    #[error("{0}")]
    Failed(String),
}

/// One way of running programs elsewhere: a container engine, an SSH connection.
///
/// A transport serves one session (one container, one multiplexed connection). It is
/// readied lazily by the first [`exec`](RemoteTransport::exec), and
/// [`shutdown`](RemoteTransport::shutdown) releases what it holds.
#[async_trait::async_trait]
pub trait RemoteTransport: Send + Sync + 'static {
    /// The executor kind, for messages and `doctor`: `container`, `ssh`.
    fn kind(&self) -> &'static str;
    /// Where programs run, for messages and `doctor` (`container dsh-… (image …)`,
    /// `ssh user@host:22`).
    fn describe(&self) -> String;
    /// Starts a program. Readies the far side first when needed (creates and starts the
    /// container, opens the master connection).
    async fn exec(&self, spec: RemoteExecSpec) -> Result<RemoteChild, RemoteError>;
    /// Whether the far side answers, and what it is (the engine's version, the host's
    /// `uname`), for `doctor`; readies nothing that `exec` would not.
    async fn probe(&self) -> Result<String, RemoteError>;
    /// Asked when a program ended without its call's status: whether the far side itself
    /// went away meanwhile (its container stopped or was removed). When it did, the
    /// transport readies a new one for the next `exec`. `session` is the program's
    /// [`RemoteExecSpec::session`]. By default a transport cannot tell.
    async fn gone(&self, _session: Option<&str>) -> bool {
        false
    }
    /// Whether each session's far side is its own and goes when the session ends (a
    /// container per session): what a session leaves there needs no removal of its own.
    fn session_private(&self) -> bool {
        false
    }
    /// Releases the far side (removes the session's container, closes the connection).
    /// Idempotent; an `exec` afterwards fails.
    async fn shutdown(&self) -> Result<(), RemoteError>;
}
