//! `dsh-bash call`'s live status line: on a terminal (a pseudo-terminal made by util-linux
//! `script`) it shows the running command's latest output line and is cleared before the
//! result is printed; without a terminal, or with `--quiet`/`DSH_NO_PROGRESS=1`, stderr
//! carries nothing extra.

use crate::harness::Sandbox;

const STEPS: &str = r#"{"command":"echo step-one; sleep 2; echo done","description":"d"}"#;
const QUICK: &str = r#"{"command":"echo step-one; sleep 1; echo done","description":"d"}"#;

/// The result as it reaches the terminal (the pty turns `\n` into `\r\n`).
const RESULT_ON_TTY: &str = "step-one\r\ndone\r\n";

/// Erases the line the cursor is on (how the status line is cleared).
const CLEAR_LINE: &str = "\x1b[2K";

/// `dsh-bash call [FLAGS] bash ARGS_JSON` on a pseudo-terminal, with `env` added.
fn on_a_terminal(sandbox: &Sandbox, flags: &[&str], args_json: &str, env: &[(&str, &str)]) -> String {
    let args: Vec<&str> =
        ["call"].into_iter().chain(flags.iter().copied()).chain(["bash", args_json]).collect();
    sandbox.on_terminal(&args, env)
}

#[test]
fn a_terminal_shows_the_latest_output_line_then_clears_it() {
    let sandbox = Sandbox::new();
    let seen = on_a_terminal(&sandbox, &[], STEPS, &[]);
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
        let seen = on_a_terminal(&sandbox, &[flag], QUICK, &[]);
        assert_eq!(seen, RESULT_ON_TTY, "{flag}");
    }
    let seen = on_a_terminal(&sandbox, &[], QUICK, &[("DSH_NO_PROGRESS", "1")]);
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
