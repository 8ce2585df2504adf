//! `dsh-bash doctor`: host facts a user needs when something does not work.
//!
//! Reports the `bash` the executor will find, where commands run (a remote executor's far
//! side is probed), where spill files go, which sandbox runners the
//! host offers, and the composition with each plugin's state, then one verdict line: `ok`,
//! `degraded: <why>` (commands run, with less than the composition asks for) or
//! `unusable: <why>` (commands cannot run as composed). Exit 0 for `ok`, 3 for `degraded`,
//! 1 for `unusable`.
//!
//! Every check is bounded: a host check (finding and asking `bash`, resolving the writable
//! roots, the kernel's namespaces) that takes longer than [`CHECK_BOUND`] is reported as not
//! answering (a hung mount never hangs `doctor`), a sandbox runner's probe by the provider's
//! probe timeout, and a remote executor's probe by [`REMOTE_PROBE_BOUND`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use dsh_sandbox::{
    ProviderReport, SANDBOX, SANDBOX_POLICY, SandboxExecutionPolicy, SandboxMode, SandboxProvider,
};
#[cfg(target_os = "linux")]
use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider};
use dsh_subprocess::SUBPROCESS;

use crate::catalog::Catalog;
use crate::cli::CompositionArgs;
use crate::composition::{Composition, Pending};

/// How long one host check may take before it is reported as not answering.
const CHECK_BOUND: Duration = Duration::from_secs(2);

/// How long a remote executor's far side may take to answer `doctor`'s probe (an SSH login
/// or a container engine under load takes longer than a local check).
const REMOTE_PROBE_BOUND: Duration = Duration::from_secs(10);

/// Exit status of a `degraded` verdict.
const EXIT_DEGRADED: u8 = 3;

/// Exit status of an `unusable` verdict.
const EXIT_UNUSABLE: u8 = 1;

/// Runs `check` on a thread of its own and waits at most [`CHECK_BOUND`] for it: `None` when
/// it did not finish in time (it is left to finish or hang on its own; the process does not
/// wait for it).
fn bounded<T: Send + 'static>(check: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("doctor-check".to_owned())
        .spawn(move || {
            let _ = tx.send(check());
        })
        .ok()?;
    rx.recv_timeout(CHECK_BOUND).ok()
}

/// `executor: local`, or the remote executor's kind, where it runs, and whether its far
/// side answers (the engine's version) or why not; `false` when commands cannot run there.
async fn executor_line(ctx: &dsh_core::Context) -> (String, bool) {
    let Some(transport) = ctx.get(dsh_shell_remote::REMOTE_TRANSPORT) else {
        return ("executor: local".to_owned(), true);
    };
    let (answer, answers) = match tokio::time::timeout(REMOTE_PROBE_BOUND, transport.probe()).await {
        Ok(Ok(facts)) => (facts, true),
        Ok(Err(dsh_shell_remote::RemoteError::Failed(e))) => {
            (format!("answers, but cannot run commands: {e}"), false)
        }
        Ok(Err(e)) => (format!("does not answer: {e}"), false),
        Err(_) => (format!("does not answer within {} s", REMOTE_PROBE_BOUND.as_secs()), false),
    };
    (format!("executor: {} ({}); {answer}", transport.kind(), transport.describe()), answers)
}

/// What makes the verdict: problems that leave commands unable to run, and ones that leave
/// them running with less than asked for.
#[derive(Default)]
struct Findings {
    unusable: Vec<String>,
    degraded: Vec<String>,
}

impl Findings {
    /// The verdict line and the exit status that says the same.
    fn verdict(&self) -> (String, u8) {
        if !self.unusable.is_empty() {
            (format!("unusable: {}", self.unusable.join("; ")), EXIT_UNUSABLE)
        } else if !self.degraded.is_empty() {
            (format!("degraded: {}", self.degraded.join("; ")), EXIT_DEGRADED)
        } else {
            ("ok".to_owned(), 0)
        }
    }
}

