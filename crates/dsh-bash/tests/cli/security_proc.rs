//! The harness's `/proc` files are closed to the commands it runs (it is non-dumpable), and
//! `$DSH_MCP_TOKEN` is gone from its environment block.

use std::os::unix::fs::MetadataExt;
use std::process::Command;

use crate::harness::{Sandbox, output};
use crate::mcp::{post_initialize, start_server};

/// `nobody`: an unprivileged user to run the harness as when the tests run as root.
const NOBODY: u32 = 65534;

/// `dsh-bash ARGS` as an unprivileged user: root reads every process's `/proc` files whatever
/// their dumpability, so as root the harness runs as `nobody` (through `setpriv`), with the
/// scratch directory handed over to it. `None` (after saying why) when that is not possible.
fn unprivileged(sandbox: &Sandbox, args: &[&str]) -> Option<Command> {
    let euid = std::fs::metadata("/proc/self").expect("/proc/self").uid();
    if euid != 0 {
        return Some(sandbox.command(args));
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipping: running as root and setpriv (util-linux) is missing");
        return None;
    }
    std::os::unix::fs::chown(sandbox.path(), Some(NOBODY), Some(NOBODY)).expect("chown scratch");
    let plain = sandbox.command(args);
    let mut command = Command::new("setpriv");
    command
        .args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups", "--"])
        .arg(plain.get_program())
        .args(plain.get_args())
        .envs(plain.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .env_remove("DSH_MCP_TOKEN")
        .env("HOME", sandbox.path())
        .current_dir(sandbox.path());
    Some(command)
}

#[test]
fn a_command_cannot_read_the_harness_environment_but_its_own() {
    let sandbox = Sandbox::new();
    // $PPID is the harness: its comm (still readable) says so.
    let script = r#"comm=$(cat /proc/$PPID/comm)
if err=$(cat /proc/$PPID/environ 2>&1 >/dev/null); then echo "$comm: environ readable"; else echo "$comm: ${err//$PPID/PPID}"; fi
cat /proc/$$/environ >/dev/null && echo "own environ readable""#;
    let args =
        serde_json::json!({"command": script, "description": "Read the harness environment"}).to_string();
    let Some(command) = unprivileged(&sandbox, &["call", "bash", &args]) else { return };
    let out = output(command, b"");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "dsh-bash: cat: /proc/PPID/environ: Permission denied\nown environ readable\n");
}

#[test]
fn the_server_environment_block_no_longer_holds_the_token() {
    let sandbox = Sandbox::new();
    let token = "env-token-4f1e9c";
    let (server, line) = start_server(&sandbox, &["--http", "0"], Some(token));
    let url = line.strip_prefix("dsh-bash: serving MCP at ").unwrap_or_else(|| panic!("{line}"));
    assert_eq!(post_initialize(url, Some(token)), 200, "the server took the token from the environment");
    // Root (or a CAP_SYS_PTRACE holder) may read the block; anyone else is refused.
    match std::fs::read(format!("/proc/{}/environ", server.id())) {
        Ok(block) => {
            let text = String::from_utf8_lossy(&block);
            assert!(!text.contains(token), "the token is still in the environment block");
            assert!(text.contains("DSH_HOME="), "the block is the server's: {text}");
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}"),
    }
    server.stop();
}
