//! Where the harness keeps its files (`DSH_HOME`).

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether this process already printed [`unwritable_warning`].
static WARNED_UNWRITABLE: AtomicBool = AtomicBool::new(false);

/// The warning a harness prints (once per process) when a directory under its home cannot be
/// written (exact, pinned by tests):
/// `dsh-bash: warning: cannot write <dir>: <error>; session logs and the job journal are not kept`.
pub fn unwritable_warning(dir: &Path, error: &std::io::Error) -> String {
    format!(
        "dsh-bash: warning: cannot write {}: {error}; session logs and the job journal are not kept",
        dir.display()
    )
}

/// Creates `dir` (and its parents) and checks that the effective user may write it. When it
/// cannot be written, prints [`unwritable_warning`] on stderr — once per process, whichever
/// directory fails first — and returns the error.
pub fn ensure_writable_dir(dir: &Path) -> std::io::Result<()> {
    let checked = std::fs::create_dir_all(dir).and_then(|()| {
        nix::unistd::faccessat(
            nix::fcntl::AT_FDCWD,
            dir,
            nix::unistd::AccessFlags::W_OK,
            nix::fcntl::AtFlags::AT_EACCESS,
        )
        .map_err(std::io::Error::from)
    });
    if let Err(error) = &checked {
        warn_unwritable(dir, error);
    }
    checked
}

/// Prints [`unwritable_warning`] on stderr, unless this process already printed it (for
/// whichever directory).
pub fn warn_unwritable(dir: &Path, error: &std::io::Error) {
    if !WARNED_UNWRITABLE.swap(true, Ordering::SeqCst) {
        eprintln!("{}", unwritable_warning(dir, error));
    }
}

/// Whether a write under the home failed because the file system takes no more (full, over
/// quota, read-only, file too large) rather than because of the file itself: the home is
/// then as good as unwritable, and what the harness keeps there is not kept.
pub fn file_system_refused(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EFBIG))
}

/// The user's home directory (`$HOME`), falling back to `/`.
pub fn user_home() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// Resolves the harness home: `configured` if given, else a non-blank `ambient` value, else
/// `<home>/.dsh`; a leading `~`/`~/` expands to the user home; relative values resolve against
/// the process cwd. Always absolute and lexically normalized.
pub fn resolve_dsh_home(configured: Option<&str>, ambient: Option<&str>) -> PathBuf {
    let chosen = configured
        .map(str::to_owned)
        .or_else(|| ambient.filter(|v| !crate::json::js_is_blank(v)).map(str::to_owned));
    let Some(raw) = chosen else {
        return user_home().join(".dsh");
    };
    let expanded = if raw == "~" {
        user_home()
    } else if let Some(rest) = raw.strip_prefix("~/") {
        user_home().join(rest)
    } else {
        PathBuf::from(raw)
    };
    absolutize(&expanded)
}

/// `path` made absolute against the process cwd and lexically normalized (no symlinks resolved).
pub fn absolutize(path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")).join(path)
    };
    normalize_lexically(&joined)
}

/// Resolves `.` and `..` components without touching the filesystem.
pub fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() && !path.is_absolute() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(if path.is_absolute() { "/" } else { "." });
    }
    out
}

/// Appends `bytes` to `path`, made (with its parents) readable and writable by the user alone
/// when missing; a symlink at `path` is refused (`O_NOFOLLOW`). For the files under
/// `DSH_HOME` that the harness only ever appends to (the audit log, the user's policy file).
pub fn append_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes() {
        assert_eq!(normalize_lexically(Path::new("/usr/./bin/../lib")), PathBuf::from("/usr/lib"));
        assert_eq!(normalize_lexically(Path::new("/..")), PathBuf::from("/"));
        assert_eq!(resolve_dsh_home(Some("/h/dsh"), Some("/x")), PathBuf::from("/h/dsh"));
        assert_eq!(resolve_dsh_home(None, Some("/x/")), PathBuf::from("/x"));
        assert_eq!(resolve_dsh_home(None, Some("  ")), user_home().join(".dsh"));
        assert_eq!(resolve_dsh_home(Some("~/d"), None), user_home().join("d"));
    }
}
