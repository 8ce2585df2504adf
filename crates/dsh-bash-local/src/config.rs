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
    /// Processes (threads included) one call may have alive at once; `0`: no limit.
    pub pids_limit: f64,
    /// Memory one call may use: bytes, optionally with `k`, `m` or `g` (`"2g"`), or `"none"`.
    /// Absent: half of the machine's memory, where control groups enforce it (see
    /// [`dsh_subprocess::ResourceLimits`]).
    pub memory: Option<String>,
    /// CPU seconds each process of a call may use (`RLIMIT_CPU`); absent: no limit.
    pub cpu_seconds: Option<f64>,
    /// Whether every foreground result carries what the call used (`usage`: CPU time, peak
    /// memory and processes). Off by default, so a result keeps the contract's canonical
    /// shape; a limit the call reached is reported either way.
    pub report_usage: bool,
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
            pids_limit: DEFAULT_PIDS_LIMIT,
            memory: None,
            cpu_seconds: None,
            report_usage: false,
        }
    }
}

/// Processes one call may have alive at once by default: far above what `make -j`, `cargo
/// build` (threads count) or a test runner's workers reach, far below what hurts a host.
pub const DEFAULT_PIDS_LIMIT: f64 = 4096.0;

pub use dsh_subprocess::parse_size;

/// Half of the machine's memory (`MemTotal`), the default memory limit of a call.
fn half_of_memory() -> Option<u64> {
    static HALF: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *HALF.get_or_init(|| {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024 / 2)
    })
}

/// A configuration value the executor refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A resource limit the executor cannot read (its message says what to write).
    #[error("bash-local: {0}")]
    Limit(&'static str),
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
        if !(self.pids_limit.is_finite() && self.pids_limit >= 0.0 && self.pids_limit.fract() == 0.0) {
            return Err(ConfigError::Limit("pidsLimit must be a whole number of processes (0: no limit)"));
        }
        if let Some(memory) = &self.memory
            && memory != "none"
            && parse_size(memory).is_none()
        {
            return Err(ConfigError::Limit(
                "memory must be a number of bytes, optionally with k, m or g (\"2g\"), or \"none\"",
            ));
        }
        if let Some(seconds) = self.cpu_seconds
            && !(positive_finite(seconds) && seconds.fract() == 0.0)
        {
            return Err(ConfigError::Limit("cpuSeconds must be a positive whole number of seconds"));
        }
        Ok(())
    }

    /// The limits each call runs under (see [`dsh_subprocess::ResourceLimits`]): a memory
    /// limit set here also bounds each process's data segment where no control group can
    /// bound the call; the default one (half of the machine's memory) only the call's group.
    pub fn resource_limits(&self) -> dsh_subprocess::ResourceLimits {
        let memory = match self.memory.as_deref() {
            Some("none") => None,
            Some(size) => parse_size(size),
            None => half_of_memory(),
        };
        dsh_subprocess::ResourceLimits {
            processes: (self.pids_limit >= 1.0).then_some(self.pids_limit as u64),
            memory,
            memory_per_process: self.memory.as_deref().is_some_and(|m| m != "none"),
            cpu_seconds: self.cpu_seconds.map(|s| s as u64),
        }
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
    fn limits_have_safe_defaults_and_are_read_from_the_file() {
        let limits = LocalBashConfig::default().resource_limits();
        assert_eq!(limits.processes, Some(4096));
        assert!(limits.memory.is_some_and(|m| m > 0), "half of the machine's memory");
        assert!(!limits.memory_per_process, "the default memory limit binds only a call's group");
        assert_eq!(limits.cpu_seconds, None);
        let config = serde_json_from(r#"{"pidsLimit":0,"memory":"256m","cpuSeconds":60}"#);
        assert_eq!(config.validate(), Ok(()));
        let limits = config.resource_limits();
        assert_eq!((limits.processes, limits.memory, limits.cpu_seconds), (None, Some(256 << 20), Some(60)));
        assert!(limits.memory_per_process);
        assert_eq!(serde_json_from(r#"{"memory":"none"}"#).resource_limits().memory, None);
        for (bad, message) in [
            (
                r#"{"pidsLimit":1.5}"#,
                "bash-local: pidsLimit must be a whole number of processes (0: no limit)",
            ),
            (
                r#"{"memory":"lots"}"#,
                "bash-local: memory must be a number of bytes, optionally with k, m or g (\"2g\"), or \"none\"",
            ),
            (r#"{"cpuSeconds":0}"#, "bash-local: cpuSeconds must be a positive whole number of seconds"),
        ] {
            assert_eq!(serde_json_from(bad).validate().map_err(|e| e.to_string()), Err(message.to_owned()));
        }
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("512K"), Some(512 << 10));
        assert_eq!(parse_size("0"), None);
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
