//! Spill files where the command runs: the harness's spill file of a stream is copied, as it
//! grows, into a directory of the session's own on the far side, and results and reads name
//! that copy, so the session's next command can read it there.
//!
//! Each session gets one directory on the far side, made on its first spill (not ahead: it
//! would hold a channel of an SSH host's `MaxSessions` that a command may need): `${TMPDIR:-/tmp}/dsh-spill-XXXXXX`, mode `0700`, made exclusively. A spilled stream is
//! copied by one program on the far side (`cat` into a file created exclusively, mode
//! `0600`) fed from the harness's spill file, from when the spill opens until the stream is
//! complete; a foreground result and a job's settlement wait for the copy. The harness keeps
//! its own spill file (its retention rules apply to it). When the session ends the directory
//! is removed, and the rest when the harness shuts down; a transport whose far side is the
//! session's own (a container per session) removes it with the far side instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use dsh_core::{AGENTS, WeakContext};
use dsh_subprocess::OutputCollector;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{OnceCell, watch};

use crate::transport::{RemoteError, RemoteExecSpec, RemoteTransport};

/// Makes the session's spill directory on the far side and prints its path: `mktemp -d`
/// where there is one, else an exclusive `mkdir` of a fresh name.
const DIR_SCRIPT: &str = r#"umask 077
base=${TMPDIR:-/tmp}
d=$(mktemp -d "$base/dsh-spill-XXXXXXXX" 2>/dev/null) || {
    d=$base/dsh-spill-$$-$RANDOM$RANDOM
    mkdir -m 700 -- "$d"
} || exit 1
printf '%s' "$d""#;

/// Copies its stdin into a new file (never an existing one or a planted link).
const COPY_SCRIPT: &str = r#"umask 077; set -C; exec cat > "$1""#;

/// Removes the files (or directories) it is given.
const REMOVE_SCRIPT: &str = r#"rm -rf -- "$@""#;

/// A session's spill directory on the far side, made once: its path, or why it could not
/// be made.
type DirCell = Arc<OnceCell<Result<String, String>>>;

/// The far side's spill directories of an executor's sessions.
pub(crate) struct FarSpills {
    transport: Arc<dyn RemoteTransport>,
    /// Each session's directory (by session id; `""` for calls without one), made once.
    dirs: Mutex<HashMap<String, DirCell>>,
    /// The composition, to remove a session's directory when its agent ends.
    ctx: Mutex<Option<WeakContext>>,
    me: Weak<FarSpills>,
}

impl FarSpills {
    pub(crate) fn new(transport: Arc<dyn RemoteTransport>) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            transport,
            dirs: Mutex::new(HashMap::new()),
            ctx: Mutex::new(None),
            me: me.clone(),
        })
    }

    /// Ties each session's directory to the end of its agent (in `ctx`'s agents registry).
    pub(crate) fn tie_to(&self, ctx: WeakContext) {
        *self.ctx.lock() = Some(ctx);
    }

    /// The session's spill directory on the far side, made on first use; the error says
    /// why it could not be made.
    pub(crate) async fn dir(&self, session: Option<&str>) -> Result<String, String> {
        let key = session.unwrap_or_default().to_owned();
        let cell = Arc::clone(self.dirs.lock().entry(key.clone()).or_default());
        cell.get_or_init(|| async {
            let made = self.make_dir(session).await;
            if made.is_ok() {
                self.remove_with_session(&key);
            }
            made
        })
        .await
        .clone()
    }

    async fn make_dir(&self, session: Option<&str>) -> Result<String, String> {
        let run = run(&self.transport, vec![DIR_SCRIPT.to_owned()], session);
        match run.await {
            Ok((0, out)) if out.starts_with('/') => Ok(out),
            Ok((code, out)) => {
                Err(format!("cannot make a spill directory there (exit {code}): {}", out.trim()))
            }
            Err(e) => Err(format!("cannot make a spill directory there: {e}")),
        }
    }

    /// Removes the session's directory when its agent ends (not when the far side is the
    /// session's own: it goes with it).
    fn remove_with_session(&self, key: &str) {
        if self.transport.session_private() || key.is_empty() {
            return;
        }
        let ctx = self.ctx.lock().clone();
        let Some(agents) = ctx.as_ref().and_then(WeakContext::upgrade).and_then(|ctx| ctx.get(AGENTS)) else {
            return;
        };
        let Some(agent) = agents.all().into_iter().find(|a| a.session().header().id == key) else { return };
        let (me, key) = (self.me.clone(), key.to_owned());
        agent.on_dispose(Box::new(move || {
            Box::pin(async move {
                if let Some(me) = me.upgrade() {
                    me.remove(&key).await;
                }
            })
        }));
    }

    /// Removes the directory of session `key`, if one was made.
    async fn remove(&self, key: &str) {
        let Some(cell) = self.dirs.lock().remove(key) else { return };
        let Some(Ok(dir)) = cell.get().cloned() else { return };
        let session = (!key.is_empty()).then_some(key);
        if let Err(e) = run(&self.transport, remove_argv(&[dir.as_str()]), session).await {
            tracing::warn!(dir = %dir, error = %e, "cannot remove a session's spill directory on the far side");
        }
    }

    /// Removes every session's directory (at the harness's end; a transport whose far side
    /// is the session's own removes them with it).
    pub(crate) async fn remove_all(&self) {
        if self.transport.session_private() {
            return;
        }
        let keys: Vec<String> = self.dirs.lock().keys().cloned().collect();
        for key in keys {
            self.remove(&key).await;
        }
    }
}

