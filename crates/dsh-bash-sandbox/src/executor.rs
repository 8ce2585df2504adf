//! Foreground and background runs under a sandbox provider: `danger-full-access` runs
//! unconfined; any other mode runs the provider's confined argv, and a runner failure becomes
//! a sandbox-unavailable error before denial is classified.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use dsh_netproxy::{CallGuard, CredentialVault, NetworkGate};

use dsh_bash_local::{ExecError, LocalBashExecutor, SettleFacts, bash_argv, shell_spawn_error};
use dsh_sandbox::{
    ConfinedCommand, NetworkFacts, ProxyListener, Quarantined, SandboxExecutionPolicy, SandboxMode,
    SandboxPolicyService, SandboxProvider, SandboxUnavailableError, Snapshot, SpawnFailure, SpawnStage,
    Surfaces, classify_runner_failure, is_runner_spawn_failure, matches_signature,
};
use dsh_shell::{
    ShellError, ShellExecRequest, ShellExecSpec, ShellExecutor, ShellProcess, ShellRunResult,
    ShellSandboxInfo,
};
use dsh_subprocess::OsSpawnError;

/// The local executor wrapped by a sandbox provider.
pub struct SandboxBashExecutor {
    local: LocalBashExecutor,
    provider: Arc<dyn SandboxProvider>,
    policy: Arc<dyn SandboxPolicyService>,
    /// Whether confined commands go without the harness's ssh agent (read once: the
    /// harness's environment does not change).
    withhold_agent: bool,
    /// The proxy served for each live network namespace, and its gate.
    proxies: parking_lot::Mutex<Vec<(Weak<ProxyListener>, Arc<NetworkGate>)>>,
    /// The pinned auto-run surfaces of each set of writable roots (shared by the sessions
    /// that write there, so a change one of them quarantined is never put back from another's
    /// older pin).
    surfaces: parking_lot::Mutex<HashMap<Vec<PathBuf>, Arc<parking_lot::Mutex<Watch>>>>,
    /// The bound credentials of each session (by session id; `None`: the calls without one).
    credentials: parking_lot::Mutex<HashMap<Option<String>, Arc<SessionCredentials>>>,
    /// How many confined commands (calls and background jobs, every mode) of each session run.
    activity: Arc<Activity>,
}

/// How many confined commands of each session run now (by session id).
type Activity = parking_lot::Mutex<HashMap<Option<String>, usize>>;

/// One confined command of a session, counted while it runs. When the session's last one
/// ends, the provider ends what its commands left behind ([`SandboxProvider::end_strays`]),
/// before any other confined command starts (the count's lock is held meanwhile) and before
/// the auto-run surfaces are checked: a process that left its call cannot change them later,
/// while no confined command is known to write there.
struct SessionActive {
    activity: Arc<Activity>,
    session: Option<String>,
    provider: Arc<dyn SandboxProvider>,
}

impl SessionActive {
    fn begin(activity: &Arc<Activity>, session: Option<&str>, provider: &Arc<dyn SandboxProvider>) -> Self {
        *activity.lock().entry(session.map(str::to_owned)).or_default() += 1;
        Self {
            activity: Arc::clone(activity),
            session: session.map(str::to_owned),
            provider: Arc::clone(provider),
        }
    }
}

impl Drop for SessionActive {
    fn drop(&mut self) {
        let mut all = self.activity.lock();
        let count = all.entry(self.session.clone()).or_default();
        *count = count.saturating_sub(1);
        if *count == 0 {
            all.remove(&self.session);
            if !self.provider.end_strays(self.session.as_deref()) {
                tracing::warn!(
                    session = self.session.as_deref().unwrap_or("-"),
                    "processes left by the session's confined commands did not end"
                );
            }
        }
    }
}

/// A session's bound credentials: its vault (placeholders, certificate authority) and the
/// trust bundle its confined commands read.
struct SessionCredentials {
    vault: Arc<CredentialVault>,
    /// `<dir>/trust.pem`: the upstream trust store and the session's authority.
    bundle: PathBuf,
    /// The directory of the bundle, removed with the executor.
    _dir: tempfile::TempDir,
}

