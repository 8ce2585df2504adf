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
    batch_lines(world, mode, true, lines).into_iter().map(|line| text(&line)).collect()
}

/// Runs `lines` (`(session, tool, args)`) through one `batch` under `mode` (with
/// `--interactive` when `interactive`); returns each response line.
fn batch_lines(world: &World, mode: Mode, interactive: bool, lines: &[(&str, &str, Value)]) -> Vec<Value> {
    let mut input = String::new();
    for (id, (session, tool, args)) in lines.iter().enumerate() {
        let line = json!({"tool": tool, "args": args, "session": session, "cwd": world.ws, "id": id});
        input.push_str(&format!("{line}\n"));
    }
    let mut args: Vec<String> = vec!["--sandbox".to_owned(), mode.name().to_owned()];
    if interactive {
        args.push("--interactive".to_owned());
    }
    args.push("batch".to_owned());
    let mut child = world.dsh(&args).stdin(Stdio::piped()).spawn().expect("spawn dsh-bash batch");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write batch");
    let output = child.wait_with_output().expect("wait for dsh-bash batch");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let responses: Vec<Value> =
        stdout.lines().map(|line| serde_json::from_str(line).expect("a JSON response line")).collect();
    assert_eq!(responses.len(), lines.len(), "batch answered {stdout:?} ({:?})", output.status);
    responses
}

