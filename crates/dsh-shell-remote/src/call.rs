//! One call on the far side: the call script started through a transport, its streams
//! pumped into collectors on the harness's side, its end read from the status frame.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_bash_local::ENV_OVERRIDES;
use dsh_shell::{CollectedOutput, ShellExecSpec};
use dsh_subprocess::{Errno, OsSpawnError, OutputCollector, SpawnStage, signal_name};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use crate::frame::{FrameFact, FrameFilter};
use crate::spill::CallSpills;
use crate::transport::{RemoteError, RemoteExecSpec, RemoteExit, RemoteTransport};

/// The call script (see `scripts/call.sh`).
const CALL_SCRIPT: &str = include_str!("scripts/call.sh");

/// How often the harness tells the call script it is still there.
const HEARTBEAT: Duration = Duration::from_secs(2);

/// How long the call script waits for word from the harness before it takes the harness
/// for gone and ends the call (its lease).
const LEASE_SECS: u64 = 20;

/// What the harness sends a running call on its control stream (see `scripts/call.sh`).
enum Control {
    /// Send this signal to the call's processes (`TERM` escalates after the grace, in ms).
    Signal(&'static str, u64),
}

/// How a call ended, in the seam's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CallEnd {
    /// The command ran and ended.
    Ended {
        /// Its exit status, when it exited.
        exit_code: Option<i32>,
        /// The signal that ended it, when one did.
        signal: Option<String>,
        /// The kernel's out-of-memory killer struck while it ran.
        out_of_memory: bool,
    },
    /// It never started: its working directory could not be entered.
    Spawn(OsSpawnError),
    /// The transport lost it (the far side went away mid-call).
    Lost(String),
}

/// A started call: its collected streams, its stdin (when kept), and its end.
pub(crate) struct Call {
    pub(crate) stdout: Arc<OutputCollector>,
    pub(crate) stderr: Arc<OutputCollector>,
    end: watch::Receiver<Option<CallEnd>>,
    /// The call's control stream (kills), written by its writer task.
    control: mpsc::UnboundedSender<Control>,
    /// The far side's copies of its spilled streams.
    spills: Arc<CallSpills>,
}

/// How many chunks of input may wait for a command that does not read them.
pub(crate) const INPUT_QUEUE: usize = 64;

