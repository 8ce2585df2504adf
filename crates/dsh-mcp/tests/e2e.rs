//! Runs the Python end-to-end tests (`tests/e2e/test_*.py`, the independent `mcp` client)
//! against the `mcp_stdio` example server, or the server named by `DSH_MCP_SERVER`. Skips
//! with a printed reason when python3 or the `mcp` package cannot be had.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

/// Exit status of `run.sh` when it skips.
const SKIPPED: i32 = 77;

/// `target/<profile>/examples/mcp_stdio`, next to this test's own `deps/` directory
/// (`cargo test` builds the examples before it runs tests).
fn example_server() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    profile_dir.join("examples").join("mcp_stdio")
}

/// Writes past the test harness's output capture, so a skip is always visible.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
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
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/run.sh");
    let output = Command::new("bash")
        .arg(&script)
        .env("DSH_MCP_SERVER", &server)
        .output()
        .expect("bash runs the e2e script");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    match output.status.code() {
        Some(0) => {
            for line in stdout
                .lines()
                .filter(|l| l.starts_with("PASS") || l.starts_with("SKIP") || l.contains(" passed, "))
            {
                say(&format!("dsh-mcp e2e: {line}"));
            }
        }
        Some(SKIPPED) => say(&format!("dsh-mcp e2e skipped: {}", stdout.trim())),
        status => panic!("the e2e tests failed ({status:?}) against {server}\n{stdout}\n{stderr}"),
    }
}
