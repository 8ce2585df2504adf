//! The session log is opened once per session: a command that moves it aside and plants a
//! symlink at its path cannot redirect the harness's later appends, and a later process
//! refuses to open the planted symlink.

use serde_json::json;

use crate::harness::scratch_outside_tmp;
use crate::harness_writes_support::{Batch, dsh_bash, text};

#[test]
fn a_symlink_planted_at_the_session_log_never_receives_events() {
    let scratch = scratch_outside_tmp();
    let d = std::fs::canonicalize(scratch.path()).expect("canonical");
    let elsewhere = scratch_outside_tmp();
    let victim = elsewhere.path().join("victim");
    std::fs::write(&victim, "precious").expect("victim");
    let log = d.join("home/sessions/s.jsonl");
    let cwd = d.to_str().expect("utf-8");
    let plant = format!(
        r#"mv "$DSH_SESSION_JSONL" "$DSH_SESSION_JSONL.moved" && ln -s '{}' "$DSH_SESSION_JSONL" && echo planted"#,
        victim.display()
    );

    let mut batch = Batch::start(dsh_bash(&d, &["batch"]));
    let args = json!({"command": plant, "description": "Plant a symlink at the session log"});
    let planted = batch.call(&json!({"tool": "bash", "args": args, "session": "s", "cwd": cwd, "id": 1}));
    assert_eq!(text(&planted), "planted\n", "{planted}");
    let args = json!({"command": "true", "description": "Nothing"});
    let next = batch.call(&json!({"tool": "bash", "args": args, "session": "s", "id": 2}));
    assert_eq!(next["isError"], json!(false), "{next}");
    assert_eq!(batch.finish(), Some(0));

    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "precious");
    assert!(std::fs::symlink_metadata(&log).expect("planted").file_type().is_symlink());
    let moved = std::fs::read_to_string(d.join("home/sessions/s.jsonl.moved")).expect("the log");
    let kinds: Vec<String> = moved
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["type"]
                .as_str()
                .expect("type")
                .to_owned()
        })
        .collect();
    assert_eq!(kinds, ["session/header", "turn/start", "turn/end", "turn/start", "turn/end"]);

    // A later process for the same session refuses the planted symlink.
    let out = dsh_bash(
        &d,
        &["call", "--session", "s", "--cwd", cwd, "bash", r#"{"command":"true","description":"d"}"#],
    )
    .output()
    .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("dsh-bash: session log {}: Too many levels of symbolic links (os error 40)\n", log.display())
    );
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "precious");
}
