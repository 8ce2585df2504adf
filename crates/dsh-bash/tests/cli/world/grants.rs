//! Scoped approvals: an answer grants its command prefix (at the mode asked) once, for the
//! session or always. A `session` grant is not asked again in its session and is asked again
//! in the next; an `always` grant is saved in `<DSH_HOME>/policy.toml` and survives a restart;
//! a managed policy file's rule overrides it; a project file cannot widen what the user allows;
//! a confined command cannot write the user's policy file; and every grant is in the audit log.
//! Over MCP elicitation (a raw client that answers with a scope) and over `--approve tty`.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use super::cell::World;
use super::host::q;
use super::matrix::over_matrix;

/// The managed policy file of a world (absent until a test writes it).
fn managed(world: &World) -> PathBuf {
    world.outside.join("managed-policy.toml")
}

/// The arguments of a call that asks to run `command` under `workspace-write`.
fn escalation(command: &str) -> Value {
    json!({
        "command": command,
        "description": "d",
        "sandbox_permissions": "workspace-write",
        "justification": "It writes a file.",
    })
}

/// A raw MCP client of `dsh-bash --sandbox read-only mcp` that declares form elicitation.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Client {
    fn start(world: &World) -> Client {
        let args: Vec<String> = ["--sandbox", "read-only", "mcp"].map(str::to_owned).to_vec();
        let mut command = world.dsh(&args);
        command.env("DSH_MANAGED_POLICY", managed(world)).stdin(Stdio::piped());
        let mut child = command.spawn().expect("spawn dsh-bash mcp");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut client = Client { child, stdin, stdout, next: 1 };
        client.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "test", "version": "0"}}}));
        client.read_until(|m| m["id"] == json!(0));
        client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin.as_mut().expect("stdin"), "{message}").expect("write the server");
    }

    fn read_until(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        loop {
            let mut line = String::new();
            assert_ne!(
                self.stdout.read_line(&mut line).expect("read the server"),
                0,
                "the server ended early"
            );
            let message: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
            if wanted(&message) {
                return message;
            }
        }
    }

    /// Calls `bash` with `args`; every elicitation on the way is answered with `answer` (the
    /// `result` of the response). Returns the questions asked and the call's result.
    fn call(&mut self, args: Value, answer: Value) -> (Vec<Value>, Value) {
        let id = self.next;
        self.next += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": args}}));
        let mut asked = Vec::new();
        loop {
            let message = self.read_until(|m| {
                m["method"] == json!("elicitation/create")
                    || (m["id"] == json!(id) && m.get("method").is_none())
            });
            if message["method"] == json!("elicitation/create") {
                self.send(json!({"jsonrpc": "2.0", "id": message["id"], "result": answer}));
                asked.push(message["params"].clone());
                continue;
            }
            return (asked, message["result"].clone());
        }
    }

    fn stop(mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().expect("wait").success());
    }
}

fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

fn accept(scope: &str) -> Value {
    json!({"action": "accept", "content": {"scope": scope}})
}

fn decline() -> Value {
    json!({"action": "decline"})
}

/// Every line of the world's audit log.
fn audit(world: &World) -> Vec<Value> {
    let text = std::fs::read_to_string(world.dsh_home().join("audit.jsonl")).unwrap_or_default();
    text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
}

const REJECTED: &str = "Error: the user rejected escalating this command to \"workspace-write\"";

