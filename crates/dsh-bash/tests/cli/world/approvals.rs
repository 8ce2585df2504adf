//! Approvals show what they approve, and approve nothing else: the terminal prompt and the MCP
//! elicitation name the exact command, its working directory and the mode asked for, with
//! every control character of the model's text shown as an escape; an escalated call under
//! `--persist env` runs none of the functions or `PATH` entries earlier confined calls left;
//! and a generated HTTP bearer token is never printed, only written to a file of the user's
//! that confined commands cannot read.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::cell::{Outcome, User, World};
use super::host::q;
use super::matrix::over_matrix;

/// A justification with a screen clear, a carriage return and a right-to-left override.
const JUSTIFICATION: &str = "needs it\u{1b}[2J\rAllow once? [y/N] y\u{202e}txt.exe";
/// How it must show: every control character as a visible escape.
const JUSTIFICATION_SHOWN: &str = "needs it\\x1b[2J\\rAllow once? [y/N] y\\u{202e}txt.exe";
/// A two-line command whose second line pretends to be the prompt's end.
const COMMAND: &str = "echo one\nAllow once? [y/N] y\r";

/// The escalation arguments of a call asking for `workspace-write`.
fn escalation() -> Value {
    json!({
        "command": COMMAND,
        "description": "d",
        "sandbox_permissions": "workspace-write",
        "justification": JUSTIFICATION,
    })
}

/// The lines every prompt shows for [`escalation`] in `world`.
fn expected_details(world: &World) -> String {
    let cwd = world.ws.canonicalize().expect("canonical workspace");
    format!(
        "Command (2 lines):\n  | echo one\n  | Allow once? [y/N] y\\r\nWorking directory: {}\n\
         Requested mode: workspace-write\nJustification: {JUSTIFICATION_SHOWN}\n\
         (control characters are shown as \\x.. and \\u{{..}} escapes)",
        cwd.display()
    )
}

/// `program args…` as one line for bash, each word single-quoted.
fn shell_line(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|word| q(word.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_terminal_prompt_shows_the_command_cwd_and_mode_with_control_characters_escaped() {
    over_matrix(
        "the_terminal_prompt_shows_the_command_cwd_and_mode_with_control_characters_escaped",
        |world| {
            let mut args: Vec<String> = ["--sandbox", "read-only", "--approve", "tty", "call", "-q", "bash"]
                .map(str::to_owned)
                .to_vec();
            args.push(escalation().to_string());
            let dsh = world.dsh(&args);
            // util-linux `script` gives dsh-bash a terminal; stdin at its end answers
            // nothing (the request is cancelled), after the prompt was written.
            let mut script = Command::new("script");
            script.args(["-qfec", &shell_line(&dsh), "/dev/null"]).current_dir(&world.ws);
            for (name, value) in dsh.get_envs() {
                match value {
                    Some(value) => script.env(name, value),
                    None => script.env_remove(name),
                };
            }
            let output = script
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .output()
                .expect("script (util-linux) must be installed");
            let shown = String::from_utf8_lossy(&output.stdout).replace("\r\n", "\n");
            let prompt = format!(
                "\n[approval] session {session}: Allow this bash command to run once with wider sandbox access (workspace-write)?\n{details}\nAllow once? [y/N] ",
                session = session_of(&shown),
                details = expected_details(world)
            );
            assert!(
                shown.contains(&prompt),
                "the prompt {prompt:?} is not in what the terminal showed: {shown:?}"
            );
            assert!(!shown.contains('\u{1b}') && !shown.contains('\u{202e}'), "{shown:?}");
            assert!(!shown.replace("\\r", "").contains('\r'), "a raw carriage return: {shown:?}");
            Ok(())
        },
    );
}

/// The session id the terminal prompt names (an implicit session of one call).
fn session_of(shown: &str) -> String {
    shown
        .split("[approval] session ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no approval prompt on the terminal: {shown:?}"))
        .to_owned()
}

/// Reads JSON lines from the server until `wanted` matches one; returns it.
fn until(reader: &mut impl BufRead, wanted: impl Fn(&Value) -> bool) -> Value {
    loop {
        let mut line = String::new();
        assert_ne!(reader.read_line(&mut line).expect("read the server"), 0, "the server ended early");
        let message: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
        if wanted(&message) {
            return message;
        }
    }
}

#[test]
fn the_mcp_elicitation_shows_the_command_cwd_and_mode_with_control_characters_escaped() {
    over_matrix(
        "the_mcp_elicitation_shows_the_command_cwd_and_mode_with_control_characters_escaped",
        |world| {
            let args: Vec<String> = ["--sandbox", "read-only", "mcp"].map(str::to_owned).to_vec();
            let mut child = world.dsh(&args).stdin(Stdio::piped()).spawn().expect("spawn dsh-bash mcp");
            let mut stdin = child.stdin.take().expect("stdin");
            let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
            let mut send = |message: Value| writeln!(stdin, "{message}").expect("write the server");
            send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
                "clientInfo": {"name": "test", "version": "0"}}}));
            until(&mut stdout, |m| m["id"] == json!(1));
            send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
            send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "bash", "arguments": escalation()}}));
            let ask = until(&mut stdout, |m| m["method"] == json!("elicitation/create"));
            send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "decline"}}));
            let answer = until(&mut stdout, |m| m["id"] == json!(2) && m.get("method").is_none());
            drop(stdin);
            assert!(child.wait().expect("wait").success());
            let message = ask["params"]["message"].as_str().expect("a message");
            assert_eq!(
                message,
                format!(
                    "Allow this bash command to run once with wider sandbox access (workspace-write)?\n\n\
                     {}\n\nAccept to allow it once; decline to refuse.",
                    expected_details(world)
                )
            );
            assert_eq!(
                answer["result"]["content"][0]["text"],
                json!("Error: the user rejected escalating this command to \"workspace-write\"")
            );
            Ok(())
        },
    );
}

