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
//! Every path, C string and the ruleset fd are prepared in the parent; the child only issues
//! syscalls (see [`child`]).

mod child;
mod mounts;
mod record;
mod ruleset;

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use dsh_sandbox::ChildConfinement;

pub(crate) use ruleset::landlock_abi;

use crate::runner::LANDLOCK_FATAL_SIGNATURE;
use child::MountPlan;
use record::{FailureRecord, Step};

/// The prepared confinement of one spawn.
#[derive(Debug)]
pub struct InProcessConfinement {
    ruleset: OwnedFd,
    mounts: Option<MountPlan>,
    /// The paths behind `mounts`, for failure messages.
    bind_paths: Vec<PathBuf>,
    writable_paths: Vec<PathBuf>,
    record: FailureRecord,
}

impl InProcessConfinement {
    /// Prepares the confinement granting writes under `writable` (existing paths only). With
    /// `mount_namespace` false, Landlock alone confines (partial enforcement).
    ///
    /// The error is a fatal line in the launcher's dialect (`landlock-run: …`).
    pub fn prepare(writable: &[PathBuf], mount_namespace: bool) -> Result<Self, String> {
        let fatal = |detail: String| format!("{LANDLOCK_FATAL_SIGNATURE}{detail}");
        let existing: Vec<PathBuf> = writable.iter().filter(|p| p.exists()).cloned().collect();
        let ruleset = ruleset::build_ruleset(&existing).map_err(fatal)?;
        let record =
            FailureRecord::new().map_err(|e| fatal(format!("cannot map the failure record: {e}")))?;
        let (mounts, bind_paths, writable_paths) = if mount_namespace {
            let host = std::fs::read_to_string("/proc/self/mountinfo")
                .map_err(|e| fatal(format!("cannot read /proc/self/mountinfo: {e}")))?;
            let writable_paths = mounts::writable_mounts(&existing, &mounts::parse_mountinfo(&host));
            let plan = MountPlan {
                binds: existing.iter().map(|p| c_path(p)).collect::<Result<_, _>>().map_err(fatal)?,
                writable: writable_paths
                    .iter()
                    .map(|p| c_path(p))
                    .collect::<Result<_, _>>()
                    .map_err(fatal)?,
            };
            (Some(plan), existing, writable_paths)
        } else {
            (None, Vec::new(), Vec::new())
        };
        Ok(Self { ruleset, mounts, bind_paths, writable_paths, record })
    }

    /// Whether the child also enters a read-only mount namespace.
    pub fn uses_mount_namespace(&self) -> bool {
        self.mounts.is_some()
    }

    fn describe_step(&self, step: Step, index: usize) -> String {
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
            Step::Bind => format!("bind-mounting {}", path(&self.bind_paths)),
            Step::ReadOnly => "making / read-only".to_owned(),
            Step::Writable => format!("making {} writable", path(&self.writable_paths)),
            Step::Chdir => "re-entering the working directory".to_owned(),
            Step::DropCaps => "dropping capabilities".to_owned(),
            Step::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)".to_owned(),
            Step::Restrict => "landlock_restrict_self".to_owned(),
        }
    }
}

impl ChildConfinement for InProcessConfinement {
    fn apply_in_child(&self) -> std::io::Result<()> {
        child::confine(&self.ruleset, self.mounts.as_ref()).map_err(|(step, index, errno)| {
            self.record.set(step, index, errno);
            std::io::Error::from_raw_os_error(errno)
        })
    }

    fn failure(&self) -> Option<String> {
        let failure = self.record.get()?;
        Some(format!(
            "{LANDLOCK_FATAL_SIGNATURE}{} failed: {}",
            self.describe_step(failure.step, failure.index as usize),
            std::io::Error::from_raw_os_error(failure.errno)
        ))
    }
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("path contains a NUL byte: {}", path.display()))
}
