//! Errors of the argv-level entry points, keeping every fact of a spawn failure.

use dsh_core::AbortSignal;
use dsh_shell::ShellError;
use dsh_subprocess::{OsSpawnError, SpawnError};

/// Why [`crate::LocalBashExecutor::run_argv`] produced no result.
///
/// A spawn refused by the OS stays an [`OsSpawnError`] (errno, program, and whether the
/// working directory, a pre-exec hook or the exec failed), so a wrapping executor can tell a
/// missing runner from a missing workdir. Converts into the seam's [`ShellError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The OS refused to start the argv, with every fact of the failure.
    #[error(transparent)]
    Spawn(#[from] OsSpawnError),
    /// Any other failure, already in the seam's terms.
    #[error(transparent)]
    Shell(#[from] ShellError),
}

/// A spawn failure of a spawn cancelled by `signal`'s token: a cancellation before the spawn
/// reads `aborted before spawn: <the signal's reason>`.
pub(crate) fn spawn_failure(e: SpawnError, signal: Option<&AbortSignal>) -> ExecError {
    match e {
        SpawnError::CancelledBeforeSpawn => {
            let reason = signal.and_then(AbortSignal::reason).map_or("aborted", |r| r.message.as_str());
            ExecError::Shell(ShellError::AbortedBeforeSpawn(reason.to_owned()))
        }
        e => e.into(),
    }
}

impl From<SpawnError> for ExecError {
    /// A cancellation before the spawn reads `aborted before spawn: aborted` here; with the
    /// signal at hand, `spawn_failure` gives its reason.
    fn from(e: SpawnError) -> Self {
        match e {
            SpawnError::Os(e) => ExecError::Spawn(e),
            SpawnError::CancelledBeforeSpawn => {
                ExecError::Shell(ShellError::AbortedBeforeSpawn("aborted".to_owned()))
            }
            SpawnError::InvalidGrace | SpawnError::InvalidArgv => {
                ExecError::Shell(ShellError::Invalid(e.to_string()))
            }
            SpawnError::NoRuntime | SpawnError::Terminal(_) => {
                ExecError::Shell(ShellError::Other(e.to_string()))
            }
        }
    }
}

/// The seam's form of an OS spawn failure (`spawn bash ENOENT`, code `ENOENT`; a missing
/// working directory reads `spawn bash ENOENT: working directory /x does not exist`).
pub fn shell_spawn_error(e: &OsSpawnError) -> ShellError {
    ShellError::Spawn { message: e.to_string(), code: Some(e.code()), program: e.program.clone() }
}

impl From<ExecError> for ShellError {
    fn from(e: ExecError) -> Self {
        match e {
            ExecError::Spawn(e) => shell_spawn_error(&e),
            ExecError::Shell(e) => e,
        }
    }
}
