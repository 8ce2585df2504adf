//! The tool definition trait.

use serde_json::Value;

use crate::error::ToolError;
use crate::tools::result::{ContentBlock, ToolExec, ToolResult};
use crate::tools::schema::{Schema, ToolParams};

/// A tool: model-facing name, description and parameters; a canonical output schema and its
/// pure renderer; the async body; and optional pure presenters.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    fn parameters(&self) -> &ToolParams;
    /// Schema of the canonical value `execute` returns (validated before rendering).
    fn output_schema(&self) -> &Schema;
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
