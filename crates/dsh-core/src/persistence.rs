//! JSONL persistence of session logs: one file per session, appended as events happen.
//!
//! What this guarantees, even against a command that can plant symlinks or files where the
//! harness's user can write: a session's log is opened **once**, on its first event, and every
//! later event is appended through that handle, so nothing done to the path afterwards (a
//! symlink, a rename) redirects the harness's writes. The open itself follows no symlink at the
//! log's name or at the root's last component (`O_NOFOLLOW`, relative to a directory
//! descriptor of the root), never blocks on a planted FIFO, and is refused unless the result
//! is a regular file owned by the harness's effective user. A refused or failed open fails that
//! event's append and is tried again on the next event.

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::{FcntlArg, OFlag};
use nix::sys::stat::{Mode, SFlag};
use parking_lot::Mutex;
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
        self.root.join(Self::file_name(session_id))
    }

    fn file_name(session_id: &str) -> String {
        format!("{}.jsonl", encode_file_name(session_id))
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
        let name = Self::file_name(session.id());
        let path = self.root.join(&name);
        let root = self.root.clone();
        let log: Mutex<Option<File>> = Mutex::new(None);
        session.add_sink(Arc::new(move |header, event| {
            let mut log = log.lock();
            let file = match &mut *log {
                Some(file) => file,
                None => log.insert(open_log(&root, &name, &path)?),
            };
            let mut line = json!({
                "session": header.id,
                "seq": event.seq,
                "at": event.at,
                "type": event.kind,
                "data": event.data,
            })
            .to_string();
            line.push('\n');
            file.write_all(line.as_bytes()).map_err(|e| format!("session log {}: {e}", path.display()))
        }));
    }
}

/// Opens (creating) `<root>/<name>` for appending, as the module doc describes.
fn open_log(root: &Path, name: &str, path: &Path) -> Result<File, String> {
    let at_root = |e: std::io::Error| format!("session log {}: {e}", root.display());
    let at_path = |e: std::io::Error| format!("session log {}: {e}", path.display());
    fs::create_dir_all(root).map_err(at_root)?;
    let dir = nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| at_root(e.into()))?;
    let flags = OFlag::O_WRONLY
        | OFlag::O_APPEND
        | OFlag::O_CREAT
        | OFlag::O_NOFOLLOW
        | OFlag::O_CLOEXEC
        | OFlag::O_NONBLOCK;
    let fd = nix::fcntl::openat(dir.as_fd(), name, flags, Mode::from_bits_truncate(0o666))
        .map_err(|e| at_path(e.into()))?;
    let stat = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| at_path(e.into()))?;
    let euid = nix::unistd::geteuid().as_raw();
    let regular = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG;
    if !regular || stat.st_uid != euid {
        return Err(format!("session log {}: not a regular file owned by uid {euid}", path.display()));
    }
    // O_NONBLOCK only kept the open from waiting on a FIFO; appends to the file block as usual.
    nix::fcntl::fcntl(fd.as_fd(), FcntlArg::F_SETFL(OFlag::O_APPEND)).map_err(|e| at_path(e.into()))?;
    Ok(File::from(fd))
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

    fn log_dir() -> (tempfile::TempDir, JsonlPersistence) {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = JsonlPersistence::new(dir.path().join("sessions"));
        (dir, p)
    }

    #[test]
    fn a_symlink_planted_after_the_first_event_does_not_redirect_the_log() {
        let (dir, p) = log_dir();
        let s = Session::new(SessionHeader { id: "s".into(), cwd: None });
        p.attach(&s);
        s.begin_turn().expect("append");
        let log = p.locate("s").expect("jsonl").path;
        let moved = dir.path().join("sessions/moved.jsonl");
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious").expect("victim");
        fs::rename(&log, &moved).expect("move the log aside");
        std::os::unix::fs::symlink(&victim, &log).expect("plant");

        s.end_turn().expect("append");
        assert_eq!(fs::read_to_string(&victim).expect("victim"), "precious");
        let text = fs::read_to_string(&moved).expect("the log the session opened");
        let kinds: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json")["type"].to_string())
            .collect();
        assert_eq!(kinds, [r#""turn/start""#, r#""turn/end""#]);
    }

    #[test]
    fn a_symlink_planted_before_the_first_event_is_refused() {
        let (dir, p) = log_dir();
        fs::create_dir_all(p.root()).expect("root");
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious").expect("victim");
        let log = p.locate("s").expect("jsonl").path;
        std::os::unix::fs::symlink(&victim, &log).expect("plant");
        let s = Session::new(SessionHeader { id: "s".into(), cwd: None });
        p.attach(&s);
        let err = s.begin_turn().expect_err("refused");
        assert_eq!(
            err,
            format!("session log {}: Too many levels of symbolic links (os error 40)", log.display())
        );
        assert!(s.events().is_empty(), "a failing sink records nothing");
        assert_eq!(fs::read_to_string(&victim).expect("victim"), "precious");
    }

    #[test]
    fn a_planted_fifo_or_directory_is_refused_without_blocking() {
        let (_dir, p) = log_dir();
        fs::create_dir_all(p.root()).expect("root");
        let fifo = p.locate("fifo").expect("jsonl").path;
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).expect("mkfifo");
        let s = Session::new(SessionHeader { id: "fifo".into(), cwd: None });
        p.attach(&s);
        let err = s.begin_turn().expect_err("refused");
        assert_eq!(err, format!("session log {}: No such device or address (os error 6)", fifo.display()));

        let dir = p.locate("dir").expect("jsonl").path;
        fs::create_dir(&dir).expect("mkdir");
        let s = Session::new(SessionHeader { id: "dir".into(), cwd: None });
        p.attach(&s);
        let err = s.begin_turn().expect_err("refused");
        assert_eq!(err, format!("session log {}: Is a directory (os error 21)", dir.display()));
    }

    #[test]
    fn a_symlinked_root_is_refused() {
        let (dir, _) = log_dir();
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir(&elsewhere).expect("mkdir");
        let root = dir.path().join("sessions");
        std::os::unix::fs::symlink(&elsewhere, &root).expect("plant");
        let p = JsonlPersistence::new(&root);
        let s = Session::new(SessionHeader { id: "s".into(), cwd: None });
        p.attach(&s);
        let err = s.begin_turn().expect_err("refused");
        assert_eq!(err, format!("session log {}: Not a directory (os error 20)", root.display()));
        assert_eq!(fs::read_dir(&elsewhere).expect("dir").count(), 0);
    }

    #[test]
    fn lines_keep_their_format() {
        let (_dir, p) = log_dir();
        let s = Session::new(SessionHeader { id: "s".into(), cwd: None });
        p.attach(&s);
        let event = s.append("sandbox/mode", json!({"mode": "read-only"})).expect("append");
        let text = fs::read_to_string(p.locate("s").expect("jsonl").path).expect("log");
        assert_eq!(
            text,
            format!(
                "{{\"session\":\"s\",\"seq\":1,\"at\":{},\"type\":\"sandbox/mode\",\"data\":{{\"mode\":\"read-only\"}}}}\n",
                event.at
            )
        );
    }
}
