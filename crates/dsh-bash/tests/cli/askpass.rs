//! Secrets asked of the user, never of the model (`--askpass`): a foreground command gets
//! `SUDO_ASKPASS`, `SSH_ASKPASS` (with `SSH_ASKPASS_REQUIRE=force`) and `GIT_ASKPASS`, all
//! naming one program; its prompt becomes a secret-input question of the approval service;
//! the answer reaches the program only — never the result, the spill file or the session
//! log, even when the command prints it. Without an answer the program fails at once.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Run, Sandbox, output};

const SECRET: &str = "hunter2-askpass-7c1e";
const MARKER: &str = "[redacted:askpass]";

/// `dsh-bash SWITCHES call --json --session s1 --cwd DIR bash {command}` in `sandbox`.
fn call(sandbox: &Sandbox, switches: &[&str], command: &str) -> Run {
    let args = json!({"command": command, "description": "Ask for a secret", "timeoutMs": 60000}).to_string();
    let cwd = sandbox.path().display().to_string();
    let mut all = switches.to_vec();
    all.extend(["call", "--json", "--session", "s1", "--cwd", &cwd, "bash", &args]);
    output(sandbox.command(&all), b"")
}

/// The first 16 hex digits of the SHA-256 of `text`, by the host's `sha256sum`.
fn digest(text: &str) -> String {
    let out = std::process::Command::new("bash")
        .args(["-c", "printf %s \"$1\" | sha256sum | cut -c1-16", "-", text])
        .output()
        .expect("sha256sum");
    String::from_utf8(out.stdout).expect("utf-8").trim().to_owned()
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// The session log's events of `kind`, their `data`.
fn events(sandbox: &Sandbox, kind: &str) -> Vec<Value> {
    let log = std::fs::read_to_string(sandbox.path().join("home/sessions/s1.jsonl")).expect("session log");
    log.lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
        .filter(|e| e["type"] == kind)
        .map(|e| e["data"].clone())
        .collect()
}

#[test]
fn askpass_gives_the_scripted_answer_to_the_program_and_records_it_nowhere() {
    let sandbox = Sandbox::new();
    let answer = sandbox.write("answer", &format!("{SECRET}\n"));
    let answer = answer.display().to_string();
    // The secret's digest, the secret echoed on both streams, and enough of it to spill.
    let command = r#"p=$("$SUDO_ASKPASS" "Password: "); echo "rc=$? digest=$(printf %s "$p" | sha256sum | cut -c1-16)"
[ "$GIT_ASKPASS" = "$SUDO_ASKPASS" ] && [ "$SSH_ASKPASS" = "$SUDO_ASKPASS" ] && echo "one program: $(basename "$SUDO_ASKPASS") $SSH_ASKPASS_REQUIRE"
echo "echoed: $p"; echo "to stderr: $p" >&2
for i in $(seq 1 20000); do echo "line $i $p"; done"#;
    let out = call(&sandbox, &["--askpass", "--askpass-answer-file", &answer], command);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!out.stdout.contains(SECRET) && !out.stderr.contains(SECRET), "{out:?}");
    let line = &out.json_lines()[0];
    let stdout = &line["structured"]["stdout"];
    let spill = stdout["spillPath"].as_str().expect("the output spilled").to_owned();
    let spilled = std::fs::read_to_string(&spill).expect("spill file");
    assert!(
        spilled.starts_with(&format!("rc=0 digest={}\none program: dsh-askpass force\necho", digest(SECRET))),
        "{}",
        &spilled[..200.min(spilled.len())]
    );
    assert!(
        spilled.contains(&format!("\nechoed: {MARKER}\nline 1 {MARKER}\n")),
        "the echoed secret is redacted"
    );
    assert!(spilled.ends_with(&format!("line 20000 {MARKER}\n")));
    assert!(!spilled.contains(SECRET), "the spill file holds no secret");
    assert_eq!(line["structured"]["stderr"]["text"], json!(format!("to stderr: {MARKER}\n")));
    assert_eq!(files_containing(&sandbox.path().join("home"), SECRET), Vec::<String>::new());
    // The question is recorded with its prompt and outcome, never its answer.
    let asked = events(&sandbox, "approval/asked");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        (&asked[0]["toolName"], &asked[0]["kind"], &asked[0]["prompt"]),
        (&json!("bash"), &json!("secret"), &json!("Password: "))
    );
    assert_eq!(events(&sandbox, "approval/decided")[0]["outcome"], json!("allowed-once"));
    let _ = std::fs::remove_file(spill);
}

