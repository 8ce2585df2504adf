//! `dsh-bash call`'s live status line: on a terminal (a pseudo-terminal made by util-linux
//! `script`) it shows the running command's latest output line and is cleared before the
//! result is printed; without a terminal, or with `--quiet`/`DSH_NO_PROGRESS=1`, stderr
//! carries nothing extra.

use std::process::{Command, Stdio};

use crate::harness::Sandbox;

const STEPS: &str = r#"{"command":"echo step-one; sleep 2; echo done","description":"d"}"#;
const QUICK: &str = r#"{"command":"echo step-one; sleep 1; echo done","description":"d"}"#;

/// The result as it reaches the terminal (the pty turns `\n` into `\r\n`).
const RESULT_ON_TTY: &str = "step-one\r\ndone\r\n";

/// Erases the line the cursor is on (how the status line is cleared).
const CLEAR_LINE: &str = "\x1b[2K";

/// Single-quotes `s` for the shell `script` runs the command with.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs `dsh-bash call bash ARGS_JSON` (plus `flags`) on a pseudo-terminal; returns everything
/// the terminal received (stdout and stderr interleaved), or `None` when `script` is missing.
fn on_a_terminal(sandbox: &Sandbox, flags: &[&str], args_json: &str, env: &[(&str, &str)]) -> Option<String> {
    let mut words = vec![quoted(env!("CARGO_BIN_EXE_dsh-bash")), "call".to_owned()];
    words.extend(flags.iter().map(|f| quoted(f)));
    words.extend(["bash".to_owned(), quoted(args_json)]);
    let mut command = Command::new("script");
    command
        .args(["-qfec", &words.join(" "), "/dev/null"])
        .env("DSH_HOME", sandbox.path().join("home"))
        .env("TERM", "xterm-256color")
        .env_remove("DSH_NO_PROGRESS")
        .env_remove("DSH_MCP_TOKEN")
        .current_dir(sandbox.path())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    for (key, value) in env {
        command.env(key, value);
    }
    let output = match command.output() {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipping: util-linux `script` is not installed");
            return None;
        }
        Err(e) => panic!("script: {e}"),
    };
    assert!(output.status.success(), "script/dsh-bash failed: {output:?}");
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn a_terminal_shows_the_latest_output_line_then_clears_it() {
    let sandbox = Sandbox::new();
    let Some(seen) = on_a_terminal(&sandbox, &[], STEPS, &[]) else { return };
    let status =
        seen.strip_suffix(RESULT_ON_TTY).unwrap_or_else(|| panic!("the result comes last: {seen:?}"));
    assert!(status.contains("bash"), "the status line names the tool: {status:?}");
    assert!(status.contains("step-one"), "the status line showed the latest output line: {status:?}");
    assert!(
        status.ends_with(CLEAR_LINE),
        "the status line is cleared right before the result is printed: {:?}",
        &status[status.len().saturating_sub(200)..]
    );
}

#[test]
fn quiet_or_no_progress_leaves_only_the_result_on_the_terminal() {
    let sandbox = Sandbox::new();
    for flag in ["--quiet", "-q"] {
        let Some(seen) = on_a_terminal(&sandbox, &[flag], QUICK, &[]) else { return };
        assert_eq!(seen, RESULT_ON_TTY, "{flag}");
    }
    let Some(seen) = on_a_terminal(&sandbox, &[], QUICK, &[("DSH_NO_PROGRESS", "1")]) else { return };
    assert_eq!(seen, RESULT_ON_TTY, "DSH_NO_PROGRESS=1");
}

#[test]
fn no_status_line_when_stderr_is_not_a_terminal() {
    let sandbox = Sandbox::new();
    let mut command = sandbox.command(&["call", "bash", QUICK]);
    command.env_remove("DSH_NO_PROGRESS");
    let out = crate::harness::output(command, b"");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "step-one\ndone\n");
    assert_eq!(out.stderr, "", "nothing extra on a piped stderr");
}
