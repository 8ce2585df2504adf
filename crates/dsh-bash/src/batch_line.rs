//! Parsing one `dsh-bash batch` request line.
//!
//! A line is `{"tool":"bash","args":{…},"session":"s1","cwd":"/dir","id":7}`: `args` defaults
//! to `{}`; `session`, `cwd`, `id` are optional; unknown keys are refused (a typo such as
//! `sesion` must not silently become a call without a session); `cwd` requires `session`.
//! Parsing never panics, whatever the bytes: every failure is a [`LineError`] carrying the
//! request id when one could be read.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Map, Value};

/// One well-formed request.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// The tool to call.
    pub tool: String,
    /// Its arguments (`{}` when absent).
    #[serde(default = "empty_object")]
    pub args: Value,
    /// The session to call as (created on first use).
    pub session: Option<String>,
    /// The session's cwd when this line creates it.
    pub cwd: Option<PathBuf>,
    /// Echoed in the response; `null` when absent.
    #[serde(default)]
    pub id: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// Why a line is not a request, with the id to echo (`null` when none could be read).
#[derive(Clone, Debug, PartialEq)]
pub struct LineError {
    /// The request's id when it could be read, else `null`.
    pub id: Value,
    /// What is wrong with the line.
    pub message: String,
}

/// Parses one line.
pub fn parse_line(line: &str) -> Result<BatchRequest, LineError> {
    let raw: Value = serde_json::from_str(line)
        .map_err(|e| LineError { id: Value::Null, message: format!("invalid JSON: {e}") })?;
    let id = raw.get("id").cloned().unwrap_or(Value::Null);
    if !raw.is_object() {
        return Err(LineError { id, message: "invalid request: expected a JSON object".to_owned() });
    }
    let request: BatchRequest = serde_json::from_value(raw)
        .map_err(|e| LineError { id: id.clone(), message: format!("invalid request: {e}") })?;
    if request.session.is_none() && request.cwd.is_some() {
        return Err(LineError { id, message: "invalid request: \"cwd\" requires \"session\"".to_owned() });
    }
    Ok(request)
}

/// Parses arbitrary bytes as a line (the fuzz entry point): invalid UTF-8 is an error too.
pub fn parse_bytes(bytes: &[u8]) -> Result<BatchRequest, LineError> {
    match std::str::from_utf8(bytes) {
        Ok(line) => parse_line(line),
        Err(e) => Err(LineError { id: Value::Null, message: format!("invalid JSON: {e}") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_and_refuses() {
        let ok = parse_line(r#"{"tool":"bash","args":{"command":"true"},"session":"s","cwd":"/tmp","id":7}"#)
            .expect("valid");
        assert_eq!(ok.tool, "bash");
        assert_eq!(ok.id, json!(7));
        assert_eq!(parse_line(r#"{"tool":"job_list"}"#).expect("valid").args, json!({}));
        assert_eq!(parse_line("[1]").unwrap_err().message, "invalid request: expected a JSON object");
        let typo = parse_line(r#"{"tool":"bash","sesion":"s","id":"x"}"#).unwrap_err();
        assert_eq!(typo.id, json!("x"));
        assert!(typo.message.starts_with("invalid request: unknown field `sesion`"), "{}", typo.message);
        assert_eq!(
            parse_line(r#"{"tool":"bash","cwd":"/"}"#).unwrap_err().message,
            "invalid request: \"cwd\" requires \"session\""
        );
        assert!(parse_line("{").unwrap_err().message.starts_with("invalid JSON: "));
        assert!(parse_bytes(b"\xff").unwrap_err().message.starts_with("invalid JSON: "));
    }
}
