//! The container transport: one container per session, programs started with `exec`.

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, ListContainersOptions, RemoveContainerOptions};
use bytes::Bytes;
use dsh_shell_remote::{RemoteChild, RemoteError, RemoteExecSpec, RemoteExit, RemoteTransport};
use futures::StreamExt;
use std::sync::Arc;

use dsh_core::{AGENTS, WeakContext};
use tokio::sync::{Mutex, OnceCell, mpsc, oneshot};
use tokio_util::io::StreamReader;

use crate::labels::{HARNESS_LABEL, HOST_LABEL, SESSION_LABEL, harness_id, host_id, ours_and_gone};

/// Where and how the transport runs programs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerSettings {
    /// Create the session's container from this image (when `container` is not set).
    pub image: Option<String>,
    /// Run in this existing container instead (never created or removed by the transport).
    pub container: Option<String>,
    /// Bind-mounted read-write at the same path (the workspace).
    pub workspace: PathBuf,
    /// Memory limit in bytes (swap included: no swap beyond it).
    pub memory: Option<i64>,
    /// CPU limit in billionths of a CPU.
    pub nano_cpus: Option<i64>,
    /// Limit on the number of processes.
    pub pids_limit: Option<i64>,
    /// No network at all (`network_mode: none`).
    pub network_none: bool,
    /// `uid:gid` programs run as; `None`: the image's user.
    pub user: Option<String>,
    /// How many containers to keep created and started ahead (the warm pool), so a new
    /// session's first call does not wait for a container start; 0: none.
    pub warm: usize,
}

enum Readiness {
    /// No container yet.
    Idle,
    /// The container programs run in, and whether the transport created it.
    Ready { id: String, owned: bool },
    /// Shut down: nothing runs any more.
    Closed,
}

/// Runs programs in containers through the Docker Engine API (the local socket, or
/// `DOCKER_HOST`; Podman through its Docker-compatible service): one container per harness
/// session ([`RemoteExecSpec::session`]), so sessions share neither `/tmp` nor processes.
///
/// A session's container is created and started by its first [`exec`](RemoteTransport::exec)
/// (labelled with the harness and the session, `init` as PID 1 reaping orphans, the
/// workspace and the call's working directory bound at their own paths, the limits applied)
/// and removed when the session's agent ends, or by [`shutdown`](RemoteTransport::shutdown).
/// Before the first container is created, containers left by harnesses that are gone
/// (crashed) are removed. With [`ContainerSettings::container`] every session runs in that
/// one container (never created or removed here).
pub struct ContainerTransport {
    settings: ContainerSettings,
    /// This harness's tag: containers are named `dsh-<tag>-<n>`.
    tag: String,
    docker: OnceCell<Docker>,
    /// Each session's container (by session id; `""` for calls without a session, and for
    /// every call in a named container).
    sessions: std::sync::Mutex<HashMap<String, Arc<Mutex<Readiness>>>>,
    /// How many containers were created (names them).
    created: std::sync::atomic::AtomicU64,
    /// Set by [`shutdown`](RemoteTransport::shutdown): nothing runs any more.
    closed: std::sync::atomic::AtomicBool,
    /// Leftovers of gone harnesses were looked for.
    swept: OnceCell<()>,
    /// The composition, to tie a session's container to its agent's end.
    ctx: Option<WeakContext>,
    /// Containers created ahead, no session's yet (the warm pool).
    warm: std::sync::Mutex<Vec<String>>,
    /// How many warm containers are being created.
    warming: std::sync::atomic::AtomicUsize,
    /// This transport, for the tasks that fill the warm pool.
    me: std::sync::Weak<ContainerTransport>,
}

fn unavailable(what: &str, error: impl std::fmt::Display) -> RemoteError {
    RemoteError::Unavailable(format!("{what}: {error}"))
}

