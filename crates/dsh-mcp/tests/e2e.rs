//! Runs the Python end-to-end tests (`tests/e2e/test_*.py`, the independent `mcp` client, in
//! both revisions) and the TypeScript ones (`tests/e2e-ts/e2e.mjs`, the `@modelcontextprotocol`
//! SDK clients) against the `mcp_stdio` example server, or the server named by
//! `DSH_MCP_SERVER`. Skips with a printed reason when python3, node or the client packages
//! cannot be had, except under `CI=true`, where that fails.

use std::path::PathBuf;

use dsh_test_support::mcp_e2e::{run_suite, run_ts_suite};

/// `target/<profile>/examples/mcp_stdio`, next to this test's own `deps/` directory
/// (`cargo test` builds the examples before it runs tests).
fn example_server() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    profile_dir.join("examples").join("mcp_stdio")
}

/// The server the suites drive.
fn server() -> String {
    match std::env::var("DSH_MCP_SERVER") {
        Ok(server) => server,
        Err(_) => {
            let example = example_server();
            assert!(
                example.exists(),
                "{} is missing: build it with `cargo build -p dsh-mcp --example mcp_stdio` (plain `cargo test` does)",
                example.display()
            );
            example.display().to_string()
        }
    }
}

#[test]
fn python_mcp_client_end_to_end() {
    run_suite(&server(), "dsh-mcp e2e", &[]);
}

#[test]
fn typescript_mcp_clients_end_to_end() {
    run_ts_suite(&server(), "dsh-mcp TypeScript e2e", &[]);
}
