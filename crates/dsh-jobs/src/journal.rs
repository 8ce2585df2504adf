//! The crash-safe job journal: job starts, spill files and ends appended to a per-harness file
//! under `<DSH_HOME>/sessions/jobs/`, so a harness that starts after one that was killed finds
//! that harness's unfinished jobs.
//!
//! * Each harness writes `<pid>-<nanos>.journal` (JSON lines) and holds it with an exclusive
//!   `flock` for its whole life (close-on-exec, so no command inherits it). A journal whose
//!   lock can be taken belongs to a harness that is gone.
//! * On start, every such journal is read: each job started and never ended is stopped if its
//!   process is still alive **and really the same** (same process group leader, same start
//!   time from `/proc/<pid>/stat` field 22; a pid recycled by another process is never
//!   signalled), then handed to the registry as a `lost` job for its owning session.
//! * The recovering harness keeps holding the dead journal's lock while it reports its lost
//!   jobs; once all of them were reported the file is removed (a journal with nothing lost
//!   is removed at once). Unreported journals older than the session-log retention
//!   (`DSH_SESSION_RETENTION_DAYS`) are removed unread.
//! * A harness that ends normally removes its own journal.
//!
//! Writing never fails a job: a failing append is logged (debug) and forgotten.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// The extension of journal files.
const EXTENSION: &str = "journal";

/// One job of a dead harness that never ended.
#[derive(Clone, Debug)]
pub(crate) struct LostJob {
    pub id: String,
    pub kind: String,
    pub label: String,
    pub owner: Option<String>,
    pub started_at: u64,
    pub spills: Vec<PathBuf>,
    /// The journal it came from.
    pub origin: PathBuf,
}

/// A dead harness's journal this harness adopted: locked until its lost jobs are reported.
struct Adopted {
    _lock: Flock<File>,
    pending: HashSet<String>,
}

/// This harness's journal.
pub(crate) struct Journal {
    path: PathBuf,
    file: Mutex<Option<Flock<File>>>,
    adopted: Mutex<HashMap<PathBuf, Adopted>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("path", &self.path).finish_non_exhaustive()
    }
}

/// A process's start time (`/proc/<pid>/stat` field 22) and process group (field 5).
pub(crate) fn process_identity(pid: u32) -> Option<(u64, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields restart after the last `)`.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is at index n - 3.
    if fields.first() == Some(&"Z") {
        return None;
    }
    let pgrp = fields.get(2)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((start, pgrp))
}

/// Signals (`SIGKILL`) the process `pid` and, when it leads it, its group — only when a live
/// process with that pid has exactly the recorded start time and group. `true` when signalled.
pub(crate) fn stop_if_same(pid: u32, pgid: u32, start_time: u64) -> bool {
    if pid <= 1 || pid == std::process::id() {
        return false;
    }
    let Some((start, group)) = process_identity(pid) else { return false };
    if start != start_time || group != pgid {
        return false;
    }
    let own_group = nix::unistd::getpgrp().as_raw() as u32;
    if pgid == pid && pgid != own_group {
        let _ = nix::sys::signal::killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
    }
    let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    true
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn older_than(path: &Path, max_age: Duration) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|modified| SystemTime::now().duration_since(modified).ok())
        .is_some_and(|age| age > max_age)
}

