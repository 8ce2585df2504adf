//! The local bash executor (a **provider** of the `shell` seam).
//!
//! [`LocalBashExecutor`] implements [`dsh_shell::ShellExecutor`] by running `bash -c` through
//! the shared [`dsh_subprocess::SubprocessService`]: `resolve` applies the configured defaults
//! and caps, `run` races one fused deadline against the caller's signal and reports the first
//! cause, `start` returns a [`LocalShellProcess`] whose consuming reads merge stdout and
//! stderr. The argv-level entry points ([`LocalBashExecutor::run_argv`],
//! [`LocalBashExecutor::start_argv`]) let a sandboxing executor reuse all of it with a wrapped
//! argv, a pre-exec hook and a settlement hook.
//!
//! It knows nothing about the bash tool, jobs, rendering, or how a sandbox confines.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod config;
mod error;
mod executor;
mod mapping;
mod plugin;
mod process;
mod resolve;

pub use config::{ConfigError, LocalBashConfig, byte_cap, memory_cap};
pub use error::{ExecError, shell_spawn_error};
pub use executor::{BASH_TIMEOUT, LocalBashExecutor};
pub use mapping::{ENV_OVERRIDES, bash_argv, grace_duration, spill_owner};
pub use plugin::BashLocalPlugin;
pub use process::{LocalShellProcess, ReadCursor, ReleasedOutput, SettleFacts, SettleHook};
pub use resolve::resolve;
