//! Auto-run surfaces: the files that git, a shell or an agent runs (or trusts) later, outside
//! any sandbox, without the user naming them — hooks, the code-running keys of git configs,
//! shell start-up files, editor and agent configs.
//!
//! They are **discovered** the way git and the shells would find them, each time they are
//! checked (the git directory of each writable root as git discovers it, through `.git` files,
//! `commondir`, linked worktrees, submodules and `core.hooksPath`), **pinned** once per
//! session, and **checked** after every confined call: a file that is new or changed since
//! the pin is moved into a quarantine directory (never deleted), the pinned version is put
//! back where there was one, and the move is reported. Removals are not changes: a surface
//! that is gone runs nothing.
//!
//! The check costs one `lstat` per surface (and a directory read per hooks or config
//! directory); contents are read only for a surface whose identity, size, mode or times
//! changed. A git config is compared by its code-running keys only (read with
//! `git config --file F --null --list`, which runs nothing), so `git remote add` or
//! `git branch -u` never count as a change.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// Shell and environment start-up files a root may hold (run by login and interactive
/// shells started there with `HOME` pointing at it, or by direnv on `cd`).
const START_UP_FILES: [&str; 11] = [
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".zlogout",
    ".envrc",
];

/// What editors and agents load from a project (or the home) without the user naming it:
/// `(path, depth)`, a file when `depth` is 0, else a directory whose files `depth` levels
/// deep count. Only what configures commands, tasks, hooks, servers or instructions: an
/// agent's or editor's own transcripts, caches and extensions (`~/.claude/projects`,
/// `~/.vscode/extensions`, `.idea/workspace.xml`), which it writes itself while commands
/// run, are not surfaces.
const AGENT_PATHS: [(&str, usize); 22] = [
    (".mcp.json", 0),
    (".cursorrules", 0),
    (".github/copilot-instructions.md", 0),
    (".vscode", 1),
    (".idea/runConfigurations", 1),
    (".idea/externalDependencies.xml", 0),
    (".claude/settings.json", 0),
    (".claude/settings.local.json", 0),
    (".claude/commands", 3),
    (".claude/agents", 3),
    (".claude/hooks", 3),
    (".codex/config.toml", 0),
    (".codex/prompts", 2),
    (".cursor/mcp.json", 0),
    (".cursor/rules", 3),
    (".gemini/settings.json", 0),
    (".gemini/commands", 3),
    (".continue/config.json", 0),
    (".continue/config.yaml", 0),
    (".continue/config.ts", 0),
    (".continue/mcpServers", 2),
    (".husky", 2),
];

/// How many files of one surface directory are surfaces at most.
const WALK_LIMIT: usize = 256;
/// How deep nested repositories (submodules, linked worktrees, modules) are followed.
const NEST_DEPTH: usize = 4;
/// Surface files up to this size are kept (as pinned) so a changed one can be put back.
const KEEP_LIMIT: u64 = 1 << 20;
/// A git index larger than this is not read for the nested repositories it holds.
const INDEX_LIMIT: u64 = 64 << 20;
/// The mode of a gitlink (a nested repository's commit) in a git index.
const GITLINK: u32 = 0o160000;

/// What kind of surface a path is: how its change is judged and undone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Any new content or mode is a change (a hook, a start-up file, an agent config).
    Code,
    /// A git config: only its code-running keys count.
    Config,
}

/// The identity and times of a file as `lstat` saw it; equal ones mean equal contents
/// (the change time cannot be set back by an unprivileged process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Meta {
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Meta {
    fn of(m: &fs::Metadata) -> Meta {
        Meta {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }
}

/// A config's code-running keys and their values, in file order; `None` when the config
/// could not be read as one (it then counts by its bytes).
type Keys = Option<Vec<(String, String)>>;

/// One surface as pinned or as found.
#[derive(Clone, Debug)]
struct Seen {
    meta: Meta,
    /// The contents (a symlink's: its target, then the target's contents), when small enough.
    bytes: Option<Vec<u8>>,
    /// A config's code-running keys.
    keys: Keys,
}

/// The surfaces of a session as pinned: what existed, and enough to put it back.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    seen: BTreeMap<PathBuf, Seen>,
    /// The identity (device, inode) of each root's `.git` directory, when it was one.
    git_dirs: BTreeMap<PathBuf, (u64, u64)>,
}

impl Snapshot {
    /// How many surface files the snapshot holds.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether the snapshot holds no surface file.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// A surface that is new or changed since the pin.
#[derive(Clone, Debug)]
pub struct Change {
    /// The surface file, as found.
    pub path: PathBuf,
    /// Where it really is (its directory with symlinks resolved), under `root`.
    pub real: PathBuf,
    /// The writable root it lies under.
    pub root: PathBuf,
    kind: Kind,
    pinned: Option<Seen>,
    now: Seen,
}

impl Change {
    /// What changed, in words (`new`, `changed`, or the code-running keys of a config).
    pub fn what(&self) -> String {
        match (self.kind, &self.now.keys) {
            (Kind::Config, Some(now)) => {
                let before = self.pinned.as_ref().and_then(|p| p.keys.clone()).unwrap_or_default();
                let mut names: Vec<&str> = now
                    .iter()
                    .filter(|kv| !before.contains(kv))
                    .map(|(k, _)| k.as_str())
                    .chain(before.iter().filter(|kv| !now.contains(kv)).map(|(k, _)| k.as_str()))
                    .collect();
                names.dedup();
                format!("code-running git config keys {}", names.join(", "))
            }
            _ if self.pinned.is_none() => "new auto-run file".to_owned(),
            _ => "changed auto-run file".to_owned(),
        }
    }
}

/// A change moved into quarantine.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Quarantined {
    /// The surface file, where the command left it.
    pub path: PathBuf,
    /// Where it is now.
    pub moved_to: PathBuf,
    /// What was found (`new auto-run file`, `code-running git config keys core.fsmonitor`, …).
    pub what: String,
    /// What is at `path` now (`nothing`, `the pinned version`, `the file without those keys`).
    pub left: String,
}

impl Quarantined {
    /// The line a result carries before its exit marker.
    pub fn line(&self) -> String {
        format!(
            "[sandbox: quarantined {} ({}, written by a confined command; {} left in place); moved to {}]",
            self.path.display(),
            self.what,
            self.left,
            self.moved_to.display()
        )
    }
}

/// The auto-run surfaces of a set of writable roots. Keeps the code-running keys of the
/// configs it read, by their identity, so an unchanged config is never read twice.
#[derive(Debug)]
pub struct Surfaces {
    roots: Vec<PathBuf>,
    home: Option<PathBuf>,
    keys: Mutex<HashMap<PathBuf, (Meta, Keys)>>,
    dirs: Mutex<HashMap<PathBuf, (Meta, Arc<Listing>)>>,
    framework: Mutex<HashMap<PathBuf, (Meta, bool)>>,
    /// The gitlinks of the git indexes read, by their identity (and how they were read).
    indexes: Mutex<HashMap<PathBuf, ParsedIndex>>,
    /// The directories looked at in the current discovery pass.
    pass: Mutex<HashMap<PathBuf, Option<Arc<Listing>>>>,
}

