//! Persistent shell state (`--persist cwd|env`): what a session's shell ends with is where its
//! next call starts; other sessions see none of it, `reset` forgets it, and with it off nothing
//! changes.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{Value, json};

use crate::harness::{Sandbox, confining_host};

/// One batch request line of session `session` (created in `cwd` on its first line).
fn line(session: &str, cwd: &Path, args: Value) -> String {
    json!({"tool": "bash", "args": args, "session": session, "cwd": cwd}).to_string()
}

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "Run a step"})
}

/// Runs `lines` through `dsh-bash OPTIONS batch`; returns each result's text.
fn batch(sandbox: &Sandbox, options: &[&str], lines: &[String]) -> Vec<String> {
    let mut args = options.to_vec();
    args.push("batch");
    let out = sandbox.run(&args, &(lines.join("\n") + "\n"));
    assert_eq!(out.code, Some(0), "{out:?}");
    out.json_lines()
        .iter()
        .map(|l| {
            assert_eq!(l["isError"], json!(false), "{l}");
            l["content"][0]["text"].as_str().expect("text").to_owned()
        })
        .collect()
}

fn workspace(sandbox: &Sandbox) -> std::path::PathBuf {
    let ws = std::fs::canonicalize(sandbox.path()).expect("canonical").join("ws");
    std::fs::create_dir_all(ws.join("sub")).expect("mkdir");
    ws
}

#[test]
fn persist_cwd_carries_the_directory_but_not_variables_and_reset_returns() {
    let sandbox = Sandbox::new();
    let ws = workspace(&sandbox);
    let lines = [
        line("s1", &ws, bash("cd sub && export A=1")),
        line("s1", &ws, bash("pwd; echo \"A=${A-unset}\"")),
        line("s2", &ws, bash("pwd")),
        line("s1", &ws, json!({"command": "pwd", "description": "Start over", "reset": true})),
        line("s1", &ws, bash("pwd")),
    ];
    let ws = ws.display();
    assert_eq!(
        batch(&sandbox, &["--persist", "cwd"], &lines),
        [
            "(no output)".to_owned(),
            format!("{ws}/sub\nA=unset\n"),
            format!("{ws}\n"),
            format!("{ws}\n"),
            format!("{ws}\n"),
        ]
    );
}

#[test]
fn persist_env_carries_exports_and_functions_only_within_the_session() {
    let sandbox = Sandbox::new();
    let ws = workspace(&sandbox);
    let lines = [
        line("s1", &ws, bash("cd sub; export A=1; B=not-exported; greet() { echo \"hello $1\"; }; exit 3")),
        line("s1", &ws, bash("pwd; echo \"A=$A B=${B-unset}\"; greet you")),
        line("s2", &ws, bash("pwd; echo \"A=${A-unset}\"; type greet 2>&1 | head -1")),
        line(
            "s1",
            &ws,
            json!({"command": "pwd; echo \"A=${A-unset}\"", "description": "Start over", "reset": true}),
        ),
        line("s1", &ws, bash("echo \"A=${A-unset}\"")),
    ];
    let texts = batch(&sandbox, &["--persist", "env"], &lines);
    let ws = ws.display();
    assert_eq!(
        texts,
        [
            "(no output)\n[exit code: 3]".to_owned(),
            format!("{ws}/sub\nA=1 B=unset\nhello you\n"),
            format!("{ws}\nA=unset\nbash: line 1: type: greet: not found\n"),
            format!("{ws}\nA=unset\n"),
            "A=unset\n".to_owned(),
        ]
    );
}

#[test]
fn persist_env_carries_an_activated_virtualenv() {
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipped: /usr/bin/python3 is missing");
        return;
    }
    let sandbox = Sandbox::new();
    let ws = workspace(&sandbox);
    let lines = [
        line("s1", &ws, bash("/usr/bin/python3 -m venv --without-pip v && source v/bin/activate")),
        line("s1", &ws, bash("which python3; echo \"$VIRTUAL_ENV\"")),
        line("s1", &ws, bash("type -t deactivate; deactivate; echo \"${VIRTUAL_ENV-unset}\"")),
    ];
    let texts = batch(&sandbox, &["--persist", "env"], &lines);
    assert_eq!(texts[0], "(no output)", "{texts:?}");
    assert_eq!(texts[1], format!("{ws}/v/bin/python3\n{ws}/v\n", ws = ws.display()));
    assert_eq!(texts[2], "function\nunset\n", "the activation's function carries too");
}

