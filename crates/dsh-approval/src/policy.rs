//! Typed, scoped grants and the policy files that hold and bound them.
//!
//! A command's approval is about a typed [`Grant`]: a network destination (`host:port`, for a
//! connection under network policy `ask`) or a command prefix at a sandbox mode (for an
//! escalation). The user answers it for a [`Scope`]: `once` (this call), `session` (not asked
//! again in this session) or `always` (saved as an `[[allow]]` rule in the user's policy file).
//!
//! Three files bound what is granted, each TOML of the same shape (see [`PolicyFile`]):
//! - the managed file (`/etc/dsh/policy.toml`, or the file `DSH_MANAGED_POLICY` names): its
//!   rules and its `grants` list bind the other two;
//! - the user's file (`<DSH_HOME>/policy.toml`), where `always` grants are saved;
//! - the project's file (`<workspace root>/.dsh-policy.toml`), which can only narrow: its
//!   `deny` rules and its `grants` list count, its `allow` rules never do.
//!
//! A `deny` rule of any file wins over every `allow` rule and grant; the lasting scopes that
//! may be granted (and that saved grants count under) are those every file's `grants` list
//! names. A managed or project file that cannot be read or parsed fails closed: no lasting
//! grant, no `allow` rule counts.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The environment variable naming the managed policy file (default [`MANAGED_POLICY_DEFAULT`]).
pub const MANAGED_POLICY_ENV: &str = "DSH_MANAGED_POLICY";
/// The managed policy file when [`MANAGED_POLICY_ENV`] is unset.
pub const MANAGED_POLICY_DEFAULT: &str = "/etc/dsh/policy.toml";
/// The name of the user's policy file, under `DSH_HOME`.
pub const USER_POLICY_FILE: &str = "policy.toml";
/// The name of the project's policy file, at the workspace root.
pub const PROJECT_POLICY_FILE: &str = ".dsh-policy.toml";

/// How long an answer's grant lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// This call only (today's one-shot approval).
    Once,
    /// The rest of this session: not asked again in it.
    Session,
    /// Saved in the user's policy file: not asked again, also after a restart.
    Always,
}

impl Scope {
    /// The wire spelling (`once`, `session`, `always`).
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
            Scope::Always => "always",
        }
    }

    /// Parses the wire spelling; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        [Scope::Once, Scope::Session, Scope::Always].into_iter().find(|scope| scope.as_str() == s)
    }
}

/// What a command's approval grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Connections to this destination (`host:port`) through the network proxy.
    Host(String),
    /// Commands starting with this prefix, run under this sandbox mode (or a narrower one).
    Command {
        /// The command's words, as the model wrote them.
        prefix: String,
        /// The sandbox mode's wire name (`workspace-write`, `danger-full-access`).
        mode: String,
    },
}

impl Grant {
    /// The grant as a short fact: `host pypi.org:443`, `command "cargo build" at workspace-write`.
    pub fn describe(&self) -> String {
        match self {
            Grant::Host(host) => format!("host {host}"),
            Grant::Command { prefix, mode } => format!("command {prefix:?} at {mode}"),
        }
    }

    fn as_rule(&self) -> Rule {
        match self {
            Grant::Host(host) => Rule { host: Some(host.clone()), command: None, mode: None },
            Grant::Command { prefix, mode } => {
                Rule { host: None, command: Some(prefix.clone()), mode: Some(mode.clone()) }
            }
        }
    }
}

/// A grant offered to the user with the lasting scopes they may pick (`once` is always
/// offered and not listed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantOffer {
    /// What the approval grants.
    pub grant: Grant,
    /// `session` and/or `always`, as the policy files allow; empty when only `once` may be given.
    pub scopes: Vec<Scope>,
}

