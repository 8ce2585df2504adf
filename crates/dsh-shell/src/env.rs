//! The managed `DSH_*` environment registry (the `shellEnv` service).
//!
//! Every model bash call receives a freshly collected snapshot: the built-ins `DSH_HOME`,
//! `DSH_SHELL=1` and (for agent calls) `DSH_SESSION_ID`, plus whatever registered contributors
//! resolve for that call. Contributors declare the keys they own up front; registration and
//! collection fail loudly on duplicates, reserved or undeclared keys and non-string values.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dsh_core::json::js_is_blank as is_blank;
use dsh_core::{Disposer, ServiceKey, ToolExec};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;

/// Service key of the shell-env registry.
pub const SHELL_ENV: ServiceKey<Arc<ShellEnvRegistry>> = ServiceKey::new("shellEnv");

/// The absolute harness home.
pub const DSH_HOME: &str = "DSH_HOME";
/// Always `1` inside a harness shell.
pub const DSH_SHELL: &str = "DSH_SHELL";
/// The calling agent's session id (omitted for agent-less calls).
pub const DSH_SESSION_ID: &str = "DSH_SESSION_ID";
/// Keys the registry owns itself; no contributor may declare them.
pub const RESERVED_KEYS: [&str; 3] = [DSH_HOME, DSH_SHELL, DSH_SESSION_ID];

/// Resolves a contributor's values for one call.
///
/// Values are JSON so that contributors fed from dynamic sources are checked like any other:
/// anything but a string is refused at collection. `Err` is the contributor's own failure and
/// becomes the tool error unchanged.
pub type EnvResolver = Arc<dyn Fn(&ToolExec) -> Result<BTreeMap<String, Value>, String> + Send + Sync>;

/// A contributor: a unique name, the keys it owns with their descriptions, and its resolver.
#[derive(Clone)]
pub struct ShellEnvContributor {
    /// The contributor's unique, non-blank name.
    pub name: String,
    /// `(key, description)` in declaration order.
    pub variables: Vec<(String, String)>,
    /// Resolves the contributor's values for each call.
    pub resolve: EnvResolver,
}

impl ShellEnvContributor {
    /// A contributor from borrowed parts.
    pub fn new(
        name: &str,
        variables: &[(&str, &str)],
        resolve: impl Fn(&ToolExec) -> Result<BTreeMap<String, Value>, String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_owned(),
            variables: variables.iter().map(|(k, d)| ((*k).to_owned(), (*d).to_owned())).collect(),
            resolve: Arc::new(resolve),
        }
    }
}

impl std::fmt::Debug for ShellEnvContributor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellEnvContributor")
            .field("name", &self.name)
            .field("variables", &self.variables)
            .finish_non_exhaustive()
    }
}

/// One contributor-declared variable as [`ShellEnvRegistry::list`] reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShellEnvVariable {
    /// The name of the contributor that owns the key.
    pub contributor: String,
    /// What the variable holds, as its contributor declared it.
    pub description: String,
    /// The variable name (`DSH_…`).
    pub key: String,
}

