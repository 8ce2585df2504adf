//! The command line: subcommands and the composition options every subcommand shares.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Run the model-facing bash tool and its services from the command line.
#[derive(Debug, Parser)]
#[command(name = "dsh-bash", version, about, propagate_version = true)]
pub struct Cli {
    #[allow(missing_docs)] // clap would show a doc comment as help text
    #[command(flatten)]
    pub composition: CompositionArgs,
    #[allow(missing_docs)] // as above
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Make one tool call through a fresh composition and print the model-facing text.
    #[command(long_about = CALL_HELP)]
    Call(CallArgs),
    /// Run JSON Lines tool calls from stdin in one composition, one JSON line out per request.
    #[command(long_about = BATCH_HELP)]
    Batch,
    /// Print the tool schemas the model sees.
    #[command(long_about = SCHEMA_HELP)]
    Schema(SchemaArgs),
    /// Print the assembled system prompt sections.
    #[command(long_about = PROMPT_HELP)]
    Prompt,
    /// Report host facts: bash, spill directory, sandbox runners, plugin states, and a verdict.
    #[command(long_about = DOCTOR_HELP)]
    Doctor,
    /// Serve the tools over the Model Context Protocol (stdio, or streamable HTTP).
    #[command(long_about = MCP_HELP)]
    Mcp(McpArgs),
}

/// The heading of the options every subcommand shares, shown after a subcommand's own.
pub const COMPOSITION_HEADING: &str = "Composition options (any subcommand, before or after it)";

/// `call --help` (the long help, before the options): what it reads and prints.
const CALL_HELP: &str = "\
Make one tool call through a fresh composition and print the model-facing text.

