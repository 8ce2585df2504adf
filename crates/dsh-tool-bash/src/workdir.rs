//! Workdir resolution: an absolute workdir is used as given; a relative one resolves against
//! (and an absent one defaults to) the policy root, else the session's canonical cwd. N
//! sessions share one executor, so the per-session cwd comes from the call, never from
//! executor state.

use std::path::{Path, PathBuf};

use dsh_core::home::normalize_lexically;

/// The filesystem identity of a session cwd: its realpath, else the spelling as given.
fn canonical(cwd: &Path) -> PathBuf {
    std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf())
}

/// The workdir to request, or `None` to let the executor apply its own default.
///
/// `policy_root` is the standing sandbox policy's (already canonical) root when a policy
/// exists; it wins over the session cwd so confinement and launch see one spelling.
pub(crate) fn resolve_workdir(
    requested: Option<&str>,
    policy_root: Option<&Path>,
    session_cwd: Option<&Path>,
) -> Option<PathBuf> {
    let root = || policy_root.map(Path::to_path_buf).or_else(|| session_cwd.map(canonical));
    match requested {
        None => root(),
        Some(dir) if Path::new(dir).is_absolute() => Some(PathBuf::from(dir)),
        Some(dir) => match root() {
            Some(root) => Some(normalize_lexically(&root.join(dir))),
            None => Some(PathBuf::from(dir)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(resolve_workdir(None, None, None), None);
        assert_eq!(resolve_workdir(Some("rel/x"), None, None), p("rel/x"));
        assert_eq!(resolve_workdir(Some("bin"), None, Some(Path::new("/usr"))), p("/usr/bin"));
        assert_eq!(resolve_workdir(Some("../etc/./x"), None, Some(Path::new("/usr"))), p("/etc/x"));
        assert_eq!(resolve_workdir(Some("/tmp/../var"), None, Some(Path::new("/usr"))), p("/tmp/../var"));
        assert_eq!(
            resolve_workdir(Some("sub"), Some(Path::new("/ws")), Some(Path::new("/usr"))),
            p("/ws/sub")
        );
        assert_eq!(resolve_workdir(None, Some(Path::new("/ws")), Some(Path::new("/usr"))), p("/ws"));
        // A missing cwd keeps its spelling.
        assert_eq!(
            resolve_workdir(None, None, Some(Path::new("/nonexistent-dsh/a/../b"))),
            p("/nonexistent-dsh/a/../b")
        );
    }

    #[test]
    fn session_cwd_is_canonicalized_through_symlinks() {
        let dir = tempfile::tempdir().expect("tmp");
        let real = std::fs::canonicalize(dir.path()).expect("canon").join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        assert_eq!(resolve_workdir(None, None, Some(&link)), Some(real.clone()));
        assert_eq!(resolve_workdir(Some("x/.."), None, Some(&link)), Some(real));
    }
}
