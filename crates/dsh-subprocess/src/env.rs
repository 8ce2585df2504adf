//! The child environment: the scrubbed ambient environment with explicit entries on top.
//!
//! The scrub drops every ambient variable that looks like a credential (see [`is_scrubbed`])
//! and every one whose upper-cased name starts with `DSH_`. Explicit entries are deliberate
//! and win even when they look like credentials; an explicit unset removes an ambient
//! variable. The harness's own environment is never modified.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

/// Where the ambient environment comes from.
#[derive(Clone, Default)]
pub enum AmbientEnv {
    /// The harness process environment, read once, when the service is made (a harness
    /// never changes its own environment once threads run: that is not thread-safe).
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

    pub(crate) fn vars(&self) -> Vec<(OsString, OsString)> {
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
    /// Set the variable to this value.
    Set(String),
    /// Remove the variable from the ambient environment.
    Unset,
}

/// Words that make a name credential-shaped wherever they appear in it (case-insensitively).
/// The first four are the baseline set; `CREDENTIAL` is a deliberate addition.
const CREDENTIAL_WORDS: [&[u8]; 5] = [b"KEY", b"PASSWORD", b"SECRET", b"TOKEN", b"CREDENTIAL"];

/// Name endings that make a name credential-shaped (case-insensitively): a personal access
/// token, an auth string, a password.
const CREDENTIAL_SUFFIXES: [&[u8]; 3] = [b"_PAT", b"_AUTH", b"_PASS"];

/// True when an ambient variable must not reach a child: its name starts with `DSH_` (a stale
/// managed value), or contains `KEY`, `PASSWORD`, `SECRET`, `TOKEN` or `CREDENTIAL`, or ends
/// in `_PAT`, `_AUTH` or `_PASS` (all case-insensitively); or its value holds a URL with a
/// password (`scheme://user:password@host`, as in `DATABASE_URL` or `HTTPS_PROXY`).
pub fn is_scrubbed(name: &OsStr, value: &OsStr) -> bool {
    name.as_bytes().get(..4).is_some_and(|prefix| prefix.eq_ignore_ascii_case(b"DSH_"))
        || is_credential(name, value)
}

/// True when an ambient variable looks like a credential: [`is_scrubbed`] without the `DSH_`
/// rule (a stale managed value is scrubbed, but it is not a secret). These are the values a
/// harness redacts from output (see [`crate::Redactor::from_env`]).
pub fn is_credential(name: &OsStr, value: &OsStr) -> bool {
    let name = name.as_bytes();
    let contains = |word: &&[u8]| name.windows(word.len()).any(|w| w.eq_ignore_ascii_case(word));
    let ends_with = |suffix: &&[u8]| {
        name.len() >= suffix.len() && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
    };
    CREDENTIAL_WORDS.iter().any(contains)
        || CREDENTIAL_SUFFIXES.iter().any(ends_with)
        || has_url_password(value.as_bytes())
}

/// Whether some `scheme://` in `value` is followed by an authority whose user info carries a
/// non-empty password (`user:password@`). The authority ends at `/`, `?`, `#` or whitespace
/// (RFC 3986; whitespace because values may list several URLs).
fn has_url_password(value: &[u8]) -> bool {
    value.windows(3).enumerate().filter(|(_, w)| *w == b"://").any(|(at, _)| {
        let rest = &value[at + 3..];
        let end = rest
            .iter()
            .position(|b| matches!(b, b'/' | b'?' | b'#') || b.is_ascii_whitespace())
            .unwrap_or(rest.len());
        let authority = &rest[..end];
        let Some(at_sign) = authority.iter().rposition(|b| *b == b'@') else { return false };
        let user_info = &authority[..at_sign];
        user_info.iter().position(|b| *b == b':').is_some_and(|colon| colon + 1 < user_info.len())
    })
}

/// The ambient environment a service's children start from: `ambient` without what
/// [`is_scrubbed`] drops. Made once per service, so a spawn copies no variable.
pub(crate) fn inherited(ambient: &AmbientEnv) -> Arc<[(OsString, OsString)]> {
    ambient.vars().into_iter().filter(|(name, value)| !is_scrubbed(name, value)).collect()
}

/// The final child environment: the scrubbed ambient one, then `explicit` in order (later
/// wins). It borrows from both.
pub(crate) fn child_env<'a>(
    inherited: &'a [(OsString, OsString)],
    explicit: &'a [(String, EnvEntry)],
) -> Vec<(&'a OsStr, &'a OsStr)> {
    let mut env: Vec<(&OsStr, &OsStr)> = Vec::with_capacity(inherited.len() + explicit.len());
    env.extend(inherited.iter().map(|(name, value)| (name.as_os_str(), value.as_os_str())));
    for (name, entry) in explicit {
        let name = OsStr::new(name);
        env.retain(|(existing, _)| *existing != name);
        if let EnvEntry::Set(value) = entry {
            env.push((name, OsStr::new(value)));
        }
    }
    env
}

