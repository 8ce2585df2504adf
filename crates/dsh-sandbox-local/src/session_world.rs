//! The host side of each session's world: the directories behind its private `/tmp` and
//! `/dev/shm`, the empty file and directory (mode `000`) that cover the paths a command must
//! not read, and what the harness shares read-only. Both runners build the same world from
//! the [`WorldSpec`] made here.
//!
//! A session's directories are kept across its calls, so a file one call leaves in `/tmp` is
//! there for the next — also when each call is another process (`dsh-bash call --session`):
//! a named session's live in `<os temp>/dsh-sandbox-<euid>/<hash of DSH_HOME and the
//! session id>` (the first level mode `0700`, owned by the harness's user, checked on every
//! use; kept for later calls of the session, left to the system's temporary-file cleaning).
//! Calls without a session get directories in the provider's own `<os temp>/dsh-sandbox-XXXXXX`,
//! removed when the provider is dropped; that one is mode `0711` (enterable, not listable)
//! with random names inside, and the `/tmp` there is mode `1777`, like the host's,
//! because such a command may run under another uid than the harness.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dsh_sandbox::{SandboxExecutionPolicy, SandboxMode};

use crate::config::LocalSandboxConfig;
use crate::inprocess::{PRIVATE_TMP, WorldSpec};

/// Directories whose sockets a confined command must not reach (masked by an empty tmpfs).
const HIDDEN_DIRS: [&str; 2] = ["/run", "/var/run"];

/// The provider's session worlds.
#[derive(Debug, Default)]
pub(crate) struct SessionWorlds {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    base: Option<tempfile::TempDir>,
    sessions: Vec<(Option<String>, PathBuf)>,
    /// Each share with the session whose worlds get it (`None`: every world; `Some(None)`:
    /// the worlds of the calls without a session).
    shares: Vec<(Option<Option<String>>, PathBuf)>,
}

impl SessionWorlds {
    /// Registers a directory to keep readable at its path in every later world (`session`
    /// `None`), or in the later worlds of one session only (`Some(id)`, `Some(None)` for the
    /// calls without a session): another session's world neither shows it nor its mount point.
    pub(crate) fn share(&self, session: Option<Option<&str>>, path: &Path) {
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let share = (session.map(|id| id.map(str::to_owned)), path);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !state.shares.contains(&share) {
            state.shares.push(share);
        }
    }