/// The variables of the tools confined commands run that name a file of trusted
/// certificate authorities (OpenSSL and curl, Python's `requests`, Node, git).
const TRUST_VARIABLES: [&str; 5] =
    ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"];

/// The auto-run surfaces of a set of writable roots: what was pinned, and how many confined
/// commands (calls and background jobs, of any session) write there now.
struct Watch {
    surfaces: Surfaces,
    pinned: Snapshot,
    running: usize,
}

/// The quarantine directory of every session: `<DSH_HOME>/quarantine` (denied to confined
/// commands like the session logs).
fn quarantine_home() -> PathBuf {
    let dsh_home = std::env::var("DSH_HOME").ok();
    dsh_core::home::resolve_dsh_home(None, dsh_home.as_deref()).join("quarantine")
}

/// Creates `dir` (and its parents) readable by the user alone.
fn private_dir(dir: &Path) {
    use std::os::unix::fs::DirBuilderExt;
    if let Err(e) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot create the quarantine directory");
    }
}

/// A confined command is running: the surfaces are checked when it ends, and what changed
/// goes to its session's quarantine directory (the count of running commands goes down
/// however it is dropped).
struct Running {
    /// The session's count of running confined commands; dropped first when the command ends.
    active: Option<SessionActive>,
    watch: Option<Arc<parking_lot::Mutex<Watch>>>,
    /// `<DSH_HOME>/quarantine/<session>`.
    dir: PathBuf,
}

impl Running {
    /// The command ended: quarantine what changed, and say so on stderr.
    fn end(mut self) -> Vec<Quarantined> {
        drop(self.active.take());
        let Some(watch) = self.watch.take() else { return Vec::new() };
        let mut watch = watch.lock();
        watch.running = watch.running.saturating_sub(1);
        watch.quarantine_changes(&self.dir)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.active.take());
        if let Some(watch) = self.watch.take() {
            let mut watch = watch.lock();
            watch.running = watch.running.saturating_sub(1);
        }
    }
}

impl Watch {
    /// Moves every changed surface into `dir`, pins what is left, and says so on the
    /// harness's stderr.
    fn quarantine_changes(&mut self, dir: &Path) -> Vec<Quarantined> {
        let Watch { surfaces, pinned, .. } = self;
        let mut quarantined = surfaces.restore_git_dirs(pinned, dir);
        let changes = surfaces.check(pinned);
        if changes.is_empty() && quarantined.is_empty() {
            return Vec::new();
        }
        private_dir(dir);
        quarantined.extend(surfaces.quarantine(changes.clone(), dir));
        surfaces.accept(pinned, &changes);
        surfaces.pin_git_dirs(pinned);
        for q in &quarantined {
            eprintln!("dsh-bash: {}", q.line());
        }
        quarantined
    }
}

/// The proxy variables a confined command gets when its namespace has a proxy (both cases:
/// programs read one or the other).
const PROXY_VARIABLES: [&str; 6] =
    ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"];
/// Cleared, so that no inherited exception sends a destination around the proxy.
const NO_PROXY_VARIABLES: [&str; 2] = ["NO_PROXY", "no_proxy"];

impl SandboxBashExecutor {
    /// Wraps `local` so its commands are confined by `provider` under the modes `policy`
    /// resolves; each session's confined commands see its own spill files read-only (see
    /// [`SandboxBashExecutor::share_spill_dir`]).
    pub fn new(
        local: LocalBashExecutor,
        provider: Arc<dyn SandboxProvider>,
        policy: Arc<dyn SandboxPolicyService>,
    ) -> Self {
        // Made now, so every confined command's world denies it (a missing path is not).
        private_dir(&quarantine_home());
        Self {
            local,
            provider,
            policy,
            withhold_agent: agent_socket_withheld(),
            proxies: parking_lot::Mutex::new(Vec::new()),
            surfaces: parking_lot::Mutex::new(HashMap::new()),
            credentials: parking_lot::Mutex::new(HashMap::new()),
            activity: Arc::new(parking_lot::Mutex::new(HashMap::new())),
        }
    }

    /// The writable roots of a policy: the workspace root, then the further roots.
    fn roots_of(policy: &SandboxExecutionPolicy) -> Vec<PathBuf> {
        let mut roots = vec![policy.workspace_root.clone()];
        roots.extend(policy.extra_roots.iter().cloned());
        roots
    }

