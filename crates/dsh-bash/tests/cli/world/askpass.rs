//! Askpass from inside the world: a confined command (workspace-write, also in its own
//! network namespace under `--network deny`) reaches its call's askpass socket and gets the
//! scripted answer, but cannot read the answer file, replace the program or add anything to
//! its directory; the secret appears nowhere the harness writes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dsh_test_support::http::Conn;
use serde_json::json;

use super::cell::{Mode, Outcome, World};
use super::host::{self, q};
use super::matrix::{Skip, over_matrix};
use super::sessions::{HttpServer, reply_text};

const SECRET: &str = "w0rld-askpass-secret-5d2";
const MARKER: &str = "[redacted:askpass]";

#[test]
fn a_confined_command_gets_its_answer_and_nothing_else_of_the_route() {
    over_matrix("a_confined_command_gets_its_answer_and_nothing_else_of_the_route", |world| {
        answered(world, None)
    });
}

/// The `dsh-bash` installed below `/tmp` that [`the_helper_is_reachable_when_the_binary_lives_under_tmp`]
/// runs (the attack is a plain function, so it reads the path from here).
static BINARY_UNDER_TMP: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The same route with `dsh-bash` installed in a directory below `/tmp` (a checkout there):
/// the askpass variables name a link to that binary, which a confined command's private
/// `/tmp` would hide.
#[test]
fn the_helper_is_reachable_when_the_binary_lives_under_tmp() {
    let dir = tempfile::Builder::new().prefix("dsh-world-bin-").tempdir_in("/tmp").expect("tempdir in /tmp");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let binary = dir.path().join("dsh-bash");
    let built = host::binary_for(super::cell::User::Root);
    // A hard link where the filesystem allows it (no copy of a large debug build), else a copy.
    if std::fs::hard_link(&built, &binary).is_err() {
        std::fs::copy(&built, &binary).expect("copy dsh-bash below /tmp");
    }
    *BINARY_UNDER_TMP.lock().expect("lock") = Some(binary);
    over_matrix("the_helper_is_reachable_when_the_binary_lives_under_tmp", |world| {
        let binary = BINARY_UNDER_TMP.lock().expect("lock").clone().expect("the binary below /tmp");
        answered(world, Some(&binary))
    });
    *BINARY_UNDER_TMP.lock().expect("lock") = None;
}

/// Two MCP sessions of one HTTP server with askpass: while a call of session `a` runs (its
/// askpass socket open), a command of session `b` looks for askpass sockets wherever its world
/// shows them: it finds its own call's only (else it could ask `a`'s user through `a`'s).
#[test]
fn a_session_cannot_reach_another_sessions_askpass_socket() {
    over_matrix("a_session_cannot_reach_another_sessions_askpass_socket", |world| {
        let base = world.ws.parent().expect("the workspace has a parent").to_path_buf();
        let answer = base.join("askpass-answer");
        std::fs::write(&answer, format!("{SECRET}\n")).expect("write the answer file");
        world.give(&answer);
        let token = host::unique("token");
        let token_file = world.outside.join("mcp-token");
        std::fs::write(&token_file, format!("{token}\n")).expect("write the token file");
        world.give(&token_file);
        let answer_file = answer.display().to_string();
        let server =
            HttpServer::start(world, &token_file, &["--askpass", "--askpass-answer-file", &answer_file]);
        let patience = std::time::Duration::from_secs(120);
        let mut a = Conn::open(&server.authority, &token, patience).expect("connect a");
        let mut b = Conn::open(&server.authority, &token, patience).expect("connect b");
        let session_a = a.open_session("a").expect("session a");
        let session_b = b.open_session("b").expect("session b");
        // `a` keeps its call (and socket) open until `b` has looked, for a minute at most.
        let holding = "touch a-started; for i in $(seq 1 1200); do [ -e b-looked ] && break; sleep 0.05; done; echo a-done";
        let a_call = std::thread::spawn(move || {
            let args = json!({"command": holding, "description": "d"});
            reply_text(&a.call(&session_a, 1, "bash", args).expect("tools/call a"), 1)
        });
        let looking = r#"trap 'touch b-looked' EXIT
for i in $(seq 1 1200); do [ -e a-started ] && break; sleep 0.05; done
[ -S "$DSH_ASKPASS_SOCKET" ] && echo own-socket
for s in $(find / -xdev -type s -name '*.sock' 2>/dev/null); do [ "$s" = "$DSH_ASKPASS_SOCKET" ] || echo "FOREIGN $s"; done
echo looked"#;
        let args = json!({"command": looking, "description": "d"});
        let looked = reply_text(&b.call(&session_b, 2, "bash", args).expect("tools/call b"), 2);
        let held = a_call.join().expect("session a's call");
        assert!(held.contains("a-done"), "session a's call: {held}");
        assert!(looked.contains("own-socket\n") && looked.contains("looked\n"), "session b's call: {looked}");
        assert!(!looked.contains("FOREIGN"), "session b found another call's askpass socket: {looked}");
        drop(server);
        Ok(())
    });
}

/// A confined command asks through `$SUDO_ASKPASS` and gets the scripted answer (redacted in
/// its output), and nothing else of the route; `binary` runs instead of the built one.
fn answered(world: &World, binary: Option<&Path>) -> Result<(), Skip> {
    // Outside the workspace: denied reads do not apply inside a writable root.
    let base = world.ws.parent().expect("the workspace has a parent").to_path_buf();
    let answer = base.join("askpass-answer");
    std::fs::write(&answer, format!("{SECRET}\n")).expect("write the answer file");
    world.give(&answer);
    let command = format!(
        r#"p=$("$SUDO_ASKPASS" "Password: "); echo "rc=$? echoed=$p"
dir=$(dirname "$SUDO_ASKPASS")
cat {answer} 2>/dev/null || echo "answer file refused"
ln -sf /bin/true "$SUDO_ASKPASS" 2>/dev/null || echo "program kept"
touch "$dir/planted" 2>/dev/null || echo "directory kept""#,
        answer = q(answer.display())
    );
    let expected = format!("rc=0 echoed={MARKER}\nanswer file refused\nprogram kept\ndirectory kept\n");
    for network in ["allow", "deny"] {
        let mut args: Vec<String> = vec![
            "--askpass".into(),
            "--askpass-answer-file".into(),
            answer.display().to_string(),
            "--network".into(),
            network.into(),
        ];
        args.extend(world.call_args(Mode::WorkspaceWrite, Some("s1"), &command));
        let mut run = match binary {
            Some(binary) => world.dsh_binary(binary, &args, None),
            None => world.dsh(&args),
        };
        let output = run.output().expect("spawn dsh-bash");
        let out = Outcome::parse(&output);
        assert_eq!(out.ok(), expected, "--network {network}: {out:#?}");
    }
    let leaked =
        world.host_sh(&format!("grep -rl -- {} {} || true", q(SECRET), q(world.dsh_home().display())));
    assert_eq!(leaked, "", "the secret is in no file of DSH_HOME");
    Ok(())
}