/// What a directory entry is (a symlink counts as what it leads to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    File,
    Dir,
}

/// An index as parsed: its identity, how it was read, its gitlinks.
type ParsedIndex = (Meta, IndexRead, Arc<IndexLinks>);

/// A directory's entries by name.
type Listing = BTreeMap<std::ffi::OsString, Entry>;

/// How old a directory's last change must be before its listing is kept (well above the
/// kernel's coarse timestamp tick).
const SETTLED: std::time::Duration = std::time::Duration::from_millis(100);

impl Surfaces {
    /// The surfaces of `roots` (canonical writable roots), and of `home` when a root holds it.
    pub fn new(roots: &[PathBuf], home: Option<&Path>) -> Surfaces {
        let home = home.filter(|h| roots.iter().any(|r| h.starts_with(r))).map(Path::to_path_buf);
        Surfaces {
            roots: roots.to_vec(),
            home,
            keys: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            framework: Mutex::new(HashMap::new()),
            indexes: Mutex::new(HashMap::new()),
            pass: Mutex::new(HashMap::new()),
        }
    }

    /// The writable roots these surfaces are of.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Pins every surface as it is now.
    pub fn pin(&self) -> Snapshot {
        let mut seen = BTreeMap::new();
        for (path, kind) in self.discover() {
            if let Some(now) = self.look(&path, kind, None) {
                seen.insert(path, now);
            }
        }
        let mut snapshot = Snapshot { seen, git_dirs: BTreeMap::new() };
        self.pin_git_dirs(&mut snapshot);
        snapshot
    }

    /// Pins the identity of each root's `.git` directory as it is now.
    pub fn pin_git_dirs(&self, pinned: &mut Snapshot) {
        pinned.git_dirs = self
            .roots
            .iter()
            .filter_map(|root| {
                let m = fs::symlink_metadata(root.join(".git")).ok().filter(fs::Metadata::is_dir)?;
                Some((root.clone(), (m.dev(), m.ino())))
            })
            .collect();
    }

    /// Puts back each root's pinned `.git` directory that a command moved aside (renamed
    /// within the root's top level) and replaced — by a rebuilt repository, or by a `.git`
    /// file leading elsewhere: the replacement goes to `<dir>/<stamp>-git/<root's name>/.git`
    /// and the pinned directory returns under its name. A pinned directory that is nowhere
    /// at the top level is left to the file-by-file check.
    pub fn restore_git_dirs(&self, pinned: &mut Snapshot, dir: &Path) -> Vec<Quarantined> {
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for (root, &(dev, ino)) in &pinned.git_dirs {
            let dot_git = root.join(".git");
            if fs::symlink_metadata(&dot_git).is_ok_and(|m| m.dev() == dev && m.ino() == ino) {
                continue;
            }
            let Some(moved) = fs::read_dir(root).into_iter().flatten().flatten().find(|e| {
                e.file_name() != ".git"
                    && e.file_type().is_ok_and(|t| t.is_dir())
                    && e.metadata().is_ok_and(|m| m.dev() == dev && m.ino() == ino)
            }) else {
                gone.push(root.clone());
                continue;
            };
            let root_name = root.file_name().map(PathBuf::from).unwrap_or_default();
            let dest = dir.join(format!("{}-git", stamp())).join(root_name).join(".git");
            let result = (|| -> io::Result<()> {
                if fs::symlink_metadata(&dot_git).is_ok() {
                    let parent = dest.parent().ok_or_else(|| io::Error::other("no parent"))?;
                    std::os::unix::fs::DirBuilderExt::mode(fs::DirBuilder::new().recursive(true), 0o700)
                        .create(parent)?;
                    fs::rename(&dot_git, &dest)?;
                }
                fs::rename(moved.path(), &dot_git)
            })();
            let name = moved.file_name().to_string_lossy().into_owned();
            let left = match result {
                Ok(()) => format!("the pinned git directory, moved back from {name}"),
                Err(e) => format!("cannot be put back ({e}); the pinned git directory is at {name}"),
            };
            out.push(Quarantined {
                path: dot_git,
                moved_to: dest,
                what: "replaced git directory".to_owned(),
                left,
            });
        }
        // Nowhere to be found: what is there now is judged file by file from now on.
        for root in gone {
            pinned.git_dirs.remove(&root);
        }
        out
    }

    /// Every surface under a writable root that is new or changed since `pinned`. A surface
    /// rewritten without a change that counts (a config whose code-running keys stayed, a
    /// file rewritten with the same bytes) is pinned anew, so it is not read again.
    pub fn check(&self, pinned: &mut Snapshot) -> Vec<Change> {
        let mut changes = Vec::new();
        for (path, kind) in self.discover() {
            if !self.roots.iter().any(|r| path.starts_with(r)) {
                continue;
            }
            let before = pinned.seen.get(&path);
            let Some(now) = self.look(&path, kind, before) else {
                continue;
            };
            let changed = match before {
                None => kind == Kind::Code || now.keys.as_ref().is_none_or(|k| !k.is_empty()),
                Some(before) => match kind {
                    Kind::Code => {
                        before.meta.mode & 0o7777 != now.meta.mode & 0o7777
                            || before.meta.is_symlink() != now.meta.is_symlink()
                            || before.bytes != now.bytes
                            || (before.bytes.is_none() && before.meta != now.meta)
                    }
                    Kind::Config => match (&before.keys, &now.keys) {
                        (Some(a), Some(b)) => a != b,
                        _ => before.bytes != now.bytes || (before.bytes.is_none() && before.meta != now.meta),
                    },
                },
            };
            // Where the file really is: a surface reached through a symlink to a place outside
            // every writable root is not one a confined command could change, and nothing
            // outside them is ever moved.
            let real = path
                .parent()
                .and_then(|p| fs::canonicalize(p).ok())
                .zip(path.file_name())
                .map(|(parent, name)| parent.join(name));
            let real_root = real.as_ref().and_then(|r| self.roots.iter().find(|root| r.starts_with(root)));
            if let (true, Some(real), Some(root)) = (changed, &real, real_root) {
                changes.push(Change {
                    path,
                    real: real.clone(),
                    root: root.clone(),
                    kind,
                    pinned: before.cloned(),
                    now,
                });
            } else {
                pinned.seen.insert(path, now);
            }
        }
        changes
    }

    /// Pins `changes` as they are now: the user made them (seen before a call, while no
    /// command of the session ran), or they were just quarantined.
    pub fn accept(&self, pinned: &mut Snapshot, changes: &[Change]) {
        for change in changes {
            let kind = change.kind;
            match self.look(&change.path, kind, None) {
                Some(now) => pinned.seen.insert(change.path.clone(), now),
                None => pinned.seen.remove(&change.path),
            };
        }
    }