impl Call {
    /// Starts `spec`'s command through `transport`, collecting into `stdout` and `stderr`;
    /// with `input`, the command's stdin stays open and takes what arrives there (until the
    /// sender is dropped). The call script's own stdin carries the command's input, kills
    /// and the harness's heartbeat (its lease). A stream that spills is copied to the far
    /// side through `spills`, and the call ends once the copies are complete. Fails only
    /// when the transport cannot start the call script.
    pub(crate) async fn start(
        transport: &Arc<dyn RemoteTransport>,
        spec: &ShellExecSpec,
        (stdout, stderr): (Arc<OutputCollector>, Arc<OutputCollector>),
        input: Option<mpsc::Receiver<Vec<u8>>>,
        grace: Duration,
        spills: Arc<CallSpills>,
    ) -> Result<Arc<Call>, RemoteError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let exec = RemoteExecSpec {
            argv: vec![
                "bash".to_owned(),
                "-c".to_owned(),
                CALL_SCRIPT.to_owned(),
                "dsh-call".to_owned(),
                id.clone(),
                spec.workdir.to_string_lossy().into_owned(),
                spec.command.clone(),
                u8::from(spec.stdin.is_some() || input.is_some()).to_string(),
                grace.as_millis().max(1).to_string(),
                LEASE_SECS.to_string(),
            ],
            cwd: None,
            env: call_env(spec, &id),
            stdin: true,
            session: spec.dsh_env.as_ref().and_then(|env| env.get(dsh_shell::DSH_SESSION_ID)).cloned(),
            roots: vec![spec.workdir.clone()],
        };
        let session = exec.session.clone();
        spills.watch(&stdout);
        spills.watch(&stderr);
        let child = transport.exec(exec).await?;
        let (end_tx, end) = watch::channel(None);
        let (control, control_rx) = mpsc::unbounded_channel();
        if let Some(writer) = child.stdin {
            let stdin = spec.stdin.clone();
            tokio::spawn(control_writer(writer, stdin, input, control_rx, end.clone()));
        }
        let workdir = spec.workdir.clone();
        let far_side = transport.describe();
        let transport = Arc::clone(transport);
        let (out, err) = (Arc::clone(&stdout), Arc::clone(&stderr));
        let (started_tx, _) = watch::channel(false);
        let copies = Arc::clone(&spills);
        tokio::spawn(async move {
            // Once the status frame came, the command is over: a process detached from the
            // call that still holds its streams holds them for at most the grace.
            let seen = watch::Sender::new(false);
            let (_, frame) = tokio::join!(
                pump(child.stdout, &out, None, &seen, grace),
                pump_framed(child.stderr, &err, &seen, grace, &started_tx)
            );
            started_tx.send_replace(true);
            let exit = match frame {
                Some(_) => tokio::time::timeout(grace, child.exit)
                    .await
                    .unwrap_or(Ok(RemoteExit { code: None, out_of_memory: false })),
                None => child.exit.await,
            };
            if frame.is_none() && transport.gone(session.as_deref()).await {
                err.push(format!("[{far_side} went away during the call]\n").as_bytes());
            }
            out.finish();
            err.finish();
            copies.settled().await;
            end_tx.send_replace(Some(call_end(frame, exit, &workdir)));
        });
        Ok(Arc::new(Call { stdout, stderr, end, control, spills }))
    }

    /// Sends `signal` (`TERM` escalating to `KILL` after `grace_ms`, or `INT`) to every
    /// process of the call, on the call's own control stream: no new channel or exec is
    /// needed, however many are in use. The call script acts on it once the command has
    /// started. Fails only when the call is over.
    pub(crate) fn signal(&self, signal: &'static str, grace_ms: u64) -> Result<(), RemoteError> {
        self.control
            .send(Control::Signal(signal, grace_ms))
            .map_err(|_| RemoteError::Failed("the call is over".to_owned()))
    }

    /// Resolves with how the call ended (its streams are complete by then).
    pub(crate) async fn ended(&self) -> CallEnd {
        let mut end = self.end.clone();
        match end.wait_for(Option::is_some).await {
            Ok(end) => end.clone().unwrap_or_else(|| CallEnd::Lost("the call was lost".to_owned())),
            Err(_) => CallEnd::Lost("the call was lost".to_owned()),
        }
    }

    /// A collected stream's final state in the seam's terms, naming the far side's copy of
    /// its spill file.
    pub(crate) fn collected(&self, collector: &OutputCollector) -> CollectedOutput {
        let mut stream = collected(collector);
        (stream.spill_path, stream.spill_error) = self.spills.far(stream.spill_path, stream.spill_error);
        stream
    }

    /// The latest line of output, from whichever stream was written last.
    pub(crate) fn latest_line(&self) -> Option<String> {
        dsh_subprocess::latest_output_line(&self.stdout, &self.stderr)
    }
}

/// The command's environment on top of the far side's own: the non-interactive overrides,
/// then the request's `env`, then its `DSH_*` snapshot. Nothing of the harness's own
/// environment crosses. The call script also gets its own marker (`DSH_CALL_SCRIPT`, which
/// it keeps from the command), so a kill that comes before the command started can wait
/// for it.
fn call_env(spec: &ShellExecSpec, id: &str) -> BTreeMap<String, String> {
    let overrides = ENV_OVERRIDES.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    let requested = [&spec.env, &spec.dsh_env].into_iter().flatten().flat_map(|m| m.clone());
    let script = ("DSH_CALL_SCRIPT".to_owned(), id.to_owned());
    overrides.chain(requested).chain(std::iter::once(script)).collect()
}

/// The task writing the call's control stream: `stdin` (then its end), or what arrives on
/// `input` (its end once the sender is dropped), the signals sent to the call, and a
/// heartbeat every [`HEARTBEAT`], until the call ended or the stream broke. A command that
/// exits without reading its input is not an error.
async fn control_writer(
    mut writer: Box<dyn AsyncWrite + Send + Unpin>,
    stdin: Option<Vec<u8>>,
    mut input: Option<mpsc::Receiver<Vec<u8>>>,
    mut control: mpsc::UnboundedReceiver<Control>,
    mut end: watch::Receiver<Option<CallEnd>>,
) {
    async fn send(writer: &mut (dyn AsyncWrite + Send + Unpin), bytes: &[u8]) -> bool {
        writer.write_all(bytes).await.is_ok() && writer.flush().await.is_ok()
    }
    fn data(bytes: &[u8]) -> Vec<u8> {
        let mut frame = format!("d {}\n", bytes.len()).into_bytes();
        frame.extend_from_slice(bytes);
        frame
    }
    if let Some(bytes) = stdin
        && (!send(&mut *writer, &data(&bytes)).await || !send(&mut *writer, b"e\n").await)
    {
        return;
    }
    let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    loop {
        let frame = tokio::select! {
            biased;
            message = control.recv() => match message {
                Some(Control::Signal(signal, grace_ms)) => format!("k {signal} {grace_ms}\n").into_bytes(),
                None => return,
            },
            chunk = async { input.as_mut()?.recv().await.map(Some) }, if input.is_some() => match chunk {
                Some(Some(chunk)) => data(&chunk),
                _ => {
                    input = None;
                    b"e\n".to_vec()
                }
            },
            _ = heartbeat.tick() => b"h\n".to_vec(),
            _ = end.wait_for(Option::is_some) => break,
        };
        if !send(&mut *writer, &frame).await {
            return;
        }
    }
    let _ = writer.shutdown().await;
}

