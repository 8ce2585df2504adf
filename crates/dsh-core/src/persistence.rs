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
//!
//! Retention (opt-in): with [`SESSION_RETENTION_ENV`] set to a number of days, the
//! `session-jsonl` plugin removes, when it is applied, every `*.jsonl` log under its root whose
//! modification time is older than that ([`JsonlPersistence::remove_older_than`]). An open log
//! is never removed: a session's log is held with a shared `flock` for as long as the session
//! keeps it open (in any process), and logs of sessions attached to this backend are skipped.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, FcntlArg, Flock, FlockArg, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use parking_lot::Mutex;
use serde_json::json;

use crate::context::ServiceKey;
use crate::session::{Session, SessionError, SessionEvent, SessionHeader, SessionLocator};

/// The persistence backend seam: where a session lives, and attaching a session to it.
pub trait SessionPersistence: Send + Sync {
    /// The session's location (which may not exist yet), if this backend keeps it.
    fn locate(&self, session_id: &str) -> Option<SessionLocator>;
    /// Starts persisting `session`'s later events.
    fn attach(&self, session: &Session);
    /// The header recorded for `session_id` when an earlier process persisted that session
    /// (so a later process can take up its cwd); `None` when nothing is recorded.
    fn recorded_header(&self, _session_id: &str) -> Option<SessionHeader> {
        None
    }
}

/// The `type` of a log's first line, which records the session's header (`data`: `id` and,
/// when the session has one, `cwd`) before the first event.
pub const HEADER_RECORD: &str = "session/header";

/// The longest first line [`JsonlPersistence::recorded_header`] reads.
const MAX_HEADER_LINE: u64 = 64 * 1024;

/// Service key of the active persistence backend.
pub const SESSION_PERSISTENCE: ServiceKey<Arc<dyn SessionPersistence>> =
    ServiceKey::new("sessionPersistence");

/// Environment variable of the harness: remove session logs older than this many days when
/// the `session-jsonl` plugin is applied. Unset, blank, `0` or not a whole number: keep every
/// log (the default).
pub const SESSION_RETENTION_ENV: &str = "DSH_SESSION_RETENTION_DAYS";

/// The retention for a value of [`SESSION_RETENTION_ENV`]: `None` (keep everything) unless it
/// is a positive whole number of days.
pub fn session_retention(value: Option<&str>) -> Option<Duration> {
    let days = value?.trim().parse::<u64>().ok().filter(|days| *days > 0)?;
    Some(Duration::from_secs(days.saturating_mul(24 * 60 * 60)))
}

/// How many times a busy log lock is retried before writing without it (a retention sweep
/// holds it only for a moment; logging never waits on it for longer).
const LOCK_ATTEMPTS: usize = 20;

/// Writes `<root>/<encoded session id>.jsonl`, one JSON object per event.
#[derive(Clone, Debug)]
pub struct JsonlPersistence {
    root: PathBuf,
    /// File names of the sessions attached to this backend and still alive, with a count.
    attached: Arc<Mutex<HashMap<String, usize>>>,
}

/// One line of a log, serialized in place from the event (no copy of its data): the fields
/// in this order, as the header line has them.
#[derive(serde::Serialize)]
struct LogRecord<'a> {
    session: &'a str,
    seq: u64,
    at: u64,
    #[serde(rename = "type")]
    kind: &'a str,
    data: &'a serde_json::Value,
}

/// Marks a log name as attached while the session's sink lives.
struct Attached {
    attached: Arc<Mutex<HashMap<String, usize>>>,
    name: String,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let mut attached = self.attached.lock();
        if let Some(count) = attached.get_mut(&self.name) {
            *count -= 1;
            if *count == 0 {
                attached.remove(&self.name);
            }
        }
    }
}

/// A session's open log and the shared lock that keeps retention away from it.
struct OpenLog {
    file: File,
    _lock: Option<Flock<OwnedFd>>,
}