    /// Moves each change to `<dir>/<stamp>-<n>/<path under its root>` and puts the pinned
    /// version back where there was one; a config keeps everything but the code-running keys
    /// that changed. A change that cannot be moved is reported with the reason and left.
    pub fn quarantine(&self, changes: Vec<Change>, dir: &Path) -> Vec<Quarantined> {
        let stamp = stamp();
        let mut out = Vec::new();
        for (n, change) in changes.into_iter().enumerate() {
            let relative = change.real.strip_prefix(&change.root).unwrap_or(&change.real);
            let root_name = change.root.file_name().map(PathBuf::from).unwrap_or_default();
            let dest = dir.join(format!("{stamp}-{}", n + 1)).join(root_name).join(relative);
            let what = change.what();
            let left = match quarantine_one(&change, &dest) {
                Ok(left) => left,
                Err(e) => format!("cannot be moved ({e}), so it stays"),
            };
            // A restored config is read again at the next check.
            let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            keys.remove(&change.path);
            keys.remove(&change.real);
            drop(keys);
            out.push(Quarantined { path: change.real, moved_to: dest, what, left });
        }
        out
    }

    /// A surface as it is now, `None` when it does not exist (or is a directory) or when
    /// its identity, mode, size and times are those of `before` (then its contents are too).
    fn look(&self, path: &Path, kind: Kind, before: Option<&Seen>) -> Option<Seen> {
        let m = fs::symlink_metadata(path).ok()?;
        if m.is_dir() {
            return None;
        }
        let meta = Meta::of(&m);
        if before.is_some_and(|b| b.meta == meta && !meta.is_symlink()) {
            return None;
        }
        let bytes = read_small(path, &m);
        let keys = match kind {
            Kind::Code => None,
            Kind::Config => self.config_keys(path, meta),
        };
        Some(Seen { meta, bytes, keys })
    }

    /// Every key of the config at `path`, read once per identity (`None`: no config).
    fn config_all(&self, path: &Path, meta: Option<Meta>) -> Keys {
        let meta = match meta {
            Some(meta) => meta,
            None => Meta::of(&fs::metadata(path).ok()?),
        };
        let mut cache = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((m, keys)) = cache.get(path)
            && *m == meta
        {
            return keys.clone();
        }
        let keys = read_config(path);
        cache.insert(path.to_path_buf(), (meta, keys.clone()));
        keys
    }

    /// The code-running keys of the config at `path`.
    fn config_keys(&self, path: &Path, meta: Meta) -> Keys {
        self.config_all(path, Some(meta))
            .map(|all| all.into_iter().filter(|(k, v)| is_code_key(k, v)).collect())
    }

