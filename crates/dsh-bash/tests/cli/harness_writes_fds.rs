//! A descriptor the harness inherited from whoever started it never reaches a command: a
//! command cannot write through it, confined or not.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::harness::{modes, scratch_outside_tmp};
use crate::harness_writes_support::{Batch, dsh_bash, text};

const ECHO_TO_7: &str = r#"{"command":"echo x >&7","description":"Write to descriptor 7"}"#;
const BAD_FD: &str = "[stderr]\nbash: line 1: 7: Bad file descriptor\n[exit code: 1]";

/// `command`, started with descriptor 7 open for appending to `target` (not close-on-exec).
fn with_fd7(command: &Command, target: &Path) -> Command {
    let mut wrapped = Command::new("bash");
    wrapped
        .arg("-c")
        .arg(r#"exec 7>>"$FD7_TARGET" && exec "$0" "$@""#)
        .arg(command.get_program())
        .args(command.get_args())
        .env("FD7_TARGET", target);
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}

fn stdout_of(mut command: Command) -> (String, Option<i32>) {
    let out = command.output().expect("run");
    (String::from_utf8(out.stdout).expect("utf-8"), out.status.code())
}

#[test]
fn the_descriptor_is_really_open_for_an_ordinary_child() {
    // The control: the same wrapper around a plain bash does write through descriptor 7.
    let scratch = scratch_outside_tmp();
    let target = scratch.path().join("target");
    let mut bash = Command::new("bash");
    bash.args(["-c", "echo x >&7"]);
    let (_, code) = stdout_of(with_fd7(&bash, &target));
    assert_eq!(code, Some(0));
    assert_eq!(std::fs::read_to_string(&target).expect("target"), "x\n");
}

#[test]
fn call_never_hands_an_inherited_descriptor_to_the_command() {
    let scratch = scratch_outside_tmp();
    let target = scratch.path().join("target");
    for switches in modes() {
        let mut args = switches.clone();
        args.extend(["call", "bash", ECHO_TO_7]);
        let (stdout, code) = stdout_of(with_fd7(&dsh_bash(scratch.path(), &args), &target));
        assert_eq!((stdout.as_str(), code), (BAD_FD, Some(0)), "{switches:?}");
        assert_eq!(std::fs::read_to_string(&target).unwrap_or_default(), "", "{switches:?}");
    }
}

#[test]
fn batch_never_hands_an_inherited_descriptor_to_the_command() {
    let scratch = scratch_outside_tmp();
    let target = scratch.path().join("target");
    let workspace = scratch.path().to_str().expect("utf-8");
    for switches in modes() {
        let mut args = switches.clone();
        args.push("batch");
        let mut batch = Batch::start(with_fd7(&dsh_bash(scratch.path(), &args), &target));
        let args = serde_json::from_str::<serde_json::Value>(ECHO_TO_7).expect("json");
        let sessionless = batch.call(&json!({"tool": "bash", "args": args, "id": 1}));
        let in_session =
            batch.call(&json!({"tool": "bash", "args": args, "session": "s", "cwd": workspace, "id": 2}));
        assert_eq!(batch.finish(), Some(0), "{switches:?}");
        for response in [sessionless, in_session] {
            assert_eq!(response["isError"], json!(false), "{switches:?}: {response}");
            assert_eq!(text(&response), BAD_FD, "{switches:?}");
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap_or_default(), "", "{switches:?}");
    }
}
