//! `sandbox-local` configuration and its load-time validation (exact messages, pinned by tests).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::runner::RunnerKind;

/// Configuration of the local sandbox provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalSandboxConfig {
    /// A runner argv that bypasses selection and probing; the bubblewrap profile, `--` and
    /// the command are appended to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runner_command: Vec<String>,
    /// Stderr substrings by which the `runnerCommand` runner announces its own failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runner_failure_signatures: Vec<String>,
    /// Bound of each runner probe, in milliseconds.
    #[serde(default = "default_probe_timeout_ms")]
    pub probe_timeout_ms: f64,
    /// The runner chain, tried in order; the first usable runner confines every command.
    #[serde(default = "default_runners")]
    pub runners: Vec<RunnerKind>,
    /// Files and directories a confined command must not read (a host's own secrets, such as
    /// the HTTP server's token file): covered like the [`denyRead`](Self::deny_read) paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub masked_paths: Vec<std::path::PathBuf>,
    /// Further files and directories a confined command must not read, besides
    /// [`DEFAULT_DENY_READ`] under the harness's `$HOME` and the harness's session logs: each
    /// existing one is covered, in the command's world, by an empty file or directory of
    /// mode `000`, so reading it fails with `Permission denied`. A leading `~/` is the
    /// harness's `$HOME`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_read: Vec<std::path::PathBuf>,
    /// Paths relative to each writable root that stay read-only inside it (files other
    /// programs run or trust later, such as `.git/hooks`); default [`DEFAULT_PROTECTED_PATHS`].
    #[serde(default = "default_protected_paths")]
    pub protected_paths: Vec<String>,
    /// Whether `workspace-write` commands get toolchain caches of their own (default on):
    /// a cache root they may write, which npm, yarn, pip, uv, cargo and go are pointed at
    /// through their documented variables ([`dsh_sandbox::TOOLCHAIN_CACHE_VARIABLES`]), so
    /// that installs and builds work without opening the user's own caches.
    #[serde(default = "default_toolchain_caches")]
    pub toolchain_caches: bool,
    /// The cache root of [`toolchainCaches`](Self::toolchain_caches); default
    /// `<DSH_HOME>/sandbox-cache`. A leading `~/` is the harness's `$HOME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_root: Option<std::path::PathBuf>,
}

fn default_toolchain_caches() -> bool {
    true
}

/// Paths under the harness's `$HOME` a confined command may not read (credentials of ssh, gpg,
/// cloud and container tools, git hosts and package registries); missing ones are skipped.
pub const DEFAULT_DENY_READ: [&str; 14] = [
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials.toml",
    ".cargo/credentials",
];

/// Paths inside a writable root that a confined command may not change: each is code or
/// configuration that another program runs or trusts later, outside the sandbox. The git
/// config is not among them: git rewrites it for everyday work (`git remote add`,
/// `git branch -u`), and its code-running keys are auto-run surfaces, quarantined after the
/// call that set them.
pub const DEFAULT_PROTECTED_PATHS: [&str; 23] = [
    ".git/hooks",
    ".git/info/attributes",
    ".gitmodules",
    ".gitconfig",
    ".envrc",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".ripgreprc",
    ".mcp.json",
    ".vscode",
    ".idea",
    ".claude/commands",
    ".claude/agents",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".codex",
    ".cursor",
];

fn default_protected_paths() -> Vec<String> {
    DEFAULT_PROTECTED_PATHS.map(str::to_owned).to_vec()
}

fn default_probe_timeout_ms() -> f64 {
    5000.0
}

fn default_runners() -> Vec<RunnerKind> {
    vec![RunnerKind::Landlock, RunnerKind::Bwrap]
}

impl Default for LocalSandboxConfig {
    fn default() -> Self {
        Self {
            runner_command: Vec::new(),
            runner_failure_signatures: Vec::new(),
            probe_timeout_ms: default_probe_timeout_ms(),
            runners: default_runners(),
            masked_paths: Vec::new(),
            deny_read: Vec::new(),
            protected_paths: default_protected_paths(),
            toolchain_caches: default_toolchain_caches(),
            cache_root: None,
        }
    }
}

/// A configuration the provider refuses to load.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `runnerFailureSignatures` is set without a `runnerCommand`.
    #[error("sandbox-local: runnerFailureSignatures requires runnerCommand")]
    SignaturesWithoutRunnerCommand,
    /// `runnerCommand` is set without any `runnerFailureSignatures` entry.
    #[error("sandbox-local: runnerCommand requires at least one runnerFailureSignatures entry")]
    RunnerCommandWithoutSignatures,
    /// A `runnerFailureSignatures` entry is empty or spans several lines.
    #[error("sandbox-local: runnerFailureSignatures entries must be non-empty single-line strings")]
    BadSignature,
    /// `probeTimeoutMs` is zero, negative or not finite.
    #[error("sandbox-local: probeTimeoutMs must be a positive finite number")]
    BadProbeTimeout,
    /// `runners` is empty.
    #[error("sandbox-local: runners must name at least one runner")]
    NoRunners,
    /// `runners` names the same runner twice.
    #[error("sandbox-local: runners must not name a runner twice")]
    RepeatedRunner,
}