    /// Before a confined command: pins the auto-run surfaces of its writable roots at the
    /// first one there; else a change seen now was made while no confined command wrote
    /// there (the user's own), so it is pinned, or, while one runs (a background job, a
    /// concurrent call), quarantined into this command's session's directory. A `read-only`
    /// command writes no root: it is not watched.
    fn surfaces_before(&self, policy: &SandboxExecutionPolicy) -> (Running, Vec<Quarantined>) {
        let dir =
            quarantine_home().join(dsh_sandbox::surfaces::session_dir_name(policy.session_id.as_deref()));
        let active = Some(SessionActive::begin(&self.activity, policy.session_id.as_deref(), &self.provider));
        if policy.mode != SandboxMode::WorkspaceWrite {
            return (Running { active, watch: None, dir }, Vec::new());
        }
        let roots = Self::roots_of(policy);
        let (watch, fresh) = {
            let mut all = self.surfaces.lock();
            match all.get(&roots) {
                Some(watch) => (Arc::clone(watch), false),
                None => {
                    let surfaces = Surfaces::new(&roots, Some(&dsh_core::home::user_home()));
                    let pinned = surfaces.pin();
                    let watch = Arc::new(parking_lot::Mutex::new(Watch { surfaces, pinned, running: 0 }));
                    all.insert(roots, Arc::clone(&watch));
                    (watch, true)
                }
            }
        };
        let quarantined = {
            let mut guard = watch.lock();
            let quarantined = if fresh {
                Vec::new()
            } else if guard.running > 0 {
                guard.quarantine_changes(&dir)
            } else {
                let Watch { surfaces, pinned, .. } = &mut *guard;
                let changes = surfaces.check(pinned);
                surfaces.accept(pinned, &changes);
                surfaces.pin_git_dirs(pinned);
                Vec::new()
            };
            guard.running += 1;
            quarantined
        };
        (Running { active, watch: Some(watch), dir }, quarantined)
    }

    /// After an unconfined command (`danger-full-access`, or an approved escalation): what it
    /// changed is pinned as it is, unless a confined command writes there meanwhile (then
    /// that command's end judges every change).
    fn surfaces_repin(&self, policy: &SandboxExecutionPolicy) {
        let existing = self.surfaces.lock().get(&Self::roots_of(policy)).cloned();
        if let Some(watch) = existing {
            let mut watch = watch.lock();
            if watch.running == 0 {
                watch.pinned = watch.surfaces.pin();
            }
        }
    }

