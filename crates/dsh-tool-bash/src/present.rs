//! Presenters: pure, replay-safe UI render intents.
//!
//! Improvement over the reference: when the logged result carries the structured foreground
//! value, the exit pill comes from its real `exitCode`/`signal`, and only the marker the
//! renderer actually appended leaves the card body. Text-only replays (no value) fall back to
//! parsing the final marker, with the reference's known residual.

use dsh_core::{ContentBlock, ToolResult};
use dsh_shell::{ExitStatus, parse_exit_status};
use serde_json::{Value, json};

use crate::value::{ForegroundView, ValueView};

fn is_background(args: &Value) -> bool {
    args.get("run_in_background") == Some(&Value::Bool(true))
}

/// The call card: a terminal card, or a generic execute card for a background start.
pub(crate) fn present_call(args: &Value) -> Option<Value> {
    let command = args.get("command")?.as_str()?;
    let description = args.get("description")?.as_str()?;
    if is_background(args) {
        return Some(json!({
            "card": "generic",
            "title": command,
            "kind": "execute",
            "rawInput": command,
            "content": [{ "type": "text", "text": description }],
        }));
    }
    let mut card = json!({ "card": "terminal", "title": command, "description": description });
    if let Some(workdir) = args.get("workdir").and_then(Value::as_str) {
        card["cwd"] = json!(workdir);
    }
    Some(card)
}

/// The exit status the structured value records, with the body the renderer produced before
/// the marker it appended for that status.
fn structured_status(text: &str, value: &ForegroundView) -> ExitStatus {
    let strip = |marker: String| text.strip_suffix(marker.as_str()).unwrap_or(text).to_owned();
    match (&value.signal, value.exit_code) {
        (Some(signal), _) => ExitStatus::Signaled {
            body: strip(format!("\n[killed by signal: {signal}]")),
            signal: signal.clone(),
        },
        (None, Some(0)) => ExitStatus::Exited { body: text.to_owned(), exit_code: 0 },
        (None, Some(code)) => {
            ExitStatus::Exited { body: strip(format!("\n[exit code: {code}]")), exit_code: code }
        }
        (None, None) => parse_exit_status(text),
    }
}

/// The result card: generic for background starts and failures, terminal otherwise.
pub(crate) fn present_result(args: &Value, result: &ToolResult) -> Option<Value> {
    args.get("command")?.as_str()?;
    args.get("description")?.as_str()?;
    let [ContentBlock::Text { text }] = result.content.as_slice() else {
        return None;
    };
    if is_background(args) || result.is_error {
        let shown = text.trim_end_matches('\n');
        return Some(json!({
            "card": "generic",
            "content": [{ "type": "text", "text": format!("```console\n{shown}\n```") }],
        }));
    }
    let status = match result.value.as_ref().and_then(ValueView::parse) {
        Some(ValueView::Foreground(value)) => structured_status(text, &value),
        _ => parse_exit_status(text),
    };
    Some(match status {
        ExitStatus::Exited { body, exit_code } => {
            json!({ "card": "terminal", "output": body, "exitCode": exit_code })
        }
        ExitStatus::Signaled { body, signal } => {
            json!({ "card": "terminal", "output": body, "signal": signal })
        }
    })
}