impl LocalSandboxConfig {
    /// Checks every rule: `runnerCommand` and `runnerFailureSignatures` go together,
    /// signatures are single non-blank lines, the probe timeout is positive and finite, and
    /// `runners` is non-empty without repeats. The first broken rule wins.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let has_command = !self.runner_command.is_empty();
        let has_signatures = !self.runner_failure_signatures.is_empty();
        if has_signatures && !has_command {
            return Err(ConfigError::SignaturesWithoutRunnerCommand);
        }
        if has_command && !has_signatures {
            return Err(ConfigError::RunnerCommandWithoutSignatures);
        }
        if self
            .runner_failure_signatures
            .iter()
            .any(|s| s.trim().is_empty() || s.contains('\n') || s.contains('\r'))
        {
            return Err(ConfigError::BadSignature);
        }
        if !(self.probe_timeout_ms.is_finite() && self.probe_timeout_ms > 0.0) {
            return Err(ConfigError::BadProbeTimeout);
        }
        if self.runners.is_empty() {
            return Err(ConfigError::NoRunners);
        }
        for (i, runner) in self.runners.iter().enumerate() {
            if self.runners[..i].contains(runner) {
                return Err(ConfigError::RepeatedRunner);
            }
        }
        Ok(())
    }

    /// Every path a confined command must not read, as spelled (existing or not): the
    /// [`DEFAULT_DENY_READ`] entries under the harness's `$HOME`, the harness's session logs
    /// (`<DSH_HOME>/sessions`: other sessions' transcripts), the MCP servers' generated bearer
    /// tokens (`<DSH_HOME>/mcp`), quarantined auto-run files (`<DSH_HOME>/quarantine`), the
    /// audit log (`<DSH_HOME>/audit.jsonl` or `DSH_AUDIT_LOG`), the user's approval policy
    /// file (`<DSH_HOME>/policy.toml`), then `denyRead` (`~/` expanded) and `maskedPaths`.
    /// Read from the environment on each call.
    pub fn denied_reads(&self) -> Vec<std::path::PathBuf> {
        let home = dsh_core::home::user_home();
        let dsh_home = std::env::var("DSH_HOME").ok();
        let mut paths: Vec<std::path::PathBuf> = DEFAULT_DENY_READ.iter().map(|rel| home.join(rel)).collect();
        let dsh_home = dsh_core::home::resolve_dsh_home(None, dsh_home.as_deref());
        paths.push(dsh_home.join("sessions"));
        paths.push(dsh_home.join("mcp"));
        paths.push(dsh_home.join("quarantine"));
        // The audit log: every session's commands and decisions.
        paths.extend(dsh_core::audit::audit_log_path());
        // The user's approval policy file: a command that could write it could grant itself.
        paths.push(dsh_home.join("policy.toml"));
        for path in &self.deny_read {
            paths.push(match path.strip_prefix("~") {
                Ok(rest) => home.join(rest),
                Err(_) => path.clone(),
            });
        }
        paths.extend(self.masked_paths.iter().cloned());
        paths
    }

    /// The toolchain caches of `workspace-write` commands, when they are on: below
    /// `cacheRoot` (`~/` expanded), else `<DSH_HOME>/sandbox-cache` (read from the
    /// environment on each call, like [`LocalSandboxConfig::denied_reads`]).
    pub fn toolchain_caches(&self) -> Option<dsh_sandbox::ToolchainCaches> {
        if !self.toolchain_caches {
            return None;
        }
        let root = match &self.cache_root {
            Some(root) => match root.strip_prefix("~") {
                Ok(rest) => dsh_core::home::user_home().join(rest),
                Err(_) => dsh_core::home::absolutize(root),
            },
            None => {
                let dsh_home = std::env::var("DSH_HOME").ok();
                dsh_core::home::resolve_dsh_home(None, dsh_home.as_deref()).join("sandbox-cache")
            }
        };
        Some(dsh_sandbox::ToolchainCaches::new(root))
    }

    /// The probe bound as a duration (saturating for absurdly large values).
    pub fn probe_timeout(&self) -> Duration {
        Duration::try_from_secs_f64(self.probe_timeout_ms / 1000.0).unwrap_or(Duration::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut LocalSandboxConfig)) -> Result<(), String> {
        let mut config = LocalSandboxConfig::default();
        f(&mut config);
        config.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn sb_19_validation_messages() {
        assert_eq!(with(|_| {}), Ok(()));
        assert_eq!(
            with(|c| c.runner_command = vec!["fake-runner".into()]),
            Err("sandbox-local: runnerCommand requires at least one runnerFailureSignatures entry".into())
        );
        assert_eq!(
            with(|c| c.runner_failure_signatures = vec!["fake-runner: ".into()]),
            Err("sandbox-local: runnerFailureSignatures requires runnerCommand".into())
        );
        for bad in ["  ", "a\nb", "a\rb", ""] {
            assert_eq!(
                with(|c| {
                    c.runner_command = vec!["fake-runner".into()];
                    c.runner_failure_signatures = vec!["ok".into(), bad.into()];
                }),
                Err("sandbox-local: runnerFailureSignatures entries must be non-empty single-line strings"
                    .into()),
                "{bad:?}"
            );
        }
        for bad in [0.0, -1.0, f64::INFINITY, f64::NAN] {
            assert_eq!(
                with(|c| c.probe_timeout_ms = bad),
                Err("sandbox-local: probeTimeoutMs must be a positive finite number".into())
            );
        }
        assert_eq!(with(|c| c.probe_timeout_ms = 0.5), Ok(()));
    }

    #[test]
    fn runners_must_be_a_non_empty_set() {
        assert_eq!(
            with(|c| c.runners.clear()),
            Err("sandbox-local: runners must name at least one runner".into())
        );
        assert_eq!(
            with(|c| c.runners = vec![RunnerKind::Bwrap, RunnerKind::Bwrap]),
            Err("sandbox-local: runners must not name a runner twice".into())
        );
    }

    #[test]
    fn deserializes_camel_case_with_defaults_and_rejects_unknown_keys() {
        let config: LocalSandboxConfig = serde_json::from_value(serde_json::json!({
            "runnerCommand": ["fake-runner", "--flag"],
            "runnerFailureSignatures": ["fake-runner: profile rejected"],
            "runners": ["bwrap"]
        }))
        .unwrap();
        assert_eq!(config.probe_timeout_ms, 5000.0);
        assert_eq!(config.runners, vec![RunnerKind::Bwrap]);
        assert_eq!(config.runner_command, vec!["fake-runner".to_owned(), "--flag".to_owned()]);
        let defaults: LocalSandboxConfig = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(defaults, LocalSandboxConfig::default());
        assert_eq!(defaults.runners, vec![RunnerKind::Landlock, RunnerKind::Bwrap]);
        let unknown = serde_json::from_value::<LocalSandboxConfig>(serde_json::json!({"probeTimeout": 1}));
        assert!(unknown.unwrap_err().to_string().contains("unknown field `probeTimeout`"));
        let bad_runner =
            serde_json::from_value::<LocalSandboxConfig>(serde_json::json!({"runners": ["seatbelt"]}));
        assert!(bad_runner.unwrap_err().to_string().contains("unknown variant `seatbelt`"));
    }

    #[test]
    fn denied_reads_cover_the_defaults_the_session_logs_and_the_configured_paths() {
        let config: LocalSandboxConfig = serde_json::from_value(serde_json::json!({
            "denyRead": ["~/.secrets", "/srv/keys", "~"],
            "maskedPaths": ["/srv/token"]
        }))
        .unwrap();
        let home = dsh_core::home::user_home();
        let denied = config.denied_reads();
        assert_eq!(denied[0], home.join(".ssh"));
        assert!(denied.contains(&home.join(".cargo/credentials.toml")));
        let dsh_home = std::env::var("DSH_HOME").ok();
        let dsh_home = dsh_core::home::resolve_dsh_home(None, dsh_home.as_deref());
        assert_eq!(denied[DEFAULT_DENY_READ.len()], dsh_home.join("sessions"));
        assert_eq!(denied[DEFAULT_DENY_READ.len() + 1], dsh_home.join("mcp"));
        assert_eq!(denied[DEFAULT_DENY_READ.len() + 2], dsh_home.join("quarantine"));
        assert_eq!(Some(&denied[DEFAULT_DENY_READ.len() + 3]), dsh_core::audit::audit_log_path().as_ref());
        assert_eq!(denied[DEFAULT_DENY_READ.len() + 4], dsh_home.join("policy.toml"));
        assert_eq!(
            &denied[DEFAULT_DENY_READ.len() + 5..],
            [home.join(".secrets"), "/srv/keys".into(), home.clone(), "/srv/token".into()]
        );
    }

    #[test]
    fn json_schema_names_the_wire_keys() {
        let schema = serde_json::to_value(schemars::schema_for!(LocalSandboxConfig)).unwrap();
        let mut keys: Vec<&str> =
            schema["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "cacheRoot",
                "denyRead",
                "maskedPaths",
                "probeTimeoutMs",
                "protectedPaths",
                "runnerCommand",
                "runnerFailureSignatures",
                "runners",
                "toolchainCaches"
            ]
        );
        assert_eq!(schema["additionalProperties"], serde_json::json!(false));
    }
}