/// One policy file's content.
///
/// ```toml
/// grants = ["session", "always"]   # the lasting scopes answers may pick (default: both)
///
/// [[allow]]
/// host = "pypi.org:443"            # a host, host:port, or *.domain
///
/// [[allow]]
/// command = "cargo build"          # a command prefix (its words)
/// mode = "workspace-write"         # the widest mode it may run under (default workspace-write)
///
/// [[deny]]
/// host = "*.example.com"
/// ```
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// The lasting scopes (`session`, `always`) answers may pick; `None`: both.
    pub grants: Option<Vec<String>>,
    /// Rules that allow without asking.
    #[serde(default)]
    pub allow: Vec<Rule>,
    /// Rules that refuse without asking.
    #[serde(default)]
    pub deny: Vec<Rule>,
}

/// One rule: exactly one of `host` or `command`, with `mode` for a command.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// `host`, `host:port` or `*.domain` (subdomains of `domain`, any port).
    pub host: Option<String>,
    /// A command prefix: the words a command starts with.
    pub command: Option<String>,
    /// For `allow`, the widest sandbox mode the command may run under (default
    /// `workspace-write`); for `deny`, the narrowest mode refused (default: every mode).
    pub mode: Option<String>,
}

impl Rule {
    fn describe(&self) -> String {
        match (&self.host, &self.command, &self.mode) {
            (Some(host), _, _) => format!("host {host}"),
            (None, Some(command), Some(mode)) => format!("command {command:?} at {mode}"),
            (None, Some(command), None) => format!("command {command:?}"),
            (None, None, _) => "(a rule naming neither host nor command)".to_owned(),
        }
    }

    fn check(&self) -> Result<(), String> {
        match (&self.host, &self.command) {
            (Some(_), Some(_)) | (None, None) => {
                return Err("a rule names exactly one of `host` or `command`".to_owned());
            }
            (Some(_), None) if self.mode.is_some() => {
                return Err("`mode` goes with `command`, not `host`".to_owned());
            }
            _ => {}
        }
        if let Some(mode) = &self.mode
            && mode_rank(mode).is_none()
        {
            return Err(format!("unknown mode {mode:?} (read-only, workspace-write or danger-full-access)"));
        }
        Ok(())
    }

    /// Whether an `allow` rule covers `grant`.
    fn allows(&self, grant: &Grant) -> bool {
        match (grant, &self.host, &self.command) {
            (Grant::Host(asked), Some(host), _) => host_matches(host, asked),
            (Grant::Command { prefix, mode }, None, Some(rule)) => {
                let widest = self.mode.as_deref().unwrap_or("workspace-write");
                rank_le(mode, widest) && allow_prefix_matches(rule, prefix)
            }
            _ => false,
        }
    }

    /// Whether a `deny` rule refuses `grant`.
    fn denies(&self, grant: &Grant) -> bool {
        match (grant, &self.host, &self.command) {
            (Grant::Host(asked), Some(host), _) => host_matches(host, asked),
            (Grant::Command { prefix, mode }, None, Some(rule)) => {
                self.mode.as_deref().is_none_or(|narrowest| rank_le(narrowest, mode))
                    && deny_prefix_matches(rule, prefix)
            }
            _ => false,
        }
    }
}

fn mode_rank(mode: &str) -> Option<u8> {
    match mode {
        "read-only" => Some(0),
        "workspace-write" => Some(1),
        "danger-full-access" => Some(2),
        _ => None,
    }
}

/// `a` is no wider than `b` (an unknown mode is wider than every mode, and no wider than none).
fn rank_le(a: &str, b: &str) -> bool {
    match (mode_rank(a), mode_rank(b)) {
        (Some(a), Some(b)) => a <= b,
        _ => false,
    }
}

/// Splits `host:port` (a bracketed IPv6 address keeps its colons).
fn split_host_port(text: &str) -> (String, Option<&str>) {
    if let Some((host, port)) = text.rsplit_once(':')
        && !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && (!host.contains(':') || host.ends_with(']'))
    {
        return (host.to_ascii_lowercase(), Some(port));
    }
    (text.to_ascii_lowercase(), None)
}

