//! The in-process runner: Landlock plus a private read-only mount namespace, applied by the
//! forked child itself right before `exec` — no launcher is exec'd.
//!
//! Landlock alone leaves gaps: it does not govern metadata changes (chmod, chown, utimes,
//! xattrs) and refuses a cross-directory link or rename with `EXDEV` rather than `EACCES`.
//! The mount namespace closes the first gap: `/` is read-only there (writes outside the
//! writable roots fail with `EROFS`), and each writable root is its own writable bind. The
//! second is reported through the `invalid cross-device link` denial signature. A root child
//! also loses the capabilities that could undo either layer.
//!
//! Every path, C string, the ruleset fd and the namespace fds are prepared in the parent (and
//! cached per policy, see [`PreparedCache`]); the child only issues syscalls (see [`child`]).

mod cache;
pub(crate) mod child;
mod mounts;
mod record;
mod ruleset;
mod template;
pub(crate) mod world;

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_sandbox::ChildConfinement;

pub(crate) use cache::PreparedCache;
pub(crate) use ruleset::{ReadDenial, landlock_abi};
pub(crate) use template::{NetworkHolder, create_network};

use crate::runner::LANDLOCK_FATAL_SIGNATURE;
use child::{ChildPlan, MountPlan, Template};
use record::{FailureRecord, Step};
use world::WorldPlan;

/// The world a confined command gets besides its writable roots (see [`world`]): host
/// directories backing its private `/tmp` and `/dev/shm`, paths to keep read-only or to
/// mask, directories to hide, and read-only shares re-attached under the private `/tmp`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WorldSpec {
    pub tmp: PathBuf,
    pub shm: PathBuf,
    /// Whether `/tmp` and `/dev/shm` are writable (workspace-write) or read-only.
    pub writable: bool,
    pub protected: Vec<PathBuf>,
    /// Directories inside the writable roots on the way to a protected or denied path, bound
    /// onto themselves so the command cannot move them (see `world::WorldPlan::pinned`).
    pub pinned: Vec<PathBuf>,
    pub masks: Vec<(PathBuf, bool)>,
    /// Denied paths that do not exist yet (resolved as far as they exist): covered as soon as
    /// the host makes one, while commands run (see `world::WorldPlan::late`).
    pub late: Vec<PathBuf>,
    pub empty_file: PathBuf,
    pub empty_dir: PathBuf,
    pub hidden: Vec<PathBuf>,
    pub shares: Vec<PathBuf>,
    /// The denied reads outside the writable roots, enforced by the Landlock rules too (see
    /// [`ruleset`]): the covers in `masks` hide them in the mount namespace, the rules keep
    /// them closed whatever the host does to the paths.
    pub reads: ReadDenial,
    /// The device and inode of each protected path and mask as the spec was made: a file the
    /// host replaced since (a rename over it drops the cover made on the old one) is another
    /// world, built afresh.
    pub identities: Vec<(u64, u64)>,
}

/// Where the command's private `/tmp` is mounted.
pub(crate) const PRIVATE_TMP: &str = "/tmp";

impl WorldSpec {
    /// What must stay reachable below the private `/tmp`, which covers the host's: the
    /// existing writable roots there, and the shares there (directories, or a single file
    /// such as a program) that are not inside one of them (read-only), each with whether it
    /// is read-only. Both runners mount these again over the new `/tmp`, on mount points the
    /// provider makes in the directory behind it.
    pub(crate) fn below_tmp<'a>(&'a self, writable: &'a [PathBuf]) -> impl Iterator<Item = (&'a Path, bool)> {
        let tmp = Path::new(PRIVATE_TMP);
        let below = move |p: &Path| p.starts_with(tmp) && p != tmp;
        let shares = self
            .shares
            .iter()
            .filter(move |s| (s.is_dir() || s.is_file()) && !writable.iter().any(|w| s.starts_with(w)));
        writable
            .iter()
            .filter(|w| w.exists())
            .map(|w| (w.as_path(), false))
            .chain(shares.map(|s| (s.as_path(), true)))
            .filter(move |(p, _)| below(p))
    }
}

