//! Errors of the argv-level entry points, keeping every fact of a spawn failure.

use dsh_shell::ShellError;
use dsh_subprocess::{OsSpawnError, SpawnError};

/// Why [`crate::LocalBashExecutor::run_argv`] produced no result.
///
/// A spawn refused by the OS stays an [`OsSpawnError`] (errno, program, and whether the
/// working directory, a pre-exec hook or the exec failed), so a wrapping executor can tell a
/// missing runner from a missing workdir. Converts into the seam's [`ShellError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Spawn(#[from] OsSpawnError),
    #[error(transparent)]
    Shell(#[from] ShellError),
}

impl From<SpawnError> for ExecError {
    fn from(e: SpawnError) -> Self {
        match e {
            SpawnError::Os(e) => ExecError::Spawn(e),
            SpawnError::AbortedBeforeSpawn(reason) => {
                ExecError::Shell(ShellError::AbortedBeforeSpawn(reason))
            }
            SpawnError::InvalidGrace | SpawnError::InvalidArgv => {
                ExecError::Shell(ShellError::Invalid(e.to_string()))
            }
            SpawnError::NoRuntime => ExecError::Shell(ShellError::Other(e.to_string())),
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