impl JsonlPersistence {
    /// A backend writing its logs under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), attached: Arc::default() }
    }

    /// The directory the logs are written under.
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

    fn recorded_header(&self, session_id: &str) -> Option<SessionHeader> {
        use std::io::{BufRead, Read};
        let name = Self::file_name(session_id);
        let dir = nix::fcntl::open(
            &self.root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let fd = nix::fcntl::openat(dir.as_fd(), name.as_str(), flags, Mode::empty()).ok()?;
        let stat = nix::sys::stat::fstat(fd.as_fd()).ok()?;
        if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG
            || stat.st_uid != nix::unistd::geteuid().as_raw()
        {
            return None;
        }
        let mut line = String::new();
        io::BufReader::new(File::from(fd).take(MAX_HEADER_LINE)).read_line(&mut line).ok()?;
        let record: serde_json::Value = serde_json::from_str(&line).ok()?;
        if record["type"] != HEADER_RECORD || record["session"] != session_id {
            return None;
        }
        serde_json::from_value(record["data"].clone()).ok()
    }

    fn attach(&self, session: &Session) {
        let name = Self::file_name(session.id());
        let path = self.root.join(&name);
        let root = self.root.clone();
        *self.attached.lock().entry(name.clone()).or_insert(0) += 1;
        let attached = Attached { attached: Arc::clone(&self.attached), name: name.clone() };
        let log: Mutex<Option<OpenLog>> = Mutex::new(None);
        // Set once the file system refused the log (a full disk): from then on the log is not
        // kept and appends go on without it, as under an unwritable home.
        let not_kept = std::sync::atomic::AtomicBool::new(false);
        session.add_sink(Arc::new(move |header, event| {
            let _attached = &attached;
            if not_kept.load(std::sync::atomic::Ordering::SeqCst) {
                return Ok(());
            }
            match append(&log, &root, &name, &path, header, event) {
                Err(SessionError::LogIo { source, .. }) if crate::home::file_system_refused(&source) => {
                    crate::home::warn_unwritable(&root, &source);
                    not_kept.store(true, std::sync::atomic::Ordering::SeqCst);
                    Ok(())
                }
                appended => appended,
            }
        }));
    }
}

/// Appends `event` to the session's log, opening it (and writing its header line) first.
fn append(
    log: &Mutex<Option<OpenLog>>,
    root: &Path,
    name: &str,
    path: &Path,
    header: &SessionHeader,
    event: &SessionEvent,
) -> Result<(), SessionError> {
    let mut log = log.lock();
    let file = match &mut *log {
        Some(open) => &mut open.file,
        None => {
            let open = log.insert(open_log(root, name, path)?);
            if open.file.metadata().is_ok_and(|m| m.len() == 0) {
                let mut first = json!({
                    "session": header.id,
                    "seq": 0,
                    "at": event.at,
                    "type": HEADER_RECORD,
                    "data": header,
                })
                .to_string();
                first.push('\n');
                open.file.write_all(first.as_bytes()).map_err(|e| SessionError::log_io(path, e))?;
            }
            &mut open.file
        }
    };
    let record =
        LogRecord { session: &header.id, seq: event.seq, at: event.at, kind: &event.kind, data: &event.data };
    let mut line = serde_json::to_vec(&record).map_err(|e| SessionError::log_io(path, e.into()))?;
    line.push(b'\n');
    file.write_all(&line).map_err(|e| SessionError::log_io(path, e))
}

