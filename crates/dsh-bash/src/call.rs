//! `dsh-bash call [OPTIONS] TOOL ARGS_JSON`: one call through a fresh composition.
//!
//! Prints the model-facing text exactly (no newline added), or with `--json` one line
//! `{"content","isError","structured","presentCall","presentResult"}`. Exit 0 for a result,
//! 1 for `isError`; start-up and usage failures are errors of this function (exit 2), and so
//! is a tool name the composition does not register (the one-line error lists the tools; a
//! model-facing host such as `batch` or `mcp` answers it with the contract's
//! `Error: unknown tool "<name>"` result instead).

use std::io::Write;

use anyhow::Context as _;
use serde_json::Value;

use crate::cli::{CallArgs, CompositionArgs};
use crate::composition::{Composition, Pending};
use crate::interrupt;
use crate::request::{self, CallOutcome};
use crate::sessions::Sessions;

pub async fn run(composition: &CompositionArgs, args: CallArgs) -> anyhow::Result<u8> {
    let tool_args: Value = serde_json::from_str(&args.args_json)
        .map_err(|e| anyhow::anyhow!("ARGS_JSON is not valid JSON: {e}"))?;
    let comp = Composition::start(composition, Pending::Refuse).await?;
    let outcome = call_in(&comp, &args, tool_args).await;
    comp.dispose().await;
    let outcome = outcome?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let line = serde_json::to_string(&outcome.to_json()).context("serializing the result")?;
        writeln!(stdout, "{line}").context("writing stdout")?;
    } else {
        stdout.write_all(outcome.text().as_bytes()).context("writing stdout")?;
    }
    stdout.flush().context("writing stdout")?;
    Ok(outcome.exit_code())
}

async fn call_in(comp: &Composition, args: &CallArgs, tool_args: Value) -> anyhow::Result<CallOutcome> {
    let tools = comp.tools()?;
    if tools.get(&args.tool).is_none() {
        let names: Vec<String> = tools.schemas().into_iter().map(|s| s.name).collect();
        anyhow::bail!("unknown tool {:?} (this composition has: {})", args.tool, names.join(", "));
    }
    let agent = match &args.session {
        Some(id) => {
            Some(Sessions::default().open(comp.ctx(), id, args.cwd.as_deref()).map_err(anyhow::Error::msg)?)
        }
        None => None,
    };
    let signal = interrupt::on_interrupt();
    request::call(&tools, &args.tool, tool_args, agent, signal).await.map_err(anyhow::Error::msg)
}