impl ContainerTransport {
    /// A transport whose containers are named `dsh-<tag>-<n>`. With `ctx`, a session's
    /// container is removed when the session's agent (in the composition's agents
    /// registry) ends. Connects lazily.
    pub fn new(settings: ContainerSettings, tag: String, ctx: Option<WeakContext>) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            settings,
            tag,
            docker: OnceCell::new(),
            sessions: std::sync::Mutex::new(HashMap::new()),
            created: std::sync::atomic::AtomicU64::new(0),
            closed: std::sync::atomic::AtomicBool::new(false),
            swept: OnceCell::new(),
            ctx,
            warm: std::sync::Mutex::new(Vec::new()),
            warming: std::sync::atomic::AtomicUsize::new(0),
            me: me.clone(),
        })
    }

    /// Starts creating containers until [`ContainerSettings::warm`] are ready or being made
    /// (in tasks of the current runtime; nothing without one, with a named container, or
    /// after shutdown).
    pub fn prewarm(&self) {
        use std::sync::atomic::Ordering;
        let want = self.settings.warm;
        if want == 0
            || self.settings.container.is_some()
            || self.closed.load(Ordering::Acquire)
            || tokio::runtime::Handle::try_current().is_err()
        {
            return;
        }
        let have = self.warm.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len();
        let pending = self.warming.load(Ordering::Acquire);
        for _ in (have + pending)..want {
            self.warming.fetch_add(1, Ordering::AcqRel);
            let me = self.me.clone();
            tokio::spawn(async move {
                let Some(me) = me.upgrade() else { return };
                let made = async {
                    let docker = me.docker().await?;
                    me.create(docker, "", &[]).await
                }
                .await;
                // Pooled before it stops counting as being made: a session waiting for it
                // sees one or the other.
                match made {
                    Ok(id) if me.closed.load(Ordering::Acquire) => {
                        if let Ok(docker) = me.docker().await {
                            let _ = docker.remove_container(&id, Some(force())).await;
                        }
                    }
                    Ok(id) => me.warm.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(id),
                    Err(e) => tracing::warn!(error = %e, "cannot create a warm container"),
                }
                me.warming.fetch_sub(1, Ordering::AcqRel);
            });
        }
    }

    /// How many warm containers are ready now.
    pub fn warm_ready(&self) -> usize {
        self.warm.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// A warm container for a session whose `roots` need no bind of their own (they all lie
    /// in the workspace, as a warm container binds nothing else): one that is ready, else
    /// one being made (waited for: it is nearer than a start of our own); `None` when there
    /// is none.
    async fn take_warm(&self, roots: &[PathBuf]) -> Option<String> {
        if roots.iter().any(|r| r.is_dir() && !r.starts_with(&self.settings.workspace)) {
            return None;
        }
        loop {
            if let Some(id) = self.warm.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop() {
                return Some(id);
            }
            if self.warming.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// The key of a program's container: its session, or `""` (no session, or one named
    /// container for all).
    fn key(&self, session: Option<&str>) -> String {
        match (&self.settings.container, session) {
            (None, Some(session)) => session.to_owned(),
            _ => String::new(),
        }
    }

    /// The directories a container for session `key` binds besides the workspace: `roots`
    /// (the call's working directory) and every root the session's client named (its MCP
    /// `file://` roots, recorded on its agent).
    fn session_roots(&self, key: &str, roots: &[PathBuf]) -> Vec<PathBuf> {
        let mut all = roots.to_vec();
        if !key.is_empty()
            && let Some(agents) =
                self.ctx.as_ref().and_then(WeakContext::upgrade).and_then(|ctx| ctx.get(AGENTS))
            && let Some(agent) = agents.get(key)
        {
            all.extend(agent.roots().into_iter().filter(|r| !all.contains(r)).collect::<Vec<_>>());
        }
        all
    }

    /// The readiness slot of `key`, made on first use.
    fn slot(&self, key: &str) -> Arc<Mutex<Readiness>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(sessions.entry(key.to_owned()).or_insert_with(|| Arc::new(Mutex::new(Readiness::Idle))))
    }

    /// The slot of `key` if it exists.
    fn existing_slot(&self, key: &str) -> Option<Arc<Mutex<Readiness>>> {
        let sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.get(key).cloned()
    }

    /// The settings the transport runs with.
    pub fn settings(&self) -> &ContainerSettings {
        &self.settings
    }

    async fn docker(&self) -> Result<&Docker, RemoteError> {
        self.docker
            .get_or_try_init(|| async {
                let docker = Docker::connect_with_local_defaults()
                    .map_err(|e| unavailable("the container engine cannot be reached", e))?;
                docker
                    .negotiate_version()
                    .await
                    .map_err(|e| unavailable("the container engine does not answer", e))
            })
            .await
    }

    /// The container of `key` to exec in, created and started on first use with `roots`
    /// bound too.
    async fn container(&self, key: &str, roots: &[PathBuf]) -> Result<String, RemoteError> {
        let slot = self.slot(key);
        let mut readiness = slot.lock().await;
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            *readiness = Readiness::Closed;
        }
        match &*readiness {
            Readiness::Ready { id, .. } => return Ok(id.clone()),
            Readiness::Closed => {
                return Err(RemoteError::Unavailable("the container executor was shut down".to_owned()));
            }
            Readiness::Idle => {}
        }
        let docker = self.docker().await?;
        let (id, owned) = match &self.settings.container {
            Some(name) => {
                let inspected = docker
                    .inspect_container(name, None)
                    .await
                    .map_err(|e| unavailable(&format!("container {name}"), e))?;
                if !inspected.state.and_then(|s| s.running).unwrap_or(false) {
                    return Err(RemoteError::Unavailable(format!("container {name} is not running")));
                }
                (name.clone(), false)
            }
            None => {
                let id = match self.take_warm(roots).await {
                    Some(id) => id,
                    None => self.create(docker, key, roots).await?,
                };
                self.prewarm();
                if !key.is_empty() {
                    self.remove_with_session(docker, key, &slot, &id);
                }
                (id, true)
            }
        };
        *readiness = Readiness::Ready { id: id.clone(), owned };
        Ok(id)
    }

    /// Ties container `id` to the end of session `session`'s agent: when it ends, the
    /// container is removed (and a later call of the session would start a new one).
    fn remove_with_session(&self, docker: &Docker, session: &str, slot: &Arc<Mutex<Readiness>>, id: &str) {
        let Some(agents) = self.ctx.as_ref().and_then(WeakContext::upgrade).and_then(|ctx| ctx.get(AGENTS))
        else {
            return;
        };
        let Some(agent) = agents.all().into_iter().find(|a| a.session().header().id == session) else {
            return;
        };
        let (docker, slot, id) = (docker.clone(), Arc::clone(slot), id.to_owned());
        agent.on_dispose(Box::new(move || {
            Box::pin(async move {
                let mut readiness = slot.lock().await;
                if matches!(&*readiness, Readiness::Ready { id: current, owned: true } if *current == id) {
                    *readiness = Readiness::Idle;
                }
                drop(readiness);
                if let Err(e) = docker.remove_container(&id, Some(force())).await {
                    tracing::warn!(container = %id, error = %e, "cannot remove an ended session's container");
                }
            })
        }));
    }

    async fn create(&self, docker: &Docker, key: &str, roots: &[PathBuf]) -> Result<String, RemoteError> {
        self.swept.get_or_init(|| remove_leftovers(docker)).await;
        let Some(image) = &self.settings.image else {
            return Err(RemoteError::Unavailable("no image to create the container from".to_owned()));
        };
        let same_path = |path: &PathBuf, mode: &str| {
            let path = path.to_string_lossy();
            format!("{path}:{path}:{mode}")
        };
        let mut binds = vec![same_path(&self.settings.workspace, "rw")];
        // The session's own directories (every MCP root of its client elsewhere), when not
        // inside the workspace and there to bind.
        let mut bound = vec![self.settings.workspace.clone()];
        for root in roots {
            if root.is_dir() && !bound.iter().any(|b| root.starts_with(b)) {
                binds.push(same_path(root, "rw"));
                bound.push(root.clone());
            }
        }
        let session = if key.is_empty() { self.tag.clone() } else { key.to_owned() };
        let mut labels =
            HashMap::from([(HARNESS_LABEL.to_owned(), harness_id()), (SESSION_LABEL.to_owned(), session)]);
        if let Some(host) = host_id() {
            labels.insert(HOST_LABEL.to_owned(), host);
        }
        let host = HostConfig {
            binds: Some(binds),
            memory: self.settings.memory,
            memory_swap: self.settings.memory,
            nano_cpus: self.settings.nano_cpus,
            pids_limit: self.settings.pids_limit,
            network_mode: self.settings.network_none.then(|| "none".to_owned()),
            init: Some(true),
            ..HostConfig::default()
        };
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            cmd: Some(vec!["sleep".to_owned(), "2147483647".to_owned()]),
            working_dir: Some(self.settings.workspace.to_string_lossy().into_owned()),
            user: self.settings.user.clone(),
            labels: Some(labels),
            network_disabled: self.settings.network_none.then_some(true),
            host_config: Some(host),
            ..ContainerCreateBody::default()
        };
        let n = self.created.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("dsh-{}-{n}", self.tag);
        let options =
            CreateContainerOptions { name: Some(name.clone()), ..CreateContainerOptions::default() };
        let created = docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| unavailable(&format!("cannot create a container from image {image}"), e))?;
        if let Err(e) = docker.start_container(&created.id, None).await {
            let _ = docker.remove_container(&created.id, Some(force())).await;
            return Err(unavailable(&format!("cannot start container {name}"), e));
        }
        Ok(created.id)
    }
}