    /// The (last) value of `key` in the config at `path`.
    fn config_value(&self, path: &Path, key: &str) -> Option<String> {
        self.config_all(path, None)?.into_iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The entries of directory `dir` (following a symlink, as git and shells do), read
    /// again only when the directory's identity, size or times changed. A listing is kept
    /// only once the directory's change time is older than [`SETTLED`], so an entry made in
    /// the same clock tick as the listing is never missed.
    fn list(&self, dir: &Path) -> Option<Arc<Listing>> {
        let mut pass = self.pass.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(seen) = pass.get(dir) {
            return seen.clone();
        }
        let listing = self.list_now(dir);
        pass.insert(dir.to_path_buf(), listing.clone());
        listing
    }

    /// [`Surfaces::list`] without the memory of the current pass.
    fn list_now(&self, dir: &Path) -> Option<Arc<Listing>> {
        let m = fs::metadata(dir).ok()?;
        if !m.is_dir() {
            return None;
        }
        let meta = Meta::of(&m);
        let mut cache = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((m, listing)) = cache.get(dir)
            && *m == meta
        {
            return Some(Arc::clone(listing));
        }
        let mut listing = Listing::new();
        for entry in fs::read_dir(dir).ok()?.flatten() {
            let kind = match entry.file_type() {
                Ok(t) if t.is_dir() => Entry::Dir,
                Ok(t) if t.is_symlink() => match fs::metadata(entry.path()) {
                    Ok(m) if m.is_dir() => Entry::Dir,
                    _ => Entry::File,
                },
                _ => Entry::File,
            };
            listing.insert(entry.file_name(), kind);
        }
        let listing = Arc::new(listing);
        let changed = std::time::UNIX_EPOCH
            + std::time::Duration::new(meta.ctime.0.max(0) as u64, meta.ctime.1.clamp(0, 999_999_999) as u32);
        if std::time::SystemTime::now().duration_since(changed).is_ok_and(|age| age > SETTLED) {
            cache.insert(dir.to_path_buf(), (meta, Arc::clone(&listing)));
        } else {
            cache.remove(dir);
        }
        Some(listing)
    }

    /// What `name` is in `dir`, `None` when it is not there.
    fn entry(&self, dir: &Path, name: &str) -> Option<Entry> {
        self.list(dir)?.get(std::ffi::OsStr::new(name)).copied()
    }

    /// Inserts `dir/name` as `kind` when it is a file there.
    fn file(&self, dir: &Path, name: &str, kind: Kind, out: &mut BTreeMap<PathBuf, Kind>) {
        if self.entry(dir, name) == Some(Entry::File) {
            out.insert(dir.join(name), kind);
        }
    }

    /// Every file under `dir`, `depth` levels deep (at most [`WALK_LIMIT`]), as code.
    fn walk(&self, dir: &Path, depth: usize, out: &mut BTreeMap<PathBuf, Kind>) {
        let mut budget = WALK_LIMIT;
        self.walk_inner(dir, depth, &mut budget, out);
    }

    fn walk_inner(&self, dir: &Path, depth: usize, budget: &mut usize, out: &mut BTreeMap<PathBuf, Kind>) {
        let Some(listing) = self.list(dir) else { return };
        for (name, entry) in listing.iter() {
            if *budget == 0 {
                return;
            }
            let path = dir.join(name);
            match entry {
                Entry::Dir if depth > 1 => self.walk_inner(&path, depth - 1, budget, out),
                Entry::Dir => {}
                Entry::File => {
                    *budget -= 1;
                    out.insert(path, Kind::Code);
                }
            }
        }
    }

    /// Every surface path there is now, with its kind.
    fn discover(&self) -> BTreeMap<PathBuf, Kind> {
        // Each directory is looked at once per pass.
        self.pass.lock().unwrap_or_else(|p| p.into_inner()).clear();
        let mut out = BTreeMap::new();
        let mut visited = BTreeSet::new();
        let mut places: Vec<&Path> = self.roots.iter().map(PathBuf::as_path).collect();
        if let Some(home) = &self.home {
            places.push(home);
            self.config_file(&home.join(".gitconfig"), 0, &mut out);
            let git = home.join(".config/git");
            self.config_file(&git.join("config"), 0, &mut out);
            self.file(&git, "attributes", Kind::Code, &mut out);
        }
        for place in places {
            for name in START_UP_FILES {
                self.file(place, name, Kind::Code, &mut out);
            }
            for (name, depth) in AGENT_PATHS {
                // Each level is looked up in its parent's listing: nothing missing is probed.
                let path = Path::new(name);
                let mut dir = place.to_path_buf();
                let mut present = true;
                let parts: Vec<_> = path.components().collect();
                for part in &parts[..parts.len() - 1] {
                    let part = part.as_os_str().to_string_lossy();
                    if self.entry(&dir, &part) != Some(Entry::Dir) {
                        present = false;
                        break;
                    }
                    dir.push(&*part);
                }
                let last = parts[parts.len() - 1].as_os_str().to_string_lossy();
                match (present, depth) {
                    (false, _) => {}
                    (true, 0) => self.file(&dir, &last, Kind::Code, &mut out),
                    (true, depth) => {
                        if self.entry(&dir, &last) == Some(Entry::Dir) {
                            self.walk(&dir.join(&*last), depth, &mut out);
                        }
                    }
                }
            }
        }
        for root in &self.roots {
            if let Some((tree, gitdir)) = self.find_repository(root) {
                self.git_dir(&gitdir, Some(&tree), 0, &mut visited, &mut out);
            }
        }
        out
    }

    /// The repository git would find from `root`: the nearest `.git` at or above it, as
    /// `(work tree, git directory)`.
    fn find_repository(&self, root: &Path) -> Option<(PathBuf, PathBuf)> {
        let mut dir = Some(root);
        while let Some(d) = dir {
            if let Some(entry) = self.entry(d, ".git") {
                return self.resolve_dot_git(d, entry).map(|g| (d.to_path_buf(), g));
            }
            dir = d.parent();
        }
        None
    }

    /// The git directory the `.git` entry of `tree` names: itself when a directory, else the
    /// `gitdir:` of the file (relative to `tree`).
    fn resolve_dot_git(&self, tree: &Path, entry: Entry) -> Option<PathBuf> {
        let dot_git = tree.join(".git");
        if entry == Entry::Dir {
            return Some(dot_git);
        }
        let text = read_text(&dot_git)?;
        let target = text.strip_prefix("gitdir:")?.trim();
        Some(lexical_join(tree, Path::new(target)))
    }

    /// The common directory of `gitdir` (its `commondir` file, relative to it), else itself.
    fn common_dir(&self, gitdir: &Path) -> PathBuf {
        if self.entry(gitdir, "commondir").is_none() {
            return gitdir.to_path_buf();
        }
        match read_text(&gitdir.join("commondir")) {
            Some(text) if !text.trim().is_empty() => {
                lexical_join(gitdir, Path::new(text.trim_end_matches(['\n', '\r'])))
            }
            _ => gitdir.to_path_buf(),
        }
    }

    /// Inserts the git config at `path` when it exists, and the files it includes
    /// (`include.path`, `includeIf.*.path`: relative to its directory), `depth` levels in.
    fn config_file(&self, path: &Path, depth: usize, out: &mut BTreeMap<PathBuf, Kind>) {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return };
        if depth > NEST_DEPTH || self.entry(dir, &name.to_string_lossy()) != Some(Entry::File) {
            return;
        }
        if out.insert(path.to_path_buf(), Kind::Config).is_some() {
            return;
        }
        for (key, value) in self.config_all(path, None).unwrap_or_default() {
            if key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path")) {
                let included = match value.strip_prefix("~/") {
                    Some(rest) => self.home.clone().unwrap_or_else(dsh_core::home::user_home).join(rest),
                    None => lexical_join(dir, Path::new(&value)),
                };
                self.config_file(&included, depth + 1, out);
            }
        }
    }

    /// Whether the hook at `path` is the pre-commit framework's (it names `pre-commit`).
    fn is_pre_commit_framework(&self, path: &Path) -> bool {
        let Ok(m) = fs::metadata(path) else { return false };
        let meta = Meta::of(&m);
        let mut cache = self.framework.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((m, answer)) = cache.get(path)
            && *m == meta
        {
            return *answer;
        }
        let answer = read_regular(path, KEEP_LIMIT)
            .is_some_and(|b| b.windows(10).any(|w| w == b"pre-commit".as_slice()));
        cache.insert(path.to_path_buf(), (meta, answer));
        answer
    }

    /// The surfaces of the git directory `gitdir`, whose work tree is `worktree` (when it has
    /// one): configs, hooks, attributes, and every repository it leads to.
    fn git_dir(
        &self,
        gitdir: &Path,
        worktree: Option<&Path>,
        depth: usize,
        visited: &mut BTreeSet<(PathBuf, Option<PathBuf>)>,
        out: &mut BTreeMap<PathBuf, Kind>,
    ) {
        if depth > NEST_DEPTH || !visited.insert((gitdir.to_path_buf(), worktree.map(Path::to_path_buf))) {
            return;
        }
        let common = self.common_dir(gitdir);
        let config = common.join("config");
        self.config_file(&config, 0, out);
        self.config_file(&gitdir.join("config.worktree"), 0, out);
        self.config_file(&common.join("config.worktree"), 0, out);
        if self.entry(&common, "info") == Some(Entry::Dir) {
            self.file(&common.join("info"), "attributes", Kind::Code, out);
        }
        // The effective hooks directory: core.hooksPath (the worktree's config wins), else
        // <common>/hooks.
        let own = gitdir.join("config.worktree");
        let hooks_path = out
            .contains_key(&own)
            .then(|| self.config_value(&own, "core.hookspath"))
            .flatten()
            .or_else(|| self.config_value(&config, "core.hookspath"));
        let hooks = match hooks_path.as_deref() {
            Some(p) => resolve_hooks_path(p, worktree.unwrap_or(gitdir), self.home.as_deref()),
            None => common.join("hooks"),
        };
        let mut pre_commit_framework = false;
        if let Some(listing) = self.list(&hooks) {
            for (name, entry) in listing.iter() {
                if name.to_string_lossy().ends_with(".sample") {
                    continue;
                }
                let path = hooks.join(name);
                if *entry == Entry::Dir {
                    self.walk(&path, 1, out);
                    continue;
                }
                if name == "pre-commit" && self.is_pre_commit_framework(&path) {
                    pre_commit_framework = true;
                }
                out.insert(path, Kind::Code);
            }
        }
        if let Some(worktree) = worktree {
            if pre_commit_framework {
                self.file(worktree, ".pre-commit-config.yaml", Kind::Code, out);
                self.file(worktree, ".pre-commit-hooks.yaml", Kind::Code, out);
            }
            if self.entry(worktree, ".husky") == Some(Entry::Dir) {
                self.walk(&worktree.join(".husky"), 2, out);
            }
            self.file(worktree, ".gitmodules", Kind::Config, out);
            // Submodules checked out in this work tree (their .git a directory or a file).
            let gitmodules = worktree.join(".gitmodules");
            if out.contains_key(&gitmodules) {
                for (key, value) in self.config_all(&gitmodules, None).unwrap_or_default() {
                    if key.starts_with("submodule.") && key.ends_with(".path") {
                        let sub = lexical_join(worktree, Path::new(&value));
                        if let Some(sub_git) =
                            self.entry(&sub, ".git").and_then(|entry| self.resolve_dot_git(&sub, entry))
                        {
                            self.git_dir(&sub_git, Some(&sub), depth + 1, visited, out);
                        }
                    }
                }
            }
            // Nested repositories the index holds as gitlinks, named in `.gitmodules` or not:
            // git looks into each (`git status`, `git diff`), running what its config names.
            for path in self.gitlinks(gitdir, &config) {
                let sub = worktree.join(path);
                if let Some(sub_git) =
                    self.entry(&sub, ".git").and_then(|entry| self.resolve_dot_git(&sub, entry))
                {
                    self.git_dir(&sub_git, Some(&sub), depth + 1, visited, out);
                }
            }
        }
        // Linked worktrees: their own config.worktree, and wherever their .git file leads.
        let worktrees = common.join("worktrees");
        let listing = (self.entry(&common, "worktrees") == Some(Entry::Dir)).then(|| self.list(&worktrees));
        if let Some(listing) = listing.flatten() {
            for (name, _) in listing.iter().filter(|(_, e)| **e == Entry::Dir) {
                let admin = worktrees.join(name);
                self.file(&admin, "config.worktree", Kind::Config, out);
                let Some(linked) = read_text(&admin.join("gitdir"))
                    .map(|t| lexical_join(&admin, Path::new(t.trim_end_matches(['\n', '\r']))))
                else {
                    continue;
                };
                let Some(tree) = linked.parent() else { continue };
                let target = self
                    .entry(tree, ".git")
                    .and_then(|entry| self.resolve_dot_git(tree, entry))
                    .unwrap_or(admin.clone());
                self.git_dir(&target, Some(tree), depth + 1, visited, out);
            }
        }
        // Submodules' git directories (<common>/modules/<name>, names may hold '/').
        let mut modules = Vec::new();
        if self.entry(&common, "modules") == Some(Entry::Dir) {
            self.find_git_dirs(&common.join("modules"), 3, &mut modules);
        }
        for module in modules {
            let tree = self
                .config_value(&module.join("config"), "core.worktree")
                .map(|w| lexical_join(&module, Path::new(&w)));
            self.git_dir(&module, tree.as_deref(), depth + 1, visited, out);
        }
    }

    /// The paths (relative to the work tree) of the gitlinks in the index of `gitdir`, whose
    /// repository's config is `config` (its `extensions.objectFormat` sizes the object ids).
    /// A split index's shared index counts too; when a gitlink of the split index replaces a
    /// shared entry by position (its path left out), every path of the shared index is taken.
    /// Paths that are not plain relative ones (`..`, `.git`, absolute) are left out: git never
    /// writes them, and nothing outside the work tree is looked at through them.
    fn gitlinks(&self, gitdir: &Path, config: &Path) -> Vec<PathBuf> {
        if self.entry(gitdir, "index") != Some(Entry::File) {
            return Vec::new();
        }
        let sha256 = self
            .config_value(config, "extensions.objectformat")
            .is_some_and(|f| f.eq_ignore_ascii_case("sha256"));
        let raw = if sha256 { 32 } else { 20 };
        let Some(index) = self.index_links(&gitdir.join("index"), IndexRead { raw, every_path: false })
        else {
            return Vec::new();
        };
        let mut paths = index.gitlinks.clone();
        if let Some(shared) = &index.shared {
            let every_path = index.replaces_by_position;
            if let Some(shared) =
                self.index_links(&gitdir.join(format!("sharedindex.{shared}")), IndexRead { raw, every_path })
            {
                paths.extend(shared.gitlinks.iter().cloned());
            }
        }
        paths.retain(|p| {
            !p.as_os_str().is_empty()
                && p.components().all(|c| matches!(c, Component::Normal(n) if n != ".git"))
        });
        paths.sort();
        paths.dedup();
        paths
    }

    /// The gitlinks of the index at `path`, parsed once per identity of the file.
    fn index_links(&self, path: &Path, how: IndexRead) -> Option<Arc<IndexLinks>> {
        let meta = Meta::of(&fs::metadata(path).ok()?);
        let cache = self.indexes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((m, h, links)) = cache.get(path)
            && *m == meta
            && *h == how
        {
            return Some(Arc::clone(links));
        }
        drop(cache);
        // The identity kept is the one of the file read (it may have been replaced since the
        // stat), and only once its change time is past the clock's tick, so a rewrite in the
        // same tick is never taken for the file read.
        let (meta, bytes) = read_regular_with_meta(path, INDEX_LIMIT)?;
        let links = Arc::new(parse_index(&bytes, how)?);
        let mut cache = self.indexes.lock().unwrap_or_else(|p| p.into_inner());
        if settled(&meta) {
            cache.insert(path.to_path_buf(), (meta, how, Arc::clone(&links)));
        } else {
            cache.remove(path);
        }
        Some(links)
    }

    /// Collects git directories (a directory holding `HEAD`) under `dir`, `depth` levels deep.
    fn find_git_dirs(&self, dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Some(listing) = self.list(dir) else { return };
        for (name, _) in listing.iter().filter(|(_, e)| **e == Entry::Dir) {
            let path = dir.join(name);
            if self.entry(&path, "HEAD") == Some(Entry::File) {
                out.push(path);
            } else if depth > 1 {
                self.find_git_dirs(&path, depth - 1, out);
            }
        }
    }
}

