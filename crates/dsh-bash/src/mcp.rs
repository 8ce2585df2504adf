//! `dsh-bash mcp [--http ADDR [--token-file FILE] [--allow-remote] [--idle-timeout SECS]
//! [--allow-origin ORIGIN]... [--header-timeout SECS] [--max-connections N] [--max-sessions N]]
//! [--no-elicitation]`: the composition's tools served over the Model Context Protocol, on
//! stdio by default.
//!
//! The approval service is always part of an MCP composition: MCP elicitation is its answer
//! channel (unless `--no-elicitation`, or an `--approve` answer is given). The server owns the
//! composition and disposes it when the client goes away or on SIGINT/SIGTERM (handled from the
//! first instruction on, so a signal during start-up is a clean shutdown too). Logs go to
//! stderr, filtered by `RUST_LOG` (`tracing-subscriber` directives; `warn` by default).
//!
//! Over HTTP the listener is bound before the composition starts, so a bad address costs
//! nothing, and the start line on stderr names the real address (port 0 picks a free one).
//! The bearer token comes from `--token-file`, else `$DSH_MCP_TOKEN`, else it is generated
//! (256 random bits) and written to a file of the user's, `<DSH_HOME>/mcp/http-<ip>-<port>.token`
//! (directory `0700`, file `0600`), which the start line names; the token itself is never
//! printed (MCP clients keep server logs). The file is removed when the server ends.
//!
//! The token is what lets a client answer approvals, so the commands this server runs must not
//! get it: `$DSH_MCP_TOKEN` left the process environment before anything started (see
//! `hardening`), and the token file is masked from confined commands by the local sandbox
//! provider (a `--token-file` as a masked path; `<DSH_HOME>/mcp` is denied to every confined
//! command of every composition).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use dsh_mcp::McpOptions;

use crate::cli::{CompositionArgs, McpArgs};
use crate::composition::{Composition, HostNeeds, Pending};

/// Printed on stderr when `mcp` serves stdio and stdin is a terminal: a person started it by hand.
pub const STDIO_TERMINAL_HINT: &str = "dsh-bash: waiting for an MCP client on stdin (JSON-RPC lines); \
     configure your agent to start `dsh-bash mcp`, or try a tool by hand with \
     `dsh-bash call bash '{\"command\":\"echo hello\",\"description\":\"Say hello\"}'`. Ctrl-C stops.";

/// The environment variable holding the HTTP bearer token.
pub const TOKEN_VAR: &str = "DSH_MCP_TOKEN";

/// Where the HTTP bearer token came from; a generated one is written to a file of the user's.
enum Token {
    Given(String),
    Generated(String),
}

/// The directory generated tokens are written to: `<DSH_HOME>/mcp` (the local sandbox denies
/// it to confined commands).
fn token_dir() -> std::path::PathBuf {
    let ambient = std::env::var("DSH_HOME").ok();
    dsh_core::home::resolve_dsh_home(None, ambient.as_deref()).join("mcp")
}

/// The harness's effective user id (the owner the token directory must have).
#[cfg(target_os = "linux")]
fn effective_uid() -> Option<u32> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    Some(unsafe { libc::geteuid() })
}

/// Not checked where it cannot be asked for without a further dependency.
#[cfg(not(target_os = "linux"))]
fn effective_uid() -> Option<u32> {
    None
}

/// A generated token's file, removed when the server ends.
struct TokenFile(std::path::PathBuf);

impl Drop for TokenFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes a generated `token` for the server at `local` to
/// `<dir>/http-<ip>-<port>.token`: the directory made `0700` (it must be a directory of the
/// user's, not a symlink), the file created anew with mode `0600` (never through a symlink;
/// an earlier server's file at that name is replaced).
fn write_token_file(dir: &Path, local: SocketAddr, token: &str) -> anyhow::Result<TokenFile> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create the token directory {}", dir.display()))?;
    let meta = std::fs::symlink_metadata(dir)
        .with_context(|| format!("cannot inspect the token directory {}", dir.display()))?;
    anyhow::ensure!(
        meta.is_dir() && effective_uid().is_none_or(|euid| meta.uid() == euid),
        "the token directory {} is not a directory of this user's",
        dir.display()
    );
    if meta.permissions().mode() & 0o777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make the token directory {} private", dir.display()))?;
    }
    let path = dir.join(format!("http-{}-{}.token", local.ip(), local.port()));
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(anyhow::Error::from(e).context(format!("cannot replace {}", path.display())));
        }
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot create the token file {}", path.display()))?;
    let file_guard = TokenFile(path);
    file.write_all(format!("{token}\n").as_bytes())
        .with_context(|| format!("cannot write the token file {}", file_guard.0.display()))?;
    Ok(file_guard)
}

impl Token {
    fn secret(&self) -> &str {
        match self {
            Token::Given(token) | Token::Generated(token) => token,
        }
    }
}