#[test]
fn persist_keeps_exit_statuses_signals_and_output_exact() {
    let sandbox = Sandbox::new();
    let ws = workspace(&sandbox);
    let commands = [
        "printf 'a\\0b'; exit 7",
        "echo out; echo err >&2; kill -TERM $$",
        "set -eu; cd sub; false; echo never",
        "echo $((1+)); echo after",
        "echo \"$0 $LINENO\"; nosuchcommand",
        "if",
    ];
    let plain: Vec<String> = commands.iter().map(|c| line("p", &ws, bash(c))).collect();
    let expected = batch(&sandbox, &[], &plain);
    for mode in ["cwd", "env"] {
        let persisted: Vec<String> = commands.iter().map(|c| line(mode, &ws, bash(c))).collect();
        assert_eq!(batch(&sandbox, &["--persist", mode], &persisted), expected, "--persist {mode}");
    }
    assert!(expected[1].ends_with("[killed by signal: SIGTERM]"), "{expected:?}");
    // The `cd` of the command that failed under `set -e` still carried.
    let after = [line("env", &ws, bash("pwd"))];
    assert_eq!(batch(&sandbox, &["--persist", "env"], &after), [format!("{}/sub\n", ws.display())]);
}

#[test]
fn persisted_state_is_private_and_keeps_no_managed_or_credential_variables() {
    let sandbox = Sandbox::new();
    let ws = workspace(&sandbox);
    let lines = [
        line("s1", &ws, bash("export GITHUB_TOKEN=ghp_notreallyatoken DSH_MINE=1 KEEP=1")),
        line("s1", &ws, bash("echo \"${GITHUB_TOKEN-unset} ${DSH_MINE-unset} $KEEP\"")),
    ];
    assert_eq!(batch(&sandbox, &["--persist", "env"], &lines)[1], "unset unset 1\n");
    let dir = sandbox.path().join("home/sessions/bash-state");
    assert_eq!(std::fs::metadata(&dir).expect("state dir").permissions().mode() & 0o777, 0o700);
    let files: Vec<_> = std::fs::read_dir(&dir).expect("list").map(|e| e.expect("entry").path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(std::fs::metadata(&files[0]).expect("state").permissions().mode() & 0o777, 0o600);
    let stored = std::fs::read(&files[0]).expect("read");
    let stored = String::from_utf8_lossy(&stored);
    assert!(stored.contains("KEEP") && !stored.contains("ghp_") && !stored.contains("DSH_"), "{stored:?}");
}

#[test]
fn persist_works_for_confined_commands_which_cannot_read_any_session_state() {
    if !confining_host() {
        return;
    }
    let sandbox = Sandbox::outside_tmp();
    let ws = workspace(&sandbox);
    for mode in ["read-only", "workspace-write"] {
        let lines = [
            line(mode, &ws, bash("cd sub; export A=1")),
            line(
                mode,
                &ws,
                bash(
                    "pwd; echo \"A=$A\"; cat \"$DSH_HOME\"/sessions/bash-state/* >/dev/null 2>&1 || echo hidden",
                ),
            ),
        ];
        let texts = batch(&sandbox, &["--sandbox", mode, "--persist", "env"], &lines);
        assert_eq!(
            texts,
            ["(no output)".to_owned(), format!("{}/sub\nA=1\nhidden\n", ws.display())],
            "{mode}"
        );
    }
}

#[test]
fn a_vanished_directory_falls_back_to_the_start_with_a_note() {
    let sandbox = Sandbox::new();
    let ws = workspace(&sandbox);
    let lines = [line("s1", &ws, bash("cd sub && rmdir \"$PWD\"")), line("s1", &ws, bash("pwd"))];
    let ws = ws.display();
    assert_eq!(
        batch(&sandbox, &["--persist", "cwd"], &lines)[1],
        format!("{ws}\n[stderr]\n[persist: cannot return to {ws}/sub; starting in {ws}]\n")
    );
}

#[test]
fn reset_is_advertised_only_when_state_persists() {
    let sandbox = Sandbox::new();
    let off = sandbox.run(&["schema"], "");
    assert!(!off.stdout.contains("\"reset\""), "{}", off.stdout);
    assert!(off.stdout.contains("no state (cwd, variables, functions) persists between calls"));
    for mode in ["cwd", "env"] {
        let on = sandbox.run(&["--persist", mode, "schema"], "");
        assert!(on.stdout.contains("\"reset\": {"), "{}", on.stdout);
        assert!(on.stdout.contains("Forget the state carried over"), "{}", on.stdout);
        assert!(!on.stdout.contains("no state (cwd, variables, functions) persists"), "{}", on.stdout);
    }
    assert_eq!(sandbox.run(&["--persist", "none", "schema"], "").stdout, off.stdout);
    assert_eq!(sandbox.run(&["--persist", "none", "prompt"], "").stdout, sandbox.run(&["prompt"], "").stdout);
}
