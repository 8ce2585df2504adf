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
mod child;
mod mounts;
mod record;
mod ruleset;
mod template;

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_sandbox::ChildConfinement;

pub(crate) use cache::PreparedCache;
pub(crate) use ruleset::landlock_abi;

use crate::runner::LANDLOCK_FATAL_SIGNATURE;
use child::{MountPlan, Template};
use record::{FailureRecord, Step};

/// Everything one policy needs, built in the parent and shareable between spawns.
#[derive(Debug)]
pub(crate) struct Prepared {
    ruleset: OwnedFd,
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
    /// Landlock alone confines (partial enforcement). With `template`, the mount namespace is
    /// built once now and joined by each child; if that fails, each child builds its own.
    ///
    /// The error is a fatal line in the launcher's dialect (`landlock-run: …`).
    pub(crate) fn build(writable: &[PathBuf], mount_namespace: bool, template: bool) -> Result<Self, String> {
        let existing: Vec<PathBuf> = writable.iter().filter(|p| p.exists()).cloned().collect();
        let ruleset = ruleset::build_ruleset(&existing).map_err(fatal)?;
        if !mount_namespace {
            return Ok(Self {
                ruleset,
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
        };
        let (template, template_error) = match template.then(|| template::create(&plan)) {
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
        Ok(Self {
            ruleset,
            mounts: Some(plan),
            template,
            template_error,
            bind_paths: existing,
            writable_paths,
        })
    }
}

fn describe_step(bind_paths: &[PathBuf], writable_paths: &[PathBuf], step: Step, index: usize) -> String {
    let path = |paths: &[PathBuf]| paths.get(index).map(|p| p.display().to_string()).unwrap_or_default();
    match step {
        Step::Unshare if index == 0 => "unshare(CLONE_NEWNS)".to_owned(),
        Step::Unshare => "unshare(CLONE_NEWUSER|CLONE_NEWNS)".to_owned(),
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
    }
}

/// The confinement of one spawn: the shared preparation plus its own failure record.
#[derive(Debug)]
pub struct InProcessConfinement {
    prepared: Arc<Prepared>,
    record: FailureRecord,
}

impl InProcessConfinement {
    /// Prepares a confinement granting writes under `writable` (existing paths only), without
    /// caching or a pre-built namespace. With `mount_namespace` false, Landlock alone confines
    /// (partial enforcement). The error is a fatal line (`landlock-run: …`).
    pub fn prepare(writable: &[PathBuf], mount_namespace: bool) -> Result<Self, String> {
        Self::from_prepared(Arc::new(Prepared::build(writable, mount_namespace, false)?))
    }

    pub(crate) fn from_prepared(prepared: Arc<Prepared>) -> Result<Self, String> {
        let record =
            FailureRecord::new().map_err(|e| fatal(format!("cannot map the failure record: {e}")))?;
        Ok(Self { prepared, record })
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

impl ChildConfinement for InProcessConfinement {
    fn apply_in_child(&self) -> std::io::Result<()> {
        let prepared = &*self.prepared;
        child::confine(&prepared.ruleset, prepared.mounts.as_ref(), prepared.template.as_ref()).map_err(
            |(step, index, errno)| {
                self.record.set(step, index, errno);
                std::io::Error::from_raw_os_error(errno)
            },
        )
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

fn fatal(detail: String) -> String {
    format!("{LANDLOCK_FATAL_SIGNATURE}{detail}")
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("path contains a NUL byte: {}", path.display()))
}
