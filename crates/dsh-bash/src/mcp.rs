//! `dsh-bash mcp [--http ADDR] [--no-elicitation]`: the composition's tools served over the
//! Model Context Protocol, on stdio by default.
//!
//! The approval service is always part of an MCP composition: MCP elicitation is its answer
//! channel (unless `--no-elicitation`, or an `--approve` answer is given). The server owns the
//! composition and disposes it when the client goes away or on SIGINT/SIGTERM. Logs go to
//! stderr at the level named by `RUST_LOG` (`error`, `warn` (default), `info`, `debug`, `trace`).

use anyhow::Context as _;
use dsh_mcp::McpOptions;

use crate::cli::{CompositionArgs, McpArgs};
use crate::composition::{Composition, Pending};

/// The environment variable holding the HTTP bearer token.
pub const TOKEN_VAR: &str = "DSH_MCP_TOKEN";

pub async fn run(composition: &CompositionArgs, args: McpArgs) -> anyhow::Result<u8> {
    init_logging();
    let token = match args.http {
        None => None,
        Some(_) => Some(
            std::env::var(TOKEN_VAR)
                .ok()
                .filter(|t| !t.trim().is_empty())
                .with_context(|| format!("--http needs a bearer token in ${TOKEN_VAR}"))?,
        ),
    };
    let comp = Composition::start_with(composition, &["approval"], Pending::Refuse).await?;
    let options = McpOptions {
        server_name: "dsh-bash".to_owned(),
        server_version: env!("CARGO_PKG_VERSION").to_owned(),
        workspace_root: composition.workspace_root.as_deref().map(dsh_core::home::absolutize),
        elicitation: !args.no_elicitation,
        ..McpOptions::default()
    };
    let ctx = comp.into_context();
    match (args.http, token) {
        (Some(addr), Some(token)) => dsh_mcp::serve_http(ctx, options, addr, token).await?,
        _ => dsh_mcp::serve_stdio(ctx, options).await?,
    }
    Ok(0)
}

fn init_logging() {
    let level = match std::env::var("RUST_LOG").unwrap_or_default().trim().to_ascii_lowercase().as_str() {
        "error" => tracing::Level::ERROR,
        "info" => tracing::Level::INFO,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        _ => tracing::Level::WARN,
    };
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_max_level(level).try_init();
}
