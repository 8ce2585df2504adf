//! Small stand-in tools that drive the MCP protocol without a shell.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dsh_core::{AgentMessage, ContentBlock, Schema, Tool, ToolError, ToolExec, ToolParams};
use serde_json::{Value, json};

/// Counts what the fakes observed.
#[derive(Default)]
pub struct Observed {
    pub aborted: AtomicUsize,
    pub runs: AtomicUsize,
}

/// `echo {text}` → `{text}`.
pub struct Echo {
    params: ToolParams,
    output: Schema,
}

impl Default for Echo {
    fn default() -> Self {
        Self {
            params: ToolParams::new().required("text", Schema::string().describe("Text to echo.")),
            output: Schema::object(vec![("text", Schema::string(), true)], false),
        }
    }
}

#[async_trait::async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Echo the text back."
    }
    fn parameters(&self) -> &ToolParams {
        &self.params
    }
    fn output_schema(&self) -> &Schema {
        &self.output
    }
    fn render(&self, _args: &Value, value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text(value["text"].as_str().unwrap_or_default())]
    }
    async fn execute(&self, args: Value, _exec: ToolExec) -> Result<Value, ToolError> {
        Ok(json!({ "text": args["text"] }))
    }
}

/// `slow {seconds}` sleeps, or stops at once when its call is aborted.
pub struct Slow {
    params: ToolParams,
    output: Schema,
    observed: Arc<Observed>,
}

impl Slow {
    pub fn new(observed: Arc<Observed>) -> Self {
        Self {
            params: ToolParams::new().required("seconds", Schema::number()),
            output: Schema::object(vec![("slept", Schema::number(), true)], false),
            observed,
        }
    }
}

#[async_trait::async_trait]
impl Tool for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn description(&self) -> &str {
        "Sleep for a number of seconds."
    }
    fn parameters(&self) -> &ToolParams {
        &self.params
    }
    fn output_schema(&self) -> &Schema {
        &self.output
    }
    fn render(&self, _args: &Value, value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text(format!("slept {}s", value["slept"]))]
    }
    async fn execute(&self, args: Value, exec: ToolExec) -> Result<Value, ToolError> {
        self.observed.runs.fetch_add(1, Ordering::SeqCst);
        let seconds = args["seconds"].as_f64().unwrap_or(0.0);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs_f64(seconds)) => Ok(json!({ "slept": seconds })),
            _ = exec.signal.aborted() => {
                self.observed.aborted.fetch_add(1, Ordering::SeqCst);
                Err(ToolError::aborted())
            }
        }
    }
}

/// `whoami {}` → the calling agent's id and session cwd.
pub struct WhoAmI {
    params: ToolParams,
    output: Schema,
}

impl Default for WhoAmI {
    fn default() -> Self {
        Self {
            params: ToolParams::new(),
            output: Schema::object(
                vec![("agent", Schema::string(), true), ("cwd", Schema::string(), true)],
                false,
            ),
        }
    }
}

#[async_trait::async_trait]
impl Tool for WhoAmI {
    fn name(&self) -> &str {
        "whoami"
    }
    fn description(&self) -> &str {
        "Name the calling session and its cwd."
    }
    fn parameters(&self) -> &ToolParams {
        &self.params
    }
    fn output_schema(&self) -> &Schema {
        &self.output
    }
    fn render(&self, _args: &Value, value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text(format!(
            "{} {}",
            value["agent"].as_str().unwrap_or(""),
            value["cwd"].as_str().unwrap_or("")
        ))]
    }
    async fn execute(&self, _args: Value, exec: ToolExec) -> Result<Value, ToolError> {
        let agent = exec.agent.ok_or_else(|| ToolError::plain("no agent"))?;
        let cwd = agent.session().header().cwd.clone().map(|c| c.display().to_string()).unwrap_or_default();
        Ok(json!({ "agent": agent.id(), "cwd": cwd }))
    }
}

/// `notify {text}` delivers `text` to the calling agent as a plugin notice, then returns.
pub struct Notify {
    params: ToolParams,
    output: Schema,
}

impl Default for Notify {
    fn default() -> Self {
        Self {
            params: ToolParams::new().required("text", Schema::string()),
            output: Schema::array(Schema::string()),
        }
    }
}

/// A notice as the job tools word it.
pub fn notice(text: &str) -> AgentMessage {
    AgentMessage {
        text: text.to_owned(),
        source: json!({ "kind": "plugin", "plugin": "tool-jobs", "form": "notice", "summary": text }),
    }
}

#[async_trait::async_trait]
impl Tool for Notify {
    fn name(&self) -> &str {
        "notify"
    }
    fn description(&self) -> &str {
        "Deliver a notice to the calling session."
    }
    fn parameters(&self) -> &ToolParams {
        &self.params
    }
    fn output_schema(&self) -> &Schema {
        &self.output
    }
    fn render(&self, _args: &Value, _value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text("delivered")]
    }
    async fn execute(&self, args: Value, exec: ToolExec) -> Result<Value, ToolError> {
        let agent = exec.agent.ok_or_else(|| ToolError::plain("no agent"))?;
        let text = args["text"].as_str().unwrap_or_default();
        agent.inject(notice(text));
        Ok(json!([text]))
    }
}

/// Registers every fake into `ctx`'s tool registry; returns what they observe.
pub fn register_fakes(ctx: &dsh_core::Context) -> Arc<Observed> {
    let tools = ctx.get(dsh_core::TOOLS).expect("a tool registry is composed");
    let observed = Arc::new(Observed::default());
    let fakes: Vec<Arc<dyn Tool>> = vec![
        Arc::new(Echo::default()),
        Arc::new(Slow::new(Arc::clone(&observed))),
        Arc::new(WhoAmI::default()),
        Arc::new(Notify::default()),
    ];
    for tool in fakes {
        // Registrations live as long as the composition: disposing it clears the registry.
        let _registration = tools.register(tool).expect("register a fake tool");
    }
    observed
}
