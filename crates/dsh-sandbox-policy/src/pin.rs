//! Workspace roots pinned once, so a later call cannot be confined to (and write into) a
//! directory someone put at the root's path after the session started.
//!
//! A root is pinned the first time it is resolved: its canonical path and, once it exists,
//! the `(device, inode)` of the directory there. Every later resolution re-resolves the
//! spelling and accepts it only if it still leads, without any symlink that was not there
//! at pin time, to the pinned path **and** that path is still the pinned directory. A root
//! that is missing at pin time is pinned when it first appears, and only if it appears at
//! the physical path it would have had then (a symlink planted at a missing root is refused).
//!
//! A root that moved or was replaced resolves to [`moved_root`]: a path under `/dev/null`,
//! which no one can create, so the sandbox grants no write under it and a command cannot
//! start in it. The check and the confinement are separate steps: a command of the same
//! session still running in the background can race them; only confining by descriptor
//! closes that window.

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use dsh_core::home::{absolutize, normalize_lexically};

pub use dsh_sandbox::{MOVED_ROOT_PREFIX, moved_root};

/// `(device, inode)` of what `path` names, following no symlink at its last component.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The physical path `spelling` would have if its missing components were created as plain
/// directories: the canonical path of its longest existing prefix, plus the rest (lexically).
fn expected_physical(spelling: &Path) -> PathBuf {
    let absolute = if spelling.is_absolute() { spelling.to_path_buf() } else { absolutize(spelling) };
    let components: Vec<Component> = absolute.components().collect();
    for split in (1..=components.len()).rev() {
        let prefix: PathBuf = components[..split].iter().collect();
        if let Ok(canonical) = std::fs::canonicalize(&prefix) {
            let rest: PathBuf = components[split..].iter().collect();
            return normalize_lexically(&canonical.join(rest));
        }
    }
    normalize_lexically(&absolute)
}

/// A workspace root fixed at its first resolution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PinnedRoot {
    /// As given: a session's header cwd or the configured root.
    spelling: PathBuf,
    /// The canonical path at pin time (for a missing root, where it is expected to appear).
    canonical: PathBuf,
    /// `(device, inode)` of the directory, once it existed.
    identity: Option<(u64, u64)>,
}

impl PinnedRoot {
    /// Pins `spelling` as it resolves now.
    pub(crate) fn new(spelling: &Path) -> Self {
        match std::fs::canonicalize(spelling) {
            Ok(canonical) => {
                let identity = identity(&canonical);
                Self { spelling: spelling.to_path_buf(), canonical, identity }
            }
            Err(_) => Self {
                spelling: spelling.to_path_buf(),
                canonical: expected_physical(spelling),
                identity: None,
            },
        }
    }

    pub(crate) fn spelling(&self) -> &Path {
        &self.spelling
    }

    /// The root to confine to now: the pinned canonical path while it is still the pinned
    /// directory (a still-missing root keeps its spelling, made absolute, as before it is
    /// pinned); `Err` with [`moved_root`] once it moved or was replaced.
    pub(crate) fn check(&mut self) -> Result<PathBuf, PathBuf> {
        let now = std::fs::canonicalize(&self.spelling);
        match (now, self.identity) {
            (Ok(now), Some(pinned)) if now == self.canonical && identity(&now) == Some(pinned) => Ok(now),
            (Ok(now), None) if now == self.canonical => {
                // A missing root appeared where it was expected: pin the directory now.
                self.identity = identity(&now);
                match self.identity {
                    Some(_) => Ok(now),
                    None => Err(moved_root(&self.canonical)),
                }
            }
            (Err(_), None) => Ok(absolutize(&self.spelling)),
            _ => Err(moved_root(&self.canonical)),
        }
    }

    /// The root as pinned, for reports.
    pub(crate) fn canonical(&self) -> &Path {
        &self.canonical
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().expect("tmp");
        let real = std::fs::canonicalize(tmp.path()).expect("canon");
        (tmp, real)
    }

    #[test]
    fn an_unchanged_root_resolves_to_its_canonical_path() {
        let (_tmp, d) = scratch();
        std::fs::create_dir_all(d.join("real/ws")).expect("mkdir");
        std::os::unix::fs::symlink(d.join("real"), d.join("link")).expect("link");
        let mut pin = PinnedRoot::new(&d.join("link/ws"));
        assert_eq!(pin.check(), Ok(d.join("real/ws")));
        assert_eq!(pin.check(), Ok(d.join("real/ws")));
    }

    #[test]
    fn a_root_whose_parent_was_swapped_for_a_symlink_is_moved() {
        let (_tmp, d) = scratch();
        std::fs::create_dir_all(d.join("t1/ws")).expect("mkdir");
        std::fs::create_dir(d.join("elsewhere")).expect("mkdir");
        let mut pin = PinnedRoot::new(&d.join("t1/ws"));
        assert_eq!(pin.check(), Ok(d.join("t1/ws")));
        std::fs::rename(d.join("t1"), d.join("t1_old")).expect("mv");
        std::fs::create_dir(d.join("t1")).expect("mkdir");
        std::os::unix::fs::symlink(d.join("elsewhere"), d.join("t1/ws")).expect("plant");
        let moved = pin.check().expect_err("moved");
        assert_eq!(moved, Path::new(MOVED_ROOT_PREFIX).join(d.join("t1/ws").strip_prefix("/").expect("abs")));
        assert!(std::fs::canonicalize(&moved).is_err(), "the moved root cannot exist");
    }

    #[test]
    fn a_root_replaced_by_another_directory_is_moved() {
        let (_tmp, d) = scratch();
        std::fs::create_dir_all(d.join("ws")).expect("mkdir");
        let mut pin = PinnedRoot::new(&d.join("ws"));
        std::fs::rename(d.join("ws"), d.join("ws_old")).expect("mv");
        std::fs::create_dir(d.join("ws")).expect("mkdir");
        assert_eq!(pin.check(), Err(moved_root(&d.join("ws"))));
        // Putting the original back makes it valid again: it is the pinned directory.
        std::fs::remove_dir(d.join("ws")).expect("rmdir");
        std::fs::rename(d.join("ws_old"), d.join("ws")).expect("mv back");
        assert_eq!(pin.check(), Ok(d.join("ws")));
    }

    #[test]
    fn a_missing_root_is_pinned_where_it_appears_but_never_through_a_new_symlink() {
        let (_tmp, d) = scratch();
        let mut pin = PinnedRoot::new(&d.join("later/ws"));
        assert_eq!(pin.check(), Ok(d.join("later/ws")), "missing: the spelling");
        std::fs::create_dir_all(d.join("later/ws")).expect("mkdir");
        assert_eq!(pin.check(), Ok(d.join("later/ws")));

        let mut planted = PinnedRoot::new(&d.join("missing"));
        std::fs::create_dir(d.join("target")).expect("mkdir");
        std::os::unix::fs::symlink(d.join("target"), d.join("missing")).expect("plant");
        assert_eq!(planted.check(), Err(moved_root(&d.join("missing"))));
    }

    #[test]
    fn a_root_that_vanished_is_moved() {
        let (_tmp, d) = scratch();
        std::fs::create_dir(d.join("ws")).expect("mkdir");
        let mut pin = PinnedRoot::new(&d.join("ws"));
        std::fs::remove_dir(d.join("ws")).expect("rmdir");
        assert_eq!(pin.check(), Err(moved_root(&d.join("ws"))));
    }
}
