//! Runner spawn-failure attribution: telling a failed sandbox runner from an ordinary
//! command-start failure.
//!
//! A Rust spawn error carries an errno but no Node-style `syscall`/`path`, so the executor
//! states what it knows instead: the errno name, the program whose `exec` was attempted, and
//! which step failed. A failed `chdir` into a missing workdir must stay an ordinary
//! command-start failure, which is why the workdir itself is checked too.

use std::path::Path;

/// Which step of a spawn failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnStage {
    /// Entering the working directory.
    Chdir,
    /// The in-child confinement (the in-process runner) refused.
    Confinement,
    /// The `exec` of the program.
    Exec,
    /// Anything else (pipes, fork, resource limits).
    Other,
}

/// What the executor knows about a failed spawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpawnFailure<'a> {
    /// The errno name, e.g. `ENOENT`.
    pub errno: &'a str,
    /// The program whose `exec` was attempted (`argv[0]` as spawned), when known.
    pub program: Option<&'a str>,
    /// The spawn step that failed.
    pub stage: SpawnStage,
}

/// Whether a failed spawn means the sandbox runner itself failed.
///
/// True only if the workdir is a usable directory (exists, is a directory, searchable) and
/// either the in-child confinement refused, or the `exec` of the known runner program
/// (exactly `runner`) failed with `ENOENT` or `EACCES`. Everything else (other errnos, a
/// mismatched or empty program, a `chdir` failure) is an ordinary command-start failure.
pub fn is_runner_spawn_failure(failure: &SpawnFailure<'_>, runner: Option<&str>, workdir: &Path) -> bool {
    if !is_usable_dir(workdir) {
        return false;
    }
    match failure.stage {
        SpawnStage::Confinement => true,
        SpawnStage::Exec => {
            let Some(runner) = runner.filter(|r| !r.is_empty()) else {
                return false;
            };
            matches!(failure.errno, "ENOENT" | "EACCES") && failure.program == Some(runner)
        }
        SpawnStage::Chdir | SpawnStage::Other => false,
    }
}

/// Exists, is a directory, and the current process may search it.
fn is_usable_dir(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    meta.is_dir() && searchable(path)
}

#[cfg(unix)]
fn searchable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(c_path.as_ptr(), libc::X_OK) == 0 }
}

#[cfg(not(unix))]
fn searchable(_path: &Path) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec<'a>(errno: &'a str, program: Option<&'a str>) -> SpawnFailure<'a> {
        SpawnFailure { errno, program, stage: SpawnStage::Exec }
    }

    /// SB-15 (unit), in Rust terms: Node's `{syscall:'spawn R', path:R}`, `{syscall:'spawn',
    /// path:R}` and `{syscall:'spawn R'}` all mean "the exec of program R failed"; a bare
    /// `{syscall:'spawn'}` is a failure without a known program; `syscall:'open'` is a failure
    /// that is not an exec; a non-object error is a failure of no known stage.
    #[test]
    fn sb_15_runner_spawn_attribution() {
        let dir = tempfile::tempdir().unwrap();
        let wd = dir.path();
        let r = Some("/opt/runner/bin/fake-runner");
        let prog = r;

        assert!(is_runner_spawn_failure(&exec("ENOENT", prog), r, wd));
        assert!(is_runner_spawn_failure(&exec("EACCES", prog), r, wd));
        for errno in ["ENOEXEC", "ENOTDIR", "EPERM", "EMFILE"] {
            assert!(!is_runner_spawn_failure(&exec(errno, prog), r, wd), "{errno}");
        }
        let open = SpawnFailure { errno: "ENOENT", program: prog, stage: SpawnStage::Other };
        assert!(!is_runner_spawn_failure(&open, r, wd));
        assert!(!is_runner_spawn_failure(&exec("ENOENT", Some("bash")), r, wd));
        assert!(!is_runner_spawn_failure(&exec("ENOENT", None), r, wd));
        assert!(!is_runner_spawn_failure(&exec("ENOENT", Some("")), r, wd));
        // Runner unknown: nothing is attributable to it.
        assert!(!is_runner_spawn_failure(&exec("ENOENT", Some("")), Some(""), wd));
        assert!(!is_runner_spawn_failure(&exec("ENOENT", Some("bwrap")), None, wd));
        // Bare and relative runner programs are compared as spelled.
        assert!(is_runner_spawn_failure(&exec("ENOENT", Some("bwrap")), Some("bwrap"), wd));
        assert!(is_runner_spawn_failure(&exec("ENOENT", Some("./r")), Some("./r"), wd));
    }

    #[test]
    fn sb_15_missing_workdir_is_never_attributed() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        for runner in ["/abs/fake-runner", "fake-runner", "./fake-runner"] {
            let failure = exec("ENOENT", Some(runner));
            assert!(!is_runner_spawn_failure(&failure, Some(runner), &missing));
            assert!(!is_runner_spawn_failure(&failure, Some(runner), &file));
            let chdir = SpawnFailure { stage: SpawnStage::Chdir, ..failure };
            assert!(!is_runner_spawn_failure(&chdir, Some(runner), dir.path()));
        }
        let confinement =
            SpawnFailure { errno: "EPERM", program: Some("bash"), stage: SpawnStage::Confinement };
        assert!(!is_runner_spawn_failure(&confinement, None, &missing));
    }

    #[test]
    fn in_child_confinement_failure_is_a_runner_failure_whatever_the_errno() {
        let dir = tempfile::tempdir().unwrap();
        for errno in ["EPERM", "EINVAL", "ENOENT"] {
            let f = SpawnFailure { errno, program: Some("bash"), stage: SpawnStage::Confinement };
            assert!(is_runner_spawn_failure(&f, None, dir.path()), "{errno}");
        }
    }
}
