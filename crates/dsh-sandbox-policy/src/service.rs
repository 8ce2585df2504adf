//! The local policy service and its plugin.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use dsh_core::home::absolutize;
use dsh_core::services::SystemPrompt;
use dsh_core::{Agent, ConfigError, Handles, Plugin, PluginError, PluginScope, Session};
use dsh_sandbox::{
    CredentialBinding, Credentials, HostPattern, NetworkMode, NetworkPolicy, SANDBOX_POLICY,
    SandboxExecutionPolicy, SandboxMode, SandboxPolicyService, StandingPolicy,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::pin::PinnedRoot;

/// The session event that records a mode switch.
pub const SANDBOX_MODE_EVENT: &str = "sandbox/mode";

/// Config: deployment default mode and fallback workspace root.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxPolicyConfig {
    /// `read-only` (default), `workspace-write` or `danger-full-access`.
    pub mode: Option<String>,
    /// Root for agent-less or cwd-less calls; default the harness cwd.
    pub workspace_root: Option<String>,
    /// Further directories `workspace-write` may write under, besides the workspace root (a
    /// tool's cache such as `~/.npm`, a second checkout). Each must be an existing directory;
    /// each is canonicalized and pinned like the workspace root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_roots: Vec<String>,
    /// The network axis: `allow` (default), `deny` or `ask`.
    pub network: Option<String>,
    /// Hosts confined commands reach under `deny` and `ask`: `host`, `host:port`, `*.suffix`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// Secrets bound to hosts (under `deny` and `ask` only): confined commands hold a
    /// placeholder, the harness's proxy puts the value into requests to those hosts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<CredentialConfig>,
    /// A PEM file of the certificate authorities bound hosts are verified against, in place of
    /// the host's trust store.
    pub credentials_upstream_ca: Option<String>,
}

/// One secret bound to hosts.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialConfig {
    /// The variable confined commands see the placeholder in; the value is the harness's
    /// variable of that name unless `file` is given.
    pub name: String,
    /// The hosts the value is sent to: `host`, `host:port`, `*.suffix`.
    pub hosts: Vec<String>,
    /// Request headers, besides `Authorization`, whose placeholder is replaced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    /// Read the value from this file (without its final line ending) instead.
    pub file: Option<String>,
}

impl CredentialConfig {
    /// The binding, its value read now from the harness's environment or the file.
    fn binding(&self) -> Result<CredentialBinding, String> {
        let name = &self.name;
        let valid_name = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            return Err(format!("sandbox-policy: credentials: {name:?} is not a variable name"));
        }
        if self.hosts.is_empty() {
            return Err(format!("sandbox-policy: credentials: {name} is bound to no host"));
        }
        let hosts = self
            .hosts
            .iter()
            .map(|p| HostPattern::parse(p).map_err(|e| format!("sandbox-policy: credentials: {name}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        for header in &self.headers {
            if header.is_empty() || !header.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(format!("sandbox-policy: credentials: {name}: {header:?} is not a header name"));
            }
        }
        let mut value =
            match &self.file {
                Some(file) => std::fs::read(file)
                    .map_err(|e| format!("sandbox-policy: credentials: {name}: cannot read {file}: {e}"))?,
                None => std::env::var_os(name).map(std::os::unix::ffi::OsStringExt::into_vec).ok_or_else(
                    || format!("sandbox-policy: credentials: the harness's environment has no {name}"),
                )?,
            };
        if value.ends_with(b"\n") {
            value.pop();
            if value.ends_with(b"\r") {
                value.pop();
            }
        }
        if value.is_empty() {
            return Err(format!("sandbox-policy: credentials: {name} is empty"));
        }
        if value.iter().any(|b| b.is_ascii_control()) {
            return Err(format!(
                "sandbox-policy: credentials: {name} holds a control character (it goes into request headers)"
            ));
        }
        Ok(CredentialBinding::new(name.clone(), value, hosts, self.headers.clone()))
    }
}

