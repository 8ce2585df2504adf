//! Input to running jobs (`--interactive`): a background job blocked reading its stdin shows
//! `[status: waiting for input]` — from the kernel's account of what it is doing, so a job
//! that sleeps or reads a pipe from another process is never reported waiting — and its owner
//! answers it with `job_input` (text, named keys, end of input), confined or not.

use std::io::Write;
use std::process::Stdio;

use serde_json::{Value, json};

use super::cell::{Mode, World};
use super::matrix::{Skip, over_matrix};

/// Runs `lines` (`(session, tool, args)`) through one `batch` under `mode` with `--interactive`;
/// returns each answer's text, by line.
fn batch(world: &World, mode: Mode, lines: &[(&str, &str, Value)]) -> Vec<String> {
    let mut input = String::new();
    for (id, (session, tool, args)) in lines.iter().enumerate() {
        let line = json!({"tool": tool, "args": args, "session": session, "cwd": world.ws, "id": id});
        input.push_str(&format!("{line}\n"));
    }
    let args: Vec<String> = ["--sandbox", mode.name(), "--interactive", "batch"].map(str::to_owned).to_vec();
    let mut child = world.dsh(&args).stdin(Stdio::piped()).spawn().expect("spawn dsh-bash batch");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write batch");
    let output = child.wait_with_output().expect("wait for dsh-bash batch");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let texts: Vec<String> = stdout
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).expect("a JSON response line");
            value["content"][0]["text"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(texts.len(), lines.len(), "batch answered {stdout:?} ({:?})", output.status);
    texts
}

fn background(command: &str) -> Value {
    json!({"command": command, "description": "d", "run_in_background": true})
}

fn attack(world: &World, mode: Mode) {
    let lines = [
        ("s1", "bash", background("python3 -c 'x = input(\"name? \"); print(\"hi\", x)'")),
        ("s1", "bash", background("read -p 'continue? ' x; echo got $x")),
        ("s1", "bash", background("sleep 30")),
        ("s1", "bash", background("sleep 30 | cat")),
        ("s1", "bash", background("cat; echo cat-ended")),
        ("s1", "bash", background("while true; do sleep 0.1; done")),
        // Within a second of the prompts.
        ("s1", "bash", json!({"command": "sleep 0.5", "description": "d"})),
        ("s1", "job_list", json!({})),
        ("s1", "job_output", json!({"job_id": "bash-1"})),
        ("s1", "job_input", json!({"job_id": "bash-1", "text": "yes\n"})),
        ("s1", "job_input", json!({"job_id": "bash-2", "text": "ok", "keys": ["Enter"]})),
        ("s2", "job_input", json!({"job_id": "bash-3", "text": "x\n"})),
        ("s1", "job_input", json!({"job_id": "bash-5", "text": "line\n", "keys": ["Ctrl-D"]})),
        ("s1", "job_input", json!({"job_id": "bash-6", "keys": ["Ctrl-C"]})),
        ("s1", "job_input", json!({"job_id": "bash-3", "keys": ["F13"]})),
        ("s1", "job_list", json!({})),
        ("s1", "job_kill", json!({"job_id": "bash-3"})),
        ("s1", "job_kill", json!({"job_id": "bash-4"})),
    ];
    let texts = batch(world, mode, &lines);
    let list = &texts[7];
    for (job, status) in [
        ("bash-1", "waiting for input"),
        ("bash-2", "waiting for input"),
        ("bash-3", "running"),
        ("bash-4", "running"),
    ] {
        assert!(list.lines().any(|l| l.starts_with(&format!("{job} [bash] {status} — "))), "{job}: {list}");
    }
    assert_eq!(texts[8], "name? \n[status: waiting for input]");
    assert_eq!(texts[9], "hi yes\n[status: completed, exit code: 0]");
    assert_eq!(texts[10], "got ok\n[status: completed, exit code: 0]");
    assert_eq!(texts[11], "Error: job bash-3 belongs to another session");
    assert_eq!(texts[12], "line\ncat-ended\n[status: completed, exit code: 0]");
    assert!(!texts[13].contains("[status: running]"), "Ctrl-C ended the loop: {}", texts[13]);
    assert_eq!(
        texts[14],
        "Error: unknown key \"F13\": expected one of Enter, Tab, Escape, Backspace, Up, Down, Left, Right, Ctrl-C, Ctrl-D"
    );
    assert!(texts[15].contains("bash-3 [bash] running — sleep 30"), "{}", texts[15]);
}

#[test]
fn background_jobs_waiting_for_input_are_seen_and_answered() {
    over_matrix("background_jobs_waiting_for_input_are_seen_and_answered", |world| {
        world.require("python3")?;
        attack(world, Mode::WorkspaceWrite);
        attack(world, Mode::DangerFullAccess);
        Ok::<(), Skip>(())
    });
}

#[test]
fn job_input_exists_only_with_interactive() {
    use crate::harness::run;
    let plain = run(&["schema"]);
    assert!(!plain.stdout.contains("\"job_input\""), "{plain:?}");
    let interactive = run(&["--interactive", "schema"]);
    assert!(interactive.stdout.contains("\"job_input\""), "{interactive:?}");
    assert!(interactive.stdout.contains("\"close_stdin\""), "{interactive:?}");
}
