//! The child environment: the scrubbed ambient environment with explicit entries on top.
//!
//! The scrub drops every ambient variable whose name contains `KEY`, `PASSWORD`, `SECRET` or
//! `TOKEN` (case-insensitively, anywhere in the name) and every one whose upper-cased name
//! starts with `DSH_`. Explicit entries are deliberate and win even when they look like
//! credentials; an explicit unset removes an ambient variable. The harness's own environment
//! is never modified.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

/// Where the ambient environment comes from.
#[derive(Clone, Default)]
pub enum AmbientEnv {
    /// The harness process environment, read at every spawn.
    #[default]
    Process,
    /// A fixed list (tests and hosts that must not expose their own environment).
    Fixed(Arc<Vec<(OsString, OsString)>>),
}

impl AmbientEnv {
    /// A fixed ambient environment made of string pairs.
    pub fn fixed<K: Into<OsString>, V: Into<OsString>>(vars: impl IntoIterator<Item = (K, V)>) -> Self {
        AmbientEnv::Fixed(Arc::new(vars.into_iter().map(|(k, v)| (k.into(), v.into())).collect()))
    }

    fn vars(&self) -> Vec<(OsString, OsString)> {
        match self {
            AmbientEnv::Process => std::env::vars_os().collect(),
            AmbientEnv::Fixed(vars) => vars.as_ref().clone(),
        }
    }
}

impl std::fmt::Debug for AmbientEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AmbientEnv::Process => f.write_str("AmbientEnv::Process"),
            AmbientEnv::Fixed(vars) => write!(f, "AmbientEnv::Fixed({} vars)", vars.len()),
        }
    }
}

/// An explicit environment entry: set a value, or remove the ambient one (a tombstone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvEntry {
    Set(String),
    Unset,
}

/// True when an ambient variable must not reach a child.
pub fn is_scrubbed(name: &OsStr) -> bool {
    let name = name.as_bytes();
    let contains = |word: &[u8]| name.windows(word.len()).any(|w| w.eq_ignore_ascii_case(word));
    name.get(..4).is_some_and(|prefix| prefix.eq_ignore_ascii_case(b"DSH_"))
        || [&b"KEY"[..], b"PASSWORD", b"SECRET", b"TOKEN"].into_iter().any(contains)
}

/// The final child environment: scrubbed ambient, then `explicit` in order (later wins).
pub(crate) fn child_env(ambient: &AmbientEnv, explicit: &[(String, EnvEntry)]) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> =
        ambient.vars().into_iter().filter(|(name, _)| !is_scrubbed(name)).collect();
    for (name, entry) in explicit {
        let name = OsStr::new(name);
        env.retain(|(existing, _)| existing != name);
        if let EnvEntry::Set(value) = entry {
            env.push((name.to_owned(), OsString::from(value)));
        }
    }
    env
}

/// The value of `name` in a built environment.
pub(crate) fn lookup<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_os_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_matches_credential_words_anywhere_and_dsh_prefix() {
        for name in [
            "FOO_API_KEY",
            "db_password",
            "GITHUB_TOKEN",
            "MY_SECRET",
            "MONKEY",
            "KEYBOARD_X",
            "TOKENIZERS_PARALLELISM",
            "DSH_SHELL",
            "dsh_x",
            "AWS_SECRET_ACCESS_KEY",
        ] {
            assert!(is_scrubbed(OsStr::new(name)), "{name} must be scrubbed");
        }
        for name in ["PATH", "HOME", "LANG", "LC_ALL", "HTTPS_PROXY", "no_proxy", "XDSH_X"] {
            assert!(!is_scrubbed(OsStr::new(name)), "{name} must survive");
        }
    }

    #[test]
    fn explicit_entries_win_and_tombstones_remove() {
        let ambient = AmbientEnv::fixed([("PATH", "/bin"), ("A", "1"), ("MY_TOKEN", "t"), ("B", "2")]);
        let env = child_env(
            &ambient,
            &[
                ("A".into(), EnvEntry::Unset),
                ("B".into(), EnvEntry::Set("two".into())),
                ("MY_TOKEN".into(), EnvEntry::Set("mine".into())),
                ("B".into(), EnvEntry::Set("later".into())),
            ],
        );
        let text: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
            .collect();
        assert_eq!(
            text,
            vec![
                ("PATH".to_owned(), "/bin".to_owned()),
                ("MY_TOKEN".to_owned(), "mine".to_owned()),
                ("B".to_owned(), "later".to_owned()),
            ]
        );
        assert_eq!(lookup(&env, "B"), Some(OsStr::new("later")));
        assert_eq!(lookup(&env, "A"), None);
    }
}
