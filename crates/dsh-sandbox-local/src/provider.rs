//! The local provider: runner selection (lazy, cached), argv wrapping and self-description.

use std::sync::{Arc, OnceLock};

use dsh_sandbox::{
    ConfinedCommand, ProviderReport, RunnerFailureRule, RunnerReport, SandboxEnforcement,
    SandboxExecutionPolicy, SandboxMode, SandboxProvider, SandboxUnavailableError, writable_roots,
};

use std::path::PathBuf;

use crate::bwrap::BwrapLaunch;
use crate::config::{ConfigError, LocalSandboxConfig};
use crate::inprocess::{InProcessConfinement, NetworkHolder, PreparedCache, WorldSpec, create_network};
use crate::probe::SystemProber;
use crate::runner::{
    BWRAP_DENIAL_SIGNATURES, BWRAP_FATAL_SIGNATURE, ProbeOutcome, RUNNER_COMMAND_DENIAL_SIGNATURES,
    RunnerCapability, RunnerKind, RunnerProber, bwrap_mask_args, bwrap_profile_args, bwrap_world_args,
    landlock_denial_signatures, landlock_rules,
};
use crate::session_world::SessionWorlds;

/// The provider's name in reports and messages.
pub const PROVIDER_NAME: &str = "sandbox-local";

/// The selection verdict, computed on the first confined wrap and kept for the provider's life.
#[derive(Clone, Debug)]
enum Verdict {
    Selected(RunnerKind, RunnerCapability),
    Unavailable,
}

/// The local sandbox provider (`sandbox`): confines argv with the first usable runner of its
/// chain, or fails closed.
pub struct LocalSandboxProvider {
    config: LocalSandboxConfig,
    prober: Arc<dyn RunnerProber>,
    probes: [OnceLock<ProbeOutcome>; 2],
    verdict: OnceLock<Verdict>,
    prepared: PreparedCache,
    worlds: SessionWorlds,
    /// Per session: the network namespace bubblewrap launches join (network `deny`/`ask`).
    networks: std::sync::Mutex<Vec<(Option<String>, Arc<NetworkHolder>)>>,
}

impl std::fmt::Debug for LocalSandboxProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSandboxProvider")
            .field("config", &self.config)
            .field("verdict", &self.verdict.get())
            .finish_non_exhaustive()
    }
}

impl LocalSandboxProvider {
    /// A provider probing the real host.
    pub fn new(config: LocalSandboxConfig) -> Result<Self, ConfigError> {
        Self::with_prober(config, Arc::new(SystemProber))
    }

    /// A provider with an injected prober (tests, or hosts that know their runners).
    pub fn with_prober(
        config: LocalSandboxConfig,
        prober: Arc<dyn RunnerProber>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            prober,
            probes: [OnceLock::new(), OnceLock::new()],
            verdict: OnceLock::new(),
            prepared: PreparedCache::default(),
            worlds: SessionWorlds::default(),
            networks: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The configuration this provider was built with.
    pub fn config(&self) -> &LocalSandboxConfig {
        &self.config
    }

    /// Selects the runner now (probing the chain, each runner at most once per provider), so
    /// the first confined wrap finds the verdict made instead of probing itself. Probing
    /// blocks (up to the probe timeout per runner, in `poll` and `sleep`): call this from a
    /// thread that may block — a plugin spawns a thread for it at load, a host may use
    /// `spawn_blocking` — never on an async worker. A configured `runnerCommand` is never
    /// probed, so there is nothing to do for it.
    pub fn warm(&self) {
        if self.config.runner_command.is_empty() {
            let _ = self.verdict();
        }
    }

    /// The network namespace of `policy`'s session for bubblewrap launches, made on first use
    /// (with its proxy listener); `None` when the policy does not isolate the network.
    fn network_holder(&self, policy: &SandboxExecutionPolicy) -> Result<Option<Arc<NetworkHolder>>, String> {
        if !policy.network.mode.isolates() {
            return Ok(None);
        }
        let mut networks = self.networks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, holder)) = networks.iter().find(|(id, _)| *id == policy.session_id) {
            return Ok(Some(Arc::clone(holder)));
        }
        let holder = Arc::new(create_network().map_err(|e| format!("{BWRAP_FATAL_SIGNATURE}{e}"))?);
        networks.push((policy.session_id.clone(), Arc::clone(&holder)));
        Ok(Some(holder))
    }

    /// Each runner is probed at most once per provider.
    fn probe(&self, runner: RunnerKind) -> &ProbeOutcome {
        let slot = match runner {
            RunnerKind::Landlock => &self.probes[0],
            RunnerKind::Bwrap => &self.probes[1],
        };
        slot.get_or_init(|| self.prober.probe(runner, self.config.probe_timeout()))
    }

    /// A one-runner chain is selected without probing; otherwise the first usable one wins.
    fn verdict(&self) -> &Verdict {
        self.verdict.get_or_init(|| {
            if let [only] = self.config.runners[..] {
                return Verdict::Selected(only, self.prober.unprobed(only));
            }
            for runner in &self.config.runners {
                if let ProbeOutcome::Usable(capability) = self.probe(*runner) {
                    return Verdict::Selected(*runner, capability.clone());
                }
            }
            Verdict::Unavailable
        })
    }

    fn runner_command(
        &self,
        argv: &[String],
        policy: &SandboxExecutionPolicy,
    ) -> Result<ConfinedCommand, String> {
        Ok(ConfinedCommand {
            argv: bwrap_argv(self.config.runner_command.clone(), policy, Vec::new(), argv)?,
            child_confinement: None,
            enforcement: SandboxEnforcement::Full,
            denial_signatures: RUNNER_COMMAND_DENIAL_SIGNATURES.map(str::to_owned).to_vec(),
            runner_failure_rules: vec![RunnerFailureRule {
                allowed_exit_codes: None,
                fatal_signatures: self.config.runner_failure_signatures.clone(),
                informational_lines: Vec::new(),
            }],
            runner: self.config.runner_command.first().cloned(),
            proxy: None,
        })
    }
}

