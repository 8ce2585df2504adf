//! The `dsh-bash` binary (a **host**): composes the plugins and runs tool calls as a model
//! would (`call`, `batch`), serves them over MCP (`mcp`), and prints what a model sees
//! (`schema`, `prompt`) or what the host offers (`doctor`).
//!
//! It is a thin layer of argument parsing and output formatting over the library crates; it
//! implements no tool, executor or service behaviour of its own beyond the plugin glue for
//! crates that expose constructors only.
//!
//! Invoked under the name `dsh-askpass` (the link the askpass variables name) it is the
//! askpass program instead (see `dsh_askpass::client`).
//!
//! Before anything else it makes itself non-dumpable and takes `$DSH_MCP_TOKEN` out of its
//! environment, so the commands it runs cannot read its secrets (see `hardening`).
//!
//! Exit codes: 0 success, 1 the tool result is an error (or `doctor` found a problem),
//! 2 usage or start-up failure (one line on stderr).

mod batch;
mod call;
mod doctor;
mod hardening;
mod interrupt;
mod mcp;
mod progress;
mod prompt;
mod schema;
mod standing;

// The composition, its options and one call live in the library (`dsh_bash`); these names
// keep `crate::…` paths of the subcommand modules pointing at them.
use dsh_bash::{catalog, cli, composition, request, sessions};

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser as _;

use crate::cli::{Cli, Command};

/// Large buffers (a command's output held in memory, a big result being rendered) get pages
/// of their own that go back to the system as soon as they are freed. By default glibc raises
/// its mmap threshold to the size of each such buffer freed (up to 32 MiB), after which
/// buffers of that size come from the per-thread heaps and stay resident: a server that ran a
/// few jobs with megabytes of output would keep tens of megabytes it no longer uses. A fixed
/// threshold turns that adjustment off.
fn return_large_buffers_at_once() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

fn main() -> ExitCode {
    // Invoked through the askpass link (`dsh-askpass PROMPT`, by sudo, ssh or git): the
    // askpass program, with none of the host around it. It holds the secret for a moment:
    // no process of the same user may read its memory meanwhile.
    let mut args = std::env::args_os();
    if args.next().is_some_and(|argv0| dsh_askpass::client::invoked_as_askpass(&argv0)) {
        if let Err(e) = hardening::forbid_inspection() {
            eprintln!("dsh-askpass: cannot make the process non-dumpable: {e}");
            return ExitCode::from(1);
        }
        return ExitCode::from(dsh_askpass::client::run(
            args,
            std::env::var_os(dsh_askpass::SOCKET_VARIABLE),
        ));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    return_large_buffers_at_once();
    // SAFETY: single-threaded here: nothing has started a thread yet (the runtime starts below).
    let env_token = unsafe { hardening::take_env_var(mcp::TOKEN_VAR) };
    if let Err(e) = hardening::forbid_inspection() {
        return fail(&anyhow::anyhow!("cannot make the process non-dumpable: {e}"));
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    // A stdio MCP server serves one session, whose calls run one at a time, and `batch` runs
    // its lines one at a time: a single worker thread does that work without waking a second
    // one on every call, which on two CPUs cost about 3% of a `true` round trip, and the
    // upkeep after a call waits until its answer is written. `TOKIO_WORKER_THREADS` still
    // decides when set.
    let one_at_a_time = match &cli.command {
        Command::Mcp(args) => args.http.is_none(),
        Command::Batch => true,
        _ => false,
    };
    if one_at_a_time && std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        runtime.worker_threads(1);
    }
    let runtime = match runtime.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&anyhow::anyhow!("cannot start the async runtime: {e}")),
    };
    let outcome = runtime.block_on(dispatch(cli, env_token));
    // Everything the composition owned was disposed and awaited; whatever is left (a blocked
    // terminal read, a timer) must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_millis(200));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => fail(&e),
    }
}

async fn dispatch(cli: Cli, env_token: Option<std::ffi::OsString>) -> anyhow::Result<u8> {
    let composition = cli.composition;
    match cli.command {
        Command::Call(args) => call::run(&composition, args).await,
        Command::Batch => batch::run(&composition).await,
        Command::Schema(args) => schema::run(&composition, args).await,
        Command::Prompt => prompt::run(&composition).await,
        Command::Doctor => doctor::run(&composition).await,
        Command::Mcp(args) => mcp::run(&composition, args, env_token).await,
    }
}

/// A command line clap refused: help and version are printed as asked (exit 0); a usage
/// error is one line on stderr, `dsh-bash: <what is wrong> (<hint>)`, exit 2.
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = error.print();
        let code = if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand { 2 } else { 0 };
        return ExitCode::from(code);
    }
    let args: Vec<String> = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    eprintln!("dsh-bash: {}", usage_error_line(&error.render().to_string(), &args));
    ExitCode::from(2)
}

/// The subcommands, as `--help` hints name them.
const SUBCOMMANDS: [&str; 6] = ["call", "batch", "schema", "prompt", "doctor", "mcp"];

/// clap's rendered error (`error: …` with its continuation lines, tips, a usage block and a
/// pointer to `--help`) as one line: the error, its tips, and the `--help` of the subcommand
/// named in `args` (else the command's own).
fn usage_error_line(rendered: &str, args: &[String]) -> String {
    let mut paragraphs = rendered.split("\n\n").map(str::trim).filter(|p| !p.is_empty());
    let first = paragraphs.next().unwrap_or("error: invalid command line");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let mut line = first.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    for paragraph in paragraphs {
        if let Some(tip) = paragraph.strip_prefix("tip: ") {
            line.push_str("; ");
            line.push_str(&tip.lines().map(str::trim).collect::<Vec<_>>().join(" "));
        }
    }
    let help = match args.iter().find(|a| SUBCOMMANDS.contains(&a.as_str())) {
        Some(subcommand) => format!("dsh-bash {subcommand} --help"),
        None => "dsh-bash --help".to_owned(),
    };
    format!("{line} (see `{help}`)")
}

/// One line on stderr, exit 2.
fn fail(error: &anyhow::Error) -> ExitCode {
    let message = format!("{error:#}").replace('\n', " ");
    eprintln!("dsh-bash: {message}");
    ExitCode::from(2)
}
