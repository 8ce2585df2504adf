//! What a person meets in the first hour, through the built binary: `mcp` started by hand on a
//! terminal says what it waits for, `call` escalates without a `--session`, ends a terminal's
//! last line, can exit with the command's status and refuses background jobs it would kill,
//! and `doctor` names where each sandbox mode may write.

use std::path::Path;
use std::process::Command;

use super::harness::{Sandbox, confining_host, output, run};

const HINT: &str = "dsh-bash: waiting for an MCP client on stdin";

#[test]
fn mcp_started_on_a_terminal_says_what_it_waits_for() {
    let sandbox = Sandbox::new();
    let shown = sandbox.on_terminal(&["mcp"], &[]);
    assert!(shown.starts_with(HINT), "{shown:?}");
    assert!(shown.contains("dsh-bash call bash"), "the hint shows how to try a call: {shown:?}");
    // A client on a pipe never sees it.
    let piped = sandbox.run(&["mcp"], "");
    assert_eq!(piped.code, Some(0), "{piped:?}");
    assert!(!piped.stderr.contains(HINT), "{piped:?}");
}

#[test]
fn call_ends_the_last_line_on_a_terminal_only() {
    let sandbox = Sandbox::new();
    // `-q`: no status line on the terminal, only the result.
    let args = ["call", "-q", "bash", r#"{"command":"printf abc","description":"d"}"#];
    assert_eq!(sandbox.on_terminal(&args, &[]), "abc\r\n");
    let piped = sandbox.run(&args, "");
    assert_eq!((piped.stdout.as_str(), piped.code), ("abc", Some(0)), "{piped:?}");
}

fn exit_status(command: &str, extra: &str) -> Option<i32> {
    let args = format!(r#"{{"command":{},"description":"d"{extra}}}"#, serde_json::json!(command));
    run(&["call", "--exit-status", "bash", &args]).code
}

#[test]
fn call_exit_status_is_the_commands_own() {
    assert_eq!(exit_status("exit 9", ""), Some(9));
    assert_eq!(exit_status("true", ""), Some(0));
    assert_eq!(exit_status("kill -TERM $$", ""), Some(128 + 15));
    assert_eq!(exit_status("sleep 30", r#","timeoutMs":200"#), Some(124));
    // A tool error stays 1; without the flag a failed command is still a result (0).
    let invalid = run(&["call", "--exit-status", "bash", r#"{"command":"true"}"#]);
    assert_eq!(invalid.code, Some(1), "{invalid:?}");
    let plain = run(&["call", "bash", r#"{"command":"exit 9","description":"d"}"#]);
    assert_eq!((plain.stdout.as_str(), plain.code), ("(no output)\n[exit code: 9]", Some(0)));
}

#[test]
fn call_refuses_a_background_job_it_would_kill() {
    let sandbox = Sandbox::new();
    let marker = sandbox.path().join("ran");
    let command = format!("sleep 1; touch {}", marker.display());
    let args = serde_json::json!({"command": command, "description": "d", "run_in_background": true});
    let out = sandbox.run(&["call", "bash", &args.to_string()], "");
    let line = out.assert_usage_error();
    assert!(line.contains("run_in_background needs a host that outlives the call"), "{line}");
    assert!(line.contains("dsh-bash batch") && line.contains("dsh-bash mcp"), "{line}");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(!marker.exists(), "the refused job must not have run");
}

fn escalate(workspace: &Path, approve: &str) -> (super::harness::Run, bool) {
    let target = workspace.join("made-by-escalation");
    let args = serde_json::json!({
        "command": format!("touch {}", target.display()),
        "description": "d",
        "sandbox_permissions": "workspace-write",
        "justification": "the test writes into its workspace",
    });
    let root = workspace.to_str().expect("utf-8");
    let flags = ["--sandbox", "read-only", "--workspace-root", root, "--approve", approve];
    let sandbox = Sandbox::outside_tmp();
    let out = sandbox.run(&[&flags[..], &["call", "bash", &args.to_string()]].concat(), "");
    (out, target.exists())
}

#[test]
fn call_with_an_approve_answer_escalates_without_a_session() {
    if !confining_host() {
        return;
    }
    let workspace = Sandbox::outside_tmp();
    let (out, written) = escalate(workspace.path(), "allowed-once");
    assert_eq!((out.stdout.as_str(), out.code), ("(no output)", Some(0)), "{out:?}");
    assert!(written, "the approved escalation wrote the file");
    std::fs::remove_file(workspace.path().join("made-by-escalation")).expect("remove");
    let (out, written) = escalate(workspace.path(), "rejected");
    assert_eq!(out.stdout, "Error: the user rejected escalating this command to \"workspace-write\"");
    assert_eq!(out.code, Some(1));
    assert!(!written, "a rejected escalation runs nothing");
}

#[test]
fn doctor_names_the_writable_roots_of_each_mode() {
    let sandbox = Sandbox::outside_tmp();
    let root = std::fs::canonicalize(sandbox.path()).expect("canonical");
    let out = sandbox.run(&["--workspace-root", root.to_str().expect("utf-8"), "doctor"], "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    let tmp = std::fs::canonicalize("/tmp").expect("/tmp");
    let expected = [
        format!("workspace root: {} (--workspace-root; a session's cwd takes its place)", root.display()),
        "writable roots by sandbox mode:".to_owned(),
        "  read-only: none".to_owned(),
        format!("  workspace-write: {}, {}", root.display(), tmp.display()),
    ];
    let at = lines.iter().position(|l| l.starts_with("workspace root: ")).expect("a workspace root line");
    assert_eq!(
        lines[at..at + 4],
        expected.iter().map(String::as_str).collect::<Vec<_>>()[..],
        "{}",
        out.stdout
    );
    assert!(lines[at + 5].starts_with("  danger-full-access: not confined"), "{}", out.stdout);
}

/// The README's set-up commands are the ones CI runs, and its first calls print what it shows.
#[test]
fn the_readme_commands_work_as_shown() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    let setup =
        "```sh\ncargo run --release --bin dsh-bash -- mcp\ncargo test --workspace --no-fail-fast\n```";
    assert!(readme.contains(setup), "the README's set-up block changed");
    assert!(
        ci.lines().any(|l| l.trim() == "cargo test --workspace --no-fail-fast"),
        ".ci/run runs the README's test command"
    );

    let section = readme.split("## A first call").nth(1).expect("a first-call section");
    let block = section.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("its sh block");
    let home = Sandbox::outside_tmp();
    // Run from a project directory in the home directory, as a person would.
    let project = home.path().join("project");
    std::fs::create_dir(&project).expect("project dir");
    let confining = confining_host();
    let mut checked = 0;
    let mut lines = block.lines().peekable();
    while let Some(line) = lines.next() {
        let command = line.strip_prefix("$ ").expect("a block of `$ command` lines, each with its output");
        let mut shown = Vec::new();
        while let Some(next) = lines.next_if(|l| !l.starts_with("$ ")) {
            shown.push(next.replace("/root/", &format!("{}/", home.path().display())));
        }
        if command.contains("--sandbox") && !confining {
            continue;
        }
        let command = command
            .replace("cargo run -q --release --bin dsh-bash --", env!("CARGO_BIN_EXE_dsh-bash"))
            .replace("target/release/dsh-bash", env!("CARGO_BIN_EXE_dsh-bash"));
        let out = output(
            {
                let mut c = Command::new("bash");
                c.args(["-c", &command]).env("HOME", home.path()).current_dir(&project);
                c
            },
            b"",
        );
        assert_eq!(out.stdout.trim_end(), shown.join("\n"), "README: {line}\n{out:?}");
        checked += 1;
    }
    assert_eq!(checked, if confining { 2 } else { 1 }, "the first-call block has two commands");
    assert!(!home.path().join("outside").exists(), "the confined write was denied");
}

#[test]
fn a_later_call_of_a_session_runs_in_the_cwd_it_was_created_with() {
    let sandbox = Sandbox::new();
    let project = sandbox.path().join("project");
    std::fs::create_dir(&project).expect("project");
    let project = std::fs::canonicalize(&project).expect("canonical");
    let pwd = r#"{"command":"pwd -P","description":"Where am I"}"#;
    let first =
        sandbox.run(&["call", "--session", "s1", "--cwd", project.to_str().expect("utf-8"), "bash", pwd], "");
    assert_eq!(first.stdout, format!("{}\n", project.display()), "{first:?}");
    // Another process, no --cwd: the session's recorded cwd, not the caller's.
    let later = sandbox.run(&["call", "--session", "s1", "bash", pwd], "");
    assert_eq!(later.stdout, format!("{}\n", project.display()), "{later:?}");
    // Naming another cwd for it is refused.
    let moved = sandbox.run(&["call", "--session", "s1", "--cwd", "/", "bash", pwd], "");
    let line = moved.assert_usage_error();
    assert!(line.contains("session \"s1\" already has cwd"), "{line}");
}

/// The Rust example of `docs/library.md` is the library's first doctest, line for line (the
/// doctest is what runs it).
#[test]
fn the_docs_rust_example_is_the_harness_doctest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../../docs/library.md")).expect("docs/library.md");
    let doc = std::fs::read_to_string(root.join("src/harness.rs")).expect("harness.rs");
    let section = readme.split("## Use it from Rust").nth(1).expect("a Rust section");
    let example =
        section.split("```rust\n").nth(1).and_then(|b| b.split("```").next()).expect("its rust block");
    let doctest: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .skip_while(|l| *l != "```")
        .skip(1)
        .take_while(|l| *l != "```")
        .filter(|l| !l.starts_with("# "))
        .collect();
    assert_eq!(example.lines().collect::<Vec<_>>(), doctest);
}
