//! The shell executor seam (a **definition** crate).
//!
//! Defines what a bash executor is ([`ShellExecutor`]) and the values that cross it:
//! [`ShellExecRequest`] → [`ShellExecSpec`] → [`ShellRunResult`] for foreground runs and
//! [`ShellProcess`] for background handles; the shared exit-marker parser
//! [`parse_exit_status`]; and the managed `DSH_*` environment registry
//! ([`ShellEnvRegistry`], service `shellEnv`) with its plugin. It does not know how processes
//! are spawned (that is a provider's job) nor who calls it (the bash tool, a host).

#![deny(missing_docs)]

mod env;
mod env_plugin;
mod exec;
mod exit_status;
pub mod services;

pub use env::{
    DSH_HOME, DSH_SESSION_ID, DSH_SHELL, EnvResolver, RESERVED_KEYS, SHELL_ENV, ShellEnvContributor,
    ShellEnvError, ShellEnvRegistry, ShellEnvVariable,
};
pub use env_plugin::{
    DSH_SESSION_JSONL, SESSION_JSONL_DESCRIPTION, SESSION_PERSISTENCE_CONTRIBUTOR, ShellEnvConfig,
    ShellEnvPlugin, session_persistence_contributor,
};
pub use exec::{
    CollectedOutput, NetworkApproverSlot, ProcessIdentity, ProcessStatus, SHELL, SHELL_SERVICE, SharedFile,
    ShellError, ShellExecRequest, ShellExecSpec, ShellExecutor, ShellProcess, ShellProcessRead,
    ShellRunResult, ShellSandboxInfo, ShellTimeout, ShellUsage, SpillObserver,
};
pub use exit_status::{ExitStatus, parse_exit_status};

/// Every managed variable starts with this prefix; inherited ones are scrubbed.
pub const DSH_ENV_PREFIX: &str = "DSH_";
