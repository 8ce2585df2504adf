//! The named arguments the body reads, and the value checks the schema cannot express
//! (checked before anything runs; the first failure wins).

use dsh_core::ToolError;
use dsh_core::json::{js_is_blank as is_blank, js_json_text};
use serde_json::Value;

/// A requested escalation: both fields present and paired.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EscalationRequest {
    /// The requested mode as sent (enum-pinned by the schema when advertised).
    pub mode: String,
    pub justification: String,
}

/// The arguments a request is built from. Every other model key is ignored.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BashArgs {
    /// Passed verbatim (never trimmed).
    pub command: String,
    pub timeout_ms: Option<f64>,
    pub workdir: Option<String>,
    /// Only the literal `true` selects background.
    pub background: bool,
    pub escalation: Option<EscalationRequest>,
    /// Only the literal `true` resets (read only when state persists).
    pub reset: bool,
    /// Only the literal `true` asks for a terminal (read only when terminals are offered).
    pub tty: bool,
}

fn plain(message: &str) -> ToolError {
    ToolError::plain(message)
}

impl BashArgs {
    /// Reads and checks arguments that passed the schema stage. Unadvertised keys
    /// (`run_in_background`, `sandbox_permissions`, `justification`) still reach here and are
    /// enforced by the body.
    pub(crate) fn parse(args: &Value) -> Result<Self, ToolError> {
        let command = args.get("command").and_then(Value::as_str).unwrap_or_default();
        if is_blank(command) {
            return Err(plain("invalid command: expected a non-empty string"));
        }
        let description = args.get("description").and_then(Value::as_str).unwrap_or_default();
        if is_blank(description) {
            return Err(plain("invalid description: expected a non-empty string"));
        }
        let timeout_ms = match args.get("timeoutMs") {
            None => None,
            Some(value) => match value.as_f64() {
                Some(ms) if ms.is_finite() && ms > 0.0 => Some(ms),
                _ => {
                    return Err(ToolError::plain(format!(
                        "invalid timeoutMs: expected a positive number, got {}",
                        js_json_text(value)
                    )));
                }
            },
        };
        let escalation = match (args.get("sandbox_permissions"), args.get("justification")) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(plain("invalid escalation: sandbox_permissions requires a justification"));
            }
            (None, Some(_)) => {
                return Err(plain(
                    "invalid escalation: justification is only valid together with sandbox_permissions",
                ));
            }
            (Some(mode), Some(justification)) => {
                let justification = justification
                    .as_str()
                    .filter(|j| !is_blank(j))
                    .ok_or_else(|| plain("invalid justification: expected a non-empty sentence"))?;
                let mode = mode.as_str().map_or_else(|| js_json_text(mode), str::to_owned);
                Some(EscalationRequest { mode, justification: justification.to_owned() })
            }
        };
        Ok(Self {
            command: command.to_owned(),
            timeout_ms,
            workdir: args.get("workdir").and_then(Value::as_str).map(str::to_owned),
            background: args.get("run_in_background") == Some(&Value::Bool(true)),
            escalation,
            reset: args.get("reset") == Some(&Value::Bool(true)),
            tty: args.get("tty") == Some(&Value::Bool(true)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(args: Value) -> String {
        BashArgs::parse(&args).err().map(|e| e.message).unwrap_or_default()
    }

    #[test]
    fn bf_13_value_checks_in_order() {
        assert_eq!(
            err(json!({"command": "  ", "description": "   ", "timeoutMs": -1})),
            "invalid command: expected a non-empty string"
        );
        assert_eq!(
            err(json!({"command": "x", "description": "\u{3000}\n", "timeoutMs": -1})),
            "invalid description: expected a non-empty string"
        );
        assert_eq!(
            err(json!({"command": "x", "description": "d", "timeoutMs": -1, "justification": ""})),
            "invalid timeoutMs: expected a positive number, got -1"
        );
        assert_eq!(
            err(json!({"command": "\u{FEFF}\u{2028}", "description": "d"})),
            "invalid command: expected a non-empty string"
        );
        assert_eq!(
            err(json!({"command": "x", "description": "\u{85}", "timeoutMs": 0})),
            "invalid timeoutMs: expected a positive number, got 0",
            "NEL is not whitespace to JavaScript's trim()"
        );
        assert_eq!(
            err(json!({"command": "x", "description": "d", "timeoutMs": 0})),
            "invalid timeoutMs: expected a positive number, got 0"
        );
        assert_eq!(
            err(json!({"command": "x", "description": "d", "timeoutMs": -0.5})),
            "invalid timeoutMs: expected a positive number, got -0.5"
        );
    }

    #[test]
    fn command_is_verbatim_and_background_needs_literal_true() {
        let a = BashArgs::parse(&json!({"command": " echo hi ", "description": "d", "run_in_background": 1}))
            .expect("valid");
        assert_eq!(a.command, " echo hi ");
        assert!(!a.background);
        assert_eq!(a.timeout_ms, None);
        let a = BashArgs::parse(&json!({"command": "x", "description": "d", "run_in_background": true}))
            .expect("valid");
        assert!(a.background);
    }
}
