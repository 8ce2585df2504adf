//! Runs the Python end-to-end tests (`tests/e2e/test_*.py`, the independent `mcp` client)
//! against the `mcp_stdio` example server, or the server named by `DSH_MCP_SERVER`. Skips
//! with a printed reason when python3 or the `mcp` package cannot be had.

use std::path::PathBuf;

use dsh_test_support::mcp_e2e::run_suite;

/// `target/<profile>/examples/mcp_stdio`, next to this test's own `deps/` directory
/// (`cargo test` builds the examples before it runs tests).
fn example_server() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    profile_dir.join("examples").join("mcp_stdio")
}

#[test]
fn python_mcp_client_end_to_end() {
    let server = match std::env::var("DSH_MCP_SERVER") {
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
    };
    run_suite(&server, "dsh-mcp e2e", &[]);
}