#[test]
fn an_mcp_session_grant_is_not_asked_again_in_its_session_and_is_asked_in_the_next() {
    over_matrix("an_mcp_session_grant_is_not_asked_again_in_its_session_and_is_asked_in_the_next", |world| {
        let mut client = Client::start(world);
        let (asked, first) = client.call(escalation("touch granted-s"), accept("session"));
        assert_eq!(asked.len(), 1, "{asked:?}");
        let scope = &asked[0]["requestedSchema"]["properties"]["scope"];
        assert_eq!(scope["enum"], json!(["once", "session", "always"]), "{asked:?}");
        assert_eq!(scope["default"], json!("once"), "{asked:?}");
        assert_ne!(first["isError"], json!(true), "{first}");
        assert!(world.ws.join("granted-s").exists(), "the granted call ran");
        std::fs::remove_file(world.ws.join("granted-s")).expect("rm");
        // The same session: not asked again.
        let (asked, again) = client.call(escalation("touch granted-s"), decline());
        assert!(asked.is_empty(), "a session grant was asked again: {asked:?}");
        assert_ne!(again["isError"], json!(true), "{again}");
        assert!(world.ws.join("granted-s").exists(), "the call the grant covers ran");
        // Another command is not covered.
        let (asked, other) = client.call(escalation("touch other"), decline());
        assert_eq!((asked.len(), text(&other).as_str()), (1, REJECTED), "{asked:?}");
        client.stop();
        // A new session: asked again.
        let mut client = Client::start(world);
        let (asked, next) = client.call(escalation("touch granted-s"), decline());
        assert_eq!(asked.len(), 1, "a session grant outlived its session");
        assert_eq!(text(&next), REJECTED);
        client.stop();
        assert!(!world.dsh_home().join("policy.toml").exists(), "a session grant was saved");
        let granted: Vec<Value> =
            audit(world).into_iter().filter(|l| l["what"].get("scope").is_some()).collect();
        assert_eq!(granted.len(), 1, "{granted:?}");
        assert_eq!(granted[0]["what"]["scope"], json!("session"));
        assert_eq!(granted[0]["what"]["grant"], json!("command \"touch granted-s\" at workspace-write"));
        assert_eq!(granted[0]["verdict"], json!("allowed-once"));
        Ok(())
    });
}

#[test]
fn an_mcp_always_grant_survives_a_restart_a_managed_rule_overrides_it_and_a_project_file_cannot_widen() {
    over_matrix(
        "an_mcp_always_grant_survives_a_restart_a_managed_rule_overrides_it_and_a_project_file_cannot_widen",
        |world| {
            let mut client = Client::start(world);
            let (asked, first) = client.call(escalation("touch always"), accept("always"));
            assert_eq!(asked.len(), 1, "{asked:?}");
            assert_ne!(first["isError"], json!(true), "{first}");
            client.stop();
            let saved =
                std::fs::read_to_string(world.dsh_home().join("policy.toml")).expect("the user's policy");
            assert!(saved.contains("command = \"touch always\"\nmode = \"workspace-write\""), "{saved}");

            // After a restart: not asked.
            let mut client = Client::start(world);
            let (asked, again) = client.call(escalation("touch always"), decline());
            assert!(asked.is_empty(), "an always grant was asked again after a restart: {asked:?}");
            assert_ne!(again["isError"], json!(true), "{again}");
            client.stop();

            // A project file's allow rule does not widen; its `grants = []` narrows (the saved
            // grant no longer counts, and no lasting scope is offered).
            let project = world.write(
                ".dsh-policy.toml",
                "grants = []\n\n[[allow]]\ncommand = \"touch project\"\nmode = \"danger-full-access\"\n",
            );
            let mut client = Client::start(world);
            let (asked, widened) = client.call(escalation("touch project"), accept("always"));
            assert_eq!(asked.len(), 1, "a project file's allow rule was honoured");
            assert_eq!(asked[0]["requestedSchema"]["properties"].get("scope"), None, "{asked:?}");
            assert_ne!(widened["isError"], json!(true), "accepted once: {widened}");
            let (asked, _) = client.call(escalation("touch always"), decline());
            assert_eq!(asked.len(), 1, "the project file did not narrow the saved grant");
            client.stop();
            std::fs::remove_file(&project).expect("rm project file");
            let saved_now = std::fs::read_to_string(world.dsh_home().join("policy.toml")).expect("policy");
            assert_eq!(saved_now, saved, "a grant was saved while the project file forbade it");

            // A managed deny rule overrides the saved grant: refused without asking.
            std::fs::write(managed(world), "[[deny]]\ncommand = \"touch\"\n").expect("write managed");
            world.give(&managed(world));
            let mut client = Client::start(world);
            let (asked, denied) = client.call(escalation("touch always"), accept("once"));
            assert!(asked.is_empty(), "a managed deny rule still asked: {asked:?}");
            assert_eq!(text(&denied), REJECTED);
            client.stop();
            let ruled = audit(world).into_iter().find(|l| {
                l["what"].get("rule").is_some_and(|r| {
                    r.as_str()
                        .is_some_and(|r| r.starts_with("managed ") && r.ends_with(": deny command \"touch\""))
                })
            });
            assert!(ruled.is_some_and(|l| l["verdict"] == json!("rejected")), "{:?}", audit(world));
            let always: Vec<Value> =
                audit(world).into_iter().filter(|l| l["what"]["scope"] == json!("always")).collect();
            assert_eq!(always.len(), 1, "{always:?}");

            // `doctor` shows each rule and where it came from.
            let doctor: Vec<String> = ["--sandbox", "workspace-write", "doctor"].map(str::to_owned).to_vec();
            let out = world.dsh(&doctor).env("DSH_MANAGED_POLICY", managed(world)).output().expect("doctor");
            let report = String::from_utf8_lossy(&out.stdout);
            assert!(report.contains("  deny command \"touch\" (from the managed file)\n"), "{out:?}");
            assert!(
                report.contains("  allow command \"touch always\" at workspace-write (from the user file)\n"),
                "{report}"
            );
            Ok(())
        },
    );
}

