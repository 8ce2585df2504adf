//! The toolchain caches of confined commands: a cache root of their own, writable under
//! `workspace-write` and shared by every session of the user, that npm, pip, uv, yarn, cargo
//! and go are pointed at through their documented environment variables. The user's own
//! caches (`~/.npm`, `~/.cache/pip`, `~/.cargo`, Go's module cache) stay read-only: a
//! confined command that could write them could change code the user's unconfined builds
//! compile later.

use std::path::{Path, PathBuf};

/// Each variable a confined command gets, and the directory below the cache root it names.
/// `CARGO_HOME` moves cargo's registry and git caches (it also holds cargo's own `bin` and
/// `config.toml`: a confined cargo still reads the `.cargo/config.toml` files above its
/// working directory, never the user's credentials).
pub const TOOLCHAIN_CACHE_VARIABLES: [(&str, &str); 7] = [
    ("NPM_CONFIG_CACHE", "npm"),
    ("YARN_CACHE_FOLDER", "yarn"),
    ("PIP_CACHE_DIR", "pip"),
    ("UV_CACHE_DIR", "uv"),
    ("CARGO_HOME", "cargo"),
    ("GOMODCACHE", "go/mod"),
    ("GOCACHE", "go/build"),
];

/// The user's own caches below `$HOME`, the tool each belongs to, and the variable that
/// points a confined command's copy of that tool elsewhere.
const USER_CACHES: [(&str, &str, &str); 8] = [
    (".npm", "npm", "NPM_CONFIG_CACHE"),
    (".cache/yarn", "yarn", "YARN_CACHE_FOLDER"),
    (".yarn/berry/cache", "yarn", "YARN_CACHE_FOLDER"),
    (".cache/pip", "pip", "PIP_CACHE_DIR"),
    (".cache/uv", "uv", "UV_CACHE_DIR"),
    (".cargo", "cargo", "CARGO_HOME"),
    ("go/pkg/mod", "Go module", "GOMODCACHE"),
    (".cache/go-build", "Go build", "GOCACHE"),
];

/// The cache root of confined commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolchainCaches {
    root: PathBuf,
}

impl ToolchainCaches {
    /// Caches below `root` (absolute).
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    /// The cache root (a writable root of every `workspace-write` command).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Makes the cache root (mode `0700`, parents as needed) and returns it canonical. The
    /// harness writes nothing inside it: the tools make their own directories there, so a
    /// link a confined command leaves there is never followed by the harness.
    pub fn prepare(&self) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.root)?;
        std::fs::canonicalize(&self.root)
    }

    /// The variables a confined command gets, naming directories below `root` (the
    /// canonical root [`ToolchainCaches::prepare`] returned).
    pub fn env(root: &Path) -> Vec<(String, String)> {
        TOOLCHAIN_CACHE_VARIABLES
            .iter()
            .map(|(name, dir)| ((*name).to_owned(), root.join(dir).display().to_string()))
            .collect()
    }
}

/// The user's own toolchain cache that holds `path`, when one does: `(its directory, the
/// tool, the variable that moves a confined command's cache)`.
pub fn user_cache_of(path: &Path, home: &Path) -> Option<(PathBuf, &'static str, &'static str)> {
    if home == Path::new("/") {
        return None;
    }
    USER_CACHES.iter().find_map(|(rel, tool, variable)| {
        let dir = home.join(rel);
        path.starts_with(&dir).then_some((dir, *tool, *variable))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_names_a_directory_of_its_own_below_the_root() {
        let env = ToolchainCaches::env(Path::new("/c"));
        assert_eq!(env.len(), TOOLCHAIN_CACHE_VARIABLES.len());
        assert!(env.contains(&("NPM_CONFIG_CACHE".into(), "/c/npm".into())));
        assert!(env.contains(&("CARGO_HOME".into(), "/c/cargo".into())));
        assert!(env.contains(&("GOCACHE".into(), "/c/go/build".into())));
        let dirs: std::collections::HashSet<_> = env.iter().map(|(_, d)| d).collect();
        assert_eq!(dirs.len(), env.len());
    }

    #[test]
    fn the_users_caches_are_told_by_their_directory() {
        let home = Path::new("/h");
        let of = |p: &str| user_cache_of(Path::new(p), home).map(|(d, t, v)| (d.display().to_string(), t, v));
        assert_eq!(of("/h/.npm/_cacache/tmp/x"), Some(("/h/.npm".into(), "npm", "NPM_CONFIG_CACHE")));
        assert_eq!(
            of("/h/.cargo/registry/src/i/static_assertions-1.1.0"),
            Some(("/h/.cargo".into(), "cargo", "CARGO_HOME"))
        );
        assert_eq!(of("/h/.cache/pip/http"), Some(("/h/.cache/pip".into(), "pip", "PIP_CACHE_DIR")));
        assert_eq!(of("/h/.npmx"), None);
        assert_eq!(of("/h/notes"), None);
        assert_eq!(user_cache_of(Path::new("/.npm/x"), Path::new("/")), None);
    }
}
