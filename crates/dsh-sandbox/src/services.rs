//! This crate's services as types, for plugins' [`dsh_core::Plugin::Deps`].

use std::sync::Arc;

use dsh_core::{Service, ServiceKey};

use crate::confined::{SANDBOX, SandboxProvider};
use crate::policy::{SANDBOX_POLICY, SandboxPolicyService};

/// `sandbox`: the sandbox provider (runner selection and confinement).
pub struct Sandbox;

impl Service for Sandbox {
    const NAME: &'static str = SANDBOX.name();
    type Handle = Arc<dyn SandboxProvider>;
}

/// `sandboxPolicy`: the standing sandbox mode and workspace root of a call.
pub struct SandboxPolicy;

impl Service for SandboxPolicy {
    const NAME: &'static str = SANDBOX_POLICY.name();
    type Handle = Arc<dyn SandboxPolicyService>;
}

// The markers' handles are the keys' value types.
const _: ServiceKey<<Sandbox as Service>::Handle> = SANDBOX;
const _: ServiceKey<<SandboxPolicy as Service>::Handle> = SANDBOX_POLICY;
