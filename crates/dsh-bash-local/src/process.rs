//! Background processes: status, consuming reads, kill, and settlement.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::AbortSignal;
use dsh_shell::{
    ProcessIdentity, ProcessStatus, ShellProcess, ShellProcessRead, ShellSandboxInfo, SpillObserver,
};
use dsh_subprocess::{OsSpawnError, OutputCollector, ProcessHandle};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::watch;

/// What a background process looked like when it settled, for a wrapping executor's
/// settlement hook (e.g. to classify a sandbox runner failure or a denial).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettleFacts {
    /// The exit code when the process exited; `None` when a signal ended it or it never started.
    pub exit_code: Option<i32>,
    /// The name of the signal that ended the process (`SIGTERM`, …), if one did.
    pub signal: Option<String>,
    /// The retained stderr tail (what a final read of the whole stream would show).
    pub stderr_tail: String,
    /// The process never started.
    pub spawn_failed: bool,
    /// Why it never started: errno, program, and whether the workdir, a pre-exec hook or
    /// the exec failed.
    pub spawn_error: Option<OsSpawnError>,
}

/// Runs once at settlement, before `done` resolves; its result is stamped as the process's
/// sandbox facts.
pub type SettleHook = Box<dyn FnOnce(&SettleFacts) -> Option<ShellSandboxInfo> + Send>;

struct State {
    status: ProcessStatus,
    exit_code: Option<i32>,
    signal: Option<String>,
    sandbox: Option<ShellSandboxInfo>,
    /// `spawn failed: Error: …`, delivered once as the stderr part of the next read.
    spawn_note: Option<String>,
    /// Where the next consuming read starts.
    cursor: ReadCursor,
    /// The process and its collected output, until a read reached the end of a settled
    /// process: then nothing more can come, so the buffers go.
    handle: Option<ProcessHandle>,
    /// What reads report after the release.
    released: ReleasedOutput,
}

/// A background `bash -c` (or wrapped argv) process.
pub struct LocalShellProcess {
    pid: Option<u32>,
    /// The start time (`/proc/<pid>/stat` field 22), read right after the spawn.
    start_time: Option<u64>,
    state: Mutex<State>,
    done: watch::Sender<bool>,
}

impl LocalShellProcess {
    fn new(handle: Option<ProcessHandle>, status: ProcessStatus, spawn_note: Option<String>) -> Self {
        let pid = handle.as_ref().map(ProcessHandle::pid);
        let start_time = pid.and_then(start_time);
        let state = State {
            status,
            exit_code: None,
            signal: None,
            sandbox: None,
            spawn_note,
            cursor: ReadCursor::default(),
            handle,
            released: ReleasedOutput::default(),
        };
        Self { pid, start_time, state: Mutex::new(state), done: watch::Sender::new(false) }
    }

    /// A running process; settles in the background when the child does.
    pub(crate) fn running(
        handle: ProcessHandle,
        signal: Option<AbortSignal>,
        on_settle: Option<SettleHook>,
    ) -> Arc<Self> {
        let process = Arc::new(Self::new(Some(handle.clone()), ProcessStatus::Running, None));
        let settling = Arc::clone(&process);
        tokio::spawn(async move {
            let outcome = handle.wait().await;
            {
                let mut state = settling.state.lock();
                // What happened decides, whatever a kill said meanwhile: a leader that a
                // signal ended was killed; one that exited ended on its own.
                let aborted = signal.as_ref().is_some_and(AbortSignal::is_aborted);
                state.status = if aborted || outcome.signal.is_some() {
                    ProcessStatus::Killed
                } else {
                    ProcessStatus::Completed
                };
                state.exit_code = outcome.exit_code;
                state.signal = outcome.signal.clone();
            }
            let facts = SettleFacts {
                exit_code: outcome.exit_code,
                signal: outcome.signal,
                stderr_tail: handle.stderr().collected().text,
                spawn_failed: false,
                spawn_error: None,
            };
            settling.finish(on_settle, &facts);
        });
        process
    }