impl Journal {
    /// Opens (creating `dir`) this harness's journal and recovers the journals of dead
    /// harnesses: their leftover processes are stopped and their unfinished jobs returned.
    pub(crate) fn open(dir: &Path, retention: Option<Duration>) -> std::io::Result<(Self, Vec<LostJob>)> {
        std::fs::create_dir_all(dir)?;
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!("{}-{nanos:09}.{EXTENSION}", std::process::id()));
        let file = OpenOptions::new().append(true).create_new(true).open(&path)?;
        let lock =
            Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| std::io::Error::from(e))?;
        let journal = Self { path, file: Mutex::new(Some(lock)), adopted: Mutex::new(HashMap::new()) };
        let lost = journal.recover(dir, retention);
        Ok((journal, lost))
    }

    /// Reads every journal whose harness is gone (see the module doc).
    fn recover(&self, dir: &Path, retention: Option<Duration>) -> Vec<LostJob> {
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == EXTENSION) && *p != self.path)
            .collect();
        paths.sort();
        let mut lost = Vec::new();
        for path in paths {
            let Ok(file) = File::open(&path) else { continue };
            // A live harness holds its journal's lock (or another harness adopted it).
            let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else { continue };
            let jobs = read_unfinished(&lock, &path);
            let expired = retention.is_some_and(|age| older_than(&path, age));
            if jobs.is_empty() || expired {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let pending = jobs.iter().map(|j| j.id.clone()).collect();
            self.adopted.lock().insert(path.clone(), Adopted { _lock: lock, pending });
            lost.extend(jobs);
        }
        lost
    }

    fn append(&self, record: Value) {
        let mut line = record.to_string();
        line.push('\n');
        if let Some(file) = self.file.lock().as_mut()
            && let Err(e) = file.write_all(line.as_bytes())
        {
            // A full disk: as under an unwritable home, one warning says the journal is not kept.
            if dsh_core::home::file_system_refused(&e) {
                dsh_core::home::warn_unwritable(self.path.parent().unwrap_or(&self.path), &e);
            }
            tracing::debug!(error = %e, path = %self.path.display(), "job journal append failed");
        }
    }

    /// A job started.
    pub(crate) fn started(
        &self,
        id: &str,
        kind: &str,
        label: &str,
        owner: Option<&str>,
        started_at: u64,
        process: Option<(u32, u32, Option<u64>)>,
    ) {
        let mut record = json!({
            "type": "start", "id": id, "kind": kind, "label": label, "owner": owner, "at": started_at,
        });
        if let Some((pid, pgid, start_time)) = process {
            record["pid"] = json!(pid);
            record["pgid"] = json!(pgid);
            record["startTime"] = json!(start_time);
        }
        self.append(record);
    }

    /// A job's process opened a spill file.
    pub(crate) fn spilled(&self, id: &str, path: &Path) {
        self.append(json!({"type": "spill", "id": id, "path": path.to_string_lossy()}));
    }

    /// A job settled.
    pub(crate) fn ended(&self, id: &str) {
        self.append(json!({"type": "end", "id": id, "at": now_ms()}));
    }

    /// A lost job (by its id in `origin`) was reported to its owner; the last one removes
    /// the dead harness's journal.
    pub(crate) fn reported(&self, origin: &Path, id: &str) {
        let mut adopted = self.adopted.lock();
        let Some(entry) = adopted.get_mut(origin) else { return };
        entry.pending.remove(id);
        if entry.pending.is_empty() {
            let _ = std::fs::remove_file(origin);
            adopted.remove(origin);
        }
    }

    /// This harness ends normally: its journal goes (every job was torn down).
    pub(crate) fn close(&self) {
        if self.file.lock().take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A journaled process: pid, process group, start time.
type Identity = (u32, u32, u64);

/// The jobs a journal started and never ended, their leftover processes stopped.
fn read_unfinished(file: &File, origin: &Path) -> Vec<LostJob> {
    let mut order: Vec<String> = Vec::new();
    let mut jobs: HashMap<String, (LostJob, Option<Identity>)> = HashMap::new();
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        // A torn last line (the harness died mid-write) is skipped.
        let Ok(record) = serde_json::from_str::<Value>(&line) else { continue };
        let Some(id) = record["id"].as_str().map(str::to_owned) else { continue };
        match record["type"].as_str() {
            Some("start") => {
                let text = |k: &str| record[k].as_str().unwrap_or_default().to_owned();
                let process =
                    match (record["pid"].as_u64(), record["pgid"].as_u64(), record["startTime"].as_u64()) {
                        (Some(pid), Some(pgid), Some(start)) => Some((pid as u32, pgid as u32, start)),
                        _ => None,
                    };
                let job = LostJob {
                    id: id.clone(),
                    kind: text("kind"),
                    label: text("label"),
                    owner: record["owner"].as_str().map(str::to_owned),
                    started_at: record["at"].as_u64().unwrap_or(0),
                    spills: Vec::new(),
                    origin: origin.to_path_buf(),
                };
                if job.kind.is_empty() {
                    continue;
                }
                if jobs.insert(id.clone(), (job, process)).is_none() {
                    order.push(id);
                }
            }
            Some("spill") => {
                if let (Some((job, _)), Some(path)) = (jobs.get_mut(&id), record["path"].as_str())
                    && !job.spills.iter().any(|p| p == Path::new(path))
                {
                    job.spills.push(PathBuf::from(path));
                }
            }
            Some("end") => {
                jobs.remove(&id);
            }
            _ => {}
        }
    }
    order
        .into_iter()
        .filter_map(|id| jobs.remove(&id))
        .map(|(job, process)| {
            if let Some((pid, pgid, start)) = process
                && stop_if_same(pid, pgid, start)
            {
                tracing::debug!(pid, job = %job.id, "stopped a leftover process of a dead harness");
            }
            job
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_of_this_process_and_of_none() {
        let (start, group) = process_identity(std::process::id()).expect("own stat");
        assert!(start > 0);
        assert_eq!(group, nix::unistd::getpgrp().as_raw() as u32);
        assert_eq!(process_identity(u32::MAX), None);
        // Never this process, never init, never a start time that does not match.
        assert!(!stop_if_same(std::process::id(), group, start));
        assert!(!stop_if_same(1, 1, 0));
    }

    #[test]
    fn a_dead_journal_yields_its_unfinished_jobs_and_goes_once_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dead = dir.path().join("1-000000001.journal");
        let lines = [
            json!({"type": "start", "id": "bash-1", "kind": "bash", "label": "done", "owner": "s", "at": 1}),
            json!({"type": "start", "id": "bash-2", "kind": "bash", "label": "running", "owner": "s", "at": 2, "pid": u32::MAX, "pgid": u32::MAX, "startTime": 5}),
            json!({"type": "spill", "id": "bash-2", "path": "/spill/out.log"}),
            json!({"type": "end", "id": "bash-1"}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect::<String>() + "{\"type\":\"sta";
        std::fs::write(&dead, text).expect("write");
        let empty = dir.path().join("2-000000002.journal");
        std::fs::write(&empty, format!("{}\n{}\n", lines[0], lines[3])).expect("write");

        let (journal, lost) = Journal::open(dir.path(), None).expect("open");
        assert_eq!(lost.len(), 1, "{lost:?}");
        let job = &lost[0];
        assert_eq!(
            (job.id.as_str(), job.label.as_str(), job.owner.as_deref()),
            ("bash-2", "running", Some("s"))
        );
        assert_eq!(job.spills, [PathBuf::from("/spill/out.log")]);
        assert!(!empty.exists(), "a journal with nothing lost goes at once");
        assert!(dead.exists(), "kept until reported");
        // Adopted: a second harness does not see it.
        let (second, none) = Journal::open(dir.path(), None).expect("open");
        assert!(none.is_empty(), "{none:?}");
        journal.reported(&dead, "bash-2");
        assert!(!dead.exists());
        second.close();
        journal.close();
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}