Input: TOOL and ARGS_JSON, one JSON value (the tool's arguments), e.g.
  dsh-bash call bash '{\"command\":\"ls\",\"description\":\"List files\"}'
Output: the model-facing text, byte for byte (a newline added only on a terminal); with
--json one line {\"content\":[...],\"isError\":bool,\"structured\":...,\"presentCall\":...,
\"presentResult\":...}.
Exit status: 0, 1 when the result is an error (isError), 2 for a usage or start-up failure;
with --exit-status the command's own. run_in_background is refused: use batch or mcp.";

/// `batch --help`: the JSON Lines formats.
const BATCH_HELP: &str = "\
Run JSON Lines tool calls from stdin in one composition, one JSON line out per request.

Input (stdin): JSON Lines, one request per line, run in order in one composition (sessions
and background jobs persist from line to line):
  {\"tool\":\"bash\",\"args\":{\"command\":\"pwd\",\"description\":\"Show cwd\"},\"session\":\"s1\",\"cwd\":\"/srv/p\",\"id\":1}
  args defaults to {}; session, cwd (only with session; fixed at the session's first line)
  and id are optional. Blank lines are skipped.
Output (stdout): one JSON line per request, the `call --json` object plus \"id\" (echoed, null
when absent) and \"notices\" (messages for that session since its previous response, each
{\"text\",\"source\",\"delivery\"}):
  {\"content\":[{\"type\":\"text\",\"text\":\"...\"}],\"isError\":false,\"structured\":{...},\"presentCall\":{...},\"presentResult\":{...},\"id\":1,\"notices\":[]}
A malformed line gets {\"isError\":true, one \"Error: ...\" text} and the batch goes on.
Exit status: 0 at end of input.";

/// `schema --help`: the output shapes.
const SCHEMA_HELP: &str = "\
Print the tool schemas the model sees.

Output: pretty JSON, a list of the tools:
  mcp        [{\"name\",\"description\",\"inputSchema\"}]
  openai     [{\"type\":\"function\",\"function\":{\"name\",\"description\",\"parameters\"}}]
  anthropic  [{\"name\",\"description\",\"input_schema\"}]";

/// `prompt --help`: the output.
const PROMPT_HELP: &str = "\
Print the assembled system prompt sections.

Output: every non-empty prompt section in order, separated by blank lines (no trailing newline).";

/// `doctor --help`: the report and the verdict.
const DOCTOR_HELP: &str = "\
Report host facts: bash, spill directory, sandbox runners, plugin states, and a verdict.

Output: one fact per line (bash, executor, spill directory, writable roots by sandbox mode,
network, sandbox runners, plugins), then the verdict as the last line:
  ok                 everything the composition needs is there
  degraded: <why>    commands run, with less than the composition asks for
  unusable: <why>    commands cannot run as composed
Exit status: 0 ok, 3 degraded, 1 unusable, 2 usage or start-up failure.";

/// `mcp --help`: transports and logs.
const MCP_HELP: &str = "\
Serve the tools over the Model Context Protocol (stdio, or streamable HTTP).

Protocol: MCP, newline-delimited JSON-RPC on stdin/stdout; with --http, streamable HTTP at
http://ADDR/mcp (every request with Authorization: Bearer <token>). Logs go to stderr,
filtered by RUST_LOG (default: warnings, without\na warning for each request answered with an error). The server ends when stdin closes, or on SIGINT/SIGTERM.";

/// How a composition is put together (shared by every subcommand).
#[derive(Clone, Debug, Default, Args)]
#[command(next_help_heading = COMPOSITION_HEADING)]
pub struct CompositionArgs {
    /// TOML composition file: `[<plugin>]` tables set plugin configs; `plugins = [...]` replaces
    /// the default plugin set.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Confine commands: swap the local executor for the sandboxing one with this default mode.
    #[arg(long, global = true, value_name = "MODE", value_parser = ["read-only", "workspace-write", "danger-full-access"])]
    pub sandbox: Option<String>,
    /// Remove `run_in_background` from the bash tool.
    #[arg(long, global = true)]
    pub no_background: bool,
    /// Carry shell state from one call of a session to the next: `cwd` (the directory the
    /// command ended in) or `env` (that, exported variables and functions); tool-bash `persist`.
    #[arg(long, global = true, value_name = "WHAT", value_parser = ["none", "cwd", "env"])]
    pub persist: Option<String>,
    /// Input to running background jobs: background bash jobs keep a writable stdin, the
    /// `job_input` tool writes to it, and a job blocked reading it shows
    /// `[status: waiting for input]` (tool-jobs `input`), its owner is told once when it starts
    /// waiting, and a background call may set `tty: true` to run on a terminal (tool-bash `tty`).
    #[arg(long, global = true)]
    pub interactive: bool,
    /// Working directory of calls without a session cwd (and the sandbox's fallback root).
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace_root: Option<PathBuf>,
    /// Answer every approval request this way (`tty` asks on the controlling terminal).
    #[arg(long, global = true, value_enum, value_name = "ANSWER")]
    pub approve: Option<Approve>,
    /// Secrets asked of the user, never of the model: foreground commands get
    /// `SUDO_ASKPASS`, `SSH_ASKPASS` (with `SSH_ASKPASS_REQUIRE=force`) and `GIT_ASKPASS`,
    /// and each prompt becomes a secret-input question of the approval service (the
    /// `askpass` plugin).
    #[arg(long, global = true)]
    pub askpass: bool,
    /// Answer every secret-input question (askpass) with this file's content, read when
    /// asked, without its final line ending. Confined commands cannot read the file.
    #[arg(long, global = true, value_name = "FILE")]
    pub askpass_answer_file: Option<PathBuf>,
    /// Approval policy of the approval service.
    #[arg(long, global = true, value_name = "POLICY", value_parser = ["ask", "never"])]
    pub approval_policy: Option<String>,
    /// Let workspace-write commands also write under this existing directory (repeatable),
    /// e.g. `--add-dir ../data` for a data directory beside the project (sandbox-policy
    /// `writableRoots`).
    #[arg(long, global = true, value_name = "DIR")]
    pub add_dir: Vec<PathBuf>,
    /// Keep confined commands from reading this file or directory (repeatable), besides the
    /// default credentials under `$HOME` (sandbox-local `denyRead`).
    #[arg(long, global = true, value_name = "PATH")]
    pub deny_read: Vec<PathBuf>,
    /// Replace this harness environment variable's value (8 bytes or more) by
    /// `[redacted:NAME]` in all command output (repeatable; subprocess `redactValues`).
    /// Credential-shaped variables are redacted without it.
    #[arg(long, global = true, value_name = "NAME")]
    pub redact_env: Vec<String>,
    /// Network policy of confined commands (needs --sandbox): `deny` and `ask` run them in a
    /// network namespace of their own, reaching only --allow-host hosts through the harness's
    /// proxy; `ask` asks for any other host (sandbox-policy `network`).
    #[arg(long, global = true, value_name = "POLICY", value_parser = ["allow", "deny", "ask"])]
    pub network: Option<String>,
    /// A host confined commands may reach under --network deny|ask (repeatable): `host`,
    /// `host:port` or `*.suffix` (sandbox-policy `allowHosts`).
    #[arg(long, global = true, value_name = "PATTERN")]
    pub allow_host: Vec<String>,
    /// Bind a secret to hosts (repeatable; needs --network deny|ask): `NAME=HOST,HOST...`,
    /// optionally followed by `;header=NAME` (a header besides Authorization to put it in,
    /// repeatable) and `;file=PATH` (read it there instead of the harness's $NAME). Confined
    /// commands see a placeholder in $NAME; the proxy puts the value into requests to those
    /// hosts only (sandbox-policy `credentials`).
    #[arg(long, global = true, value_name = "NAME=HOSTS")]
    pub credential: Vec<String>,
    /// Verify the hosts credentials are bound to against this PEM file of certificate
    /// authorities instead of the host's trust store (sandbox-policy `credentialsUpstreamCa`).
    #[arg(long, global = true, value_name = "FILE")]
    pub credential_upstream_ca: Option<PathBuf>,
    /// Where commands run: `local` (this host), `container` (one container per harness,
    /// from --image or in --container; plugin shell-container) or `ssh` (on --ssh-host, one
    /// SSH connection per harness; plugin shell-ssh).
    #[arg(long, global = true, value_name = "KIND", value_parser = ["local", "container", "ssh"])]
    pub executor: Option<String>,
    /// The image the container executor creates its container from (shell-container `image`).
    #[arg(long, global = true, value_name = "IMAGE")]
    pub image: Option<String>,
    /// A running container the container executor runs commands in (shell-container
    /// `container`).
    #[arg(long, global = true, value_name = "NAME")]
    pub container: Option<String>,
    /// Memory limit of the container, e.g. `256m` (shell-container `memory`).
    #[arg(long, global = true, value_name = "SIZE")]
    pub memory: Option<String>,
    /// CPU limit of the container, e.g. `1.5` (shell-container `cpus`).
    #[arg(long, global = true, value_name = "CPUS")]
    pub cpus: Option<f64>,
    /// Process limit of the container (shell-container `pidsLimit`).
    #[arg(long, global = true, value_name = "N")]
    pub pids_limit: Option<i64>,
    /// Containers the container executor keeps started ahead, so a new session's first call
    /// waits for no container start (shell-container `warm`).
    #[arg(long, global = true, value_name = "N")]
    pub container_warm: Option<u32>,
    /// The host of `--executor ssh`: `[user@]host[:port]` (shell-ssh `host`). Its key must be in
    /// the known-hosts file: an unknown host is refused, never added.
    #[arg(long, global = true, value_name = "[USER@]HOST[:PORT]")]
    pub ssh_host: Option<String>,
    /// Log in to the SSH host with this private key only (shell-ssh `identity`); default the
    /// ssh agent's keys (SSH_AUTH_SOCK).
    #[arg(long, global = true, value_name = "FILE")]
    pub ssh_identity: Option<PathBuf>,
    /// Check the SSH host's key against this file (shell-ssh `knownHosts`); default
    /// ~/.ssh/known_hosts.
    #[arg(long, global = true, value_name = "FILE")]
    pub ssh_known_hosts: Option<PathBuf>,
    /// Working directory on the SSH host of calls without a session cwd (shell-ssh `cwd`, an
    /// absolute path there); default the harness's own path.
    #[arg(long, global = true, value_name = "DIR")]
    pub ssh_cwd: Option<PathBuf>,
}

/// A scripted or interactive answer to approval requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
// Doc comments on the variants would become clap's help for each value, changing `--help`.
#[allow(missing_docs)]
pub enum Approve {
    AllowedOnce,
    Rejected,
    Cancelled,
    Unavailable,
    Tty,
}

/// `call`'s options and arguments.
#[derive(Debug, Args)]
pub struct CallArgs {
    /// Print one JSON line: content, isError, structured, presentCall, presentResult.
    #[arg(long)]
    pub json: bool,
    /// Make the call as the agent of this session.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The session's working directory (its header cwd).
    #[arg(long, value_name = "DIR", requires = "session")]
    pub cwd: Option<PathBuf>,
    /// Exit with the command's own status: its exit code, 128+N when killed by signal N,
    /// 124 when it timed out, 130 when the call was interrupted (tool errors stay 1).
    #[arg(long)]
    pub exit_status: bool,
    /// No live status line on stderr (spinner, elapsed time, latest output line) while the
    /// command runs; it is shown only when stderr is a terminal. `DSH_NO_PROGRESS=1` does
    /// the same.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Tool name, e.g. `bash`.
    pub tool: String,
    /// Tool arguments as one JSON value, e.g. '{"command":"ls","description":"List files"}'.
    pub args_json: String,
}

/// `mcp`'s options.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio. ADDR is `PORT` (loopback,
    /// 127.0.0.1) or `HOST:PORT`; every request must carry `Authorization: Bearer <token>`.
    #[arg(long, value_name = "ADDR", value_parser = parse_http_addr)]
    pub http: Option<std::net::SocketAddr>,
    /// Let `--http` listen on an address that is not loopback (the token is then the only gate).
    #[arg(long, requires = "http")]
    pub allow_remote: bool,
    /// Read the HTTP bearer token from this file (trimmed). Without it the token is
    /// `$DSH_MCP_TOKEN`, else a fresh random token written (never printed) to a file of the
    /// user's under `$DSH_HOME/mcp`, which the start line names. Confined commands cannot read
    /// either file.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub token_file: Option<PathBuf>,
    /// End an HTTP session after this many seconds with no call running and no request (its
    /// jobs are killed); counted from the end of its last call or its last request.
    #[arg(long, value_name = "SECS", requires = "http", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(1..=30 * 24 * 3600))]
    pub idle_timeout: u64,
    /// Also serve HTTP requests whose `Origin` is exactly this `scheme://host[:port]`
    /// (repeatable). Requests without `Origin`, or from a loopback origin, are always served;
    /// any other `Origin` gets 403.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub allow_origin: Vec<dsh_mcp::Origin>,
    /// Close an HTTP connection that has not sent a complete request head after this many
    /// seconds (also how long a kept-alive connection may sit idle).
    #[arg(long, value_name = "SECS", requires = "http",
          default_value_t = dsh_mcp::DEFAULT_HTTP_HEADER_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_timeout: u64,
    /// The most HTTP connections open at once; further ones are closed at accept.
    #[arg(long, value_name = "N", requires = "http",
          default_value_t = dsh_mcp::DEFAULT_HTTP_MAX_CONNECTIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub max_connections: u64,
    /// The most HTTP sessions open at once; a further `initialize` gets 503 with a JSON-RPC
    /// error naming this cap.
    #[arg(long, value_name = "N", requires = "http",
          default_value_t = dsh_mcp::DEFAULT_HTTP_MAX_SESSIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub max_sessions: u64,
    /// Do not ask approvals through MCP elicitation.
    #[arg(long)]
    pub no_elicitation: bool,
    /// Keep the harness identity line and the persona in the `instructions` sent to the client
    /// (left out by default: they describe the tools to an agent that has its own identity).
    #[arg(long)]
    pub instructions_with_identity: bool,
}

/// `schema`'s options.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Schema dialect.
    #[arg(long, value_enum, default_value_t = SchemaFormat::Mcp)]
    pub format: SchemaFormat,
}

/// The dialect `schema` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
// As for `Approve`: variant docs would change `--help`.
#[allow(missing_docs)]
pub enum SchemaFormat {
    Mcp,
    Openai,
    Anthropic,
}

/// `--http ADDR`: a bare port means loopback (`127.0.0.1:PORT`); otherwise a socket address
/// (`HOST:PORT`, `[V6]:PORT`) or a resolvable `NAME:PORT` (`localhost:8080`).
pub fn parse_http_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or_else(|| format!("{text:?} resolves to no address")),
        Err(_) => Err(format!("expected PORT or HOST:PORT, got {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_http_addr;

    #[test]
    fn http_addresses_default_to_loopback() {
        assert_eq!(parse_http_addr("8080").expect("port").to_string(), "127.0.0.1:8080");
        assert_eq!(parse_http_addr(" 0 ").expect("port").to_string(), "127.0.0.1:0");
        assert_eq!(parse_http_addr("[::1]:9").expect("v6").to_string(), "[::1]:9");
        assert_eq!(parse_http_addr("10.0.0.1:80").expect("v4").to_string(), "10.0.0.1:80");
        assert!(parse_http_addr("localhost:7").expect("name").ip().is_loopback());
        assert_eq!(parse_http_addr("nope").unwrap_err(), "expected PORT or HOST:PORT, got \"nope\"");
        assert!(parse_http_addr("70000").is_err());
    }
}