/// A checked [`SandboxPolicyConfig`]: the default mode parsed, the roots as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxPolicySettings {
    /// The deployment default mode.
    pub default_mode: SandboxMode,
    /// Root for agent-less or cwd-less calls; default the harness cwd (read when the service
    /// is built).
    pub workspace_root: Option<String>,
    /// Further writable roots (`workspace-write`), each an existing directory when checked.
    pub writable_roots: Vec<String>,
    /// The network axis and its allowlist.
    pub network: NetworkPolicy,
    /// The secrets bound to hosts, with their values; `None` without any.
    pub credentials: Option<Arc<Credentials>>,
}

impl SandboxPolicyConfig {
    /// Parses the mode; an unknown one is refused with the exact message.
    pub fn checked(&self) -> Result<SandboxPolicySettings, String> {
        let default_mode = match self.mode.as_deref() {
            None => SandboxMode::ReadOnly,
            Some(m) => SandboxMode::parse(m).ok_or_else(|| {
                format!(
                    "sandbox-policy: mode must be one of \"read-only\", \"workspace-write\", \"danger-full-access\" (got \"{m}\")"
                )
            })?,
        };
        let mut writable_roots = Vec::with_capacity(self.writable_roots.len());
        for root in &self.writable_roots {
            // `~` and `~/…` are the harness's home.
            let expanded = match root.strip_prefix('~') {
                Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                    format!("{}{rest}", dsh_core::home::user_home().display())
                }
                _ => root.clone(),
            };
            if !Path::new(&expanded).is_dir() {
                return Err(format!("sandbox-policy: writableRoots: {root} is not an existing directory"));
            }
            writable_roots.push(expanded);
        }
        let mode = match self.network.as_deref() {
            None => NetworkMode::Allow,
            Some(m) => NetworkMode::parse(m).ok_or_else(|| {
                format!("sandbox-policy: network must be one of \"allow\", \"deny\", \"ask\" (got \"{m}\")")
            })?,
        };
        let allow = self
            .allow_hosts
            .iter()
            .map(|p| HostPattern::parse(p).map_err(|e| format!("sandbox-policy: allowHosts: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let credentials = self.checked_credentials(mode)?;
        Ok(SandboxPolicySettings {
            default_mode,
            workspace_root: self.workspace_root.clone(),
            writable_roots,
            network: NetworkPolicy { mode, allow },
            credentials,
        })
    }

    /// The credential bindings, their values read; they need a network mode that isolates
    /// (only then do requests go through the proxy).
    fn checked_credentials(&self, mode: NetworkMode) -> Result<Option<Arc<Credentials>>, String> {
        if self.credentials.is_empty() {
            if self.credentials_upstream_ca.is_some() {
                return Err("sandbox-policy: credentialsUpstreamCa needs credentials".to_owned());
            }
            return Ok(None);
        }
        if !mode.isolates() {
            return Err("sandbox-policy: credentials need network \"deny\" or \"ask\" (the harness's proxy adds them; under \"allow\" commands reach hosts directly)".to_owned());
        }
        let mut bindings: Vec<CredentialBinding> = Vec::with_capacity(self.credentials.len());
        for config in &self.credentials {
            let binding = config.binding()?;
            if bindings.iter().any(|b| b.name == binding.name) {
                return Err(format!("sandbox-policy: credentials: {} is bound twice", binding.name));
            }
            bindings.push(binding);
        }
        let upstream_ca = match &self.credentials_upstream_ca {
            Some(file) if !Path::new(file).is_file() => {
                return Err(format!("sandbox-policy: credentialsUpstreamCa: {file} is not a file"));
            }
            Some(file) => Some(PathBuf::from(file)),
            None => None,
        };
        Ok(Some(Arc::new(Credentials { bindings, upstream_ca })))
    }
}

/// Canonical form of a root: the filesystem realpath (so `link/..` resolves physically, like
/// `chdir`), else the spelling made absolute and lexically normalized.
pub fn canonical_root(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| absolutize(path))
}

/// The policy service over session logs.
///
/// Workspace roots are pinned: the configured root when the service is built, a session's
/// root when that session is first resolved. A pinned root that later moved or was replaced
/// resolves to an unusable root ([`crate::moved_root`], under `/dev/null`: fail closed)
/// instead of wherever its path leads now.
#[derive(Debug)]
pub struct LocalSandboxPolicy {
    default_mode: SandboxMode,
    root: PathBuf,
    configured: Mutex<PinnedRoot>,
    /// Per session id: the root pinned from its header cwd.
    sessions: Mutex<HashMap<String, PinnedRoot>>,
    /// The further writable roots, pinned when the service is built.
    extra: Mutex<Vec<PinnedRoot>>,
    /// The network axis of every call.
    network: NetworkPolicy,
    /// The secrets bound to hosts.
    credentials: Option<Arc<Credentials>>,
}

impl LocalSandboxPolicy {
    /// Builds the service; an unknown mode is refused.
    pub fn new(config: &SandboxPolicyConfig) -> Result<Self, String> {
        Ok(Self::with_settings(&config.checked()?))
    }