fn remove_argv(paths: &[&str]) -> Vec<String> {
    let mut argv = vec![REMOVE_SCRIPT.to_owned(), "dsh-spill".to_owned()];
    argv.extend(paths.iter().map(|p| (*p).to_owned()));
    argv
}

/// Runs `bash -c <script> [args…]` on the far side for `session`: its exit code and stdout
/// (with stderr after it).
async fn run(
    transport: &Arc<dyn RemoteTransport>,
    script_and_args: Vec<String>,
    session: Option<&str>,
) -> Result<(i32, String), RemoteError> {
    let mut argv = vec!["bash".to_owned(), "-c".to_owned()];
    argv.extend(script_and_args);
    if argv.len() == 3 {
        argv.push("dsh-spill".to_owned());
    }
    let spec = RemoteExecSpec { argv, session: session.map(str::to_owned), ..RemoteExecSpec::default() };
    let mut child = transport.exec(spec).await?;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let _ = tokio::join!(child.stdout.read_to_end(&mut out), child.stderr.read_to_end(&mut err));
    let exit = child.exit.await?;
    out.extend_from_slice(&err);
    Ok((exit.code.unwrap_or(-1), String::from_utf8_lossy(&out).into_owned()))
}

/// How long a finished call or job waits for the far side to take its spill files' copies.
const COPY_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// One spilled stream's copy on the far side.
struct Mirror {
    /// Where the copy is (once the directory is known), or why there is none.
    far: Mutex<Option<Result<PathBuf, String>>>,
    /// Set once the copy is complete or given up.
    done: watch::Sender<bool>,
}

/// The far side's copies of one call's spilled streams.
pub(crate) struct CallSpills {
    spills: Arc<FarSpills>,
    session: Option<String>,
    /// By the harness's spill file.
    mirrors: Mutex<HashMap<PathBuf, Arc<Mirror>>>,
}

impl CallSpills {
    pub(crate) fn new(spills: &Arc<FarSpills>, session: Option<String>) -> Arc<Self> {
        Arc::new(Self { spills: Arc::clone(spills), session, mirrors: Mutex::new(HashMap::new()) })
    }

    /// Copies `collector`'s spill file to the far side once it opens (in a task).
    pub(crate) fn watch(self: &Arc<Self>, collector: &Arc<OutputCollector>) {
        let (me, stream) = (Arc::downgrade(self), Arc::downgrade(collector));
        collector.watch_spill(Arc::new(move |local: PathBuf| {
            let (Some(me), Some(stream)) = (me.upgrade(), stream.upgrade()) else { return };
            let mirror = Arc::new(Mirror { far: Mutex::new(None), done: watch::Sender::new(false) });
            me.mirrors.lock().insert(local.clone(), Arc::clone(&mirror));
            let (spills, session) = (Arc::clone(&me.spills), me.session.clone());
            tokio::spawn(async move {
                let copied = copy(&spills, session.as_deref(), &stream, &local, &mirror).await;
                if let Err(why) = copied {
                    tracing::warn!(spill = %local.display(), error = %why, "the spill file was not copied to the far side");
                    let previous = mirror.far.lock().replace(Err(why));
                    if let Some(Ok(far)) = previous {
                        let far = far.to_string_lossy().into_owned();
                        let _ = run(&spills.transport, remove_argv(&[far.as_str()]), session.as_deref()).await;
                    }
                }
                mirror.done.send_replace(true);
            });
        }));
    }

