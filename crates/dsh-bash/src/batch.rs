//! `dsh-bash batch`: JSON Lines requests on stdin, run in order in one composition.
//!
//! Request: `{"tool":"bash","args":{…},"session":"s1","cwd":"/dir","id":7}` (`args` defaults
//! to `{}`; `session`, `cwd`, `id` optional). Response, one line per request: the `call --json`
//! object plus `"id"` (echoed, `null` when absent) and `"notices"` (messages delivered to the
//! session since its previous response, as `{"text","source","delivery"}`). A malformed line
//! (invalid UTF-8 included) gets an `isError` response and the batch goes on. Sessions and
//! jobs live until EOF, when the composition is torn down.

use anyhow::Context as _;
use dsh_bash::batch_line::{BatchRequest, LineError, parse_bytes};
use std::sync::Arc;

use dsh_core::{AbortSignal, Agent, Context, ToolRegistry};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::cli::CompositionArgs;
use crate::composition::{Composition, Pending};
use crate::interrupt;
use crate::request::{self, CallOutcome};
use crate::sessions::Sessions;

pub async fn run(composition: &CompositionArgs) -> anyhow::Result<u8> {
    let comp = Composition::start(composition, Pending::Refuse).await?;
    // The loop runs on a runtime worker, not on the thread that called `block_on`: the worker
    // that is woken by a line on stdin, or by the end of a command, then runs the loop itself
    // instead of waking another thread for it.
    let outcome = match comp.tools() {
        Ok(tools) => tokio::spawn(serve(comp.ctx().clone(), tools))
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("the batch loop failed: {e}"))),
        Err(e) => Err(e),
    };
    comp.dispose().await;
    outcome.map(|()| 0)
}

async fn serve(ctx: Context, tools: Arc<ToolRegistry>) -> anyhow::Result<()> {
    let interrupted = interrupt::on_interrupt();
    let mut sessions = Sessions::default();
    let (stdin, mut stdout) = dsh_mcp::stdio_streams();
    let mut stdin = BufReader::new(stdin);
    let mut line = Vec::new();
    loop {
        let more = tokio::select! {
            more = next_line(&mut stdin, &mut line) => more.context("reading stdin")?,
            _ = interrupted.aborted() => false,
        };
        if !more {
            break;
        }
        if std::str::from_utf8(&line).is_ok_and(|text| text.trim().is_empty()) {
            continue;
        }
        let response = respond(&ctx, &tools, &mut sessions, parse_bytes(&line), &interrupted).await;
        let mut text = serde_json::to_string(&response).context("serializing a response")?;
        text.push('\n');
        stdout.write_all(text.as_bytes()).await.context("writing stdout")?;
        stdout.flush().await.context("writing stdout")?;
        dsh_mcp::answer_written();
        if interrupted.is_aborted() {
            break;
        }
    }
    Ok(())
}

/// Reads the next line into `line` (bytes, so that a line which is not UTF-8 is answered
/// like any other malformed line), without its `\n` or `\r\n`; false at end of input.
async fn next_line(input: &mut (impl AsyncBufRead + Unpin), line: &mut Vec<u8>) -> std::io::Result<bool> {
    line.clear();
    if input.read_until(b'\n', line).await? == 0 {
        return Ok(false);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    Ok(true)
}

async fn respond(
    ctx: &Context,
    tools: &ToolRegistry,
    sessions: &mut Sessions,
    parsed: Result<BatchRequest, LineError>,
    signal: &AbortSignal,
) -> Value {
    let request = match parsed {
        Ok(request) => request,
        Err(LineError { id, message }) => return response(CallOutcome::host_error(&message), id, None),
    };
    let id = request.id;
    let agent = match &request.session {
        None => None,
        Some(session) => match sessions.open(ctx, session, request.cwd.as_deref()) {
            Ok(agent) => Some(agent),
            Err(e) => return response(CallOutcome::host_error(&e.to_string()), id, None),
        },
    };
    let outcome = request::call(tools, &request.tool, request.args, agent.clone(), signal.clone())
        .await
        .unwrap_or_else(|e| CallOutcome::host_error(&e.to_string()));
    response(outcome, id, agent.as_deref())
}

/// The response line: the call object, `id`, and the session's drained notices.
fn response(outcome: CallOutcome, id: Value, agent: Option<&Agent>) -> Value {
    let mut out = outcome.to_json();
    out.insert("id".into(), id);
    let notices: Vec<Value> = agent
        .map(|agent| {
            agent
                .take_inbox()
                .into_iter()
                .map(|(delivery, message)| {
                    json!({ "text": message.text, "source": message.source, "delivery": delivery })
                })
                .collect()
        })
        .unwrap_or_default();
    out.insert("notices".into(), Value::Array(notices));
    Value::Object(out)
}