    /// Builds the service from checked settings, pinning the configured root now.
    pub fn with_settings(settings: &SandboxPolicySettings) -> Self {
        let default_mode = settings.default_mode;
        let spelling = match &settings.workspace_root {
            Some(root) => PathBuf::from(root),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        };
        let root = canonical_root(&spelling);
        let configured = Mutex::new(PinnedRoot::new(&spelling));
        let extra = settings.writable_roots.iter().map(|r| PinnedRoot::new(Path::new(r))).collect();
        Self {
            default_mode,
            root,
            configured,
            sessions: Mutex::new(HashMap::new()),
            extra: Mutex::new(extra),
            network: settings.network.clone(),
            credentials: settings.credentials.clone(),
        }
    }

    /// The further writable roots now, canonical and de-duplicated; one that moved or was
    /// replaced since the service was built resolves to an unusable root (no write is granted
    /// under it).
    fn extra_roots(&self) -> Vec<PathBuf> {
        let mut pins = self.extra.lock().unwrap_or_else(PoisonError::into_inner);
        let mut roots: Vec<PathBuf> = Vec::with_capacity(pins.len());
        for pin in pins.iter_mut() {
            let root = pin.check().unwrap_or_else(|moved| {
                tracing::warn!(
                    pinned = %pin.canonical().display(),
                    "a writable root moved or was replaced since the harness started; refusing it"
                );
                moved
            });
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
        roots
    }

    /// The workspace root of a call now: the session's pinned root if it has a cwd, else the
    /// configured one — or, if that root moved or was replaced, an unusable root.
    fn workspace_root(&self, session: Option<&Session>) -> PathBuf {
        let cwd = session.and_then(|s| s.header().cwd.as_deref().map(|cwd| (s.id(), cwd)));
        let (checked, pinned) = match cwd {
            Some((id, cwd)) => {
                let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
                let pin = sessions.entry(id.to_owned()).or_insert_with(|| PinnedRoot::new(cwd));
                if pin.spelling() != cwd {
                    // Another session under the same id (a session's cwd never changes).
                    *pin = PinnedRoot::new(cwd);
                }
                (pin.check(), pin.canonical().to_path_buf())
            }
            None => {
                let mut pin = self.configured.lock().unwrap_or_else(PoisonError::into_inner);
                (pin.check(), pin.canonical().to_path_buf())
            }
        };
        checked.unwrap_or_else(|moved| {
            tracing::warn!(
                session = session.map(Session::id),
                pinned = %pinned.display(),
                "the workspace root moved or was replaced since the session started; refusing it"
            );
            moved
        })
    }

    /// The configured fallback root (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn recorded_mode(session: &Session) -> Option<String> {
        session.last_event(SANDBOX_MODE_EVENT).map(|e| match e.data.get("mode") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => "undefined".to_owned(),
        })
    }

