//! `dsh-bash call [OPTIONS] TOOL ARGS_JSON`: one call through a fresh composition.
//!
//! Prints the model-facing text exactly (no newline added, except one when stdout is a
//! terminal and the text does not end with one), or with `--json` one line
//! `{"content","isError","structured","presentCall","presentResult"}`. Exit 0 for a result,
//! 1 for `isError`; with `--exit-status` a `bash` result exits with the command's own status
//! instead. Start-up and usage failures are errors of this function (exit 2), and so are a
//! tool name the composition does not register (the one-line error lists the tools; a
//! model-facing host such as `batch` or `mcp` answers it with the usual
//! `Error: unknown tool "<name>"` result instead) and a background `bash` call (its job would
//! die with this process before doing its work).
//!
//! `--approve` (or `--askpass-answer-file`) without `--session` makes the call as the agent of
//! an implicit session of this one call (kept in memory, not persisted), so that an
//! escalation (or a secret question) has an agent to ask for.

use std::io::{IsTerminal as _, Write};
use std::sync::Arc;

use anyhow::Context as _;
use dsh_core::{AGENTS, Agent};
use serde_json::Value;

use crate::cli::{CallArgs, CompositionArgs};
use crate::composition::{Composition, Pending};
use crate::interrupt;
use crate::request::{self, CallOutcome};
use crate::sessions::Sessions;

/// Why `call` refuses `run_in_background`.
pub const BACKGROUND_REFUSED: &str = "run_in_background needs a host that outlives the call: \
    `dsh-bash call` ends right after it and would kill the job; use `dsh-bash batch` or \
    `dsh-bash mcp`, or drop run_in_background to wait for the command";

pub async fn run(composition: &CompositionArgs, args: CallArgs) -> anyhow::Result<u8> {
    let tool_args: Value = serde_json::from_str(&args.args_json)
        .map_err(|e| anyhow::anyhow!("ARGS_JSON is not valid JSON: {e}"))?;
    let comp = Composition::start(composition, Pending::Refuse).await?;
    let outcome = call_in(&comp, composition, &args, tool_args).await;
    comp.dispose().await;
    let outcome = outcome?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let line = serde_json::to_string(&outcome.to_json()).context("serializing the result")?;
        writeln!(stdout, "{line}").context("writing stdout")?;
    } else {
        let text = outcome.text();
        stdout.write_all(text.as_bytes()).context("writing stdout")?;
        // A shell prompt must not land on the last output line.
        if !text.is_empty() && !text.ends_with('\n') && std::io::stdout().is_terminal() {
            stdout.write_all(b"\n").context("writing stdout")?;
        }
    }
    stdout.flush().context("writing stdout")?;
    Ok(if args.exit_status { command_status(&outcome) } else { outcome.exit_code() })
}

async fn call_in(
    comp: &Composition,
    composition: &CompositionArgs,
    args: &CallArgs,
    tool_args: Value,
) -> anyhow::Result<CallOutcome> {
    let tools = comp.tools()?;
    let Some(tool) = tools.get(&args.tool) else {
        let names: Vec<String> = tools.schemas().into_iter().map(|s| s.name).collect();
        anyhow::bail!("unknown tool {:?} (this composition has: {})", args.tool, names.join(", "));
    };
    // Only where the tool offers background runs: without the parameter the tool itself
    // answers a forced one the model's way.
    let offers_background = tool.parameters().names().any(|name| name == "run_in_background");
    if offers_background && tool_args.get("run_in_background") == Some(&Value::Bool(true)) {
        anyhow::bail!(BACKGROUND_REFUSED);
    }
    let agent = match &args.session {
        Some(id) => {
            Some(Sessions::default().open(comp.ctx(), id, args.cwd.as_deref()).map_err(anyhow::Error::msg)?)
        }
        None if composition.approve.is_some() || composition.askpass_answer_file.is_some() => {
            Some(implicit_agent(comp)?)
        }
        None => None,
    };
    let signal = interrupt::on_interrupt();
    // Live status line while the command runs (see `progress`).
    let outcome = crate::progress::with_status_line(&args.tool, args.quiet, |probe| {
        request::call_observed(&tools, &args.tool, tool_args, agent, signal, probe)
    })
    .await;
    outcome.map_err(anyhow::Error::msg)
}

/// The agent of a session that lives for this one call: registered so that approvals and
/// escalations can be routed, never persisted.
fn implicit_agent(comp: &Composition) -> anyhow::Result<Arc<Agent>> {
    let agent = Agent::new(format!("call-{}", uuid::Uuid::new_v4()), None);
    if let Some(agents) = comp.ctx().get(AGENTS) {
        agents.register(Arc::clone(&agent)).map_err(anyhow::Error::msg)?;
    }
    Ok(agent)
}

/// `--exit-status`: the status a shell would report for the command of a `bash` result
/// (exit code; 128+N for signal N; 124 timed out; 130 interrupted). Any other result keeps
/// the default mapping (0 result, 1 `isError`).
fn command_status(outcome: &CallOutcome) -> u8 {
    let value = match &outcome.result.value {
        Some(value) if !outcome.result.is_error && value["kind"] == "foreground" => value,
        _ => return outcome.exit_code(),
    };
    if value["timedOut"] == Value::Bool(true) {
        return 124;
    }
    if value["aborted"] == Value::Bool(true) {
        return 130;
    }
    if let Some(code) = value["exitCode"].as_i64() {
        return u8::try_from(code.rem_euclid(256)).unwrap_or(1);
    }
    match value["signal"].as_str().and_then(dsh_subprocess::signal_number) {
        Some(number) => u8::try_from(128 + number).unwrap_or(u8::MAX),
        None => outcome.exit_code(),
    }
}
