//! From the registry's shapes to MCP's: advertised output schemas and call results.
//!
//! MCP requires a tool's `outputSchema` to describe an object, and `structuredContent` to be
//! one. Our canonical values are not always objects, so each tool gets an [`OutputShape`]:
//!
//! * an object schema is advertised as is and the value is sent as is;
//! * a `oneOf` whose branches are all objects (bash: foreground | background) is advertised
//!   as the same `oneOf` with `"type": "object"` added at its root — every value it accepts
//!   is an object already, so the canonical value is still sent unchanged;
//! * anything else (an array such as `job_list`'s, a scalar, a nullable object) is wrapped:
//!   the schema becomes `{"type":"object","properties":{"result":<schema>},"required":["result"]}`
//!   and the value is sent as `{"result": <value>}`.
//!
//! Failed calls carry no `structuredContent` (clients do not validate error results); their
//! `{message, info}` travels in `_meta` under [`ERROR_META_KEY`].

use dsh_core::tools::Kind;
use dsh_core::{AgentMessage, Schema, ToolResult};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject};
use serde_json::{Map, Value, json};

/// `_meta` key of a failed result's `{message, info?}`.
pub const ERROR_META_KEY: &str = "dsh/error";
/// `_meta` key of the session messages attached to a result (`[{text, source}]`).
pub const NOTICES_META_KEY: &str = "dsh/notices";
/// The property a wrapped value is sent under.
pub const WRAPPED_RESULT_KEY: &str = "result";

/// How a tool's canonical value is carried as `structuredContent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputShape {
    /// The value is an object: sent unchanged.
    Object,
    /// The value is sent as `{"result": value}`.
    Wrapped,
}

fn is_plain_object(schema: &Schema) -> bool {
    matches!(schema.kind, Kind::Object { .. }) && !schema.nullable
}

/// The shape of `schema` (see the module doc).
pub fn output_shape(schema: &Schema) -> OutputShape {
    match &schema.kind {
        Kind::Object { .. } if !schema.nullable => OutputShape::Object,
        Kind::OneOf(branches) if !branches.is_empty() && branches.iter().all(is_plain_object) => {
            OutputShape::Object
        }
        _ => OutputShape::Wrapped,
    }
}