/// Whether container `id` is gone or stopped (it died, or someone removed it); if so, and it
/// is still the one programs run in, forgets it (removing what is left of a container the
/// transport created) so the next `exec` readies a new one.
async fn forget_if_gone(docker: &Docker, readiness: &Mutex<Readiness>, id: &str) -> bool {
    let running = match docker.inspect_container(id, None).await {
        Ok(inspected) => inspected.state.and_then(|s| s.running).unwrap_or(false),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => false,
        Err(_) => return false,
    };
    if running {
        return false;
    }
    let mut readiness = readiness.lock().await;
    if let Readiness::Ready { id: current, owned } = &*readiness
        && current == id
    {
        if *owned {
            let _ = docker.remove_container(id, Some(force())).await;
        }
        *readiness = Readiness::Idle;
    }
    true
}

fn force() -> RemoveContainerOptions {
    RemoveContainerOptions { force: true, v: true, ..RemoveContainerOptions::default() }
}

/// Removes the containers of this host's harnesses that are gone (best effort: a failure is
/// logged); containers of other hosts sharing the engine are left alone.
async fn remove_leftovers(docker: &Docker) {
    let filters = HashMap::from([("label".to_owned(), vec![HARNESS_LABEL.to_owned()])]);
    let options =
        ListContainersOptions { all: true, filters: Some(filters), ..ListContainersOptions::default() };
    let containers = match docker.list_containers(Some(options)).await {
        Ok(containers) => containers,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list containers left by earlier harnesses");
            return;
        }
    };
    for container in containers {
        let label = |name: &str| container.labels.as_ref().and_then(|l| l.get(name)).cloned();
        let harness = label(HARNESS_LABEL).unwrap_or_default();
        let host = label(HOST_LABEL);
        let Some(id) = container.id.filter(|_| ours_and_gone(host.as_deref(), &harness)) else { continue };
        match docker.remove_container(&id, Some(force())).await {
            Ok(()) => tracing::info!(container = %id, "removed a container left by a harness that is gone"),
            Err(e) => tracing::warn!(container = %id, error = %e, "cannot remove a leftover container"),
        }
    }
}