/// Copies `stream` into `collector` until end of file, or until `grace` after the status
/// frame came. With `framed`, through its filter, which tells `seen` when the status frame
/// came and the framed sender when the start frame came.
async fn pump(
    mut stream: Box<dyn AsyncRead + Send + Unpin>,
    collector: &OutputCollector,
    mut framed: Option<(&mut FrameFilter, &watch::Sender<bool>)>,
    seen: &watch::Sender<bool>,
    grace: Duration,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen_rx = seen.subscribe();
    let cutoff = async {
        let _ = seen_rx.wait_for(|seen| *seen).await;
        tokio::time::sleep(grace).await;
    };
    tokio::pin!(cutoff);
    loop {
        let n = tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            () = &mut cutoff => break,
        };
        match &mut framed {
            Some((filter, started)) => {
                collector.push(&filter.feed(&buf[..n]));
                if filter.frame().is_some() {
                    seen.send_replace(true);
                }
                if filter.started() {
                    started.send_if_modified(|s| !std::mem::replace(s, true));
                }
            }
            None => collector.push(&buf[..n]),
        }
    }
}

async fn pump_framed(
    stream: Box<dyn AsyncRead + Send + Unpin>,
    collector: &OutputCollector,
    seen: &watch::Sender<bool>,
    grace: Duration,
    started: &watch::Sender<bool>,
) -> Option<crate::frame::StatusFrame> {
    let mut filter = FrameFilter::default();
    pump(stream, collector, Some((&mut filter, started)), seen, grace).await;
    let (rest, frame) = filter.finish();
    collector.push(&rest);
    frame
}

fn call_end(
    frame: Option<crate::frame::StatusFrame>,
    exit: Result<RemoteExit, RemoteError>,
    workdir: &Path,
) -> CallEnd {
    let remote_oom = exit.as_ref().is_ok_and(|e| e.out_of_memory);
    match (frame, exit) {
        (Some(frame), _) => {
            let out_of_memory = frame.out_of_memory || remote_oom;
            match frame.fact {
                FrameFact::Exit(code) => {
                    CallEnd::Ended { exit_code: Some(code), signal: None, out_of_memory }
                }
                FrameFact::Signal(number) => {
                    CallEnd::Ended { exit_code: None, signal: Some(signal_name(number)), out_of_memory }
                }
                FrameFact::Spawn(code) => CallEnd::Spawn(OsSpawnError {
                    program: "bash".to_owned(),
                    errno: errno_named(&code),
                    stage: SpawnStage::Cwd,
                    cwd: workdir.to_path_buf(),
                }),
            }
        }
        // No frame: the call script itself was cut short (its container stopped, its
        // connection dropped). The transport's status is all there is.
        (None, Ok(exit)) => match exit.code {
            Some(code) => CallEnd::Ended { exit_code: Some(code), signal: None, out_of_memory: remote_oom },
            None => CallEnd::Lost("the far side ended the call without a status".to_owned()),
        },
        (None, Err(error)) => CallEnd::Lost(error.to_string()),
    }
}

fn errno_named(name: &str) -> Errno {
    match name {
        "ENOENT" => Errno::ENOENT,
        "ENOTDIR" => Errno::ENOTDIR,
        "EACCES" => Errno::EACCES,
        _ => Errno::UnknownErrno,
    }
}

/// A collector's final state in the seam's terms.
pub(crate) fn collected(collector: &OutputCollector) -> CollectedOutput {
    let stream = collector.collected();
    CollectedOutput {
        text: stream.text,
        truncated: stream.truncated,
        spill_path: stream.spill_path,
        spill_error: stream.spill_error,
    }
}