/// How an index is read: the size of its object ids, and whether every path is wanted (else
/// only gitlinks').
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IndexRead {
    raw: usize,
    every_path: bool,
}

/// What a git index says of nested repositories.
#[derive(Debug, Default, PartialEq, Eq)]
struct IndexLinks {
    /// The paths of its gitlinks (of every entry, when read for every path).
    gitlinks: Vec<PathBuf>,
    /// The object id (hex) of the shared index a split index names (its `link` extension).
    shared: Option<String>,
    /// Whether a gitlink without a path replaces an entry of the shared index.
    replaces_by_position: bool,
}

/// Whether a file's last change is older than [`SETTLED`] (a rewrite in the same clock
/// tick can no longer leave its times as they are).
fn settled(meta: &Meta) -> bool {
    let changed = std::time::UNIX_EPOCH
        + std::time::Duration::new(meta.ctime.0.max(0) as u64, meta.ctime.1.clamp(0, 999_999_999) as u32);
    std::time::SystemTime::now().duration_since(changed).is_ok_and(|age| age > SETTLED)
}

/// The gitlinks of a git index (format versions 2, 3 and 4, as git writes them: `DIRC`, the
/// version, the entry count, the entries, the extensions, the checksum), read from `bytes`
/// without running git. `None` when the bytes are not an index of these versions.
fn parse_index(bytes: &[u8], how: IndexRead) -> Option<IndexLinks> {
    use std::os::unix::ffi::OsStrExt;
    let be32 =
        |at: usize| -> Option<u32> { Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?)) };
    let end = bytes.len().checked_sub(how.raw)?;
    if end < 12 || &bytes[..4] != b"DIRC" {
        return None;
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(8)?;
    let mut out = IndexLinks::default();
    let mut pos = 12;
    // Version 4: each path is the previous one less its last `strip` bytes, then a suffix.
    let mut name: Vec<u8> = Vec::new();
    for _ in 0..count {
        // ctime, mtime, dev, ino, mode, uid, gid, size (4 bytes each), the object id, flags.
        let fixed = 40 + how.raw + 2;
        if pos + fixed > end {
            return None;
        }
        let mode = be32(pos + 24)?;
        let flags = u16::from_be_bytes([bytes[pos + 40 + how.raw], bytes[pos + 41 + how.raw]]);
        let mut at = pos + fixed;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return None;
            }
            at += 2;
        }
        if version == 4 {
            let (strip, used) = decode_varint(bytes.get(at..end)?)?;
            at += used;
            name.truncate(name.len().checked_sub(usize::try_from(strip).ok()?)?);
            let nul = bytes.get(at..end)?.iter().position(|b| *b == 0)?;
            name.extend_from_slice(&bytes[at..at + nul]);
            pos = at + nul + 1;
        } else {
            let nul = bytes.get(at..end)?.iter().position(|b| *b == 0)?;
            name.clear();
            name.extend_from_slice(&bytes[at..at + nul]);
            // Padded with 1 to 8 NULs to a multiple of 8 bytes.
            pos += (at - pos + nul + 8) & !7;
        }
        let gitlink = mode & 0o170000 == GITLINK;
        if gitlink && name.is_empty() {
            out.replaces_by_position = true;
        } else if gitlink || (how.every_path && !name.is_empty()) {
            out.gitlinks.push(PathBuf::from(std::ffi::OsStr::from_bytes(&name)));
        }
    }
    // Extensions: a signature, a size, the data.
    while pos + 8 <= end {
        let size = usize::try_from(be32(pos + 4)?).ok()?;
        if &bytes[pos..pos + 4] == b"link" {
            let id = bytes.get(pos + 8..pos + 8 + how.raw)?;
            if id.iter().any(|b| *b != 0) {
                out.shared = Some(id.iter().map(|b| format!("{b:02x}")).collect());
            }
        }
        pos = pos.checked_add(8 + size)?;
    }
    Some(out)
}

