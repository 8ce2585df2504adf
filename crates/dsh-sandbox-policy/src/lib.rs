//! The sandbox policy service (a **provider** of `sandboxPolicy`).
//!
//! Resolves, per call, the standing sandbox mode of a session — an approved one-shot mode, else
//! the session's last `sandbox/mode` event, else the deployment default — and the canonical
//! workspace root, pinned once per session (a root that moved or was replaced since fails
//! closed). It contributes the `sandbox:policy` runtime context. It knows nothing about
//! executors, runners or the bash tool.

#![deny(missing_docs)]

mod pin;
mod service;

pub use pin::{MOVED_ROOT_PREFIX, moved_root};
pub use service::{
    LocalSandboxPolicy, SandboxPolicyConfig, SandboxPolicyPlugin, SandboxPolicySettings, canonical_root,
};
