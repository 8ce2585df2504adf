//! The tool registry and its execution pipeline. The stage order is fixed: abort check, policy
//! (pre-execute, approval, guards), dispatch, cancellation, post-execute, finalized content,
//! result observers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};

use crate::agent::Agent;
use crate::approval::{APPROVAL, ApprovalOutcome, ApprovalRequest};
use crate::context::{Disposer, ServiceKey, WeakContext};
use crate::error::ToolError;
use crate::tools::result::{ContentBlock, ToolExec, ToolResult};
use crate::tools::schema::validate_value;
use crate::tools::tool::Tool;

/// Service key of the tool registry.
pub const TOOLS: ServiceKey<Arc<ToolRegistry>> = ServiceKey::new("tools");

/// A call as policy listeners see it.
#[derive(Clone, Debug)]
pub struct ToolCall {
    /// The tool name.
    pub name: String,
    /// The call's arguments.
    pub args: Value,
    /// The calling agent, when there is one.
    pub agent: Option<Arc<Agent>>,
    /// The id of this call.
    pub call_id: String,
}

/// A pre-execute decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run the call (guards still apply).
    Allow,
    /// Refuse the call.
    Deny {
        /// The denial message the model sees.
        reason: String,
    },
    /// Ask the approval service before running the call.
    Ask {
        /// Why approval is needed (also the denial message when no approval service is composed).
        reason: Option<String>,
    },
}

/// A post-execute decision.
#[derive(Clone, Debug, PartialEq)]
pub enum PostDecision {
    /// Keep the result, optionally replacing its content or (on success) its value — not both.
    Accept {
        /// Replacement content blocks, if any.
        content: Option<Vec<ContentBlock>>,
        /// Replacement value (success only), if any.
        value: Option<Value>,
    },
    /// Replace the result by a failure whose content is these feedback blocks.
    Block {
        /// The content of the failure.
        feedback: Vec<ContentBlock>,
    },
}

/// A pre-execute listener: `Ok(None)` passes to the next; the first `Some` decides.
pub type PreExecuteListener =
    Arc<dyn Fn(&ToolCall) -> BoxFuture<'static, Result<Option<Decision>, String>> + Send + Sync>;
/// A monotonic guard: `Some(reason)` denies; evaluated only while the decision is allow.
pub type Guard = Arc<dyn Fn(&ToolCall) -> Option<String> + Send + Sync>;
/// A post-execute listener.
pub type PostExecuteListener =
    Arc<dyn Fn(&ToolCall, &ToolResult) -> Result<PostDecision, String> + Send + Sync>;
/// An observer of final results; cannot change them.
pub type ResultObserver = Arc<dyn Fn(&ToolCall, &ToolResult) + Send + Sync>;

/// Errors registering a tool.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// A tool with this name is already registered.
    #[error("tool \"{0}\" is already registered")]
    Duplicate(String),
    /// The name is reserved (`run_code`).
    #[error("tool name \"{0}\" is reserved")]
    Reserved(String),
}

/// The model-facing part of a definition.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSchema {
    /// The tool name.
    pub name: String,
    /// The tool description the model sees.
    pub description: String,
    /// The parameters as JSON Schema.
    pub parameters: Value,
}

struct Listeners<T> {
    next: AtomicU64,
    items: Mutex<Vec<(u64, T)>>,
}

impl<T: Clone + Send + 'static> Listeners<T> {
    fn new() -> Arc<Self> {
        Arc::new(Self { next: AtomicU64::new(1), items: Mutex::new(Vec::new()) })
    }
    fn add(self: &Arc<Self>, item: T, prepend: bool) -> Disposer {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        {
            let mut items = self.items.lock();
            if prepend { items.insert(0, (id, item)) } else { items.push((id, item)) }
        }
        let me = Arc::clone(self);
        Disposer::new(move || me.items.lock().retain(|(i, _)| *i != id))
    }
    fn snapshot(&self) -> Vec<T> {
        self.items.lock().iter().map(|(_, t)| t.clone()).collect()
    }
}

/// The registry of tools plus the policy listeners around every call.
pub struct ToolRegistry {
    ctx: WeakContext,
    tools: Arc<RwLock<Vec<Arc<dyn Tool>>>>,
    pre_execute: Arc<Listeners<PreExecuteListener>>,
    guards: Arc<Listeners<Guard>>,
    post_execute: Arc<Listeners<PostExecuteListener>>,
    observers: Arc<Listeners<ResultObserver>>,
}

