//! Filling a request's defaults and caps; invalid timeouts and byte budgets are refused.

use dsh_shell::{ShellError, ShellExecRequest, ShellExecSpec, ShellTimeout};

use crate::config::{LocalBashConfig, memory_cap};

fn positive_finite(value: f64) -> bool {
    value.is_finite() && value > 0.0
}

/// Resolves `request` against `config`: the timeout is `min(hint ?? default, max)`, stdout's
/// budget defaults to `maxOutputBytes`, the workdir to the configured or harness cwd; every
/// other field is carried verbatim. The JavaScript numbers are converted here, once: the
/// timeout to a [`ShellTimeout`] (which keeps the number it reports), the budget to whole
/// bytes (fractions round down).
pub fn resolve(config: &LocalBashConfig, request: ShellExecRequest) -> Result<ShellExecSpec, ShellError> {
    if request.timeout_ms.is_some_and(|t| !positive_finite(t)) {
        return Err(ShellError::Invalid(
            "bash-local: request.timeoutMs must be a positive finite number".into(),
        ));
    }
    let stdout_max_bytes = request.stdout_max_bytes.unwrap_or(config.max_output_bytes);
    if !positive_finite(stdout_max_bytes) {
        return Err(ShellError::Invalid(
            "bash-local: request.stdoutMaxBytes must be a positive finite number".into(),
        ));
    }
    let timeout_ms = request.timeout_ms.unwrap_or(config.timeout_ms).min(config.max_timeout_ms);
    let workdir = match request.workdir.or_else(|| config.cwd.clone()) {
        Some(dir) => dir,
        None => std::env::current_dir()
            .map_err(|e| ShellError::Other(format!("cannot determine the working directory: {e}")))?,
    };
    Ok(ShellExecSpec {
        command: request.command,
        workdir,
        timeout: ShellTimeout::from_millis(timeout_ms),
        stdout_max_bytes: memory_cap(stdout_max_bytes),
        signal: request.signal,
        stdin: request.stdin,
        env: request.env,
        dsh_env: request.dsh_env,
        sandbox_policy: request.sandbox_policy,
        output_probe: request.output_probe,
        network_approver: request.network_approver,
        shared_file: request.shared_file,
        keep_stdin: request.keep_stdin,
    })
}
