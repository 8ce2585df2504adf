//! What the runner tests share: a scratch directory the confined command does not see as its
//! own `/tmp`, and spawning a confined command the way an executor does (its own process
//! group, stdin from `/dev/null`, optionally under another uid, the runner's confinement
//! applied in the child before exec).
//!
//! Each test binary includes this module with `mod common;` and uses what it needs.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dsh_sandbox::ConfinedCommand;

/// The unprivileged uid (and gid) the tests run commands under when they run as root.
pub const NOBODY: u32 = 65534;

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A parent for scratch directories outside `/tmp` and the OS temporary directory (a confined
/// command sees its own `/tmp`, and `workspace-write` may write the temporary directory).
pub fn scratch_parent() -> PathBuf {
    let tmp = std::fs::canonicalize("/tmp").unwrap();
    let os_tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap_or_else(|_| tmp.clone());
    let candidates =
        [PathBuf::from("/var/tmp"), std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default()];
    candidates
        .into_iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .find(|p| !p.starts_with(&tmp) && !p.starts_with(&os_tmp) && p != Path::new("/"))
        .expect("a scratch directory outside /tmp (/var/tmp or $HOME)")
}

/// A fresh scratch directory under [`scratch_parent`], mode 0755 so another uid can enter it;
/// the path returned is canonical. The directory goes when the guard drops.
pub fn scratch(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir_in(scratch_parent()).unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, base)
}

/// How a confined command ended.
pub struct Ended {
    pub exit: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `confined` to its end in `cwd`, under `uid` when given, and collects its output.
pub fn spawn_confined(confined: &ConfinedCommand, cwd: &Path, uid: Option<u32>) -> Ended {
    let mut cmd = Command::new(&confined.argv[0]);
    cmd.args(&confined.argv[1..]).current_dir(cwd).stdin(Stdio::null()).process_group(0);
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    if let Some(confinement) = confined.child_confinement.clone() {
        // SAFETY: `ChildConfinement` is an `unsafe` trait: `apply_in_child` is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || confinement.apply_in_child());
        }
    }
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn failed: {e}; confinement: {:?}", confined.confinement_failure()));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ended { exit: output.status.code(), stdout: text(&output.stdout), stderr: text(&output.stderr) }
}
