//! The command line the remote account's shell runs for one [`RemoteExecSpec`].
//!
//! SSH carries one string, which the remote login shell (`$SHELL -c`) parses. Every piece of
//! the spec goes into it as one single-quoted word, so no argument, directory or value can
//! become shell syntax there:
//!
//! ```text
//! cd -- '<cwd>' && exec env -u SSH_CLIENT -u SSH2_CLIENT -- 'K=V' … '<argv0>' '<argv1>' …
//! ```
//!
//! The remote login shell must be a POSIX shell (sh, dash, bash, zsh, ksh).
//!
//! `SSH_CLIENT` (and the old `SSH2_CLIENT`) are taken from the program's environment: with
//! them, every non-interactive `bash` the program starts concludes that `sshd` started it
//! and reads `~/.bashrc`, which a local `bash -c` never does (and which may print, or take
//! long). `SSH_CONNECTION` stays for programs that want to know where the call came from.

use dsh_shell_remote::{RemoteError, RemoteExecSpec};

/// The remote command line for `spec`, or why it cannot be written safely.
pub fn remote_command_line(spec: &RemoteExecSpec) -> Result<String, RemoteError> {
    let refuse = |why: String| RemoteError::Failed(format!("cannot run over SSH: {why}"));
    let Some(program) = spec.argv.first() else {
        return Err(refuse("no program to run (empty argv)".to_owned()));
    };
    // `env` would take a program name with '=' for one more variable.
    if program.contains('=') {
        return Err(refuse(format!("the program name {program:?} contains '='")));
    }
    let mut words = Vec::with_capacity(spec.argv.len() + spec.env.len() + 6);
    if let Some(cwd) = &spec.cwd {
        let Some(cwd) = cwd.to_str() else {
            return Err(refuse(format!("the working directory {} is not valid UTF-8", cwd.display())));
        };
        words.extend([
            "cd".to_owned(),
            "--".to_owned(),
            quote(cwd, "the working directory")?,
            "&&".to_owned(),
        ]);
    }
    words.extend(["exec", "env", "-u", "SSH_CLIENT", "-u", "SSH2_CLIENT", "--"].map(str::to_owned));
    for (name, value) in &spec.env {
        if !is_variable_name(name) {
            return Err(refuse(format!("{name:?} is not an environment variable name")));
        }
        words.push(quote(&format!("{name}={value}"), name)?);
    }
    for arg in &spec.argv {
        words.push(quote(arg, "an argument")?);
    }
    Ok(words.join(" "))
}

/// `text` as one shell word; `what` names it when it cannot be (a NUL byte).
fn quote(text: &str, what: &str) -> Result<String, RemoteError> {
    shlex::try_quote(text)
        .map(|word| word.into_owned())
        .map_err(|_| RemoteError::Failed(format!("cannot run over SSH: {what} contains a NUL byte")))
}

/// `[A-Za-z_][A-Za-z0-9_]*`: what `env` and every shell take for a variable name.
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;

    fn spec(argv: &[&str]) -> RemoteExecSpec {
        RemoteExecSpec { argv: argv.iter().map(|a| (*a).to_owned()).collect(), ..Default::default() }
    }

    #[test]
    fn writes_cwd_env_and_argv_as_single_words() {
        let spec = RemoteExecSpec {
            cwd: Some(PathBuf::from("/srv/my dir")),
            env: BTreeMap::from([("A".to_owned(), "1 2".to_owned()), ("B".to_owned(), String::new())]),
            ..spec(&["bash", "-c", "echo $A"])
        };
        assert_eq!(
            remote_command_line(&spec).expect("written"),
            "cd -- '/srv/my dir' && exec env -u SSH_CLIENT -u SSH2_CLIENT -- 'A=1 2' 'B=' bash -c 'echo $A'"
        );
        assert_eq!(
            remote_command_line(&self::spec(&["true"])).expect("written"),
            "exec env -u SSH_CLIENT -u SSH2_CLIENT -- true"
        );
    }

    #[test]
    fn refuses_what_it_cannot_write_safely() {
        let refused = |spec: RemoteExecSpec| remote_command_line(&spec).expect_err("refused").to_string();
        assert_eq!(refused(spec(&[])), "cannot run over SSH: no program to run (empty argv)");
        assert_eq!(refused(spec(&["A=1"])), "cannot run over SSH: the program name \"A=1\" contains '='");
        assert_eq!(refused(spec(&["echo", "a\0b"])), "cannot run over SSH: an argument contains a NUL byte");
        let env = BTreeMap::from([("A;id".to_owned(), "x".to_owned())]);
        assert_eq!(
            refused(RemoteExecSpec { env, ..spec(&["true"]) }),
            "cannot run over SSH: \"A;id\" is not an environment variable name"
        );
    }
}
