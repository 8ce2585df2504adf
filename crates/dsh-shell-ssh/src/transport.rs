//! [`SshTransport`]: programs on an SSH host over one master connection of the system's
//! `ssh`.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_shell_remote::{RemoteChild, RemoteError, RemoteExecSpec, RemoteExit, RemoteTransport};
use futures::FutureExt;
use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder, Stdio};
use tokio::sync::Mutex;

use crate::command_line::remote_command_line;
use crate::refusal::{Attempt, connect_refusal};
use crate::target::SshTarget;

/// How long a master connection with no program running stays open; a later `exec` opens a
/// new one. It bounds how long a master outlives a harness that was killed.
const IDLE_MASTER: Duration = Duration::from_secs(600);

/// How often the master asks the host whether it is still there (a silent host is given up
/// after three unanswered asks).
const KEEPALIVE: Duration = Duration::from_secs(15);

/// The default for [`SshConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Which host, as whom, with which key, checked against which known hosts.
///
/// Set by whoever runs the harness (command line, composition file); nothing of it is
/// reachable from a tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshConfig {
    /// The host.
    pub target: SshTarget,
    /// The private key to log in with, and only it (`IdentitiesOnly=yes`); `None`: the keys
    /// the ssh agent (`SSH_AUTH_SOCK`) and the user's `ssh_config` offer.
    pub identity: Option<PathBuf>,
    /// The known-hosts file the host's key must be in; `None`: the user's
    /// (`~/.ssh/known_hosts`).
    pub known_hosts: Option<PathBuf>,
    /// How long opening the connection may take.
    pub connect_timeout: Duration,
}

impl SshConfig {
    /// A config for `target` with the agent's keys and the user's known hosts.
    pub fn new(target: SshTarget) -> Self {
        Self { target, identity: None, known_hosts: None, connect_timeout: DEFAULT_CONNECT_TIMEOUT }
    }

    /// The known-hosts file in force: the configured one, else `~/.ssh/known_hosts` (`None`
    /// when there is no home directory to find it in: ssh's own default then).
    pub fn known_hosts_file(&self) -> Option<PathBuf> {
        self.known_hosts.clone().or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|home| Path::new(&home).join(".ssh/known_hosts"))
        })
    }
}

enum Master {
    /// Not opened yet (or given up by the host); the next `exec` opens it.
    Idle,
    Open(Arc<Session>),
    /// `shutdown` ran: nothing opens again.
    Closed,
}

/// Runs programs on one SSH host over one multiplexed master connection, opened by the first
/// [`exec`](RemoteTransport::exec) and closed by [`shutdown`](RemoteTransport::shutdown).
///
/// The host's key must already be in the known-hosts file (`StrictHostKeyChecking=yes`);
/// `ssh` never prompts (`BatchMode=yes`). Each program is one channel of the master, its
/// command line quoted word by word (see [`remote_command_line`]).
pub struct SshTransport {
    config: SshConfig,
    known_hosts: Option<PathBuf>,
    master: Mutex<Master>,
}

impl SshTransport {
    /// A transport for `config`; connects nothing yet.
    pub fn new(config: SshConfig) -> Self {
        let known_hosts = config.known_hosts_file();
        Self { config, known_hosts, master: Mutex::new(Master::Idle) }
    }

    /// The config it was made with.
    pub fn config(&self) -> &SshConfig {
        &self.config
    }

    /// The master connection's control socket while it is open: `ssh -S <socket> host cmd`
    /// runs `cmd` over the same connection.
    pub async fn control_socket(&self) -> Option<PathBuf> {
        match &*self.master.lock().await {
            Master::Open(session) => Some(session.control_socket().to_path_buf()),
            Master::Idle | Master::Closed => None,
        }
    }

    /// The open master, opening it when there is none. `stale`: a master found gone, to be
    /// replaced (unless another caller replaced it already).
    async fn session(&self, stale: Option<&Arc<Session>>) -> Result<Arc<Session>, RemoteError> {
        let mut master = self.master.lock().await;
        match &*master {
            Master::Closed => {
                return Err(RemoteError::Unavailable(format!(
                    "ssh {}: the connection was shut down",
                    self.config.target
                )));
            }
            Master::Open(session) if !stale.is_some_and(|s| Arc::ptr_eq(s, session)) => {
                return Ok(session.clone());
            }
            Master::Open(_) | Master::Idle => {}
        }
        let session = Arc::new(self.connect().await?);
        *master = Master::Open(session.clone());
        Ok(session)
    }

