//! Finding the executable on the **child's** `PATH`.
//!
//! Resolving in the parent (rather than letting `execvp` search the parent's `PATH`) gives the
//! child's environment the last word and keeps the spawn on the `posix_spawn` fast path, which
//! the standard library only takes for a program given as a path.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::unistd::AccessFlags;

/// `execvp`'s search path when `PATH` is unset (glibc's `_CS_PATH`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Resolves `program` like `execvp` would with `path_var` as `PATH`.
///
/// A program containing `/` is used as is. Otherwise each `PATH` entry is tried in order
/// (an empty entry means the child's working directory); the first executable regular file
/// wins. Nothing found is `ENOENT`, or `EACCES` when a candidate existed but could not be
/// executed.
pub(crate) fn resolve_program(program: &str, path_var: Option<&OsStr>, cwd: &Path) -> Result<PathBuf, Errno> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let path_var = path_var.unwrap_or(OsStr::new(DEFAULT_PATH));
    let mut denied = false;
    for dir in path_var.as_bytes().split(|b| *b == b':') {
        let dir = Path::new(OsStr::from_bytes(dir));
        let candidate = if dir.as_os_str().is_empty() {
            cwd.join(program)
        } else if dir.is_relative() {
            cwd.join(dir).join(program)
        } else {
            dir.join(program)
        };
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() => {
                if nix::unistd::access(&candidate, AccessFlags::X_OK).is_ok() {
                    return Ok(candidate);
                }
                denied = true;
            }
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => denied = true,
            Err(_) => {}
        }
    }
    Err(if denied { Errno::EACCES } else { Errno::ENOENT })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn searches_the_given_path_not_the_parents() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tool = dir.path().join("only-here");
        std::fs::write(&tool, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = OsString::from(format!("/nonexistent:{}", dir.path().display()));
        assert_eq!(resolve_program("only-here", Some(&path), Path::new("/")), Ok(tool));
        assert_eq!(
            resolve_program("only-here", Some(OsStr::new("/usr/bin")), Path::new("/")),
            Err(Errno::ENOENT)
        );
        assert_eq!(resolve_program("./x", Some(OsStr::new("")), Path::new("/")), Ok(PathBuf::from("./x")));
    }

    #[test]
    fn a_non_executable_candidate_is_eacces() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tool = dir.path().join("plain");
        std::fs::write(&tool, "data").expect("write");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let path = dir.path().as_os_str().to_owned();
        assert_eq!(resolve_program("plain", Some(&path), Path::new("/")), Err(Errno::EACCES));
    }

    #[test]
    fn empty_entry_is_the_child_cwd() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tool = dir.path().join("here");
        std::fs::write(&tool, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(resolve_program("here", Some(OsStr::new("/nonexistent:")), dir.path()), Ok(tool));
    }

    use std::ffi::OsString;
}
