//! The audit log of decisions: every approval, denial and quarantine, appended as one JSON
//! line to a file of the user's (`<DSH_HOME>/audit.jsonl`, or the file `DSH_AUDIT_LOG`
//! names; `DSH_AUDIT_LOG=off` keeps none), readable with any JSON-lines tool:
//!
//! ```text
//! {"time":"2026-12-07T21:30:00.123Z","session":"s1","kind":"approval","what":{"command":"rm -rf build","asked":"danger-full-access"},"verdict":"allowed-once"}
//! ```
//!
//! A line holds when, the session (when there is one), the kind of decision, what it was
//! about (a command, a host, a path) and the verdict: never a command's output, a typed
//! secret, nor an environment value. The file is made mode `0600`; each line is one
//! `write` to a file opened for appending, so concurrent harnesses never interleave lines.
//! Writing is best effort: a log that cannot be written is reported once on stderr and never
//! fails the call it records.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

/// The harness's environment variable that names the audit log (`off`: none).
pub const AUDIT_LOG_ENV: &str = "DSH_AUDIT_LOG";

/// Whether this process already said it cannot write the audit log.
static WARNED: AtomicBool = AtomicBool::new(false);

/// The audit log this harness appends to, read from its environment: `DSH_AUDIT_LOG` when
/// set and not blank (`off` → none), else `<DSH_HOME>/audit.jsonl`.
pub fn audit_log_path() -> Option<PathBuf> {
    match std::env::var(AUDIT_LOG_ENV) {
        Ok(value) if value.trim() == "off" => None,
        Ok(value) if !value.trim().is_empty() => Some(crate::home::absolutize(std::path::Path::new(&value))),
        _ => {
            let dsh_home = std::env::var("DSH_HOME").ok();
            Some(crate::home::resolve_dsh_home(None, dsh_home.as_deref()).join("audit.jsonl"))
        }
    }
}

/// Appends one decision: its `kind` (`approval`, `secret`, `denial`, `network`,
/// `quarantine`), the `session` it was made in, `what` it was about (an object of short
/// facts) and the `verdict`.
pub fn record(kind: &str, session: Option<&str>, what: Map<String, Value>, verdict: &str) {
    let Some(path) = audit_log_path() else { return };
    let mut line = Map::new();
    line.insert("time".into(), json!(crate::time::utc_now()));
    if let Some(session) = session {
        line.insert("session".into(), json!(session));
    }
    line.insert("kind".into(), json!(kind));
    line.insert("what".into(), Value::Object(what));
    line.insert("verdict".into(), json!(verdict));
    let mut text = Value::Object(line).to_string();
    text.push('\n');
    if let Err(e) = crate::home::append_private(&path, text.as_bytes())
        && !WARNED.swap(true, Ordering::SeqCst)
    {
        eprintln!("dsh-bash: warning: cannot write the audit log {}: {e}", path.display());
    }
}
