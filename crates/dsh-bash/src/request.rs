//! One tool call as a host makes it, and the JSON object `call --json` and `batch` print.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dsh_core::tools::OutputProbeSlot;
use dsh_core::{
    AbortSignal, Agent, AgentStatus, ContentBlock, SessionError, ToolExec, ToolRegistry, ToolResult,
};
use serde_json::{Map, Value, json};

/// A finished call with the UI render intents of its arguments and result.
pub struct CallOutcome {
    /// The tool's result: content, `is_error`, the canonical value.
    pub result: ToolResult,
    /// The UI render intent of the arguments, when the tool has one.
    pub present_call: Option<Value>,
    /// The UI render intent of the result, when the tool has one.
    pub present_result: Option<Value>,
}

static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// Makes one call. With an agent, the call runs inside a turn of its session (opened before,
/// closed after) while the agent is busy; a session log that cannot record the turn's start
/// refuses the call (the `Err`).
pub async fn call(
    tools: &ToolRegistry,
    tool: &str,
    args: Value,
    agent: Option<Arc<Agent>>,
    signal: AbortSignal,
) -> Result<CallOutcome, SessionError> {
    call_observed(tools, tool, args, agent, signal, OutputProbeSlot::new()).await
}

/// [`call`] with `probe` as the call's output-probe slot: a host keeping a clone of it can ask
/// for the running command's latest output line (see [`OutputProbeSlot::latest_line`]).
pub async fn call_observed(
    tools: &ToolRegistry,
    tool: &str,
    args: Value,
    agent: Option<Arc<Agent>>,
    signal: AbortSignal,
    probe: OutputProbeSlot,
) -> Result<CallOutcome, SessionError> {
    if let Some(agent) = &agent {
        agent.session().begin_turn()?;
        agent.set_status(AgentStatus::Busy);
    }
    let call_id = format!("call-{}", NEXT_CALL.fetch_add(1, Ordering::Relaxed));
    let present_call = tools.present_call(tool, &args);
    let exec = ToolExec::new(agent.clone(), call_id).with_signal(signal).with_output_probe(probe);
    let result = tools.call(tool, args.clone(), exec).await;
    let present_result = tools.present_result(tool, &args, &result);
    if let Some(agent) = &agent {
        agent.set_status(AgentStatus::Idle);
        // The call has happened: a log that cannot record the turn's end must not hide it.
        if let Err(e) = agent.session().end_turn() {
            eprintln!("dsh-bash: warning: session \"{}\": {e}", agent.id());
        }
    }
    Ok(CallOutcome { result, present_call, present_result })
}

impl CallOutcome {
    /// A failure the host itself reports (malformed request, session refused).
    pub fn host_error(message: &str) -> Self {
        Self {
            result: ToolResult {
                is_error: true,
                value: None,
                content: vec![ContentBlock::text(format!("Error: {message}"))],
                error: Some(dsh_core::ToolError::plain(message)),
            },
            present_call: None,
            present_result: None,
        }
    }

    /// `{"content","isError","structured","presentCall","presentResult"}` in that order.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert("content".into(), json!(self.result.content));
        out.insert("isError".into(), Value::Bool(self.result.is_error));
        out.insert("structured".into(), self.result.value.clone().unwrap_or(Value::Null));
        out.insert("presentCall".into(), self.present_call.clone().unwrap_or(Value::Null));
        out.insert("presentResult".into(), self.present_result.clone().unwrap_or(Value::Null));
        out
    }

    /// The model-facing text: every text block, concatenated.
    pub fn text(&self) -> String {
        self.result.text()
    }

    /// 0 for a result, 1 for `isError`.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.result.is_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::Context;

    #[tokio::test]
    async fn a_session_that_cannot_open_the_turn_refuses_the_call() {
        let ctx = Context::new();
        let tools = ToolRegistry::new(ctx.downgrade());
        let agent = Agent::new("s", None);
        agent.session().add_sink(Arc::new(|_header, _event| {
            Err(SessionError::LogNotOwned { path: "/logs/s.jsonl".into(), uid: 7 })
        }));
        let refused = call(&tools, "echo", json!({}), Some(Arc::clone(&agent)), AbortSignal::new()).await;
        let Err(err) = refused else { panic!("the call ran") };
        assert!(matches!(err, SessionError::LogNotOwned { uid: 7, .. }), "{err:?}");
        assert_eq!(agent.status(), AgentStatus::Idle, "the agent never became busy");
    }
}