/// Serves MCP. `env_token` is `$DSH_MCP_TOKEN` as it was at start (the variable itself is
/// gone from the environment by now).
pub async fn run(
    composition: &CompositionArgs,
    args: McpArgs,
    env_token: Option<OsString>,
) -> anyhow::Result<u8> {
    init_logging();
    // Handlers first: a SIGTERM that arrives while the server starts is a clean shutdown.
    let interrupted = crate::interrupt::on_interrupt();
    let mut host = HostNeeds { plugins: &["approval"], ..HostNeeds::default() };
    let http = match args.http {
        None => None,
        Some(addr) => {
            if !addr.ip().is_loopback() && !args.allow_remote {
                anyhow::bail!("--http {addr} is not a loopback address; add --allow-remote to serve it");
            }
            let token = http_token(args.token_file.as_deref(), env_token)?;
            if let Some(file) = &args.token_file {
                let canonical = std::fs::canonicalize(file)
                    .with_context(|| format!("cannot resolve the token file {}", file.display()))?;
                host.masked_paths.push(canonical);
            }
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            // Written before the composition starts, so the sandbox finds it to hide.
            let file = match &token {
                Token::Generated(secret) => {
                    let local = listener.local_addr().context("the listener has no local address")?;
                    Some(write_token_file(&token_dir(), local, secret)?)
                }
                Token::Given(_) => None,
            };
            Some((listener, token, file))
        }
    };
    let comp = Composition::start_with(composition, &host, Pending::Refuse).await?;
    let options = McpOptions {
        server_name: "dsh-bash".to_owned(),
        server_version: env!("CARGO_PKG_VERSION").to_owned(),
        workspace_root: composition.workspace_root.as_deref().map(dsh_core::home::absolutize),
        elicitation: !args.no_elicitation,
        instructions_with_identity: args.instructions_with_identity,
        instructions_standing: crate::standing::instructions(comp.ctx()),
        http_idle_timeout: Duration::from_secs(args.idle_timeout),
        http_allowed_origins: args.allow_origin,
        http_header_timeout: Duration::from_secs(args.header_timeout),
        http_max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
        http_max_sessions: usize::try_from(args.max_sessions).unwrap_or(usize::MAX),
        http_on_no_sessions: Some(release_freed_memory),
        shutdown: interrupted.token().clone(),
        handle_signals: false,
        ..McpOptions::default()
    };
    let ctx = comp.into_context();
    match http {
        Some((listener, token, file)) => {
            let local = listener.local_addr().context("the listener has no local address")?;
            eprintln!("{}", start_line(local, file.as_ref().map(|f| f.0.as_path())));
            dsh_mcp::serve_http_on(ctx, options, listener, token.secret().to_owned()).await?;
            drop(file);
        }
        None => {
            if std::io::stdin().is_terminal() {
                eprintln!("{STDIO_TERMINAL_HINT}");
            }
            dsh_mcp::serve_stdio(ctx, options).await?
        }
    }
    Ok(0)
}

/// `--token-file`, else `$DSH_MCP_TOKEN`, else a fresh random token. A named source that holds
/// no token is an error, never a silent fallback.
fn http_token(file: Option<&Path>, env_token: Option<OsString>) -> anyhow::Result<Token> {
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
    match env_token.map(OsString::into_string) {
        Some(Ok(token)) if !token.trim().is_empty() => Ok(Token::Given(token.trim().to_owned())),
        Some(Ok(_)) => anyhow::bail!("${TOKEN_VAR} is set but empty"),
        Some(Err(_)) => anyhow::bail!("${TOKEN_VAR} is not valid UTF-8"),
        None => Ok(Token::Generated(generate_token())),
    }
}

fn generate_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().fold(String::with_capacity(64), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

/// The one line printed on stderr once the HTTP listener is bound; it names the file of a
/// generated token, never a token.
fn start_line(local: SocketAddr, token_file: Option<&Path>) -> String {
    let url = format!("http://{local}{}", dsh_mcp::MCP_PATH);
    match token_file {
        None => format!("dsh-bash: serving MCP at {url}"),
        Some(file) => format!("dsh-bash: serving MCP at {url} (bearer token in {})", file.display()),
    }
}

/// Gives the pages glibc's allocator keeps after a burst of sessions back to the system
/// (called once the last HTTP session is torn down), so the server's RSS returns to its
/// baseline instead of staying at the burst's high-water mark.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the system; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The log filter without `RUST_LOG`: warnings, but not the MCP library's warning for each
/// request it answers with an error or cannot answer. Those are the client's to see, in the
/// answer it gets, and a client's ordinary steps make them (a client probing for a revision or
/// a method the server does not offer, then falling back). `RUST_LOG=warn` shows them.
const DEFAULT_LOG_FILTER: &str = "warn,rmcp::service=error";

/// Logs on stderr, filtered by `RUST_LOG` (`tracing-subscriber` directives: a level such as
/// `info`, or per target, `warn,dsh_mcp=debug`); when it is unset or unparseable,
/// [`DEFAULT_LOG_FILTER`]. The MCP library's per-message trace events are never logged: a client's answer to a
/// secret question (askpass) would be in them.
///
/// Both filters are global, so a span or event they turn away is never made: each callsite is
/// asked once. (As two filters nested on the one layer, the library's `info` span around its
/// serve loop was made anyway and entered and left on every poll, on every message.)
fn init_logging() {
    use tracing_subscriber::{EnvFilter, filter::filter_fn, layer::SubscriberExt as _};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    // A cap, not a directive: a directive `rmcp::service=debug` would turn the library's
    // per-message debug events (every request and result, formatted whole) on by default.
    let no_message_trace =
        filter_fn(|meta| !(*meta.level() == tracing::Level::TRACE && meta.target().starts_with("rmcp")));
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(no_message_trace)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr));
    let _ = tracing::subscriber::set_global_default(subscriber);
}
