//! The tool definition trait.

use serde_json::Value;

use crate::error::ToolError;
use crate::tools::result::{ContentBlock, ToolExec, ToolResult};
use crate::tools::schema::{Schema, ToolParams};

/// What a tool states once: its model-facing name, description and parameters, and the
/// schema of the canonical value its body returns.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The model-facing name (`bash`, `job_output`).
    pub name: String,
    /// The model-facing description.
    pub description: String,
    /// The parameters the arguments are validated against.
    pub parameters: ToolParams,
    /// Schema of the canonical value `execute` returns (validated before rendering).
    pub output: Schema,
}

impl ToolSpec {
    /// A spec from its four parts.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: ToolParams,
        output: Schema,
    ) -> Self {
        Self { name: name.into(), description: description.into(), parameters, output }
    }
}

/// A tool: its [`ToolSpec`]; a pure renderer of the canonical value; the async body; and
/// optional pure presenters.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// Name, description, parameters and output schema.
    fn spec(&self) -> &ToolSpec;
    /// Pure projection of the canonical value to model-facing content.
    fn render(&self, args: &Value, value: &Value) -> Vec<ContentBlock>;
    /// The body. `args` passed the schema stage; value checks are the body's job.
    async fn execute(&self, args: Value, exec: ToolExec) -> Result<Value, ToolError>;

    /// UI intent for the call, from the logged arguments alone.
    fn present_call(&self, _args: &Value) -> Option<Value> {
        None
    }
    /// UI intent for the result, from the logged arguments and result alone.
    fn present_result(&self, _args: &Value, _result: &ToolResult) -> Option<Value> {
        None
    }
    /// Last-mile replacement of `content` only.
    fn finalize_content(&self, _exec: &ToolExec, _result: &ToolResult) -> Option<Vec<ContentBlock>> {
        None
    }
}

impl dyn Tool + '_ {
    /// The model-facing name.
    pub fn name(&self) -> &str {
        &self.spec().name
    }

    /// The model-facing description.
    pub fn description(&self) -> &str {
        &self.spec().description
    }

    /// The parameters.
    pub fn parameters(&self) -> &ToolParams {
        &self.spec().parameters
    }

    /// Schema of the canonical value `execute` returns.
    pub fn output_schema(&self) -> &Schema {
        &self.spec().output
    }
}
