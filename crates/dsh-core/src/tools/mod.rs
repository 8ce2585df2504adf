//! The tool registry: definitions, argument validation and the execution pipeline.

mod probe;
mod registry;
mod result;
mod schema;
mod tool;

pub use probe::{OutputProbe, OutputProbeRegistration, OutputProbeSlot};
pub use registry::{
    Decision, Guard, PostDecision, PostExecuteListener, PreExecuteListener, RegisterError, ResultObserver,
    TOOLS, ToolCall, ToolRegistry, ToolSchema, schema_json,
};
pub use result::{ContentBlock, ToolExec, ToolResult};
pub use schema::{Kind, Schema, ToolParams, validate_value};
pub use tool::{Tool, ToolSpec};