/// Registration and collection failures; each message is exact (pinned by tests).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShellEnvError {
    /// A contributor name is empty or blank.
    #[error("bash env contributor name must be non-empty")]
    BlankName,
    /// A contributor with this name is already registered.
    #[error("bash env contributor \"{0}\" is already registered")]
    DuplicateName(String),
    /// A declared key is not `DSH_` followed by an upper-case letter and `[A-Z0-9_]*`.
    #[error("bash env contributor \"{name}\" declared invalid key \"{key}\"")]
    InvalidKey {
        /// The contributor.
        name: String,
        /// The declared key.
        key: String,
    },
    /// A declared key is one the registry owns itself ([`RESERVED_KEYS`]).
    #[error("bash env contributor \"{name}\" cannot own reserved key \"{key}\"")]
    ReservedKey {
        /// The contributor.
        name: String,
        /// The declared key.
        key: String,
    },
    /// A declared key has an empty or blank description.
    #[error("bash env contributor \"{name}\" must describe \"{key}\"")]
    BlankDescription {
        /// The contributor.
        name: String,
        /// The declared key.
        key: String,
    },
    /// A declared key is already owned by another contributor.
    #[error(
        "bash env key \"{key}\" is already owned by contributor \"{owner}\"; contributor \"{name}\" cannot also own it"
    )]
    KeyTaken {
        /// The contested key.
        key: String,
        /// The contributor that owns it.
        owner: String,
        /// The contributor that tried to declare it too.
        name: String,
    },
    /// A resolver returned a key its contributor did not declare.
    #[error("bash env contributor \"{name}\" returned undeclared key \"{key}\"")]
    UndeclaredKey {
        /// The contributor.
        name: String,
        /// The returned key.
        key: String,
    },
    /// A resolver returned something other than a string for a key.
    #[error("bash env contributor \"{name}\" returned a non-string value for \"{key}\"")]
    NonStringValue {
        /// The contributor.
        name: String,
        /// The key whose value is not a string.
        key: String,
    },
    /// A resolver's own failure, reported as it said it.
    #[error("{message}")]
    Resolver {
        /// The contributor whose resolver failed.
        name: String,
        /// The resolver's own message (the error's whole text).
        message: String,
    },
}

struct Entry {
    id: u64,
    contributor: ShellEnvContributor,
}

/// The registry: built-ins computed once, contributors keyed (and collected) by name.
pub struct ShellEnvRegistry {
    dsh_home: PathBuf,
    next_id: AtomicU64,
    contributors: Arc<Mutex<BTreeMap<String, Arc<Entry>>>>,
}

impl std::fmt::Debug for ShellEnvRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellEnvRegistry").field("dsh_home", &self.dsh_home).finish_non_exhaustive()
    }
}