#[test]
fn a_confined_command_cannot_write_the_users_policy_file() {
    over_matrix("a_confined_command_cannot_write_the_users_policy_file", |world| {
        let policy = world.dsh_home().join("policy.toml");
        std::fs::write(&policy, "").expect("write policy");
        world.give(world.dsh_home());
        // The home is under a writable root (`--add-dir`), as `~/.dsh` is when the workspace
        // is the user's home.
        let attack = format!(
            "printf '[[allow]]\\ncommand = \"rm\"\\nmode = \"danger-full-access\"\\n' >> {p}; \
             mv {p} {p}.moved; ln -sf /dev/null {p}; true",
            p = q(policy.display())
        );
        let args: Vec<String> = vec![
            "--sandbox".into(),
            "workspace-write".into(),
            "--add-dir".into(),
            world.dsh_home().display().to_string(),
            "call".into(),
            "--json".into(),
            "bash".into(),
            json!({"command": attack, "description": "d"}).to_string(),
        ];
        let out = world.dsh(&args).output().expect("call");
        assert!(out.status.code().is_some(), "{out:?}");
        assert_eq!(std::fs::read_to_string(&policy).expect("policy still there"), "", "{out:?}");
        assert!(!world.dsh_home().join("policy.toml.moved").exists(), "{out:?}");
        Ok(())
    });
}

/// Runs `dsh-bash FLAGS batch < requests` on a terminal (util-linux `script`) whose input is
/// `typed`; returns what the terminal showed and the batch's responses.
fn batch_on_a_terminal(
    world: &World,
    flags: &[&str],
    requests: &[Value],
    typed: &str,
) -> (String, Vec<Value>) {
    let input = world.outside.join("requests.jsonl");
    let output = world.outside.join("responses.jsonl");
    let lines: String = requests.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&input, lines).expect("write requests");
    world.give(&world.outside);
    let mut args: Vec<String> = flags.iter().map(|s| (*s).to_owned()).collect();
    args.push("batch".into());
    let dsh = world.dsh(&args);
    let line = std::iter::once(dsh.get_program())
        .chain(dsh.get_args())
        .map(|word| q(word.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    let mut script = Command::new("script");
    script
        .args(["-qfec", &format!("{line} < {} > {}", q(input.display()), q(output.display())), "/dev/null"])
        .current_dir(&world.ws);
    for (name, value) in dsh.get_envs() {
        match value {
            Some(value) => script.env(name, value),
            None => script.env_remove(name),
        };
    }
    script.env("DSH_MANAGED_POLICY", managed(world));
    let mut child = script
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) must be installed");
    child.stdin.take().expect("stdin").write_all(typed.as_bytes()).expect("type");
    let shown = child.wait_with_output().expect("wait for script");
    let responses = std::fs::read_to_string(&output).unwrap_or_default();
    let responses = responses.lines().map(|l| serde_json::from_str(l).expect("a response line")).collect();
    (String::from_utf8_lossy(&shown.stdout).replace("\r\n", "\n"), responses)
}