/// Git's offset varint (index version 4): the value and the bytes it took.
fn decode_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut used = 0;
    let mut c = *bytes.first()?;
    used += 1;
    let mut value = u64::from(c & 127);
    while c & 128 != 0 {
        value = value.checked_add(1)?;
        if value >> 57 != 0 {
            return None;
        }
        c = *bytes.get(used)?;
        used += 1;
        value = (value << 7) + u64::from(c & 127);
    }
    Some((value, used))
}

/// `core.hooksPath` as git resolves it: `~/` from the home, relative from the work tree.
fn resolve_hooks_path(value: &str, base: &Path, home: Option<&Path>) -> PathBuf {
    if let Some(rest) = value.strip_prefix("~/") {
        let home = home.map(Path::to_path_buf).unwrap_or_else(dsh_core::home::user_home);
        return home.join(rest);
    }
    lexical_join(base, Path::new(value))
}

/// `base/path` with `.` and `..` resolved lexically (an absolute `path` stands alone).
fn lexical_join(base: &Path, path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(path).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The contents of a small file (a symlink: its target, a NUL, then what it leads to).
fn read_small(path: &Path, m: &fs::Metadata) -> Option<Vec<u8>> {
    if m.file_type().is_symlink() {
        let mut bytes = fs::read_link(path).ok()?.into_os_string().into_encoded_bytes();
        bytes.push(0);
        bytes.extend(read_regular(path, KEEP_LIMIT).unwrap_or_default());
        return Some(bytes);
    }
    if !m.is_file() || m.len() > KEEP_LIMIT {
        return None;
    }
    read_regular(path, KEEP_LIMIT)
}

/// The contents of the regular file at `path` when it holds at most `limit` bytes. Opened
/// without blocking and checked on the open descriptor, so a FIFO or a device a command put
/// there (or swapped in) is never read.
fn read_regular(path: &Path, limit: u64) -> Option<Vec<u8>> {
    read_regular_with_meta(path, limit).map(|(_, bytes)| bytes)
}

/// [`read_regular`], with the identity of the file read.
fn read_regular_with_meta(path: &Path, limit: u64) -> Option<(Meta, Vec<u8>)> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).ok()?;
    let m = file.metadata().ok()?;
    if !m.is_file() || m.len() > limit {
        return None;
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= limit).then_some((Meta::of(&m), bytes))
}

/// A small pointer file (`.git`, `commondir`, `gitdir`) as text.
fn read_text(path: &Path) -> Option<String> {
    String::from_utf8(read_regular(path, 4096)?).ok()
}

/// Every `key value` of the git config file at `path`, in file order, as
/// `git config --no-includes --file - --null --list` reads it from its contents (includes are
/// not followed; nothing runs; the harness reads the file itself, so a FIFO is never handed
/// to git). `None` when the file is missing, not a regular file, or not a config git reads.
pub fn read_config(path: &Path) -> Option<Vec<(String, String)>> {
    use std::io::Write;
    let bytes = read_regular(path, 16 << 20)?;
    let mut child = git()
        .args(["config", "--no-includes", "--file", "-", "--null", "--list"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    // Written from a thread: git may answer before it read everything (a bad line).
    let writer = std::thread::spawn(move || stdin.write_all(&bytes));
    let output = child.wait_with_output().ok()?;
    let _ = writer.join();
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Some(
        text.split('\0')
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once('\n') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => (e.to_owned(), String::new()),
            })
            .collect(),
    )
}

/// `git`, with no system or global config and no config from the environment, so what it
/// reads is the named file alone.
fn git() -> Command {
    let mut c = Command::new("git");
    c.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_CONFIG_PARAMETERS")
        .env_remove("GIT_CONFIG_COUNT")
        .env_remove("GIT_DIR");
    c
}