impl JsonlPersistence {
    /// Removes every `*.jsonl` log directly under the root whose modification time is more
    /// than `max_age` ago; returns the paths removed. A missing root removes nothing.
    ///
    /// Never removed: the log of a session attached to this backend, a log another session
    /// holds open (its shared `flock`; checked with a non-blocking exclusive lock), anything
    /// that is not a regular file owned by the effective user (symlinks are not followed),
    /// and a name that no longer refers to the file examined. Files that fail a check are
    /// skipped; only failing to open or read the root is an error.
    pub fn remove_older_than(&self, max_age: Duration) -> io::Result<Vec<PathBuf>> {
        let dir = match nix::fcntl::open(
            &self.root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(dir) => dir,
            Err(Errno::ENOENT) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let names: Vec<String> = nix::dir::Dir::from_fd(dir.try_clone()?)?
            .into_iter()
            .filter_map(|entry| entry.ok()?.file_name().to_str().ok().map(str::to_owned))
            .filter(|name| name.ends_with(".jsonl"))
            .collect();
        let now = SystemTime::now();
        let mut removed = Vec::new();
        for name in names {
            if self.attached.lock().contains_key(&name) {
                continue;
            }
            if remove_log_if_old(&dir, &name, now, max_age) {
                removed.push(self.root.join(&name));
            }
        }
        Ok(removed)
    }
}

/// One log of [`JsonlPersistence::remove_older_than`]; `true` when it was removed.
fn remove_log_if_old(dir: &OwnedFd, name: &str, now: SystemTime, max_age: Duration) -> bool {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let Ok(fd) = nix::fcntl::openat(dir.as_fd(), name, flags, Mode::empty()) else { return false };
    let old_regular_file_of_ours = |fd: &OwnedFd| {
        nix::sys::stat::fstat(fd.as_fd()).is_ok_and(|stat| {
            SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
                && stat.st_uid == nix::unistd::geteuid().as_raw()
                && older_than(&stat, now, max_age)
        })
    };
    if !old_regular_file_of_ours(&fd) {
        return false;
    }
    let Ok(lock) = Flock::lock(fd, FlockArg::LockExclusiveNonblock) else { return false };
    // Under the lock: still old (nothing appended meanwhile) and still the file at that name.
    if !old_regular_file_of_ours(&lock) || !names_same_file(dir, name, &lock) {
        return false;
    }
    nix::unistd::unlinkat(dir.as_fd(), name, nix::unistd::UnlinkatFlags::NoRemoveDir).is_ok()
}

/// Whether `name` in `dir` (not following a symlink) is the file open as `fd`.
fn names_same_file(dir: &OwnedFd, name: &str, fd: &OwnedFd) -> bool {
    match (
        nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW),
        nix::sys::stat::fstat(fd.as_fd()),
    ) {
        (Ok(named), Ok(open)) => named.st_dev == open.st_dev && named.st_ino == open.st_ino,
        _ => false,
    }
}

/// Whether the modification time is more than `max_age` before `now` (a time in the future
/// is never old).
fn older_than(stat: &FileStat, now: SystemTime, max_age: Duration) -> bool {
    let Ok(secs) = u64::try_from(stat.st_mtime) else { return false };
    let Ok(nanos) = u32::try_from(stat.st_mtime_nsec) else { return false };
    let modified = UNIX_EPOCH + Duration::new(secs, nanos);
    now.duration_since(modified).is_ok_and(|age| age > max_age)
}