#[test]
fn without_an_answer_the_program_prints_nothing_and_fails_at_once() {
    let sandbox = Sandbox::new();
    let missing = sandbox.path().join("no-such-answer").display().to_string();
    let answer = sandbox.write("answer", SECRET).display().to_string();
    let command = r#"p=$("$SUDO_ASKPASS" "Password: "); echo "rc=$? got=[$p]""#;
    let cases: [(&[&str], &str); 5] = [
        (&["--askpass"], "no answerer"),
        (&["--askpass", "--approve", "allowed-once"], "consent is no secret"),
        (&["--askpass", "--askpass-answer-file", &missing], "an unreadable answer file"),
        (&["--askpass", "--askpass-answer-file", &answer, "--approval-policy", "never"], "policy never"),
        (&["--askpass", "--approve", "rejected"], "rejected"),
    ];
    for (switches, why) in cases {
        let started = Instant::now();
        let out = call(&sandbox, switches, command);
        assert_eq!(
            out.json_lines()[0]["structured"]["stdout"]["text"],
            json!("rc=1 got=[]\n"),
            "{why}: {out:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(20), "{why}: it failed fast, not at its timeout");
    }
    let outcomes: Vec<Value> =
        events(&sandbox, "approval/decided").iter().map(|d| d["outcome"].clone()).collect();
    assert_eq!(
        outcomes,
        [
            json!("unavailable"),
            json!("unavailable"),
            json!("unavailable"),
            json!("rejected"),
            json!("unavailable")
        ]
    );
    // Without a session (no agent to ask for) the program fails the same way.
    let args = json!({"command": command, "description": "d"}).to_string();
    let out = sandbox.run(&["--askpass", "call", "bash", &args], "");
    assert_eq!(out.stdout, "rc=1 got=[]\n", "{out:?}");
}

#[test]
fn the_program_is_the_askpass_program_only_through_its_link() {
    let sandbox = Sandbox::new();
    // Without the socket variable it has no one to ask: exit 1, nothing on stdout.
    let link = sandbox.path().join("dsh-askpass");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_dsh-bash"), &link).expect("link");
    let mut program = std::process::Command::new(&link);
    program.arg("Password: ").env_remove("DSH_ASKPASS_SOCKET");
    let out = output(program, b"");
    assert_eq!((out.code, out.stdout.as_str()), (Some(1), ""), "{out:?}");
    assert_eq!(out.stderr, "dsh-askpass: DSH_ASKPASS_SOCKET is not set: no one to ask\n");
}

#[test]
fn askpass_is_off_by_default_and_changes_no_schema_or_prompt() {
    let sandbox = Sandbox::new();
    let command = "env | grep -c -e ASKPASS -e DSH_ASKPASS_SOCKET; true";
    let out = call(&sandbox, &[], command);
    assert_eq!(out.json_lines()[0]["structured"]["stdout"]["text"], json!("0\n"), "{out:?}");
    let on = call(&sandbox, &["--askpass"], "env | grep -c -e ASKPASS -e DSH_ASKPASS_SOCKET");
    assert_eq!(on.json_lines()[0]["structured"]["stdout"]["text"], json!("5\n"), "{on:?}");
    for what in [&["schema"][..], &["prompt"][..]] {
        let off = sandbox.run(what, "");
        let mut switches = vec!["--askpass"];
        switches.extend(what);
        let on = sandbox.run(&switches, "");
        assert_eq!((off.code, on.code), (Some(0), Some(0)), "{what:?}");
        assert_eq!(on.stdout, off.stdout, "{what:?} is byte-identical with --askpass");
    }
}

#[test]
fn the_terminal_answerer_reads_the_secret_without_echo() {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    let sandbox = Sandbox::new();
    let cwd = sandbox.path().display().to_string();
    let args = json!({
        "command": r#"p=$("$SUDO_ASKPASS" "Password: "); echo "digest=$(printf %s "$p" | sha256sum | cut -c1-16)""#,
        "description": "d",
    })
    .to_string();
    let mut line = crate::harness::shell_quote(env!("CARGO_BIN_EXE_dsh-bash"));
    for arg in
        ["--askpass", "--approve", "tty", "call", "-q", "--session", "s1", "--cwd", &cwd, "bash", &args]
    {
        line.push(' ');
        line.push_str(&crate::harness::shell_quote(arg));
    }
    // util-linux `script` gives dsh-bash a terminal and forwards our stdin to it.
    let mut child = Command::new("script")
        .args(["-qfec", &line, "/dev/null"])
        .env("DSH_HOME", sandbox.path().join("home"))
        .current_dir(sandbox.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) must be installed");
    let mut screen = child.stdout.take().expect("stdout");
    let mut shown = Vec::new();
    let question = b"end of input refuses): ";
    // Types only once the question is on the terminal (echo is off by then).
    while !shown.windows(question.len()).any(|w| w == question) {
        let mut byte = [0u8; 1];
        assert_eq!(
            screen.read(&mut byte).expect("read the terminal"),
            1,
            "{}",
            String::from_utf8_lossy(&shown)
        );
        shown.push(byte[0]);
    }
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(format!("{SECRET}\n").as_bytes()).expect("type the secret");
    screen.read_to_end(&mut shown).expect("read the rest");
    drop(stdin);
    assert!(child.wait().expect("wait").success());
    let shown = String::from_utf8_lossy(&shown).replace("\r\n", "\n");
    assert_eq!(
        shown,
        format!(
            "\n[askpass] session s1: a command run by tool \"bash\" asks for a secret.\n\
             Its prompt (the command's own words): Password: \n\
             Type it for the command only (not echoed, never shown to the model; end of input refuses): \n\
             \ndigest={}\n",
            digest(SECRET)
        ),
        "the secret was not echoed"
    );
}

#[test]
fn a_secret_printed_later_by_a_background_job_is_redacted_in_its_reads() {
    let sandbox = Sandbox::new();
    let answer = sandbox.write("answer", SECRET).display().to_string();
    let cwd = sandbox.path().display().to_string();
    let line = |tool: &str, args: Value| {
        json!({"tool": tool, "args": args, "session": "s1", "cwd": cwd}).to_string()
    };
    let input = [
        line(
            "bash",
            json!({"command": "\"$SUDO_ASKPASS\" 'Password: ' > kept; echo stored", "description": "d"}),
        ),
        line(
            "bash",
            json!({"command": "sleep 0.2; cat kept", "description": "d", "run_in_background": true}),
        ),
        line("job_output", json!({"job_id": "bash-1", "wait": true})),
    ]
    .join("\n");
    let out = sandbox.run(&["--askpass", "--askpass-answer-file", &answer, "batch"], &format!("{input}\n"));
    assert!(!out.stdout.contains(SECRET), "{out:?}");
    let texts: Vec<String> = out
        .json_lines()
        .iter()
        .map(|l| l["content"][0]["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(texts[0], "stored\n");
    assert_eq!(texts[2], format!("{MARKER}\n[status: completed, exit code: 0]"), "{texts:?}");
    assert_eq!(files_containing(&sandbox.path().join("home"), SECRET), Vec::<String>::new());
}
