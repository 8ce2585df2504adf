//! The local sandbox provider (a **provider** of the `sandbox` seam).
//!
//! Confines an argv for `read-only` or `workspace-write` with the first usable runner of a
//! configurable chain, or fails closed with `SandboxUnavailableError`:
//!
//! * `landlock` (default, first): no launcher is exec'd. The forked child applies Landlock
//!   (read everywhere, write `/dev/null` and the writable roots) inside a read-only mount
//!   namespace where only the writable roots are writable binds, and a root child drops the
//!   capabilities that could undo either. The namespace is built once per policy and joined
//!   by each child. Failures surface as spawn errors whose cause reads `landlock-run: …`.
//! * `bwrap`: bubblewrap with a fixed base profile (read-only `/`, writable roots bound)
//!   plus the same confined world.
//!
//! The verdict is computed on the first confined wrap (a one-runner chain is not probed) and
//! cached; a configured `runnerCommand` bypasses selection. `SandboxProvider::describe`
//! reports what the host offers for a `doctor` command. This crate knows nothing of bash,
//! the executor that spawns the confined command, sessions or hosts.

#![deny(missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!("dsh-sandbox-local supports Linux only (Landlock and bubblewrap runners)");

mod bwrap;
mod config;
mod inprocess;
mod plugin;
mod probe;
mod provider;
mod runner;
#[doc(hidden)]
pub mod seccomp;
mod session_world;

pub use config::{ConfigError, DEFAULT_DENY_READ, DEFAULT_PROTECTED_PATHS, LocalSandboxConfig};
pub use inprocess::InProcessConfinement;
pub use plugin::SandboxLocalPlugin;
pub use probe::SystemProber;
#[doc(hidden)]
pub use probe::run_bounded;
pub use provider::{LocalSandboxProvider, PROVIDER_NAME};
pub use runner::{
    BWRAP_DENIAL_SIGNATURES, BWRAP_FATAL_SIGNATURE, LANDLOCK_FAILURE_EXIT_CODE, LANDLOCK_FATAL_SIGNATURE,
    LANDLOCK_PARTIAL_NOTICE, ProbeOutcome, RUNNER_COMMAND_DENIAL_SIGNATURES, RunnerCapability, RunnerKind,
    RunnerProber, bwrap_profile_args, landlock_denial_signatures, landlock_rules,
};