/// Everything one policy needs, built in the parent and shareable between spawns.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The current Landlock ruleset, and the stamps of the directories its read rules expand.
    rules: std::sync::Mutex<(Vec<ruleset::Stamp>, Arc<OwnedFd>)>,
    /// What the ruleset is made of, to make it again when an expanded directory changed.
    inputs: PreparedRules,
    mounts: Option<MountPlan>,
    template: Option<Template>,
    /// Why the namespace could not be built ahead of time (each child then builds its own).
    template_error: Option<String>,
    /// The paths behind `mounts`, for failure messages.
    bind_paths: Vec<PathBuf>,
    writable_paths: Vec<PathBuf>,
}

impl Prepared {
    /// Grants writes under the existing paths of `writable`. With `mount_namespace` false,
    /// Landlock alone confines (partial enforcement). With `world`, the command also gets its
    /// own `/dev`, `/tmp`, PID namespace and masks. With `template`, the mount namespace is
    /// built once now and joined by each child; if that fails, each child builds its own.
    ///
    /// The error is a fatal line in the launcher's dialect (`landlock-run: …`).
    pub(crate) fn build(
        writable: &[PathBuf],
        world: Option<&WorldSpec>,
        mount_namespace: bool,
        template: bool,
        network: bool,
    ) -> Result<Self, String> {
        let existing: Vec<PathBuf> = writable.iter().filter(|p| p.exists()).cloned().collect();
        if !mount_namespace {
            let reads = ReadDenial::default();
            let ruleset = ruleset::build_ruleset(&existing, &[], None, (&reads, &[], None)).map_err(fatal)?;
            return Ok(Self {
                rules: std::sync::Mutex::new((Vec::new(), Arc::new(ruleset))),
                inputs: PreparedRules {
                    rule_roots: existing,
                    devices: Vec::new(),
                    reads,
                    inside: Vec::new(),
                },
                mounts: None,
                template: None,
                template_error: None,
                bind_paths: Vec::new(),
                writable_paths: Vec::new(),
            });
        }
        let host = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| fatal(format!("cannot read /proc/self/mountinfo: {e}")))?;
        let writable_paths = mounts::writable_mounts(&existing, &mounts::parse_mountinfo(&host));
        let plan = MountPlan {
            binds: existing.iter().map(|p| c_path(p)).collect::<Result<_, _>>().map_err(fatal)?,
            writable: writable_paths.iter().map(|p| c_path(p)).collect::<Result<_, _>>().map_err(fatal)?,
            world: world.map(|w| world_plan(w, &existing)).transpose().map_err(fatal)?,
            network,
        };
        let (template, template_error) =
            match template.then(|| template::create(&plan, world.and(alive_fd().ok()))) {
                None => (None, None),
                Some(Ok(t)) => (Some(t), None),
                Some(Err(template::TemplateError::Step((step, index, errno)))) => (
                    None,
                    Some(format!(
                        "{} failed: {}",
                        describe_step(&existing, &writable_paths, step, index),
                        std::io::Error::from_raw_os_error(errno)
                    )),
                ),
                Some(Err(template::TemplateError::Io(e))) => (None, Some(e.to_string())),
            };
        let mut rule_roots = existing.clone();
        let mut devices = Vec::new();
        if let Some(world) = world {
            if world.writable {
                rule_roots.extend([world.tmp.clone(), world.shm.clone()]);
            }
            devices.push(PathBuf::from("/dev/tty"));
        }
        // The read rules need the namespace's own `/proc`, known only with a pre-built
        // namespace; without one, the covers alone hold the denied reads.
        let reads = match (world, template.as_ref().and_then(|t| t.proc.as_ref())) {
            (Some(world), Some(_)) => world.reads.clone(),
            _ => ReadDenial::default(),
        };
        let mut inside: Vec<PathBuf> = world.map(|w| vec![w.tmp.clone(), w.shm.clone()]).unwrap_or_default();
        inside
            .extend(world::DEVICES.iter().map(|d| PathBuf::from(std::ffi::OsStr::from_bytes(d.to_bytes()))));
        let prepared_rules = PreparedRules { rule_roots, devices, reads, inside };
        let ruleset = prepared_rules.build(template.as_ref()).map_err(fatal)?;
        let stamps = prepared_rules.reads.stamps();
        Ok(Self {
            rules: std::sync::Mutex::new((stamps, Arc::new(ruleset))),
            inputs: prepared_rules,
            mounts: Some(plan),
            template,
            template_error,
            bind_paths: existing,
            writable_paths,
        })
    }
}

