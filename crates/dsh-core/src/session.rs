//! Sessions: an immutable header and an append-only event log, optionally persisted.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The immutable identity of a session: its id and optional working directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHeader {
    /// The session id (also the id of its agent).
    pub id: String,
    /// The session's working directory, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
}

/// One entry of a session log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionEvent {
    /// Position in the log, starting at 1.
    pub seq: u64,
    /// Epoch milliseconds.
    pub at: u64,
    /// Event type, e.g. `turn/start`, `sandbox/mode`, `approval/asked`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The event payload.
    pub data: Value,
}

/// Where the persistence backend keeps a session (`{kind: "jsonl", path}` for JSONL files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionLocator {
    /// The backend kind (`jsonl`).
    pub kind: String,
    /// Where the backend keeps the session (for `jsonl`, the log file).
    pub path: PathBuf,
}

/// Why an event could not be appended to a session: a sink (persistence) refused it, and
/// nothing was recorded. `Display` is the exact message hosts and tools show.
#[derive(Clone, Debug, thiserror::Error)]
pub enum SessionError {
    /// Opening, checking or writing the session's log at `path` failed.
    #[error("session log {}: {source}", path.display())]
    LogIo {
        /// The log (or its root directory) the failing operation was about.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: Arc<io::Error>,
    },
    /// The log's name is taken by something other than a regular file owned by the
    /// harness's effective user, so it is not written.
    #[error("session log {}: not a regular file owned by uid {uid}", path.display())]
    LogNotOwned {
        /// The refused log.
        path: PathBuf,
        /// The harness's effective user id.
        uid: u32,
    },
}

impl SessionError {
    /// A [`SessionError::LogIo`] about `path`.
    pub fn log_io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::LogIo { path: path.into(), source: Arc::new(source) }
    }
}

/// Two errors are equal when they are the same variant about the same path and say the same
/// thing (an [`io::Error`] has no equality of its own).
impl PartialEq for SessionError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::LogIo { path: a, source: x }, Self::LogIo { path: b, source: y }) => {
                a == b && x.kind() == y.kind() && x.to_string() == y.to_string()
            }
            (Self::LogNotOwned { path: a, uid: x }, Self::LogNotOwned { path: b, uid: y }) => {
                a == b && x == y
            }
            _ => false,
        }
    }
}

impl Eq for SessionError {}

/// Observes every appended event (persistence, audits). Errors abort the append.
pub type EventSink = Arc<dyn Fn(&SessionHeader, &SessionEvent) -> Result<(), SessionError> + Send + Sync>;

/// How many of its latest events a session keeps in memory. Older ones live only in the
/// persisted log (when a persistence backend is attached); the last event of each type is
/// kept besides, so [`Session::last_event`] and [`Session::in_open_turn`] see the whole log.
pub const RECENT_EVENTS: usize = 256;

/// A session: header plus append-only log.
pub struct Session {
    header: SessionHeader,
    log: Mutex<Log>,
    sinks: Mutex<Vec<EventSink>>,
}

/// The in-memory part of a log: a bounded window of the latest events and the last event of
/// each type (the types are a small fixed vocabulary).
#[derive(Default)]
struct Log {
    appended: u64,
    recent: VecDeque<SessionEvent>,
    last_by_kind: HashMap<String, SessionEvent>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("header", &self.header).finish_non_exhaustive()
    }
}

/// Event type that opens a turn.
pub const TURN_START: &str = "turn/start";
/// Event type that closes a turn.
pub const TURN_END: &str = "turn/end";

impl Session {
    /// A session with this header, an empty log and no sinks.
    pub fn new(header: SessionHeader) -> Arc<Self> {
        Arc::new(Self { header, log: Mutex::new(Log::default()), sinks: Mutex::new(Vec::new()) })
    }

