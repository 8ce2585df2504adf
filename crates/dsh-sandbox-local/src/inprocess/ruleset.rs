//! The Landlock ruleset, built in the parent and applied in the child. It grants read
//! everywhere, and write only to `/dev/null` and the writable roots.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use std::os::fd::AsFd;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

/// The newest ABI whose filesystem rights we ask for; older kernels are served best-effort.
/// (Later ABIs add Unix-socket connection control, which is not a file effect.)
const TARGET_ABI: ABI = ABI::V5;

/// The kernel's Landlock ABI version, or why Landlock is unusable.
pub(crate) fn landlock_abi() -> Result<u32, String> {
    // SAFETY: the version query takes no attribute pointer and has no side effects.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, /* LANDLOCK_CREATE_RULESET_VERSION */
        )
    };
    if version >= 1 {
        return Ok(u32::try_from(version).unwrap_or(u32::MAX));
    }
    let error = std::io::Error::last_os_error();
    Err(match error.raw_os_error() {
        Some(libc::ENOSYS) => "Landlock is not supported by this kernel".to_owned(),
        Some(libc::EOPNOTSUPP) => "Landlock is disabled at boot on this kernel".to_owned(),
        _ => format!("Landlock ABI query failed: {error}"),
    })
}

/// Builds the ruleset fd. Writable roots that do not exist are skipped (nothing there can be
/// granted, and their parents stay read-only). `devices` get the same rights as `/dev/null`;
/// `pts`, a private `devpts`, those rights beneath it. Where the kernel has them (ABI 6),
/// signals and abstract Unix sockets are scoped to the domain: a confined command can signal
/// and connect only to what runs confined with it.
pub(crate) fn build_ruleset(
    writable: &[PathBuf],
    devices: &[PathBuf],
    pts: Option<&OwnedFd>,
) -> Result<OwnedFd, String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    let read = AccessFs::from_read(TARGET_ABI) | AccessFs::IoctlDev;
    let sink: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(|e| fail("cannot create ruleset", &e))?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(|e| fail("cannot create ruleset", &e))?
        .create()
        .map_err(|e| fail("cannot create ruleset", &e))?;
    ruleset = ruleset
        .add_rule(PathBeneath::new(open(Path::new("/"))?, read))
        .map_err(|e| fail("cannot add rule for /", &e))?
        .add_rule(PathBeneath::new(open(Path::new("/dev/null"))?, sink))
        .map_err(|e| fail("cannot add rule for /dev/null", &e))?;
    for device in devices.iter().filter(|d| d.exists()) {
        ruleset = ruleset
            .add_rule(PathBeneath::new(open(device)?, sink))
            .map_err(|e| fail(&format!("cannot add rule for {}", device.display()), &e))?;
    }
    if let Some(pts) = pts {
        ruleset = ruleset
            .add_rule(PathBeneath::new(pts.as_fd(), sink | AccessFs::IoctlDev))
            .map_err(|e| fail("cannot add rule for /dev/pts", &e))?;
    }
    for root in writable {
        if !root.exists() {
            continue;
        }
        ruleset = ruleset
            .add_rule(PathBeneath::new(open(root)?, AccessFs::from_all(TARGET_ABI)))
            .map_err(|e| fail(&format!("cannot add rule for {}", root.display()), &e))?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| landlock_abi().err().unwrap_or_else(|| "Landlock is not enforced".to_owned()))
}

fn open(path: &Path) -> Result<PathFd, String> {
    PathFd::new(path).map_err(|e| format!("cannot open rule path: {}: {e}", path.display()))
}
