//! The sandboxing bash executor (a **provider** of the `shell` seam).
//!
//! [`SandboxBashExecutor`] is the local executor with one difference: unless the call's policy
//! is `danger-full-access`, the command's argv is handed to the mounted sandbox provider
//! (`sandbox`) and the confined argv (plus any in-child confinement) is what runs. Outcomes
//! are classified from the retained stderr tail — a runner failure first (an error:
//! `SANDBOX_UNAVAILABLE`, never an unconfined run), then a denial (a fact on a successful
//! result). Background processes keep their own facts. It knows nothing about how a provider
//! confines, nor about the bash tool or hosts.

#![deny(missing_docs)]

mod executor;
mod plugin;

pub use executor::SandboxBashExecutor;
pub use plugin::BashSandboxPlugin;