/// How many chunks of one stream may wait for its reader.
const STREAM_QUEUE: usize = 64;

type ChunkSender = mpsc::Sender<std::io::Result<Bytes>>;

fn reader(rx: mpsc::Receiver<std::io::Result<Bytes>>) -> Box<dyn tokio::io::AsyncRead + Send + Unpin> {
    Box::new(StreamReader::new(tokio_stream_of(rx)))
}

fn tokio_stream_of(
    mut rx: mpsc::Receiver<std::io::Result<Bytes>>,
) -> impl futures::Stream<Item = std::io::Result<Bytes>> + Send + Unpin {
    Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

#[async_trait::async_trait]
impl RemoteTransport for ContainerTransport {
    fn kind(&self) -> &'static str {
        "container"
    }

    fn describe(&self) -> String {
        match (&self.settings.container, &self.settings.image) {
            (Some(name), _) => format!("container {name}"),
            (None, Some(image)) => format!("container dsh-{}-… per session (image {image})", self.tag),
            (None, None) => "container (no image)".to_owned(),
        }
    }

    async fn exec(&self, spec: RemoteExecSpec) -> Result<RemoteChild, RemoteError> {
        let key = self.key(spec.session.as_deref());
        let roots = self.session_roots(&key, &spec.roots);
        let container = self.container(&key, &roots).await?;
        let docker = self.docker().await?.clone();
        let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let options = CreateExecOptions {
            cmd: Some(spec.argv.clone()),
            env: Some(env),
            working_dir: spec.cwd.as_ref().map(|d| d.to_string_lossy().into_owned()),
            attach_stdin: Some(spec.stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            user: self.settings.user.clone(),
            ..CreateExecOptions::default()
        };
        let failed = |e: bollard::errors::Error| RemoteError::Failed(format!("container {container}: {e}"));
        let (container, exec) = match docker.create_exec(&container, options.clone()).await {
            Ok(exec) => (container, exec),
            // It went away since the last call: a new one, once.
            Err(e) if forget_if_gone(&docker, &self.slot(&key), &container).await => {
                let fresh = self.container(&key, &roots).await?;
                match docker.create_exec(&fresh, options).await {
                    Ok(exec) => (fresh, exec),
                    Err(_) => return Err(failed(e)),
                }
            }
            Err(e) => return Err(failed(e)),
        };
        let failed = |e: bollard::errors::Error| RemoteError::Failed(format!("container {container}: {e}"));
        let StartExecResults::Attached { mut output, input } =
            docker.start_exec(&exec.id, None).await.map_err(failed)?
        else {
            return Err(RemoteError::Failed("the engine started the exec detached".to_owned()));
        };
        let (out_tx, out_rx) = mpsc::channel(STREAM_QUEUE);
        let (err_tx, err_rx) = mpsc::channel(STREAM_QUEUE);
        let (exit_tx, exit_rx) = oneshot::channel();
        let exec_id = exec.id;
        tokio::spawn(async move {
            let send = |tx: &ChunkSender, message: Bytes| {
                let tx = tx.clone();
                async move { tx.send(Ok(message)).await.is_ok() }
            };
            let (mut out_open, mut err_open) = (true, true);
            while let Some(item) = output.next().await {
                match item {
                    Ok(LogOutput::StdOut { message }) if out_open => out_open = send(&out_tx, message).await,
                    Ok(LogOutput::StdErr { message }) if err_open => err_open = send(&err_tx, message).await,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "the exec's output stream failed");
                        break;
                    }
                }
                if !out_open && !err_open {
                    break;
                }
            }
            drop((out_tx, err_tx, output));
            let exit = docker
                .inspect_exec(&exec_id)
                .await
                .map(|inspected| RemoteExit {
                    code: inspected.exit_code.and_then(|c| i32::try_from(c).ok()),
                    out_of_memory: false,
                })
                .map_err(|e| RemoteError::Failed(format!("cannot read the exec's exit: {e}")));
            let _ = exit_tx.send(exit);
        });
        let stdin: Option<Box<dyn tokio::io::AsyncWrite + Send + Unpin>> =
            if spec.stdin { Some(Box::new(input)) } else { None };
        let exit = Box::pin(async move {
            exit_rx.await.unwrap_or_else(|_| Err(RemoteError::Failed("the exec was lost".to_owned())))
        });
        Ok(RemoteChild { stdin, stdout: reader(out_rx), stderr: reader(err_rx), exit })
    }

    async fn probe(&self) -> Result<String, RemoteError> {
        let docker = self.docker().await?;
        let version =
            docker.version().await.map_err(|e| unavailable("the container engine does not answer", e))?;
        let name = version
            .components
            .as_ref()
            .and_then(|c| c.first())
            .map(|c| c.name.clone())
            .unwrap_or_else(|| "engine".to_owned());
        // The engine answering is not enough: the container to run in, or the image to
        // create it from, must be there too.
        match (&self.settings.container, &self.settings.image) {
            (Some(container), _) => {
                let inspected = docker.inspect_container(container, None).await.map_err(|e| {
                    RemoteError::Failed(format!("container {container} is not on the engine: {e}"))
                })?;
                if !inspected.state.and_then(|s| s.running).unwrap_or(false) {
                    return Err(RemoteError::Failed(format!("container {container} is not running")));
                }
            }
            (None, Some(image)) => {
                docker.inspect_image(image).await.map_err(|e| {
                    RemoteError::Failed(format!(
                        "image {image} is not on the engine (pull or build it first): {e}"
                    ))
                })?;
            }
            (None, None) => {
                return Err(RemoteError::Failed(
                    "no image to create the container from (--image)".to_owned(),
                ));
            }
        }
        Ok(format!(
            "{name} {} (API {}) answers",
            version.version.as_deref().unwrap_or("?"),
            version.api_version.as_deref().unwrap_or("?")
        ))
    }

    fn session_private(&self) -> bool {
        self.settings.container.is_none()
    }

    async fn gone(&self, session: Option<&str>) -> bool {
        let Some(slot) = self.existing_slot(&self.key(session)) else { return false };
        let id = match &*slot.lock().await {
            Readiness::Ready { id, .. } => id.clone(),
            Readiness::Idle | Readiness::Closed => return false,
        };
        let Ok(docker) = self.docker().await else { return false };
        // The engine may still be stopping it: a moment to tell.
        for _ in 0..20 {
            if forget_if_gone(docker, &slot, &id).await {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        false
    }

    async fn shutdown(&self) -> Result<(), RemoteError> {
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        // A warm container still being made is removed by its own task once made (it sees
        // `closed`): wait for those tasks, so none is dropped with the runtime before it
        // removed what it made (bounded, as an engine that hangs must not hold the exit).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.warming.load(std::sync::atomic::Ordering::Acquire) > 0
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let slots: Vec<_> = {
            let sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            sessions.values().cloned().collect()
        };
        let mut failed = Vec::new();
        let warm = std::mem::take(&mut *self.warm.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for id in warm {
            let docker = self.docker().await?;
            if let Err(e) = docker.remove_container(&id, Some(force())).await {
                failed.push(format!("cannot remove warm container {id}: {e}"));
            }
        }
        for slot in slots {
            let mut readiness = slot.lock().await;
            let previous = std::mem::replace(&mut *readiness, Readiness::Closed);
            let Readiness::Ready { id, owned: true } = previous else { continue };
            let docker = self.docker().await?;
            if let Err(e) = docker.remove_container(&id, Some(force())).await {
                failed.push(format!("cannot remove container {id}: {e}"));
            }
        }
        if failed.is_empty() { Ok(()) } else { Err(RemoteError::Failed(failed.join("; "))) }
    }
}