/// The value of `name` in a built environment.
pub(crate) fn lookup<'a>(env: &[(&'a OsStr, &'a OsStr)], name: &str) -> Option<&'a OsStr> {
    env.iter().rev().find(|(k, _)| *k == name).map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubbed(name: &str, value: &str) -> bool {
        is_scrubbed(OsStr::new(name), OsStr::new(value))
    }

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
            assert!(scrubbed(name, "x"), "{name} must be scrubbed");
        }
        for name in ["PATH", "HOME", "LANG", "LC_ALL", "HTTPS_PROXY", "no_proxy", "XDSH_X"] {
            assert!(!scrubbed(name, "x"), "{name} must survive");
        }
    }

    #[test]
    fn scrub_matches_credential_word_and_suffixes_beyond_the_contract() {
        for name in [
            "GOOGLE_APPLICATION_CREDENTIALS",
            "aws_credential_file",
            "MyCredentialStore",
            "GITHUB_PAT",
            "ado_pat",
            "NPM_CONFIG__AUTH",
            "REGISTRY_AUTH",
            "smtp_pass",
            "DB_PASS",
        ] {
            assert!(scrubbed(name, "x"), "{name} must be scrubbed");
        }
        // The suffixes count only at the end, and only after an underscore.
        for name in
            ["PATH", "PATHS", "PAT", "_PATH", "AUTHOR", "OAUTH_FLOW", "PASSAGE", "COMPASS", "BYPASS_X"]
        {
            assert!(!scrubbed(name, "x"), "{name} must survive");
        }
    }

    #[test]
    fn scrub_matches_values_holding_a_url_password() {
        for value in [
            "postgres://u:pw@h/db",
            "http://u:pw@proxy:3128",
            "HTTPS://USER:P%40SS@host",
            "redis://:hunter2@cache:6379/0",
            "git+ssh://me:pw@host:22/repo.git",
            "https://a.example https://u:p@b.example",
            "mysql://u:pw@h",
            "amqp://u:p:q@h?x=1",
            "user=x url=ftp://u:pw@h",
        ] {
            assert!(scrubbed("SOME_URL", value), "{value} must be scrubbed");
        }
        for value in [
            "postgres://h/db",
            "ssh://git@github.com/x.git",
            "http://u:@proxy:3128",
            "http://proxy:3128",
            "https://h/path?user=u:p@x",
            "https://h/#u:p@x",
            "u:pw@h",
            "mailto:u:pw@h",
            "http://u:pw",
            "",
        ] {
            assert!(!scrubbed("SOME_URL", value), "{value} must survive");
        }
        assert!(!scrubbed("HTTPS_PROXY", "http://proxy:3128"), "a proxy without credentials survives");
        assert!(scrubbed("HTTPS_PROXY", "http://u:pw@proxy:3128"));
        assert!(is_scrubbed(OsStr::new("X"), std::os::unix::ffi::OsStrExt::from_bytes(b"s3://k:\xff@b")));
    }

    #[test]
    fn credential_urls_are_not_inherited_but_explicit_entries_still_win() {
        let ambient = AmbientEnv::fixed([
            ("PATH", "/bin"),
            ("DATABASE_URL", "postgres://u:pw@h/db"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("SSH_AUTH_SOCK", "/run/agent.sock"),
        ]);
        let inherited = inherited(&ambient);
        let explicit = [("DATABASE_URL".into(), EnvEntry::Set("postgres://x:y@h/db".into()))];
        let env = child_env(&inherited, &explicit);
        let names: Vec<&OsStr> = env.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["PATH", "HTTPS_PROXY", "SSH_AUTH_SOCK", "DATABASE_URL"]);
        assert_eq!(lookup(&env, "DATABASE_URL"), Some(OsStr::new("postgres://x:y@h/db")));
    }

    #[test]
    fn explicit_entries_win_and_tombstones_remove() {
        let ambient = AmbientEnv::fixed([("PATH", "/bin"), ("A", "1"), ("MY_TOKEN", "t"), ("B", "2")]);
        let inherited = inherited(&ambient);
        let explicit = [
            ("A".into(), EnvEntry::Unset),
            ("B".into(), EnvEntry::Set("two".into())),
            ("MY_TOKEN".into(), EnvEntry::Set("mine".into())),
            ("B".into(), EnvEntry::Set("later".into())),
        ];
        let env = child_env(&inherited, &explicit);
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
