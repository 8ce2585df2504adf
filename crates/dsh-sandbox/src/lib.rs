//! Sandbox vocabulary and the provider seam (a **definition** crate).
//!
//! Holds the closed mode vocabulary, the per-call execution policy, the provider trait that
//! turns an argv into a confined launch, and the pure classification and escalation helpers.
//! It knows nothing about how a provider confines (Landlock, bubblewrap) nor about the bash
//! tool or any host.

mod mode;
mod policy;

pub use mode::{SandboxEnforcement, SandboxExecutionPolicy, SandboxMode, SandboxUnavailableError};
pub use policy::{SANDBOX_POLICY, SandboxPolicyService, StandingPolicy};