/// The `outputSchema` advertised for a tool whose canonical value follows `schema`.
pub fn advertised_output_schema(schema: &Schema) -> JsonObject {
    let projected = schema.to_json();
    match output_shape(schema) {
        OutputShape::Object => {
            let mut object = match projected {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            if !object.contains_key("type") {
                // An all-object oneOf: say so at the root, as MCP requires.
                let mut typed = Map::new();
                typed.insert("type".into(), json!("object"));
                typed.extend(object);
                object = typed;
            }
            object
        }
        OutputShape::Wrapped => {
            let mut object = Map::new();
            object.insert("type".into(), json!("object"));
            object.insert("properties".into(), json!({ WRAPPED_RESULT_KEY: projected }));
            object.insert("required".into(), json!([WRAPPED_RESULT_KEY]));
            object.insert("additionalProperties".into(), json!(false));
            object
        }
    }
}

/// The `structuredContent` for a canonical value.
pub fn structured_content(shape: OutputShape, value: &Value) -> Value {
    match shape {
        OutputShape::Object => value.clone(),
        OutputShape::Wrapped => json!({ WRAPPED_RESULT_KEY: value }),
    }
}

/// An MCP result from a registry result, with `notices` (messages delivered to the session's
/// agent) appended as extra text blocks after the result's own content and listed in `_meta`.
pub fn call_tool_result(result: &ToolResult, shape: OutputShape, notices: &[AgentMessage]) -> CallToolResult {
    let mut content: Vec<ContentBlock> =
        result.content.iter().filter_map(|b| b.as_text()).map(ContentBlock::text).collect();
    content.extend(notices.iter().map(|n| ContentBlock::text(n.text.clone())));
    let mut out =
        if result.is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
    if let (false, Some(value)) = (result.is_error, &result.value) {
        out.structured_content = Some(structured_content(shape, value));
    }
    let mut meta = Map::new();
    if let Some(error) = &result.error {
        let mut e = json!({ "message": error.message });
        if let Some(info) = &error.info {
            e["info"] = json!({ "name": info.name, "code": info.code });
        }
        meta.insert(ERROR_META_KEY.into(), e);
    }
    if !notices.is_empty() {
        let list: Vec<Value> =
            notices.iter().map(|n| json!({ "text": n.text, "source": n.source })).collect();
        meta.insert(NOTICES_META_KEY.into(), Value::Array(list));
    }
    if !meta.is_empty() {
        out.meta = Some(MetaObject(meta));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::{ContentBlock as CoreBlock, ToolError};

    fn background() -> Schema {
        Schema::object(
            vec![
                ("kind", Schema::string().constant(json!("background")), true),
                ("jobId", Schema::string(), true),
            ],
            false,
        )
    }
    fn foreground() -> Schema {
        Schema::object(vec![("kind", Schema::string().constant(json!("foreground")), true)], false)
    }

    #[test]
    fn object_schema_is_advertised_unchanged() {
        let schema = background();
        assert_eq!(output_shape(&schema), OutputShape::Object);
        assert_eq!(Value::Object(advertised_output_schema(&schema)), schema.to_json());
    }

    #[test]
    fn one_of_objects_gains_a_root_object_type_and_keeps_the_value() {
        let schema = Schema::one_of(vec![foreground(), background()]);
        assert_eq!(output_shape(&schema), OutputShape::Object);
        let advertised = Value::Object(advertised_output_schema(&schema));
        assert_eq!(advertised["type"], json!("object"));
        assert_eq!(advertised["oneOf"], schema.to_json()["oneOf"]);
        let value = json!({"kind": "background", "jobId": "bash-1"});
        assert_eq!(structured_content(OutputShape::Object, &value), value);
    }

    #[test]
    fn arrays_scalars_and_mixed_one_of_are_wrapped() {
        let list = Schema::array(background());
        assert_eq!(output_shape(&list), OutputShape::Wrapped);
        let advertised = Value::Object(advertised_output_schema(&list));
        assert_eq!(
            advertised,
            json!({
                "type": "object",
                "properties": {"result": list.to_json()},
                "required": ["result"],
                "additionalProperties": false
            })
        );
        assert_eq!(structured_content(OutputShape::Wrapped, &json!([1])), json!({"result": [1]}));
        assert_eq!(output_shape(&Schema::one_of(vec![background(), Schema::string()])), OutputShape::Wrapped);
        assert_eq!(output_shape(&background().or_null()), OutputShape::Wrapped);
        assert_eq!(output_shape(&Schema::any()), OutputShape::Wrapped);
    }

    #[test]
    fn success_carries_text_value_and_notices() {
        let result = ToolResult::success(
            json!({"kind": "background", "jobId": "bash-1"}),
            vec![CoreBlock::text("started background job bash-1")],
        );
        let notice =
            AgentMessage { text: "background job bash-1 finished".into(), source: json!({"kind": "plugin"}) };
        let out = call_tool_result(&result, OutputShape::Object, &[notice]);
        let wire = serde_json::to_value(&out).expect("serialize");
        assert_eq!(wire["isError"], json!(false));
        assert_eq!(
            wire["content"],
            json!([
                {"type": "text", "text": "started background job bash-1"},
                {"type": "text", "text": "background job bash-1 finished"}
            ])
        );
        assert_eq!(wire["structuredContent"], json!({"kind": "background", "jobId": "bash-1"}));
        assert_eq!(
            wire["_meta"][NOTICES_META_KEY],
            json!([{"text": "background job bash-1 finished", "source": {"kind": "plugin"}}])
        );
    }

    #[test]
    fn failure_carries_error_text_and_info_in_meta() {
        let result = ToolResult::failure(ToolError::aborted());
        let wire =
            serde_json::to_value(call_tool_result(&result, OutputShape::Object, &[])).expect("serialize");
        assert_eq!(wire["isError"], json!(true));
        assert_eq!(wire["content"], json!([{"type": "text", "text": "Error: tool call aborted"}]));
        assert!(wire.get("structuredContent").is_none());
        assert_eq!(
            wire["_meta"][ERROR_META_KEY],
            json!({"message": "tool call aborted", "info": {"name": "AbortError", "code": "ABORTED"}})
        );
    }
}
