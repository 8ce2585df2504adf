//! Serves the default bash composition over MCP (stdio, or HTTP with `--http`), the way
//! `dsh-bash mcp` does; the end-to-end tests drive it with an independent MCP client.
//!
//! ```text
//! mcp_stdio [--sandbox MODE [--network POLICY]] [--workspace-root DIR] [--no-elicitation] [--askpass] [--fakes] [--http ADDR]
//! ```
//!
//! `--sandbox MODE` swaps the local executor for the sandboxing one (local provider, policy
//! default MODE); `--http ADDR` serves streamable HTTP with the bearer token taken from
//! `$DSH_MCP_TOKEN` (as `dsh-bash mcp` does); `--askpass` gives commands the askpass program
//! (this executable, invoked as `dsh-askpass`); `--fakes` also registers the protocol stand-in
//! tools of the test suite.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use dsh_approval::ApprovalPlugin;
use dsh_bash_local::{BashLocalPlugin, LocalBashConfig};
use dsh_bash_sandbox::BashSandboxPlugin;
use dsh_core::Context;
use dsh_core::plugins::{AgentsPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_jobs::JobsPlugin;
use dsh_mcp::McpOptions;
#[cfg(target_os = "linux")]
use dsh_sandbox_local::SandboxLocalPlugin;
use dsh_sandbox_policy::{SandboxPolicyConfig, SandboxPolicyPlugin};
use dsh_shell::ShellEnvPlugin;
use dsh_subprocess::SubprocessPlugin;
use dsh_test_support::fakes;
use dsh_tool_bash::ToolBash;
use dsh_tool_jobs::ToolJobsPlugin;

#[derive(Default)]
struct Args {
    sandbox: Option<String>,
    network: Option<String>,
    workspace_root: Option<PathBuf>,
    fakes: bool,
    http: Option<SocketAddr>,
    no_elicitation: bool,
    askpass: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--sandbox" => args.sandbox = Some(value("--sandbox")?),
            "--network" => args.network = Some(value("--network")?),
            "--workspace-root" => args.workspace_root = Some(PathBuf::from(value("--workspace-root")?)),
            "--fakes" => args.fakes = true,
            "--http" => args.http = Some(value("--http")?.parse().context("--http ADDR")?),
            "--no-elicitation" => args.no_elicitation = true,
            "--askpass" => args.askpass = true,
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

fn compose(args: &Args) -> anyhow::Result<Context> {
    let ctx = Context::new();
    ctx.load_default::<ToolsPlugin>()?;
    ctx.load_default::<SystemPromptPlugin>()?;
    ctx.load_default::<AgentsPlugin>()?;
    ctx.load_default::<SubprocessPlugin>()?;
    let executor = LocalBashConfig { cwd: args.workspace_root.clone(), ..LocalBashConfig::default() };
    match &args.sandbox {
        None => ctx.load::<BashLocalPlugin>(executor)?,
        Some(mode) => {
            #[cfg(not(target_os = "linux"))]
            bail!("--sandbox {mode}: the local sandbox provider is Linux-only");
            ctx.load::<BashSandboxPlugin>(executor)?;
            #[cfg(target_os = "linux")]
            ctx.load_default::<SandboxLocalPlugin>()?;
            ctx.load::<SandboxPolicyPlugin>(SandboxPolicyConfig {
                mode: Some(mode.clone()),
                workspace_root: args.workspace_root.as_ref().map(|p| p.display().to_string()),
                network: args.network.clone(),
                ..Default::default()
            })?;
        }
    }
    ctx.load_default::<ShellEnvPlugin>()?;
    ctx.load_default::<JobsPlugin>()?;
    ctx.load_default::<ToolJobsPlugin>()?;
    ctx.load_default::<ToolBash>()?;
    ctx.load_default::<ApprovalPlugin>()?;
    if args.askpass {
        ctx.load_default::<dsh_askpass::AskpassPlugin>()?;
    }
    let pending: Vec<&str> = ctx.plugins().into_iter().filter(|p| !p.applied).map(|p| p.short_name).collect();
    if !pending.is_empty() {
        bail!("plugins stayed pending: {}", pending.join(", "));
    }
    if args.fakes {
        fakes::register_fakes(&ctx);
    }
    Ok(ctx)
}

fn main() -> anyhow::Result<()> {
    let mut argv = std::env::args_os();
    if argv.next().is_some_and(|argv0| dsh_askpass::client::invoked_as_askpass(&argv0)) {
        let code = dsh_askpass::client::run(argv, std::env::var_os(dsh_askpass::SOCKET_VARIABLE));
        std::process::exit(i32::from(code));
    }
    // Logs on stderr, filtered by `RUST_LOG` as `dsh-bash mcp` filters them (same default).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,rmcp::service=error"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let served = runtime.block_on(serve());
    // tokio reads stdin on a blocking thread that only ends when stdin does; after a SIGTERM
    // the client may still hold it open, so do not wait for that thread.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    served
}

async fn serve() -> anyhow::Result<()> {
    let args = parse_args()?;
    let ctx = compose(&args)?;
    let options = McpOptions {
        workspace_root: args.workspace_root.clone(),
        elicitation: !args.no_elicitation,
        ..McpOptions::default()
    };
    match args.http {
        None => dsh_mcp::serve_stdio(ctx, options).await,
        Some(addr) => {
            let token = std::env::var("DSH_MCP_TOKEN").ok().filter(|t| !t.trim().is_empty());
            let Some(token) = token else {
                ctx.dispose().await;
                bail!("--http needs a bearer token in $DSH_MCP_TOKEN");
            };
            dsh_mcp::serve_http(ctx, options, addr, token).await
        }
    }
}