/// `launcher` (bubblewrap, or a configured command taking its arguments), the profile of
/// `policy`, `extra` arguments, `--`, then the command itself.
fn bwrap_argv(
    mut launcher: Vec<String>,
    policy: &SandboxExecutionPolicy,
    extra: Vec<String>,
    argv: &[String],
) -> Result<Vec<String>, String> {
    launcher.extend(bwrap_profile_args(policy)?);
    launcher.extend(extra);
    launcher.push("--".to_owned());
    launcher.extend_from_slice(argv);
    Ok(launcher)
}

fn bwrap_command(
    argv: &[String],
    policy: &SandboxExecutionPolicy,
    capability: &RunnerCapability,
    (writable, world): (Vec<PathBuf>, WorldSpec),
    network: Option<Arc<NetworkHolder>>,
) -> Result<ConfinedCommand, String> {
    let proxy = network.as_ref().map(|holder| Arc::clone(&holder.proxy));
    let joined = network.is_some();
    let plan = crate::inprocess::world_plan(&world, &writable)?;
    let launch = BwrapLaunch::prepare(network)?.with_masks(bwrap_mask_args(&world)?)?.with_warden(plan)?;
    let mut world_args = bwrap_world_args(&writable, &world, launch.seccomp_fd(), launch.masks_fd())?;
    if let Some(fd) = launch.info_fd() {
        world_args.extend(["--info-fd".to_owned(), fd.to_string()]);
    }
    if policy.network.mode.isolates() && !joined {
        // bubblewrap brings the new namespace's loopback up itself.
        world_args.push("--unshare-net".to_owned());
    }
    Ok(ConfinedCommand {
        argv: bwrap_argv(vec!["bwrap".to_owned()], policy, world_args, argv)?,
        child_confinement: Some(Arc::new(launch)),
        enforcement: capability.enforcement,
        denial_signatures: BWRAP_DENIAL_SIGNATURES.map(str::to_owned).to_vec(),
        runner_failure_rules: vec![RunnerFailureRule::fatal(&[BWRAP_FATAL_SIGNATURE])],
        runner: Some("bwrap".to_owned()),
        proxy,
    })
}

fn landlock_command(
    argv: &[String],
    capability: &RunnerCapability,
    cache: &PreparedCache,
    writable: &[PathBuf],
    world: Option<&WorldSpec>,
    network: bool,
) -> Result<ConfinedCommand, String> {
    if network && !capability.mount_namespace {
        return Err(format!(
            "{}the network policy needs a network namespace, and this host's Landlock runner has no namespaces",
            crate::runner::LANDLOCK_FATAL_SIGNATURE
        ));
    }
    let prepared = cache.get(writable, world, capability.mount_namespace, network)?;
    let confinement = InProcessConfinement::from_prepared(prepared)?;
    let proxy = confinement.proxy();
    Ok(ConfinedCommand {
        argv: argv.to_vec(),
        child_confinement: Some(Arc::new(confinement)),
        enforcement: capability.enforcement,
        denial_signatures: landlock_denial_signatures(capability.mount_namespace),
        runner_failure_rules: landlock_rules(),
        runner: None,
        proxy,
    })
}

