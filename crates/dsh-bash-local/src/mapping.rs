//! From a resolved spec to a subprocess spawn: `bash -c`, pinned non-interactive env, caps.

use std::time::Duration;

use dsh_shell::ShellExecSpec;
use dsh_subprocess::{CaptureLimits, EnvEntry, PreExecHook, SpawnSpec};

use crate::config::{LocalBashConfig, byte_cap, memory_cap};

/// Pinned over the ambient environment so tools behave non-interactively; the request's
/// `env` and then `dshEnv` override them.
pub const ENV_OVERRIDES: [(&str, &str); 4] =
    [("NO_COLOR", "1"), ("TERM", "dumb"), ("PAGER", "cat"), ("GIT_PAGER", "cat")];

/// `bash -c <command>`: non-login, non-interactive, no rc files.
pub fn bash_argv(command: &str) -> Vec<String> {
    vec!["bash".to_owned(), "-c".to_owned(), command.to_owned()]
}

/// A grace period in milliseconds (a JavaScript number, as configured) as the subprocess
/// layer takes it. A value the layer refuses stays refused: not positive (or NaN) becomes
/// zero, too large for a `Duration` becomes the largest one; a positive value too small for a
/// nanosecond becomes one nanosecond.
pub fn grace_duration(grace_ms: f64) -> Duration {
    if grace_ms.is_nan() || grace_ms <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(grace_ms / 1000.0).map_or(Duration::MAX, |d| d.max(Duration::from_nanos(1)))
}

/// Whose spill files a confined call's are: its session's (`session <id>`), or, for calls
/// without a session, this process's own. Each such owner spills into a directory of its own
/// that a sandbox shows to that owner's commands only
/// ([`dsh_subprocess::SubprocessService::owned_spill_dir`]). `None` for a call no sandbox
/// confines (`danger-full-access`, or no sandbox at all): it spills into the shared directory.
pub fn spill_owner(spec: &ShellExecSpec) -> Option<String> {
    static WITHOUT_SESSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let policy = spec.sandbox_policy.as_ref()?;
    if policy.mode == dsh_sandbox::SandboxMode::DangerFullAccess {
        return None;
    }
    Some(match &policy.session_id {
        Some(id) => format!("session {id}"),
        None => WITHOUT_SESSION
            .get_or_init(|| {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                format!("calls without a session, process {}-{nanos}", std::process::id())
            })
            .clone(),
    })
}

/// The spawn for `argv` under `spec`, with `stdout_cap` bytes of stdout kept in memory.
/// The cancellation token is left for the caller (foreground and background differ).
pub(crate) fn spawn_spec(
    config: &LocalBashConfig,
    spec: &ShellExecSpec,
    argv: Vec<String>,
    stdout_cap: usize,
    pre_exec: Option<PreExecHook>,
) -> SpawnSpec {
    let spill_cap = Some(byte_cap(config.max_spill_bytes));
    let overrides = ENV_OVERRIDES.iter().map(|(k, v)| ((*k).to_owned(), EnvEntry::Set((*v).to_owned())));
    let requested = [&spec.env, &spec.dsh_env]
        .into_iter()
        .flatten()
        .flat_map(|map| map.iter().map(|(k, v)| (k.clone(), EnvEntry::Set(v.clone()))));
    // A shared file is named by its descriptor number, which is the same in the child.
    let shared = spec.shared_file.as_ref().map(|shared| {
        use std::os::fd::AsRawFd;
        (shared.env.clone(), EnvEntry::Set(shared.file.as_raw_fd().to_string()))
    });
    let mut spawn = SpawnSpec::new(argv);
    spawn.cwd = Some(spec.workdir.clone());
    spawn.env = overrides.chain(requested).chain(shared).collect();
    spawn.shared_file = spec.shared_file.as_ref().map(|shared| std::sync::Arc::clone(&shared.file));
    spawn.keep_stdin = spec.keep_stdin;
    spawn.limits = Some(config.resource_limits());
    // A terminal job's `TERM` stays `dumb` (set above) unless the request's env sets it.
    spawn.pty = spec.tty.then_some(dsh_subprocess::PtySize::DEFAULT);
    spawn.stdin = spec.stdin.clone();
    spawn.stdout = CaptureLimits::new("stdout", stdout_cap, spill_cap);
    spawn.stderr = CaptureLimits::new("stderr", memory_cap(config.max_output_bytes), spill_cap);
    spawn.grace = grace_duration(config.grace_ms);
    // No command gets a controlling terminal to read from (a prompt on `/dev/tty` fails at
    // once instead of stopping the command until its timeout) or to inject input into, nor
    // the terminal's signals: a session of its own while the harness has a terminal (see
    // `SpawnSpec::new_session`).
    spawn.new_session = true;
    spawn.spill_owner = spill_owner(spec);
    // Charged to (and removed with) the call's session, whatever its sandbox mode.
    spawn.spill_account = spec
        .dsh_env
        .as_ref()
        .and_then(|env| env.get(dsh_shell::DSH_SESSION_ID).cloned())
        .or_else(|| spec.sandbox_policy.as_ref().and_then(|policy| policy.session_id.clone()));
    spawn.with_pre_exec(pre_exec);
    spawn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_milliseconds_convert_and_invalid_ones_stay_invalid() {
        assert_eq!(grace_duration(3000.0), Duration::from_secs(3));
        assert_eq!(grace_duration(2_147_483_647.0), dsh_subprocess::MAX_GRACE);
        assert_eq!(grace_duration(1e-300), Duration::from_nanos(1));
        for refused in [0.0, -1.0, f64::NAN] {
            assert_eq!(grace_duration(refused), Duration::ZERO, "{refused}");
        }
        for refused in [f64::INFINITY, 2_147_483_648.0, 1e300] {
            assert!(grace_duration(refused) > dsh_subprocess::MAX_GRACE, "{refused}");
        }
    }
}