    /// A process that never started: already settled as `killed`, its spawn error readable
    /// once on the read path.
    pub(crate) fn spawn_failed(error: OsSpawnError, on_settle: Option<SettleHook>) -> Arc<Self> {
        let note = format!("spawn failed: Error: {error}");
        let process = Arc::new(Self::new(None, ProcessStatus::Killed, Some(note)));
        let facts = SettleFacts {
            exit_code: None,
            signal: None,
            stderr_tail: String::new(),
            spawn_failed: true,
            spawn_error: Some(error),
        };
        process.finish(on_settle, &facts);
        process
    }

    fn finish(&self, on_settle: Option<SettleHook>, facts: &SettleFacts) {
        if let Some(hook) = on_settle {
            let sandbox = hook(facts);
            self.state.lock().sandbox = sandbox;
        }
        self.done.send_replace(true);
    }

    /// The direct child's pid (its process-group id), when it started.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether the process still holds its collected output in memory: until a read reaches
    /// the end of the settled process (the spill files, if any, stay on disk).
    pub fn retains_output(&self) -> bool {
        self.state.lock().handle.is_some()
    }
}

impl ShellProcess for LocalShellProcess {
    fn status(&self) -> ProcessStatus {
        self.state.lock().status
    }

    fn exit_code(&self) -> Option<i32> {
        self.state.lock().exit_code
    }

    fn signal(&self) -> Option<String> {
        self.state.lock().signal.clone()
    }