impl SandboxProvider for LocalSandboxProvider {
    /// `danger-full-access` is never confined (the executor does not consult the provider for
    /// it); asking anyway returns the argv with no confinement and no classification data.
    fn confine(
        &self,
        argv: &[String],
        policy: &SandboxExecutionPolicy,
    ) -> Result<ConfinedCommand, SandboxUnavailableError> {
        if policy.mode == SandboxMode::DangerFullAccess {
            return Ok(ConfinedCommand {
                argv: argv.to_vec(),
                child_confinement: None,
                enforcement: SandboxEnforcement::Full,
                denial_signatures: Vec::new(),
                runner_failure_rules: Vec::new(),
                runner: None,
                proxy: None,
            });
        }
        let unavailable = |detail: String| SandboxUnavailableError::with_detail(policy.mode, detail);
        if !self.config.runner_command.is_empty() {
            return self.runner_command(argv, policy).map_err(unavailable);
        }
        match self.verdict() {
            Verdict::Selected(RunnerKind::Landlock, capability) => {
                // Without a mount namespace there is no world to build: Landlock alone, with
                // the policy's writable roots (the host's `/tmp` included).
                let (writable, world) = match capability.mount_namespace {
                    true => self
                        .worlds
                        .spec(policy, &self.config)
                        .map(|(w, s)| (w, Some(s)))
                        .map_err(unavailable)?,
                    false => (writable_roots(policy), None),
                };
                let network = policy.network.mode.isolates();
                landlock_command(argv, capability, &self.prepared, &writable, world.as_ref(), network)
                    .map_err(unavailable)
            }
            Verdict::Selected(RunnerKind::Bwrap, capability) => {
                let world = self.worlds.spec(policy, &self.config).map_err(unavailable)?;
                let network = self.network_holder(policy).map_err(unavailable)?;
                bwrap_command(argv, policy, capability, world, network).map_err(unavailable)
            }
            Verdict::Unavailable => Err(SandboxUnavailableError::new(policy.mode)),
        }
    }

    /// Probes every known runner (each at most once per provider) and forces the verdict.
    fn describe(&self) -> ProviderReport {
        let timeout = self.config.probe_timeout();
        let mut runners = Vec::new();
        let selected = if self.config.runner_command.is_empty() {
            match self.verdict() {
                Verdict::Selected(kind, _) => Some(kind.as_str().to_owned()),
                Verdict::Unavailable => None,
            }
        } else {
            runners.push(RunnerReport {
                name: "runnerCommand".to_owned(),
                usable: true,
                enforcement: Some(SandboxEnforcement::Full),
                version: None,
                notes: vec![format!("configured: {} (never probed)", self.config.runner_command.join(" "))],
            });
            Some("runnerCommand".to_owned())
        };
        let mut order: Vec<RunnerKind> = self.config.runners.clone();
        order.extend(RunnerKind::ALL.into_iter().filter(|k| !self.config.runners.contains(k)));
        for kind in order {
            let mut notes = Vec::new();
            if !self.config.runners.contains(&kind) {
                notes.push("not in the configured chain".to_owned());
            }
            let (usable, enforcement) = match self.probe(kind) {
                ProbeOutcome::Usable(capability) => {
                    notes.extend(capability.notes.iter().cloned());
                    (true, Some(capability.enforcement))
                }
                ProbeOutcome::Unusable(reason) => {
                    notes.push(reason.clone());
                    (false, None)
                }
            };
            runners.push(RunnerReport {
                name: kind.as_str().to_owned(),
                usable,
                enforcement,
                version: self.prober.version(kind, timeout),
                notes,
            });
        }
        ProviderReport { provider: PROVIDER_NAME.to_owned(), selected, runners }
    }

    fn share_read_only(&self, path: &std::path::Path) {
        self.worlds.share(None, path);
    }

    fn share_read_only_with_session(&self, session: Option<&str>, path: &std::path::Path) {
        self.worlds.share(Some(session), path);
    }

    /// The in-process runner's commands of one session share the PID namespace of its
    /// pre-built world: whatever is left there but its init is killed. Bubblewrap gives each
    /// command a PID namespace of its own, ended with it.
    fn end_strays(&self, session: Option<&str>) -> bool {
        self.worlds.session_dir(session).is_none_or(|dir| self.prepared.end_strays(&dir))
    }

    fn toolchain_caches(&self) -> Option<dsh_sandbox::ToolchainCaches> {
        self.config.toolchain_caches()
    }
}
