//! Runs `crates/dsh-mcp/tests/e2e/run.sh` (the Python `mcp` client suite) or
//! `crates/dsh-mcp/tests/e2e-ts/run.sh` (the TypeScript SDK clients) against one server
//! command and reports what it printed. Shared by the `dsh-mcp` e2e test (the `mcp_stdio`
//! example) and the `dsh-bash` one (the built `dsh-bash mcp`), so both judge a run the same way.

use std::io::Write;
use std::path::Path;
use std::process::Command;

/// Exit status of `run.sh` when it skips.
const SKIPPED: i32 = 77;

/// Runs the suite against `server` (a shell word list) with `envs` added; panics when a test
/// fails, prints the reason when the suite skips (python3 or the `mcp` package missing).
pub fn run_suite(server: &str, label: &str, envs: &[(&str, &Path)]) {
    run_script("e2e", server, label, envs);
}

/// Runs the TypeScript SDK clients' suite against `server` as [`run_suite`] runs the Python one.
pub fn run_ts_suite(server: &str, label: &str, envs: &[(&str, &Path)]) {
    run_script("e2e-ts", server, label, envs);
}

/// Runs `crates/dsh-mcp/tests/<dir>/run.sh` against `server`.
fn run_script(dir: &str, server: &str, label: &str, envs: &[(&str, &Path)]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../dsh-mcp/tests/{dir}/run.sh"));
    let mut command = Command::new("bash");
    command.arg(&script).env("DSH_MCP_SERVER", server).env_remove("DSH_MCP_TOKEN");
    for (name, value) in envs {
        command.env(name, value);
    }
    let output = command.output().expect("bash runs the e2e script");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Written past the test harness's output capture, so a skip is always visible.
    let say = |text: &str| {
        let _ = writeln!(std::io::stderr(), "{label}: {text}");
    };
    match output.status.code() {
        Some(0) => {
            for line in stdout
                .lines()
                .filter(|l| l.starts_with("PASS") || l.starts_with("SKIP") || l.contains(" passed, "))
            {
                say(line);
            }
            assert!(!stdout.contains("FAIL"), "{stdout}");
        }
        Some(SKIPPED) => say(&format!("skipped: {}", stdout.trim())),
        status => panic!("the e2e tests failed ({status:?}) against {server}\n{stdout}\n{stderr}"),
    }
}