    fn done(&self) -> BoxFuture<'static, ()> {
        let mut done = self.done.subscribe();
        Box::pin(async move {
            // The sender lives as long as the process; a closed channel also means "over".
            let _ = done.wait_for(|d| *d).await;
        })
    }

    fn sandbox(&self) -> Option<ShellSandboxInfo> {
        self.state.lock().sandbox.clone()
    }

    fn read_output(&self) -> ShellProcessRead {
        let mut state = self.state.lock();
        let note = state.spawn_note.take().unwrap_or_default();
        let settled = *self.done.borrow();
        let State { handle, cursor, released, .. } = &mut *state;
        let streams = handle.as_ref().map(|h| (h.stdout(), h.stderr()));
        let (read, at_end) = cursor.read(streams, released, note);
        if settled && at_end {
            // Settled (its streams are complete) and read to the end: release the output.
            state.handle = None;
        }
        read
    }

    fn kill(&self) -> bool {
        let mut state = self.state.lock();
        if state.status != ProcessStatus::Running {
            return false;
        }
        let handle = state.handle.clone();
        // Killed from now on, until the settlement says what happened (a leader that exited,
        // before the kill reached it or ignoring its SIGTERM, completed with its exit code).
        if !handle.as_ref().is_some_and(ProcessHandle::leader_exited) {
            state.status = ProcessStatus::Killed;
        }
        drop(state);
        if let Some(handle) = handle {
            handle.terminate();
        }
        true
    }

    fn write_input(&self, bytes: &[u8]) -> Result<(), String> {
        let state = self.state.lock();
        let handle = match (&state.handle, state.status) {
            (Some(handle), ProcessStatus::Running) if handle.has_stdin() => handle.clone(),
            (_, ProcessStatus::Running) => return Err("its input is closed".to_owned()),
            _ => return Err("it has ended".to_owned()),
        };
        drop(state);
        match handle.write_stdin(bytes) {
            Ok(n) if n == bytes.len() => Ok(()),
            Ok(n) => {
                Err(format!("only {n} of {} bytes were taken: the job is not reading its input", bytes.len()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                Err("its input is full: the job is not reading it".to_owned())
            }
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err("it closed its input".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn close_input(&self) -> bool {
        self.state.lock().handle.as_ref().is_some_and(ProcessHandle::close_stdin)
    }

    fn interrupt(&self) -> bool {
        let state = self.state.lock();
        state.status == ProcessStatus::Running && state.handle.as_ref().is_some_and(ProcessHandle::interrupt)
    }

    fn terminal(&self) -> bool {
        self.state.lock().handle.as_ref().is_some_and(ProcessHandle::is_terminal)
    }

    fn waiting_for_input(&self) -> bool {
        let handle = {
            let state = self.state.lock();
            if state.status != ProcessStatus::Running {
                return false;
            }
            state.handle.clone()
        };
        handle.is_some_and(|h| h.blocked_on_stdin())
    }

    fn latest_line(&self) -> Option<String> {
        self.state.lock().handle.as_ref().and_then(ProcessHandle::latest_output_line)
    }

    fn identity(&self) -> Option<ProcessIdentity> {
        // The child leads its own process group.
        self.pid.map(|pid| ProcessIdentity { pid, pgid: pid, start_time: self.start_time })
    }

    fn watch_spills(&self, observer: SpillObserver) {
        let Some(handle) = self.state.lock().handle.clone() else { return };
        handle.stdout().watch_spill(Arc::clone(&observer));
        handle.stderr().watch_spill(observer);
    }
}

/// A process's start time in clock ticks after boot (`/proc/<pid>/stat` field 22).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields restart after the last `)`.
    let rest = &stat[stat.rfind(')')? + 2..];
    // `rest` starts at field 3: field 22 is at index 19.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// What the reads of a process whose output was released report: its spill files and why
/// the complete output could not be kept.
#[derive(Clone, Debug, Default)]
pub struct ReleasedOutput {
    spill_paths: (Option<PathBuf>, Option<PathBuf>),
    spill_error: Option<String>,
}

/// Where the next consuming read of a process's two collected streams starts: the read
/// semantics of [`ShellProcess::read_output`], for every executor whose processes collect
/// into [`OutputCollector`]s.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadCursor {
    stdout: u64,
    stderr: u64,
}

impl ReadCursor {
    /// Reads what arrived since the last read: stdout, then `[stderr]\n` + `note` + stderr
    /// (`note`: a fact delivered once as the start of stderr, such as a spawn failure). With
    /// `streams` gone (released), the spill facts kept in `released`. Also says whether the
    /// read reached the end of both streams; a caller releases a settled process's streams
    /// then, and `released` keeps what later reads report.
    pub fn read(
        &mut self,
        streams: Option<(&OutputCollector, &OutputCollector)>,
        released: &mut ReleasedOutput,
        note: String,
    ) -> (ShellProcessRead, bool) {
        let mut read = ShellProcessRead::default();
        let mut stderr = note;
        let mut at_end = false;
        if let Some((out_stream, err_stream)) = streams {
            let out = out_stream.read_from(self.stdout);
            let err = err_stream.read_from(self.stderr);
            self.stdout = out.next_offset;
            self.stderr = err.next_offset;
            read.delta = out.text;
            stderr.push_str(&err.text);
            read.lossy = out.lossy || err.lossy;
            read.stdout_spill_path = out.spill_path;
            read.stderr_spill_path = err.spill_path;
            read.spill_error = out.spill_error.or(err.spill_error);
            at_end = out.next_offset == out_stream.total() && err.next_offset == err_stream.total();
            released.spill_paths = (read.stdout_spill_path.clone(), read.stderr_spill_path.clone());
            released.spill_error = read.spill_error.clone();
        } else {
            (read.stdout_spill_path, read.stderr_spill_path) = released.spill_paths.clone();
            read.spill_error = released.spill_error.clone();
        }
        if !stderr.is_empty() {
            if !read.delta.is_empty() && !read.delta.ends_with('\n') {
                read.delta.push('\n');
            }
            read.delta.push_str("[stderr]\n");
            read.delta.push_str(&stderr);
        }
        (read, at_end)
    }
}