/// Whether `key` (as git lists it: section and name lower-case) names a command git runs,
/// a place it runs commands from, or a file it includes: every key of git-config(1) whose
/// value git (or `git lfs`) runs as a command or program without the user naming it on the
/// command line. Not among them: keys that only choose among programs named elsewhere
/// (`ssh.variant`, `merge.tool`, `man.viewer`, `help.browser`) or a hook that stays a hook
/// (`receive.procReceiveRefs` names refs for the `proc-receive` hook, itself a surface).
pub fn is_code_key(key: &str, value: &str) -> bool {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    let (sub, name) = match rest.rsplit_once('.') {
        Some((sub, name)) => (Some(sub), name),
        None => (None, rest),
    };
    match (section, sub, name) {
        ("core", None, n) => matches!(
            n,
            "hookspath"
                | "fsmonitor"
                | "sshcommand"
                | "pager"
                | "editor"
                | "askpass"
                | "gitproxy"
                | "alternaterefscommand"
        ),
        ("sequence", None, "editor") | ("diff", None, "external") | ("gpg", None, "program") => true,
        // The ssh signing key is asked of this command when none is configured.
        ("gpg", Some("ssh"), "defaultkeycommand") => true,
        ("diff", Some(_), "textconv" | "command" | "cmd") => true,
        ("difftool" | "mergetool", Some(_), "cmd" | "path") => true,
        ("merge", Some(_), "driver") => true,
        ("filter", Some(_), "clean" | "smudge" | "process") => true,
        ("alias", _, _) => value.trim_start().starts_with('!'),
        ("credential", _, "helper") => true,
        ("gpg", Some(_), "program") => true,
        ("remote", Some(_), "uploadpack" | "receivepack" | "vcs" | "proxy") => true,
        ("include", None, "path") | ("includeif", Some(_), "path") => true,
        ("uploadpack", None, "packobjectshook") => true,
        ("protocol", _, "allow") => true,
        ("url", Some(_), "insteadof" | "pushinsteadof") => true,
        ("submodule", Some(_), "update") => value.trim_start().starts_with('!'),
        ("hook", Some(_), _) => true,
        ("pager", _, _) => !matches!(value, "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0" | ""),
        ("interactive", None, "difffilter") | ("web", None, "browser") => true,
        ("browser" | "man", Some(_), "cmd" | "path") => true,
        ("sendemail", _, "smtpserver" | "tocmd" | "cccmd" | "sendmailcmd" | "headercmd") => true,
        // `git archive --format=<format>` pipes through it; `git commit --trailer` and
        // `git interpret-trailers` run a trailer's command.
        ("tar", Some(_), "command") | ("trailer", Some(_), "command" | "cmd") => true,
        ("imap", None, "tunnel") | ("instaweb", None, "httpd") | ("guitool", Some(_), "cmd") => true,
        // `git init` and `git clone` copy its hooks into the new repository.
        ("init", None, "templatedir") => true,
        // git-lfs: custom transfer agents and extensions are programs it runs.
        ("lfs", Some(_), "path" | "clean" | "smudge") => true,
        ("lfs", None, "standalonetransferagent") => true,
        _ => false,
    }
}

/// Moves one change to `dest`, then puts back what was pinned; says what is left in place.
fn quarantine_one(change: &Change, dest: &Path) -> io::Result<String> {
    let parent = dest.parent().ok_or_else(|| io::Error::other("no parent"))?;
    fs::create_dir_all(parent)?;
    move_file(&change.real, dest)?;
    let pinned = change.pinned.as_ref();
    match change.kind {
        Kind::Config if change.now.keys.is_some() => {
            // Keep what the command changed besides code (a remote, an upstream), with the
            // code-running keys as they were pinned.
            copy_file(dest, &change.real)?;
            let before = pinned.and_then(|p| p.keys.clone()).unwrap_or_default();
            let now = change.now.keys.clone().unwrap_or_default();
            let mut names: Vec<&String> = now.iter().chain(before.iter()).map(|(k, _)| k).collect();
            names.sort();
            names.dedup();
            for name in names {
                let was: Vec<&String> = before.iter().filter(|(k, _)| k == name).map(|(_, v)| v).collect();
                let is: Vec<&String> = now.iter().filter(|(k, _)| k == name).map(|(_, v)| v).collect();
                if was == is {
                    continue;
                }
                run_git_config(&change.real, &["--unset-all", name])?;
                for value in was {
                    run_git_config(&change.real, &["--add", name, value])?;
                }
            }
            Ok("the file without those keys".to_owned())
        }
        _ => match pinned.and_then(|p| p.bytes.as_ref().map(|b| (p.meta, b))) {
            Some((meta, bytes)) => {
                restore(&change.real, meta, bytes)?;
                Ok("the pinned version".to_owned())
            }
            None => Ok("nothing".to_owned()),
        },
    }
}

/// Runs `git config --file <file> ARGS`; fails when git does.
fn run_git_config(file: &Path, args: &[&str]) -> io::Result<()> {
    let status = git().args(["config", "--file"]).arg(file).args(args).stdin(Stdio::null()).status()?;
    // `--unset-all` of a key that is absent exits 5: nothing to remove.
    if status.success() || status.code() == Some(5) {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "git config --file {} {} failed ({status})",
            file.display(),
            args.join(" ")
        )))
    }
}

/// Puts a pinned file back: a symlink as a symlink, a file with its pinned mode.
fn restore(path: &Path, meta: Meta, bytes: &[u8]) -> io::Result<()> {
    if meta.is_symlink() {
        let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
        let target = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&bytes[..end]);
        return std::os::unix::fs::symlink(target, path);
    }
    fs::write(path, bytes)?;
    fs::set_permissions(path, fs::Permissions::from_mode(meta.mode & 0o7777))
}

/// Renames `from` to `to`, copying and removing across filesystems.
fn move_file(from: &Path, to: &Path) -> io::Result<()> {
    match fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            copy_file(from, to)?;
            fs::remove_file(from)
        }
        other => other,
    }
}

/// Copies a file or a symlink (as a symlink), keeping the mode.
fn copy_file(from: &Path, to: &Path) -> io::Result<()> {
    let m = fs::symlink_metadata(from)?;
    if m.file_type().is_symlink() {
        return std::os::unix::fs::symlink(fs::read_link(from)?, to);
    }
    fs::copy(from, to).map(drop)
}

/// A name for one quarantine round: seconds and nanoseconds since the epoch.
fn stamp() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:09}", now.as_secs(), now.subsec_nanos())
}

