//! Why a spawn was refused or failed.

use std::fmt;
use std::path::PathBuf;

use nix::errno::Errno;

/// A spawn that did not start a process. Every variant is reported synchronously by
/// [`crate::SubprocessService::spawn`]; a process that started never fails later.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// The grace period is zero or longer than [`crate::MAX_GRACE`].
    #[error("subprocess graceMs must be a positive finite number no greater than 2147483647")]
    InvalidGrace,
    /// The argv is empty or `argv[0]` is an empty string.
    #[error("invalid argv: expected a non-empty program name at argv[0]")]
    InvalidArgv,
    /// The spawn's cancellation token was cancelled before the spawn (the caller knows why).
    #[error("aborted before spawn")]
    CancelledBeforeSpawn,
    /// Spawning needs a tokio runtime to supervise the child.
    #[error("subprocess spawn requires a tokio runtime")]
    NoRuntime,
    /// A pseudo-terminal for the child ([`crate::SpawnSpec::pty`]) could not be opened.
    #[error("cannot open a terminal for the command: {}", .0.desc())]
    Terminal(Errno),
    /// The operating system refused to start the program.
    #[error(transparent)]
    Os(#[from] OsSpawnError),
}

/// Which step of starting the child failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnStage {
    /// The working directory is missing, not a directory, or not searchable.
    Cwd,
    /// The caller's pre-exec hook failed in the child.
    PreExec,
    /// The program could not be found or executed (including a missing `#!` interpreter).
    Exec,
}

/// An OS-level spawn failure, worded like Node's `spawn <program> <ERRNO>`.
///
/// A failure of the working directory ([`SpawnStage::Cwd`]) adds what is wrong with it after
/// that prefix, so it does not read as a missing program:
/// `spawn bash ENOENT: working directory /x does not exist`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct OsSpawnError {
    /// `argv[0]` as given (not the resolved path).
    pub program: String,
    /// The errno the failing step reported.
    pub errno: Errno,
    /// Which step of starting the child failed.
    pub stage: SpawnStage,
    /// The working directory the child was to start in.
    pub cwd: PathBuf,
}

impl OsSpawnError {
    /// The errno name (`ENOENT`, `EACCES`, …).
    pub fn code(&self) -> String {
        format!("{:?}", self.errno)
    }

    /// `spawn <program>`, Node's `syscall` for the failure.
    pub fn syscall(&self) -> String {
        format!("spawn {}", self.program)
    }
}

impl fmt::Display for OsSpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spawn {} {}", self.program, self.code())?;
        if self.stage == SpawnStage::Cwd {
            let cwd = self.cwd.display();
            match self.errno {
                Errno::ENOENT => write!(f, ": working directory {cwd} does not exist")?,
                Errno::ENOTDIR => write!(f, ": working directory {cwd} is not a directory")?,
                Errno::EACCES => {
                    write!(f, ": working directory {cwd} is not accessible (permission denied)")?
                }
                errno => write!(f, ": working directory {cwd}: {}", errno.desc())?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_spawn_error_reads_like_node() {
        let e = OsSpawnError {
            program: "bash".into(),
            errno: Errno::ENOENT,
            stage: SpawnStage::Exec,
            cwd: "/".into(),
        };
        assert_eq!(e.to_string(), "spawn bash ENOENT");
        assert_eq!(e.code(), "ENOENT");
        assert_eq!(e.syscall(), "spawn bash");
        assert_eq!(SpawnError::from(e).to_string(), "spawn bash ENOENT");
    }

    #[test]
    fn a_working_directory_failure_says_so_after_the_node_prefix() {
        let e =
            |errno| OsSpawnError { program: "bash".into(), errno, stage: SpawnStage::Cwd, cwd: "/x".into() };
        assert_eq!(e(Errno::ENOENT).to_string(), "spawn bash ENOENT: working directory /x does not exist");
        assert_eq!(
            e(Errno::ENOTDIR).to_string(),
            "spawn bash ENOTDIR: working directory /x is not a directory"
        );
        assert_eq!(
            e(Errno::EACCES).to_string(),
            "spawn bash EACCES: working directory /x is not accessible (permission denied)"
        );
        assert_eq!(
            e(Errno::ELOOP).to_string(),
            format!("spawn bash ELOOP: working directory /x: {}", Errno::ELOOP.desc())
        );
        assert_eq!(e(Errno::ENOENT).code(), "ENOENT");
    }
}