    /// The `sandbox:policy` runtime context text for a standing mode.
    pub fn context_text(standing: &StandingPolicy) -> String {
        match SandboxMode::parse(&standing.mode_label) {
            Some(SandboxMode::WorkspaceWrite) => {
                let extra: Vec<String> = standing
                    .policy
                    .extra_roots
                    .iter()
                    .map(|r| json!(r.to_string_lossy()).to_string())
                    .collect();
                let extra = match extra.is_empty() {
                    true => String::new(),
                    false => format!(", and under these further writable roots: {}", extra.join(", ")),
                };
                format!(
                    "Current DSH file policy: workspace-write. Any available operation enforced by the DSH file sandbox may modify files under the session workspace: {}{extra}. Some platform temporary areas may also be writable.",
                    json!(standing.policy.workspace_root.to_string_lossy())
                )
            }
            Some(SandboxMode::DangerFullAccess) => "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict file modifications by available operations.".to_owned(),
            _ => "Current DSH file policy: read-only. Any available operation enforced by the DSH file sandbox cannot modify files in the standing mode. Do not refuse a required modification from this policy alone: try an available tool normally and follow any denial and escalation guidance it returns.".to_owned(),
        }
    }
}

impl SandboxPolicyService for LocalSandboxPolicy {
    fn default_mode(&self) -> SandboxMode {
        self.default_mode
    }

    fn network_mode(&self) -> NetworkMode {
        self.network.mode
    }

    fn credentials(&self) -> Option<Arc<Credentials>> {
        self.credentials.clone()
    }

    fn resolve(&self, session: Option<&Session>, approved: Option<SandboxMode>) -> StandingPolicy {
        let mode_label = approved
            .map(|m| m.as_str().to_owned())
            .or_else(|| session.and_then(Self::recorded_mode))
            .unwrap_or_else(|| self.default_mode.as_str().to_owned());
        let mode = SandboxMode::parse(&mode_label).unwrap_or(SandboxMode::ReadOnly);
        let workspace_root = self.workspace_root(session);
        let mut policy =
            SandboxExecutionPolicy::new(mode, workspace_root, session.map(|s| s.id().to_owned()));
        policy.extra_roots = self.extra_roots();
        policy.network = self.network.clone();
        StandingPolicy { mode_label, policy }
    }

