//! The Python end-to-end suite of `dsh-mcp` (the independent `mcp` client over stdio and
//! streamable HTTP: tools, foreground, background + `job_output` wait, notices, cancellation,
//! progress, elicited escalation, tokens, malformed requests, teardown) run against the
//! built `dsh-bash mcp`, the server users start. Skips with a printed reason when python3 or
//! the `mcp` package cannot be had (`.ci/run` provides both).

use dsh_test_support::mcp_e2e::run_suite;

#[test]
fn python_mcp_client_against_dsh_bash_mcp() {
    let home = tempfile::tempdir().expect("DSH_HOME");
    let server = format!("{} mcp", env!("CARGO_BIN_EXE_dsh-bash"));
    run_suite(&server, "dsh-bash mcp e2e", &[("DSH_HOME", home.path())]);
}