impl ToolRegistry {
    /// A registry that looks call-time services (approval) up in `ctx`.
    pub fn new(ctx: WeakContext) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            tools: Arc::new(RwLock::new(Vec::new())),
            pre_execute: Listeners::new(),
            guards: Listeners::new(),
            post_execute: Listeners::new(),
            observers: Listeners::new(),
        })
    }

    /// Registers a tool; the disposer unregisters it.
    pub fn register(&self, tool: Arc<dyn Tool>) -> Result<Disposer, RegisterError> {
        let name = tool.name().to_owned();
        if name == "run_code" {
            return Err(RegisterError::Reserved(name));
        }
        {
            let mut tools = self.tools.write();
            if tools.iter().any(|t| t.name() == name) {
                return Err(RegisterError::Duplicate(name));
            }
            tools.push(tool.clone());
        }
        let tools = Arc::clone(&self.tools);
        Ok(Disposer::new(move || tools.write().retain(|t| !Arc::ptr_eq(t, &tool))))
    }

    /// The registered tool named `name`, if any.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.read().iter().find(|t| t.name() == name).cloned()
    }

    /// Model-facing schemas (name, description, parameters) in registration order.
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.tools
            .read()
            .iter()
            .map(|t| ToolSchema {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters().to_json(),
            })
            .collect()
    }

    /// Adds a pre-execute listener (first with `prepend`, else last); the disposer removes it.
    pub fn on_pre_execute(&self, listener: PreExecuteListener, prepend: bool) -> Disposer {
        self.pre_execute.add(listener, prepend)
    }
    /// Adds a guard after the existing ones; the disposer removes it.
    pub fn add_guard(&self, guard: Guard) -> Disposer {
        self.guards.add(guard, false)
    }
    /// Adds a post-execute listener (first with `prepend`, else last); the disposer removes it.
    pub fn on_post_execute(&self, listener: PostExecuteListener, prepend: bool) -> Disposer {
        self.post_execute.add(listener, prepend)
    }
    /// Adds a result observer after the existing ones; the disposer removes it.
    pub fn on_result(&self, observer: ResultObserver) -> Disposer {
        self.observers.add(observer, false)
    }

    /// Runs one call through the whole pipeline. Never fails: failures are results.
    pub async fn call(&self, name: &str, args: Value, exec: ToolExec) -> ToolResult {
        let call = ToolCall {
            name: name.to_owned(),
            args,
            agent: exec.agent.clone(),
            call_id: exec.call_id.clone(),
        };
        // 1–2. Arguments are a JSON value already (lossless by construction); abort check.
        if exec.signal.is_aborted() {
            return self.observe(&call, ToolResult::failure(ToolError::aborted_before_dispatch()));
        }
        let tool = self.get(name);
        // 3–7. Policy.
        let decision = match self.decide(&call, &exec).await {
            Ok(decision) => decision,
            Err(final_error) => return self.observe(&call, ToolResult::failure(final_error)),
        };
        let mut body_started = false;
        let result = match decision {
            Some(reason) => ToolResult::failure(ToolError::plain(reason)),
            None if exec.signal.is_aborted() => ToolResult::failure(ToolError::aborted_before_dispatch()),
            None => match &tool {
                None => ToolResult::failure(ToolError::coded(
                    format!("unknown tool \"{name}\""),
                    "ToolNotFoundError",
                    "UNKNOWN_TOOL",
                )),
                Some(tool) => {
                    body_started = true;
                    self.dispatch(tool.as_ref(), &call, exec.clone()).await
                }
            },
        };
        // 9. Cancellation replaces successes only.
        let result = cancel_rule(result, &exec, body_started);
        // 10. Post-execute.
        let result = match self.post_execute(tool.as_deref(), &call, result) {
            Ok(r) => cancel_rule(r, &exec, body_started),
            Err(e) => ToolResult::failure(ToolError::plain(e)),
        };
        // 12. finalizeContent.
        let result = match tool.as_ref().and_then(|t| t.finalize_content(&exec, &result)) {
            Some(content) => ToolResult { content, ..result },
            None => result,
        };
        self.observe(&call, result)
    }

    /// Pre-execute waterfall, ask resolution and guards. `Ok(Some(reason))` is a denial that
    /// still flows through post-execute; `Err` is a final failure.
    async fn decide(&self, call: &ToolCall, exec: &ToolExec) -> Result<Option<String>, ToolError> {
        let mut decision = Decision::Allow;
        for listener in self.pre_execute.snapshot() {
            match listener(call).await {
                Ok(None) => continue,
                Ok(Some(d)) => {
                    decision = d;
                    break;
                }
                Err(message) => return Err(ToolError::plain(message)),
            }
        }
        let name = &call.name;
        let mut denial = match decision {
            Decision::Allow => None,
            Decision::Deny { reason } => Some(reason),
            Decision::Ask { reason } => match (self.ctx.get(APPROVAL), &exec.agent) {
                (None, _) => Some(
                    reason
                        .unwrap_or_else(|| format!("tool \"{name}\" requires approval (not yet supported)")),
                ),
                (Some(_), None) => Some(format!(
                    "tool \"{name}\" requires approval, but the call has no agent to route it through"
                )),
                (Some(approval), Some(agent)) => {
                    let request = ApprovalRequest {
                        agent: Arc::clone(agent),
                        tool_name: name.clone(),
                        call_id: Some(exec.call_id.clone()),
                        reason,
                        signal: Some(exec.signal.clone()),
                        subject: None,
                    };
                    match approval.request(request).await {
                        Err(error) => Some(error.to_string()),
                        Ok(ApprovalOutcome::AllowedOnce) => None,
                        Ok(ApprovalOutcome::Rejected) => Some(format!("the user rejected tool \"{name}\"")),
                        Ok(ApprovalOutcome::Cancelled) if exec.signal.is_aborted() => {
                            return Err(ToolError::aborted_before_dispatch());
                        }
                        Ok(ApprovalOutcome::Cancelled) => {
                            Some(format!("approval for tool \"{name}\" was cancelled"))
                        }
                        Ok(ApprovalOutcome::Unavailable) => Some(format!(
                            "tool \"{name}\" requires approval, but no approval channel is available"
                        )),
                    }
                }
            },
        };
        if denial.is_none() {
            for guard in self.guards.snapshot() {
                if let Some(reason) = guard(call) {
                    denial = Some(reason);
                    break;
                }
            }
        }
        Ok(denial)
    }

    async fn dispatch(&self, tool: &dyn Tool, call: &ToolCall, exec: ToolExec) -> ToolResult {
        let violations = tool.parameters().validate(&call.args);
        if !violations.is_empty() {
            return ToolResult::failure(ToolError::coded(
                format!("invalid arguments: {}", violations.join("; ")),
                "ToolArgsError",
                "INVALID_ARGS",
            ));
        }
        let signal = exec.signal.clone();
        match tool.execute(call.args.clone(), exec).await {
            Err(error) => ToolResult::failure(error),
            Ok(_) if signal.is_aborted() => ToolResult::failure(ToolError::aborted()),
            Ok(value) => self.finish_success(tool, &call.args, value),
        }
    }

    fn finish_success(&self, tool: &dyn Tool, args: &Value, mut value: Value) -> ToolResult {
        crate::json::normalize_numbers(&mut value);
        let mut violations = Vec::new();
        validate_value(tool.output_schema(), &value, "output", &mut violations);
        if !violations.is_empty() {
            return ToolResult::failure(ToolError::coded(
                format!("tool \"{}\" returned invalid output: {}", tool.name(), violations.join("; ")),
                "ToolOutputError",
                "INVALID_TOOL_OUTPUT",
            ));
        }
        let content = tool.render(args, &value);
        ToolResult::success(value, content)
    }

    fn post_execute(
        &self,
        tool: Option<&dyn Tool>,
        call: &ToolCall,
        mut result: ToolResult,
    ) -> Result<ToolResult, String> {
        for listener in self.post_execute.snapshot() {
            match listener(call, &result)? {
                PostDecision::Accept { content: None, value: None } => {}
                PostDecision::Accept { content: Some(content), value: None } => result.content = content,
                PostDecision::Accept { value: Some(value), content: None } => {
                    if let (false, Some(tool)) = (result.is_error, tool) {
                        result = self.finish_success(tool, &call.args, value);
                    }
                }
                PostDecision::Accept { .. } => {
                    return Err("post-execute may replace content or value, not both".to_owned());
                }
                PostDecision::Block { feedback } => {
                    let texts: Vec<&str> = feedback.iter().filter_map(ContentBlock::as_text).collect();
                    let message = if texts.is_empty() {
                        "tool result blocked by post-execute policy".to_owned()
                    } else {
                        texts.join("\n")
                    };
                    result = ToolResult {
                        is_error: true,
                        value: None,
                        content: feedback,
                        error: Some(ToolError::plain(message)),
                    };
                }
            }
        }
        Ok(result)
    }

    fn observe(&self, call: &ToolCall, result: ToolResult) -> ToolResult {
        for observer in self.observers.snapshot() {
            observer(call, &result);
        }
        result
    }

    /// Soft-validating presenters: `None` when the tool is unknown or the args are invalid.
    pub fn present_call(&self, name: &str, args: &Value) -> Option<Value> {
        let tool = self.get(name)?;
        if !tool.parameters().accepts(args) {
            return None;
        }
        tool.present_call(args)
    }

    /// See [`ToolRegistry::present_call`].
    pub fn present_result(&self, name: &str, args: &Value, result: &ToolResult) -> Option<Value> {
        let tool = self.get(name)?;
        if !tool.parameters().accepts(args) {
            return None;
        }
        tool.present_result(args, result)
    }
}

fn cancel_rule(result: ToolResult, exec: &ToolExec, body_started: bool) -> ToolResult {
    if !result.is_error && exec.signal.is_aborted() {
        ToolResult::failure(if body_started {
            ToolError::aborted()
        } else {
            ToolError::aborted_before_dispatch()
        })
    } else {
        result
    }
}

/// `{name, description, parameters}` of a schema as JSON.
pub fn schema_json(schema: &ToolSchema) -> Value {
    json!({ "name": schema.name, "description": schema.description, "parameters": schema.parameters })
}