    fn set_sandbox_mode(&self, session: &Session, mode: SandboxMode) -> Result<(), String> {
        session
            .append(SANDBOX_MODE_EVENT, json!({ "mode": mode.as_str() }))
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// The `sandbox:network` runtime context: only for a policy that isolates (with `allow` the
/// prompt stays as it was).
pub fn network_context_text(network: &NetworkPolicy) -> Option<String> {
    let listed = network.allowlist_text();
    let how = "Sandboxed commands reach them only through the HTTP proxy named by HTTP_PROXY and HTTPS_PROXY (most tools use it; a program that ignores those variables cannot connect), and names are resolved by the harness: there is no DNS inside the sandbox.";
    match network.mode {
        NetworkMode::Allow => None,
        NetworkMode::Deny => Some(format!(
            "Current DSH network policy: deny. Sandboxed commands can reach only listed hosts; {listed}. {how} A refused destination is reported as [network: access to host:port denied]; it cannot be approved from here."
        )),
        NetworkMode::Ask => Some(format!(
            "Current DSH network policy: ask. Sandboxed commands can reach listed hosts; {listed}. {how} Connecting to any other host:port asks the user once per call, while the command waits; a refusal is reported as [network: access to host:port denied]. Background jobs cannot ask."
        )),
    }
}

/// What the `sandbox:network` context says of bound credentials (names and hosts, never a
/// value): the variables hold placeholders, used as the secrets themselves.
pub fn credentials_context_text(credentials: &Credentials) -> String {
    let each: Vec<String> = credentials
        .bindings
        .iter()
        .map(|b| {
            let hosts: Vec<String> = b.hosts.iter().map(ToString::to_string).collect();
            format!("{} ({})", b.name, hosts.join(", "))
        })
        .collect();
    format!(
        "Bound credentials: {}. In sandboxed commands each of these variables holds a placeholder, not the secret; use it as the secret (an Authorization header, a git password): the proxy replaces it with the real value in requests to those hosts only, and reports each as [network: credential NAME added for host:port].",
        each.join("; ")
    )
}

/// Loads the policy service and its `sandbox:policy` runtime context (order 110).
pub struct SandboxPolicyPlugin;

impl Plugin for SandboxPolicyPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-sandbox-policy";
    const SHORT_NAME: &'static str = "sandbox-policy";
    type Deps = (SystemPrompt,);
    type Config = SandboxPolicyConfig;
    type Validated = SandboxPolicySettings;

    fn validate(config: SandboxPolicyConfig) -> Result<SandboxPolicySettings, ConfigError> {
        Ok(config.checked()?)
    }

    fn apply(
        scope: &mut PluginScope,
        (prompt,): Handles<Self>,
        settings: &SandboxPolicySettings,
    ) -> Result<(), PluginError> {
        let service = Arc::new(LocalSandboxPolicy::with_settings(settings));
        let for_context = Arc::clone(&service);
        let context = prompt.register_context(
            "sandbox:policy",
            110.0,
            Arc::new(move |agent: Option<&Arc<Agent>>| match agent {
                None => String::new(),
                Some(agent) => {
                    LocalSandboxPolicy::context_text(&for_context.resolve(Some(agent.session()), None))
                }
            }),
        )?;
        scope.add(context);
        if let Some(mut text) = network_context_text(&settings.network) {
            if let Some(credentials) = &settings.credentials {
                text.push(' ');
                text.push_str(&credentials_context_text(credentials));
            }
            let context = prompt.register_context(
                "sandbox:network",
                111.0,
                Arc::new(move |agent: Option<&Arc<Agent>>| match agent {
                    None => String::new(),
                    Some(_) => text.clone(),
                }),
            )?;
            scope.add(context);
        }
        let service: Arc<dyn SandboxPolicyService> = service;
        scope.provide(SANDBOX_POLICY, service)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::SessionHeader;

    fn session(id: &str, cwd: Option<&str>) -> Arc<Session> {
        Session::new(SessionHeader { id: id.into(), cwd: cwd.map(PathBuf::from) })
    }

    #[test]
    fn sb_09_policy_resolution() {
        let default = LocalSandboxPolicy::new(&SandboxPolicyConfig::default()).expect("ok");
        let standing = default.resolve(None, None);
        assert_eq!(standing.mode_label, "read-only");
        assert_eq!(
            standing.policy,
            SandboxExecutionPolicy::new(
                SandboxMode::ReadOnly,
                canonical_root(&std::env::current_dir().expect("cwd")),
                None
            )
        );

        let p = LocalSandboxPolicy::new(&SandboxPolicyConfig {
            mode: Some("workspace-write".into()),
            workspace_root: Some("/fallback".into()),
            ..Default::default()
        })
        .expect("ok");
        let s1 = session("s1", Some("/projects/a"));
        assert_eq!(
            p.resolve(Some(&s1), None).policy,
            SandboxExecutionPolicy::new(
                SandboxMode::WorkspaceWrite,
                PathBuf::from("/projects/a"),
                Some("s1".into())
            )
        );
        let no_cwd = session("s2", None);
        assert_eq!(p.resolve(Some(&no_cwd), None).policy.workspace_root, PathBuf::from("/fallback"));

        let approved = session("s3", Some("/projects/approved"));
        p.set_sandbox_mode(&approved, SandboxMode::ReadOnly).expect("append");
        assert_eq!(approved.events().len(), 1);
        assert_eq!(approved.events()[0].kind, "sandbox/mode");
        assert_eq!(p.resolve(Some(&approved), None).mode_label, "read-only");
        let granted = p.resolve(Some(&approved), Some(SandboxMode::DangerFullAccess));
        assert_eq!(granted.policy.mode, SandboxMode::DangerFullAccess);
        assert_eq!(granted.policy.workspace_root, PathBuf::from("/projects/approved"));
        assert_eq!(granted.policy.session_id.as_deref(), Some("s3"));

        let bogus = session("s4", None);
        bogus.append(SANDBOX_MODE_EVENT, json!({"mode": "unknown-mode"})).expect("append");
        let standing = p.resolve(Some(&bogus), None);
        assert_eq!(standing.mode_label, "unknown-mode");
        assert_eq!(standing.policy.mode, SandboxMode::ReadOnly, "malformed modes execute fail-safe");

        let err = LocalSandboxPolicy::new(&SandboxPolicyConfig {
            mode: Some("bogus".into()),
            ..Default::default()
        })
        .expect_err("bogus mode");
        assert!(err.contains("bogus"), "{err}");
    }

    #[test]
    fn sb_09_link_dotdot_resolves_physically() {
        let tmp = tempfile::tempdir().expect("tmp");
        let r = std::fs::canonicalize(tmp.path()).expect("canon");
        std::fs::create_dir_all(r.join("physical/child")).expect("mkdir");
        std::fs::create_dir_all(r.join("lexical")).expect("mkdir");
        std::os::unix::fs::symlink(r.join("physical/child"), r.join("lexical/link")).expect("link");
        let p = LocalSandboxPolicy::new(&SandboxPolicyConfig::default()).expect("ok");
        let s = session("s", Some(r.join("lexical/link/..").to_str().expect("utf8")));
        assert_eq!(p.resolve(Some(&s), None).policy.workspace_root, r.join("physical"));
    }

    #[test]
    fn a_session_root_is_pinned_when_first_resolved() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = std::fs::canonicalize(tmp.path()).expect("canon");
        std::fs::create_dir_all(d.join("t1/ws")).expect("mkdir");
        std::fs::create_dir(d.join("elsewhere")).expect("mkdir");
        std::fs::create_dir(d.join("configured")).expect("mkdir");
        let p = LocalSandboxPolicy::new(&SandboxPolicyConfig {
            mode: Some("workspace-write".into()),
            workspace_root: Some(d.join("configured").to_str().expect("utf8").into()),
            ..Default::default()
        })
        .expect("ok");
        let s = session("s", Some(d.join("t1/ws").to_str().expect("utf8")));
        assert_eq!(p.resolve(Some(&s), None).policy.workspace_root, d.join("t1/ws"));

        std::fs::rename(d.join("t1"), d.join("t1_old")).expect("mv");
        std::fs::create_dir(d.join("t1")).expect("mkdir");
        std::os::unix::fs::symlink(d.join("elsewhere"), d.join("t1/ws")).expect("plant");
        let standing = p.resolve(Some(&s), Some(SandboxMode::WorkspaceWrite));
        assert_eq!(standing.policy.workspace_root, crate::moved_root(&d.join("t1/ws")));
        assert_eq!(standing.policy.mode, SandboxMode::WorkspaceWrite);
        assert_eq!(standing.policy.session_id.as_deref(), Some("s"));

        // A new session (here: another id) pins the path as it is now.
        let fresh = session("s2", Some(d.join("t1/ws").to_str().expect("utf8")));
        assert_eq!(p.resolve(Some(&fresh), None).policy.workspace_root, d.join("elsewhere"));

        // The configured root, pinned at construction, fails closed the same way.
        assert_eq!(p.resolve(None, None).policy.workspace_root, d.join("configured"));
        std::fs::rename(d.join("configured"), d.join("configured_old")).expect("mv");
        std::os::unix::fs::symlink(d.join("elsewhere"), d.join("configured")).expect("plant");
        let no_cwd = session("s3", None);
        assert_eq!(
            p.resolve(Some(&no_cwd), None).policy.workspace_root,
            crate::moved_root(&d.join("configured"))
        );
    }

    #[test]
    fn a5_context_texts() {
        let p = LocalSandboxPolicy::new(&SandboxPolicyConfig {
            workspace_root: Some("/ws".into()),
            ..Default::default()
        })
        .expect("ok");
        let s = session("s", None);
        assert!(
            LocalSandboxPolicy::context_text(&p.resolve(Some(&s), None))
                .starts_with("Current DSH file policy: read-only. Any available")
        );
        let ww = p.resolve(Some(&s), Some(SandboxMode::WorkspaceWrite));
        assert_eq!(
            LocalSandboxPolicy::context_text(&ww),
            "Current DSH file policy: workspace-write. Any available operation enforced by the DSH file sandbox may modify files under the session workspace: \"/ws\". Some platform temporary areas may also be writable."
        );
    }

    #[test]
    fn writable_roots_are_checked_pinned_and_named_in_the_context() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = std::fs::canonicalize(tmp.path()).expect("canon");
        std::fs::create_dir_all(d.join("cache")).expect("mkdir");
        std::fs::create_dir_all(d.join("real/second")).expect("mkdir");
        std::os::unix::fs::symlink(d.join("real"), d.join("link")).expect("link");
        let text = |p: &Path| p.to_str().expect("utf8").to_owned();
        let missing = d.join("missing");
        let err = LocalSandboxPolicy::new(&SandboxPolicyConfig {
            writable_roots: vec![text(&d.join("cache")), text(&missing)],
            ..Default::default()
        })
        .expect_err("missing root");
        assert_eq!(
            err,
            format!("sandbox-policy: writableRoots: {} is not an existing directory", missing.display())
        );
        std::fs::write(d.join("file"), "x").expect("write");
        assert!(
            LocalSandboxPolicy::new(&SandboxPolicyConfig {
                writable_roots: vec![text(&d.join("file"))],
                ..Default::default()
            })
            .is_err(),
            "a file is not a root"
        );

        let p = LocalSandboxPolicy::new(&SandboxPolicyConfig {
            workspace_root: Some("/ws".into()),
            writable_roots: vec![
                text(&d.join("cache")),
                text(&d.join("link/second")),
                text(&d.join("cache")),
            ],
            ..Default::default()
        })
        .expect("ok");
        let s = session("s", None);
        let ww = p.resolve(Some(&s), Some(SandboxMode::WorkspaceWrite));
        assert_eq!(ww.policy.extra_roots, [d.join("cache"), d.join("real/second")]);
        assert_eq!(
            LocalSandboxPolicy::context_text(&ww),
            format!(
                "Current DSH file policy: workspace-write. Any available operation enforced by the DSH file sandbox may modify files under the session workspace: \"/ws\", and under these further writable roots: {}, {}. Some platform temporary areas may also be writable.",
                json!(text(&d.join("cache"))),
                json!(text(&d.join("real/second")))
            )
        );
        // Read-only keeps them in the policy (an escalation to workspace-write uses them).
        assert_eq!(p.resolve(Some(&s), None).policy.extra_roots.len(), 2);

        // A root replaced after the service was built is refused, not followed.
        std::fs::rename(d.join("cache"), d.join("cache_old")).expect("mv");
        std::fs::create_dir(d.join("cache")).expect("mkdir");
        let moved = p.resolve(Some(&s), Some(SandboxMode::WorkspaceWrite)).policy.extra_roots;
        assert_eq!(moved, [crate::moved_root(&d.join("cache")), d.join("real/second")]);
    }

