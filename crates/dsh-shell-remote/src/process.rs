//! Background processes on the far side: status, consuming reads, input, kill, settlement.

use std::sync::Arc;

use dsh_bash_local::{ReadCursor, ReleasedOutput};
use dsh_core::AbortSignal;
use dsh_shell::{ProcessStatus, ShellExecSpec, ShellProcess, ShellProcessRead, ShellSandboxInfo};
use dsh_subprocess::OutputCollector;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use crate::call::{Call, CallEnd, INPUT_QUEUE};
use crate::executor::RemoteExecutor;
use crate::spill::CallSpills;
use crate::transport::RemoteTransport;

struct State {
    status: ProcessStatus,
    exit_code: Option<i32>,
    signal: Option<String>,
    out_of_memory: bool,
    /// `spawn failed: Error: …` (or why the far side lost the job), delivered once as the
    /// stderr part of the next read.
    note: Option<String>,
    /// Where the next consuming read starts.
    cursor: ReadCursor,
    /// The collected streams, until a read reached the end of a settled process.
    streams: Option<(Arc<OutputCollector>, Arc<OutputCollector>)>,
    /// What reads report after the release.
    released: ReleasedOutput,
    /// The call, once started through the transport.
    call: Option<Arc<Call>>,
    /// A kill arrived before the far side started the call.
    kill_requested: bool,
    /// The command's stdin (started with `keep_stdin`), until closed.
    input: Option<mpsc::Sender<Vec<u8>>>,
}

/// A background `bash -c` on the far side of a transport.
pub struct RemoteShellProcess {
    transport: Arc<dyn RemoteTransport>,
    grace_ms: u64,
    state: Mutex<State>,
    done: watch::Sender<bool>,
    /// The far side's copies of its spilled streams.
    spills: Arc<CallSpills>,
}

