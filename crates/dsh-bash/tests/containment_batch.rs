//! Containment end to end through the binary: `dsh-bash batch` reaching EOF with a job
//! running leaves nothing behind, whatever the job started; `doctor` names the mechanism.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_test_support::escape;

fn dsh_bash(home: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-bash"));
    command.env("DSH_HOME", home.join("home")).env_remove("DSH_MCP_TOKEN").current_dir(home);
    command
}

#[test]
fn containment_batch_eof_with_a_running_job_leaves_no_escapee() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = escape::marker();
    let line = serde_json::json!({
        "tool": "bash",
        "session": "s1",
        "id": 1,
        "args": {
            "command": escape::script(&marker, "echo armed; sleep 1000"),
            "description": "d",
            "run_in_background": true
        }
    });
    let mut child = dsh_bash(dir.path())
        .arg("batch")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dsh-bash");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{line}").expect("write");
    stdin.flush().expect("flush");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut response = String::new();
    stdout.read_line(&mut response).expect("read");
    let response: serde_json::Value = serde_json::from_str(&response).expect("json");
    assert_eq!(response["content"][0]["text"], serde_json::json!("started background job bash-1"));

    let deadline = Instant::now() + Duration::from_secs(20);
    while escape::survivors(&marker).len() < escape::CASES {
        assert!(Instant::now() < deadline, "the escapes never all started");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(stdin);
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status:?}");
    // The binary has exited: whatever is left now was leaked.
    let alive = escape::survivors(&marker);
    let names = escape::names(&alive);
    escape::kill_all(&alive);
    assert_eq!(names, Vec::<String>::new());
}

#[test]
fn containment_doctor_names_the_mechanism() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dsh_bash(dir.path()).arg("doctor").output().expect("doctor");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        stdout.contains(
            "\ncontainment: subreaper (stray descendants are adopted and killed; opt out with DSH_DETACH=1 and setsid)\n"
        ),
        "{stdout}"
    );
}