    #[test]
    fn the_network_axis_is_parsed_resolved_and_described() {
        let config = |network: Option<&str>, hosts: &[&str]| SandboxPolicyConfig {
            network: network.map(str::to_owned),
            allow_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            ..SandboxPolicyConfig::default()
        };
        assert_eq!(
            config(Some("block"), &[]).checked().unwrap_err(),
            "sandbox-policy: network must be one of \"allow\", \"deny\", \"ask\" (got \"block\")"
        );
        assert_eq!(
            config(Some("deny"), &["a:0"]).checked().unwrap_err(),
            "sandbox-policy: allowHosts: network pattern \"a:0\": the port must be 1-65535"
        );
        let default = LocalSandboxPolicy::new(&config(None, &[])).expect("ok");
        assert_eq!(default.network_mode(), NetworkMode::Allow);
        assert_eq!(default.resolve(None, None).policy.network, NetworkPolicy::default());
        assert_eq!(network_context_text(&NetworkPolicy::default()), None, "allow adds nothing to the prompt");
        let deny =
            LocalSandboxPolicy::new(&config(Some("deny"), &["*.github.com", "localhost:8080"])).expect("ok");
        assert_eq!(deny.network_mode(), NetworkMode::Deny);
        let network = deny.resolve(None, None).policy.network;
        assert_eq!(network.allow.len(), 2);
        let text = network_context_text(&network).expect("a context");
        assert!(text.starts_with("Current DSH network policy: deny. Sandboxed commands can reach only listed hosts; the listed hosts are *.github.com, localhost:8080."), "{text}");
        let ask = network_context_text(&NetworkPolicy { mode: NetworkMode::Ask, allow: vec![] })
            .expect("a context");
        assert!(ask.contains("no host is listed") && ask.contains("asks the user once per call"), "{ask}");
    }

