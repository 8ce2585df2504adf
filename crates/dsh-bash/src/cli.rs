//! The command line: subcommands and the composition options every subcommand shares.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Run the model-facing bash tool and its services from the command line.
#[derive(Debug, Parser)]
#[command(name = "dsh-bash", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub composition: CompositionArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Make one tool call through a fresh composition and print the model-facing text.
    Call(CallArgs),
    /// Run JSON Lines tool calls from stdin in one composition, one JSON line out per request.
    Batch,
    /// Print the tool schemas the model sees.
    Schema(SchemaArgs),
    /// Print the assembled system prompt sections.
    Prompt,
    /// Report host facts: bash, spill directory, sandbox runners, plugin states.
    Doctor,
    /// Serve the tools over the Model Context Protocol (stdio, or streamable HTTP).
    Mcp(McpArgs),
}

/// How a composition is put together (shared by every subcommand).
#[derive(Clone, Debug, Default, Args)]
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
    /// Working directory of calls without a session cwd (and the sandbox's fallback root).
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace_root: Option<PathBuf>,
    /// Answer every approval request this way (`tty` asks on the controlling terminal).
    #[arg(long, global = true, value_enum, value_name = "ANSWER")]
    pub approve: Option<Approve>,
    /// Approval policy of the approval service.
    #[arg(long, global = true, value_name = "POLICY", value_parser = ["ask", "never"])]
    pub approval_policy: Option<String>,
}

/// A scripted or interactive answer to approval requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Approve {
    AllowedOnce,
    Rejected,
    Cancelled,
    Unavailable,
    Tty,
}

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
    /// Tool name, e.g. `bash`.
    pub tool: String,
    /// Tool arguments as one JSON value, e.g. '{"command":"ls","description":"List files"}'.
    pub args_json: String,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio; every request must carry
    /// `Authorization: Bearer $DSH_MCP_TOKEN`.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Do not ask approvals through MCP elicitation.
    #[arg(long)]
    pub no_elicitation: bool,
}

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Schema dialect.
    #[arg(long, value_enum, default_value_t = SchemaFormat::Mcp)]
    pub format: SchemaFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SchemaFormat {
    Mcp,
    Openai,
    Anthropic,
}