impl Prepared {
    /// Ends the processes left in this world's PID namespace (see [`Template::end_strays`]);
    /// false when some did not end.
    pub(crate) fn end_strays(&self) -> bool {
        self.template.as_ref().is_none_or(Template::end_strays)
    }

    /// The ruleset for a command starting now: the one made last, or a new one when a
    /// directory its read rules expand has changed since (an entry added, removed or
    /// replaced), so what the host added there is readable and what replaced a denied path is
    /// not. Commands already running keep the rules they started with.
    fn ruleset(&self) -> Result<Arc<OwnedFd>, String> {
        if self.inputs.reads.is_empty() {
            let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
            return Ok(Arc::clone(&rules.1));
        }
        let stamps = self.inputs.reads.stamps();
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        if rules.0 != stamps {
            let fresh = self.inputs.build(self.template.as_ref()).map_err(fatal)?;
            *rules = (stamps, Arc::new(fresh));
        }
        Ok(Arc::clone(&rules.1))
    }
}

/// What a [`Prepared`]'s ruleset is made of.
#[derive(Debug)]
struct PreparedRules {
    rule_roots: Vec<PathBuf>,
    devices: Vec<PathBuf>,
    reads: ReadDenial,
    /// What the namespace mounts afresh and the read rules must reach (see
    /// [`ReadDenial`]): its `/tmp`, `/dev/shm` and device nodes.
    inside: Vec<PathBuf>,
}

impl PreparedRules {
    fn build(&self, template: Option<&Template>) -> Result<OwnedFd, String> {
        let pts = template.and_then(|t| t.pts.as_ref());
        let proc = template.and_then(|t| t.proc.as_ref());
        ruleset::build_ruleset(&self.rule_roots, &self.devices, pts, (&self.reads, &self.inside, proc))
    }
}

/// The child's plan for `spec`: C strings, and the mounts to re-attach under the private
/// `/tmp` ([`WorldSpec::below_tmp`]).
/// The existing directories that hold a protected, masked or late path (see
/// `world::WorldPlan::watch`).
fn watched_dirs(spec: &WorldSpec) -> Vec<PathBuf> {
    let covered = spec.protected.iter().chain(spec.masks.iter().map(|(p, _)| p)).chain(&spec.late);
    let mut dirs: Vec<PathBuf> = Vec::new();
    for parent in covered.filter_map(|p| p.parent()) {
        if parent.is_dir() && !dirs.iter().any(|d| d == parent) {
            dirs.push(parent.to_path_buf());
        }
    }
    dirs
}

pub(crate) fn world_plan(spec: &WorldSpec, writable: &[PathBuf]) -> Result<WorldPlan, String> {
    let reattach = spec
        .below_tmp(writable)
        .map(|(p, read_only)| Ok((c_path(p)?, read_only)))
        .collect::<Result<_, String>>()?;
    let masks = spec.masks.iter().map(|(p, dir)| Ok((c_path(p)?, *dir))).collect::<Result<_, String>>()?;
    Ok(WorldPlan {
        tmp: c_path(&spec.tmp)?,
        shm: c_path(&spec.shm)?,
        writable: spec.writable,
        protected: spec.protected.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        pinned: spec.pinned.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        late: spec.late.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        watch: watched_dirs(spec).iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        masks,
        empty_file: c_path(&spec.empty_file)?,
        empty_dir: c_path(&spec.empty_dir)?,
        hidden_dirs: spec.hidden.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        reattach,
    })
}