    /// The directory behind `session`'s private `/tmp` and `/dev/shm`, once a world was made
    /// for it.
    pub(crate) fn session_dir(&self, session: Option<&str>) -> Option<PathBuf> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.sessions.iter().find(|(id, _)| id.as_deref() == session).map(|(_, dir)| dir.clone())
    }

    /// The writable roots and the world of a command under `policy`.
    pub(crate) fn spec(
        &self,
        policy: &SandboxExecutionPolicy,
        config: &LocalSandboxConfig,
    ) -> Result<(Vec<PathBuf>, WorldSpec), String> {
        let mut roots = vec![policy.workspace_root.clone()];
        for extra in &policy.extra_roots {
            if !roots.contains(extra) {
                roots.push(extra.clone());
            }
        }
        let (writable, git_protected) = match policy.mode {
            SandboxMode::WorkspaceWrite => {
                let mut writable = roots.clone();
                let git = linked_worktree_dirs(&roots);
                for dir in git.writable {
                    if !writable.iter().any(|w| dir.starts_with(w)) {
                        writable.push(dir);
                    }
                }
                (writable, git.protected)
            }
            _ => (Vec::new(), Vec::new()),
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let base = match &state.base {
            Some(base) => base.path().to_path_buf(),
            None => {
                let base = tempfile::Builder::new()
                    .prefix("dsh-sandbox-")
                    .tempdir()
                    .map_err(|e| format!("cannot make the sandbox's private directory: {e}"))?;
                let path = std::fs::canonicalize(base.path()).map_err(|e| e.to_string())?;
                set_mode(&path, 0o711)?;
                // The covers of denied paths: mode 000, so a read is refused (`EACCES`), not
                // answered with nothing; they are bound read-only, so not even their owner can
                // change that in the command's world.
                make_dir(&path.join("empty.d"), 0o000)?;
                std::fs::write(path.join("empty"), b"").map_err(|e| e.to_string())?;
                set_mode(&path.join("empty"), 0o000)?;
                state.base = Some(base);
                path
            }
        };
        let session = match state.sessions.iter().find(|(id, _)| *id == policy.session_id) {
            Some((_, dir)) => dir.clone(),
            None => {
                let dir = match &policy.session_id {
                    Some(id) => named_session_dir(id)?,
                    None => tempfile::Builder::new()
                        .prefix("s")
                        .rand_bytes(16)
                        .permissions(std::fs::Permissions::from_mode(0o711))
                        .tempdir_in(&base)
                        .map_err(|e| format!("cannot make a session directory in {}: {e}", base.display()))?
                        .keep(),
                };
                for sub in ["tmp", "shm"] {
                    if !dir.join(sub).is_dir() {
                        make_dir(&dir.join(sub), 0o1777)?;
                    }
                }
                state.sessions.push((policy.session_id.clone(), dir.clone()));
                dir
            }
        };
        let mut shares: Vec<PathBuf> = Vec::new();
        for (owner, path) in &state.shares {
            let mine = owner.as_ref().is_none_or(|id| *id == policy.session_id);
            if mine && !shares.contains(path) {
                shares.push(path.clone());
            }
        }
        // A read-only command still sees its workspace and further roots, also when they
        // live below `/tmp`.
        if policy.mode != SandboxMode::WorkspaceWrite {
            for root in roots {
                if !shares.contains(&root) {
                    shares.push(root);
                }
            }
        }
        let hidden = hidden_dirs(&writable);
        // Other sessions' own directories (their private `/tmp` and `/dev/shm`, their spill
        // files) are covered like denied reads wherever the world would show them (a
        // temporary directory outside `/tmp`); below `/tmp` they are out of its reach anyway.
        let mut spellings = config.denied_reads();
        let others = state.sessions.iter().filter(|(id, _)| *id != policy.session_id).map(|(_, dir)| dir);
        let foreign = state
            .shares
            .iter()
            .filter(|(owner, _)| owner.as_ref().is_some_and(|id| *id != policy.session_id));
        spellings
            .extend(others.chain(foreign.map(|(_, path)| path)).filter(|p| !shares.contains(p)).cloned());
        let (mut protected, mut protected_ids) = protected_paths(&writable, &config.protected_paths);
        for (path, id) in git_protected {
            if !protected.contains(&path) {
                protected.push(path);
                protected_ids.push(id);
            }
        }
        let (masks, mask_ids) = denied_paths(&spellings, &hidden);
        let identities = protected_ids.into_iter().chain(mask_ids).collect();
        let pinned = pinned_dirs(&writable, protected.iter().chain(masks.iter().map(|(p, _)| p)));
        // Every spelling resolved as far as it exists, once, for the late covers and the
        // Landlock rules; those below the private `/tmp` or a hidden directory are out of reach.
        let reachable: Vec<PathBuf> = spellings
            .iter()
            .filter_map(|p| resolve_missing(p))
            .filter(|p| !p.starts_with(PRIVATE_TMP) && !hidden.iter().any(|h| p.starts_with(h)))
            .collect();
        let spec = WorldSpec {
            tmp: session.join("tmp"),
            shm: session.join("shm"),
            writable: policy.mode == SandboxMode::WorkspaceWrite,
            protected,
            pinned,
            masks,
            empty_file: base.join("empty"),
            empty_dir: base.join("empty.d"),
            late: late_paths(&reachable),
            reads: read_denial(&reachable, &writable),
            identities,
            hidden,
            shares,
        };
        // Mount points for what is re-attached below the private `/tmp`, made here, in the
        // host directory behind it, by the harness (both runners use them).
        for (path, _) in spec.below_tmp(&writable) {
            let point = path.strip_prefix(PRIVATE_TMP).ok().map(|relative| spec.tmp.join(relative));
            let Some(point) = point.filter(|p| !p.exists()) else { continue };
            let fail = |e: std::io::Error| {
                format!("cannot make a mount point for {} in the private /tmp: {e}", path.display())
            };
            // A shared file (a program) gets an empty file as its mount point.
            match path.is_dir() {
                true => std::fs::create_dir_all(&point).map_err(fail)?,
                false => {
                    if let Some(parent) = point.parent() {
                        std::fs::create_dir_all(parent).map_err(fail)?;
                    }
                    std::fs::File::create(&point).map_err(fail)?;
                }
            }
        }
        Ok((writable, spec))
    }
}

/// A file's device and inode.
type Identity = (u64, u64);

/// The covers to mount: each existing path of `spellings`, canonical, with whether it is a
/// directory. Skipped: missing paths (nothing to read), paths below the private `/tmp` or a
/// hidden directory (the host's are out of reach there anyway), and paths inside another
/// cover (unreachable through it; its mount point would not exist in the empty cover). With
/// each cover, in the same order, the identity of what it covers (for the world's key).
fn denied_paths(spellings: &[PathBuf], hidden: &[PathBuf]) -> (Vec<(PathBuf, bool)>, Vec<Identity>) {
    use std::os::unix::fs::MetadataExt;
    let mut found: Vec<(PathBuf, bool, Identity)> = Vec::new();
    for path in spellings.iter().filter_map(|p| std::fs::canonicalize(p).ok()) {
        if path.starts_with(PRIVATE_TMP) || hidden.iter().any(|h| path.starts_with(h)) {
            continue;
        }
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if found.iter().any(|(other, ..)| path.starts_with(other)) {
            continue;
        }
        found.retain(|(other, ..)| !other.starts_with(&path));
        found.push((path, meta.is_dir(), (meta.dev(), meta.ino())));
    }
    found.into_iter().map(|(path, dir, id)| ((path, dir), id)).unzip()
}