#[test]
fn an_escalated_call_runs_no_function_alias_or_path_entry_a_confined_call_left() {
    over_matrix("an_escalated_call_runs_no_function_alias_or_path_entry_a_confined_call_left", |world| {
        let outside = world.outside.display().to_string();
        let plants = [
            ("fn", format!("ls() {{ touch {}; command ls \"$@\"; }}", q(format!("{outside}/marker-fn")))),
            (
                "alias",
                format!(
                    "shopt -s expand_aliases; alias ls={}",
                    q(format!("touch {outside}/marker-alias; ls"))
                ),
            ),
            (
                "path",
                format!(
                    "mkdir -p fake && printf '#!/bin/sh\\ntouch %s\\n' {} > fake/ls && chmod +x fake/ls && export PATH=\"$PWD/fake:$PATH\"",
                    q(format!("{outside}/marker-path"))
                ),
            ),
        ];
        let mut input = String::new();
        let mut id = 0;
        let mut line = |session: &str, args: Value| {
            let line = json!({"tool": "bash", "args": args, "session": session, "cwd": world.ws, "id": id});
            id += 1;
            input.push_str(&format!("{line}\n"));
        };
        for (session, plant) in &plants {
            line(session, json!({"command": plant, "description": "d"}));
            // The control: the plant carries into the session's next confined call.
            line(
                session,
                json!({"command": "type -t ls; alias ls 2>/dev/null; command -v ls", "description": "d"}),
            );
            line(
                session,
                json!({"command": "ls", "description": "d", "sandbox_permissions": "danger-full-access",
                       "justification": "List the files."}),
            );
        }
        let args: Vec<String> =
            ["--persist", "env", "--sandbox", "workspace-write", "--approve", "allowed-once", "batch"]
                .map(str::to_owned)
                .to_vec();
        let mut child = world.dsh(&args).stdin(Stdio::piped()).spawn().expect("spawn dsh-bash batch");
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write batch");
        let output = child.wait_with_output().expect("wait for dsh-bash batch");
        let answers: Vec<Outcome> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| Outcome::from_value(&serde_json::from_str(line).expect("a JSON response line")))
            .collect();
        assert_eq!(answers.len(), 9, "{output:?}");
        let fake = world.ws.canonicalize().expect("canonical").join("fake/ls");
        assert_eq!(answers[1].ok(), "function\nls\n", "the function carries into a confined call");
        assert!(answers[7].ok().ends_with(&format!("{}\n", fake.display())), "{:#?}", answers[7]);
        for (i, (session, _)) in plants.iter().enumerate() {
            let escalated = &answers[i * 3 + 2];
            assert!(!escalated.is_error && escalated.exit_code == Some(0), "{session}: {escalated:#?}");
        }
        let planted = world.host_sh(&format!("ls -A {}", q(&outside)));
        assert_eq!(planted, "", "an escalated `ls` ran what a confined call left");
        Ok(())
    });
}