fn is_ok(response: &Value) -> bool {
    response["isError"] != json!(true) && response["structured"]["exitCode"] == json!(0)
}

#[test]
fn a_terminal_session_grant_is_not_asked_again_in_its_session_and_is_asked_in_the_next() {
    over_matrix(
        "a_terminal_session_grant_is_not_asked_again_in_its_session_and_is_asked_in_the_next",
        |world| {
            let request = |session: &str, id: u64| {
                json!({"tool": "bash", "args": escalation("touch tty-granted"), "session": session,
                   "cwd": world.ws, "id": id})
            };
            let flags = ["--sandbox", "read-only", "--approve", "tty"];
            let (shown, responses) = batch_on_a_terminal(
                world,
                &flags,
                &[request("s1", 1), request("s1", 2), request("s2", 3)],
                "s\n",
            );
            assert_eq!(responses.len(), 3, "{shown:?} {responses:?}");
            let offer = "Allow once? [y/N] (or allow command \"touch tty-granted\" at workspace-write: \
                     s = for this session, a = always, saved in your policy file) ";
            assert_eq!(shown.matches(offer).count(), 2, "asked once per session: {shown:?}");
            assert!(is_ok(&responses[0]) && is_ok(&responses[1]), "{responses:?}");
            // The second session's question met the end of the terminal's input: cancelled.
            assert!(responses[2]["isError"] == json!(true), "{responses:?}");
            let granted: Vec<Value> =
                audit(world).into_iter().filter(|l| l["what"].get("scope").is_some()).collect();
            assert_eq!(granted.len(), 1, "{granted:?}");
            assert_eq!(
                (&granted[0]["session"], &granted[0]["what"]["scope"]),
                (&json!("s1"), &json!("session"))
            );
            Ok(())
        },
    );
}

#[test]
fn a_terminal_always_grant_survives_a_restart_unless_the_managed_file_forbids_it() {
    over_matrix("a_terminal_always_grant_survives_a_restart_unless_the_managed_file_forbids_it", |world| {
        let request = |session: &str| json!({"tool": "bash", "args": escalation("touch tty-always"), "session": session, "cwd": world.ws});
        let flags = ["--sandbox", "read-only", "--approve", "tty"];
        let (shown, responses) = batch_on_a_terminal(world, &flags, &[request("a1")], "a\n");
        assert!(responses.len() == 1 && is_ok(&responses[0]), "{shown:?} {responses:?}");
        let (shown, responses) = batch_on_a_terminal(world, &flags, &[request("a2")], "");
        assert!(!shown.contains("[approval]"), "asked after a restart: {shown:?}");
        assert!(responses.len() == 1 && is_ok(&responses[0]), "{responses:?}");
        // A managed file that allows no lasting grant: the saved one no longer counts, and
        // the question offers only once.
        std::fs::write(managed(world), "grants = []\n").expect("write managed");
        world.give(&managed(world));
        let (shown, responses) = batch_on_a_terminal(world, &flags, &[request("a3")], "a\n");
        assert!(shown.contains("\nAllow once? [y/N] ") && !shown.contains("(or allow"), "{shown:?}");
        assert!(responses.len() == 1 && responses[0]["isError"] == json!(true), "{responses:?}");
        Ok(())
    });
}
