//! Small stand-in tools that drive the tool pipeline and the MCP protocol without a shell.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dsh_core::{AgentMessage, ContentBlock, Schema, Tool, ToolError, ToolExec, ToolParams, ToolSpec};
use serde_json::{Value, json};

/// Counts what the fakes observed.
#[derive(Default)]
pub struct Observed {
    pub aborted: AtomicUsize,
    pub runs: AtomicUsize,
}

/// `echo {text}` → `{text}`. With [`Echo::with_flags`] it also takes the pipeline's test
/// switches: `sleep` (until aborted, at most 30 s), `bad` (returns a value its output schema
/// refuses) and `succeed_late` (returns once aborted), and stamps `n: 1.0` into its value.
pub struct Echo {
    spec: ToolSpec,
    runs: Arc<AtomicUsize>,
    stamp: bool,
}

impl Default for Echo {
    fn default() -> Self {
        Self {
            spec: ToolSpec::new(
                "echo",
                "Echo the text back.",
                ToolParams::new().required("text", Schema::string().describe("Text to echo.")),
                Schema::object(vec![("text", Schema::string(), true)], false),
            ),
            runs: Arc::default(),
            stamp: false,
        }
    }
}

impl Echo {
    /// The pipeline's echo: `text` plus the optional `sleep`, `bad` and `succeed_late`
    /// switches, output `{text, n?}`; counts its runs into `runs`.
    pub fn with_flags(runs: Arc<AtomicUsize>) -> Self {
        let params = ToolParams::new()
            .required("text", Schema::string())
            .optional("sleep", Schema::boolean())
            .optional("bad", Schema::boolean())
            .optional("succeed_late", Schema::boolean());
        let output =
            Schema::object(vec![("text", Schema::string(), true), ("n", Schema::number(), false)], false);
        Self { spec: ToolSpec::new("echo", "Echo.", params, output), runs, stamp: true }
    }

    /// Another tool named `echo` with the given schemas (for duplicate registrations).
    pub fn with_schemas(params: ToolParams, output: Schema) -> Self {
        Self { spec: ToolSpec::new("echo", "Echo the text back.", params, output), ..Self::default() }
    }

    /// How many times `execute` ran.
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn render(&self, _args: &Value, value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text(value["text"].as_str().unwrap_or_default())]
    }
    async fn execute(&self, args: Value, exec: ToolExec) -> Result<Value, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if args["sleep"].as_bool() == Some(true) {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(30)) => {}
                _ = exec.signal.aborted() => return Err(ToolError::aborted()),
            }
        }
        if args["bad"].as_bool() == Some(true) {
            return Ok(json!({"text": 5}));
        }
        if args["succeed_late"].as_bool() == Some(true) {
            exec.signal.aborted().await;
        }
        if self.stamp {
            return Ok(json!({"text": args["text"].clone(), "n": 1.0}));
        }
        Ok(json!({ "text": args["text"] }))
    }
}

/// `slow {seconds}` sleeps, or stops at once when its call is aborted.
pub struct Slow {
    spec: ToolSpec,
    observed: Arc<Observed>,
}

impl Slow {
    pub fn new(observed: Arc<Observed>) -> Self {
        Self {
            spec: ToolSpec::new(
                "slow",
                "Sleep for a number of seconds.",
                ToolParams::new().required("seconds", Schema::number()),
                Schema::object(vec![("slept", Schema::number(), true)], false),
            ),
            observed,
        }
    }
}

#[async_trait::async_trait]
impl Tool for Slow {
    fn spec(&self) -> &ToolSpec {
        &self.spec
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
    spec: ToolSpec,
}

impl Default for WhoAmI {
    fn default() -> Self {
        Self {
            spec: ToolSpec::new(
                "whoami",
                "Name the calling session and its cwd.",
                ToolParams::new(),
                Schema::object(
                    vec![("agent", Schema::string(), true), ("cwd", Schema::string(), true)],
                    false,
                ),
            ),
        }
    }
}

#[async_trait::async_trait]
impl Tool for WhoAmI {
    fn spec(&self) -> &ToolSpec {
        &self.spec
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
    spec: ToolSpec,
}

impl Default for Notify {
    fn default() -> Self {
        Self {
            spec: ToolSpec::new(
                "notify",
                "Deliver a notice to the calling session.",
                ToolParams::new().required("text", Schema::string()),
                Schema::array(Schema::string()),
            ),
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
    fn spec(&self) -> &ToolSpec {
        &self.spec
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