/// Whether rule `pattern` (`host`, `host:port`, `*.domain[:port]`) covers destination `asked`.
fn host_matches(pattern: &str, asked: &str) -> bool {
    let (want_host, want_port) = split_host_port(pattern.trim());
    let (host, port) = split_host_port(asked.trim());
    if want_port.is_some_and(|p| Some(p) != port) {
        return false;
    }
    match want_host.strip_prefix("*.") {
        Some(domain) => host.len() > domain.len() + 1 && host.ends_with(&format!(".{domain}")),
        None => want_host == host,
    }
}

/// Characters that join or redirect commands: a command holding any of them is covered by an
/// `allow` rule only when it is exactly the rule's text.
const SHELL_SPECIALS: &[char] = &[';', '&', '|', '<', '>', '(', ')', '$', '`', '\n', '\r', '\\', '{', '}'];

fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

fn starts_with_words(command: &str, prefix: &str) -> bool {
    let (command, prefix) = (words(command), words(prefix));
    !prefix.is_empty() && command.len() >= prefix.len() && command[..prefix.len()] == prefix[..]
}

/// An `allow` rule covers a command that is its text exactly, or that starts with its words
/// and holds no character that could join another command or redirect.
fn allow_prefix_matches(rule: &str, command: &str) -> bool {
    if command.trim() == rule.trim() {
        return true;
    }
    !command.contains(SHELL_SPECIALS) && starts_with_words(command, rule)
}

/// A `deny` rule refuses a command any of whose pieces (split at every character that can
/// start another command) starts with its words.
fn deny_prefix_matches(rule: &str, command: &str) -> bool {
    command.split(SHELL_SPECIALS).any(|piece| starts_with_words(piece, rule))
}

/// Which file a rule came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The managed (system-wide) file.
    Managed,
    /// The user's file.
    User,
    /// The project's file.
    Project,
}

impl Origin {
    /// `managed`, `user`, `project`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Managed => "managed",
            Origin::User => "user",
            Origin::Project => "project",
        }
    }
}

/// Where the three policy files are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyPaths {
    /// The managed file.
    pub managed: PathBuf,
    /// The user's file.
    pub user: PathBuf,
    /// The project's file, when there is a workspace root.
    pub project: Option<PathBuf>,
}

impl PolicyPaths {
    /// The files for a harness whose workspace root is `workspace`: the managed file from
    /// `DSH_MANAGED_POLICY` (else [`MANAGED_POLICY_DEFAULT`]), the user's under `DSH_HOME`.
    pub fn from_env(workspace: Option<&Path>) -> Self {
        let managed = std::env::var_os(MANAGED_POLICY_ENV)
            .filter(|v| !v.is_empty())
            .map(|v| dsh_core::home::absolutize(Path::new(&v)))
            .unwrap_or_else(|| PathBuf::from(MANAGED_POLICY_DEFAULT));
        let dsh_home = std::env::var("DSH_HOME").ok();
        let user = dsh_core::home::resolve_dsh_home(None, dsh_home.as_deref()).join(USER_POLICY_FILE);
        let project = workspace.map(|w| dsh_core::home::absolutize(w).join(PROJECT_POLICY_FILE));
        Self { managed, user, project }
    }
}

/// One file as read.
#[derive(Clone, Debug)]
pub struct LoadedFile {
    /// Which file.
    pub origin: Origin,
    /// Where it is.
    pub path: PathBuf,
    /// Its content; `None` when absent or broken.
    pub file: Option<PolicyFile>,
    /// Why it could not be used, when it exists but cannot be read or parsed.
    pub error: Option<String>,
}