/// A session id as one safe path component.
pub fn session_dir_name(session: Option<&str>) -> String {
    match session {
        Some(id) if !id.is_empty() => id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
            .collect::<String>()
            .trim_start_matches('.')
            .to_owned(),
        _ => "no-session".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, script: &str) {
        let status = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .expect("spawn sh");
        assert!(status.success(), "{script}");
    }

    #[test]
    fn code_running_keys_are_told_from_data() {
        for (key, value) in [
            ("core.fsmonitor", "x"),
            ("core.hookspath", ".husky"),
            ("alias.st", "!sh -c x"),
            ("filter.lfs.smudge", "x"),
            ("diff.pdf.textconv", "x"),
            ("remote.origin.uploadpack", "x"),
            ("includeif.gitdir:/x/.path", "x"),
            ("submodule.a.update", "!x"),
            ("credential.https://h.helper", "x"),
            ("hook.lint.command", "x"),
            ("gpg.ssh.defaultkeycommand", "ssh-add -L"),
            ("gpg.ssh.program", "x"),
            ("gpg.x509.program", "x"),
            ("core.alternaterefscommand", "x"),
            ("core.gitproxy", "x"),
            ("core.sshcommand", "x"),
            ("uploadpack.packobjectshook", "x"),
            ("credential.helper", "store"),
            ("credential.https://h.example/a.b.helper", "x"),
            ("mergetool.kd.cmd", "x"),
            ("difftool.kd.cmd", "x"),
            ("difftool.kd.path", "x"),
            ("pager.log", "less -R"),
            ("interactive.difffilter", "x"),
            ("web.browser", "x"),
            ("browser.ff.cmd", "x"),
            ("man.woman.cmd", "x"),
            ("sendemail.tocmd", "x"),
            ("sendemail.work.cccmd", "x"),
            ("sendemail.sendmailcmd", "x"),
            ("sendemail.headercmd", "x"),
            ("sendemail.smtpserver", "/usr/bin/x"),
            ("tar.tgz.command", "gzip"),
            ("trailer.sign.cmd", "x"),
            ("trailer.sign.command", "x"),
            ("imap.tunnel", "x"),
            ("instaweb.httpd", "x"),
            ("guitool.run.cmd", "x"),
            ("init.templatedir", "/x"),
            ("lfs.customtransfer.t.path", "x"),
            ("lfs.extension.e.clean", "x"),
            ("lfs.standalonetransferagent", "t"),
        ] {
            assert!(is_code_key(key, value), "{key}");
        }
        for (key, value) in [
            ("remote.origin.url", "https://h/r"),
            ("branch.main.remote", "origin"),
            ("alias.st", "status"),
            ("submodule.a.update", "rebase"),
            ("user.name", "x"),
            ("core.bare", "false"),
            ("pager.log", "false"),
            ("gpg.format", "ssh"),
            ("commit.gpgsign", "true"),
            ("user.signingkey", "~/.ssh/id.pub"),
            ("gpg.ssh.allowedsignersfile", "x"),
            ("ssh.variant", "simple"),
            ("merge.tool", "kd"),
            ("receive.procreceiverefs", "refs/for"),
            ("trailer.sign.key", "Signed-off-by"),
            ("extensions.objectformat", "sha256"),
        ] {
            assert!(!is_code_key(key, value), "{key}");
        }
    }

    #[test]
    fn gitlinks_are_read_from_every_index_format() {
        for (init, index) in [
            ("git init -q", "true"),
            ("git init -q", "echo c > c && git add -N c"),
            ("git init -q", "git update-index --index-version 4"),
            ("git init -q --object-format=sha256", "true"),
            ("git init -q", "git update-index --split-index"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            sh(
                &root,
                &format!(
                    "{init} && echo a > a && mkdir -p d/e && echo b > d/e/b && git add a d \
                     && git -c user.name=a -c user.email=a@b commit -qm x \
                     && git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),nested/sub \
                     && {index} && git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),late"
                ),
            );
            let surfaces = Surfaces::new(std::slice::from_ref(&root), None);
            let links = surfaces.gitlinks(&root.join(".git"), &root.join(".git/config"));
            assert_eq!(links, [Path::new("late"), Path::new("nested/sub")], "{init}; {index}");
        }
        let how = IndexRead { raw: 20, every_path: false };
        assert_eq!(parse_index(b"DIRC\0\0\0\x05\0\0\0\0", how), None, "an unknown version");
        let mut bytes = b"DIRC\0\0\0\x02\0\0\0\x01".to_vec();
        bytes.extend([0; 40]);
        assert_eq!(parse_index(&bytes, how), None, "a truncated entry");
    }

    #[test]
    fn a_new_hook_and_a_code_key_are_quarantined_while_data_and_sources_stay() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap().join("ws");
        fs::create_dir(&root).unwrap();
        sh(&root, "git init -q && echo a > a && printf 'p\\n' > .envrc");
        let surfaces = Surfaces::new(std::slice::from_ref(&root), None);
        let mut pinned = surfaces.pin();
        sh(
            &root,
            "echo b >> a && git remote add origin https://h/r && git config core.fsmonitor ./x \
             && printf '#!/bin/sh\\n' > .git/hooks/pre-commit && cp .git/hooks/pre-commit .git/hooks/x.sample \
             && echo q > .envrc",
        );
        let changes = surfaces.check(&mut pinned);
        let mut paths: Vec<_> =
            changes.iter().map(|c| c.path.strip_prefix(&root).unwrap().to_owned()).collect();
        paths.sort();
        assert_eq!(
            paths,
            [Path::new(".envrc"), Path::new(".git/config"), Path::new(".git/hooks/pre-commit")]
        );
        let quarantine = dir.path().join("q");
        let moved = surfaces.quarantine(changes.clone(), &quarantine);
        surfaces.accept(&mut pinned, &changes);
        assert!(moved.iter().all(|q| q.moved_to.is_file()), "{moved:?}");
        assert_eq!(fs::read_to_string(root.join(".envrc")).unwrap(), "p\n", "the pinned version is back");
        assert!(!root.join(".git/hooks/pre-commit").exists());
        let config = read_config(&root.join(".git/config")).unwrap();
        assert!(config.iter().any(|(k, v)| k == "remote.origin.url" && v == "https://h/r"));
        assert!(!config.iter().any(|(k, _)| k == "core.fsmonitor"), "{config:?}");
        assert_eq!(fs::read_to_string(root.join("a")).unwrap(), "a\nb\n");
        assert!(surfaces.check(&mut pinned).is_empty());
    }

    #[test]
    fn nothing_outside_the_roots_is_moved_nor_a_fifo_read() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (root, outside) = (base.join("ws"), base.join("outside"));
        fs::create_dir(&root).unwrap();
        fs::create_dir(&outside).unwrap();
        let surfaces = Surfaces::new(std::slice::from_ref(&root), None);
        let mut pinned = surfaces.pin();
        fs::write(outside.join("tasks.json"), "{}").unwrap();
        std::os::unix::fs::symlink(&outside, root.join(".vscode")).unwrap();
        sh(&root, "git init -q && mkfifo .git/commondir .envrc");
        let changes = surfaces.check(&mut pinned);
        let paths: Vec<_> = changes.iter().map(|c| c.real.strip_prefix(&root).unwrap().to_owned()).collect();
        assert_eq!(
            paths,
            [Path::new(".envrc")],
            "the FIFO is new; the file behind the symlink is not the command's"
        );
        surfaces.quarantine(changes, &base.join("q"));
        assert!(outside.join("tasks.json").is_file());
    }
}
