//! Commands never get the harness's controlling terminal: each starts a session of its own.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::Sandbox;

#[test]
fn a_foreground_prompt_on_dev_tty_fails_at_once_instead_of_waiting_for_its_timeout() {
    let sandbox = Sandbox::new();
    let args =
        json!({"command": "read x < /dev/tty", "description": "Read from the terminal", "timeoutMs": 20000})
            .to_string();
    let started = Instant::now();
    let shown = sandbox.on_terminal(&["call", "-q", "bash", &args], &[]);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}: {shown:?}");
    assert_eq!(
        shown, "[stderr]\r\nbash: line 1: /dev/tty: No such device or address\r\n[exit code: 1]\r\n",
        "the command fails on its own, with no terminal to read"
    );
    assert!(!shown.contains("[timed out"), "{shown:?}");
}

#[test]
fn a_command_on_a_terminal_is_a_session_leader_without_a_terminal() {
    let sandbox = Sandbox::new();
    // Field 6 of /proc/<pid>/stat is the session id, field 7 the controlling terminal.
    let command =
        r#"read -r stat < /proc/$$/stat; set -- ${stat##*) }; [ "$4" = "$$" ] && echo "leader tty=$5""#;
    let args = json!({"command": command, "description": "Show the session"}).to_string();
    assert_eq!(sandbox.on_terminal(&["call", "-q", "bash", &args], &[]), "leader tty=0\r\n");
}