impl LoadedFile {
    fn load(origin: Origin, path: &Path) -> Self {
        let (file, error) = match std::fs::read_to_string(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None),
            Err(e) => (None, Some(format!("cannot read it: {e}"))),
            Ok(text) => match toml::from_str::<PolicyFile>(&text) {
                Err(e) => (None, Some(format!("not a policy file: {}", e.message()))),
                Ok(file) => match check(&file) {
                    Ok(()) => (Some(file), None),
                    Err(e) => (None, Some(e)),
                },
            },
        };
        Self { origin, path: path.to_path_buf(), file, error }
    }

    /// Whether this file's failure closes every lasting grant (a managed or project file).
    fn fails_closed(&self) -> bool {
        self.error.is_some() && self.origin != Origin::User
    }

    fn grants(&self) -> Option<Vec<Scope>> {
        let names = self.file.as_ref()?.grants.as_ref()?;
        Some(names.iter().filter_map(|n| Scope::parse(n)).collect())
    }
}

fn check(file: &PolicyFile) -> Result<(), String> {
    for name in file.grants.iter().flatten() {
        if !matches!(Scope::parse(name), Some(Scope::Session | Scope::Always)) {
            return Err(format!("`grants` lists {name:?}: only \"session\" and \"always\" can be listed"));
        }
    }
    for rule in file.allow.iter().chain(&file.deny) {
        rule.check().map_err(|e| format!("{}: {e}", rule.describe()))?;
    }
    Ok(())
}

/// What the policy files decide about a grant before anyone is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ruling {
    /// A `deny` rule refuses it (the rule, as `<origin> <path>: deny <rule>`).
    Deny(String),
    /// An `allow` rule or a grant covers it (which one, likewise).
    Allow(String),
    /// Ask, offering these lasting scopes.
    Ask(Vec<Scope>),
}

/// The three policy files, read now.
#[derive(Clone, Debug)]
pub struct EffectivePolicy {
    /// Managed, user, project (when there is one), in that order.
    pub files: Vec<LoadedFile>,
}

impl EffectivePolicy {
    /// Reads the files at `paths`.
    pub fn load(paths: &PolicyPaths) -> Self {
        let mut files = vec![
            LoadedFile::load(Origin::Managed, &paths.managed),
            LoadedFile::load(Origin::User, &paths.user),
        ];
        if let Some(project) = &paths.project
            && project != &paths.user
        {
            files.push(LoadedFile::load(Origin::Project, project));
        }
        Self { files }
    }

    /// The lasting scopes every file allows (none when a managed or project file is broken).
    pub fn lasting_scopes(&self) -> Vec<Scope> {
        if self.files.iter().any(LoadedFile::fails_closed) {
            return Vec::new();
        }
        [Scope::Session, Scope::Always]
            .into_iter()
            .filter(|scope| self.files.iter().all(|f| f.grants().is_none_or(|g| g.contains(scope))))
            .collect()
    }

    /// What the files (and the session's grants, `session`) decide about `grant`.
    pub fn rule(&self, grant: &Grant, session: &[Grant]) -> Ruling {
        for loaded in &self.files {
            for rule in loaded.file.iter().flat_map(|f| &f.deny) {
                if rule.denies(grant) {
                    return Ruling::Deny(format!(
                        "{} {}: deny {}",
                        loaded.origin.as_str(),
                        loaded.path.display(),
                        rule.describe()
                    ));
                }
            }
        }
        let scopes = self.lasting_scopes();
        let closed = self.files.iter().any(LoadedFile::fails_closed);
        for loaded in &self.files {
            let counts = match loaded.origin {
                Origin::Managed => !closed,
                Origin::User => !closed && scopes.contains(&Scope::Always),
                Origin::Project => false,
            };
            if !counts {
                continue;
            }
            for rule in loaded.file.iter().flat_map(|f| &f.allow) {
                if rule.allows(grant) {
                    return Ruling::Allow(format!(
                        "{} {}: allow {}",
                        loaded.origin.as_str(),
                        loaded.path.display(),
                        rule.describe()
                    ));
                }
            }
        }
        if scopes.contains(&Scope::Session)
            && let Some(given) = session.iter().find(|given| given.as_rule().allows(grant))
        {
            return Ruling::Allow(format!("session grant: {}", given.describe()));
        }
        Ruling::Ask(scopes)
    }

