//! `dsh-bash schema [--format mcp|openai|anthropic]`: the tool schemas as pretty JSON.
//!
//! * mcp: `[{"name","description","inputSchema"}]`
//! * openai: `[{"type":"function","function":{"name","description","parameters"}}]`
//! * anthropic: `[{"name","description","input_schema"}]`

use std::io::Write;

use anyhow::Context as _;
use dsh_core::ToolSchema;
use serde_json::{Value, json};

use crate::cli::{CompositionArgs, SchemaArgs, SchemaFormat};
use crate::composition::{Composition, Pending};

pub async fn run(composition: &CompositionArgs, args: SchemaArgs) -> anyhow::Result<u8> {
    let comp = Composition::start(composition, Pending::Refuse).await?;
    let schemas = comp.tools().map(|tools| tools.schemas());
    comp.dispose().await;
    let rendered = render(&schemas?, args.format);
    let text = serde_json::to_string_pretty(&rendered).context("serializing schemas")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}").and_then(|()| stdout.flush()).context("writing stdout")?;
    Ok(0)
}

/// The schemas in one dialect.
pub fn render(schemas: &[ToolSchema], format: SchemaFormat) -> Value {
    Value::Array(
        schemas
            .iter()
            .map(|s| match format {
                SchemaFormat::Mcp => {
                    json!({ "name": s.name, "description": s.description, "inputSchema": s.parameters })
                }
                SchemaFormat::Openai => json!({
                    "type": "function",
                    "function": { "name": s.name, "description": s.description, "parameters": s.parameters },
                }),
                SchemaFormat::Anthropic => {
                    json!({ "name": s.name, "description": s.description, "input_schema": s.parameters })
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialects() {
        let schemas = [ToolSchema {
            name: "t".into(),
            description: "d".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }];
        let params = json!({"type": "object", "properties": {}});
        assert_eq!(
            render(&schemas, SchemaFormat::Mcp),
            json!([{"name": "t", "description": "d", "inputSchema": params}])
        );
        assert_eq!(
            render(&schemas, SchemaFormat::Openai),
            json!([{"type": "function", "function": {"name": "t", "description": "d", "parameters": params}}])
        );
        assert_eq!(
            render(&schemas, SchemaFormat::Anthropic),
            json!([{"name": "t", "description": "d", "input_schema": params}])
        );
    }
}