/// A response line's text.
fn text(line: &Value) -> String {
    line["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// The texts of a response line's notices.
fn notices(line: &Value) -> Vec<String> {
    line["notices"]
        .as_array()
        .expect("notices")
        .iter()
        .map(|n| n["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn background(command: &str) -> Value {
    json!({"command": command, "description": "d", "run_in_background": true})
}

fn on_terminal(command: &str) -> Value {
    json!({"command": command, "description": "d", "run_in_background": true, "tty": true})
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
        "Error: unknown key \"F13\": expected one of Enter, Tab, Escape, Backspace, Up, Down, Left, Right, Home, End, Ctrl-A to Ctrl-Z"
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
    assert!(!plain.stdout.contains("\"tty\""), "{plain:?}");
    assert!(interactive.stdout.contains("\"tty\""), "{interactive:?}");
    let no_background = run(&["--interactive", "--no-background", "schema"]);
    assert!(!no_background.stdout.contains("\"tty\""), "tty needs run_in_background: {no_background:?}");
}

/// A REPL and a prompt on a terminal: typed lines are echoed and answered, the REPL sees a
/// terminal, Ctrl-C interrupts what runs (the REPL lives on), Ctrl-D ends it.
fn terminal_attack(world: &World, mode: Mode) {
    let lines = [
        ("s1", "bash", on_terminal("python3 -i -q")),
        ("s1", "bash", on_terminal("read -p 'continue? ' x; echo \"got $x\"")),
        ("s1", "bash", json!({"command": "sleep 1.5", "description": "d"})),
        ("s1", "job_output", json!({"job_id": "bash-1"})),
        ("s1", "job_input", json!({"job_id": "bash-1", "text": "print(6*7)", "keys": ["Enter"]})),
        (
            "s1",
            "job_input",
            json!({"job_id": "bash-1", "text": "import os,sys; print(os.isatty(0), sys.stdin.isatty())", "keys": ["Enter"]}),
        ),
        (
            "s1",
            "job_input",
            json!({"job_id": "bash-1", "text": "while True: pass", "keys": ["Enter", "Enter"]}),
        ),
        ("s1", "job_input", json!({"job_id": "bash-1", "keys": ["Ctrl-C"]})),
        ("s1", "job_input", json!({"job_id": "bash-1", "text": "print('after')", "keys": ["Enter"]})),
        ("s1", "job_input", json!({"job_id": "bash-1", "keys": ["Ctrl-D"]})),
        ("s1", "job_output", json!({"job_id": "bash-2"})),
        ("s1", "job_input", json!({"job_id": "bash-2", "text": "yes", "keys": ["Enter"]})),
        (
            "s1",
            "bash",
            on_terminal(
                "stty size; [ -t 0 ] && [ -t 2 ]; echo \"tty $?\"; printf '\\033[1;31mred\\033[0m\\r\\n'",
            ),
        ),
        ("s1", "job_output", json!({"job_id": "bash-3", "wait": true, "timeout_ms": 20000})),
        ("s1", "bash", json!({"command": "true", "description": "d", "tty": true})),
        // Another session looks for the terminals of running jobs.
        ("s2", "bash", on_terminal("sleep 30")),
        ("s1", "bash", json!({"command": "ls /dev/pts | tr '\\n' ' '", "description": "d"})),
    ];
    let texts = batch(world, mode, &lines);
    assert_eq!(texts[3], ">>> \n[status: waiting for input]");
    assert_eq!(texts[4], "print(6*7)\n42\n>>> \n[status: waiting for input]");
    assert_eq!(
        texts[5],
        "import os,sys; print(os.isatty(0), sys.stdin.isatty())\nTrue True\n>>> \n[status: waiting for input]"
    );
    assert!(texts[6].ends_with("[status: running]"), "the loop runs: {}", texts[6]);
    assert!(texts[7].ends_with("KeyboardInterrupt\n>>> \n[status: waiting for input]"), "{}", texts[7]);
    assert_eq!(texts[8], "print('after')\nafter\n>>> \n[status: waiting for input]");
    assert_eq!(texts[9], "\n[status: completed, exit code: 0]");
    assert_eq!(texts[10], "continue? \n[status: waiting for input]");
    assert_eq!(texts[11], "yes\ngot yes\n[status: completed, exit code: 0]");
    assert_eq!(texts[13], "40 120\ntty 0\nred\n[status: completed, exit code: 0]");
    assert_eq!(
        texts[14],
        "Error: invalid tty: only a background command (run_in_background: true) runs on a terminal"
    );
    if mode != Mode::DangerFullAccess {
        // A confined command sees no terminal but its own: its `/dev/pts` is private.
        assert_eq!(texts[16], "ptmx ", "{}", texts[16]);
    }
}

#[test]
fn terminal_jobs_run_repls_and_prompts_confined_or_not() {
    over_matrix("terminal_jobs_run_repls_and_prompts_confined_or_not", |world| {
        world.require("python3")?;
        terminal_attack(world, Mode::WorkspaceWrite);
        terminal_attack(world, Mode::DangerFullAccess);
        Ok::<(), Skip>(())
    });
}

/// Jobs that start waiting are announced once, to their owner only, with their last line; a
/// sleeping job never is.
fn notice_attack(world: &World, mode: Mode) {
    let pipe_label = "python3 -c 'x = input(\"name? \"); print(\"hi\", x)'";
    let terminal_label = "read -p 'continue? ' x; echo \"got $x\"";
    let lines = [
        ("s1", "bash", background(pipe_label)),
        ("s1", "bash", on_terminal(terminal_label)),
        ("s1", "bash", background("sleep 30")),
        ("s1", "bash", on_terminal("sleep 30")),
        ("s2", "bash", json!({"command": "sleep 2.5", "description": "d"})),
        ("s1", "bash", json!({"command": "sleep 1", "description": "d"})),
        ("s1", "bash", json!({"command": "sleep 1", "description": "d"})),
        ("s1", "job_list", json!({})),
        ("s1", "job_input", json!({"job_id": "bash-1", "text": "ada\n"})),
        ("s1", "job_input", json!({"job_id": "bash-2", "text": "yes", "keys": ["Enter"]})),
        ("s1", "job_kill", json!({"job_id": "bash-3"})),
        ("s1", "job_kill", json!({"job_id": "bash-4"})),
    ];
    let responses = batch_lines(world, mode, true, &lines);
    // Every notice s1 got before it answered, in any order.
    let mut told: Vec<String> = responses[..8].iter().flat_map(notices).collect();
    told.sort();
    assert_eq!(
        told,
        [
            format!(
                "background job bash-1 (bash: {pipe_label}) is waiting for input after \"name? \". Answer it with job_input."
            ),
            format!(
                "background job bash-2 (bash: {terminal_label}) is waiting for input after \"continue? \". Answer it with job_input."
            ),
        ],
        "{responses:?}"
    );
    assert_eq!(notices(&responses[4]), Vec::<String>::new(), "s2 is not told of s1's jobs");
    let list = text(&responses[7]);
    for (job, status) in [
        ("bash-1", "waiting for input"),
        ("bash-2", "waiting for input"),
        ("bash-3", "running"),
        ("bash-4", "running"),
    ] {
        assert!(list.lines().any(|l| l.starts_with(&format!("{job} [bash] {status} — "))), "{job}: {list}");
    }
    assert_eq!(text(&responses[8]), "name? hi ada\n[status: completed, exit code: 0]");
    assert_eq!(text(&responses[9]), "continue? yes\ngot yes\n[status: completed, exit code: 0]");
    let waiting: Vec<String> =
        responses.iter().flat_map(notices).filter(|n| n.contains(" is waiting for input")).collect();
    assert_eq!(waiting.len(), 2, "told once each, sleeping jobs never: {waiting:?}");
}

#[test]
fn a_job_that_starts_waiting_is_announced_once_to_its_owner() {
    over_matrix("a_job_that_starts_waiting_is_announced_once_to_its_owner", |world| {
        world.require("python3")?;
        notice_attack(world, Mode::WorkspaceWrite);
        notice_attack(world, Mode::DangerFullAccess);
        Ok::<(), Skip>(())
    });
}

/// Without `--interactive` the bash tool offers no `tty`, and a `tty` key is ignored like any
/// other unknown key: the job runs on pipes.
#[test]
fn without_interactive_a_tty_key_is_ignored() {
    over_matrix("without_interactive_a_tty_key_is_ignored", |world| {
        let lines = [
            ("s1", "bash", on_terminal("[ -t 0 ] || [ -t 1 ] && echo terminal || echo pipes")),
            ("s1", "job_output", json!({"job_id": "bash-1", "wait": true, "timeout_ms": 20000})),
            ("s1", "bash", json!({"command": "echo fg", "description": "d", "tty": true})),
        ];
        let responses = batch_lines(world, Mode::WorkspaceWrite, false, &lines);
        assert_eq!(text(&responses[1]), "pipes\n[status: completed, exit code: 0]");
        assert_eq!(text(&responses[2]), "fg\n");
        Ok::<(), Skip>(())
    });
}