    /// The effective policy as `doctor` shows it: each file and its state, the lasting scopes,
    /// and every rule with the file it came from (and whether it counts).
    pub fn report(&self) -> Vec<String> {
        let mut lines = vec!["approval policy (deny rules win; a project file only narrows):".to_owned()];
        for loaded in &self.files {
            let state = match (&loaded.file, &loaded.error) {
                (_, Some(e)) if loaded.fails_closed() => format!("unusable, {e} (no lasting grant counts)"),
                (_, Some(e)) => format!("unusable, {e} (its rules are ignored)"),
                (Some(_), None) => "read".to_owned(),
                (None, None) => "absent".to_owned(),
            };
            lines.push(format!("  {} file: {} ({state})", loaded.origin.as_str(), loaded.path.display()));
        }
        let scopes = self.lasting_scopes();
        let mut offered = vec!["once"];
        offered.extend(scopes.iter().map(|s| s.as_str()));
        let limited: Vec<String> = self
            .files
            .iter()
            .filter(|f| f.grants().is_some())
            .map(|f| format!("{} file", f.origin.as_str()))
            .collect();
        lines.push(format!(
            "  scopes offered: {}{}",
            offered.join(", "),
            if limited.is_empty() {
                String::new()
            } else {
                format!(" (limited by the {})", limited.join(", "))
            }
        ));
        let closed = self.files.iter().any(LoadedFile::fails_closed);
        let mut any = false;
        for loaded in &self.files {
            let Some(file) = &loaded.file else { continue };
            for rule in &file.deny {
                any = true;
                lines.push(format!("  deny {} (from the {} file)", rule.describe(), loaded.origin.as_str()));
            }
            for rule in &file.allow {
                any = true;
                let ignored = match loaded.origin {
                    Origin::Project => Some("ignored: a project file cannot widen"),
                    _ if closed => Some("ignored: a policy file is unusable"),
                    Origin::User if !scopes.contains(&Scope::Always) => {
                        Some("ignored: \"always\" grants are not allowed")
                    }
                    _ => None,
                };
                lines.push(format!(
                    "  allow {} (from the {} file{})",
                    rule.describe(),
                    loaded.origin.as_str(),
                    ignored.map(|i| format!("; {i}")).unwrap_or_default()
                ));
            }
        }
        if !any {
            lines.push("  no rules: every approval is asked".to_owned());
        }
        lines
    }
}

