//! Persistent shell state (opt-in, `persist = "cwd" | "env"`): what a session's shell ends with
//! — its working directory, and with `env` its exported variables and functions — is where the
//! session's next call starts.
//!
//! Every call still runs a fresh `bash -c`. The command is wrapped: a one-line prelude, on the
//! command's own first line (so its line numbers, `$0`, exit status and output bytes stay as
//! they were), reads the session's snapshot from a file handed over as an open descriptor
//! (`DSH_PERSIST_FD`, unset at once), evaluates it, and sets an `EXIT` trap that writes the
//! shell's final state back to the same descriptor. The trap runs on a normal end, on `exit N`
//! and on a terminating signal the shell catches (`SIGTERM`, `SIGINT`, `SIGHUP`); the shell's
//! exit status (or its signal) is left as it was. The harness reads the state back after the
//! command ended, keeps only well-formed names (never `DSH_*` or credential-shaped ones), and
//! stores it in `<DSH_HOME>/sessions/bash-state/<hex session id>` (directory `0700`, file `0600`;
//! the sandbox denies reads under `<DSH_HOME>/sessions`, and a confined command only ever sees
//! its own session's snapshot, through the descriptor). The harness never runs the snapshot
//! itself: it is only evaluated inside the command's own shell, so a command that forges its
//! own state only affects its own session.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_shell::SharedFile;
use schemars::JsonSchema;
use serde::Deserialize;

/// What carries over from one call of a session to the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Persist {
    /// Nothing: every call starts in the session's workspace with the harness's environment.
    #[default]
    None,
    /// The working directory the command's shell ended in.
    Cwd,
    /// The working directory, exported variables and shell functions.
    Env,
}

impl Persist {
    /// Whether anything carries over.
    pub fn is_on(self) -> bool {
        self != Persist::None
    }
}

/// The environment variable naming the state descriptor (unset by the prelude).
pub(crate) const FD_ENV: &str = "DSH_PERSIST_FD";

/// The most state read back from one command; larger state is not saved.
const STATE_CAP: u64 = 8 << 20;

/// Shell variables that are bash's own, or read-only, or the harness's: never carried.
const SHELL_OWN: [&str; 11] =
    ["PWD", "OLDPWD", "SHLVL", "_", "BASHOPTS", "SHELLOPTS", "EUID", "UID", "PPID", "BASHPID", "HOSTNAME"];

/// A session's carried state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub cwd: Option<String>,
    pub env: Vec<(String, String)>,
    pub functions: String,
}

/// The per-call part of persistence: the file shared with the command, and where the
/// command's final state is read from.
pub(crate) struct Call {
    file: Arc<File>,
    /// Where the command's shell starts writing (the snapshot's length).
    offset: u64,
    path: PathBuf,
    mode: Persist,
    /// The directory the snapshot returns to, when it returns to one.
    returns_to: Option<String>,
    /// For a call that started without the session's variables and functions (an escalated
    /// one): the state it started from, which what it hands back is laid over.
    base: Option<State>,
}