    #[test]
    fn credentials_are_checked_read_and_described_by_name_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, "file-secret\n").expect("write the token");
        let binding = |name: &str, hosts: &[&str], file: Option<&Path>| CredentialConfig {
            name: name.to_owned(),
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            headers: vec!["X-Api-Key".to_owned()],
            file: file.map(|f| f.display().to_string()),
        };
        let config = |network: &str, credentials: Vec<CredentialConfig>| SandboxPolicyConfig {
            network: Some(network.to_owned()),
            credentials,
            ..SandboxPolicyConfig::default()
        };
        let allow = config("allow", vec![binding("TOKEN", &["api.example.com"], Some(&file))]);
        assert!(allow.checked().unwrap_err().contains("credentials need network \"deny\" or \"ask\""));
        let nameless = config("deny", vec![binding("1BAD", &["a.example"], Some(&file))]);
        assert_eq!(
            nameless.checked().unwrap_err(),
            "sandbox-policy: credentials: \"1BAD\" is not a variable name"
        );
        let hostless = config("deny", vec![binding("TOKEN", &[], Some(&file))]);
        assert_eq!(hostless.checked().unwrap_err(), "sandbox-policy: credentials: TOKEN is bound to no host");
        let missing = config("deny", vec![binding("DSH_TEST_NO_SUCH_VARIABLE", &["a.example"], None)]);
        assert_eq!(
            missing.checked().unwrap_err(),
            "sandbox-policy: credentials: the harness's environment has no DSH_TEST_NO_SUCH_VARIABLE"
        );
        let twice = config(
            "deny",
            vec![
                binding("TOKEN", &["a.example"], Some(&file)),
                binding("TOKEN", &["b.example"], Some(&file)),
            ],
        );
        assert_eq!(twice.checked().unwrap_err(), "sandbox-policy: credentials: TOKEN is bound twice");
        let settings =
            config("ask", vec![binding("TOKEN", &["api.example.com", "*.example.org:8443"], Some(&file))])
                .checked()
                .expect("ok");
        let credentials = settings.credentials.expect("credentials");
        let bound = &credentials.bindings[0];
        assert_eq!(bound.expose(), b"file-secret", "the final line ending is not part of the value");
        assert!(bound.binds("API.example.com", 443) && bound.binds("a.example.org", 8443));
        assert!(!bound.binds("a.example.org", 443) && !bound.binds("example.com", 443));
        assert!(!format!("{credentials:?}").contains("file-secret"));
        let text = credentials_context_text(&credentials);
        assert!(text.starts_with("Bound credentials: TOKEN (api.example.com, *.example.org:8443). In sandboxed commands each of these variables holds a placeholder"), "{text}");
        assert!(!text.contains("file-secret"));
        let service = LocalSandboxPolicy::with_settings(
            &config("deny", vec![binding("TOKEN", &["a.example"], Some(&file))]).checked().expect("ok"),
        );
        assert!(service.credentials().is_some());
        assert!(
            LocalSandboxPolicy::new(&SandboxPolicyConfig::default()).expect("ok").credentials().is_none()
        );
    }
}