    /// The bound credentials of `policy`'s session, made on first sight (before its world is
    /// built: the trust bundle's directory is shared with that session's commands only). A
    /// vault that cannot be made runs nothing: the command would otherwise go without its
    /// placeholders.
    fn session_credentials(
        &self,
        policy: &SandboxExecutionPolicy,
    ) -> Result<Option<Arc<SessionCredentials>>, ShellError> {
        if !policy.network.mode.isolates() {
            return Ok(None);
        }
        let Some(credentials) = self.policy.credentials() else { return Ok(None) };
        let mut all = self.credentials.lock();
        if let Some(found) = all.get(&policy.session_id) {
            return Ok(Some(Arc::clone(found)));
        }
        let fail = |why: String| ShellError::Other(format!("cannot set up the bound credentials: {why}"));
        let vault = CredentialVault::new(&credentials).map_err(|e| fail(e.to_string()))?;
        let dir = tempfile::Builder::new()
            .prefix("dsh-credentials-")
            .tempdir()
            .map_err(|e| fail(format!("cannot make a directory for the trust bundle: {e}")))?;
        let bundle = dir.path().join("trust.pem");
        std::fs::write(&bundle, vault.trust_bundle())
            .map_err(|e| fail(format!("cannot write {}: {e}", bundle.display())))?;
        // Commands of the session read it wherever their world hides the directory.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755));
        let _ = std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o644));
        self.provider.share_read_only_with_session(policy.session_id.as_deref(), dir.path());
        // A bound host that echoes a request back shows the value: redacted like a secret.
        for binding in vault.bindings() {
            if let Err(e) = self.local.service().redact_also(&binding.name, binding.expose()) {
                return Err(fail(format!("cannot redact {}: {e}", binding.name)));
            }
        }
        let session = Arc::new(SessionCredentials { vault: Arc::new(vault), bundle, _dir: dir });
        all.insert(policy.session_id.clone(), Arc::clone(&session));
        Ok(Some(session))
    }

    /// The gate of `proxy`'s namespace, serving it on first sight.
    fn gate_for(
        &self,
        proxy: &Arc<ProxyListener>,
        policy: &SandboxExecutionPolicy,
        credentials: Option<&SessionCredentials>,
    ) -> Option<Arc<NetworkGate>> {
        let mut proxies = self.proxies.lock();
        proxies.retain(|(listener, _)| listener.strong_count() > 0);
        if let Some((_, gate)) =
            proxies.iter().find(|(l, _)| l.upgrade().is_some_and(|l| Arc::ptr_eq(&l, proxy)))
        {
            return Some(Arc::clone(gate));
        }
        let vault = credentials.map(|c| Arc::clone(&c.vault));
        let gate = NetworkGate::with_credentials(policy.network.clone(), vault);
        if let Err(e) = dsh_netproxy::serve(proxy, Arc::clone(&gate)) {
            tracing::warn!(error = %e, "cannot serve the network proxy; confined commands reach no host");
            return None;
        }
        proxies.push((Arc::downgrade(proxy), Arc::clone(&gate)));
        Some(gate)
    }

    /// Registers a call with its namespace's proxy and points its proxy variables there.
    fn enter_network(
        &self,
        confined: &ConfinedCommand,
        policy: &SandboxExecutionPolicy,
        spec: &mut ShellExecSpec,
        can_ask: bool,
        credentials: Option<&SessionCredentials>,
    ) -> Option<CallGuard> {
        if !policy.network.mode.isolates() {
            return None;
        }
        let proxy = confined.proxy.as_ref()?;
        let gate = self.gate_for(proxy, policy, credentials)?;
        let env = spec.dsh_env.get_or_insert_with(Default::default);
        if let Some(credentials) = credentials {
            credential_env(env, credentials);
        }
        for name in PROXY_VARIABLES {
            env.insert(name.to_owned(), proxy.url());
        }
        for name in NO_PROXY_VARIABLES {
            env.insert(name.to_owned(), String::new());
        }
        let approver =
            can_ask.then(|| spec.network_approver.as_ref().map(|slot| Arc::clone(&slot.0))).flatten();
        Some(gate.enter(approver))
    }

    /// The policy a `workspace-write` command is confined under: its own with the provider's
    /// toolchain cache root as a further writable root, made if missing; the command's
    /// environment points its tools there ([`dsh_sandbox::ToolchainCaches`]), unless its
    /// request sets a variable itself. Any other mode, a provider without caches, or a root
    /// that cannot be made (said on stderr, the command then runs without): the policy as is.
    fn with_caches(
        &self,
        policy: &SandboxExecutionPolicy,
        spec: &mut ShellExecSpec,
    ) -> SandboxExecutionPolicy {
        let mut policy = policy.clone();
        if policy.mode != SandboxMode::WorkspaceWrite {
            return policy;
        }
        let Some(caches) = self.provider.toolchain_caches() else { return policy };
        let root = match caches.prepare() {
            Ok(root) => root,
            Err(e) => {
                tracing::warn!(root = %caches.root().display(), error = %e, "cannot make the sandbox's toolchain cache root");
                return policy;
            }
        };
        let env = spec.env.get_or_insert_with(Default::default);
        for (name, value) in dsh_sandbox::ToolchainCaches::env(&root) {
            env.entry(name).or_insert(value);
        }
        if !policy.extra_roots.contains(&root) {
            policy.extra_roots.push(root);
        }
        policy
    }

    /// Spill files are written by the harness and named in results: a session's later
    /// confined commands read them at that path, even where their world hides its directory,
    /// and no other session's commands can. Each session (and the calls without one) spills
    /// into a directory of its own ([`dsh_bash_local::spill_owner`]), made now and shared
    /// read-only with that session's world only, before the world is built. A directory that
    /// cannot be made is not shared: the spill then fails with its own reason.
    fn share_spill_dir(&self, spec: &mut ShellExecSpec, policy: &SandboxExecutionPolicy) {
        spec.sandbox_policy = Some(policy.clone());
        let Some(owner) = dsh_bash_local::spill_owner(spec) else { return };
        if let Ok(dir) = self.local.service().owned_spill_dir(&owner) {
            self.provider.share_read_only_with_session(policy.session_id.as_deref(), &dir);
        }
    }

    /// The spec a confined command runs with: `DSH_SANDBOX` names its mode, `TMPDIR` its
    /// private `/tmp`, and the ssh agent is withheld (see [`withhold_agent_socket`]).
    fn confined_spec(&self, mut spec: ShellExecSpec, mode: SandboxMode) -> ShellExecSpec {
        withhold_agent_socket(&mut spec, self.withhold_agent);
        let env = spec.dsh_env.get_or_insert_with(Default::default);
        env.insert("DSH_SANDBOX".to_owned(), mode.as_str().to_owned());
        env.insert("TMPDIR".to_owned(), "/tmp".to_owned());
        spec
    }

    /// A session whose workspace root moved or was replaced since the session started runs
    /// nothing more: the policy service resolved it to a root that cannot exist.
    fn refuse_moved_root(policy: &SandboxExecutionPolicy) -> Result<(), ShellError> {
        match dsh_sandbox::pinned_root_of_moved(&policy.workspace_root) {
            Some(pinned) => Err(ShellError::Other(format!(
                "the session's workspace root {} was moved or replaced since the session started; this session runs no more commands (start a new session)",
                pinned.display()
            ))),
            None => Ok(()),
        }
    }

    /// The policy a resolved spec runs under (resolve always fills it).
    fn policy_of(&self, spec: &ShellExecSpec) -> SandboxExecutionPolicy {
        spec.sandbox_policy.clone().unwrap_or_else(|| self.policy.resolve(None, None).policy)
    }
}

