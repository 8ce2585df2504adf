//! Test helpers shared by the workspace's crates (for tests and benchmarks, never published).
//!
//! - [`escape`]: the process-escape matrix of the containment tests;
//! - [`sandbox`]: skip-or-fail for tests that need a sandbox runner ([`require_runner!`],
//!   [`sandbox::require_sandbox`]);
//! - [`eventually`]: polling for a condition another task makes true;
//! - [`mcp_e2e`]: the runner of the Python MCP end-to-end suite;
//! - `http` (feature `http`): a minimal HTTP/1.1 client for `dsh-bash mcp --http`;
//! - `json` (feature `json`): arbitrary JSON arguments and JavaScript number texts;
//! - `fakes` and `compose` (feature `core`): stand-in tools and the usual composition;
//! - `fake_provider` (feature `sandbox`): a pass-through sandbox provider.

pub mod escape;
pub mod mcp_e2e;
pub mod sandbox;

#[cfg(feature = "core")]
pub mod compose;
#[cfg(feature = "sandbox")]
pub mod fake_provider;
#[cfg(feature = "core")]
pub mod fakes;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "json")]
pub mod json;

use std::time::Duration;

/// How long [`eventually`] polls before it fails.
pub const EVENTUALLY: Duration = Duration::from_secs(20);

/// Polls `cond` every 10 ms until it holds; fails naming `what` after [`EVENTUALLY`] (for
/// conditions another task makes true, with no event to await).
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