pub async fn run(composition: &CompositionArgs) -> anyhow::Result<u8> {
    let comp = Composition::start(composition, Pending::Report).await?;
    let plugins = comp.ctx().plugins();
    let spill_dir = comp.ctx().get(SUBPROCESS).and_then(|service| service.existing_spill_dir());
    let containment = comp.ctx().get(SUBPROCESS).map(|service| service.containment().to_string());
    let provider = comp.ctx().get(SANDBOX);
    let caches = provider.as_ref().and_then(|provider| provider.toolchain_caches());
    // The further writable roots as the policy service pinned them (`--add-dir`,
    // `writableRoots`); without a policy service, as given on the command line.
    let standing = comp.ctx().get(SANDBOX_POLICY).map(|policy| policy.resolve(None, None).policy);
    let extra_roots = match &standing {
        Some(policy) => policy.extra_roots.clone(),
        None => composition.add_dir.iter().map(|d| dsh_core::home::absolutize(d)).collect(),
    };
    let network = standing.map(|policy| policy.network);
    let (executor, executor_answers) = executor_line(comp.ctx()).await;
    let known_hosts =
        comp.ctx().get(dsh_shell_ssh::SSH_TRANSPORT).map(|ssh| match ssh.config().known_hosts_file() {
            Some(file) => {
                format!("ssh known hosts: {} (an unknown host key is refused, never added)", file.display())
            }
            None => "ssh known hosts: ssh's default (an unknown host key is refused, never added)".to_owned(),
        });
    comp.dispose().await;
    let confining = composition.sandbox.as_deref().is_some_and(|mode| mode != "danger-full-access");
    let mut findings = Findings::default();
    // Probing runs runner programs synchronously (each bounded by the probe timeout).
    let runners = tokio::task::spawn_blocking(move || sandbox_runners(provider))
        .await
        .unwrap_or_else(|e| Err(format!("sandbox runners: report failed: {e}")));
    let selected = runners.as_ref().ok().and_then(|report| {
        let name = report.selected.as_ref()?;
        report.runners.iter().find(|r| &r.name == name).cloned()
    });
    match &selected {
        None if confining => {
            findings.unusable.push("no sandbox runner is usable: confined commands refuse to run".to_owned())
        }
        None => findings
            .degraded
            .push("no sandbox runner is usable: --sandbox would refuse to run commands".to_owned()),
        // Only a composition that confines gets less than it asks for from a partial runner.
        Some(runner) if confining && runner.enforcement == Some(dsh_sandbox::SandboxEnforcement::Partial) => {
            findings
                .degraded
                .push(format!("the selected sandbox runner {} confines only partly", runner.name))
        }
        Some(_) => {}
    }

    let mut report = Vec::new();
    report.push(format!("dsh-bash {}", env!("CARGO_PKG_VERSION")));
    let bash = bounded(|| {
        find_on_path("bash").map(|path| {
            let version = bash_version(&path);
            (path, version)
        })
    });
    match &bash {
        Some(Some((path, version))) => report.push(format!("bash: {} ({version})", path.display())),
        Some(None) => {
            report.push("bash: not found on PATH".to_owned());
            findings.unusable.push("bash is not on PATH".to_owned());
        }
        None => {
            report.push(format!("bash: did not answer within {} s", CHECK_BOUND.as_secs()));
            findings.unusable.push("bash did not answer".to_owned());
        }
    }
    report.push(executor);
    if !executor_answers {
        findings.unusable.push("the executor cannot run commands (see the executor line)".to_owned());
    }
    report.extend(known_hosts);
    report.push(format!("spill directory: {}", spill_directory(spill_dir.as_deref())));
    report.push(format!("containment: {}", containment.as_deref().unwrap_or("none (no subprocess service)")));
    report.push(
        "if the harness is killed: a guardian process kills every command's tree within a second \
         (a descendant that left the tree into a session of its own before that can outlive an \
         unconfined command; nothing outlives a confined one: its PID namespace ends with the harness)"
            .to_owned(),
    );
    let runner_name = selected.as_ref().map(|r| r.name.clone());
    let workspace_root = composition.workspace_root.clone();
    match bounded(move || writable_roots(workspace_root, extra_roots, runner_name.as_deref())) {
        Some((lines, root_refused)) => {
            report.extend(lines);
            if root_refused {
                findings.degraded.push(
                    "the workspace root is / and workspace-write commands may not write it: start in a project \
                     directory or give --workspace-root"
                        .to_owned(),
                );
            }
        }
        None => {
            report.push(format!(
                "writable roots: not resolved within {} s (a slow mount?)",
                CHECK_BOUND.as_secs()
            ));
            findings.degraded.push("the writable roots could not be resolved".to_owned());
        }
    }
    if let Some(caches) = caches {
        let variables: Vec<&str> = dsh_sandbox::TOOLCHAIN_CACHE_VARIABLES.iter().map(|(v, _)| *v).collect();
        report.push(format!(
            "toolchain caches of workspace-write commands: {} ({}; the user's own caches stay read-only)",
            caches.root().display(),
            variables.join(", ")
        ));
    }
    report.push(network_line(network.as_ref()));
    let policy_root = composition.workspace_root.clone().or_else(|| std::env::current_dir().ok());
    let policy = dsh_approval::policy::EffectivePolicy::load(&dsh_approval::policy::PolicyPaths::from_env(
        policy_root.as_deref(),
    ));
    report.extend(policy.report());
    for file in policy.files.iter().filter(|f| f.error.is_some()) {
        findings.degraded.push(format!("the {} policy file is unusable", file.origin.as_str()));
    }
    match &runners {
        Ok(provider) => report.extend(provider.to_string().lines().map(str::to_owned)),
        Err(e) => report.push(e.clone()),
    }
    match bounded(kernel_namespaces) {
        Some(Some((line, complete))) => {
            report.push(line);
            if !complete && confining {
                findings.unusable.push("the kernel lacks the namespaces confined commands need".to_owned());
            } else if !complete {
                findings.degraded.push("the kernel lacks the namespaces confined commands need".to_owned());
            }
        }
        Some(None) => {}
        None => report.push(format!("kernel namespaces: not answered within {} s", CHECK_BOUND.as_secs())),
    }
    report.push("available plugins:".to_owned());
    for factory in Catalog::builtin().entries() {
        report.push(format!("  {} ({})", factory.short_name(), factory.name()));
    }
    report.push("composition:".to_owned());
    for plugin in &plugins {
        let state = if plugin.applied {
            "applied".to_owned()
        } else {
            let missing = plugin.missing.iter().map(|k| format!("\"{k}\"")).collect::<Vec<_>>().join(", ");
            findings.unusable.push(format!("plugin {} is pending", plugin.short_name));
            format!("pending (missing {missing})")
        };
        report.push(format!("  {} ({}): {state}", plugin.short_name, plugin.name));
    }
    let (verdict, code) = findings.verdict();
    report.push(verdict);
    let mut stdout = std::io::stdout().lock();
    for line in &report {
        writeln!(stdout, "{line}").context("writing stdout")?;
    }
    stdout.flush().context("writing stdout")?;
    Ok(code)
}

