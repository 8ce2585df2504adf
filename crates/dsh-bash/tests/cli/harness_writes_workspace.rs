//! A session's workspace root is pinned when the session is first resolved: if a parent of
//! the root is renamed and a symlink planted at its path, the next call of the same session
//! fails closed instead of being confined to (and writing into) the symlink's target.

use serde_json::json;

use crate::harness::confining_host;
use crate::harness::scratch_outside_tmp;
use crate::harness_writes_support::{Batch, dsh_bash, text};

#[test]
fn a_workspace_swapped_for_a_symlink_mid_session_is_refused() {
    let scratch = scratch_outside_tmp();
    let d = std::fs::canonicalize(scratch.path()).expect("canonical");
    if !confining_host() {
        return;
    }
    let ws = d.join("t1/ws");
    std::fs::create_dir_all(&ws).expect("mkdir ws");
    std::fs::create_dir(d.join("elsewhere")).expect("mkdir elsewhere");
    let cwd = ws.to_str().expect("utf-8");
    let touch =
        |name: &str| json!({"command": format!("touch {name} && pwd"), "description": "Create a file"});

    let mut batch = Batch::start(dsh_bash(&d, &["--sandbox", "workspace-write", "batch"]));
    let first =
        batch.call(&json!({"tool": "bash", "args": touch("first"), "session": "s", "cwd": cwd, "id": 1}));
    assert_eq!(text(&first), format!("{cwd}\n"), "{first}");
    assert!(ws.join("first").exists());

    // What a command able to write the workspace's parent could do between two calls.
    std::fs::rename(d.join("t1"), d.join("t1_old")).expect("move the workspace's parent aside");
    std::fs::create_dir(d.join("t1")).expect("mkdir t1");
    std::os::unix::fs::symlink(d.join("elsewhere"), &ws).expect("plant the symlink");

    let second = batch.call(&json!({"tool": "bash", "args": touch("pwned"), "session": "s", "id": 2}));
    assert_eq!(second["isError"], json!(true), "{second}");
    let refused = text(&second);
    assert_eq!(
        refused,
        format!(
            "Error: the session's workspace root {} was moved or replaced since the session started; this session runs no more commands (start a new session)",
            d.join("t1/ws").display()
        )
    );
    assert!(!d.join("elsewhere/pwned").exists(), "written through the planted symlink");
    assert!(!d.join("t1_old/ws/pwned").exists());

    // A new session resolves the path as it is now.
    let other =
        batch.call(&json!({"tool": "bash", "args": touch("fresh"), "session": "s2", "cwd": cwd, "id": 3}));
    assert_eq!(text(&other), format!("{}\n", d.join("elsewhere").display()), "{other}");
    assert_eq!(batch.finish(), Some(0));
}
