//! The sandbox policy service (a **provider** of `sandboxPolicy`).
//!
//! Resolves, per call, the standing sandbox mode of a session — an approved one-shot mode, else
//! the session's last `sandbox/mode` event, else the deployment default — and the canonical
//! workspace root. It contributes the `sandbox:policy` runtime context. It knows nothing about
//! executors, runners or the bash tool.

mod service;

pub use service::{LocalSandboxPolicy, SandboxPolicyConfig, SandboxPolicyPlugin, canonical_root};