/// A shared lock on the log open as `fd`, retried briefly while a retention sweep holds it;
/// `None` when it cannot be had (the log is then written unlocked rather than not at all).
fn lock_shared(fd: &OwnedFd) -> Option<Flock<OwnedFd>> {
    let mut dup = fd.try_clone().ok()?;
    for _ in 0..LOCK_ATTEMPTS {
        match Flock::lock(dup, FlockArg::LockSharedNonblock) {
            Ok(lock) => return Some(lock),
            Err((fd, Errno::EWOULDBLOCK | Errno::EINTR)) => {
                dup = fd;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return None,
        }
    }
    None
}

/// Opens (creating) `<root>/<name>` for appending, as the module doc describes, holding its
/// shared lock. A log a retention sweep removed between the open and the lock is opened again.
fn open_log(root: &Path, name: &str, path: &Path) -> Result<OpenLog, SessionError> {
    let mut attempts = 3;
    loop {
        let file = open_log_file(root, name, path)?;
        let fd = OwnedFd::from(file);
        let lock = lock_shared(&fd);
        attempts -= 1;
        if lock.is_none() || attempts == 0 || still_named(root, name, &fd) {
            return Ok(OpenLog { file: File::from(fd), _lock: lock });
        }
    }
}

/// Whether `<root>/<name>` is still the file open as `fd`.
fn still_named(root: &Path, name: &str, fd: &OwnedFd) -> bool {
    nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .is_ok_and(|dir| names_same_file(&dir, name, fd))
}

/// Opens (creating) `<root>/<name>` for appending, as the module doc describes.
fn open_log_file(root: &Path, name: &str, path: &Path) -> Result<File, SessionError> {
    let at_root = |e: std::io::Error| SessionError::log_io(root, e);
    let at_path = |e: std::io::Error| SessionError::log_io(path, e);
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
        return Err(SessionError::LogNotOwned { path: path.to_owned(), uid: euid });
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
        assert_eq!(lines.len(), 3, "the header, then one line per event");
        assert!(lines[0].contains(r#""type":"session/header""#));
        assert!(lines[2].contains(r#""type":"sandbox/mode""#));
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
        assert_eq!(kinds, [r#""session/header""#, r#""turn/start""#, r#""turn/end""#]);
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
        assert!(
            matches!(&err, SessionError::LogIo { path, source } if *path == log && source.raw_os_error() == Some(libc::ELOOP)),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
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
        assert!(matches!(&err, SessionError::LogIo { path, .. } if *path == fifo), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!("session log {}: No such device or address (os error 6)", fifo.display())
        );

        let dir = p.locate("dir").expect("jsonl").path;
        fs::create_dir(&dir).expect("mkdir");
        let s = Session::new(SessionHeader { id: "dir".into(), cwd: None });
        p.attach(&s);
        let err = s.begin_turn().expect_err("refused");
        assert_eq!(err.to_string(), format!("session log {}: Is a directory (os error 21)", dir.display()));
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
        assert!(matches!(&err, SessionError::LogIo { path, .. } if *path == root), "{err:?}");
        assert_eq!(err.to_string(), format!("session log {}: Not a directory (os error 20)", root.display()));
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
                "{{\"session\":\"s\",\"seq\":0,\"at\":{at},\"type\":\"session/header\",\"data\":{{\"id\":\"s\"}}}}\n\
                 {{\"session\":\"s\",\"seq\":1,\"at\":{at},\"type\":\"sandbox/mode\",\"data\":{{\"mode\":\"read-only\"}}}}\n",
                at = event.at
            )
        );
    }

    #[test]
    fn a_later_backend_reads_the_recorded_header() {
        let (dir, p) = log_dir();
        let cwd = dir.path().join("project");
        let s = Session::new(SessionHeader { id: "s/1".into(), cwd: Some(cwd.clone()) });
        p.attach(&s);
        assert_eq!(p.recorded_header("s/1"), None, "nothing written yet");
        s.begin_turn().expect("append");
        s.end_turn().expect("append");
        let later = JsonlPersistence::new(p.root());
        assert_eq!(later.recorded_header("s/1"), Some(SessionHeader { id: "s/1".into(), cwd: Some(cwd) }));
        assert_eq!(later.recorded_header("other"), None);
        // Appending to an existing log adds no second header.
        let again = Session::new(SessionHeader { id: "s/1".into(), cwd: None });
        later.attach(&again);
        again.begin_turn().expect("append");
        let text = fs::read_to_string(p.locate("s/1").expect("jsonl").path).expect("log");
        assert_eq!(text.matches("session/header").count(), 1, "{text}");
        // A log whose first line is not a header, or a symlink, records nothing.
        fs::write(p.root().join("bare.jsonl"), "{\"type\":\"turn/start\"}\n").expect("bare");
        assert_eq!(later.recorded_header("bare"), None);
        std::os::unix::fs::symlink(p.locate("s/1").expect("jsonl").path, p.root().join("link.jsonl"))
            .expect("symlink");
        assert_eq!(later.recorded_header("link"), None);
    }

    fn age(path: &Path, days: u64) {
        let when = SystemTime::now() - Duration::from_secs(days * 24 * 60 * 60);
        let file = File::open(path).expect("open to set times");
        file.set_times(fs::FileTimes::new().set_modified(when).set_accessed(when)).expect("set times");
    }

    #[test]
    fn retention_removes_old_logs_and_keeps_new_and_open_ones() {
        let (dir, p) = log_dir();
        fs::create_dir_all(p.root()).expect("root");
        let root = p.root().to_path_buf();
        let old = root.join("old.jsonl");
        fs::write(&old, "{}\n").expect("old");
        age(&old, 10);
        let new = root.join("new.jsonl");
        fs::write(&new, "{}\n").expect("new");
        age(&new, 1);
        let not_a_log = root.join("notes.txt");
        fs::write(&not_a_log, "x").expect("notes");
        age(&not_a_log, 10);
        let target = dir.path().join("elsewhere.jsonl");
        fs::write(&target, "precious").expect("target");
        age(&target, 10);
        let link = root.join("link.jsonl");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");

        // A session of this backend, and one another backend (another process) keeps open.
        let mine = Session::new(SessionHeader { id: "mine".into(), cwd: None });
        p.attach(&mine);
        mine.begin_turn().expect("append");
        let theirs = Session::new(SessionHeader { id: "theirs".into(), cwd: None });
        let other = JsonlPersistence::new(&root);
        other.attach(&theirs);
        theirs.begin_turn().expect("append");
        // Attached here, never written: protected by name only.
        let quiet = Session::new(SessionHeader { id: "quiet".into(), cwd: None });
        p.attach(&quiet);
        let quiet_log = root.join("quiet.jsonl");
        fs::write(&quiet_log, "{}\n").expect("quiet");
        for log in [root.join("mine.jsonl"), root.join("theirs.jsonl"), quiet_log.clone()] {
            age(&log, 10);
        }

        let removed = p.remove_older_than(Duration::from_secs(7 * 24 * 60 * 60)).expect("retention");
        assert_eq!(removed, vec![old.clone()]);
        assert!(!old.exists());
        for kept in
            [&new, &not_a_log, &link, &quiet_log, &root.join("mine.jsonl"), &root.join("theirs.jsonl")]
        {
            assert!(fs::symlink_metadata(kept).is_ok(), "{} kept", kept.display());
        }
        assert_eq!(fs::read_to_string(&target).expect("target"), "precious");

        // The open logs are still the files their sessions write to.
        theirs.end_turn().expect("append");
        let text = fs::read_to_string(root.join("theirs.jsonl")).expect("log");
        assert_eq!(text.lines().count(), 3, "header, turn/start, turn/end");

        // Once nobody holds them, old logs go.
        drop((mine, theirs, quiet));
        for log in ["mine.jsonl", "theirs.jsonl", "quiet.jsonl"] {
            age(&root.join(log), 10);
        }
        let mut removed = p.remove_older_than(Duration::from_secs(7 * 24 * 60 * 60)).expect("retention");
        removed.sort();
        let expected: Vec<PathBuf> =
            ["mine.jsonl", "quiet.jsonl", "theirs.jsonl"].iter().map(|n| root.join(n)).collect();
        assert_eq!(removed, expected);
    }

    #[test]
    fn retention_of_a_missing_root_removes_nothing() {
        let (_dir, p) = log_dir();
        assert_eq!(p.remove_older_than(Duration::ZERO).expect("retention"), Vec::<PathBuf>::new());
    }

    #[test]
    fn retention_knob_is_opt_in() {
        assert_eq!(session_retention(None), None);
        assert_eq!(session_retention(Some("")), None);
        assert_eq!(session_retention(Some("0")), None);
        assert_eq!(session_retention(Some("thirty")), None);
        assert_eq!(session_retention(Some(" 30 ")), Some(Duration::from_secs(30 * 86_400)));
    }
}
