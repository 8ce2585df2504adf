//! What a tool call produces: content blocks, the canonical value, or an error.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::abort::AbortSignal;
use crate::agent::Agent;
use crate::error::ToolError;
use crate::tools::probe::OutputProbeSlot;

/// One block of model-facing content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentBlock {
    /// A text block.
    Text {
        /// The text.
        text: String,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text { text } => Some(text),
        }
    }
}

/// The outcome of one call: success (`value` + rendered `content`) or failure (`error` +
/// exactly one `Error: <message>` block).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResult {
    /// True for a failure.
    pub is_error: bool,
    /// The canonical value of a success; `None` on failure.
    pub value: Option<Value>,
    /// The model-facing content blocks.
    pub content: Vec<ContentBlock>,
    /// The error of a failure; `None` on success.
    pub error: Option<ToolError>,
}

impl ToolResult {
    /// A failure rendered `Error: <message>`.
    pub fn failure(error: ToolError) -> Self {
        Self {
            is_error: true,
            value: None,
            content: vec![ContentBlock::text(format!("Error: {}", error.message))],
            error: Some(error),
        }
    }

    /// A success with its rendered content.
    pub fn success(value: Value, content: Vec<ContentBlock>) -> Self {
        Self { is_error: false, value: Some(value), content, error: None }
    }

    /// All text blocks joined.
    pub fn text(&self) -> String {
        self.content.iter().filter_map(ContentBlock::as_text).collect::<Vec<_>>().join("")
    }

    /// The single text block, when the content is exactly one text block.
    pub fn single_text(&self) -> Option<&str> {
        match self.content.as_slice() {
            [block] => block.as_text(),
            _ => None,
        }
    }

    /// `{content, isError, structured}` as hosts print it.
    pub fn to_json(&self) -> Value {
        let mut out = json!({
            "content": self.content,
            "isError": self.is_error,
            "structured": self.value.clone().unwrap_or(Value::Null),
        });
        if let (Some(error), Some(map)) = (&self.error, out.as_object_mut()) {
            let mut e = json!({ "message": error.message });
            if let Some(info) = &error.info {
                e["info"] = json!({ "name": info.name, "code": info.code });
            }
            map.insert("error".into(), e);
        }
        out
    }
}

/// Everything a body knows about its call besides the arguments.
#[derive(Clone, Debug)]
pub struct ToolExec {
    /// The calling agent, when there is one.
    pub agent: Option<Arc<Agent>>,
    /// The id of this call.
    pub call_id: String,
    /// Fires when the call is aborted.
    pub signal: AbortSignal,
    /// False for nested calls (Code Mode); hosts always make top-level calls.
    pub top_level: bool,
    /// Where the body installs a probe of its running output; shared by every clone, so a
    /// host that kept a clone can ask [`ToolExec::latest_output_line`] while the call runs.
    pub output_probe: OutputProbeSlot,
}

impl ToolExec {
    /// A top-level call with a fresh, never-aborted signal.
    pub fn new(agent: Option<Arc<Agent>>, call_id: impl Into<String>) -> Self {
        Self {
            agent,
            call_id: call_id.into(),
            signal: AbortSignal::new(),
            top_level: true,
            output_probe: OutputProbeSlot::new(),
        }
    }

    /// Uses `signal` as this call's abort signal.
    pub fn with_signal(mut self, signal: AbortSignal) -> Self {
        self.signal = signal;
        self
    }

    /// Shares `slot` as this call's output-probe slot (a host that wants to observe the call
    /// keeps a clone of it).
    pub fn with_output_probe(mut self, slot: OutputProbeSlot) -> Self {
        self.output_probe = slot;
        self
    }

    /// The latest line of the call's running output, while the body has a probe installed
    /// (see [`OutputProbeSlot`]); `None` otherwise. Cheap; meant to be polled by hosts.
    pub fn latest_output_line(&self) -> Option<String> {
        self.output_probe.latest_line()
    }
}
