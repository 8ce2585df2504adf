//! Askpass from inside the world: a confined command (workspace-write, also in its own
//! network namespace under `--network deny`) reaches its call's askpass socket and gets the
//! scripted answer, but cannot read the answer file, replace the program or add anything to
//! its directory; the secret appears nowhere the harness writes.

use super::cell::{Mode, Outcome};
use super::host::q;
use super::matrix::over_matrix;

const SECRET: &str = "w0rld-askpass-secret-5d2";
const MARKER: &str = "[redacted:askpass]";

#[test]
fn a_confined_command_gets_its_answer_and_nothing_else_of_the_route() {
    over_matrix("a_confined_command_gets_its_answer_and_nothing_else_of_the_route", |world| {
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
            let output = world.dsh(&args).output().expect("spawn dsh-bash");
            let out = Outcome::parse(&output);
            assert_eq!(out.ok(), expected, "--network {network}: {out:#?}");
        }
        let leaked =
            world.host_sh(&format!("grep -rl -- {} {} || true", q(SECRET), q(world.dsh_home().display())));
        assert_eq!(leaked, "", "the secret is in no file of DSH_HOME");
        Ok(())
    });
}
