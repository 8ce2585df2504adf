//! `dsh-bash mcp [--http ADDR [--token-file FILE] [--allow-remote] [--idle-timeout SECS]]
//! [--no-elicitation]`: the composition's tools served over the Model Context Protocol, on
//! stdio by default.
//!
//! The approval service is always part of an MCP composition: MCP elicitation is its answer
//! channel (unless `--no-elicitation`, or an `--approve` answer is given). The server owns the
//! composition and disposes it when the client goes away or on SIGINT/SIGTERM (handled from the
//! first instruction on, so a signal during start-up is a clean shutdown too). Logs go to
//! stderr at the level named by `RUST_LOG` (`error`, `warn` (default), `info`, `debug`, `trace`).
//!
//! Over HTTP the listener is bound before the composition starts, so a bad address costs
//! nothing, and the start line on stderr names the real address (port 0 picks a free one).
//! The bearer token comes from `--token-file`, else `$DSH_MCP_TOKEN`, else it is generated
//! (256 random bits) and printed once on that start line.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context as _;
use dsh_mcp::McpOptions;

use crate::cli::{CompositionArgs, McpArgs};
use crate::composition::{Composition, Pending};

/// The environment variable holding the HTTP bearer token.
pub const TOKEN_VAR: &str = "DSH_MCP_TOKEN";

/// Where the HTTP bearer token came from; a generated one is shown once at start.
enum Token {
    Given(String),
    Generated(String),
}

impl Token {
    fn secret(&self) -> &str {
        match self {
            Token::Given(token) | Token::Generated(token) => token,
        }
    }
}

pub async fn run(composition: &CompositionArgs, args: McpArgs) -> anyhow::Result<u8> {
    init_logging();
    // Handlers first: a SIGTERM that arrives while the server starts is a clean shutdown.
    let interrupted = crate::interrupt::on_interrupt();
    let http = match args.http {
        None => None,
        Some(addr) => {
            if !addr.ip().is_loopback() && !args.allow_remote {
                anyhow::bail!("--http {addr} is not a loopback address; add --allow-remote to serve it");
            }
            let token = http_token(args.token_file.as_deref())?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            Some((listener, token))
        }
    };
    let comp = Composition::start_with(composition, &["approval"], Pending::Refuse).await?;
    let options = McpOptions {
        server_name: "dsh-bash".to_owned(),
        server_version: env!("CARGO_PKG_VERSION").to_owned(),
        workspace_root: composition.workspace_root.as_deref().map(dsh_core::home::absolutize),
        elicitation: !args.no_elicitation,
        http_idle_timeout: std::time::Duration::from_secs(args.idle_timeout),
        shutdown: interrupted.token().clone(),
        handle_signals: false,
        ..McpOptions::default()
    };
    let ctx = comp.into_context();
    match http {
        Some((listener, token)) => {
            let local = listener.local_addr().context("the listener has no local address")?;
            eprintln!("{}", start_line(local, &token));
            dsh_mcp::serve_http_on(ctx, options, listener, token.secret().to_owned()).await?
        }
        None => dsh_mcp::serve_stdio(ctx, options).await?,
    }
    Ok(0)
}

/// `--token-file`, else `$DSH_MCP_TOKEN`, else a fresh random token. A named source that holds
/// no token is an error, never a silent fallback.
fn http_token(file: Option<&Path>) -> anyhow::Result<Token> {
    if let Some(file) = file {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the token file {}", file.display()))?;
        let token = text.trim();
        anyhow::ensure!(!token.is_empty(), "the token file {} is empty", file.display());
        anyhow::ensure!(
            token.bytes().all(|b| b.is_ascii_graphic()),
            "the token in {} must be printable ASCII without spaces",
            file.display()
        );
        return Ok(Token::Given(token.to_owned()));
    }
    match std::env::var(TOKEN_VAR) {
        Ok(token) if !token.trim().is_empty() => Ok(Token::Given(token.trim().to_owned())),
        Ok(_) => anyhow::bail!("${TOKEN_VAR} is set but empty"),
        Err(_) => Ok(Token::Generated(generate_token())),
    }
}

fn generate_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().fold(String::with_capacity(64), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

/// The one line printed on stderr once the HTTP listener is bound.
fn start_line(local: SocketAddr, token: &Token) -> String {
    let url = format!("http://{local}{}", dsh_mcp::MCP_PATH);
    match token {
        Token::Given(_) => format!("dsh-bash: serving MCP at {url}"),
        Token::Generated(token) => {
            format!("dsh-bash: serving MCP at {url} (Authorization: Bearer {token}; shown once)")
        }
    }
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