/// `DSH_` followed by `[A-Z][A-Z0-9_]*`.
fn is_valid_key(key: &str) -> bool {
    let Some(rest) = key.strip_prefix("DSH_") else {
        return false;
    };
    let mut chars = rest.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

impl ShellEnvRegistry {
    /// A registry whose `DSH_HOME` is `configured`, else a non-blank `ambient` value, else
    /// `<home>/.dsh` (see [`dsh_core::home::resolve_dsh_home`]). Computed once, here.
    pub fn new(configured: Option<&str>, ambient: Option<&str>) -> Arc<Self> {
        Self::with_home(dsh_core::home::resolve_dsh_home(configured, ambient))
    }

    /// A registry over an already resolved absolute home.
    pub fn with_home(dsh_home: PathBuf) -> Arc<Self> {
        Arc::new(Self {
            dsh_home,
            next_id: AtomicU64::new(1),
            contributors: Arc::new(Mutex::new(BTreeMap::new())),
        })
    }

    /// The absolute harness home exported as `DSH_HOME`.
    pub fn dsh_home(&self) -> &Path {
        &self.dsh_home
    }

    /// Registers a contributor; the disposer removes it (later collects omit its keys).
    pub fn register(&self, contributor: ShellEnvContributor) -> Result<Disposer, ShellEnvError> {
        let name = contributor.name.clone();
        if is_blank(&name) {
            return Err(ShellEnvError::BlankName);
        }
        let mut contributors = self.contributors.lock();
        if contributors.contains_key(&name) {
            return Err(ShellEnvError::DuplicateName(name));
        }
        for (index, (key, description)) in contributor.variables.iter().enumerate() {
            if !is_valid_key(key) {
                return Err(ShellEnvError::InvalidKey { name, key: key.clone() });
            }
            if RESERVED_KEYS.contains(&key.as_str()) {
                return Err(ShellEnvError::ReservedKey { name, key: key.clone() });
            }
            if is_blank(description) {
                return Err(ShellEnvError::BlankDescription { name, key: key.clone() });
            }
            let owner = contributors
                .values()
                .find(|e| e.contributor.variables.iter().any(|(k, _)| k == key))
                .map(|e| e.contributor.name.clone())
                .or_else(|| {
                    // A key declared twice by the same contributor is owned twice, too.
                    contributor.variables[..index].iter().any(|(k, _)| k == key).then(|| name.clone())
                });
            if let Some(owner) = owner {
                return Err(ShellEnvError::KeyTaken { key: key.clone(), owner, name });
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        contributors.insert(name.clone(), Arc::new(Entry { id, contributor }));
        drop(contributors);
        let registry = Arc::clone(&self.contributors);
        Ok(Disposer::new(move || {
            let mut contributors = registry.lock();
            if contributors.get(&name).is_some_and(|e| e.id == id) {
                contributors.remove(&name);
            }
        }))
    }

    /// The managed environment for one call: built-ins, then each
    /// contributor's declared values in name order. Key order is sorted.
    pub fn collect(&self, exec: &ToolExec) -> Result<BTreeMap<String, String>, ShellEnvError> {
        let mut env = BTreeMap::new();
        env.insert(DSH_HOME.to_owned(), self.dsh_home.to_string_lossy().into_owned());
        env.insert(DSH_SHELL.to_owned(), "1".to_owned());
        if let Some(agent) = &exec.agent {
            env.insert(DSH_SESSION_ID.to_owned(), agent.session().header().id.clone());
        }
        // Snapshot first: a resolver may itself use the registry.
        let entries: Vec<Arc<Entry>> = self.contributors.lock().values().cloned().collect();
        for entry in entries {
            let contributor = &entry.contributor;
            let name = &contributor.name;
            let values = (contributor.resolve)(exec)
                .map_err(|message| ShellEnvError::Resolver { name: name.clone(), message })?;
            for (key, value) in values {
                if !contributor.variables.iter().any(|(k, _)| *k == key) {
                    return Err(ShellEnvError::UndeclaredKey { name: name.clone(), key });
                }
                let Value::String(value) = value else {
                    return Err(ShellEnvError::NonStringValue { name: name.clone(), key });
                };
                env.insert(key, value);
            }
        }
        Ok(env)
    }

    /// Contributor-declared variables (never the built-ins), sorted by key; resolvers are not
    /// called.
    pub fn list(&self) -> Vec<ShellEnvVariable> {
        let mut out: Vec<ShellEnvVariable> = self
            .contributors
            .lock()
            .values()
            .flat_map(|e| {
                e.contributor.variables.iter().map(|(key, description)| ShellEnvVariable {
                    contributor: e.contributor.name.clone(),
                    description: description.clone(),
                    key: key.clone(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_grammar() {
        for ok in ["DSH_A", "DSH_SESSION_JSONL", "DSH_X9_", "DSH_Z"] {
            assert!(is_valid_key(ok), "{ok}");
        }
        for bad in ["DSH_", "dsh_invalid", "DSH_1X", "DSH__X", "DSH_a", "XDSH_A", "DSH_A-B", "DSH_É"] {
            assert!(!is_valid_key(bad), "{bad}");
        }
    }

    #[test]
    fn duplicate_key_within_one_contributor_is_refused() {
        let registry = ShellEnvRegistry::with_home(PathBuf::from("/h"));
        let twice = ShellEnvContributor::new("twice", &[("DSH_TWICE", "one"), ("DSH_TWICE", "two")], |_| {
            Ok(BTreeMap::new())
        });
        assert_eq!(
            registry.register(twice).err().map(|e| e.to_string()),
            Some(
                "bash env key \"DSH_TWICE\" is already owned by contributor \"twice\"; contributor \"twice\" cannot also own it"
                    .to_owned()
            )
        );
        assert!(registry.list().is_empty(), "nothing registered");
    }
}
