//! The Python end-to-end suite of `dsh-mcp` (the independent `mcp` client over stdio and
//! streamable HTTP: tools, foreground, background + `job_output` wait, notices, cancellation,
//! progress, elicited escalation, tokens, malformed requests, teardown) run against the
//! built `dsh-bash mcp`, the server users start. Skips with a printed reason when python3 or
//! the `mcp` package cannot be had (`.ci/run` provides both).

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

/// Exit status of `run.sh` when it skips.
const SKIPPED: i32 = 77;

#[test]
fn python_mcp_client_against_dsh_bash_mcp() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dsh-mcp/tests/e2e/run.sh");
    let server = format!("{} mcp", env!("CARGO_BIN_EXE_dsh-bash"));
    let home = tempfile::tempdir().expect("DSH_HOME");
    let output = Command::new("bash")
        .arg(&script)
        .env("DSH_MCP_SERVER", &server)
        .env("DSH_HOME", home.path())
        .env_remove("DSH_MCP_TOKEN")
        .output()
        .expect("bash runs the e2e script");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let mut err = std::io::stderr();
    match output.status.code() {
        Some(0) => {
            for line in stdout.lines().filter(|l| l.contains(" passed, ")) {
                let _ = writeln!(err, "dsh-bash mcp e2e: {line}");
            }
            assert!(!stdout.contains("FAIL"), "{stdout}");
        }
        Some(SKIPPED) => {
            let _ = writeln!(err, "dsh-bash mcp e2e skipped: {}", stdout.trim());
        }
        status => panic!("the e2e tests failed ({status:?}) against {server}\n{stdout}\n{stderr}"),
    }
}