/// The directories strictly inside a writable root on the way to each of `covered`, shallowest
/// first: pinned in the command's world so it cannot move a cover away with its directory.
fn pinned_dirs<'a>(roots: &[PathBuf], covered: impl Iterator<Item = &'a PathBuf>) -> Vec<PathBuf> {
    let mut pinned: Vec<PathBuf> = Vec::new();
    for path in covered {
        let Some(root) = roots.iter().find(|r| path.starts_with(r)) else { continue };
        for dir in path.ancestors().skip(1).take_while(|a| a.starts_with(root) && *a != root.as_path()) {
            let real = std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir());
            if real && !pinned.iter().any(|p| p == dir) {
                pinned.push(dir.to_path_buf());
            }
        }
    }
    pinned.sort_by_key(|p| p.components().count());
    pinned
}

/// The denied reads the Landlock rules keep closed: every reachable denied path (resolved,
/// existing or not) except those inside a writable root, which the writable root's own rule
/// grants in full (there the cover alone holds, and is made again when the host replaces the
/// file, see `world::recover`).
fn read_denial(reachable: &[PathBuf], writable: &[PathBuf]) -> crate::inprocess::ReadDenial {
    crate::inprocess::ReadDenial::new(
        reachable.iter().filter(|p| !writable.iter().any(|w| p.starts_with(w))).cloned(),
    )
}

/// The reachable denied paths that do not exist yet.
fn late_paths(reachable: &[PathBuf]) -> Vec<PathBuf> {
    let mut late: Vec<PathBuf> = Vec::new();
    for path in reachable {
        if std::fs::symlink_metadata(path).is_err() && !late.contains(path) {
            late.push(path.clone());
        }
    }
    late
}

/// `path` with the longest existing prefix canonicalized and the missing rest appended; `None`
/// for a relative path or a rest that climbs (`..`).
fn resolve_missing(path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut rest = Vec::new();
    let mut existing = path;
    loop {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            let mut resolved = canonical;
            for part in rest.iter().rev() {
                resolved.push(part);
            }
            return Some(resolved);
        }
        let name = existing.file_name()?;
        if name == ".." {
            return None;
        }
        rest.push(name.to_os_string());
        existing = existing.parent()?;
    }
}

/// The stable directory of a named session, made if missing; its parent must be owned by the
/// harness's user and closed to everyone else.
fn named_session_dir(id: &str) -> Result<PathBuf, String> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let parent = std::env::temp_dir().join(format!("dsh-sandbox-{euid}"));
    ensure_dir(&parent)?;
    let meta = std::fs::symlink_metadata(&parent)
        .map_err(|e| format!("cannot inspect {}: {e}", parent.display()))?;
    if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} must be a directory owned by uid {euid} and closed to others (mode 0700)",
            parent.display()
        ));
    }
    // The std hasher with its fixed keys: the same name in every process.
    let mut hasher = std::hash::DefaultHasher::new();
    std::env::var_os("DSH_HOME").hash(&mut hasher);
    id.hash(&mut hasher);
    let dir = parent.join(format!("session-{:016x}", hasher.finish()));
    ensure_dir(&dir)?;
    Ok(dir)
}

/// Makes `path` (mode `0700`) unless it exists already.
fn ensure_dir(path: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(format!("cannot make {}: {e}", path.display()))
        }
        _ => Ok(()),
    }
}

/// The protected paths that exist inside each writable root (a symlink counts by its target,
/// when that is inside the root too), and in the same order the identity of each.
fn protected_paths(roots: &[PathBuf], relative: &[String]) -> (Vec<PathBuf>, Vec<Identity>) {
    use std::os::unix::fs::MetadataExt;
    let mut found: Vec<PathBuf> = Vec::new();
    let mut ids = Vec::new();
    for root in roots {
        for rel in relative {
            let path = root.join(rel);
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            let (path, meta) = if meta.file_type().is_symlink() {
                match std::fs::canonicalize(&path) {
                    Ok(target) if target.starts_with(root) => match std::fs::symlink_metadata(&target) {
                        Ok(meta) => (target, meta),
                        Err(_) => continue,
                    },
                    _ => continue,
                }
            } else {
                (path, meta)
            };
            if !found.contains(&path) {
                found.push(path);
                ids.push((meta.dev(), meta.ino()));
            }
        }
    }
    (found, ids)
}