fn describe_step(bind_paths: &[PathBuf], writable_paths: &[PathBuf], step: Step, index: usize) -> String {
    let path = |paths: &[PathBuf]| paths.get(index).map(|p| p.display().to_string()).unwrap_or_default();
    match step {
        Step::Unshare if index == 0 => "unshare(CLONE_NEWNS|CLONE_NEWUTS|CLONE_NEWIPC)".to_owned(),
        Step::Unshare => "unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWUTS|CLONE_NEWIPC)".to_owned(),
        Step::IdMap => {
            ["writing /proc/self/setgroups", "writing /proc/self/uid_map", "writing /proc/self/gid_map"]
                .get(index)
                .copied()
                .unwrap_or("writing the id maps")
                .to_owned()
        }
        Step::MakePrivate => "making mounts private".to_owned(),
        Step::Bind => format!("bind-mounting {}", path(bind_paths)),
        Step::ReadOnly => "making / read-only".to_owned(),
        Step::Writable => format!("making {} writable", path(writable_paths)),
        Step::Chdir => "re-entering the working directory".to_owned(),
        Step::DropCaps => "dropping capabilities".to_owned(),
        Step::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)".to_owned(),
        Step::Restrict => "landlock_restrict_self".to_owned(),
        Step::World => format!("building the private /dev, /tmp and masks (item {index})"),
        Step::PidNamespace => "entering a new PID namespace".to_owned(),
        Step::MountProc => "mounting the namespace's /proc (its /proc/sys read-only)".to_owned(),
        Step::Dumpable => "prctl(PR_SET_DUMPABLE)".to_owned(),
        Step::Seccomp => "installing the seccomp filter".to_owned(),
        Step::NewSession => "setsid".to_owned(),
        Step::Exec => "exec".to_owned(),
        Step::Network => [
            "opening a socket in the network namespace",
            "bringing its loopback up",
            "making the proxy socket",
            "binding the proxy socket to 127.0.0.1",
            "handing the proxy socket to the harness",
        ]
        .get(index)
        .copied()
        .unwrap_or("building the network namespace")
        .to_owned(),
    }
}

/// The confinement of one spawn: the shared preparation plus its own failure record.
///
/// Everything the child reads is made in the parent by [`InProcessConfinement::prepare`]:
/// the process-wide values (the alive pipe, the clone stack, the last capability, the
/// failure-record pool) are initialised there and copied into the value, so the forked child
/// never reaches a lazy initialiser (`OnceLock::get_or_init`).
#[derive(Debug)]
pub struct InProcessConfinement {
    prepared: Arc<Prepared>,
    ruleset: Arc<OwnedFd>,
    record: FailureRecord,
    alive: std::os::fd::RawFd,
    last_cap: u32,
    seccomp: Option<&'static crate::seccomp::SeccompFilter>,
    stack_top: Option<usize>,
}

impl InProcessConfinement {
    /// Prepares a confinement granting writes under `writable` (existing paths only), without
    /// caching or a pre-built namespace. With `mount_namespace` false, Landlock alone confines
    /// (partial enforcement). The error is a fatal line (`landlock-run: …`).
    pub fn prepare(writable: &[PathBuf], mount_namespace: bool) -> Result<Self, String> {
        Self::from_prepared(Arc::new(Prepared::build(writable, None, mount_namespace, false, false)?))
    }

    pub(crate) fn from_prepared(prepared: Arc<Prepared>) -> Result<Self, String> {
        let record =
            FailureRecord::new().map_err(|e| fatal(format!("cannot map the failure record: {e}")))?;
        let ruleset = prepared.ruleset()?;
        let seccomp = match prepared.mounts.is_some() {
            true => Some(crate::seccomp::filter().map_err(fatal)?),
            false => None,
        };
        Ok(Self {
            prepared,
            ruleset,
            record,
            alive: alive_fd().map_err(fatal)?,
            last_cap: last_cap(),
            seccomp,
            stack_top: clone_stack_top(),
        })
    }

    /// The proxy listener of the pre-built network namespace, when there is one.
    pub fn proxy(&self) -> Option<Arc<dsh_sandbox::ProxyListener>> {
        self.prepared.template.as_ref().and_then(|t| t.proxy.clone())
    }

