//! Sandbox vocabulary and the provider seam (a **definition** crate).
//!
//! Holds the closed mode vocabulary, the per-call execution policy, the provider trait that
//! turns an argv into a confined launch, and the pure classification and escalation helpers.
//! It knows nothing about how a provider confines (Landlock, bubblewrap) nor about the bash
//! tool or any host.

#![deny(missing_docs)]

mod attribution;
mod caches;
mod classify;
mod confined;
mod escalation;
mod mode;
mod network;
mod policy;
mod report;
pub mod services;
pub mod surfaces;

pub use attribution::{SpawnFailure, SpawnStage, is_runner_spawn_failure};
pub use caches::{TOOLCHAIN_CACHE_VARIABLES, ToolchainCaches, user_cache_of};
pub use classify::{classify_runner_failure, matches_signature};
pub use confined::{
    ChildConfinement, ConfinedCommand, ProxyListener, RunnerFailureRule, SANDBOX, SANDBOX_SERVICE,
    SandboxProvider,
};
pub use escalation::{
    ESCALATION_HINT, ESCALATION_TARGETS, EscalationError, EscalationOutcome, RefusedPath, check_widening,
    denial_marker, escalation_reason, map_escalation_outcome, parse_escalation_outcome, refused_path,
    refused_path_line, runner_failed_marker, wider_modes, writable_roots,
};
pub use mode::{SandboxEnforcement, SandboxExecutionPolicy, SandboxMode, SandboxUnavailableError};
pub use network::{
    CredentialBinding, Credentials, HostAdmission, HostMatch, HostPattern, NetworkApproval,
    NetworkApprovalFuture, NetworkApprover, NetworkFacts, NetworkMode, NetworkPolicy, credential_added_line,
    host_port, is_private_destination, network_denied_line, network_reason, normalize_host,
};
pub use policy::{
    MOVED_ROOT_PREFIX, SANDBOX_POLICY, SandboxPolicyService, StandingPolicy, moved_root, pinned_root_of_moved,
};
pub use report::{ProviderReport, RunnerReport};
pub use surfaces::{Quarantined, Snapshot, Surfaces};
