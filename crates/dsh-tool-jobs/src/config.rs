//! The job tools' configuration and its load-time checks (exact messages).

use dsh_core::json::{MAX_SAFE_INTEGER, js_number_text};
use schemars::JsonSchema;
use serde::Deserialize;

/// How a completion notice reaches an idle owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionDelivery {
    /// Open a turn for an idle owner (within the wake budget).
    Wakeup,
    /// Always join the next step of a turn, never open one.
    Quiet,
}

/// Config of the job tools.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ToolJobsConfig {
    /// `job_output` wait when `timeout_ms` is absent (ms, ≥ 1).
    pub wait_timeout_ms: f64,
    /// Cap of every `job_output` wait (ms, ≥ 1, ≥ `waitTimeoutMs`).
    pub max_wait_timeout_ms: f64,
    /// `wakeup` (default) or `quiet`.
    pub completion_delivery: String,
    /// Notices that may open a turn in a row before one user message resets the budget.
    pub max_consecutive_wakes: f64,
    /// Advertise `job_output.tail_lines` (off by default, so the default schema is unchanged).
    pub tail_lines: bool,
    /// Register `job_input` and keep background bash jobs' stdin a pipe their owner writes;
    /// a job blocked reading it shows `[status: waiting for input]` (off by default, so the
    /// default tools and schemas are unchanged).
    pub input: bool,
}

impl Default for ToolJobsConfig {
    fn default() -> Self {
        Self {
            wait_timeout_ms: 30_000.0,
            max_wait_timeout_ms: 600_000.0,
            completion_delivery: "wakeup".to_owned(),
            max_consecutive_wakes: 3.0,
            tail_lines: false,
            input: false,
        }
    }
}

/// A `tool-jobs` setting that breaks a rule; each says so with its exact message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ToolJobsConfigError {
    /// A number below 1 (`key`, the value given).
    #[error("tool-jobs: {key} must be at least 1 (got {got})", key = .0, got = js_number_text(*.1))]
    BelowOne(&'static str, f64),
    /// `waitTimeoutMs` above `maxWaitTimeoutMs`.
    #[error("tool-jobs: waitTimeoutMs ({}) exceeds maxWaitTimeoutMs ({})", js_number_text(*.0), js_number_text(*.1))]
    WaitAboveMax(f64, f64),
    /// A fractional or unsafe-integer `maxConsecutiveWakes`.
    #[error("tool-jobs: maxConsecutiveWakes ({}) must be a whole number of turns", js_number_text(*.0))]
    WakesNotWhole(f64),
    /// A `completionDelivery` other than `wakeup` or `quiet` (the value given).
    #[error("tool-jobs: completionDelivery must be \"wakeup\" or \"quiet\" (got {})", serde_json::Value::String(.0.clone()))]
    Delivery(String),
}

impl From<ToolJobsConfigError> for dsh_core::ConfigError {
    fn from(error: ToolJobsConfigError) -> Self {
        dsh_core::ConfigError(error.to_string())
    }
}

fn at_least_one(key: &'static str, value: f64) -> Result<(), ToolJobsConfigError> {
    if value >= 1.0 { Ok(()) } else { Err(ToolJobsConfigError::BelowOne(key, value)) }
}

impl ToolJobsConfig {
    /// Checks every rule, each with its exact message: every value is at least 1, delivery is
    /// `wakeup` or `quiet`, `waitTimeoutMs` ≤ `maxWaitTimeoutMs`, and wakes are a whole number.
    pub fn check(&self) -> Result<(), ToolJobsConfigError> {
        at_least_one("waitTimeoutMs", self.wait_timeout_ms)?;
        at_least_one("maxWaitTimeoutMs", self.max_wait_timeout_ms)?;
        self.delivery()?;
        at_least_one("maxConsecutiveWakes", self.max_consecutive_wakes)?;
        if self.wait_timeout_ms > self.max_wait_timeout_ms {
            return Err(ToolJobsConfigError::WaitAboveMax(self.wait_timeout_ms, self.max_wait_timeout_ms));
        }
        let wakes = self.max_consecutive_wakes;
        if !(wakes.fract() == 0.0 && wakes <= MAX_SAFE_INTEGER) {
            return Err(ToolJobsConfigError::WakesNotWhole(wakes));
        }
        Ok(())
    }

    /// The checked form (every rule of [`Self::check`], with its exact message).
    pub fn checked(self) -> Result<CheckedToolJobsConfig, ToolJobsConfigError> {
        self.check()?;
        Ok(CheckedToolJobsConfig {
            delivery: self.delivery()?,
            // Checked above: a whole number ≥ 1 within the safe-integer range.
            max_consecutive_wakes: self.max_consecutive_wakes as u64,
            config: self,
        })
    }

    /// The parsed delivery mode.
    pub fn delivery(&self) -> Result<CompletionDelivery, ToolJobsConfigError> {
        match self.completion_delivery.as_str() {
            "wakeup" => Ok(CompletionDelivery::Wakeup),
            "quiet" => Ok(CompletionDelivery::Quiet),
            other => Err(ToolJobsConfigError::Delivery(other.to_owned())),
        }
    }
}

/// A [`ToolJobsConfig`] that passed [`ToolJobsConfig::check`], with its parsed values.
#[derive(Clone, Debug)]
pub struct CheckedToolJobsConfig {
    /// The config as given.
    pub config: ToolJobsConfig,
    /// The parsed `completionDelivery`.
    pub delivery: CompletionDelivery,
    /// `maxConsecutiveWakes` as a whole number of turns.
    pub max_consecutive_wakes: u64,
}