/// `<DSH_HOME>/sessions/bash-state/<hex of the session id>`.
fn state_path(dsh_home: &Path, session: &str) -> PathBuf {
    let name: String = session.bytes().map(|b| format!("{b:02x}")).collect();
    dsh_home.join("sessions").join("bash-state").join(name)
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Whether an exported variable carries over: a plain name, not bash's own, not managed
/// (`DSH_*`), not credential-shaped (the executor's scrub rule).
fn carries(name: &str, value: &str) -> bool {
    is_name(name)
        && !SHELL_OWN.contains(&name)
        && !name.starts_with("BASH_")
        && !dsh_subprocess::is_scrubbed(name.as_ref(), value.as_ref())
}

/// The command wrapped for `mode`: the prelude on its first line, the command verbatim.
pub(crate) fn wrap(command: &str, mode: Persist) -> String {
    let dump = match mode {
        Persist::Env => concat!(
            r#"{ builtin printf "cwd\0%s\0" "$PWD"; for __dsh_n in $(builtin compgen -e); do "#,
            r#"builtin printf "env\0%s\0%s\0" "$__dsh_n" "${!__dsh_n}"; done; "#,
            r#"builtin printf "fn\0%s\0end\0" "$(builtin declare -f)"; }"#
        ),
        _ => r#"builtin printf "cwd\0%s\0end\0" "$PWD""#,
    };
    let mut out = String::from(concat!(
        r#"__dsh_p=${DSH_PERSIST_FD-}; builtin unset DSH_PERSIST_FD; "#,
        r#"IFS= builtin read -r -d "" -u "$__dsh_p" __dsh_s; "#,
    ));
    if mode == Persist::Env {
        // What the command was started with: only what it changes carries over, so values the
        // harness sets per call (a proxy's port, the managed environment) stay fresh.
        out.push_str(concat!(
            r#"for __dsh_n in $(builtin compgen -e); do builtin printf "start\0%s\0%s\0" "#,
            r#""$__dsh_n" "${!__dsh_n}"; done >&"$__dsh_p" 2>/dev/null; builtin unset __dsh_n; "#,
        ));
    }
    out.push_str(concat!(
        r#"builtin eval "$__dsh_s"; builtin unset __dsh_s; "#,
        r#"builtin trap 'builtin set +eu; builtin unset IFS; "#,
    ));
    out.push_str(dump);
    out.push_str(r#" >&"$__dsh_p" 2>/dev/null' EXIT; "#);
    out.push_str(command);
    out
}

/// The snapshot evaluated before the command: the directory to return to (when the call names
/// no `workdir`), then, with `env`, the exports and the functions.
pub(crate) fn snapshot(state: &State, mode: Persist, return_to_cwd: bool) -> String {
    let mut out = String::new();
    if return_to_cwd && let Some(cwd) = &state.cwd {
        let dir = quote(cwd);
        out.push_str(&format!(
            "builtin cd -- {dir} 2>/dev/null || builtin printf '[persist: cannot return to %s; starting in %s]\\n' {dir} \"$PWD\" >&2\n"
        ));
    }
    if mode == Persist::Env {
        for (name, value) in &state.env {
            out.push_str(&format!("builtin export {name}={}\n", quote(value)));
        }
        out.push_str(&state.functions);
        out.push('\n');
    }
    out
}

/// Reads a state record list (the trap's output, or the stored state); `None` unless it is
/// complete and well formed. Variables that must not carry are dropped.
pub(crate) fn parse(bytes: &[u8], mode: Persist) -> Option<State> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut fields = text.split('\0');
    let mut state = State::default();
    let mut start = std::collections::HashMap::new();
    loop {
        match fields.next()? {
            "start" => {
                start.insert(fields.next()?, fields.next()?);
            }
            "cwd" => state.cwd = Some(fields.next()?.to_owned()).filter(|c| c.starts_with('/')),
            "env" => {
                let (name, value) = (fields.next()?, fields.next()?);
                if mode == Persist::Env && carries(name, value) && start.get(name) != Some(&value) {
                    state.env.push((name.to_owned(), value.to_owned()));
                }
            }
            "fn" => {
                let functions = fields.next()?;
                if mode == Persist::Env {
                    state.functions = functions.to_owned();
                }
            }
            "end" => return (fields.next() == Some("") && fields.next().is_none()).then_some(state),
            _ => return None,
        }
    }
}

/// The stored form of `state` (the same records the trap writes).
fn serialize(state: &State) -> Vec<u8> {
    let mut out = String::new();
    if let Some(cwd) = &state.cwd {
        out.push_str(&format!("cwd\0{cwd}\0"));
    }
    for (name, value) in &state.env {
        out.push_str(&format!("env\0{name}\0{value}\0"));
    }
    out.push_str(&format!("fn\0{}\0end\0", state.functions));
    out.into_bytes()
}

/// The session's stored state (empty when there is none or it cannot be read).
fn load(path: &Path, mode: Persist) -> State {
    std::fs::read(path).ok().and_then(|bytes| parse(&bytes, mode)).unwrap_or_default()
}

fn store(path: &Path, state: &State) -> std::io::Result<()> {
    let dir = path.parent().ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let mut temp = tempfile::Builder::new().prefix(".state-").tempfile_in(dir)?;
    temp.write_all(&serialize(state))?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The directory a call of `session` would return to (the stored state's), without changing
/// anything; `None` when there is none or the call resets the state.
pub(crate) fn stored_cwd(dsh_home: &Path, session: &str, reset: bool) -> Option<String> {
    if reset {
        return None;
    }
    load(&state_path(dsh_home, session), Persist::Cwd).cwd
}

/// `state` with what a call that started without it handed back (`ended`) laid over: the
/// directory it ended in, its exports replacing those of the same name, its functions
/// defined after the earlier ones.
fn overlay(mut state: State, ended: State) -> State {
    if ended.cwd.is_some() {
        state.cwd = ended.cwd;
    }
    for (name, value) in ended.env {
        match state.env.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => state.env.push((name, value)),
        }
    }
    if !ended.functions.is_empty() {
        if !state.functions.is_empty() {
            state.functions.push('\n');
        }
        state.functions.push_str(&ended.functions);
    }
    state
}

impl Call {
    /// Prepares a call of `session` (whose harness home is `dsh_home`): forgets the stored state
    /// first when `reset`, writes the snapshot to a nameless file, and wraps `command`.
    /// Returns the wrapped command and the file to share. Without `carry_env` (an escalated
    /// call) the snapshot holds the directory only, never the stored variables and functions,
    /// and what the call hands back is laid over the stored state.
    pub(crate) fn prepare(
        mode: Persist,
        dsh_home: &Path,
        session: &str,
        reset: bool,
        return_to_cwd: bool,
        carry_env: bool,
        command: &str,
    ) -> std::io::Result<(Self, String, SharedFile)> {
        let path = state_path(dsh_home, session);
        if reset {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let state = load(&path, mode);
        let dir = path.parent().ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        // Nameless (`O_TMPFILE`, else unlinked at once; mode 0600): only this command's
        // descriptor reaches it.
        let mut file = tempfile::tempfile_in(dir)?;
        let carried = if carry_env { mode } else { Persist::Cwd };
        let snapshot = snapshot(&state, carried, return_to_cwd);
        file.write_all(snapshot.as_bytes())?;
        file.seek(SeekFrom::Start(0))?;
        let file = Arc::new(file);
        let shared = SharedFile { file: Arc::clone(&file), env: FD_ENV.to_owned() };
        let returns_to = state.cwd.clone().filter(|_| return_to_cwd);
        let base = (carried != mode).then_some(state);
        let call = Call { file, offset: snapshot.len() as u64, path, mode, returns_to, base };
        Ok((call, wrap(command, mode), shared))
    }

    /// The directory the call's snapshot returns to, when it returns to one.
    pub(crate) fn returns_to(&self) -> Option<String> {
        self.returns_to.clone()
    }

    /// After the command ended: stores the state its shell wrote, when it wrote a complete one
    /// (a command killed before its trap ran, or that replaced the trap, keeps the old state).
    pub(crate) fn finish(self) {
        let mut bytes = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut at = self.offset;
        loop {
            match self.file.read_at(&mut buf, at) {
                Ok(0) => break,
                Ok(n) => {
                    bytes.extend_from_slice(&buf[..n]);
                    at += n as u64;
                    if at - self.offset > STATE_CAP {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
        // A save that fails only means the next call starts from the previous state.
        if let Some(state) = parse(&bytes, self.mode) {
            let state = match self.base {
                Some(base) => overlay(base, state),
                None => state,
            };
            let _ = store(&self.path, &state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_filter_names() {
        let dump = "start\0PATH\0/bin\0start\0B\0same\0cwd\0/w/sub\0env\0B\0same\0env\0PATH\0/v:/bin\0env\0A\0x'y\0env\0DSH_HOME\0/h\0env\0GITHUB_TOKEN\0t\0env\0PWD\0/w\0env\0bad-name\0v\0fn\0f () \n{ \n    echo hi\n}\0end\0";
        let state = parse(dump.as_bytes(), Persist::Env).expect("well formed");
        assert_eq!(state.cwd.as_deref(), Some("/w/sub"));
        assert_eq!(
            state.env,
            vec![("PATH".to_owned(), "/v:/bin".to_owned()), ("A".to_owned(), "x'y".to_owned())]
        );
        assert_eq!(state.functions, "f () \n{ \n    echo hi\n}");
        assert_eq!(parse(&serialize(&state), Persist::Env), Some(state.clone()));
        let cwd_only = parse(dump.as_bytes(), Persist::Cwd).expect("well formed");
        assert_eq!(cwd_only, State { cwd: Some("/w/sub".into()), ..State::default() });
        // Incomplete (killed mid-write) or trailing junk: not a state.
        assert_eq!(parse(&dump.as_bytes()[..dump.len() - 4], Persist::Env), None);
        assert_eq!(parse(format!("{dump}x").as_bytes(), Persist::Env), None);
        assert_eq!(parse(b"cwd\0relative\0end\0", Persist::Cwd), Some(State::default()));
    }

    #[test]
    fn the_description_sentence_it_replaces_is_there() {
        use crate::texts;
        assert!(texts::BASE_DESCRIPTION.contains(texts::NO_STATE_SENTENCE));
        for persist in [Persist::Cwd, Persist::Env] {
            let text = texts::description(true, false, persist);
            assert!(!text.contains(texts::NO_STATE_SENTENCE), "{text}");
        }
        assert_eq!(
            texts::description(true, false, Persist::None),
            texts::description(true, false, Persist::None)
        );
    }

    #[test]
    fn what_an_escalated_call_hands_back_is_laid_over_the_state() {
        let before = State {
            cwd: Some("/w".into()),
            env: vec![("A".into(), "1".into()), ("B".into(), "2".into())],
            functions: "f () \n{ \n    :\n}".into(),
        };
        let ended = State {
            cwd: Some("/w/sub".into()),
            env: vec![("B".into(), "3".into())],
            functions: "g () \n{ \n    :\n}".into(),
        };
        assert_eq!(
            overlay(before.clone(), ended),
            State {
                cwd: Some("/w/sub".into()),
                env: vec![("A".into(), "1".into()), ("B".into(), "3".into())],
                functions: "f () \n{ \n    :\n}\ng () \n{ \n    :\n}".into(),
            }
        );
        assert_eq!(overlay(before.clone(), State::default()), before);
    }

    #[test]
    fn snapshot_quotes_values() {
        let state = State {
            cwd: Some("/a b/it's".into()),
            env: vec![("A".into(), "$(x) 'q'".into())],
            functions: "f () \n{ \n    :\n}".into(),
        };
        assert_eq!(
            snapshot(&state, Persist::Env, true),
            "builtin cd -- '/a b/it'\\''s' 2>/dev/null || builtin printf '[persist: cannot return to %s; starting in %s]\\n' '/a b/it'\\''s' \"$PWD\" >&2\nbuiltin export A='$(x) '\\''q'\\'''\nf () \n{ \n    :\n}\n"
        );
        assert_eq!(snapshot(&state, Persist::Cwd, false), "");
    }
}
