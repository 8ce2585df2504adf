//! Sessions: an immutable header and an append-only event log, optionally persisted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The immutable identity of a session: its id and optional working directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHeader {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
}

/// One entry of a session log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionEvent {
    pub seq: u64,
    /// Epoch milliseconds.
    pub at: u64,
    /// Event type, e.g. `turn/start`, `sandbox/mode`, `approval/asked`.
    #[serde(rename = "type")]
    pub kind: String,
    pub data: Value,
}

/// Where the persistence backend keeps a session (`{kind: "jsonl", path}` for JSONL files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionLocator {
    pub kind: String,
    pub path: PathBuf,
}

/// Observes every appended event (persistence, audits). Errors abort the append.
pub type EventSink = Arc<dyn Fn(&SessionHeader, &SessionEvent) -> Result<(), String> + Send + Sync>;

/// A session: header plus append-only log.
pub struct Session {
    header: SessionHeader,
    log: Mutex<Vec<SessionEvent>>,
    sinks: Mutex<Vec<EventSink>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("header", &self.header).finish_non_exhaustive()
    }
}

pub const TURN_START: &str = "turn/start";
pub const TURN_END: &str = "turn/end";

impl Session {
    pub fn new(header: SessionHeader) -> Arc<Self> {
        Arc::new(Self { header, log: Mutex::new(Vec::new()), sinks: Mutex::new(Vec::new()) })
    }

    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    pub fn id(&self) -> &str {
        &self.header.id
    }

    /// Adds an observer of later appends (e.g. JSONL persistence).
    pub fn add_sink(&self, sink: EventSink) {
        self.sinks.lock().push(sink);
    }

    /// Appends one event; a failing sink aborts the append and nothing is recorded.
    pub fn append(&self, kind: &str, data: Value) -> Result<SessionEvent, String> {
        let mut log = self.log.lock();
        let at = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        let event = SessionEvent { seq: log.len() as u64 + 1, at, kind: kind.to_owned(), data };
        for sink in self.sinks.lock().iter() {
            sink(&self.header, &event)?;
        }
        log.push(event.clone());
        Ok(event)
    }

    /// A snapshot of the whole log.
    pub fn events(&self) -> Vec<SessionEvent> {
        self.log.lock().clone()
    }

    /// The last event of `kind`, if any.
    pub fn last_event(&self, kind: &str) -> Option<SessionEvent> {
        self.log.lock().iter().rev().find(|e| e.kind == kind).cloned()
    }

    /// True when the last turn boundary is a `turn/start`.
    pub fn in_open_turn(&self) -> bool {
        self.log
            .lock()
            .iter()
            .rev()
            .find(|e| e.kind == TURN_START || e.kind == TURN_END)
            .is_some_and(|e| e.kind == TURN_START)
    }

    /// Opens a turn (hosts do this around each call they make for a session).
    pub fn begin_turn(&self) -> Result<(), String> {
        self.append(TURN_START, Value::Object(Default::default())).map(|_| ())
    }

    /// Closes the open turn.
    pub fn end_turn(&self) -> Result<(), String> {
        self.append(TURN_END, Value::Object(Default::default())).map(|_| ())
    }
}