    /// The immutable id and working directory.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.header.id
    }

    /// Adds an observer of later appends (e.g. JSONL persistence).
    pub fn add_sink(&self, sink: EventSink) {
        self.sinks.lock().push(sink);
    }

    /// Appends one event; a failing sink aborts the append and nothing is recorded.
    pub fn append(&self, kind: &str, data: Value) -> Result<SessionEvent, SessionError> {
        let mut log = self.log.lock();
        let at = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        let event = SessionEvent { seq: log.appended + 1, at, kind: kind.to_owned(), data };
        for sink in self.sinks.lock().iter() {
            sink(&self.header, &event)?;
        }
        log.appended += 1;
        if log.recent.len() == RECENT_EVENTS {
            log.recent.pop_front();
        }
        log.recent.push_back(event.clone());
        log.last_by_kind.insert(event.kind.clone(), event.clone());
        Ok(event)
    }

    /// A snapshot of the log's latest events, oldest first: the whole log while it holds at
    /// most [`RECENT_EVENTS`] events, else the last [`RECENT_EVENTS`] of them.
    pub fn events(&self) -> Vec<SessionEvent> {
        self.log.lock().recent.iter().cloned().collect()
    }

    /// How many events were ever appended (the `seq` of the last one).
    pub fn event_count(&self) -> u64 {
        self.log.lock().appended
    }

    /// The last event of `kind`, if any.
    pub fn last_event(&self, kind: &str) -> Option<SessionEvent> {
        self.log.lock().last_by_kind.get(kind).cloned()
    }

    /// True when the last turn boundary is a `turn/start`.
    pub fn in_open_turn(&self) -> bool {
        let log = self.log.lock();
        let seq = |kind: &str| log.last_by_kind.get(kind).map(|e| e.seq);
        match (seq(TURN_START), seq(TURN_END)) {
            (Some(start), Some(end)) => start > end,
            (start, _) => start.is_some(),
        }
    }

    /// Opens a turn (hosts do this around each call they make for a session).
    pub fn begin_turn(&self) -> Result<(), SessionError> {
        self.append(TURN_START, Value::Object(Default::default())).map(|_| ())
    }

    /// Closes the open turn.
    pub fn end_turn(&self) -> Result<(), SessionError> {
        self.append(TURN_END, Value::Object(Default::default())).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Arc<Session> {
        Session::new(SessionHeader { id: "s".into(), cwd: None })
    }

    #[test]
    fn a_refusing_sink_fails_the_append_with_its_error_and_records_nothing() {
        let s = session();
        s.add_sink(Arc::new(|_header, event| {
            if event.kind == TURN_END {
                return Err(SessionError::LogNotOwned { path: "/logs/s.jsonl".into(), uid: 1000 });
            }
            Ok(())
        }));
        s.begin_turn().expect("append");
        let err = s.end_turn().expect_err("refused");
        assert!(matches!(&err, SessionError::LogNotOwned { uid: 1000, .. }), "{err:?}");
        assert_eq!(err.to_string(), "session log /logs/s.jsonl: not a regular file owned by uid 1000");
        assert!(s.in_open_turn(), "the refused turn/end was not recorded");
        assert_eq!(s.events().len(), 1);
    }

    #[test]
    fn the_in_memory_log_is_bounded_and_last_events_survive_the_window() {
        let s = session();
        s.append("sandbox/mode", serde_json::json!({"mode": "read-only"})).expect("append");
        s.begin_turn().expect("append");
        for _ in 0..RECENT_EVENTS * 4 {
            s.append("approval/asked", Value::Null).expect("append");
        }
        let events = s.events();
        assert_eq!(events.len(), RECENT_EVENTS, "only the latest events stay in memory");
        let total = RECENT_EVENTS as u64 * 4 + 2;
        assert_eq!(s.event_count(), total);
        assert_eq!(events.last().map(|e| e.seq), Some(total));
        assert_eq!(events.first().map(|e| e.seq), Some(total - RECENT_EVENTS as u64 + 1));
        assert_eq!(s.last_event("sandbox/mode").map(|e| e.seq), Some(1), "older than the window");
        assert!(s.in_open_turn(), "the turn/start left the window but still counts");
        s.end_turn().expect("append");
        assert!(!s.in_open_turn());
        s.begin_turn().expect("append");
        assert!(s.in_open_turn());
    }

    #[test]
    fn io_errors_print_the_log_path_then_the_os_error_and_compare_by_content() {
        let refused = || SessionError::log_io("/logs/s.jsonl", io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(refused().to_string(), "session log /logs/s.jsonl: No space left on device (os error 28)");
        assert_eq!(refused(), refused());
        assert_ne!(
            refused(),
            SessionError::log_io("/logs/t.jsonl", io::Error::from_raw_os_error(libc::ENOSPC))
        );
        assert_ne!(refused(), SessionError::LogNotOwned { path: "/logs/s.jsonl".into(), uid: 0 });
    }
}