/// The variables a confined command gets for the session's bound credentials: each secret's
/// placeholder under its name, the trust bundle under every variable its tools read, and a
/// git credential helper that answers the placeholder as the password for each bound host
/// (`GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`).
fn credential_env(env: &mut std::collections::BTreeMap<String, String>, credentials: &SessionCredentials) {
    let bundle = credentials.bundle.display().to_string();
    for name in TRUST_VARIABLES {
        env.insert(name.to_owned(), bundle.clone());
    }
    let mut git = Vec::new();
    for (binding, (name, placeholder)) in credentials.vault.bindings().zip(credentials.vault.placeholders()) {
        env.insert(name.to_owned(), placeholder.to_owned());
        let helper = format!(
            "!f() {{ test \"$1\" = get && printf 'username=x-access-token\\npassword=%s\\n' '{placeholder}'; }}; f"
        );
        for host in &binding.hosts {
            let spelled = match &host.host {
                dsh_sandbox::HostMatch::Exact(h) if h.contains(':') => format!("[{h}]"),
                dsh_sandbox::HostMatch::Exact(h) => h.clone(),
                dsh_sandbox::HostMatch::Suffix(s) => format!("*.{s}"),
            };
            let url = match host.port {
                Some(port) => format!("https://{spelled}:{port}"),
                None => format!("https://{spelled}"),
            };
            git.push((format!("credential.{url}.helper"), helper.clone()));
        }
    }
    env.insert("GIT_CONFIG_COUNT".to_owned(), git.len().to_string());
    for (i, (key, value)) in git.into_iter().enumerate() {
        env.insert(format!("GIT_CONFIG_KEY_{i}"), key);
        env.insert(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
}

/// Set to `1` in the harness's environment to let confined commands keep `SSH_AUTH_SOCK`.
pub const KEEP_SSH_AUTH_SOCK: &str = "DSH_KEEP_SSH_AUTH_SOCK";

/// Withholds the ssh agent from a confined command: the agent socket is the user's keys, and
/// a confinement that leaves the socket reachable would otherwise hand them over. The spawn
/// seam carries values only, so the variable is set empty, which ssh reads as "no agent".
/// A request that sets `SSH_AUTH_SOCK` itself keeps its value. `withhold` is false when the
/// harness has no agent, or runs with `DSH_KEEP_SSH_AUTH_SOCK=1`.
fn withhold_agent_socket(spec: &mut ShellExecSpec, withhold: bool) {
    const NAME: &str = "SSH_AUTH_SOCK";
    let requested = [&spec.env, &spec.dsh_env].into_iter().flatten().any(|env| env.contains_key(NAME));
    if withhold && !requested {
        spec.env.get_or_insert_with(Default::default).insert(NAME.to_owned(), String::new());
    }
}

/// The refused destinations of a call, as its result reports them: passed through the same
/// redactor as the output (a host name can carry a secret a command put there), matched
/// without regard to case since the proxy reports names lower-cased. A redactor that cannot
/// be built withholds the names rather than show them.
fn redact_destinations(service: &dsh_subprocess::SubprocessService, denied: Vec<String>) -> Vec<String> {
    let Some(redactor) = service.redactor().filter(|_| !denied.is_empty()) else {
        return denied;
    };
    denied
        .into_iter()
        .map(|hp| match redactor.redact_ignoring_ascii_case(&hp) {
            Ok(text) => text.into_owned(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot redact a refused destination; it is withheld");
                "[redacted]".to_owned()
            }
        })
        .collect()
}

/// Appends the decisions of one confined command to the audit log ([`dsh_core::audit`]): a
/// file access the sandbox denied (with the path stderr names, when it names one), each
/// destination the network policy refused, and each auto-run file quarantined. The command
/// is named as the model wrote it; its output never is.
fn audit_call(
    policy: &SandboxExecutionPolicy,
    command: &str,
    denied: bool,
    stderr: &str,
    hosts: &[String],
    quarantined: &[Quarantined],
) {
    use serde_json::{Map, json};
    let session = policy.session_id.as_deref();
    let base = || {
        let mut what = Map::new();
        what.insert("command".into(), json!(command));
        what.insert("mode".into(), json!(policy.mode.as_str()));
        what
    };
    if denied {
        let mut what = base();
        if let Some(refused) = dsh_sandbox::refused_path(stderr) {
            what.insert("path".into(), json!(refused.path));
            what.insert("access".into(), json!(if refused.write { "write" } else { "read" }));
        }
        dsh_core::audit::record("denial", session, what, "denied");
    }
    for host in hosts {
        let mut what = base();
        what.insert("host".into(), json!(host));
        what.insert("network".into(), json!(policy.network.mode.as_str()));
        dsh_core::audit::record("network", session, what, "denied");
    }
    for q in quarantined {
        let mut what = base();
        what.insert("path".into(), json!(q.path));
        what.insert("found".into(), json!(q.what));
        what.insert("movedTo".into(), json!(q.moved_to));
        dsh_core::audit::record("quarantine", session, what, "quarantined");
    }
}

/// Whether confined commands go without the harness's ssh agent (see [`withhold_agent_socket`]).
fn agent_socket_withheld() -> bool {
    std::env::var_os("SSH_AUTH_SOCK").is_some()
        && std::env::var_os(KEEP_SSH_AUTH_SOCK).is_none_or(|keep| keep != "1")
}

/// The runner-failure detail of a spawn failure, when the runner itself failed: the
/// in-child confinement refused, or the exec of the known runner program failed with
/// `ENOENT`/`EACCES` while the workdir is usable. A failing `chdir` is never the runner.
fn runner_spawn_failure(confined: &ConfinedCommand, error: &OsSpawnError, workdir: &Path) -> Option<String> {
    let stage = match error.stage {
        dsh_subprocess::SpawnStage::Cwd => SpawnStage::Chdir,
        dsh_subprocess::SpawnStage::PreExec => SpawnStage::Confinement,
        dsh_subprocess::SpawnStage::Exec => SpawnStage::Exec,
    };
    let errno = error.code();
    let failure = SpawnFailure { errno: &errno, program: Some(&error.program), stage };
    if !is_runner_spawn_failure(&failure, confined.runner.as_deref(), workdir) {
        return None;
    }
    match stage {
        SpawnStage::Confinement => Some(confined.confinement_failure().unwrap_or_else(|| error.to_string())),
        _ => Some(error.to_string()),
    }
}

/// Sandbox facts of a settled confined process (per process, never "latest wrap").
fn settle_facts(
    confined: &ConfinedCommand,
    mode: SandboxMode,
    workdir: &Path,
    facts: &SettleFacts,
) -> ShellSandboxInfo {
    let runner_failed = match (&facts.spawn_error, facts.spawn_failed) {
        (Some(error), true) => runner_spawn_failure(confined, error, workdir).is_some(),
        (_, true) => false,
        (_, false) => {
            classify_runner_failure(facts.exit_code, &facts.stderr_tail, &confined.runner_failure_rules)
                .is_some()
        }
    };
    let denied = !runner_failed
        && !facts.spawn_failed
        && matches_signature(facts.exit_code, &facts.stderr_tail, &confined.denial_signatures);
    ShellSandboxInfo {
        mode,
        denied,
        enforcement: Some(confined.enforcement),
        runner_failed: runner_failed.then_some(true),
        network_denied: Vec::new(),
        quarantined: Vec::new(),
    }
}

#[async_trait::async_trait]
impl ShellExecutor for SandboxBashExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        Some(self.policy.default_mode())
    }

    fn reports_out_of_memory(&self) -> bool {
        self.local.reports_out_of_memory()
    }

    fn reports_usage(&self) -> bool {
        self.local.reports_usage()
    }

    fn resolve(&self, request: ShellExecRequest) -> Result<ShellExecSpec, ShellError> {
        let explicit = request.sandbox_policy.clone();
        let mut spec = self.local.resolve(request)?;
        spec.sandbox_policy = Some(explicit.unwrap_or_else(|| self.policy.resolve(None, None).policy));
        Ok(spec)
    }

    async fn run(&self, spec: ShellExecSpec) -> Result<ShellRunResult, ShellError> {
        let policy = self.policy_of(&spec);
        Self::refuse_moved_root(&policy)?;
        let mode = policy.mode;
        if mode == SandboxMode::DangerFullAccess {
            let outcome = self.local.run(spec).await;
            self.surfaces_repin(&policy);
            let mut result = outcome?;
            result.sandbox = Some(ShellSandboxInfo {
                mode,
                denied: false,
                enforcement: None,
                runner_failed: None,
                network_denied: Vec::new(),
                quarantined: Vec::new(),
            });
            return Ok(result);
        }
        let mut spec = spec;
        self.share_spill_dir(&mut spec, &policy);
        let credentials = self.session_credentials(&policy)?;
        let confining = self.with_caches(&policy, &mut spec);
        let confined = self.provider.confine(&bash_argv(&spec.command), &confining)?;
        let mut spec = self.confined_spec(spec, mode);
        let network = self.enter_network(&confined, &policy, &mut spec, true, credentials.as_deref());
        let (running, mut quarantined) = self.surfaces_before(&policy);
        let outcome = self.local.run_argv(&spec, confined.argv.clone(), confined.pre_exec_hook()).await;
        quarantined.extend(running.end());
        let (denied, added) = network.map(CallGuard::finish_with_credentials).unwrap_or_default();
        let denied_hosts = redact_destinations(self.local.service(), denied);
        let added = redact_destinations(self.local.service(), added);
        let mut result = match outcome {
            Ok(result) => result,
            Err(ExecError::Spawn(error)) => {
                if let Some(signal) = spec.signal.as_ref().filter(|s| s.is_aborted()) {
                    let reason =
                        signal.reason().map(|r| r.message.clone()).unwrap_or_else(|| "aborted".into());
                    return Err(ShellError::AbortedBeforeSpawn(reason));
                }
                return Err(match runner_spawn_failure(&confined, &error, &spec.workdir) {
                    Some(detail) => SandboxUnavailableError::with_detail(mode, detail).into(),
                    None => shell_spawn_error(&error),
                });
            }
            Err(ExecError::Shell(error)) => return Err(error),
        };
        if let Some(line) =
            classify_runner_failure(result.exit_code, &result.stderr.text, &confined.runner_failure_rules)
        {
            return Err(SandboxUnavailableError::with_detail(mode, line).into());
        }
        let denied = matches_signature(result.exit_code, &result.stderr.text, &confined.denial_signatures);
        audit_call(&policy, &spec.command, denied, &result.stderr.text, &denied_hosts, &quarantined);
        result.sandbox = Some(ShellSandboxInfo {
            mode,
            denied,
            enforcement: Some(confined.enforcement),
            runner_failed: None,
            network_denied: Vec::new(),
            quarantined,
        });
        if !denied_hosts.is_empty() || !added.is_empty() {
            result.network =
                Some(NetworkFacts { policy: policy.network.mode, denied: denied_hosts, credentials: added });
        }
        Ok(result)
    }

    fn start(&self, spec: ShellExecSpec) -> Result<Arc<dyn ShellProcess>, ShellError> {
        let policy = self.policy_of(&spec);
        Self::refuse_moved_root(&policy)?;
        let mode = policy.mode;
        if mode == SandboxMode::DangerFullAccess {
            // An unconfined job's changes are the user's (it was approved or is the mode);
            // they are pinned at the next confined call of the session, before it runs.
            return self.local.start(spec);
        }
        let mut spec = spec;
        self.share_spill_dir(&mut spec, &policy);
        let credentials = self.session_credentials(&policy)?;
        let confining = self.with_caches(&policy, &mut spec);
        let confined = self.provider.confine(&bash_argv(&spec.command), &confining)?;
        let mut spec = self.confined_spec(spec, mode);
        // A background job cannot ask: its call has returned by the time it connects.
        let network = self.enter_network(&confined, &policy, &mut spec, false, credentials.as_deref());
        let workdir = spec.workdir.clone();
        let argv = confined.argv.clone();
        let hook = confined.pre_exec_hook();
        let service = Arc::clone(self.local.service());
        let (running, early) = self.surfaces_before(&policy);
        let command = spec.command.clone();
        let on_settle: dsh_bash_local::SettleHook = Box::new(move |facts: &SettleFacts| {
            let mut info = settle_facts(&confined, mode, &workdir, facts);
            info.network_denied =
                redact_destinations(&service, network.map(CallGuard::finish).unwrap_or_default());
            info.quarantined = early;
            info.quarantined.extend(running.end());
            audit_call(
                &policy,
                &command,
                info.denied,
                &facts.stderr_tail,
                &info.network_denied,
                &info.quarantined,
            );
            Some(info)
        });
        let process = self.local.start_argv(&spec, argv, hook, Some(on_settle))?;
        Ok(process)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn spec(env: Option<&[(&str, &str)]>, dsh_env: Option<&[(&str, &str)]>) -> ShellExecSpec {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        ShellExecSpec {
            command: "true".into(),
            workdir: "/".into(),
            timeout: dsh_shell::ShellTimeout::from_millis(1000.0),
            stdout_max_bytes: 1000,
            signal: None,
            stdin: None,
            env: env.map(map),
            dsh_env: dsh_env.map(map),
            sandbox_policy: None,
            output_probe: None,
            network_approver: None,
            shared_file: None,
            keep_stdin: false,
            tty: false,
        }
    }

    fn sock(spec: &ShellExecSpec) -> Option<&str> {
        spec.env.as_ref().and_then(|env| env.get("SSH_AUTH_SOCK")).map(String::as_str)
    }

    #[test]
    fn the_agent_socket_is_withheld_unless_kept_or_requested() {
        let mut plain = spec(None, None);
        withhold_agent_socket(&mut plain, true);
        assert_eq!(sock(&plain), Some(""));
        let mut other = spec(Some(&[("A", "1")]), None);
        withhold_agent_socket(&mut other, true);
        assert_eq!(other.env.as_ref().map(BTreeMap::len), Some(2));
        assert_eq!(sock(&other), Some(""));
        let mut kept = spec(None, None);
        withhold_agent_socket(&mut kept, false);
        assert_eq!(kept.env, None);
        let mut requested = spec(Some(&[("SSH_AUTH_SOCK", "/mine")]), None);
        withhold_agent_socket(&mut requested, true);
        assert_eq!(sock(&requested), Some("/mine"));
        let mut managed = spec(None, Some(&[("SSH_AUTH_SOCK", "/managed")]));
        withhold_agent_socket(&mut managed, true);
        assert_eq!(managed.env, None);
    }
}