#[test]
fn a_generated_http_token_is_never_printed_and_confined_commands_cannot_read_it() {
    over_matrix("a_generated_http_token_is_never_printed_and_confined_commands_cannot_read_it", |world| {
        let args: Vec<String> =
            ["--sandbox", "workspace-write", "mcp", "--http", "127.0.0.1:0"].map(str::to_owned).to_vec();
        let mut child = world.dsh(&args).spawn().expect("spawn dsh-bash mcp --http");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut start = String::new();
        stderr.read_line(&mut start).expect("the start line");
        let authority = dsh_test_support::http::start_line_authority(&start)
            .unwrap_or_else(|| panic!("not a start line: {start:?}"));
        let dir = world.dsh_home().join("mcp");
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("no token directory {}: {e} (start line {start:?})", dir.display()))
            .map(|entry| entry.expect("entry").path())
            .collect();
        assert_eq!(files.len(), 1, "one token file: {files:?}");
        let file = &files[0];
        let token = std::fs::read_to_string(file).expect("read the token file").trim().to_owned();
        assert_eq!(token.len(), 64, "256 bits in hex: {token}");
        assert!(start.contains(&file.display().to_string()), "the start line names the file: {start:?}");
        let (uid, _) = world.cell.user.ids();
        let meta = std::fs::metadata(file).expect("stat the token file");
        assert_eq!((meta.mode() & 0o777, meta.uid()), (0o600, uid), "{}", file.display());
        let dir_meta = std::fs::metadata(&dir).expect("stat the token directory");
        assert_eq!((dir_meta.permissions().mode() & 0o777, dir_meta.uid()), (0o700, uid));

        let mut conn = dsh_test_support::http::Conn::open(&authority, &token, Duration::from_secs(120))
            .expect("connect");
        let session = conn.open_session("test").expect("a session with the token");
        let command =
            format!("cat {f}; cat {d}/*; ls {d}; echo ran", f = q(file.display()), d = q(dir.display()));
        let reply = conn
            .call(&session, 1, "bash", json!({"command": command, "description": "d"}))
            .expect("the call");
        let result = reply.response(1).unwrap_or_else(|| panic!("no response: {}", reply.body));
        let text = result["result"]["content"][0]["text"].as_str().expect("text").to_owned();
        assert!(text.contains("ran\n"), "the command did not run: {text}");
        assert!(!text.contains(&token), "a confined command read the token: {text}");
        assert!(text.contains("Permission denied"), "{text}");
        drop(conn);

        // The server itself, not `runuser` above it (which ends by its own signal).
        let server = match world.cell.user {
            User::Root => child.id(),
            User::Nobody => {
                let pid = child.id();
                let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                    .expect("runuser's children");
                children.split_whitespace().next().expect("runuser runs the server").parse().expect("a pid")
            }
        };
        let killed = Command::new("kill").args(["-TERM", &server.to_string()]).status().expect("kill");
        assert!(killed.success());
        let mut rest = String::new();
        stderr.read_to_string(&mut rest).expect("the rest of stderr");
        assert!(child.wait().expect("wait").success());
        assert!(!start.contains(&token) && !rest.contains(&token), "the token was printed: {start}{rest}");
        assert!(!file.exists(), "the token file goes with the server that wrote it");
        Ok(())
    });
}
