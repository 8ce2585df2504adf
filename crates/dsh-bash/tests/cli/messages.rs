//! Messages a newcomer meets first: a missing working directory, config files with a wrong
//! key or type. Also the session-log retention knob, applied when the harness starts.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::harness::Sandbox;

/// Runs `--config <file> prompt` with `toml` as the file; returns the file's path as given
/// and the one stderr line.
fn config_error(toml: &str) -> (String, String) {
    let sandbox = Sandbox::new();
    let config = sandbox.write("dsh.toml", toml);
    let config = config.to_str().expect("utf-8").to_owned();
    let out = sandbox.run(&["--config", &config, "prompt"], "");
    let line = out.assert_usage_error().to_owned();
    (config, line)
}

#[test]
fn a_missing_workdir_says_so_after_the_spawn_error() {
    let sandbox = Sandbox::new();
    let out = sandbox
        .run(&["call", "bash", r#"{"command":"true","description":"d","workdir":"/nonexistent-dsh"}"#], "");
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stdout, "Error: spawn bash ENOENT: working directory /nonexistent-dsh does not exist");
}

#[test]
fn a_workdir_that_is_a_file_says_so() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("plain-file", "x");
    let args = serde_json::json!({"command": "true", "description": "d", "workdir": file}).to_string();
    let out = sandbox.run(&["call", "bash", &args], "");
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(
        out.stdout,
        format!("Error: spawn bash ENOTDIR: working directory {} is not a directory", file.display())
    );
}

#[test]
fn a_wrongly_typed_number_names_file_plugin_and_key_in_plain_words() {
    let (file, line) = config_error("[bash-local]\ngraceMs = \"soon\"\n");
    assert_eq!(
        line,
        format!("dsh-bash: {file}: [bash-local] graceMs: invalid type: string \"soon\", expected a number")
    );
}

#[test]
fn a_wrongly_typed_boolean_and_string_read_plainly() {
    let (file, line) = config_error("[tool-bash]\nenableRunInBackground = \"no\"\n");
    assert_eq!(
        line,
        format!(
            "dsh-bash: {file}: [tool-bash] enableRunInBackground: invalid type: string \"no\", expected a boolean"
        )
    );
    let (file, line) = config_error("[system-prompt]\npersona = 3\n");
    assert_eq!(
        line,
        format!("dsh-bash: {file}: [system-prompt] persona: invalid type: integer `3`, expected a string")
    );
}

#[test]
fn an_unknown_key_names_file_and_plugin() {
    let (file, line) = config_error("[system-prompt]\npersonae = \"x\"\n");
    assert!(
        line.starts_with(&format!("dsh-bash: {file}: [system-prompt] unknown field `personae`, expected ")),
        "{line}"
    );
}

#[test]
fn a_refused_value_keeps_the_plugins_own_message() {
    let (_, line) = config_error("[bash-local]\ngraceMs = 0\n");
    assert_eq!(line, "dsh-bash: bash-local: graceMs must be a positive finite number");
}

/// Sets the modification time of `path` to `days` ago.
fn age(path: &Path, days: u64) {
    let when = SystemTime::now() - Duration::from_secs(days * 86_400);
    let file = std::fs::File::open(path).expect("open");
    file.set_times(std::fs::FileTimes::new().set_modified(when)).expect("set times");
}

#[test]
fn session_log_retention_is_opt_in_and_applied_at_start() {
    let sandbox = Sandbox::new();
    let sessions = sandbox.path().join("home/sessions");
    std::fs::create_dir_all(&sessions).expect("sessions");
    let old = sessions.join("old.jsonl");
    let recent = sessions.join("recent.jsonl");
    for (log, days) in [(&old, 40), (&recent, 2)] {
        std::fs::write(log, "{}\n").expect("log");
        age(log, days);
    }

    let out = sandbox.run(&["prompt"], "");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(old.exists() && recent.exists(), "nothing is removed without the knob");

    let mut command = sandbox.command(&["prompt"]);
    command.env("DSH_SESSION_RETENTION_DAYS", "30");
    let out = crate::harness::output(command, b"");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!old.exists(), "a log older than 30 days is removed");
    assert!(recent.exists(), "a recent log is kept");
}