    /// Resolves once every copy started so far is complete, or given up: a copy the far side
    /// has not taken within [`COPY_GRACE`] of this call (a host that stalls) is given up, and
    /// the result names no path for it and says why.
    pub(crate) async fn settled(&self) {
        let mirrors: Vec<Arc<Mirror>> = self.mirrors.lock().values().cloned().collect();
        let deadline = tokio::time::Instant::now() + COPY_GRACE;
        for mirror in mirrors {
            let mut done = mirror.done.subscribe();
            if tokio::time::timeout_at(deadline, done.wait_for(|done| *done)).await.is_err() {
                let why = format!("the far side did not take the copy within {} s", COPY_GRACE.as_secs());
                tracing::warn!(error = %why, "a spill file's copy was given up");
                mirror.far.lock().replace(Err(why));
                mirror.done.send_replace(true);
            }
        }
    }

    /// What a result names for the harness's spill file `local` (and its error): the far
    /// side's copy, or no path and why not. A copy not placed yet (its directory being made)
    /// names no path.
    pub(crate) fn far(
        &self,
        local: Option<PathBuf>,
        error: Option<String>,
    ) -> (Option<PathBuf>, Option<String>) {
        let Some(local) = local else { return (None, error) };
        let Some(mirror) = self.mirrors.lock().get(&local).cloned() else {
            return (None, error.or_else(|| Some("the spill file is not on the far side".to_owned())));
        };
        let far = mirror.far.lock().clone();
        match far {
            Some(Ok(far)) => (Some(far), error),
            Some(Err(why)) => (None, Some(why)),
            None => (None, error),
        }
    }
}

/// Copies what `file` holds from its position to its end into `writer`.
async fn copy_to_end(
    file: &mut tokio::fs::File,
    writer: &mut (impl tokio::io::AsyncWrite + Unpin + ?Sized),
    buf: &mut [u8],
) -> Result<(), String> {
    loop {
        let n = file.read(buf).await.map_err(|e| format!("reading the spill file: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        writer.write_all(&buf[..n]).await.map_err(|e| format!("copying the spill file there: {e}"))?;
    }
}

/// Copies the harness's spill file `local` of `stream` to the session's directory on the far
/// side, following it as it grows, until the stream is complete. A stream that outgrew the
/// spill cap (its file deleted) leaves no copy.
async fn copy(
    spills: &FarSpills,
    session: Option<&str>,
    stream: &OutputCollector,
    local: &Path,
    mirror: &Mirror,
) -> Result<(), String> {
    let mut file = tokio::fs::File::open(local)
        .await
        .map_err(|e| format!("cannot open the spill file {}: {e}", local.display()))?;
    let dir = spills.dir(session).await?;
    let name = local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let far = format!("{dir}/{name}");
    let argv =
        vec!["bash".to_owned(), "-c".to_owned(), COPY_SCRIPT.to_owned(), "dsh-spill".to_owned(), far.clone()];
    let spec = RemoteExecSpec {
        argv,
        stdin: true,
        session: session.map(str::to_owned),
        ..RemoteExecSpec::default()
    };
    let mut child =
        spills.transport.exec(spec).await.map_err(|e| format!("cannot copy the spill file there: {e}"))?;
    *mirror.far.lock() = Some(Ok(PathBuf::from(&far)));
    let mut writer = child.stdin.take().ok_or("cannot copy the spill file there: no stdin")?;
    let mut said = Vec::new();
    let mut stdout = std::mem::replace(&mut child.stdout, Box::new(tokio::io::empty()));
    let mut stderr = std::mem::replace(&mut child.stderr, Box::new(tokio::io::empty()));
    let drained = async {
        let _ = stdout.read_to_end(&mut Vec::new()).await;
        let _ = stderr.read_to_end(&mut said).await;
    };
    let fed = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let seen = stream.total();
            copy_to_end(&mut file, &mut writer, &mut buf).await?;
            // More output, or the stream is complete (then nothing more comes).
            if stream.wait_for_total(seen + 1).await == seen {
                copy_to_end(&mut file, &mut writer, &mut buf).await?;
                writer.shutdown().await.map_err(|e| format!("copying the spill file there: {e}"))?;
                drop(writer);
                return Ok::<(), String>(());
            }
        }
    };
    let (fed, ()) = tokio::join!(fed, drained);
    fed?;
    let exit = child.exit.await.map_err(|e| format!("copying the spill file there: {e}"))?;
    if exit.code != Some(0) {
        let said = String::from_utf8_lossy(&said);
        return Err(format!("copying the spill file there failed: {}", said.trim()));
    }
    if stream.collected().spill_path.is_none() {
        // Outgrown the spill cap (or lost): the copy would be incomplete.
        return Err("the stream outgrew the spill file".to_owned());
    }
    Ok(())
}
