//! Executors that run `bash -c` somewhere other than the harness's host — in a container, on
//! an SSH host — with the tool, the jobs, the notices and the approvals unchanged.
//!
//! A [`RemoteTransport`] only starts a program on the far side and hands back its streams
//! and its exit; everything the `shell` contract promises on top of that (the `DSH_*`
//! environment, tail-bounded capture with a spill file on the harness's side, timeouts with
//! TERM→KILL of the whole remote tree, no survivors, exit facts, background processes) is
//! built once, here, over any transport: [`RemoteExecutor`].
//!
//! The far side needs `bash` (4.4 or later), `sleep`, `head`, `cat` and a `/proc` file system
//! (`grep`, when there, makes finding a call's processes among many fast; `mktemp`, when it
//! can, holds a job's input in a temporary directory until the job reads it); nothing is
//! installed there. Each call runs a small script (`scripts/call.sh`) that starts the
//! command, reads its wait status, kills what it left behind and reports the status in a
//! frame at the end of stderr. The script's stdin is the harness's control stream: the
//! command's input, kills (timeout, abort, `job_kill`: no further channel or exec needed) and
//! a heartbeat; when it ends or falls silent, the harness is gone and the call ends itself.

#![deny(missing_docs)]

mod call;
mod executor;
mod frame;
mod process;
mod spill;
mod transport;

use std::sync::Arc;

pub use executor::RemoteExecutor;
pub use process::RemoteShellProcess;
pub use transport::{RemoteChild, RemoteError, RemoteExecSpec, RemoteExit, RemoteTransport};

/// The transport the composition's remote executor runs through, for `doctor` (which
/// probes it) and hosts that report where commands run.
pub const REMOTE_TRANSPORT: dsh_core::ServiceKey<Arc<dyn RemoteTransport>> =
    dsh_core::ServiceKey::new("remoteTransport");
