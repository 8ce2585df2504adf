//! Finding the executable on the **child's** `PATH`.
//!
//! Resolving in the parent (rather than letting `execvp` search the parent's `PATH`) gives the
//! child's environment the last word and keeps the spawn on the direct start (`crate::direct`),
//! which takes a program given as a path.
//!
//! A service remembers where it found each program on each `PATH`, as a shell's command hash
//! table does: the next spawn checks that one file (still an executable regular file) instead
//! of every directory before it, or, when it starts the child directly (the start reports a
//! file it cannot execute), starts that file unchecked. Like the shell's table, a program
//! that appears later in an earlier directory is not noticed while the remembered one stays; a
//! remembered one that went away is searched for afresh. A `PATH` with a relative or empty
//! entry (which depends on the working directory) is always searched.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::unistd::AccessFlags;
use parking_lot::Mutex;

/// `execvp`'s search path when `PATH` is unset (glibc's `_CS_PATH`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// How many programs a cache remembers before it starts over.
const CACHE_ENTRIES: usize = 256;

/// Where programs were found, by program and `PATH`.
#[derive(Default)]
pub(crate) struct ProgramCache {
    /// Keyed by [`cache_key`].
    found: Mutex<HashMap<Vec<u8>, PathBuf>>,
}

impl ProgramCache {
    /// [`resolve_program`], answered from the cache while the remembered file is still an
    /// executable regular file.
    pub(crate) fn resolve(
        &self,
        program: &str,
        path_var: Option<&OsStr>,
        cwd: &Path,
    ) -> Result<PathBuf, Errno> {
        let Some(key) = cache_key(program, path_var) else {
            return resolve_program(program, path_var, cwd);
        };
        let remembered = self.found.lock().get(&key).cloned();
        if let Some(found) = remembered
            && is_executable_file(&found)
        {
            return Ok(found);
        }
        let found = resolve_program(program, path_var, cwd)?;
        let mut cache = self.found.lock();
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, found.clone());
        Ok(found)
    }

    /// The file remembered for `program` on `path_var`, not checked: for a start that reports
    /// a program it cannot execute (as the direct start does), which then [`forget`](Self::forget)s
    /// it and [`resolve`](Self::resolve)s afresh. That saves two `stat`-like calls per start.
    pub(crate) fn remembered(&self, program: &str, path_var: Option<&OsStr>) -> Option<PathBuf> {
        let key = cache_key(program, path_var)?;
        self.found.lock().get(&key).cloned()
    }

    /// Forgets where `program` was found on `path_var`.
    pub(crate) fn forget(&self, program: &str, path_var: Option<&OsStr>) {
        if let Some(key) = cache_key(program, path_var) {
            self.found.lock().remove(&key);
        }
    }
}

/// The cache's key for `program` on `path_var`: the program's name, a NUL (which neither can
/// hold) and the `PATH` value. `None` when the answer is not cached: a program given as a path,
/// or a `PATH` with a relative or empty entry (which depends on the working directory).
fn cache_key(program: &str, path_var: Option<&OsStr>) -> Option<Vec<u8>> {
    let path = path_var.unwrap_or(OsStr::new(DEFAULT_PATH)).as_bytes();
    if program.contains('/') || path.split(|b| *b == b':').any(|dir| !dir.starts_with(b"/")) {
        return None;
    }
    let mut key = Vec::with_capacity(program.len() + 1 + path.len());
    key.extend_from_slice(program.as_bytes());
    key.push(0);
    key.extend_from_slice(path);
    Some(key)
}

/// Whether `path` is a regular file this process may execute.
fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file())
        && nix::unistd::access(path, AccessFlags::X_OK).is_ok()
}

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

    /// An executable script `name` in `dir`.
    fn executable(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[test]
    fn searches_the_given_path_not_the_parents() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tool = executable(dir.path(), "only-here");
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
        let tool = executable(dir.path(), "here");
        assert_eq!(resolve_program("here", Some(OsStr::new("/nonexistent:")), dir.path()), Ok(tool));
    }

    #[test]
    fn the_cache_keeps_a_found_program_and_searches_again_once_it_is_gone() {
        let early = tempfile::tempdir().expect("tempdir");
        let late = tempfile::tempdir().expect("tempdir");
        let tool = |dir: &Path| executable(dir, "tool");
        let path = OsString::from(format!("{}:{}", early.path().display(), late.path().display()));
        let cache = ProgramCache::default();
        let late_tool = tool(late.path());
        assert_eq!(cache.resolve("tool", Some(&path), Path::new("/")), Ok(late_tool.clone()));
        // Like a shell's hash table: a program that appears in an earlier directory is not
        // noticed while the remembered one is still there...
        let early_tool = tool(early.path());
        assert_eq!(cache.resolve("tool", Some(&path), Path::new("/")), Ok(late_tool.clone()));
        // ...another PATH is another search...
        let other = OsString::from(format!("{}", early.path().display()));
        assert_eq!(cache.resolve("tool", Some(&other), Path::new("/")), Ok(early_tool.clone()));
        // ...and one that stopped being executable, or went away, is searched for again.
        std::fs::set_permissions(&late_tool, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(cache.resolve("tool", Some(&path), Path::new("/")), Ok(early_tool.clone()));
        std::fs::remove_file(&early_tool).expect("remove");
        assert_eq!(cache.resolve("tool", Some(&path), Path::new("/")), Err(Errno::EACCES));
        std::fs::remove_file(&late_tool).expect("remove");
        assert_eq!(cache.resolve("tool", Some(&path), Path::new("/")), Err(Errno::ENOENT));
    }

    #[test]
    fn a_path_that_depends_on_the_working_directory_is_never_cached() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tool = executable(dir.path(), "here");
        let cache = ProgramCache::default();
        assert_eq!(cache.resolve("here", Some(OsStr::new("/nonexistent:")), dir.path()), Ok(tool));
        assert_eq!(
            cache.resolve("here", Some(OsStr::new("/nonexistent:")), Path::new("/")),
            Err(Errno::ENOENT)
        );
        assert!(cache.found.lock().is_empty());
    }

    use std::ffi::OsString;
}
