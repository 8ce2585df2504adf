//! From a resolved spec to a subprocess spawn (contract §4.3).

use dsh_shell::ShellExecSpec;
use dsh_subprocess::{CaptureLimits, EnvEntry, PreExecHook, SpawnSpec};

use crate::config::{LocalBashConfig, byte_cap};

/// Pinned over the ambient environment so tools behave non-interactively; the request's
/// `env` and then `dshEnv` override them.
pub const ENV_OVERRIDES: [(&str, &str); 4] =
    [("NO_COLOR", "1"), ("TERM", "dumb"), ("PAGER", "cat"), ("GIT_PAGER", "cat")];

/// `bash -c <command>`: non-login, non-interactive, no rc files.
pub fn bash_argv(command: &str) -> Vec<String> {
    vec!["bash".to_owned(), "-c".to_owned(), command.to_owned()]
}

/// The spawn for `argv` under `spec`, with `stdout_cap` bytes of stdout kept in memory.
/// The abort signal is left for the caller (foreground and background differ).
pub(crate) fn spawn_spec(
    config: &LocalBashConfig,
    spec: &ShellExecSpec,
    argv: Vec<String>,
    stdout_cap: f64,
    pre_exec: Option<PreExecHook>,
) -> SpawnSpec {
    let spill_cap = Some(byte_cap(config.max_spill_bytes));
    let memory_cap = |bytes: f64| usize::try_from(byte_cap(bytes)).unwrap_or(usize::MAX);
    let overrides = ENV_OVERRIDES.iter().map(|(k, v)| ((*k).to_owned(), EnvEntry::Set((*v).to_owned())));
    let requested = [&spec.env, &spec.dsh_env]
        .into_iter()
        .flatten()
        .flat_map(|map| map.iter().map(|(k, v)| (k.clone(), EnvEntry::Set(v.clone()))));
    SpawnSpec {
        argv,
        cwd: Some(spec.workdir.clone()),
        env: overrides.chain(requested).collect(),
        stdin: spec.stdin.clone(),
        stdout: CaptureLimits::new("stdout", memory_cap(stdout_cap), spill_cap),
        stderr: CaptureLimits::new("stderr", memory_cap(config.max_output_bytes), spill_cap),
        grace_ms: config.grace_ms,
        signal: None,
        // A confined command (the only kind with a hook) starts a session of its own: no
        // controlling terminal to inject input into, no signals from the terminal.
        new_session: pre_exec.is_some(),
        pre_exec,
    }
}