    async fn connect(&self) -> Result<Session, RemoteError> {
        let target = &self.config.target;
        let mut builder = SessionBuilder::default();
        builder
            .known_hosts_check(KnownHosts::Strict)
            .control_directory(std::env::temp_dir())
            .control_persist(ControlPersist::IdleFor(
                std::num::NonZeroUsize::new(IDLE_MASTER.as_secs() as usize)
                    .expect("the idle time is not zero"),
            ))
            .connect_timeout(self.config.connect_timeout)
            .server_alive_interval(KEEPALIVE);
        if let Some(user) = &target.user {
            builder.user(user.clone());
        }
        if let Some(port) = target.port {
            builder.port(port);
        }
        if let Some(identity) = &self.config.identity {
            builder.keyfile(identity);
        }
        if let Some(file) = &self.known_hosts {
            builder.user_known_hosts_file(file);
        }
        match builder.connect_mux(&target.host).await {
            Ok(session) => Ok(session),
            Err(openssh::Error::Connect(said)) => {
                let attempt = Attempt {
                    target,
                    known_hosts: self.known_hosts.as_deref(),
                    connect_timeout: self.config.connect_timeout,
                };
                Err(connect_refusal(&attempt, &said.to_string()).await)
            }
            Err(e) => Err(RemoteError::Unavailable(format!("ssh {target}: cannot open the connection: {e}"))),
        }
    }

    fn lost(&self) -> RemoteError {
        RemoteError::Failed(format!("ssh {}: lost the connection to the host", self.config.target))
    }
}

/// Starts `line` on a channel of `session`.
async fn spawn(
    session: &Arc<Session>,
    line: &str,
    stdin: bool,
) -> Result<openssh::Child<Arc<Session>>, openssh::Error> {
    Session::to_raw_command(session.clone(), line)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .await
}

#[async_trait::async_trait]
impl RemoteTransport for SshTransport {
    fn kind(&self) -> &'static str {
        "ssh"
    }

    fn describe(&self) -> String {
        format!("ssh {}", self.config.target)
    }

    async fn exec(&self, spec: RemoteExecSpec) -> Result<RemoteChild, RemoteError> {
        let line = remote_command_line(&spec)?;
        let session = self.session(None).await?;
        let spawned = match spawn(&session, &line, spec.stdin).await {
            // The master went away while idle (its idle time ran out, the host dropped it):
            // one new master, one more try.
            Err(openssh::Error::Disconnected) => {
                spawn(&self.session(Some(&session)).await?, &line, spec.stdin).await
            }
            other => other,
        };
        let mut child = spawned.map_err(|e| match e {
            openssh::Error::Disconnected => self.lost(),
            e => RemoteError::Failed(format!("ssh {}: cannot start the command: {e}", self.config.target)),
        })?;
        let missing = || RemoteError::Failed("ssh: a requested stream of the command is missing".to_owned());
        let stdin = child.stdin().take().map(|s| Box::new(s) as _);
        let stdout = Box::new(child.stdout().take().ok_or_else(missing)?);
        let stderr = Box::new(child.stderr().take().ok_or_else(missing)?);
        let lost = self.lost();
        let target = self.config.target.to_string();
        let exit = async move {
            let session = child.session();
            let exited = |code| Ok(RemoteExit { code, out_of_memory: false });
            match child.wait().await {
                Ok(status) => exited(status.code()),
                // The mux client turns exit status 127 into this error.
                Err(openssh::Error::Remote(e)) if e.kind() == ErrorKind::NotFound => exited(Some(127)),
                // Ended by a signal, or the connection is gone: the master tells which.
                Err(openssh::Error::RemoteProcessTerminated) => match session.check().await {
                    Ok(()) => exited(None),
                    Err(_) => Err(lost),
                },
                Err(openssh::Error::Disconnected) => Err(lost),
                Err(e) => Err(RemoteError::Failed(format!("ssh {target}: {e}"))),
            }
        }
        .boxed();
        Ok(RemoteChild { stdin, stdout, stderr, exit })
    }

    async fn probe(&self) -> Result<String, RemoteError> {
        let session = self.session(None).await?;
        let output = Session::to_raw_command(session, "uname -srm")
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| RemoteError::Failed(format!("ssh {}: uname: {e}", self.config.target)))?;
        match output.status.success() {
            true => Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned()),
            false => Err(RemoteError::Failed(format!(
                "ssh {}: uname failed: {}",
                self.config.target,
                String::from_utf8_lossy(&output.stderr).trim()
            ))),
        }
    }

    async fn shutdown(&self) -> Result<(), RemoteError> {
        let previous = std::mem::replace(&mut *self.master.lock().await, Master::Closed);
        let Master::Open(session) = previous else { return Ok(()) };
        // Ends the master now, with whatever channels it still has; the session's own drop
        // would wait for the last child to let go of it.
        let socket = session.control_socket().to_path_buf();
        let ended =
            tokio::task::spawn_blocking(move || openssh_mux_client::shutdown_mux_master(&socket)).await;
        drop(session);
        match ended {
            Ok(Ok(())) => Ok(()),
            // Gone already (idle time, lost connection): nothing left to end.
            Ok(Err(openssh_mux_client::Error::IOError(e)))
                if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) =>
            {
                Ok(())
            }
            Ok(Err(e)) => {
                Err(RemoteError::Failed(format!("ssh {}: closing the connection: {e}", self.config.target)))
            }
            Err(e) => {
                Err(RemoteError::Failed(format!("ssh {}: closing the connection: {e}", self.config.target)))
            }
        }
    }
}