impl RemoteShellProcess {
    /// Starts `spec` in the background: returns at once (running); the far side is asked
    /// in a task, and a failure to start settles the process as `killed` with the reason
    /// readable once.
    pub(crate) fn start(executor: &RemoteExecutor, spec: ShellExecSpec) -> Arc<Self> {
        let stdout_cap = dsh_bash_local::memory_cap(executor.config().max_output_bytes);
        let (stdout, stderr) = executor.collectors(stdout_cap);
        let (input, input_rx) = match spec.keep_stdin && spec.stdin.is_none() {
            true => {
                let (tx, rx) = mpsc::channel(INPUT_QUEUE);
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        let state = State {
            status: ProcessStatus::Running,
            exit_code: None,
            signal: None,
            out_of_memory: false,
            note: None,
            cursor: ReadCursor::default(),
            streams: Some((Arc::clone(&stdout), Arc::clone(&stderr))),
            released: ReleasedOutput::default(),
            call: None,
            kill_requested: false,
            input,
        };
        let spills = executor.call_spills(&spec);
        let process = Arc::new(Self {
            transport: Arc::clone(executor.transport()),
            grace_ms: executor.grace_ms(),
            state: Mutex::new(state),
            done: watch::Sender::new(false),
            spills: Arc::clone(&spills),
        });
        let running = Arc::clone(&process);
        let kind = executor.transport().kind();
        let grace = executor.grace();
        tokio::spawn(async move {
            let signal = spec.signal.clone();
            let streams = (stdout, stderr);
            let end = match Call::start(&running.transport, &spec, streams, input_rx, grace, spills).await {
                Ok(call) => running.supervise(call, signal.as_ref()).await,
                Err(e) => CallEnd::Lost(format!("{kind} executor: {e}")),
            };
            running.settle(end, signal.as_ref());
        });
        process
    }

    async fn supervise(&self, call: Arc<Call>, signal: Option<&AbortSignal>) -> CallEnd {
        let kill_now = {
            let mut state = self.state.lock();
            state.call = Some(Arc::clone(&call));
            state.kill_requested
        };
        if kill_now {
            self.end_call(&call, "TERM");
        }
        let aborted = async {
            match signal {
                Some(signal) => signal.aborted().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            end = call.ended() => end,
            () = aborted => {
                self.end_call(&call, "TERM");
                call.ended().await
            }
        }
    }

    /// Sends `signal` to the call's processes (the caller does not wait for them to end).
    fn end_call(&self, call: &Arc<Call>, signal: &'static str) {
        if let Err(e) = call.signal(signal, self.grace_ms) {
            tracing::warn!(error = %e, "could not signal a remote job");
        }
    }

    fn settle(&self, end: CallEnd, signal: Option<&AbortSignal>) {
        {
            let mut state = self.state.lock();
            state.input = None;
            match end {
                CallEnd::Ended { exit_code, signal: ended_by, out_of_memory } => {
                    if state.status == ProcessStatus::Running {
                        let aborted = signal.is_some_and(AbortSignal::is_aborted);
                        state.status = if aborted || ended_by.is_some() {
                            ProcessStatus::Killed
                        } else {
                            ProcessStatus::Completed
                        };
                    }
                    state.exit_code = exit_code;
                    state.signal = ended_by;
                    state.out_of_memory = out_of_memory;
                }
                CallEnd::Spawn(error) => {
                    state.status = ProcessStatus::Killed;
                    state.note = Some(format!("spawn failed: Error: {error}"));
                }
                CallEnd::Lost(message) => {
                    state.status = ProcessStatus::Killed;
                    state.note = Some(format!("{message}\n"));
                }
            }
        }
        self.done.send_replace(true);
    }
}

impl ShellProcess for RemoteShellProcess {
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
        None
    }

    fn read_output(&self) -> ShellProcessRead {
        let mut state = self.state.lock();
        let note = state.note.take().unwrap_or_default();
        let settled = *self.done.borrow();
        let State { streams, cursor, released, .. } = &mut *state;
        let (mut read, at_end) = cursor.read(streams.as_ref().map(|(o, e)| (&**o, &**e)), released, note);
        if settled && at_end {
            // Settled (its streams are complete) and read to the end: release the output.
            state.streams = None;
        }
        drop(state);
        // The spill files a read names are the far side's copies.
        let error = read.spill_error.take();
        let (stdout, out_error) = self.spills.far(read.stdout_spill_path.take(), None);
        let (stderr, err_error) = self.spills.far(read.stderr_spill_path.take(), None);
        (read.stdout_spill_path, read.stderr_spill_path) = (stdout, stderr);
        read.spill_error = error.or(out_error).or(err_error);
        read
    }

    fn kill(&self) -> bool {
        let mut state = self.state.lock();
        if state.status != ProcessStatus::Running {
            return false;
        }
        state.status = ProcessStatus::Killed;
        match state.call.clone() {
            Some(call) => {
                drop(state);
                self.end_call(&call, "TERM");
            }
            None => state.kill_requested = true,
        }
        true
    }

    fn write_input(&self, bytes: &[u8]) -> Result<(), String> {
        let state = self.state.lock();
        let input = match (&state.input, state.status) {
            (Some(input), ProcessStatus::Running) => input.clone(),
            (_, ProcessStatus::Running) => return Err("its input is closed".to_owned()),
            _ => return Err("it has ended".to_owned()),
        };
        drop(state);
        match input.try_send(bytes.to_vec()) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                Err("its input is full: the job is not reading it".to_owned())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err("it closed its input".to_owned()),
        }
    }

    fn close_input(&self) -> bool {
        self.state.lock().input.take().is_some()
    }

    fn interrupt(&self) -> bool {
        let state = self.state.lock();
        match (&state.call, state.status) {
            (Some(call), ProcessStatus::Running) => {
                let call = Arc::clone(call);
                drop(state);
                self.end_call(&call, "INT");
                true
            }
            _ => false,
        }
    }

    fn latest_line(&self) -> Option<String> {
        let (out, err) = self.state.lock().streams.clone()?;
        dsh_subprocess::latest_output_line(&out, &err)
    }

    fn out_of_memory(&self) -> bool {
        self.state.lock().out_of_memory
    }
}