    /// Whether the child also enters a read-only mount namespace.
    pub fn uses_mount_namespace(&self) -> bool {
        self.prepared.mounts.is_some()
    }

    /// Whether the child joins a namespace built ahead of time (else it builds its own), or
    /// why it could not be built.
    pub fn prebuilt_namespace(&self) -> Result<bool, String> {
        match &self.prepared.template_error {
            Some(error) => Err(error.clone()),
            None => Ok(self.prepared.template.is_some()),
        }
    }
}

// SAFETY: `apply_in_child` only reads what the parent prepared (the shared `Prepared`, the
// descriptors, the capability count, the seccomp program and the clone stack, all made and
// initialised in `from_prepared`), issues raw syscalls (`child::confine`, itself only raw
// syscalls on stack buffers) and records a failure with one atomic store into a slot whose
// page was mapped in the parent (`FailureRecord::set`, no lazy initialisation). It allocates
// nothing and takes no lock. In a child that shares the harness's memory, `child::confine`
// changes nothing of the address space (no `PR_SET_DUMPABLE`, no `fork`), starts the command
// on a stack in its own frame, and asks for a forked start where it would.
unsafe impl ChildConfinement for InProcessConfinement {
    fn apply_in_child(&self) -> std::io::Result<()> {
        let prepared = &*self.prepared;
        let plan = ChildPlan {
            ruleset: &self.ruleset,
            mounts: prepared.mounts.as_ref(),
            template: prepared.template.as_ref(),
            alive: self.alive,
            last_cap: self.last_cap,
            seccomp: self.seccomp,
            stack_top: self.stack_top,
        };
        child::confine(&plan).map_err(|(step, index, errno)| {
            // A failed exec of the command stays the spawn's own error, as without a hook.
            if step != Step::Exec {
                self.record.set(step, index, errno);
            }
            std::io::Error::from_raw_os_error(errno)
        })
    }

    /// With the pre-built namespaces to join (or none to enter), the child changes nothing of
    /// the address space: it joins them and starts the command from a stack of its own, or
    /// confines itself; any other way asks for a forked start (see [`child::confine`]).
    fn shares_memory(&self) -> bool {
        self.prepared.mounts.is_none() || self.prepared.template.is_some()
    }

    fn failure(&self) -> Option<String> {
        let failure = self.record.get()?;
        Some(fatal(format!(
            "{} failed: {}",
            describe_step(
                &self.prepared.bind_paths,
                &self.prepared.writable_paths,
                failure.step,
                failure.index as usize
            ),
            std::io::Error::from_raw_os_error(failure.errno)
        )))
    }
}

/// The read end of a pipe whose write end the harness holds, unclosed, for its whole life: a
/// relay sees EOF on it exactly when the harness is gone, however it died.
fn alive_fd() -> Result<std::os::fd::RawFd, String> {
    use std::os::fd::{AsRawFd, FromRawFd};
    static ALIVE: std::sync::OnceLock<Result<(OwnedFd, OwnedFd), String>> = std::sync::OnceLock::new();
    let pipe = ALIVE.get_or_init(|| {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two-element array on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(format!("cannot make the alive pipe: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: both fds were just created and are owned here, for the process's life.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    });
    pipe.as_ref().map(|(read, _)| read.as_raw_fd()).map_err(Clone::clone)
}

/// The top of a stack reserved, once per process, for starting confined commands with
/// `clone(CLONE_VM)` from their relay (each relay has its own copy of it, as of all memory).
fn clone_stack_top() -> Option<usize> {
    const SIZE: usize = 256 * 1024;
    static STACK: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *STACK.get_or_init(|| {
        // SAFETY: an anonymous private mapping; no existing memory is touched. It is never
        // unmapped.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        (base != libc::MAP_FAILED).then(|| (base as usize + SIZE) & !15)
    })
}

/// The highest capability number this kernel knows (read once per process, in the parent).
pub(crate) fn last_cap() -> u32 {
    static LAST: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *LAST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(63)
    })
}

fn fatal(detail: String) -> String {
    format!("{LANDLOCK_FATAL_SIGNATURE}{detail}")
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("path contains a NUL byte: {}", path.display()))
}
