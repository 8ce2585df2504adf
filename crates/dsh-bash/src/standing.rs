//! Where the model's commands stand, told in the MCP server's `instructions`: which executor
//! runs them, the sandbox mode and what it lets them write, and the network policy.
//!
//! Only a composition that confines its commands or runs them elsewhere than here (a sandbox
//! policy service, or a remote executor) gets this paragraph: the default composition's
//! instructions stay the prompt's, byte for byte.

use dsh_sandbox::{NetworkMode, SANDBOX, SANDBOX_POLICY, SandboxMode, TOOLCHAIN_CACHE_VARIABLES};

/// The paragraph appended to the MCP `instructions`, or `None` for a composition that runs
/// its commands here unconfined.
pub fn instructions(ctx: &dsh_core::Context) -> Option<String> {
    let transport = ctx.get(dsh_shell_remote::REMOTE_TRANSPORT);
    let policy = ctx.get(SANDBOX_POLICY).map(|service| service.resolve(None, None).policy);
    if transport.is_none() && policy.is_none() {
        return None;
    }
    let mut text = String::from("Where your commands run: ");
    text.push_str(&match &transport {
        Some(transport) => format!("executor {} ({}).", transport.kind(), transport.describe()),
        None => "executor local (this machine).".to_owned(),
    });
    let Some(policy) = policy else {
        text.push_str(" Sandbox: none beyond the executor's own (commands may write wherever its user may).");
        return Some(text);
    };
    match policy.mode {
        SandboxMode::DangerFullAccess => {
            text.push_str(" Sandbox: danger-full-access (commands are not confined).");
        }
        SandboxMode::ReadOnly => {
            text.push_str(
                " Sandbox: read-only (commands write nowhere; the user's credentials are unreadable).",
            );
        }
        SandboxMode::WorkspaceWrite => {
            let mut roots =
                vec![format!("{} (or the session's working directory)", policy.workspace_root.display())];
            roots.extend(policy.extra_roots.iter().map(|r| r.display().to_string()));
            let caches = ctx
                .get(SANDBOX)
                .and_then(|provider| provider.toolchain_caches())
                .map(|caches| {
                    let variables: Vec<&str> = TOOLCHAIN_CACHE_VARIABLES.iter().map(|(v, _)| *v).collect();
                    format!(
                        "; package caches of their own in {} (set through {})",
                        caches.root().display(),
                        variables.join(", ")
                    )
                })
                .unwrap_or_default();
            text.push_str(&format!(
                " Sandbox: workspace-write (commands may write only under {}, and a private /tmp{caches}; the rest is read-only and the user's credentials are unreadable).",
                roots.join(", ")
            ));
        }
    }
    let listed = policy.network.allowlist_text();
    text.push_str(&match policy.network.mode {
        NetworkMode::Allow => " Network: allow (any host).".to_owned(),
        NetworkMode::Deny => format!(" Network: deny ({listed}; through the harness's proxy, nothing else)."),
        NetworkMode::Ask => {
            format!(" Network: ask ({listed}; any other host is asked of the user per call).")
        }
    });
    Some(text)
}