/// Where each sandbox mode lets commands write, for the workspace root calls get when their
/// session names no cwd (a session's cwd takes its place), and whether that root is `/`,
/// which the in-process runner (`runner`, the selected one) never lets a command write: it is
/// then not listed, and the second value is `true`.
fn writable_roots(
    workspace_root: Option<PathBuf>,
    extra_roots: Vec<PathBuf>,
    runner: Option<&str>,
) -> (Vec<String>, bool) {
    let (workspace, source) = match &workspace_root {
        Some(root) => (dsh_core::home::absolutize(root), "--workspace-root"),
        None => (std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")), "the current directory"),
    };
    let mut policy = SandboxExecutionPolicy::new(SandboxMode::WorkspaceWrite, workspace.clone(), None);
    policy.extra_roots = extra_roots;
    let slash = Path::new("/");
    let root_refused =
        runner == Some("landlock") && std::fs::canonicalize(&workspace).is_ok_and(|w| w == slash);
    let roots: Vec<String> = dsh_sandbox::writable_roots(&policy)
        .iter()
        .filter(|r| !(root_refused && r.as_path() == slash))
        .map(|r| r.display().to_string())
        .collect();
    let refused_note = root_refused.then(|| {
        "    / is not writable: the landlock runner keeps the root directory read-only, whatever the workspace root"
            .to_owned()
    });
    let lines = vec![
        format!("workspace root: {} ({source}; a session's cwd takes its place)", workspace.display()),
        "writable roots by sandbox mode:".to_owned(),
        "  read-only: none".to_owned(),
        format!("  workspace-write: {}", roots.join(", ")),
        "    under the local sandbox /tmp and /dev/shm are the session's own, not the host's; the \
         protected paths under a root stay read-only (sandbox-local protectedPaths: .git/hooks, \
         .envrc, .bashrc, … by default); auto-run files a confined command changes are quarantined"
            .to_owned(),
        "  danger-full-access: not confined (wherever the user may write)".to_owned(),
    ];
    let mut lines = lines;
    if let Some(note) = refused_note {
        lines.insert(4, note);
    }
    (lines, root_refused)
}

/// The network policy of confined commands.
fn network_line(network: Option<&dsh_sandbox::NetworkPolicy>) -> String {
    use dsh_sandbox::NetworkMode;
    let Some(network) = network else {
        return "network: not confined (no sandbox)".to_owned();
    };
    let listed = network.allowlist_text();
    match network.mode {
        NetworkMode::Allow => "network: allow (confined commands use the host's network)".to_owned(),
        NetworkMode::Deny => format!(
            "network: deny (confined commands get the session's own network namespace; {listed}, through the harness's proxy)"
        ),
        NetworkMode::Ask => format!(
            "network: ask (confined commands get the session's own network namespace; {listed}, through the harness's proxy; any other host:port is asked for per call)"
        ),
    }
}

/// The first executable `name` on `$PATH`.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// The first line of `bash --version`.
fn bash_version(bash: &Path) -> String {
    match std::process::Command::new(bash).arg("--version").output() {
        Ok(output) => {
            String::from_utf8_lossy(&output.stdout).lines().next().unwrap_or("unknown version").to_owned()
        }
        Err(e) => format!("cannot run: {e}"),
    }
}

/// The configured spill directory, else where the default one will be created.
fn spill_directory(configured: Option<&Path>) -> String {
    match configured {
        Some(dir) => dir.display().to_string(),
        None => format!(
            "{} (private, created on the first truncated stream)",
            std::env::temp_dir().join("dsh-subprocess-XXXXXX").display()
        ),
    }
}

/// Whether this kernel gives confined commands the UTS and IPC namespaces both local runners
/// make for them (without one, every confined command fails closed): the line, and whether
/// both are there. `None` off Linux.
fn kernel_namespaces() -> Option<(String, bool)> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let missing: Vec<&str> =
        ["uts", "ipc"].into_iter().filter(|kind| !Path::new("/proc/self/ns").join(kind).exists()).collect();
    let complete = missing.is_empty();
    Some((
        match missing.as_slice() {
            [] => "kernel namespaces: UTS and IPC available (confined commands get their own hostname, \
               SysV IPC objects and POSIX message queues)"
                .to_owned(),
            missing => format!(
                "kernel namespaces: {} missing on this kernel (the local runners need them: confined commands \
             cannot start)",
                missing.iter().map(|k| k.to_uppercase()).collect::<Vec<_>>().join(" and ")
            ),
        },
        complete,
    ))
}

/// The composed sandbox provider's report, else the default local provider's; the line to
/// show when there is none.
#[cfg(target_os = "linux")]
fn sandbox_runners(composed: Option<Arc<dyn SandboxProvider>>) -> Result<ProviderReport, String> {
    let provider: Arc<dyn SandboxProvider> = match composed {
        Some(provider) => provider,
        None => match LocalSandboxProvider::new(LocalSandboxConfig::default()) {
            Ok(provider) => Arc::new(provider),
            Err(e) => return Err(format!("sandbox provider: {e}")),
        },
    };
    Ok(provider.describe())
}

#[cfg(not(target_os = "linux"))]
fn sandbox_runners(composed: Option<Arc<dyn SandboxProvider>>) -> Result<ProviderReport, String> {
    match composed {
        Some(provider) => Ok(provider.describe()),
        None => Err("sandbox provider: none (the local provider supports Linux only)".to_owned()),
    }
}