/// Appends `grant` to the user's policy file as an `[[allow]]` rule (the file and its
/// directory are made when missing, the file mode `0600`).
pub fn save_always(path: &Path, grant: &Grant) -> std::io::Result<()> {
    let quoted = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let text = match grant {
        Grant::Host(host) => format!("\n[[allow]]\nhost = {}\n", quoted(host)),
        Grant::Command { prefix, mode } => {
            format!("\n[[allow]]\ncommand = {}\nmode = {}\n", quoted(prefix), quoted(mode))
        }
    };
    dsh_core::home::append_private(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(h: &str) -> Grant {
        Grant::Host(h.to_owned())
    }

    fn command(prefix: &str, mode: &str) -> Grant {
        Grant::Command { prefix: prefix.to_owned(), mode: mode.to_owned() }
    }

    #[test]
    fn hosts_match_by_name_port_and_wildcard() {
        assert!(host_matches("pypi.org", "pypi.org:443"));
        assert!(host_matches("PyPI.org:443", "pypi.org:443"));
        assert!(!host_matches("pypi.org:80", "pypi.org:443"));
        assert!(host_matches("*.example.com", "a.b.example.com:443"));
        assert!(!host_matches("*.example.com", "example.com:443"));
        assert!(!host_matches("*.example.com", "badexample.com:443"));
        assert!(host_matches("[::1]:8080", "[::1]:8080"));
    }

    #[test]
    fn command_rules_match_prefixes_without_joined_commands() {
        let allow = Rule { command: Some("cargo build".into()), ..Rule::default() };
        assert!(allow.allows(&command("cargo build --release", "workspace-write")));
        assert!(!allow.allows(&command("cargo build; rm -rf ~", "workspace-write")));
        assert!(!allow.allows(&command("cargo build", "danger-full-access")));
        assert!(!allow.allows(&command("cargo buildx", "workspace-write")));
        let exact = Rule { command: Some("make && make install".into()), ..Rule::default() };
        assert!(exact.allows(&command("make && make install", "workspace-write")));
        let deny = Rule { command: Some("rm".into()), ..Rule::default() };
        assert!(deny.denies(&command("ls; rm -rf x", "read-only")));
        assert!(deny.denies(&command("rm x", "danger-full-access")));
        assert!(!deny.denies(&command("rmdir x", "danger-full-access")));
        let wide = Rule { command: Some("curl".into()), mode: Some("danger-full-access".into()), host: None };
        assert!(!wide.denies(&command("curl x", "workspace-write")));
        assert!(wide.denies(&command("curl x", "danger-full-access")));
    }

    fn policy(files: &[(Origin, &str)]) -> EffectivePolicy {
        EffectivePolicy {
            files: files
                .iter()
                .map(|(origin, text)| {
                    let parsed = toml::from_str::<PolicyFile>(text).map_err(|e| e.to_string());
                    let (file, error) = match parsed.and_then(|f| check(&f).map(|()| f)) {
                        Ok(f) => (Some(f), None),
                        Err(e) => (None, Some(e)),
                    };
                    LoadedFile { origin: *origin, path: PathBuf::from(origin.as_str()), file, error }
                })
                .collect(),
        }
    }

    #[test]
    fn deny_wins_and_a_project_file_only_narrows() {
        let user = "[[allow]]\nhost = \"pypi.org\"\n";
        let p = policy(&[(Origin::User, user), (Origin::Project, "[[allow]]\nhost = \"evil.test\"\n")]);
        assert_eq!(
            p.rule(&host("pypi.org:443"), &[]),
            Ruling::Allow("user user: allow host pypi.org".into())
        );
        assert_eq!(p.rule(&host("evil.test:443"), &[]), Ruling::Ask(vec![Scope::Session, Scope::Always]));
        let p = policy(&[(Origin::Managed, "[[deny]]\nhost = \"pypi.org\"\n"), (Origin::User, user)]);
        assert!(matches!(p.rule(&host("pypi.org:443"), &[]), Ruling::Deny(_)));
        let p = policy(&[(Origin::Managed, "grants = [\"session\"]\n"), (Origin::User, user)]);
        assert_eq!(p.rule(&host("pypi.org:443"), &[]), Ruling::Ask(vec![Scope::Session]));
        let p = policy(&[(Origin::Project, "grants = []\n")]);
        assert_eq!(p.rule(&host("pypi.org:443"), &[host("pypi.org:443")]), Ruling::Ask(vec![]));
        let p = policy(&[(Origin::Managed, "grants = [\"bogus\"]\n"), (Origin::User, user)]);
        assert_eq!(p.rule(&host("pypi.org:443"), &[]), Ruling::Ask(vec![]));
        let p = policy(&[]);
        assert_eq!(
            p.rule(&host("pypi.org:443"), &[host("pypi.org:443")]),
            Ruling::Allow("session grant: host pypi.org:443".into())
        );
    }

    #[test]
    fn a_saved_grant_reads_back_as_an_allow_rule() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/policy.toml");
        save_always(&path, &command("echo \"hi\"\\", "workspace-write")).expect("save");
        save_always(&path, &host("pypi.org:443")).expect("save");
        let loaded = LoadedFile::load(Origin::User, &path);
        let file = loaded.file.expect("parsed");
        assert_eq!(file.allow[0].command.as_deref(), Some("echo \"hi\"\\"));
        assert_eq!(file.allow[1].host.as_deref(), Some("pypi.org:443"));
    }
}
