//! Behaviour of the subprocess service through its public surface: real processes, real
//! signals, real files.

mod env;
mod redaction;
mod spawn;
mod spill;
mod terminal;
mod termination;

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use dsh_subprocess::{AmbientEnv, CaptureLimits, ServiceOptions, SpawnSpec, SubprocessService};

/// `bash -c <script>` with 200 ms grace and generous caps.
pub fn bash(script: &str) -> SpawnSpec {
    let mut spec = SpawnSpec::new(vec!["bash".into(), "-c".into(), script.into()]);
    spec.grace = Duration::from_millis(200);
    spec
}

/// The test process's PATH and HOME, plus `extra`, as a fixed ambient environment.
pub fn ambient_with(extra: &[(&str, &str)]) -> AmbientEnv {
    let mut vars: Vec<(OsString, OsString)> =
        ["PATH", "HOME"].iter().filter_map(|k| std::env::var_os(k).map(|v| (OsString::from(k), v))).collect();
    vars.extend(extra.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
    AmbientEnv::Fixed(Arc::new(vars))
}

/// Writes an executable script at `path`, from another process. Written from this one, the
/// file could be busy (`ETXTBSY`) when run: another test's spawn may fork while this
/// process holds the file open for writing, and the fork's copy of that descriptor lives
/// until it `exec`s.
pub fn write_script(path: &std::path::Path, text: &str) {
    let status = std::process::Command::new("sh")
        .args(["-c", "printf '%s' \"$1\" > \"$2\" && chmod 755 \"$2\"", "sh", text])
        .arg(path)
        .status()
        .expect("sh");
    assert!(status.success(), "writing {}: {status}", path.display());
}

/// A service with an injected spill directory.
pub fn service_in(dir: &std::path::Path) -> Arc<SubprocessService> {
    SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(dir.to_path_buf()),
        ..ServiceOptions::default()
    })
}

pub fn limits(label: &str, cap: usize, spill: Option<u64>) -> CaptureLimits {
    CaptureLimits::new(label, cap, spill)
}

/// Whether any non-zombie process is in group `pgid` (zombies awaiting their adoptive
/// parent's reap count as gone, as they do for the service).
pub fn group_has_live_member(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return true };
    entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { return false };
        let Some(close) = stat.rfind(')') else { return false };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z" && fields[0] != "X"
    })
}
