//! Commands on an SSH host: the SSH [`RemoteTransport`](dsh_shell_remote::RemoteTransport)
//! for the remote executors of `dsh-shell-remote`.
//!
//! [`SshTransport`] runs each program as one channel of a single multiplexed master
//! connection per session, opened on first use and closed by `shutdown`.
//!
//! # Why the system's OpenSSH client (the `openssh` crate), not an SSH library
//!
//! What an SSH executor must get right is what `ssh` already does, and what users already
//! configured for it: host-key checking against `known_hosts` (hashed entries, `@revoked`,
//! `@cert-authority`, `GlobalKnownHostsFile`), keys from the agent or an identity file
//! (hardware keys, certificates), `ssh_config` (`ProxyJump`, aliases, `HostName`). A pure-Rust
//! client (`russh`) would reimplement each of these and differ from `ssh` in the details that
//! matter for security. `openssh` drives the system client with a ControlMaster connection;
//! with its `native-mux` feature each program is a channel opened by speaking the
//! multiplexing protocol to the master's socket (no `ssh` process per call), and the master
//! reports each program's exit status, so a program exiting 255 is not mistaken for a lost
//! connection (which the master's liveness tells apart).
//!
//! # What it enforces
//!
//! * `StrictHostKeyChecking=yes` against one known-hosts file (configured, else the user's):
//!   an unknown host is an error naming the key's SHA256 fingerprint, and nothing is ever
//!   added to the file.
//! * `BatchMode=yes`: no password or passphrase prompt; keys come from the ssh agent or the
//!   configured identity (then only it).
//! * Nothing of the connection is reachable from a tool call: the host, user, key and
//!   known-hosts file come from the harness's configuration.
//! * Every word of the remote command line is quoted (see [`remote_command_line`]).
//!
//! # The executor
//!
//! The plugin [`ShellSshPlugin`] (`shell-ssh`) provides `shell`: the remote executor of
//! `dsh-shell-remote` over this transport, which builds the `shell` contract (bounded capture
//! with spill files on the harness's side, timeouts that kill the call's processes on the
//! host) over any transport. The remote account's login shell must be a POSIX shell, and the
//! host needs `bash` and `/proc`. Each command is one session channel of the connection: the
//! host's `sshd` `MaxSessions` (10 by default) bounds the calls and background jobs running at
//! once; kills travel on the command's own channel, so they work with every channel in use.

mod command_line;
#[cfg(feature = "fixture")]
pub mod fixture;
mod plugin;
mod refusal;
mod target;
mod transport;

pub use command_line::remote_command_line;
pub use plugin::{CheckedShellSshConfig, SSH_TRANSPORT, ShellSshConfig, ShellSshPlugin};
pub use target::{DEFAULT_PORT, SshTarget, TargetError};
pub use transport::{DEFAULT_CONNECT_TIMEOUT, SshConfig, SshTransport};
