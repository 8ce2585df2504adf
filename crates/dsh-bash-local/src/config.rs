//! The executor's configuration and its validation.

use std::path::PathBuf;

use serde::Deserialize;

/// The largest grace period a timer accepts, in milliseconds.
const MAX_GRACE_MS: f64 = 2_147_483_647.0;

/// Configuration of the local executor (all durations in milliseconds, sizes in bytes).
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LocalBashConfig {
    /// Default working directory; the harness's own when absent.
    pub cwd: Option<PathBuf>,
    /// Default foreground timeout.
    pub timeout_ms: f64,
    /// Cap on any foreground timeout, including the default.
    pub max_timeout_ms: f64,
    /// In-memory tail per stream (stdout's can be raised per call by trusted callers).
    pub max_output_bytes: f64,
    /// Largest complete stream kept in a spill file.
    pub max_spill_bytes: f64,
    /// Time between `SIGTERM` and `SIGKILL`, and the pipe-drain bound after exit.
    pub grace_ms: f64,
}

impl Default for LocalBashConfig {
    fn default() -> Self {
        Self {
            cwd: None,
            timeout_ms: 120_000.0,
            max_timeout_ms: 600_000.0,
            max_output_bytes: 64_000.0,
            max_spill_bytes: 67_108_864.0,
            grace_ms: 3000.0,
        }
    }
}

/// A configuration value the executor refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The named key (wire spelling) is not a positive finite number.
    #[error("bash-local: {0} must be a positive finite number")]
    NotPositiveFinite(&'static str),
    /// `graceMs` exceeds 2147483647 (the largest grace the subprocess layer accepts).
    #[error("bash-local: graceMs must be no greater than 2147483647")]
    GraceTooLarge,
}

fn positive_finite(value: f64) -> bool {
    value.is_finite() && value > 0.0
}

impl LocalBashConfig {
    /// Checks every numeric key in declaration order; the first bad one is reported.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let keys = [
            ("timeoutMs", self.timeout_ms),
            ("maxTimeoutMs", self.max_timeout_ms),
            ("maxOutputBytes", self.max_output_bytes),
            ("maxSpillBytes", self.max_spill_bytes),
            ("graceMs", self.grace_ms),
        ];
        if let Some((key, _)) = keys.iter().find(|(_, value)| !positive_finite(*value)) {
            return Err(ConfigError::NotPositiveFinite(key));
        }
        if self.grace_ms > MAX_GRACE_MS {
            return Err(ConfigError::GraceTooLarge);
        }
        Ok(())
    }
}

/// A byte cap as a whole number of bytes (fractions round down, as a `retained > cap` test
/// does).
pub fn byte_cap(value: f64) -> u64 {
    value.floor() as u64
}

/// A byte cap as an in-memory budget: [`byte_cap`], saturating at `usize::MAX`.
pub fn memory_cap(value: f64) -> usize {
    usize::try_from(byte_cap(value)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_contract() {
        let config: LocalBashConfig = serde_json_from("{}");
        assert_eq!(config, LocalBashConfig::default());
        assert_eq!(config.timeout_ms, 120_000.0);
        assert_eq!(config.max_timeout_ms, 600_000.0);
        assert_eq!(config.max_output_bytes, 64_000.0);
        assert_eq!(config.max_spill_bytes, 67_108_864.0);
        assert_eq!(config.grace_ms, 3000.0);
        assert_eq!(config.cwd, None);
    }

    fn serde_json_from(text: &str) -> LocalBashConfig {
        serde_json::from_str(text).expect("valid config")
    }

    #[test]
    fn keys_are_camel_case_and_unknown_keys_are_refused() {
        let config = serde_json_from(
            r#"{"cwd":"/w","timeoutMs":1,"maxTimeoutMs":2,"maxOutputBytes":3,"maxSpillBytes":4,"graceMs":5}"#,
        );
        assert_eq!(config.cwd, Some(PathBuf::from("/w")));
        assert_eq!(
            (
                config.timeout_ms,
                config.max_timeout_ms,
                config.max_output_bytes,
                config.max_spill_bytes,
                config.grace_ms
            ),
            (1.0, 2.0, 3.0, 4.0, 5.0)
        );
        let err = serde_json::from_str::<LocalBashConfig>(r#"{"timeout":1}"#).expect_err("unknown key");
        assert!(err.to_string().starts_with("unknown field `timeout`"), "{err}");
    }

    #[test]
    fn ex_02_construction_validation() {
        type Mutation = fn(&mut LocalBashConfig);
        let cases: [(Mutation, &str); 6] = [
            (|c| c.timeout_ms = f64::NAN, "bash-local: timeoutMs must be a positive finite number"),
            (|c| c.max_timeout_ms = 0.0, "bash-local: maxTimeoutMs must be a positive finite number"),
            (|c| c.max_output_bytes = -1.0, "bash-local: maxOutputBytes must be a positive finite number"),
            (|c| c.max_spill_bytes = 0.0, "bash-local: maxSpillBytes must be a positive finite number"),
            (|c| c.grace_ms = 0.0, "bash-local: graceMs must be a positive finite number"),
            (|c| c.grace_ms = 2_147_483_648.0, "bash-local: graceMs must be no greater than 2147483647"),
        ];
        for (mutate, message) in cases {
            let mut config = LocalBashConfig::default();
            mutate(&mut config);
            assert_eq!(config.validate().map_err(|e| e.to_string()), Err(message.to_owned()));
        }
        let config = LocalBashConfig { grace_ms: 2_147_483_647.0, ..LocalBashConfig::default() };
        assert_eq!(config.validate(), Ok(()));
    }
}
