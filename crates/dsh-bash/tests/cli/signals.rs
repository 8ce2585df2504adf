//! A command's signals are its own: none that the harness ignores stays ignored in it. A
//! harness started in the background by a shell ignores SIGINT and SIGQUIT, one started under
//! `nohup` SIGHUP; a signal ignored when bash starts can be neither trapped nor delivered, so
//! the command could not be interrupted.

use std::process::Command;

use serde_json::json;

use crate::harness::{Sandbox, modes, output};

#[test]
fn a_command_traps_the_signals_its_harness_ignores() {
    let sandbox = Sandbox::outside_tmp();
    let script = r#"for s in INT QUIT HUP TERM; do trap "echo caught $s" $s; kill -s $s $$; done; echo done"#;
    let args = json!({"command": script, "description": "Trap signals"}).to_string();
    for switches in modes() {
        let mut full = switches.clone();
        full.extend(["call", "bash", &args]);
        let plain = sandbox.command(&full);
        // The harness as a shell's background job under `nohup` would start it.
        let mut command = Command::new("bash");
        command
            .args(["-c", r#"trap '' INT QUIT HUP TERM; exec "$0" "$@""#])
            .arg(plain.get_program())
            .args(plain.get_args())
            .envs(plain.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
            .current_dir(sandbox.path());
        let out = output(command, b"");
        assert_eq!(out.code, Some(0), "{switches:?}: {out:?}");
        assert_eq!(out.stdout, "caught INT\ncaught QUIT\ncaught HUP\ncaught TERM\ndone\n", "{switches:?}");
    }
}
