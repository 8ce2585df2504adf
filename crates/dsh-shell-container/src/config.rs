//! The `shell-container` configuration: the local executor's keys plus the container's.

use std::path::PathBuf;

use dsh_bash_local::LocalBashConfig;
use serde::Deserialize;

/// Configuration of the container executor (durations in milliseconds, sizes in bytes
/// unless said otherwise). The first six keys are the local executor's, with its defaults.
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ContainerExecutorConfig {
    /// Default working directory; the harness's own when absent.
    pub cwd: Option<PathBuf>,
    /// Default foreground timeout.
    pub timeout_ms: f64,
    /// Cap on any foreground timeout, including the default.
    pub max_timeout_ms: f64,
    /// In-memory tail per stream.
    pub max_output_bytes: f64,
    /// Largest complete stream kept in a spill file.
    pub max_spill_bytes: f64,
    /// Time between `SIGTERM` and `SIGKILL`, and the stream-drain bound after exit.
    pub grace_ms: f64,
    /// The image the session's container is created from.
    pub image: Option<String>,
    /// An existing, running container to run commands in instead (its limits and network
    /// are its own; it is never removed).
    pub container: Option<String>,
    /// The directory bind-mounted at its own path; `cwd` (or the harness's) when absent.
    pub workspace: Option<PathBuf>,
    /// Memory limit: bytes, or a number with `k`, `m` or `g` (`256m`).
    pub memory: Option<String>,
    /// CPU limit in CPUs (`1.5`).
    pub cpus: Option<f64>,
    /// Limit on the number of processes in the container.
    pub pids_limit: Option<i64>,
    /// `allow` (the engine's default network) or `deny` (no network at all).
    pub network: Option<String>,
    /// Containers kept created ahead (the warm pool), so a new session's first call waits
    /// for no container start; none when absent.
    pub warm: Option<usize>,
}

impl Default for ContainerExecutorConfig {
    fn default() -> Self {
        let local = LocalBashConfig::default();
        Self {
            cwd: local.cwd,
            timeout_ms: local.timeout_ms,
            max_timeout_ms: local.max_timeout_ms,
            max_output_bytes: local.max_output_bytes,
            max_spill_bytes: local.max_spill_bytes,
            grace_ms: local.grace_ms,
            image: None,
            container: None,
            workspace: None,
            memory: None,
            cpus: None,
            pids_limit: None,
            network: None,
            warm: None,
        }
    }
}

/// A configuration the container executor refuses; the message says what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shell-container: {0}")]
pub struct ConfigError(String);

impl ContainerExecutorConfig {
    /// The local executor's part.
    pub fn local(&self) -> LocalBashConfig {
        LocalBashConfig {
            cwd: self.cwd.clone(),
            timeout_ms: self.timeout_ms,
            max_timeout_ms: self.max_timeout_ms,
            max_output_bytes: self.max_output_bytes,
            max_spill_bytes: self.max_spill_bytes,
            grace_ms: self.grace_ms,
            ..LocalBashConfig::default()
        }
    }

    /// Checks every key; the local keys with the local executor's messages.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.local().validate().map_err(|e| ConfigError(e.to_string()))?;
        match (&self.image, &self.container) {
            (None, None) => {
                return Err(ConfigError(
                    "set image (to create the session's container) or container (to use a running one)"
                        .into(),
                ));
            }
            (Some(_), Some(_)) => return Err(ConfigError("image and container exclude each other".into())),
            _ => {}
        }
        if let Some(memory) = &self.memory {
            parse_memory(memory).ok_or_else(|| {
                ConfigError(format!(
                    "memory must be a number of bytes, optionally with k, m or g, got {memory:?}"
                ))
            })?;
        }
        if self.cpus.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return Err(ConfigError("cpus must be a positive finite number".into()));
        }
        if self.pids_limit.is_some_and(|p| p <= 0) {
            return Err(ConfigError("pidsLimit must be a positive number".into()));
        }
        if let Some(network) = self.network.as_deref().filter(|n| !matches!(*n, "allow" | "deny")) {
            return Err(ConfigError(format!("network must be \"allow\" or \"deny\", got {network:?}")));
        }
        Ok(())
    }
}

/// `256m` → 268435456: bytes, or a whole number with `k`, `m` or `g` (powers of 1024; an
/// optional `b` or `ib` after the unit). `None` when it does not parse or is zero.
pub fn parse_memory(text: &str) -> Option<i64> {
    let lower = text.trim().to_ascii_lowercase();
    let unitless = lower.trim_end_matches("ib").trim_end_matches('b');
    let (digits, factor) = match unitless.chars().last()? {
        'k' => (&unitless[..unitless.len() - 1], 1i64 << 10),
        'm' => (&unitless[..unitless.len() - 1], 1 << 20),
        'g' => (&unitless[..unitless.len() - 1], 1 << 30),
        _ => (unitless, 1),
    };
    let value: i64 = digits.parse().ok()?;
    value.checked_mul(factor).filter(|v| *v > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_parse_with_binary_units() {
        assert_eq!(parse_memory("256m"), Some(256 << 20));
        assert_eq!(parse_memory("1G"), Some(1 << 30));
        assert_eq!(parse_memory("512MiB"), Some(512 << 20));
        assert_eq!(parse_memory("4096"), Some(4096));
        for refused in ["", "m", "0", "-1m", "1.5g", "lots"] {
            assert_eq!(parse_memory(refused), None, "{refused}");
        }
    }

    #[test]
    fn an_image_or_a_container_is_required_and_limits_are_checked() {
        let config = |json: &str| serde_json::from_str::<ContainerExecutorConfig>(json).expect("parses");
        let error = |json: &str| config(json).validate().map_err(|e| e.to_string()).expect_err("refused");
        assert_eq!(
            error("{}"),
            "shell-container: set image (to create the session's container) or container (to use a running one)"
        );
        assert_eq!(
            error(r#"{"image":"i","container":"c"}"#),
            "shell-container: image and container exclude each other"
        );
        assert_eq!(
            error(r#"{"image":"i","memory":"lots"}"#),
            "shell-container: memory must be a number of bytes, optionally with k, m or g, got \"lots\""
        );
        assert_eq!(
            error(r#"{"image":"i","cpus":0}"#),
            "shell-container: cpus must be a positive finite number"
        );
        assert_eq!(
            error(r#"{"image":"i","network":"ask"}"#),
            "shell-container: network must be \"allow\" or \"deny\", got \"ask\""
        );
        assert_eq!(
            error(r#"{"image":"i","graceMs":0}"#),
            "shell-container: bash-local: graceMs must be a positive finite number"
        );
        assert_eq!(
            config(r#"{"image":"i","memory":"256m","cpus":1,"pidsLimit":64,"network":"deny"}"#).validate(),
            Ok(())
        );
    }
}
