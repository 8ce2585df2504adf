//! The local sandbox provider (a **provider** of the `sandbox` seam).
//!
//! Confines an argv for `read-only` or `workspace-write` with the first usable runner of a
//! configurable chain — in-process Landlock with a private read-only mount namespace first
//! (no launcher exec), then bubblewrap — or fails closed with `SandboxUnavailableError`. The
//! verdict is computed on the first confined wrap and cached. A configured `runnerCommand`
//! bypasses selection. It knows nothing of bash, the executor that spawns the confined
//! command, sessions or hosts.

#[cfg(not(target_os = "linux"))]
compile_error!("dsh-sandbox-local supports Linux only (Landlock and bubblewrap runners)");

mod config;
mod inprocess;
mod probe;
mod provider;
mod runner;

pub use config::{ConfigError, LocalSandboxConfig};
pub use inprocess::InProcessConfinement;
pub use probe::SystemProber;
pub use provider::{LocalSandboxProvider, PROVIDER_NAME};
pub use runner::{
    BWRAP_DENIAL_SIGNATURES, BWRAP_FATAL_SIGNATURE, LANDLOCK_FAILURE_EXIT_CODE, LANDLOCK_FATAL_SIGNATURE,
    LANDLOCK_PARTIAL_NOTICE, ProbeOutcome, RUNNER_COMMAND_DENIAL_SIGNATURES, RunnerCapability, RunnerKind,
    RunnerProber, bwrap_profile_args, landlock_denial_signatures, landlock_rules,
};
