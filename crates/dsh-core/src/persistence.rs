//! JSONL persistence of session logs: one file per session, appended as events happen.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use crate::context::ServiceKey;
use crate::session::{Session, SessionLocator};

/// The persistence backend seam: where a session lives, and attaching a session to it.
pub trait SessionPersistence: Send + Sync {
    /// The session's location (which may not exist yet), if this backend keeps it.
    fn locate(&self, session_id: &str) -> Option<SessionLocator>;
    /// Starts persisting `session`'s later events.
    fn attach(&self, session: &Session);
}

/// Service key of the active persistence backend.
pub const SESSION_PERSISTENCE: ServiceKey<Arc<dyn SessionPersistence>> =
    ServiceKey::new("sessionPersistence");

/// Writes `<root>/<encoded session id>.jsonl`, one JSON object per event.
#[derive(Clone, Debug)]
pub struct JsonlPersistence {
    root: PathBuf,
}

impl JsonlPersistence {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_for(&self, session_id: &str) -> PathBuf {
        self.root.join(format!("{}.jsonl", encode_file_name(session_id)))
    }
}

/// Keeps `[A-Za-z0-9._-]` and percent-encodes every other byte, so an id can never escape
/// the root (`../x` → `..%2Fx`) and distinct ids stay distinct.
fn encode_file_name(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.starts_with('.') {
        out.replace_range(0..1, "%2E");
    }
    out
}

impl SessionPersistence for JsonlPersistence {
    fn locate(&self, session_id: &str) -> Option<SessionLocator> {
        Some(SessionLocator { kind: "jsonl".to_owned(), path: self.path_for(session_id) })
    }

    fn attach(&self, session: &Session) {
        let path = self.path_for(session.id());
        let root = self.root.clone();
        session.add_sink(Arc::new(move |header, event| {
            fs::create_dir_all(&root).map_err(|e| format!("session log {}: {e}", root.display()))?;
            let mut file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| format!("session log {}: {e}", path.display()))?;
            let line = json!({
                "session": header.id,
                "seq": event.seq,
                "at": event.at,
                "type": event.kind,
                "data": event.data,
            });
            writeln!(file, "{line}").map_err(|e| format!("session log {}: {e}", path.display()))
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionHeader;

    #[test]
    fn appends_one_line_per_event() {
        let dir = std::env::temp_dir().join(format!("dsh-core-jsonl-{}", std::process::id()));
        let p = JsonlPersistence::new(&dir);
        let s = Session::new(SessionHeader { id: "../s 1".into(), cwd: None });
        p.attach(&s);
        s.begin_turn().expect("append");
        s.append("sandbox/mode", json!({"mode": "read-only"})).expect("append");
        let loc = p.locate("../s 1").expect("jsonl");
        assert_eq!(loc.path, dir.join("%2E.%2Fs%201.jsonl"));
        let text = fs::read_to_string(&loc.path).expect("file");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].contains(r#""type":"sandbox/mode""#));
        let _ = fs::remove_dir_all(&dir);
    }
}
