//! `dsh-bash doctor`: host facts a user needs when something does not work.
//!
//! Reports the `bash` the executor will find, where commands run (a remote executor's far
//! side is probed), where spill files go, which sandbox runners the
//! host offers, and the composition with each plugin's state. Exit 0 when bash was found, a
//! remote executor's far side answers and every plugin applied, 1 otherwise.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use dsh_sandbox::{SANDBOX, SANDBOX_POLICY, SandboxExecutionPolicy, SandboxMode, SandboxProvider};
#[cfg(target_os = "linux")]
use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider};
use dsh_subprocess::SUBPROCESS;

use crate::catalog::Catalog;
use crate::cli::CompositionArgs;
use crate::composition::{Composition, Pending};

/// `executor: local`, or the remote executor's kind, where it runs, and whether its far
/// side answers (the engine's version) or why not.
async fn executor_line(ctx: &dsh_core::Context) -> (String, bool) {
    let Some(transport) = ctx.get(dsh_shell_remote::REMOTE_TRANSPORT) else {
        return ("executor: local".to_owned(), true);
    };
    let (answer, answers) = match transport.probe().await {
        Ok(facts) => (facts, true),
        Err(e) => (format!("does not answer: {e}"), false),
    };
    (format!("executor: {} ({}); {answer}", transport.kind(), transport.describe()), answers)
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
    // Probing runs runner programs synchronously.
    let runners = tokio::task::spawn_blocking(move || sandbox_runners(provider))
        .await
        .unwrap_or_else(|e| format!("sandbox runners: report failed: {e}"));

    let mut report = Vec::new();
    report.push(format!("dsh-bash {}", env!("CARGO_PKG_VERSION")));
    let bash = find_on_path("bash");
    match &bash {
        Some(path) => report.push(format!("bash: {} ({})", path.display(), bash_version(path))),
        None => report.push("bash: not found on PATH".to_owned()),
    }
    report.push(executor);
    report.extend(known_hosts);
    report.push(format!("spill directory: {}", spill_directory(spill_dir.as_deref())));
    report.push(format!("containment: {}", containment.as_deref().unwrap_or("none (no subprocess service)")));
    report.push(
        "if the harness is killed: a guardian process kills every command's tree within a second \
         (a descendant that left the tree into a session of its own before that can outlive an \
         unconfined command; nothing outlives a confined one: its PID namespace ends with the harness)"
            .to_owned(),
    );
    report.extend(writable_roots(composition, extra_roots));
    if let Some(caches) = caches {
        let variables: Vec<&str> = dsh_sandbox::TOOLCHAIN_CACHE_VARIABLES.iter().map(|(v, _)| *v).collect();
        report.push(format!(
            "toolchain caches of workspace-write commands: {} ({}; the user's own caches stay read-only)",
            caches.root().display(),
            variables.join(", ")
        ));
    }
    report.push(network_line(network.as_ref()));
    report.extend(runners.lines().map(str::to_owned));
    report.extend(kernel_namespaces_line());
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
            format!("pending (missing {missing})")
        };
        report.push(format!("  {} ({}): {state}", plugin.short_name, plugin.name));
    }
    let mut stdout = std::io::stdout().lock();
    for line in &report {
        writeln!(stdout, "{line}").context("writing stdout")?;
    }
    stdout.flush().context("writing stdout")?;
    let healthy = bash.is_some() && executor_answers && plugins.iter().all(|p| p.applied);
    Ok(if healthy { 0 } else { 1 })
}

/// Where each sandbox mode lets commands write, for the workspace root calls get when their
/// session names no cwd (a session's cwd takes its place).
fn writable_roots(composition: &CompositionArgs, extra_roots: Vec<PathBuf>) -> Vec<String> {
    let (workspace, source) = match &composition.workspace_root {
        Some(root) => (dsh_core::home::absolutize(root), "--workspace-root"),
        None => (std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")), "the current directory"),
    };
    let mut policy = SandboxExecutionPolicy::new(SandboxMode::WorkspaceWrite, workspace.clone(), None);
    policy.extra_roots = extra_roots;
    let roots: Vec<String> =
        dsh_sandbox::writable_roots(&policy).iter().map(|r| r.display().to_string()).collect();
    vec![
        format!("workspace root: {} ({source}; a session's cwd takes its place)", workspace.display()),
        "writable roots by sandbox mode:".to_owned(),
        "  read-only: none".to_owned(),
        format!("  workspace-write: {}", roots.join(", ")),
        "    under the local sandbox /tmp and /dev/shm are the session's own, not the host's; the \
         protected paths under a root stay read-only (sandbox-local protectedPaths: .git/hooks, \
         .envrc, .bashrc, … by default); auto-run files a confined command changes are quarantined"
            .to_owned(),
        "  danger-full-access: not confined (wherever the user may write)".to_owned(),
    ]
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
/// make for them (without one, every confined command fails closed). `None` off Linux.
fn kernel_namespaces_line() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let missing: Vec<&str> =
        ["uts", "ipc"].into_iter().filter(|kind| !Path::new("/proc/self/ns").join(kind).exists()).collect();
    Some(match missing.as_slice() {
        [] => "kernel namespaces: UTS and IPC available (confined commands get their own hostname, \
               SysV IPC objects and POSIX message queues)"
            .to_owned(),
        missing => format!(
            "kernel namespaces: {} missing on this kernel (the local runners need them: confined commands \
             cannot start)",
            missing.iter().map(|k| k.to_uppercase()).collect::<Vec<_>>().join(" and ")
        ),
    })
}

/// The composed sandbox provider's report, else the default local provider's.
#[cfg(target_os = "linux")]
fn sandbox_runners(composed: Option<Arc<dyn SandboxProvider>>) -> String {
    let provider: Arc<dyn SandboxProvider> = match composed {
        Some(provider) => provider,
        None => match LocalSandboxProvider::new(LocalSandboxConfig::default()) {
            Ok(provider) => Arc::new(provider),
            Err(e) => return format!("sandbox provider: {e}"),
        },
    };
    provider.describe().to_string()
}

#[cfg(not(target_os = "linux"))]
fn sandbox_runners(composed: Option<Arc<dyn SandboxProvider>>) -> String {
    match composed {
        Some(provider) => provider.describe().to_string(),
        None => "sandbox provider: none (the local provider supports Linux only)".to_owned(),
    }
}