/// What a linked git worktree needs written outside itself, and what stays read-only there.
#[derive(Debug, Default)]
struct LinkedWorktreeDirs {
    /// The worktree's own git directory (`<common>/worktrees/<name>`: its index, `HEAD`,
    /// logs) and the main repository's `objects`, `refs` and `logs`.
    writable: Vec<PathBuf>,
    /// The pointer files of the worktree's git directory (`commondir`, `gitdir`), which say
    /// where git finds the repository's config and hooks, with their identities.
    protected: Vec<(PathBuf, Identity)>,
}

/// For each root inside a linked worktree (a `.git` file at or above it naming a git
/// directory with a `commondir`, whose `gitdir` file names that `.git` file back), the directories `git add` and `git commit` write in the
/// main repository. Its config, hooks and `info` stay out of reach, and so does
/// `packed-refs` (rewritten only when a packed ref is deleted or refs are packed).
fn linked_worktree_dirs(roots: &[PathBuf]) -> LinkedWorktreeDirs {
    use std::os::unix::fs::MetadataExt;
    let mut found = LinkedWorktreeDirs::default();
    for root in roots {
        let Some(tree) = root.ancestors().find(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok())
        else {
            continue;
        };
        let dot_git = tree.join(".git");
        if !std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let pointer = |path: &Path, prefix: &str| -> Option<PathBuf> {
            let text = std::fs::read_to_string(path).ok().filter(|t| t.len() <= 4096)?;
            let target = text.strip_prefix(prefix)?.trim_end_matches(['\n', '\r']).trim_start();
            (!target.is_empty()).then(|| std::fs::canonicalize(path.parent()?.join(target)).ok()).flatten()
        };
        let Some(gitdir) = pointer(&dot_git, "gitdir:") else { continue };
        let Some(common) = pointer(&gitdir.join("commondir"), "") else { continue };
        if gitdir == common || !gitdir.starts_with(common.join("worktrees")) {
            continue;
        }
        // The git directory names this worktree back (`git worktree add` wrote both): a
        // `.git` file a command wrote, naming another repository's worktree, opens nothing.
        let back = pointer(&gitdir.join("gitdir"), "");
        if back.is_none() || back != std::fs::canonicalize(&dot_git).ok() {
            continue;
        }
        let dirs = [gitdir.clone(), common.join("objects"), common.join("refs"), common.join("logs")];
        for dir in dirs {
            let real = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
            if real && !found.writable.contains(&dir) {
                found.writable.push(dir);
            }
        }
        for name in ["commondir", "gitdir"] {
            let path = gitdir.join(name);
            if let Ok(meta) = std::fs::symlink_metadata(&path)
                && meta.is_file()
                && !found.protected.iter().any(|(p, _)| *p == path)
            {
                found.protected.push((path, (meta.dev(), meta.ino())));
            }
        }
    }
    found
}

/// `/run` and the user's runtime directory, unless a writable root lives there.
fn hidden_dirs(roots: &[PathBuf]) -> Vec<PathBuf> {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    let mut hidden: Vec<PathBuf> = Vec::new();
    for dir in HIDDEN_DIRS.iter().map(PathBuf::from).chain(runtime) {
        let Ok(dir) = std::fs::canonicalize(&dir) else { continue };
        let covered = hidden.iter().any(|h| dir.starts_with(h));
        let holds_root = roots.iter().any(|r| r.starts_with(&dir) || dir.starts_with(r));
        if dir.is_dir() && !covered && !holds_root && dir != Path::new("/") {
            hidden.push(dir);
        }
    }
    hidden
}

fn make_dir(path: &Path, mode: u32) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(|e| format!("cannot make {}: {e}", path.display()))?;
    set_mode(path, mode)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denied_paths_keep_the_outermost_existing_cover() {
        let dir = tempfile::Builder::new().prefix("dsh-denied-").tempdir_in("/var/tmp").unwrap();
        let d = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(d.join("config/gh")).unwrap();
        std::fs::write(d.join("netrc"), "x").unwrap();
        std::fs::create_dir_all(d.join("run/user")).unwrap();
        let spellings = [
            d.join("config/gh"),
            d.join("missing"),
            d.join("netrc"),
            d.join("config"),
            d.join("config/gh"),
            d.join("run/user"),
            PathBuf::from("/tmp"),
        ];
        assert_eq!(
            denied_paths(&spellings, &[d.join("run")]).0,
            [(d.join("netrc"), false), (d.join("config"), true)]
        );
    }
}
